#!/usr/bin/env python
"""Leave-sequences-out cross-validation of a scene recipe: one fixed-schedule run per fold, each scored on
every point of its held-out sequences, with the mean and the spread over folds.

    python scripts/cross_validate.py --config semantickitti_mini --data-root ../shared/data/semantickitti_mini/dataset \
        --folds 00,01 02,03 04,05 06,07 09,10 --out outputs/cv_base trainer.max_epochs=16

Fold ``i`` trains on the sequences of every other fold (``data.sequences``) for the config's fixed schedule, without
validation during training, and keeps its last epoch (``trainer.test_ckpt: last``); nothing is chosen on the held-out
sequences. Its ``checkpoints/model.pt`` then labels every scan of the held-out sequences with ``gridify evaluate
--scan``, at the model's default whole-scan settings (what ``gridify predict`` does) or at ``--votes`` /
``--max-fragments``. Every point counts (the ignore label aside): per-class IoU = TP / (TP + FP + FN).

Written under ``--out``: ``fold<i>/`` (the run), ``fold<i>.json`` (its scores), and ``cv.json`` / ``cv.csv`` /
``cv.md``: per fold the mIoU over the classes present in its sequences, OA and the per-class IoU; their mean and
sample standard deviation over folds; and the pooled figure (the folds' confusion matrices summed: every scan
scored once, by the model that did not see it). The table is printed too.

Resumable: run the same command again after an interruption. A fold whose training finished is not trained again
(``fold<i>/cv_trained`` marks it), an unfinished one continues from its ``last.ckpt`` (``--resume auto``), and a
scored fold is not scored again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from gridify import _cliargs as types
from gridify._files import atomic_write_text

PROG = "cross_validate.py"
#: what --out holds besides the folds' runs and scores
OUT_FILES = ("cv.json", "cv.csv", "cv.md")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = types.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="the scene recipe (a shipped name or a YAML file)")
    p.add_argument(
        "--data-root",
        required=True,
        type=types.input_dir,
        help="the dataset root (SemanticKITTI: the folder holding sequences/)",
    )
    p.add_argument(
        "--folds", nargs="+", required=True, metavar="SEQS", help="one comma-separated group of sequences per fold"
    )
    p.add_argument(
        "--out",
        required=True,
        type=types.output_dir_of(files=OUT_FILES),
        help="folder of the folds' runs and the summary",
    )
    p.add_argument(
        "--votes", type=types.positive_int, default=None, help="scoring: views per scan (default: the model's)"
    )
    p.add_argument("--max-fragments", default=None, help="scoring: fragments per view (default: the model's)")
    p.add_argument(
        "--threads",
        type=types.int_range(1, types.MAX_THREADS),
        default=None,
        help="torch threads of the scoring (default: torch's)",
    )
    p.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides of every fold's run")
    args = p.parse_args(argv)
    # overrides written right after --folds are read into it by argparse: they hold '=' and a sequence does not
    args.overrides = [f for f in args.folds if "=" in f] + args.overrides
    args.folds = [[s.strip() for s in f.split(",") if s.strip()] for f in args.folds if "=" not in f]
    if len(args.folds) < 2 or any(not f for f in args.folds):
        p.error(f"--folds: give at least two non-empty groups of sequences, got {args.folds}")
    seen: Dict[str, int] = {}
    for i, fold in enumerate(args.folds):
        for s in fold:
            if s in seen:
                p.error(f"--folds: sequence {s} is in fold {seen[s]} and fold {i}: every sequence is validated once")
            seen[s] = i
    for o in args.overrides:
        if "=" not in o:
            p.error(f"override {o!r}: expected section.key=value")
        if o.split("=", 1)[0].strip() in ("output_dir", "data.sequences", "data.val", "data.test", "data.root"):
            p.error(f"override {o!r}: the folds set {o.split('=', 1)[0]} themselves")
    if args.max_fragments is not None and args.max_fragments != "all":
        try:
            if int(args.max_fragments) < 1:
                raise ValueError
        except ValueError:
            p.error(f"--max-fragments: a whole number >= 1 or 'all', got {args.max_fragments!r}")
    return args


def gridify_command() -> List[str]:
    """The ``gridify`` command of this interpreter's environment."""
    beside = Path(sys.executable).with_name("gridify")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("gridify")
    if found is None:
        raise types.ScriptError("the gridify command is not on PATH (pip install -e . in this environment)", status=1)
    return [found]


