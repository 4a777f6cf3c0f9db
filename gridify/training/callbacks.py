"""The trainer's plug-ins, one small piece per concern: checkpoints, checkpoint I/O, logs, stopping.

* :func:`checkpoint_callbacks`: ``best-epochNNN.ckpt`` (best validation metric), ``last.ckpt``
  (every ``trainer.checkpoint.every_n_epochs`` epochs and/or ``every_n_train_steps`` steps) and,
  with ``keep_all``, one file per epoch, ``epochNNN-stepNNNNNNN.ckpt``; ``NNN`` is the epoch the file
  ends, counted from 1 as the log counts it (:mod:`.epochs`, :class:`EpochCheckpoint`). On a resume
  (``resuming``), Lightning's "checkpoint directory exists and is not empty" is not said: the run
  continues the files there.
* :func:`atomic_checkpoint_io`: checkpoints are written atomically and read with
  ``weights_only=True`` (:class:`AtomicCheckpointIO`).
* :func:`make_loggers`: CSV and TensorBoard logs under the output folder, their ``epoch`` counted from 1
  (:func:`~.epochs.logged_epoch`; ``csv/version_*/hparams.yaml`` records ``epoch_base: 1``).
* :class:`StepCurves`: every training step's loss and learning rate (whatever ``log_every_n_steps``),
  kept in the checkpoints and written to ``csv/train_steps.csv`` at every epoch's end, for the plots.
* :class:`StopAfterEpochs`: stop as an interruption would, to be continued with ``--resume``.
* :class:`TrainingClock`: logs ``train_seconds``, the training time so far without validation,
  at the end of every epoch (kept in checkpoints, so a resumed run goes on counting).
* The console (:mod:`.progress`, re-exported here): :class:`~.progress.LineProgress` (lines when the
  output is no terminal), the progress bar of a terminal, and the run's voice that never stays silent a minute.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger

from gridify._files import atomic_write_text
from gridify.checkpoint import atomic_torch_save

from .epochs import BEST_NAME, EPOCH_BASE, EPOCH_BASE_KEY, KEPT_NAME, logged_epoch, shown_epoch
from .plots import STEP_COLUMNS, STEPS_FILE, read_steps, steps_csv
from .progress import LineProgress, interactive, progress_callbacks

__all__ = [
    "StopAfterEpochs",
    "TrainingClock",
    "StepCurves",
    "STEPS_FILE",
    "read_steps",
    "EpochCheckpoint",
    "NamedCheckpoint",
    "AtomicCheckpointIO",
    "atomic_checkpoint_io",
    "best_checkpoint",
    "last_checkpoints",
    "checkpoint_callbacks",
    "make_loggers",
    "RunCSVLogger",
    "RunTensorBoardLogger",
    "LineProgress",
    "interactive",
    "progress_callbacks",
]


class StopAfterEpochs(pl.Callback):
    """Stop (as an interruption would) after epoch ``n`` (counted from 1); resume later with --resume."""

    def __init__(self, n: int) -> None:
        self.n = int(n)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if shown_epoch(trainer.current_epoch) >= self.n:
            trainer.should_stop = True


class TrainingClock(pl.Callback):
    """Logs ``train_seconds`` at the end of every training epoch: the wall-clock seconds spent training
    since the run's start, validation (at the end of an epoch or inside it) and time stopped excluded.

    The total is part of the callback's state in every checkpoint, so a run resumed with ``--resume``
    goes on from the checkpoint's total (work after that checkpoint was lost and is redone, so it counts
    once). It is what ``scripts/time_to_accuracy.py --logged`` puts on the time axis.
    """

    def __init__(self) -> None:
        self.total = 0.0
        self._started: Optional[float] = None
        self._paused = 0.0
        self._val_started: Optional[float] = None

    def _start(self) -> None:
        self._started, self._paused, self._val_started = time.perf_counter(), 0.0, None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._start()  # a run resumed inside an epoch gets no on_train_epoch_start for it

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._start()

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        if self._started is not None and not trainer.sanity_checking:
            self._val_started = time.perf_counter()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._val_started is not None:
            self._paused += time.perf_counter() - self._val_started
            self._val_started = None

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._started is None:
            return
        self.total += max(0.0, time.perf_counter() - self._started - self._paused)
        self._started = None
        pl_module.log("train_seconds", self.total, on_step=False, on_epoch=True, sync_dist=False)

    def state_dict(self) -> Dict[str, Any]:
        return {"total": float(self.total)}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        self.total = float(state_dict.get("total", 0.0))


class StepCurves(pl.Callback):
    """Every training step's ``train_loss`` (the module's ``step_loss``) and learning rate, whatever
    ``trainer.log_every_n_steps`` says: the plots' per-step curves (a sparse log draws a cosine as a line).

    A row per training batch: ``step`` (the 0-based index of the optimizer step, the CSV log's step axis),
    ``epoch`` (counted from 1), ``train_loss``, ``lr`` (the rate the step used). The rows are part of the
    callback's state in every checkpoint (a resumed run keeps the curve up to its checkpoint, and the steps
    redone after it replace the lost ones) and are written to ``path`` (``csv/train_steps.csv``) atomically at
    the end of every epoch and by :meth:`flush`. The losses stay tensors until then (no device sync a step).
    """

    def __init__(self, path: Optional[Path] = None) -> None:
        self.path = None if path is None else Path(path)
        self.rows: List[Tuple[int, int, float, float]] = []
        self._pending: List[Tuple[int, int, Any, float]] = []
        self._start: Optional[Tuple[int, float]] = None

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else float("nan")
        self._start = (int(trainer.global_step), float(lr))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = getattr(pl_module, "step_loss", None)
        if self._start is None or loss is None:
            return
        step, lr = self._start
        self._pending.append((step, shown_epoch(trainer.current_epoch), loss, lr))
        self._start = None

    def _settle(self) -> None:
        """The pending losses read (one transfer for all of them)."""
        if not self._pending:
            return
        losses = torch.stack([torch.as_tensor(p[2]).detach().float().reshape(()) for p in self._pending]).cpu()
        self.rows += [(s, e, float(v), lr) for (s, e, _, lr), v in zip(self._pending, losses.tolist())]
        self._pending = []

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.is_global_zero:
            self.flush()

    def flush(self) -> Optional[Path]:
        """Write the rows to ``path`` (atomically); the path, or None without one or without rows."""
        self._settle()
        if self.path is None or not self.rows:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, steps_csv(self.rows))
        return self.path

    def state_dict(self) -> Dict[str, Any]:
        self._settle()
        return {"rows": torch.tensor(self.rows, dtype=torch.float64).reshape(-1, len(STEP_COLUMNS))}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        rows = state_dict.get("rows")
        self.rows = [] if rows is None else [(int(s), int(e), v, lr) for s, e, v, lr in rows.tolist()]
        self._pending = []


class AtomicCheckpointIO(TorchCheckpointIO):
    """Saves with :func:`~gridify.checkpoint.atomic_torch_save`; loads with ``weights_only=True`` always."""

    def save_checkpoint(self, checkpoint: Dict[str, Any], path: Any, storage_options: Optional[Any] = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint does not take storage_options")
        atomic_torch_save(checkpoint, path)

    def load_checkpoint(
        self, path: Any, map_location: Optional[Any] = None, weights_only: Optional[bool] = None
    ) -> Dict[str, Any]:
        if not Path(path).is_file():
            raise FileNotFoundError(f"Checkpoint file not found: {path}")
        return torch.load(path, map_location=map_location if map_location is not None else "cpu", weights_only=True)


def atomic_checkpoint_io() -> AtomicCheckpointIO:
    """A Lightning ``CheckpointIO`` that writes checkpoints atomically and loads them safely.

    Saving goes through :func:`~gridify.checkpoint.atomic_torch_save` (temporary file in the same
    directory, fsync, ``os.replace``), so a run killed while writing ``last.ckpt`` keeps the
    previous one; loading always uses ``torch.load(..., weights_only=True)`` (tensors and plain
    containers, no unpickled code), whatever the caller asks for.
    """
    return AtomicCheckpointIO()


#: Lightning's "Checkpoint directory ... exists and is not empty": true, and expected, when a run is resumed
_DIR_NOT_EMPTY = r"Checkpoint directory .* exists and is not empty"


class EpochCheckpoint(ModelCheckpoint):
    """A ``ModelCheckpoint`` whose file names count epochs as the run does (:func:`~.epochs.shown_epoch`:
    ``best-epoch001.ckpt`` ends epoch 1, the log's ``epoch 1/25``), quiet about a non-empty folder when
    ``resuming`` (the run continues the files there). Its saved state keeps ``ModelCheckpoint``'s key, so
    checkpoints written before resume with their best score."""

    #: the class name in :attr:`state_key` (Lightning's own for the plain checkpoints)
    state_name = "ModelCheckpoint"

    def __init__(self, *args: Any, resuming: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resuming = bool(resuming)

    def _generate_state_key(self, **kwargs: Any) -> str:
        return f"{self.state_name}{kwargs!r}"

    def format_checkpoint_name(self, metrics: Dict[str, Any], *args: Any, **kwargs: Any) -> str:
        if "epoch" in metrics:  # Lightning's 0-based index of the epoch the checkpoint ends
            metrics = {**metrics, "epoch": torch.tensor(shown_epoch(metrics["epoch"]))}
        return super().format_checkpoint_name(metrics, *args, **kwargs)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        with warnings.catch_warnings():
            if self.resuming:
                warnings.filterwarnings("ignore", message=_DIR_NOT_EMPTY)
            super().setup(trainer, pl_module, stage)


class NamedCheckpoint(EpochCheckpoint):
    """An :class:`EpochCheckpoint` whose saved state is keyed by its file name pattern too.

    Lightning keys a checkpoint callback's state by its monitor and schedule only, so two
    callbacks that save on the same schedule under different names (``last.ckpt`` and one file per
    epoch) would collide ("Found more than one stateful callback of type ModelCheckpoint").
    """

    state_name = "NamedCheckpoint"

    @property
    def state_key(self) -> str:
        return self._generate_state_key(
            monitor=self.monitor,
            mode=self.mode,
            filename=self.filename,
            every_n_train_steps=self._every_n_train_steps,
            every_n_epochs=self._every_n_epochs,
        )


def best_checkpoint(ckpt_dir: Path, monitor: str, resuming: bool = False) -> ModelCheckpoint:
    """Keeps ``best-epoch<NNN>.ckpt``: the epoch (counted from 1) with the highest ``monitor``."""
    return EpochCheckpoint(
        dirpath=ckpt_dir,
        filename=BEST_NAME,
        monitor=monitor,
        mode="max",
        save_top_k=1,
        auto_insert_metric_name=False,
        save_last=False,
        resuming=resuming,
    )


def last_checkpoints(ckpt_dir: Path, ck: Dict[str, Any], resuming: bool = False) -> List[ModelCheckpoint]:
    """``last.ckpt`` every ``ck["every_n_epochs"]`` epochs and/or ``ck["every_n_train_steps"]`` steps
    (every epoch when neither is set), plus one kept file per epoch with ``ck["keep_all"]``,
    ``epoch<NNN>-step<NNNNNNN>.ckpt`` (the epoch it ends, counted from 1, and the optimizer steps taken).

    The epoch checkpoints are written at the end of each training epoch, not after validation:
    Lightning's default waits for a validation, so a run validating every 4th epoch
    (``trainer.check_val_every_n_epoch``) would lose up to 3 epochs to a crash."""
    every_epochs = int(ck.get("every_n_epochs") or 0)
    every_steps = int(ck.get("every_n_train_steps") or 0)
    callbacks = []
    if every_epochs or not every_steps:
        callbacks.append(
            EpochCheckpoint(
                dirpath=ckpt_dir,
                filename="last",
                save_top_k=1,
                monitor=None,
                every_n_epochs=max(1, every_epochs),
                enable_version_counter=False,
                save_on_train_epoch_end=True,
                resuming=resuming,
            )
        )
    if every_steps:
        callbacks.append(
            EpochCheckpoint(
                dirpath=ckpt_dir,
                filename="last",
                save_top_k=1,
                monitor=None,
                every_n_train_steps=every_steps,
                enable_version_counter=False,
                resuming=resuming,
            )
        )
    if ck.get("keep_all"):
        callbacks.append(
            NamedCheckpoint(
                dirpath=ckpt_dir,
                filename=KEPT_NAME,
                save_top_k=-1,
                monitor=None,
                every_n_epochs=max(1, every_epochs),
                auto_insert_metric_name=False,
                save_on_train_epoch_end=True,
                resuming=resuming,
            )
        )
    return callbacks


def checkpoint_callbacks(
    tr: Dict[str, Any],
    ckpt_dir: Path,
    monitor: Optional[str],
    resuming: bool = False,
    steps_file: Optional[Path] = None,
) -> Tuple[List[pl.Callback], Optional[ModelCheckpoint]]:
    """Every callback of a run for the ``trainer`` section ``tr``, and the best-checkpoint one.

    Without ``monitor`` (no validation) there is no best checkpoint. The best-checkpoint callback
    comes first, so it is the trainer's ``checkpoint_callback``. ``resuming``: the run continues the
    checkpoints in ``ckpt_dir``; ``steps_file``: where :class:`StepCurves` writes (None: nowhere).
    """
    best = best_checkpoint(ckpt_dir, monitor, resuming) if monitor else None
    callbacks: List[pl.Callback] = [best] if best is not None else []
    callbacks += last_checkpoints(ckpt_dir, tr["checkpoint"], resuming)
    callbacks.append(LearningRateMonitor(logging_interval="step"))
    callbacks.append(TrainingClock())
    callbacks.append(StepCurves(steps_file))
    if tr["stop_after_epochs"]:
        callbacks.append(StopAfterEpochs(int(tr["stop_after_epochs"])))
    return callbacks, best


class RunCSVLogger(CSVLogger):
    """Lightning's CSV log with its ``epoch`` column counted from 1 (:func:`~.epochs.logged_epoch`); its
    ``hparams.yaml`` records ``epoch_base: 1``, telling it from the logs of older runs (counted from 0)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._epoch_marked = False

    def log_hyperparams(self, params: Optional[Any] = None) -> None:
        plain = dict(vars(params) if isinstance(params, argparse.Namespace) else (params or {}))
        super().log_hyperparams({**plain, EPOCH_BASE_KEY: EPOCH_BASE})
        self._epoch_marked = True

    def log_metrics(self, metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        if not self._epoch_marked:  # the mark comes before the first row, whatever Lightning logs first
            self.log_hyperparams({})
        super().log_metrics(logged_epoch(metrics), step)


class RunTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoard log with its ``epoch`` scalar counted from 1 (:func:`~.epochs.logged_epoch`)."""

    def log_metrics(self, metrics: Mapping[str, Any], step: Optional[int] = None) -> None:
        super().log_metrics(logged_epoch(metrics), step)


def make_loggers(out: Path) -> List[Logger]:
    """``<out>/csv/version_*/metrics.csv`` and ``<out>/tensorboard/version_*/`` logs (epochs counted from 1)."""
    return [
        RunCSVLogger(str(out), name="csv"),
        RunTensorBoardLogger(str(out), name="tensorboard", default_hp_metric=False),
    ]
