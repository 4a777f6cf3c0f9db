"""Plots of a run: loss and validation curves from its logs, the test confusion matrix.

Matplotlib (Agg backend) is imported inside the plotting functions, so reading the logs
(:func:`read_metric_logs`, :func:`read_steps`) and importing this module need neither matplotlib nor a
display. The PNG files are written atomically (:func:`gridify._files.atomic_write`).

The per-step curves (the training loss in ``loss.png``, the learning rate in ``metrics.png``) are drawn
from every training step: ``csv/train_steps.csv`` (:data:`STEPS_FILE`, written by
:class:`~.callbacks.StepCurves`, whatever ``trainer.log_every_n_steps`` says), and from the CSV log's
``train_loss`` / ``lr-*`` rows for the steps it lacks (a run resumed from a checkpoint written before it
existed). The learning-rate panel also marks the rate at the end of every epoch (``lr_epoch``). The
validation curves' axis is the epoch counted from 1, as everywhere (:mod:`.epochs`; the logs of older runs,
counted from 0, are read right: :func:`read_metric_logs`). The confusion matrix is row-normalized: cell
``(i, j)`` is ``C_ij / sum_j C_ij``.

Shapes:
    confusion matrix ``[classes, classes]`` (rows: true class, columns: predicted class).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from gridify._files import atomic_write
from gridify.tasks import get_task

from .epochs import log_epoch_base, read_epoch

__all__ = [
    "STEPS_FILE",
    "STEP_COLUMNS",
    "steps_csv",
    "read_steps",
    "read_metric_logs",
    "plot_curves",
    "metrics_figure",
    "confusion_figure",
    "plot_confusion",
]

#: every training step's loss and learning rate, under the run's ``csv/`` folder (beside Lightning's ``version_*``)
STEPS_FILE = "train_steps.csv"
#: its columns: the 0-based optimizer-step index (the CSV log's step axis), the epoch (from 1), loss, rate
STEP_COLUMNS = ("step", "epoch", "train_loss", "lr")


def steps_csv(rows: Sequence[Sequence[float]]) -> str:
    """The text of :data:`STEPS_FILE` for ``rows`` of :data:`STEP_COLUMNS`."""
    lines = [",".join(STEP_COLUMNS)]
    lines += [f"{int(s)},{int(e)},{float(v)!r},{float(lr)!r}" for s, e, v, lr in rows]
    return "\n".join(lines) + "\n"


def read_steps(path: Path) -> List[Dict[str, float]]:
    """The rows of a :data:`STEPS_FILE` (``[]`` when there is none)."""
    try:
        with open(path, newline="") as fh:
            return [{k: float(v) for k, v in r.items() if k in STEP_COLUMNS and v} for r in csv.DictReader(fh)]
    except FileNotFoundError:
        return []


def read_metric_logs(csv_root: Path) -> List[Dict[str, float]]:
    """Rows of every ``csv/version_*/metrics.csv`` (resumed runs continue the step axis), their ``epoch``
    counted from 1 whichever numbering the folder was written with (:func:`~.epochs.log_epoch_base`)."""
    rows: List[Dict[str, float]] = []
    versions = sorted(csv_root.glob("version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[-1]))
    for f in versions:
        base = log_epoch_base(f.parent)
        with open(f, newline="") as fh:
            part = []
            for r in csv.DictReader(fh):
                part.append(read_epoch({k: float(v) for k, v in r.items() if v not in ("", None)}, base))
        if part:  # a resumed run replaces anything logged at or after its first step
            first = min(r.get("step", 0.0) for r in part)
            rows = [r for r in rows if r.get("step", -1.0) < first] + part
    return rows


def _save(fig: Any, path: Path) -> Path:
    """Write ``fig`` as a PNG to ``path`` (atomically) and close it."""
    import matplotlib.pyplot as plt

    atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=120))
    plt.close(fig)
    return path


def _series(rows: List[Dict[str, float]], key: str, x: str) -> Tuple[List[float], List[float]]:
    """The ``(x, key)`` points of the rows that have both, sorted by ``x``."""
    pts = sorted((r[x], r[key]) for r in rows if key in r and x in r)
    return [p[0] for p in pts], [p[1] for p in pts]


def _step_series(
    rows: List[Dict[str, float]], steps: List[Dict[str, float]], key: str, column: str
) -> Tuple[List[float], List[float]]:
    """The per-step curve ``column`` of ``steps`` (:func:`read_steps`), preceded by the logged rows' ``key``
    for the steps before the first one recorded there."""
    xs, ys = _series(steps, column, "step")
    first = xs[0] if xs else float("inf")
    lx, ly = _series([r for r in rows if r.get("step", first) < first], key, "step") if key else ([], [])
    return lx + xs, ly + ys


def _plot_loss(rows: List[Dict[str, float]], path: Path, steps: List[Dict[str, float]]) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs, ys = _step_series(rows, steps, "train_loss", "train_loss")
    if xs:
        ax.plot(xs, ys, alpha=0.35, lw=0.8, label="train (step)")
    # epoch curves are drawn at the step where the epoch ended
    for key, label in (("train_loss_epoch", "train (epoch)"), ("val_loss", "val")):
        xs, ys = _series(rows, key, "step")
        if xs:
            ax.plot(xs, ys, marker="o", label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_title("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def metrics_figure(rows: List[Dict[str, float]], task: str, steps: Sequence[Dict[str, float]] = ()) -> Any:
    """The figure of ``metrics.png``: validation metrics per epoch (counted from 1), learning rate per step
    (``steps``: :func:`read_steps`, else the logged ``lr-*`` rows) and at every epoch's end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for key in get_task(task).plot_metrics:
        xs, ys = _series(rows, key, "epoch")
        if xs:
            axes[0].plot(xs, [100 * v for v in ys], marker="o", label=key[4:])
    axes[0].set_xlabel("epoch")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_ylabel("%")
    axes[0].set_title("validation")
    axes[0].grid(alpha=0.3)
    if axes[0].lines:
        axes[0].legend()
    step_key = next((k for r in rows for k in r if k.startswith("lr-")), None)
    xs, ys = _step_series(rows, list(steps), step_key or "", "lr")
    if xs:
        axes[1].plot(xs, ys, label="step")
    xs, ys = _series(rows, "lr_epoch", "step")
    if xs:
        axes[1].plot(xs, ys, marker="o", ls="", label="epoch end")
    if axes[1].lines:
        axes[1].legend()
    axes[1].set_xlabel("step")
    axes[1].set_title("learning rate")
    axes[1].grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_curves(
    rows: List[Dict[str, float]], out_dir: Path, task: str, steps: Sequence[Dict[str, float]] = ()
) -> List[Path]:
    """``loss.png`` (train loss per step, train/val loss per epoch) and ``metrics.png`` (validation metrics,
    learning rate); ``steps``: every step's loss and rate (:func:`read_steps`)."""
    import matplotlib

    matplotlib.use("Agg")
    steps = list(steps)
    return [
        _plot_loss(rows, out_dir / "loss.png", steps),
        _save(metrics_figure(rows, task, steps), out_dir / "metrics.png"),
    ]


def plot_confusion(matrix: List[List[int]], names: Sequence[str], path: Path, title: str = "") -> Path:
    """A row-normalized confusion matrix (counts written in the cells up to 15 classes), as a PNG."""
    return _save(confusion_figure(matrix, names, title), path)


def confusion_figure(matrix: List[List[int]], names: Sequence[str], title: str = "") -> Any:
    """The matplotlib figure of :func:`plot_confusion` (e.g. for TensorBoard's ``add_figure``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cm = np.asarray(matrix, dtype=np.float64)
    norm = cm / np.maximum(cm.sum(1, keepdims=True), 1)
    n = len(names)
    size = max(4.5, 0.32 * n + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels(names, rotation=90, fontsize=7 if n > 15 else 9)
    ax.set_yticklabels(names, fontsize=7 if n > 15 else 9)
    if n <= 15:
        for i in range(n):
            for j in range(n):
                if cm[i, j]:
                    ax.text(
                        j,
                        i,
                        int(cm[i, j]),
                        ha="center",
                        va="center",
                        fontsize=8,
                        color="white" if norm[i, j] > 0.5 else "black",
                    )
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title or "confusion matrix (rows normalized)")
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    return fig