def run(cmd: List[str]) -> None:
    print("[cv] $ " + " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if rc != 0:
        raise types.ScriptError(f"the command above ended with exit status {rc}; rerun this script to resume", status=1)


def train_fold(args: argparse.Namespace, i: int, out: Path) -> Path:
    """Train fold ``i`` (or continue it); its ``model.pt``."""
    run_dir = out / f"fold{i}"
    model = run_dir / "checkpoints" / "model.pt"
    if (run_dir / "cv_trained").is_file() and model.is_file():
        print(f"[cv] fold {i}: trained ({run_dir})", flush=True)
        return model
    held = args.folds[i]
    train = [s for j, f in enumerate(args.folds) if j != i for s in f]
    cmd = gridify_command() + ["train", "--config", args.config, "--data-root", args.data_root, "--resume", "auto"]
    cmd += [
        f"output_dir={run_dir}",
        f"data.sequences={json.dumps(train)}",
        f"data.val={{sequences: {json.dumps(held)}}}",
        f"data.test={{sequences: {json.dumps(held)}}}",
        "trainer.limit_val_batches=0",
        "trainer.limit_test_batches=0",
        "trainer.test_ckpt=last",
        *args.overrides,
    ]
    run(cmd)
    atomic_write_text(run_dir / "cv_trained", json.dumps({"train": train, "held_out": held}) + "\n")
    return model


def score_fold(args: argparse.Namespace, i: int, model: Path, out: Path) -> Dict[str, Any]:
    """Score fold ``i``'s model on every scan of its held-out sequences (``gridify evaluate --scan``)."""
    report = out / f"fold{i}.json"
    if not report.is_file():
        scans = [str(Path(args.data_root) / "sequences" / s / "velodyne") for s in args.folds[i]]
        cmd = gridify_command() + ["evaluate", "--ckpt", str(model), "--scan", *scans, "--output", str(report)]
        cmd += ["--no-progress"] + ([] if args.votes is None else ["--votes", str(args.votes)])
        cmd += [] if args.max_fragments is None else ["--max-fragments", str(args.max_fragments)]
        cmd += [] if args.threads is None else ["--threads", str(args.threads)]
        run(cmd)
    return types.read_json_object(report, "'metrics', 'iou' and 'confusion'", hint=f"delete it to score fold {i} again")


def iou_of(confusion: List[List[float]]) -> List[Optional[float]]:
    """Per-class IoU of a confusion matrix (rows: truth), None for a class absent from truth and prediction."""
    k = len(confusion)
    ious: List[Optional[float]] = []
    for c in range(k):
        tp = confusion[c][c]
        fn = sum(confusion[c]) - tp
        fp = sum(confusion[r][c] for r in range(k)) - tp
        ious.append(None if tp + fn == 0 else tp / (tp + fp + fn))
    return ious


def mean_std(values: Sequence[float]) -> Dict[str, Optional[float]]:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"mean": None, "std": None, "n": 0}
    m = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
    return {"mean": m, "std": sd, "n": len(vals)}


