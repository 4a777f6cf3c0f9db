#!/usr/bin/env python
"""Test accuracy against wall-clock training time, from the per-epoch checkpoints of training runs.

    python scripts/time_to_accuracy.py outputs/modelnet10_fast outputs/modelnet10_fast_seed1 --out outputs/tta

A run trained with ``trainer.checkpoint.keep_all: true`` keeps one checkpoint per epoch
(``checkpoints/epochNNN-stepNNNNNNN.ckpt``). Each is evaluated on the test split afterwards (so the
evaluation costs no training time, and nothing is selected on test); its time is the wall clock from
the run's start (``run_info.json``) to the checkpoint's write, less any time a resumed run spent
stopped. Writes ``time_to_accuracy.csv``, ``.json`` and ``.png`` (one curve per run, the 93 % line)
under ``--out``.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import re
import time
from pathlib import Path
from typing import Any, Dict, List

from gridify._files import atomic_write_bytes, atomic_write_text
from gridify.evaluation import main as evaluate


def training_minutes(run: Path, ckpts: List[Path]) -> Dict[Path, float]:
    """Minutes of training before each checkpoint was written. A run resumed after an interruption
    has several sessions (``run_info.json``): a checkpoint's time is the training time of the earlier
    sessions (each up to its last checkpoint; work after it was lost and is redone, so it counts
    once) plus the time since its own session started. Time spent stopped does not count."""
    info = json.loads((run / "run_info.json").read_text())
    sessions = info.get("sessions") or [{"started": info["started"]}]
    starts = sorted(time.mktime(time.strptime(s["started"], "%Y-%m-%d %H:%M:%S")) for s in sessions)
    mtime = {c: c.stat().st_mtime for c in ckpts}
    minutes, before = {}, 0.0
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else float("inf")
        inside = [c for c in ckpts if start <= mtime[c] < end]
        for c in inside:
            minutes[c] = (before + mtime[c] - start) / 60
        if inside:
            before += max(mtime[c] for c in inside) - start
    return minutes


def run_points(run: Path, votes: int, data_root: str | None) -> List[Dict[str, Any]]:
    ckpts = sorted((run / "checkpoints").glob("epoch*-step*.ckpt"))
    minutes = training_minutes(run, ckpts)
    points = []
    for ckpt in ckpts:
        epoch = int(re.search(r"epoch(\d+)", ckpt.name).group(1))
        argv = ["--ckpt", str(ckpt), "--votes", str(votes), "--no-progress",
                "--output", str(run / "time_to_accuracy" / f"{ckpt.stem}.votes{votes}.json")]
        report = evaluate(argv + (["--data-root", data_root] if data_root else []))
        points.append({"run": run.name, "epoch": epoch + 1, "minutes": minutes[ckpt],
                       "test_oa": report["metrics"]["oa"], "test_macc": report["metrics"]["macc"], "votes": votes})
    return points


def plot(points: List[Dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for run in sorted({p["run"] for p in points}):
        sel = sorted((p["minutes"], 100 * p["test_oa"]) for p in points if p["run"] == run)
        ax.plot([m for m, _ in sel], [a for _, a in sel], "o-", ms=3, label=run)
    ax.axhline(93.0, color="grey", ls="--", lw=0.8, label="93 %")
    ax.axvline(45.0, color="grey", ls=":", lw=0.8, label="45 min")
    ax.set_xlabel("wall-clock training time [min]")
    ax.set_ylabel("ModelNet10 test OA [%]")
    ax.set_ylim(80, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="output_dir of training runs with per-epoch checkpoints")
    p.add_argument("--votes", type=int, default=1, help="test-time voting views per cloud (default 1)")
    p.add_argument("--data-root", help="data root (default: the runs' own)")
    p.add_argument("--out", default="outputs/time_to_accuracy")
    args = p.parse_args()
    points = [pt for run in args.runs for pt in run_points(Path(run), args.votes, args.data_root)]
    out = Path(args.out)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(points[0]))
    w.writeheader()
    w.writerows(points)
    atomic_write_text(out / "time_to_accuracy.csv", buf.getvalue())
    atomic_write_text(out / "time_to_accuracy.json", json.dumps(points, indent=1))
    plot(points, out / "time_to_accuracy.png")
    for pt in points:
        print(f"{pt['run']} epoch {pt['epoch']:3d} {pt['minutes']:6.1f} min  test OA {100 * pt['test_oa']:.2f} %")
    print(f"wrote {out}/time_to_accuracy.{{csv,json,png}}")


if __name__ == "__main__":
    main()
