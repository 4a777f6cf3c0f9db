"""The files a run writes about itself: its config, run facts, test report, exported model and plots.

Every file is written atomically, through :func:`gridify._files.atomic_write_text` (text),
:func:`gridify.checkpoint.export_model` (weights) or :mod:`.plots` (images), so a run killed
mid-write never leaves half a file behind, and gets the mode ``0666 & ~umask``. No Lightning
import: :func:`write_tensorboard` takes the TensorBoard writer as an argument.

``test_metrics.json`` holds the metrics, ``epoch`` (the tested checkpoint's epoch, counted from 1 as
everywhere: :mod:`.epochs`), ``num_samples`` (the test split's size), ``num_scored`` (clouds scored), ``subset`` (``{"size", "of", "stratified", "limit"}`` when
``trainer.limit_test_batches`` chose a subset, else null), the confusion matrix
(``[classes, classes]``, classification) or ``per_category_iou`` (``{category name: IoU}``).
``run_info.json`` records ``epoch_base: 1`` (in each of its ``sessions`` too: the numbering of the epochs in
the run's file names and logs) and, once tested, ``epochs_trained`` and ``tested_epoch``.

:func:`write_plots` draws the curves from the logs and every step's loss and rate (``csv/train_steps.csv``):
at the end of a run, and of one interrupted (Ctrl-C) or failed after some steps.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

import torch
import yaml

from gridify._version import __version__
from gridify._files import atomic_write_text
from gridify.checkpoint import export_model, plain

from .epochs import EPOCH_BASE, EPOCH_BASE_KEY
from .metrics import format_metrics
from .plots import STEPS_FILE, confusion_figure, plot_confusion, plot_curves, read_metric_logs, read_steps

__all__ = [
    "RunRecord",
    "write_json",
    "write_run_files",
    "test_report",
    "write_test_outputs",
    "export_run_model",
    "write_plots",
    "flat_config",
    "write_tensorboard",
]


@dataclass
class RunRecord:
    """What a run knows about itself once data and model are built, for the files it writes."""

    cfg: Dict[str, Any]
    info: Dict[str, Any]
    model_name: str
    model_kwargs: Dict[str, Any]
    num_params: int
    run_info: Dict[str, Any] = field(default_factory=dict)

    @property
    def out(self) -> Path:
        return Path(self.cfg["output_dir"])


def write_json(path: Path, obj: Any) -> None:
    """``obj`` as indented JSON, written atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2))


def write_run_files(record: RunRecord) -> None:
    """``config.yaml`` (the resolved config) and ``run_info.json`` at the start of a run.

    A resumed run keeps the history of its sessions in ``run_info["sessions"]`` (each session's
    ``started`` and ``resumed_from``), so the training time of a run that was interrupted can be
    told apart from the time it spent stopped.
    """
    info = record.run_info
    info[EPOCH_BASE_KEY] = EPOCH_BASE
    if info.get("resumed_from"):
        try:
            old = json.loads((record.out / "run_info.json").read_text())
        except (OSError, ValueError):
            old = {}
        first = [{"started": old["started"], "resumed_from": old.get("resumed_from")}] if "started" in old else []
        info["sessions"] = list(old.get("sessions") or first)
    info.setdefault("sessions", [])
    info["sessions"].append(
        {"started": info["started"], "resumed_from": info.get("resumed_from"), EPOCH_BASE_KEY: EPOCH_BASE}
    )
    atomic_write_text(record.out / "config.yaml", yaml.safe_dump(plain(record.cfg), sort_keys=False))
    write_json(record.out / "run_info.json", info)


