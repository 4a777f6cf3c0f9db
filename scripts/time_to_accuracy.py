#!/usr/bin/env python
"""Accuracy (or mIoU) against wall-clock training time, from the per-epoch checkpoints of training runs.

    python scripts/time_to_accuracy.py outputs/modelnet10_fast outputs/modelnet10_fast_seed1 --out outputs/tta
    python scripts/time_to_accuracy.py outputs/kitti_gridified outputs/kitti_pointnet2 --split val --metric miou \
        --target none --out outputs/tta_kitti

A run trained with ``trainer.checkpoint.keep_all: true`` keeps one checkpoint per epoch
(``checkpoints/epochNNN-stepNNNNNNN.ckpt``, ``NNN`` the epoch it ends, counted from 1 as the run's log counts it).
Older runs (no ``epoch_base`` in their ``run_info.json``) named them from 0, and Lightning's default names
(``epoch=N-step=M.ckpt``) count from 0 too: both are read as such (:mod:`gridify.training.epochs`; a run begun by an
older gridify and resumed by a newer one is read session by session), so the ``epoch`` this script writes is
always counted from 1. Each is evaluated on the test split afterwards (so the
evaluation costs no training time, and nothing is selected on test); its time is the wall clock from
the run's start (``run_info.json``) to the checkpoint's write, less any time a resumed run spent
stopped. ``--split`` picks the split (``val`` for runs selected on nothing else, e.g. scenes whose
held-out sequence is the validation split) and ``--metric`` the score (``oa``, ``macc``, ``miou``, ...;
default: ``oa`` for classifiers, ``miou`` for scene segmenters). Writes ``time_to_accuracy.csv``,
``.json`` and ``.png`` (one curve per run, the ``--target`` line) under ``--out``. A run is its folder: two runs
of one name in different folders are two curves, labelled by as much of their paths as tells them apart
(``a/run``, ``b/run``); the same folder given twice is refused.

With ``--logged`` nothing is evaluated: the points are the validation scores the run logged while it trained
(``val_<metric>`` in ``csv/version_*/metrics.csv``, every ``trainer.check_val_every_n_epoch`` epochs) and their
time is the training time the run logged beside them (``train_seconds``: validation and time stopped excluded).
No per-epoch checkpoints are needed, and ``--split`` must be ``val``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from gridify import _cliargs as types
from gridify._files import atomic_write_bytes, atomic_write_text
from gridify._paths import check_output_dir

PROG = "time_to_accuracy.py"

#: the files written under --out
OUT_FILES = ("time_to_accuracy.csv", "time_to_accuracy.json", "time_to_accuracy.png", "time_to_accuracy_summary.json")

#: ``run_info.json``'s time stamps (``started`` of the run and of each session)
STARTED_FORMAT = "%Y-%m-%d %H:%M:%S"


def evaluate(argv: List[str]) -> Dict[str, Any]:
    """``gridify.evaluation.main(argv)``, imported on first use: it imports PyTorch, and ``--help`` should not wait."""
    from gridify.evaluation import main  # noqa: PLC0415

    return main(argv)


def session_starts(run: Path) -> List[float]:
    """The start times (seconds since the epoch) of the run's sessions, from its ``run_info.json`` (``started``,
    or ``sessions: [{started}, ...]`` of a resumed run), in order; :class:`gridify._cliargs.ScriptError` naming
    the file and what is wrong when it is not JSON or not of that shape."""
    path = run / "run_info.json"
    info = types.read_json_object(path, "'started'")
    sessions = info.get("sessions") or [{"started": info.get("started")}]
    if not isinstance(sessions, list) or not all(isinstance(x, dict) for x in sessions):
        raise types.ScriptError(f"{path}: 'sessions' must be a list of objects with 'started', got {sessions!r:.80}")
    starts = []
    for i, session in enumerate(sessions):
        text = session.get("started")
        try:
            starts.append(time.mktime(time.strptime(text, STARTED_FORMAT)))
        except (TypeError, ValueError, OverflowError):
            where = "'started'" if "sessions" not in info else f"'sessions'[{i}]['started']"
            raise types.ScriptError(
                f"{path}: {where} must be a time as YYYY-MM-DD HH:MM:SS, got {text!r:.40}"
            ) from None
    return sorted(starts)


def training_minutes(run: Path, ckpts: List[Path]) -> Dict[Path, float]:
    """Minutes of training before each checkpoint was written. A run resumed after an interruption
    has several sessions (``run_info.json``): a checkpoint's time is the training time of the earlier
    sessions (each up to its last checkpoint; work after it was lost and is redone, so it counts
    once) plus the time since its own session started. Time spent stopped does not count."""
    starts = session_starts(run)
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


def every_nth(ckpts: List[Path], every: int, epochs: Dict[Path, int] | None = None) -> List[Path]:
    """Every ``every``-th checkpoint by epoch (epochs ``every``, ``2 every``, ..., counted from 1), and always the
    last; ``epochs``: each checkpoint's epoch (:func:`checkpoint_epochs`)."""
    if every <= 1 or not ckpts:
        return ckpts
    epochs = epochs if epochs is not None else checkpoint_epochs(ckpts[0].parent.parent, ckpts)
    keep = [c for c in ckpts if epochs[c] % every == 0]
    return keep + [ckpts[-1]] if ckpts[-1] not in keep else keep


