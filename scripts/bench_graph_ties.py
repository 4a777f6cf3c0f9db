#!/usr/bin/env python
"""Graph building on clouds with duplicated points: the bilateral kNN graph per kNN backend.

    python scripts/bench_graph_ties.py --data ../shared/data/modelnet40_train_fp16 --out outputs/graph_ties

Duplicates are made the way ``RandomPointDropout`` makes them: a fraction ``f`` of each cloud's
points is replaced by copies of the kept ones. Every duplicate ties with its original at every
distance, so the k-th nearest point of many grid nodes is tied; kNN takes the tied neighbours of
lowest index (the contract every backend keeps). The table gives milliseconds per cloud of
:func:`gridify.nn.bilateral_knn` (``R`` = 9, ``k`` = 6, the ``fast`` preset's graph) for 32 clouds
of 1,024 points, the median of ``--repeats`` calls after a warm-up (:func:`gridify.bench.harness.time_repeats`),
and each row's ratio to the duplicate-free row.
Clouds: ``.npy`` files under ``--data`` (e.g. the ModelNet40 training split), else procedural shapes.
Writes ``graph_ties.json`` and ``graph_ties.csv`` under ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from gridify import _cliargs as types
from gridify.bench.harness import time_repeats

PROG = "bench_graph_ties.py"
OUT_FILES = ("graph_ties.json", "graph_ties.csv")

np: Any = None
torch: Any = None  # PyTorch and gridify: imported by main() after --help and argument errors
atomic_write_text: Any = None
cpu_model: Any = None
RegularGrid: Any = None
bilateral_knn: Any = None


def _import_heavy() -> None:
    """Bind the heavy imports (5-7 s) once the arguments are known to be good: ``--help`` stays instant."""
    global np, torch, atomic_write_text, cpu_model, RegularGrid, bilateral_knn
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415

    from gridify._files import atomic_write_text  # noqa: PLC0415
    from gridify.nn import RegularGrid, bilateral_knn  # noqa: PLC0415
    from gridify.runtime import cpu_model  # noqa: PLC0415


FRACTIONS = (0.0, 0.1, 0.2, 0.5)


def data_files(data: Optional[str]) -> List[Path]:
    """The ``.npy`` clouds under ``--data`` (none without it); :class:`gridify._cliargs.ScriptError` for a folder
    that holds none (it fell back to procedural shapes without a word)."""
    if not data:
        return []
    files = sorted(Path(data).rglob("*.npy"))
    if not files:
        raise types.ScriptError(f"--data {data}: no .npy cloud in it (leave --data out for procedural shapes)")
    return files


def read_cloud(path: Path, points: int) -> Any:
    """The first ``points`` rows of an ``[N, >= 3]`` ``.npy`` cloud as float32 ``x y z``; ScriptError naming the
    file for one that is not such an array (unreadable, another shape, NaN/Inf)."""
    from gridify.io.npy import read_npy_array  # noqa: PLC0415

    try:
        a = read_npy_array(path)  # never unpickled; a file that is not .npy is named
    except ValueError as exc:
        raise types.ScriptError(f"--data: {exc}") from None
    if a.ndim != 2 or a.shape[1] < 3 or a.shape[0] < 1 or not np.issubdtype(a.dtype, np.number):
        raise types.ScriptError(
            f"--data: {path}: a cloud must be an [N, >= 3] array of numbers (x y z first), got {a.dtype} {a.shape}"
        )
    a = a[:points, :3].astype(np.float32)
    if not np.isfinite(a).all():
        raise types.ScriptError(
            f"--data: {path}: holds NaN/Inf coordinates (row {int(np.nonzero(~np.isfinite(a))[0][0])})"
        )
    return torch.from_numpy(a)


def load_clouds(data: Optional[str], count: int, points: int) -> List[torch.Tensor]:
    """``count`` clouds of ``points`` points: every n-th ``.npy`` file under ``data``, or procedural shapes."""
    files = data_files(data)
    if files:
        step = max(1, len(files) // count)
        return [read_cloud(f, points) for f in files[::step][:count]]
    from gridify.datasets import ProceduralShapes

    ds = ProceduralShapes(split="train", num_points=points, num_samples_per_class=max(1, count // 8 + 1), seed=0)
    return [torch.as_tensor(ds[i]["pos"], dtype=torch.float32) for i in range(count)]


def duplicate(cloud: torch.Tensor, fraction: float, rng: np.random.Generator) -> torch.Tensor:
    """Replace ``floor(fraction * N)`` random points by copies of kept ones (RandomPointDropout's refill)."""
    n = cloud.size(0)
    dropped = int(fraction * n)
    index = np.arange(n)
    if dropped:
        drop = rng.choice(n, size=dropped, replace=False)
        keep = np.setdiff1d(index, drop, assume_unique=True)
        index[drop] = keep[rng.integers(0, len(keep), size=dropped)]
    return cloud[torch.from_numpy(index)]


def time_graph(pos: torch.Tensor, batch: torch.Tensor, grid: RegularGrid, k: int, backend: str, repeats: int) -> float:
    """Seconds of one :func:`gridify.nn.bilateral_knn` graph: the median of ``repeats`` calls after one untimed."""
    return time_repeats(lambda: bilateral_knn(pos, grid, k, batch, knn_backend=backend), repeats)["seconds"]


def run(args: argparse.Namespace, clouds: List[Any]) -> List[Dict[str, object]]:
    torch.set_num_threads(args.threads)
    grid = RegularGrid(args.resolution)
    rows: List[Dict[str, object]] = []
    base: Dict[str, float] = {}
    for fraction in FRACTIONS:
        rng = np.random.default_rng(args.seed)
        pos = torch.cat([duplicate(c, fraction, rng) for c in clouds])
        batch = torch.arange(len(clouds)).repeat_interleave(torch.tensor([c.size(0) for c in clouds]))
        for backend in args.backends:
            ms = time_graph(pos, batch, grid, args.k, backend, args.repeats) / len(clouds) * 1e3
            base.setdefault(backend, ms)
            rows.append(
                dict(
                    duplicates=fraction,
                    backend=backend,
                    ms_per_cloud=round(ms, 3),
                    ratio_to_no_duplicates=round(ms / base[backend], 3),
                )
            )
    return rows


def build_parser() -> argparse.ArgumentParser:
    p = types.Parser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument(
        "--data", type=types.input_dir, default=None, help="folder of .npy clouds (default: procedural shapes)"
    )
    p.add_argument("--clouds", type=types.positive_int, default=32)
    p.add_argument("--points", type=types.positive_int, default=1024)
    p.add_argument("--resolution", type=types.positive_int, default=9)
    p.add_argument("--k", type=types.positive_int, default=6)
    p.add_argument("--backends", nargs="+", default=["auto", "torch", "kdtree"])
    p.add_argument("--threads", type=types.threads, default=1)
    p.add_argument("--repeats", type=types.positive_int, default=5)
    p.add_argument("--seed", type=types.nonnegative_int, default=0)
    p.add_argument("--out", type=types.output_dir_of(files=OUT_FILES), default="outputs/graph_ties")
    return p


@types.script_errors(PROG)
def main(argv: Optional[Sequence[str]] = None) -> None:
    p = build_parser()
    args = p.parse_args(argv)
    _import_heavy()
    from gridify.ops.knn import BACKENDS, check_knn_backend  # noqa: PLC0415

    unknown = [b for b in args.backends if b not in BACKENDS]
    if unknown:
        p.error(f"--backends: unknown {' '.join(unknown)}; kNN backends: {', '.join(BACKENDS)}")
    for backend in args.backends:  # torch_cluster where it is not installed
        try:
            check_knn_backend("--backends", backend, torch.device("cpu"), "--backends")
        except ValueError as exc:
            p.error(str(exc))
    clouds = load_clouds(args.data, args.clouds, args.points)  # every file read before anything is measured
    out = Path(args.out)
    rows = run(args, clouds)
    print(
        f"bilateral kNN graph, R={args.resolution}, k={args.k}, {args.clouds} clouds x {args.points} points, "
        f"{args.threads} thread(s), {cpu_model()}, torch {torch.__version__}"
    )
    print(f"{'duplicates':>10} {'backend':>8} {'ms/cloud':>9} {'vs 0 %':>7}")
    for r in rows:
        print(
            f"{r['duplicates']:>10.0%} {r['backend']:>8} {r['ms_per_cloud']:>9.2f} {r['ratio_to_no_duplicates']:>7.2f}"
        )
    meta = dict(
        cpu=cpu_model(),
        torch=torch.__version__,
        threads=args.threads,
        clouds=args.clouds,
        points=args.points,
        resolution=args.resolution,
        k=args.k,
        data=args.data or "procedural",
    )
    atomic_write_text(out / "graph_ties.json", json.dumps(dict(meta=meta, rows=rows), indent=2))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(out / "graph_ties.csv", buf.getvalue())
    print(f"wrote {out / 'graph_ties.json'} and {out / 'graph_ties.csv'}")


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