def test_report(
    record: RunRecord,
    results: Dict[str, Any],
    *,
    num_samples: Optional[int],
    checkpoint: Optional[str],
    epoch: int,
    global_step: int,
    train_seconds: float,
    subset: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """The content of ``test_metrics.json``: the test results and where they come from (``epoch``: the
    tested checkpoint's epoch, counted from 1; ``subset``: the part of the test split scored, see
    :func:`~.data.eval_subset`)."""
    cfg, info = record.cfg, record.info
    report = {
        "task": cfg["task"],
        "split": "test",
        "metrics": results.get("metrics", {}),
        "num_samples": num_samples,
        "subset": None
        if subset is None
        else {k: subset[k] for k in ("size", "of", "stratified", "limit") if k in subset},
        "checkpoint": checkpoint or "final weights",
        "epoch": epoch,
        "global_step": global_step,
        "dataset": cfg["data"]["name"],
        "source_format": info["source_format"],
        "gridify_version": __version__,
        "num_parameters": record.num_params,
        "train_seconds": round(train_seconds, 1),
        "votes": int(cfg.get("trainer", {}).get("test_votes", 1)),  # views averaged per test cloud
    }
    report.update({k: v for k, v in results.items() if k != "metrics"})
    return report


def write_plots(record: RunRecord, report: Optional[Dict[str, Any]] = None) -> Optional[Path]:
    """``plots/loss.png`` and ``plots/metrics.png`` from the run's logs and ``csv/train_steps.csv`` and, with
    a test ``report`` holding one, ``plots/confusion_matrix.png``; the folder, or None when ``trainer.plots``
    is off or plotting failed (a warning says why: plotting never fails a run)."""
    if not record.cfg["trainer"]["plots"]:
        return None
    plots = record.out / "plots"
    task = record.cfg["task"]
    report = report or {}
    try:
        plots.mkdir(exist_ok=True)
        csv_root = record.out / "csv"
        plot_curves(read_metric_logs(csv_root), plots, task, read_steps(csv_root / STEPS_FILE))
        if "confusion_matrix" in report:
            plot_confusion(
                report["confusion_matrix"],
                record.info["class_names"],
                plots / "confusion_matrix.png",
                title=f"test confusion ({format_metrics(task, report['metrics'])})",
            )
    except Exception as exc:  # noqa: BLE001 - plotting never fails a run
        warnings.warn(f"plotting failed: {exc}")
        return None
    return plots


def export_run_model(record: RunRecord, model: torch.nn.Module, checkpoint: str) -> Path:
    """``checkpoints/model.pt``: the weights of ``model`` (from ``checkpoint``) with what rebuilding it needs."""
    cfg, info = record.cfg, record.info
    path = record.out / "checkpoints" / "model.pt"
    export_model(
        path,
        model,
        {
            "model_name": record.model_name,
            "model_kwargs": record.model_kwargs,
            "class_names": info["class_names"],
            "gridify_version": __version__,
            "task": cfg["task"],
            "info": info,
            "config": cfg,
            "source_format": info["source_format"],
            "num_parameters": record.num_params,
            "checkpoint": checkpoint,
        },
    )
    return path


def write_test_outputs(record: RunRecord, report: Dict[str, Any], model: torch.nn.Module, train_seconds: float) -> None:
    """``test_metrics.json``, ``checkpoints/model.pt`` (the tested weights), the final ``run_info.json``
    and, when ``trainer.plots`` is on, the plots; then one summary line on the console."""
    out = record.out
    write_json(out / "test_metrics.json", report)
    export_run_model(record, model, report["checkpoint"])
    record.run_info.update(
        train_seconds=round(train_seconds, 1),
        test_metrics=report["metrics"],
        tested_epoch=report.get("epoch"),
        finished=time.strftime("%Y-%m-%d %H:%M:%S"),
    )
    write_json(out / "run_info.json", record.run_info)
    write_plots(record, report)
    subset = report.get("subset")
    part = (
        ""
        if not subset
        else (
            f", a seeded {'class-stratified' if subset['stratified'] else 'random'} subset: {subset.get('limit', '')}"
        )
    )
    if not report["metrics"]:  # trainer.limit_test_batches: 0 (no test split, e.g. ModelNet40's held-out test)
        print(
            f"[train] not tested (trainer.limit_test_batches: 0); weights of {report['checkpoint']} in "
            f"{out / 'checkpoints' / 'model.pt'} | trained {train_seconds:.0f} s",
            flush=True,
        )
        return
    print(
        f"[train] test ({report.get('num_scored')} of {report['num_samples']} samples{part}, {report['checkpoint']}): "
        f"{format_metrics(record.cfg['task'], report['metrics'])} | trained {train_seconds:.0f} s | "
        f"{out / 'test_metrics.json'} | model: {out / 'checkpoints' / 'model.pt'}",
        flush=True,
    )


def flat_config(cfg: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """``{"model.resolution": 9, ...}``: the config's leaves, lists and None as text (TensorBoard's hparams)."""
    out: Dict[str, Any] = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_config(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, (bool, int, float, str)) else str(value)
    return out


def write_tensorboard(writer: Any, record: RunRecord, report: Dict[str, Any], step: int) -> None:
    """Add the test confusion matrix (classification) as an image and the hyper-parameters with the final
    test metrics (``hparams/test_<metric>``) to the TensorBoard ``writer`` (a ``SummaryWriter``)."""
    metrics = {f"hparams/test_{k}": float(v) for k, v in report["metrics"].items()}
    writer.add_hparams(flat_config(plain(record.cfg)), metrics, run_name="hparams", global_step=step)
    if "confusion_matrix" in report:
        import matplotlib.pyplot as plt

        fig = confusion_figure(
            report["confusion_matrix"],
            record.info["class_names"],
            f"test confusion ({format_metrics(record.cfg['task'], report['metrics'])})",
        )
        writer.add_figure("test/confusion_matrix", fig, global_step=step, close=False)
        plt.close(fig)
    writer.flush()
