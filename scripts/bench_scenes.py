#!/usr/bin/env python
"""Speed and memory of scene segmentation at scene scale, in one run, on a named CPU.

The measurements live in :mod:`gridify.bench.scenes` (the three parts, each cell in a fresh child
process) and :mod:`gridify.bench.scenes_report` (tables, goals, results.json / results.csv /
bench_scenes.png); this script parses the arguments and calls them. What is measured and how: the
docstring of :mod:`gridify.bench.scenes`.

Usage:
    python scripts/bench_scenes.py                      # full run, 2 threads
    python scripts/bench_scenes.py --threads 1 --models scene_segmenter pointnet2_segmenter
    python scripts/bench_scenes.py --quick              # seconds: N = 2048, 4096; a ~20k tiled scene
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gridify.bench.scenes import (  # noqa: E402 - after the checkout is on the path
    DEFAULT_MODELS,
    DEFAULT_NUM_POINTS,
    QUICK_NUM_POINTS,
    base_scan,
    check_run,
    child_main,
    run,
    scene_cloud,
)
from gridify.bench.scenes_report import report, write_outputs  # noqa: E402
from gridify import _cliargs as types  # noqa: E402
from gridify._commands import REL_CI_HELP  # noqa: E402

PROG = "bench_scenes.py"
OUT_FILES = ("results.json", "results.csv", "bench_scenes.png")

__all__ = ["build_parser", "parse_args", "main", "base_scan", "scene_cloud"]


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python scripts/bench_scenes.py``."""
    p = types.Parser(
        prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--num-points",
        type=types.positive_int,
        nargs="+",
        default=None,
        help=f"cloud sizes N of the sweep (default {' '.join(map(str, DEFAULT_NUM_POINTS))}; "
        f"--quick: {' '.join(map(str, QUICK_NUM_POINTS))})",
    )
    p.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="registered models of the sweep")
    p.add_argument(
        "--parts",
        nargs="+",
        choices=("sweep", "scans", "e2e"),
        default=["sweep", "scans", "e2e"],
        help="which parts to run",
    )
    p.add_argument(
        "--repeats",
        type=types.positive_int,
        default=None,
        help="timed steps per cell after the warm-up at least (default 3; --quick: 1); more until --rel-ci or "
        "--time-budget",
    )
    p.add_argument("--rel-ci", type=types.rel_ci, default=0.05, help=REL_CI_HELP)
    p.add_argument(
        "--time-budget",
        type=types.positive_float,
        default=60.0,
        help="seconds of timed steps per sweep cell: no further repeat starts once the next would pass it "
        "(it caps the repeats beyond --repeats)",
    )
    p.add_argument("--threads", type=types.threads, default=2, help="torch.set_num_threads in every child")
    p.add_argument("--device", default="cpu", help="the sweep's device (cpu, cuda): a GPU's times beside the CPU's")
    p.add_argument(
        "--memory-limit-gb",
        type=types.positive_float,
        default=16.0,
        help="cells whose estimated or measured RSS passes this many GiB cannot run",
    )
    p.add_argument(
        "--max-step-seconds",
        type=types.positive_float,
        default=120.0,
        help="a sweep cell whose warm-up step takes longer cannot run",
    )
    p.add_argument(
        "--max-scene-seconds",
        type=types.positive_float,
        default=1800.0,
        help="wall-time limit of one scan / end-to-end child (after its setup allowance)",
    )
    p.add_argument(
        "--ckpt",
        type=types.input_file,
        default=None,
        help="scene segmenter checkpoint for the end-to-end part (default: an untrained one)",
    )
    p.add_argument(
        "--e2e-batch-size",
        type=types.positive_int,
        default=8,
        help="crops per forward pass in Predictor.predict (8: as `gridify predict`)",
    )
    p.add_argument(
        "--data-root",
        type=Path,
        default=Path(os.environ.get("GRIDIFY_SHARED_DATA") or ROOT.parent / "shared" / "data"),
        help="folder with semantickitti_mini/ and scans/ ($GRIDIFY_SHARED_DATA or ../shared/data)",
    )
    p.add_argument(
        "--source",
        choices=("auto", "kitti", "procedural", "random"),
        default="auto",
        help="sweep clouds: the KITTI scan when present (auto), a generated outdoor scan, or uniform random points",
    )
    p.add_argument(
        "--out",
        type=types.output_dir_of(files=OUT_FILES),
        default=str(ROOT / "outputs" / "bench_scenes"),
        help="folder for results.json, results.csv and bench_scenes.png",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: N = 2048 4096, 1 repeat (a 5 s budget), scans cropped to 4096 points, a ~20k tiled scene",
    )
    p.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell (JSON) and print its result
    return p


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The parsed and checked arguments (``--quick`` applied, paths resolved)."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.num_points is None:
        args.num_points = list(QUICK_NUM_POINTS if args.quick else DEFAULT_NUM_POINTS)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.quick:
        args.time_budget = min(args.time_budget, 5.0)
    args.out = Path(args.out)
    args.num_points = sorted(set(args.num_points))
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        p.error(f"--device must be cpu or cuda[:N], got {args.device!r}")
    if args.device != "cpu":
        import torch

        if not torch.cuda.is_available():
            p.error(f"--device {args.device}: torch sees no CUDA device here")
    args.data_root = args.data_root.expanduser().resolve()  # the children run in the repository root
    if args.ckpt is not None:
        args.ckpt = Path(args.ckpt).expanduser().resolve()
    return args


@types.script_errors(PROG)
def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Run the benchmark; print its report, write its files; the results."""
    args = parse_args(argv)
    if args.cell is not None:  # a measuring child, as python -m gridify.bench.scenes --cell JSON
        raise SystemExit(child_main(args.cell))
    check_run(args)
    results = run(args)
    print("\n".join(report(results, args)), flush=True)
    png = write_outputs(results, args.out)
    print(
        f"\nwrote {args.out / 'results.json'}, {args.out / 'results.csv'}"
        + (f", {png}" if png else " (no PNG: matplotlib missing or no sweep)")
        + f" in {results['wall_s']:.0f} s",
        flush=True,
    )
    return results


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