def summarize(args: argparse.Namespace, reports: List[Dict[str, Any]]) -> Dict[str, Any]:
    names = reports[0]["class_names"]
    k = len(names)
    pooled = [[0.0] * k for _ in range(k)]
    for r in reports:
        for a in range(k):
            for b in range(k):
                pooled[a][b] += r["confusion"][a][b]
    pooled_iou = iou_of(pooled)
    present = [v for v in pooled_iou if v is not None]
    total = sum(map(sum, pooled))
    folds = [
        {
            "fold": i,
            "held_out": args.folds[i],
            "miou": r["metrics"]["miou"],
            "oa": r["metrics"]["oa"],
            "iou": r["iou"],
            "votes": r.get("votes"),
            "max_fragments": r.get("max_fragments"),
        }
        for i, r in enumerate(reports)
    ]
    return {
        "config": args.config,
        "overrides": args.overrides,
        "folds": folds,
        "miou": mean_std([f["miou"] for f in folds]),
        "oa": mean_std([f["oa"] for f in folds]),
        "per_class": {n: mean_std([f["iou"].get(n) for f in folds]) for n in names},
        "pooled": {
            "miou": sum(present) / len(present),
            "oa": sum(pooled[c][c] for c in range(k)) / total,
            "iou": dict(zip(names, pooled_iou)),
        },
        "class_names": names,
    }


def _pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def markdown(summary: Dict[str, Any]) -> str:
    names = summary["class_names"]
    head = "| fold | held out | mIoU | OA | " + " | ".join(names) + " |"
    rows = [head, "|" + "---|" * (4 + len(names))]
    for f in summary["folds"]:
        cells = [str(f["fold"]), " ".join(f["held_out"]), _pct(f["miou"]), _pct(f["oa"])]
        rows.append("| " + " | ".join(cells + [_pct(f["iou"].get(n)) for n in names]) + " |")
    m, o = summary["miou"], summary["oa"]
    ms = f"{_pct(m['mean'])} +- {_pct(m['std'])}"
    per = [_pct(summary["per_class"][n]["mean"]) for n in names]
    rows.append("| mean +- sd | | " + ms + " | " + _pct(o["mean"]) + " | " + " | ".join(per) + " |")
    pooled = summary["pooled"]
    pooled_cells = [_pct(pooled["iou"][n]) for n in names]
    rows.append(
        "| pooled | all | "
        + _pct(pooled["miou"])
        + " | "
        + _pct(pooled["oa"])
        + " | "
        + " | ".join(pooled_cells)
        + " |"
    )
    return "\n".join(rows) + "\n"


def write_summary(out: Path, summary: Dict[str, Any]) -> None:
    atomic_write_text(out / "cv.json", json.dumps(summary, indent=2) + "\n")
    names = summary["class_names"]
    lines = ["fold,held_out,miou,oa," + ",".join(names)]
    for f in summary["folds"]:
        vals = [f["iou"].get(n) for n in names]
        lines.append(
            ",".join([str(f["fold"]), " ".join(f["held_out"]), f"{f['miou']:.6f}", f"{f['oa']:.6f}"])
            + ","
            + ",".join("" if v is None else f"{v:.6f}" for v in vals)
        )
    atomic_write_text(out / "cv.csv", "\n".join(lines) + "\n")
    atomic_write_text(out / "cv.md", markdown(summary))


@types.script_errors(PROG)
def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    args = parse_args(argv)
    root = Path(args.data_root)
    missing = [s for f in args.folds for s in f if not (root / "sequences" / s / "velodyne").is_dir()]
    if missing:
        raise types.ScriptError(f"--data-root {root}: no sequences/<NN>/velodyne for {', '.join(missing)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    reports = []
    for i in range(len(args.folds)):
        model = train_fold(args, i, out)
        reports.append(score_fold(args, i, model, out))
    summary = summarize(args, reports)
    write_summary(out, summary)
    print(markdown(summary), end="")
    m = summary["miou"]
    print(
        f"[cv] {len(reports)} folds: mIoU {_pct(m['mean'])} +- {_pct(m['std'])} % (mean +- sd over folds), "
        f"pooled {_pct(summary['pooled']['miou'])} %; {out / 'cv.md'}"
    )
    return summary


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
