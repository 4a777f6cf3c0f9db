"""The node -> points search inside an exported scene file: brute force against buckets.

Exports one scene segmenter twice (``OnnxSegmenter.search`` ``"brute"``, every node-point distance;
``"bucketed"``, :func:`gridify.export.node_points_bucketed`), runs both files and the PyTorch model
on crops of a real LiDAR scan, and reports per-crop times (the median of ``--repeats`` after a warm-up:
:func:`gridify.bench.harness.time_repeats`), whether the files' labels equal PyTorch's, and a whole scan
through the bucketed file and through PyTorch (one run each, :func:`gridify.bench.harness.time_once`).
Prints a table and writes JSON.

    python scripts/bench_onnx_search.py --model semantickitti --scan path/to/000000.bin --out onnx_search.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple
from unittest import mock

from gridify import _cliargs as types
from gridify._files import atomic_write_text
from gridify.bench.harness import time_once, time_repeats
from gridify.runtime import cpu_model

torch: Any = None  # imported by main() after --help and argument errors

PROG = "bench_onnx_search.py"

#: the crop sizes timed (those the scan has points for); a scan needs at least the first
CROP_SIZES = (4096, 16384)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SCAN = (
    ROOT.parent / "shared/data/scans/mmdet3d_real_scans/tests/data/semantickitti/sequences/00/velodyne/000000.bin"
)


def export(model: Any, path: Path, search: str) -> float:
    """Export ``model`` with the given search (the bucketed one is the default for scene models)."""
    from gridify.export import exporter as E  # noqa: PLC0415 - export_onnx looks _folded_wrapper up here

    made = E._folded_wrapper

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        w = made(*args, **kwargs)
        w.search = search
        return w

    with mock.patch.object(E, "_folded_wrapper", wrapper):
        return time_once(lambda: E.export_onnx(model, path, verify=False))[1]


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = types.Parser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument(
        "--model",
        default="semantickitti",
        type=types.shipped_or_file,
        help="a shipped scene model's name or a checkpoint path",
    )
    p.add_argument("--scan", default=str(DEFAULT_SCAN), type=types.input_file, help="a LiDAR scan (.bin, .ply, ...)")
    p.add_argument(
        "--columns",
        nargs="+",
        metavar="NAME",
        help="the meaning of each column of a text or .npy scan, e.g. --columns x y z intensity",
    )
    p.add_argument("--threads", type=types.threads, default=2, help="torch and onnxruntime threads")
    p.add_argument(
        "--repeats", type=types.positive_int, default=3, help="timed runs per crop after one warm-up run (median)"
    )
    p.add_argument("--whole-scan", action="store_true", help="also time a whole scan (bucketed file, PyTorch)")
    p.add_argument("--out", type=types.output_file(), default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    args.scan = Path(args.scan)
    args.out = None if args.out is None else Path(args.out)
    return args


def load_inputs(args: argparse.Namespace) -> Tuple[Any, Any, Any, Any, Any]:
    """The checkpoint, its Predictor, the scan read with its fields, its points and the model's features of it;
    :class:`gridify._cliargs.ScriptError` naming ``--model`` (not a scene segmenter, unreadable) or ``--scan``
    (unreadable, without the features the model takes, fewer points than the smallest crop) before anything is
    exported or timed."""
    import gridify  # noqa: PLC0415
    from gridify.checkpoint import CheckpointError, checkpoint_file  # noqa: PLC0415
    from gridify.datasets.scene_base import cloud_scene_features  # noqa: PLC0415
    from gridify.export.exporter import require_export_dependencies  # noqa: PLC0415
    from gridify.io import read_scan  # noqa: PLC0415

    try:
        require_export_dependencies(PROG, verify=True)
    except ImportError as exc:
        raise types.ScriptError(str(exc)) from None
    try:
        checkpoint = checkpoint_file(args.model)
        predictor = gridify.load(checkpoint)
        if not predictor.whole_scenes:
            raise ValueError(f"a {predictor.task} model; this benchmark runs scene segmenters (e.g. semantickitti)")
        names = predictor.scene_features
    except (CheckpointError, ValueError) as exc:
        raise types.ScriptError(f"--model {args.model}: {exc}") from None
    options: Dict[str, Any] = {"columns": args.columns} if args.columns else {}
    try:
        cloud = read_scan(args.scan, **options)  # every per-point field the format holds (intensity)
        x = torch.from_numpy(cloud_scene_features(list(names), cloud, instead="")).float()
    except ValueError as exc:  # a reader's, a DatasetError (a feature the scan lacks)
        text = str(exc)
        raise types.ScriptError(text if str(args.scan) in text else f"--scan {args.scan}: {text}") from None
    pos = torch.from_numpy(cloud.points).float()
    if len(pos) < CROP_SIZES[0]:
        raise types.ScriptError(
            f"--scan {args.scan}: {len(pos)} points, fewer than the smallest crop timed ({CROP_SIZES[0]}); "
            f"give a whole scan"
        )
    return checkpoint, predictor, cloud, pos, x


def crop_of(pos: torch.Tensor, n: int) -> torch.Tensor:
    """The ``n`` points nearest (horizontally) to the scan's first point: one dense crop."""
    d = (pos[:, :2] - pos[0, :2]).norm(dim=1)
    return torch.sort(d, stable=True).indices[:n]


