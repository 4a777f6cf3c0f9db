#!/usr/bin/env python
"""Inference time of GridifiedClassifier with the ccnn, resnet and mrconv grid backbones.

Measures, for each variant, the median wall time of a forward pass (eval mode, no grad) of the
whole classifier (gridify -> backbone -> pool -> head) and of the backbone alone on its
``[B, C, R, R, R]`` input, after ``--warmup`` untimed ones (:func:`gridify.bench.harness.time_repeats`), on one
CPU thread by default. The ``mrconv`` model is
timed as trained (parallel branches + BatchNorms) and after
:func:`gridify.checkpoint.reparameterize_model` (one depthwise convolution per block); the
script checks that both give the same logits. Defaults: the ModelNet10-cpu configuration
(R=9, k=9, C=64, depth 2, kernel_size 5 for ccnn/resnet, 3 for mrconv = supports 3/5/9/17),
batch 32, N=1024 points, 3 input features, 10 classes.

    python scripts/bench_backbones.py                 # table + outputs/bench_backbones/results.json
    python scripts/bench_backbones.py --repeats 20 --fourier
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gridify import _cliargs as types  # noqa: E402 - after the checkout is on the path
from gridify._files import atomic_write_text  # noqa: E402
from gridify.bench.harness import time_repeats  # noqa: E402

PROG = "bench_backbones.py"

torch: Any = None  # PyTorch and gridify: imported by main() after --help and argument errors
reparameterize_model: Any = None
GridifiedClassifier: Any = None


def _import_heavy() -> None:
    """Bind the heavy imports (5-7 s) once the arguments are known to be good: ``--help`` stays instant."""
    global torch, reparameterize_model, GridifiedClassifier
    import torch  # noqa: PLC0415

    from gridify.checkpoint import reparameterize_model  # noqa: PLC0415
    from gridify.models import GridifiedClassifier  # noqa: PLC0415


def build(backbone: str, args: argparse.Namespace, **backbone_kwargs: Any) -> Any:
    torch.manual_seed(args.seed)
    kernel_size = args.mrconv_kernel_size if backbone == "mrconv" else args.kernel_size
    return GridifiedClassifier(
        in_channels=args.in_channels,
        num_classes=args.num_classes,
        resolution=args.resolution,
        k=args.k,
        hidden_channels=args.channels,
        backbone=backbone,
        depth=args.depth,
        kernel_size=kernel_size,
        dropout=0.1,
        backbone_kwargs=backbone_kwargs or None,
    )


def build_parser() -> argparse.ArgumentParser:
    p = types.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    count = types.positive_int
    p.add_argument("--batch-size", type=count, default=32)
    p.add_argument("--num-points", type=count, default=1024)
    p.add_argument("--in-channels", type=count, default=3)
    p.add_argument("--num-classes", type=count, default=10)
    p.add_argument("--resolution", type=count, default=9)
    p.add_argument("--k", type=count, default=9)
    p.add_argument("--channels", type=count, default=64)
    p.add_argument("--depth", type=count, default=2)
    p.add_argument("--kernel-size", type=count, default=5, help="ccnn / resnet kernel size")
    p.add_argument("--mrconv-kernel-size", type=count, default=3, help="mrconv first-branch support")
    p.add_argument("--num-branches", type=count, default=4)
    p.add_argument("--fourier", action="store_true", help="also time mrconv with Fourier kernels")
    p.add_argument("--warmup", type=count, default=3, help="untimed forward passes first (at least 1)")
    p.add_argument("--repeats", type=count, default=10)
    p.add_argument("--threads", type=types.threads, default=1)
    p.add_argument("--seed", type=types.nonnegative_int, default=0)
    p.add_argument(
        "--out",
        type=types.output_dir_of(files=("results.json",)),
        default=str(ROOT / "outputs" / "bench_backbones"),
        help="folder of results.json (default outputs/bench_backbones)",
    )
    return p


def build_variants(args: argparse.Namespace) -> List[tuple]:
    """``(name, model, backbone keywords)`` of every variant timed, built before any is timed: a setting a model
    cannot take is a :class:`gridify._cliargs.ScriptError` naming it, not an error after the first timings."""
    variants: List[tuple] = [
        ("ccnn", "ccnn", {}),
        ("resnet", "resnet", {}),
        ("mrconv", "mrconv", {"kernel_type": "dilated", "num_branches": args.num_branches}),
    ]
    if args.fourier:
        variants.append(("mrconv_fourier", "mrconv", {"kernel_type": "fourier", "num_branches": args.num_branches}))
    built = []
    for name, backbone, kw in variants:
        try:
            built.append((name, build(backbone, args, **kw), kw))
        except ValueError as exc:
            raise types.ScriptError(f"the {name} variant cannot be built with these settings: {exc}") from None
    return built


@types.script_errors(PROG)
def main(argv: List[str] | None = None) -> Dict[str, Any]:
    args = build_parser().parse_args(argv)
    args.out = Path(args.out)
    _import_heavy()
    built = build_variants(args)
    torch.set_num_threads(args.threads)

    g = torch.Generator().manual_seed(args.seed)
    pos = torch.rand(args.batch_size, args.num_points, 3, generator=g) * 2 - 1
    feats = (
        pos if args.in_channels == 3 else torch.randn(args.batch_size, args.num_points, args.in_channels, generator=g)
    )

    results: List[Dict[str, Any]] = []

    def measure(name: str, model: GridifiedClassifier, note: str = "") -> torch.Tensor:
        model.eval()
        with torch.no_grad():
            grid = model.grid_norm(model.gridify(pos, feats))
            logits = model(pos, feats)
            full = time_repeats(lambda: model(pos, feats), args.repeats, warmup=args.warmup)
            bb = time_repeats(lambda: model.backbone(grid), args.repeats, warmup=args.warmup)
        row = {
            "variant": name,
            "params": sum(q.numel() for q in model.parameters()),
            "model_ms": 1e3 * full["seconds"],
            "model_min_ms": 1e3 * full["min_s"],
            "backbone_ms": 1e3 * bb["seconds"],
            "backbone_min_ms": 1e3 * bb["min_s"],
            "note": note,
        }
        results.append(row)
        print(f"  {name:<22s} model {row['model_ms']:8.1f} ms   backbone {row['backbone_ms']:8.1f} ms", flush=True)
        return logits

    print(
        f"batch {args.batch_size}, N={args.num_points}, R={args.resolution}, C={args.channels}, "
        f"depth {args.depth}, {args.threads} thread(s), median of {args.repeats} after {args.warmup} warm-up",
        flush=True,
    )
    for name, model, kw in built:
        if not kw:
            measure(name, model, note=f"kernel_size {args.kernel_size}")
            continue
        model.train()
        with torch.no_grad():  # non-trivial BatchNorm statistics before folding
            for _ in range(2):
                model(pos, feats)
        ref = measure(name, model, note=f"{kw['kernel_type']}, {args.num_branches} branches, parallel")
        folded = copy.deepcopy(model)
        n = reparameterize_model(folded)
        out = measure(name + "_reparam", folded, note=f"{n} layers folded into one depthwise conv each")
        rel = ((out - ref).norm() / ref.norm()).item()
        results[-1]["logits_rel_err_vs_unfolded"] = rel
        print(f"  {'':<22s} folded vs unfolded logits: relative error {rel:.2e}", flush=True)

    print()
    print(f"| {'variant':<22s} | {'params':>8s} | {'model ms':>9s} | {'backbone ms':>11s} |")
    print(f"|{'-' * 24}|{'-' * 10}|{'-' * 11}|{'-' * 13}|")
    for r in results:
        print(f"| {r['variant']:<22s} | {r['params']:>8d} | {r['model_ms']:>9.1f} | {r['backbone_ms']:>11.1f} |")
    report = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "torch": torch.__version__,
        "machine": platform.platform(),
        "processor": platform.processor(),
        "results": results,
    }
    path = atomic_write_text(args.out / "results.json", json.dumps(report, indent=2))
    print(f"\nwrote {path}")
    return report


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