def _name_match(name: str) -> re.Match | None:
    """A per-epoch checkpoint's name (gridify's ``epochNNN-stepNNNNNNN.ckpt``, Lightning's ``epoch=N-step=M.ckpt``)."""
    from gridify.training.epochs import CHECKPOINT_EPOCH  # noqa: PLC0415 - the package imports PyTorch

    found = CHECKPOINT_EPOCH.match(name)
    return found if found and found.group("step") is not None and not name.startswith("best-") else None


def epoch_checkpoints(run: Path) -> List[Path]:
    """The run's per-epoch checkpoints in the order they were written (by step; gridify's names and Lightning's)."""
    found = [c for c in (run / "checkpoints").glob("epoch*.ckpt") if _name_match(c.name)]
    return sorted(found, key=lambda c: (int(_name_match(c.name).group("step")), c.name))


def checkpoint_epochs(run: Path, ckpts: List[Path]) -> Dict[Path, int]:
    """Each checkpoint's epoch, counted from 1: gridify's names read with the numbering of the session that wrote
    them (``run_info.json``: ``epoch_base``, 0 for runs written before it was recorded), Lightning's from 0."""
    from gridify.training.epochs import checkpoint_epoch, session_epoch_base  # noqa: PLC0415

    info = json.loads((run / "run_info.json").read_text())
    return {c: checkpoint_epoch(c.name, session_epoch_base(info, c.stat().st_mtime)) for c in ckpts}


def check_runs(runs: List[str], logged: bool = False) -> List[Path]:
    """Every run folder exists, is a folder, holds a readable ``run_info.json`` and per-epoch checkpoints (with
    ``logged``: logged validation scores and training times instead), and no folder is given twice; checked
    before anything is evaluated. :class:`gridify._cliargs.ScriptError` naming the first that does not."""
    out: List[Path] = []
    seen: Dict[Path, str] = {}
    for text in runs:
        run = Path(text)
        if not run.exists():
            raise types.ScriptError(f"{text}: no such run folder")
        if not run.is_dir():
            raise types.ScriptError(f"{text}: not a folder (give a run's output_dir)")
        if not (run / "run_info.json").is_file():
            raise types.ScriptError(f"{text}: no run_info.json: not the output_dir of gridify train")
        same = seen.setdefault(run.resolve(), text)
        if same != text or run in out:
            raise types.ScriptError(f"{text}: the run folder {same} is given twice; give each run once")
        session_starts(run)
        if logged:
            logged_rows(run)
        elif not epoch_checkpoints(run):
            raise types.ScriptError(
                f"{text}: no per-epoch checkpoints (checkpoints/epochNNN-stepNNNNNNN.ckpt); "
                f"train with trainer.checkpoint.keep_all: true"
            )
        out.append(run)
    return out


def run_labels(runs: List[Path]) -> Dict[Path, str]:
    """Each run's label in the curves and the tables: its folder's name, or as many of its last path parts as
    tell it apart from the other runs of that name (``a/run`` and ``b/run``)."""
    parts = {run: run.resolve().parts for run in runs}

    def tail(run: Path, n: int) -> str:
        return Path(*parts[run][-n:]).as_posix()

    labels = {}
    for run in runs:
        n = 1
        while n < len(parts[run]) and any(o != run and tail(o, n) == tail(run, n) for o in runs):
            n += 1
        labels[run] = tail(run, n)
    return labels


