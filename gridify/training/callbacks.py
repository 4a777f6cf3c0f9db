"""The trainer's plug-ins, one small piece per concern: checkpoints, checkpoint I/O, logs, stopping.

* :func:`checkpoint_callbacks`: ``best-epoch*.ckpt`` (best validation metric), ``last.ckpt``
  (every ``trainer.checkpoint.every_n_epochs`` epochs and/or ``every_n_train_steps`` steps) and,
  with ``keep_all``, one file per epoch.
* :func:`atomic_checkpoint_io`: checkpoints are written atomically and read with
  ``weights_only=True`` (:class:`AtomicCheckpointIO`).
* :func:`make_loggers`: CSV and TensorBoard logs under the output folder.
* :class:`StopAfterEpochs`: stop as an interruption would, to be continued with ``--resume``.
* :class:`TrainingClock`: logs ``train_seconds``, the training time so far without validation,
  at the end of every epoch (kept in checkpoints, so a resumed run goes on counting).
* :class:`LineProgress`: progress as plain lines when the output is not a terminal (a log file,
  a pipe): one line every ``every`` training steps and one per epoch, instead of progress bars
  redrawn with carriage returns (:func:`progress_callbacks` picks it).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, ProgressBar
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger

from gridify.checkpoint import atomic_torch_save

__all__ = [
    "StopAfterEpochs",
    "TrainingClock",
    "NamedCheckpoint",
    "AtomicCheckpointIO",
    "atomic_checkpoint_io",
    "best_checkpoint",
    "last_checkpoints",
    "checkpoint_callbacks",
    "make_loggers",
    "LineProgress",
    "interactive",
    "progress_callbacks",
]


class StopAfterEpochs(pl.Callback):
    """Stop (as an interruption would) after ``n`` epochs; resume later with --resume."""

    def __init__(self, n: int) -> None:
        self.n = int(n)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch + 1 >= self.n:
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


class NamedCheckpoint(ModelCheckpoint):
    """A ``ModelCheckpoint`` whose saved state is keyed by its file name pattern too.

    Lightning keys a checkpoint callback's state by its monitor and schedule only, so two
    callbacks that save on the same schedule under different names (``last.ckpt`` and one file per
    epoch) would collide ("Found more than one stateful callback of type ModelCheckpoint").
    """

    @property
    def state_key(self) -> str:
        return self._generate_state_key(
            monitor=self.monitor,
            mode=self.mode,
            filename=self.filename,
            every_n_train_steps=self._every_n_train_steps,
            every_n_epochs=self._every_n_epochs,
        )


def best_checkpoint(ckpt_dir: Path, monitor: str) -> ModelCheckpoint:
    """Keeps ``best-epoch<NNN>.ckpt``: the epoch with the highest ``monitor``."""
    return ModelCheckpoint(
        dirpath=ckpt_dir,
        filename="best-epoch{epoch:03d}",
        monitor=monitor,
        mode="max",
        save_top_k=1,
        auto_insert_metric_name=False,
        save_last=False,
    )


def last_checkpoints(ckpt_dir: Path, ck: Dict[str, Any]) -> List[ModelCheckpoint]:
    """``last.ckpt`` every ``ck["every_n_epochs"]`` epochs and/or ``ck["every_n_train_steps"]`` steps
    (every epoch when neither is set), plus one kept file per epoch with ``ck["keep_all"]``.

    The epoch checkpoints are written at the end of each training epoch, not after validation:
    Lightning's default waits for a validation, so a run validating every 4th epoch
    (``trainer.check_val_every_n_epoch``) would lose up to 3 epochs to a crash."""
    every_epochs = int(ck.get("every_n_epochs") or 0)
    every_steps = int(ck.get("every_n_train_steps") or 0)
    callbacks = []
    if every_epochs or not every_steps:
        callbacks.append(
            ModelCheckpoint(
                dirpath=ckpt_dir,
                filename="last",
                save_top_k=1,
                monitor=None,
                every_n_epochs=max(1, every_epochs),
                enable_version_counter=False,
                save_on_train_epoch_end=True,
            )
        )
    if every_steps:
        callbacks.append(
            ModelCheckpoint(
                dirpath=ckpt_dir,
                filename="last",
                save_top_k=1,
                monitor=None,
                every_n_train_steps=every_steps,
                enable_version_counter=False,
            )
        )
    if ck.get("keep_all"):
        callbacks.append(
            NamedCheckpoint(
                dirpath=ckpt_dir,
                filename="epoch{epoch:03d}-step{step:07d}",
                save_top_k=-1,
                monitor=None,
                every_n_epochs=max(1, every_epochs),
                auto_insert_metric_name=False,
                save_on_train_epoch_end=True,
            )
        )
    return callbacks


def checkpoint_callbacks(
    tr: Dict[str, Any], ckpt_dir: Path, monitor: Optional[str]
) -> Tuple[List[pl.Callback], Optional[ModelCheckpoint]]:
    """Every callback of a run for the ``trainer`` section ``tr``, and the best-checkpoint one.

    Without ``monitor`` (no validation) there is no best checkpoint. The best-checkpoint callback
    comes first, so it is the trainer's ``checkpoint_callback``.
    """
    best = best_checkpoint(ckpt_dir, monitor) if monitor else None
    callbacks: List[pl.Callback] = [best] if best is not None else []
    callbacks += last_checkpoints(ckpt_dir, tr["checkpoint"])
    callbacks.append(LearningRateMonitor(logging_interval="step"))
    callbacks.append(TrainingClock())
    if tr["stop_after_epochs"]:
        callbacks.append(StopAfterEpochs(int(tr["stop_after_epochs"])))
    return callbacks, best


def make_loggers(out: Path) -> List[Logger]:
    """``<out>/csv/version_*/metrics.csv`` and ``<out>/tensorboard/version_*/`` logs."""
    return [CSVLogger(str(out), name="csv"), TensorBoardLogger(str(out), name="tensorboard", default_hp_metric=False)]


def _number(value: Any) -> str:
    v = float(value)
    return f"{v:.3e}" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4) else f"{v:.4f}"


class LineProgress(ProgressBar):
    """Training progress as plain lines: ``[train] epoch 2/8 step 15/30 | train_loss 1.2345 | lr 4.000e-03``
    every ``every`` steps of an epoch (and at its last step), then one line per epoch with its time and
    the epoch metrics (``train_loss_epoch``, ``val_*``)."""

    def __init__(self, every: int) -> None:
        super().__init__()
        self.every = max(1, int(every))
        self._enabled = True
        self._started = time.time()
        self._partial = True  # the epoch's start was not seen (a resume inside it)

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def _line(self, text: str) -> None:
        print(f"[train] {text}", file=sys.stdout, flush=True)

    @staticmethod
    def _epoch(trainer: Any) -> str:
        """``2/8`` (``2/?`` when the run is bounded by steps)."""
        return f"{trainer.current_epoch + 1}/{trainer.max_epochs if (trainer.max_epochs or 0) > 0 else '?'}"

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # a run resumed in the middle of an epoch gets no on_train_epoch_start for it: time it from here
        self._started, self._partial = time.time(), True

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._started, self._partial = time.time(), False

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        total = self.total_train_batches
        if not self._enabled or ((batch_idx + 1) % self.every and batch_idx + 1 != total):
            return
        shown = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None
        parts = [f"{k} {_number(v)}" for k, v in shown.items() if k.startswith("train")]
        parts += [] if lr is None else [f"lr {_number(lr)}"]
        self._line(f"epoch {self._epoch(trainer)} step {batch_idx + 1}/{total} | " + " | ".join(parts))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if not self._enabled:
            return
        metrics = {k: v for k, v in trainer.callback_metrics.items() if k.startswith(("train_loss_epoch", "val_"))}
        parts = [f"{k} {_number(v)}" for k, v in sorted(metrics.items())]
        self._line(
            f"epoch {self._epoch(trainer)} done in {time.time() - self._started:.1f} s"
            + (" (since the resume)" if self._partial else "")
            + "".join(f" | {p}" for p in parts)
        )


def interactive() -> bool:
    """Whether the standard output is a terminal (progress bars) rather than a file or a pipe (lines)."""
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


def progress_callbacks(tr: Dict[str, Any]) -> List[pl.Callback]:
    """With ``trainer.progress_bar`` on and no terminal, a :class:`LineProgress` every ``log_every_n_steps``
    steps (Lightning's own bar otherwise)."""
    if tr["progress_bar"] and not interactive():
        return [LineProgress(int(tr["log_every_n_steps"]))]
    return []