@types.script_errors(PROG)
def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    args = parse_args(argv)
    global torch
    import torch  # noqa: PLC0415 - heavy (5-7 s): after --help and argument errors

    from gridify import export as E  # noqa: PLC0415

    checkpoint, predictor, cloud, pos, x = load_inputs(args)
    torch.set_num_threads(args.threads)
    model = predictor.model
    model.train(False)  # inference mode
    searches = [m for m in model.modules() if hasattr(m, "knn_backend")]
    default_backends = [m.knn_backend for m in searches]

    def set_backends(torch_knn: bool) -> None:
        """The torch knn backend (the float arithmetic the files reproduce) or the model's own (timed)."""
        for m, own in zip(searches, default_backends):
            m.knn_backend = "torch" if torch_knn else own

    results: Dict[str, Any] = {
        "cpu": cpu_model() or "unknown CPU",
        "threads": args.threads,
        "model": args.model,
        "scan": str(args.scan),
    }
    rows: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for search in ("brute", "bucketed"):
            path = Path(tmp) / f"{search}.onnx"
            results[f"export_s_{search}"] = export(checkpoint, path, search)
            files[search] = E.OnnxSceneModel(path, threads=args.threads)
        runner = files["bucketed"]
        sizes = [s for s in CROP_SIZES if s <= len(pos)]
        for n in sizes:
            rows_n = crop_of(pos, n)
            p, f = pos[rows_n], x[rows_n]
            with torch.no_grad():
                set_backends(torch_knn=True)
                want = model(p, f if f.size(1) else None)
                set_backends(torch_knn=False)
                t_torch = time_repeats(lambda: model(p, f if f.size(1) else None), args.repeats)["seconds"]
            row = {"points": n, "torch_s": t_torch}
            for search, file in files.items():
                got = file(p, f)
                row[f"{search}_s"] = time_repeats(lambda: file(p, f), args.repeats)["seconds"]
                row[f"{search}_labels_equal"] = bool(torch.equal(got.argmax(1), want.argmax(1)))
                row[f"{search}_max_abs_diff"] = float((got - want).abs().max())
            rows.append(row)
        results["crops"] = rows
        if args.whole_scan:
            probs_file, results["scan_file_s"] = time_once(lambda: runner.predict(pos, x))
            probs_torch, results["scan_torch_s"] = time_once(lambda: predictor.predict(cloud).probabilities)
            results["scan_points"] = len(pos)
            results["scan_labels_equal_share"] = float((probs_file.argmax(1) == probs_torch.argmax(1)).double().mean())
    print(f"# {results['cpu']}, {args.threads} thread(s), model {args.model}, scan {args.scan.name}")
    print(
        "| points | PyTorch s | file brute s | file bucketed s | bucketed / PyTorch | brute / bucketed | labels equal |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['points']} | {r['torch_s']:.3f} | {r['brute_s']:.3f} | {r['bucketed_s']:.3f} | "
            f"{r['bucketed_s'] / r['torch_s']:.2f}x | {r['brute_s'] / r['bucketed_s']:.1f}x | "
            f"{r['brute_labels_equal'] and r['bucketed_labels_equal']} |"
        )
    if args.whole_scan:
        print(
            f"whole scan ({results['scan_points']} points): file {results['scan_file_s']:.2f} s, PyTorch "
            f"{results['scan_torch_s']:.2f} s, labels equal on {100 * results['scan_labels_equal_share']:.2f} %"
        )
    if args.out:
        atomic_write_text(args.out, json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