def _log_problem(run: Path) -> str:
    """Where the run's CSV logs stop being tables of numbers: ``FILE: line N, column C: 'x' is not a number``
    (or what could not be read), ``''`` when every cell is a number."""
    for f in sorted((run / "csv").glob("version_*/metrics.csv")):
        if not re.fullmatch(r"version_\d+", f.parent.name):
            return f"{f}: its folder {f.parent.name!r} is not version_N"
        try:
            with open(f, newline="", encoding="utf-8") as fh:
                for line, row in enumerate(csv.DictReader(fh), start=2):
                    for key, value in row.items():
                        if key is None or value is None:
                            return f"{f}: line {line}: another number of cells than the header has"
                        try:
                            float(value) if value != "" else None
                        except ValueError:
                            return f"{f}: line {line}, column {key}: {value!r:.40} is not a number"
        except (UnicodeDecodeError, csv.Error) as exc:
            return f"{f}: not a CSV table ({exc})"
    return ""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def logged_rows(run: Path) -> Dict[int, Dict[str, float]]:
    """The run's logged metrics by epoch (counted from 1, whichever numbering the logs were written with; a
    resumed run's later rows replace earlier ones), keeping
    the epochs with both a validation score and ``train_seconds``; :class:`gridify._cliargs.ScriptError` when there
    are none, or when a log is not a table of numbers (naming the file, the line and the column)."""
    from gridify.training import read_metric_logs

    problem = _log_problem(run)
    if problem:
        raise types.ScriptError(problem)
    by_epoch: Dict[int, Dict[str, float]] = {}
    for row in read_metric_logs(run / "csv"):
        if "epoch" in row:
            epoch = row["epoch"]
            if not (_finite(epoch) and epoch >= 0 and epoch == int(epoch)):
                raise types.ScriptError(f"{run / 'csv'}: a logged epoch is {epoch!r}, not a whole number >= 0")
            by_epoch.setdefault(int(epoch), {}).update(row)
    if not any("train_seconds" in r for r in by_epoch.values()):
        raise types.ScriptError(
            f"{run}: no train_seconds in its logs (csv/version_*/metrics.csv): trained by a gridify "
            "that did not log its training time; score per-epoch checkpoints instead (without --logged)"
        )
    kept = {e: r for e, r in by_epoch.items() if "train_seconds" in r and any(k.startswith("val_") for k in r)}
    if not kept:
        raise types.ScriptError(f"{run}: no logged validation (val_* in csv/version_*/metrics.csv)")
    for epoch, row in kept.items():
        bad = [k for k, v in row.items() if (k == "train_seconds" or k.startswith("val_")) and not _finite(v)]
        if bad or row["train_seconds"] < 0:
            key = bad[0] if bad else "train_seconds"
            raise types.ScriptError(
                f"{run / 'csv'}: epoch {epoch}: logged {key} = {row[key]!r}, not a finite number"
                + ("" if bad else " >= 0")
            )
    return kept


def logged_points(run: Path, metric: str | None = None, label: str | None = None) -> List[Dict[str, Any]]:
    """One point per logged validation of ``run``: its score and the training time logged with it."""
    points = []
    for epoch, row in sorted(logged_rows(run).items()):
        values = {k[4:]: v for k, v in row.items() if k.startswith("val_")}
        key = metric or ("miou" if "miou" in values else "oa")
        if key not in values:
            raise types.ScriptError(f"{run}: no logged val_{key}; it logged {sorted(values)}")
        points.append(curve_point(label or run.name, epoch, row["train_seconds"] / 60, "val", key, values, 1))
    return points


def curve_point(
    run: str, epoch: int, minutes: float, split: str, key: str, values: Dict[str, Any], votes: int
) -> Dict[str, Any]:
    """One row of the curve: the score ``key`` of ``values`` (the split's metrics) of the run labelled ``run``
    after ``minutes`` of training, at the end of ``epoch`` (counted from 1)."""
    return {
        "run": run,
        "epoch": int(epoch),
        "minutes": minutes,
        "split": split,
        "metric": key,
        "value": values[key],
        **{f"{split}_{k}": v for k, v in values.items() if isinstance(v, (int, float))},
        "votes": votes,
    }


def line_value(flag: str, text: str) -> float | None:
    """``--target`` / ``--minutes``: a finite number, or none/null/'' for no line."""
    if text.strip().lower() in ("none", "null", ""):
        return None
    try:
        value = float(text)
    except ValueError:
        raise types.ScriptError(f"{flag} must be a number or 'none', got {text!r}") from None
    if not math.isfinite(value):
        raise types.ScriptError(f"{flag} must be a finite number or 'none', got {text!r}")
    return value


