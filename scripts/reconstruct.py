#!/usr/bin/env python
"""Reconstruction experiment of the learned-gridification paper (thesis sec. 4.4.1).

Random point clouds (N points ~ U([-1,1]^3), a scalar feature ~ U(-1,1) per point) are gridified
onto an R^3 grid with C channels and de-gridified straight back (nothing in between); the model
is trained to reproduce the features. Sweeps R and C and writes

    <out>/reconstruction.csv, <out>/reconstruction.json, <out>/reconstruction.png

with the validation MSE per (R, C). The error should fall as R and C grow.

    python scripts/reconstruct.py                      # full 4 x 3 sweep (30-60 min on 2 CPU cores)
    python scripts/reconstruct.py --quick              # a 2 x 2 sweep in a few minutes
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from gridify import _cliargs as types
from gridify._files import atomic_write_bytes, atomic_write_text

PROG = "reconstruct.py"
OUT_FILES = ("reconstruction.csv", "reconstruction.json", "reconstruction.png")

try:
    from tqdm.auto import tqdm
except ImportError:  # pragma: no cover - tqdm is a dev/scripts dependency

    def tqdm(it=None, **kw):
        return it


torch: Any = None  # PyTorch and gridify are imported by main() after --help and argument errors
gridify: Any = None


def _import_heavy() -> None:
    """Bind ``torch`` and ``gridify`` (5-7 s of imports) once the arguments are known to be good."""
    global torch, gridify
    import torch  # noqa: PLC0415
    import gridify  # noqa: PLC0415


def Reconstructor(
    channels: int, resolution: int, k: int, omega0: float, hidden: int | None, message: str, aggr: str
) -> Any:
    """gridify -> degridify, nothing in between (a ``torch.nn.Module``)."""
    from gridify.nn import Degridification, Gridification  # noqa: PLC0415

    class _Reconstructor(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gridify = Gridification(
                1, channels, resolution, k=k, hidden_channels=hidden, omega0=omega0, message=message, aggr=aggr
            )
            self.degridify = Degridification(
                channels, 1, hidden_channels=hidden, omega0=omega0, message=message, aggr=aggr
            )

        def forward(self, pos, x):
            grid, graph = self.gridify(pos, x, return_graph=True)
            return self.degridify(grid, graph)

    return _Reconstructor()


def make_data(n_clouds: int, n_points: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n_clouds, n_points, 3, generator=g) * 2 - 1
    feat = torch.rand(n_clouds, n_points, 1, generator=g) * 2 - 1
    return pos, feat


def evaluate(model, pos, feat, batch_size):
    model.eval()
    total = 0.0
    with torch.no_grad():
        for s in range(0, pos.size(0), batch_size):
            pred = model(pos[s : s + batch_size], feat[s : s + batch_size])
            total += float(((pred - feat[s : s + batch_size]) ** 2).sum())
    return total / feat.numel()


def run_one(R, C, args, train, val, bar):
    torch.manual_seed(args.seed)
    model = Reconstructor(C, R, args.k, args.omega0, max(args.hidden, C), args.message, args.aggr)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    steps_per_epoch = math.ceil(train[0].size(0) / args.batch_size)
    total = steps_per_epoch * args.epochs
    warm = max(1, int(0.05 * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total)))
    )
    g = torch.Generator().manual_seed(args.seed)
    t0 = time.time()
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(train[0].size(0), generator=g)
        for s in range(0, perm.numel(), args.batch_size):
            idx = perm[s : s + args.batch_size]
            pred = model(train[0][idx], train[1][idx])
            loss = ((pred - train[1][idx]) ** 2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            bar.set_postfix(R=R, C=C, epoch=epoch + 1, loss=f"{loss.item():.4f}")
            bar.update(1)
    train_time = time.time() - t0
    return {
        "resolution": R,
        "channels": C,
        "grid_nodes": R**3,
        "val_mse": evaluate(model, *val, args.batch_size),
        "train_mse": evaluate(model, train[0][:200], train[1][:200], args.batch_size),
        "params": sum(p.numel() for p in model.parameters()),
        "train_seconds": round(train_time, 1),
    }


def plot(rows, baseline, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Rs = sorted({r["resolution"] for r in rows})
    Cs = sorted({r["channels"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for C in Cs:
        pts = sorted((r["resolution"], r["val_mse"]) for r in rows if r["channels"] == C)
        axes[0].plot(*zip(*pts), marker="o", label=f"C={C}")
    for R in Rs:
        pts = sorted((r["channels"], r["val_mse"]) for r in rows if r["resolution"] == R)
        axes[1].plot(*zip(*pts), marker="o", label=f"R={R}")
    for ax, xl in zip(axes, ("grid resolution R", "grid channels C")):
        ax.axhline(baseline, color="grey", ls="--", lw=1, label="predict 0 (variance)")
        ax.set_xlabel(xl)
        ax.set_ylabel("validation MSE")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[1].set_xscale("log", base=2)
    fig.suptitle("Reconstruction through gridify -> degridify (N=%d)" % rows[0].get("num_points", 0))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def build_parser() -> argparse.ArgumentParser:
    p = types.Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    count = types.positive_int
    p.add_argument("--resolutions", type=types.int_range(2), nargs="+", default=[3, 5, 7, 9])
    p.add_argument("--channels", type=count, nargs="+", default=[1, 8, 32])
    p.add_argument("--num-points", type=count, default=1000)
    p.add_argument("--train", type=count, default=800)
    p.add_argument("--val", type=count, default=200)
    p.add_argument("--epochs", type=count, default=8)
    p.add_argument("--batch-size", type=count, default=16)
    p.add_argument("--lr", type=types.positive_float, default=1e-2)
    p.add_argument("--k", type=count, default=9)
    p.add_argument("--omega0", type=types.positive_float, default=1.0)
    p.add_argument(
        "--hidden",
        type=count,
        default=16,
        help="width of the (de)gridification MLPs (at least C: max(hidden, C) is used)",
    )
    p.add_argument("--message", choices=["product", "concat"], default="product")
    p.add_argument("--aggr", choices=["mean", "max", "sum"], default="mean")
    p.add_argument("--seed", type=types.nonnegative_int, default=0)
    p.add_argument(
        "--threads", type=types.int_range(0, types.MAX_THREADS), default=0, help="torch threads (0: leave the default)"
    )
    p.add_argument(
        "--out",
        type=types.output_dir_of(files=OUT_FILES),
        default="outputs/reconstruction",
        help="output folder (default outputs/reconstruction)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small sweep for a demo: R in {3, 7}, C in {1, 16}, 200/50 clouds, 8 epochs",
    )
    return p


@types.script_errors(PROG)
def main(argv=None):
    args = build_parser().parse_args(argv)
    args.out = Path(args.out)
    if args.quick:
        args.resolutions, args.channels = [3, 7], [1, 16]
        args.train, args.val, args.epochs = 200, 50, 8
    _import_heavy()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:  # every configuration of the sweep is built before the first trains (a setting one cannot take)
        for R in args.resolutions:
            for C in args.channels:
                Reconstructor(C, R, args.k, args.omega0, max(args.hidden, C), args.message, args.aggr)
    except ValueError as exc:
        raise types.ScriptError(str(exc)) from None

    pos, feat = make_data(args.train + args.val, args.num_points, args.seed)
    train = (pos[: args.train], feat[: args.train])
    val = (pos[args.train :], feat[args.train :])
    baseline = float((val[1] ** 2).mean())  # MSE of always predicting 0 (~1/3)

    configs = [(R, C) for R in args.resolutions for C in args.channels]
    steps = len(configs) * args.epochs * math.ceil(args.train / args.batch_size)
    rows = []
    csv_path, json_path = args.out / "reconstruction.csv", args.out / "reconstruction.json"
    with tqdm(total=steps, desc="reconstruction sweep", unit="step", dynamic_ncols=True) as bar:
        for R, C in configs:
            row = run_one(R, C, args, train, val, bar)
            row["num_points"] = args.num_points
            rows.append(row)
            # written (atomically) after every configuration so an interrupted sweep keeps what it finished
            table = io.StringIO()
            w = csv.DictWriter(table, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
            atomic_write_text(csv_path, table.getvalue())
            meta = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
            atomic_write_text(
                json_path,
                json.dumps(
                    {
                        "experiment": "gridify -> degridify reconstruction (thesis sec. 4.4.1)",
                        "gridify_version": gridify.__version__,
                        "torch": torch.__version__,
                        "machine": f"{platform.machine()} {os.cpu_count()} cpus, torch threads {torch.get_num_threads()}",
                        "baseline_mse_predict_zero": baseline,
                        "args": meta,
                        "results": rows,
                    },
                    indent=2,
                ),
            )
    plot(rows, baseline, args.out / "reconstruction.png")

    print(f"\nvalidation MSE (predicting 0 gives {baseline:.4f}); rows R, columns C")
    print("R \\ C " + "".join(f"{C:>10d}" for C in args.channels))
    for R in args.resolutions:
        line = "".join(
            f"{r['val_mse']:>10.4f}" for C in args.channels for r in rows if r["resolution"] == R and r["channels"] == C
        )
        print(f"{R:>5d} " + line)
    print(f"\nwrote {csv_path}, {json_path}, {args.out / 'reconstruction.png'}")
    return rows


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