def _score_file(run: Path, ckpt: Path, split: str, votes: int) -> Path:
    return run / "time_to_accuracy" / f"{ckpt.stem}.{split}.votes{votes}.json"


def _cached(path: Path, ckpt: Path) -> Dict[str, Any] | None:
    """The report scored before for ``ckpt`` (None: none newer than the checkpoint, or one that is not a JSON
    report with metrics, which is scored again and replaced)."""
    try:
        if not (path.is_file() and path.stat().st_mtime >= ckpt.stat().st_mtime):
            return None
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return report if isinstance(report, dict) and isinstance(report.get("metrics"), dict) else None


def check_score_folders(runs: List[Path], split: str, votes: int, every: int) -> None:
    """The folder ``<run>/time_to_accuracy`` where the scores of a run's checkpoints are kept can be written, for
    every run with a checkpoint not scored yet (before the first evaluation; PathError otherwise)."""
    for run in runs:
        todo = [
            c for c in every_nth(epoch_checkpoints(run), every) if _cached(_score_file(run, c, split, votes), c) is None
        ]
        if todo:
            check_output_dir(run / "time_to_accuracy", f"the scores of {run}")


def run_points(
    run: Path,
    votes: int,
    data_root: str | None,
    split: str = "test",
    metric: str | None = None,
    every: int = 1,
    label: str | None = None,
) -> List[Dict[str, Any]]:
    ckpts = epoch_checkpoints(run)
    minutes = training_minutes(run, ckpts)
    epochs = checkpoint_epochs(run, ckpts)
    points = []
    for ckpt in every_nth(ckpts, every, epochs):
        epoch = epochs[ckpt]
        out = _score_file(run, ckpt, split, votes)
        report = _cached(out, ckpt)  # scored before: reuse
        if report is None:
            argv = ["--ckpt", str(ckpt), "--votes", str(votes), "--no-progress", "--split", split, "--output", str(out)]
            report = evaluate(argv + (["--data-root", data_root] if data_root else []))
        values = report["metrics"]
        key = metric or ("miou" if "miou" in values else "oa")
        if key not in values:
            raise types.ScriptError(f"{ckpt}: no metric {key!r}; it reports {sorted(values)}", status=1)
        points.append(curve_point(label or run.name, epoch, minutes[ckpt], split, key, values, votes))
    return points


def plot(
    points: List[Dict[str, Any]],
    path: Path | None,
    target: float | None = 93.0,
    minutes: float | None = 45.0,
    label: str = "ModelNet10 test OA [%]",
) -> bytes:
    """The PNG of the curves (written to ``path`` unless it is None)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for run in sorted({p["run"] for p in points}):
        sel = sorted((p["minutes"], 100 * p["value"]) for p in points if p["run"] == run)
        ax.plot([m for m, _ in sel], [a for _, a in sel], "o-", ms=3, label=run)
    if target is not None:
        ax.axhline(target, color="grey", ls="--", lw=0.8, label=f"{target:g} %")
    if minutes is not None:
        ax.axvline(minutes, color="grey", ls=":", lw=0.8, label=f"{minutes:g} min")
    ax.set_xlabel("wall-clock training time [min]")
    ax.set_ylabel(label)
    if target is not None and target >= 90:
        ax.set_ylim(80, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    if path is not None:
        atomic_write_bytes(path, buf.getvalue())
    return buf.getvalue()


def build_parser() -> types.Parser:
    p = types.Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="output_dir of training runs with per-epoch checkpoints")
    p.add_argument("--votes", type=types.positive_int, default=1, help="test-time voting views per cloud (default 1)")
    p.add_argument("--data-root", type=types.input_dir, help="data root (default: the runs' own)")
    p.add_argument(
        "--split", default=None, choices=("test", "val", "train"), help="split scored (default test; val with --logged)"
    )
    p.add_argument("--metric", help="metric plotted (default: oa, or miou for scene segmenters)")
    p.add_argument("--target", default="93", help="a horizontal line at this value in %% ('none': no line)")
    p.add_argument("--minutes", default="45", help="a vertical line at this training time ('none': no line)")
    p.add_argument("--label", default=None, help="y-axis label")
    p.add_argument(
        "--every",
        type=types.positive_int,
        default=1,
        help="score every N-th epoch's checkpoint and the last (default 1: all)",
    )
    p.add_argument(
        "--logged",
        action="store_true",
        help="plot the validation scores logged during training against the logged training time (no evaluation)",
    )
    p.add_argument(
        "--out",
        default="outputs/time_to_accuracy",
        type=types.output_dir_of(files=OUT_FILES),
        help="folder for time_to_accuracy{.csv,.json,.png,_summary.json} (default outputs/time_to_accuracy)",
    )
    return p


@types.script_errors(PROG)
def main(argv: List[str] | None = None) -> None:
    p = build_parser()
    args = p.parse_args(argv)
    args.split = args.split or ("val" if args.logged else "test")
    if args.logged and args.split != "val":
        p.error(f"--logged plots the logged validation: give --split val (or leave it out), not {args.split!r}")
    if args.logged and args.votes != 1:
        p.error("--logged plots the logged validation as it ran: --votes does not apply")
    target = line_value("--target", args.target)  # checked before anything is evaluated
    minutes = line_value("--minutes", args.minutes)
    out = Path(args.out)
    runs = check_runs(args.runs, args.logged)
    labels = run_labels(runs)
    if args.logged:
        points = [pt for run in runs for pt in logged_points(run, args.metric, labels[run])]
    else:
        check_score_folders(runs, args.split, args.votes, args.every)
        points = [
            pt
            for run in runs
            for pt in run_points(run, args.votes, args.data_root, args.split, args.metric, args.every, labels[run])
        ]
    if not points:  # pragma: no cover - every run checked has a checkpoint or a logged validation
        raise types.ScriptError(f"no point to plot from {args.runs}", status=1)
    write_outputs(points, out, args, target, minutes)


def write_outputs(
    points: List[Dict[str, Any]], out: Path, args: Any, target: float | None, minutes: float | None
) -> None:
    """Print the curve and the summary and write the four files of ``--out``, all made before the first is
    written (nothing half-written when one cannot be made)."""
    key = points[0]["metric"]
    fields = list(dict.fromkeys(k for pt in points for k in pt))  # runs of two tasks log other metrics
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    w.writerows(points)
    label = args.label or (
        "ModelNet10 test OA [%]" if key == "oa" and args.split == "test" else f"{args.split} {key} [%]"
    )
    png = plot(points, None, target, minutes, label)
    summary = reach_summary(points)
    for pt in points:
        print(
            f"{pt['run']} epoch {pt['epoch']:3d} {pt['minutes']:6.1f} min  {args.split} {key} {100 * pt['value']:.2f} %"
        )
    atomic_write_text(out / "time_to_accuracy.csv", buf.getvalue())
    atomic_write_text(out / "time_to_accuracy.json", json.dumps(points, indent=1))
    atomic_write_bytes(out / "time_to_accuracy.png", png)
    atomic_write_text(out / "time_to_accuracy_summary.json", json.dumps(summary, indent=1))
    for s in summary:
        when = "never" if s["minutes"] is None else f"after {s['minutes']:.1f} min ({s['ratio']:.2f} of its time)"
        print(
            f"{s['run']} reaches {s['of']}'s final {key} {100 * s['target']:.2f} % {when}; "
            f"{s['run']} ends at {100 * s['final']:.2f} % after {s['run_minutes']:.1f} min"
        )
    print(f"wrote {out}/time_to_accuracy{{.csv,.json,.png,_summary.json}}")


def reach_summary(points: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """For each ordered pair of runs (a, b): the first training time at which ``a`` scores at least
    ``b``'s last score, and that time as a fraction of ``b``'s whole training time."""
    runs = sorted({p["run"] for p in points})
    curve = {r: sorted((p["minutes"], p["value"]) for p in points if p["run"] == r) for r in runs}
    out = []
    for a in runs:
        for b in runs:
            if a == b:
                continue
            target, b_minutes = curve[b][-1][1], curve[b][-1][0]
            hit = next((m for m, v in curve[a] if v >= target), None)
            out.append(
                {
                    "run": a,
                    "of": b,
                    "target": target,
                    "minutes": hit,
                    "ratio": None if hit is None or b_minutes <= 0 else hit / b_minutes,
                    "final": curve[a][-1][1],
                    "run_minutes": curve[a][-1][0],
                }
            )
    return out


if __name__ == "__main__":
    sys.exit(types.run_script(main, PROG))
