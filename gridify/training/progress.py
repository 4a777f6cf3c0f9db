"""What a run says on the console while it works: never a silent minute, a bar in a terminal, lines otherwise.

* :class:`RunVoice`: the run's ``[train]`` lines (:meth:`RunVoice.say`) and what it is doing now
  (:meth:`RunVoice.doing`: reading the data, the sanity check, ``epoch 3/25 step 40/277``, validating,
  testing). A daemon thread (:meth:`RunVoice.start`) says ``[train] <what it is doing> (still running,
  45 s)`` whenever nothing was said for :data:`QUIET_SECONDS`, so a slow phase (a first epoch that reads
  every file and estimates its normals, a long validation, one slow step) never leaves a silent minute.
  Rank 0 only.
* :class:`RunPhases`: tells the voice what the trainer does, hook by hook, and says the training's plan
  before the first step (the epochs, the steps in each, what makes the first epoch slower).
* :class:`LineProgress`: progress as plain lines when the output is not a terminal (a log file, a pipe):
  the run's first step at once, then a line every ``every`` steps or :data:`LINE_SECONDS` seconds,
  whichever comes first, the last step of each epoch, and one line per epoch with its time and metrics.
* :class:`TerminalProgress`: Lightning's tqdm bars in a terminal; in one that reports no size (a
  pseudo-terminal opened without one: ``script``, ``docker exec -t``, many editors' and agents'
  terminals), where tqdm would draw nothing at all, they are drawn at ``$COLUMNS x $LINES`` (80 x 24).
* :func:`progress_callbacks` picks them from ``trainer.progress_bar`` and :func:`interactive`.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from typing import Any, Dict, List, Optional

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import convert_inf

from gridify._progress import elapsed_words

from .epochs import epoch_of, shown_epoch

__all__ = [
    "QUIET_SECONDS",
    "LINE_SECONDS",
    "RunVoice",
    "RunPhases",
    "LineProgress",
    "TerminalProgress",
    "interactive",
    "progress_callbacks",
]

#: the longest a run stays silent: after that long without a line, :class:`RunVoice` says what it is doing
QUIET_SECONDS = 30.0
#: :class:`LineProgress` prints a step's line once this long has passed without one, whatever ``every`` says
LINE_SECONDS = 20.0


class RunVoice:
    """The run's console lines and the watch that keeps them coming.

    :meth:`say` prints ``[train] <text>`` (through ``tqdm.write`` when ``bars``: a progress bar may be on the
    screen); :meth:`doing` records what the run does now; :meth:`alive` records progress shown otherwise (a bar
    redrawn). Once started, a daemon thread calls :meth:`check` every second: after ``quiet`` seconds
    (:data:`QUIET_SECONDS`) without a line it says ``<what it is doing> (still running, <time in that phase>)``. ``enabled=False`` (the other
    ranks of a distributed run) says nothing at all."""

    def __init__(self, quiet: Optional[float] = None, enabled: bool = True, bars: bool = False) -> None:
        self.quiet = float(QUIET_SECONDS if quiet is None else quiet)
        self.enabled = bool(enabled)
        self.bars = bool(bars)
        self._lock = threading.Lock()
        self._what = "starting"
        self._since = self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _write(self, line: str) -> None:
        if self.bars:
            try:
                from tqdm import tqdm  # noqa: PLC0415 - Lightning's bars are tqdm's: clear them, write, redraw

                tqdm.write(line, file=sys.stdout)
                sys.stdout.flush()
                return
            except ImportError:  # pragma: no cover - Lightning requires tqdm
                pass
        print(line, file=sys.stdout, flush=True)

    def say(self, text: str) -> None:
        """Print ``[train] <text>`` now."""
        if not self.enabled:
            return
        with self._lock:
            self._write(f"[train] {text}")
            self._last = time.monotonic()

    def doing(self, what: str, announce: bool = False) -> None:
        """The run now does ``what`` (said at once with ``announce``, else only if it lasts)."""
        self._what, self._since = what, time.monotonic()
        if announce:
            self.say(what)

    def alive(self) -> None:
        """Progress was shown some other way (a progress bar redrawn): the silence starts again."""
        self._last = time.monotonic()

    @property
    def silent_for(self) -> float:
        """Seconds since the last line (or sign of progress)."""
        return time.monotonic() - self._last

    def check(self) -> bool:
        """Say what the run is doing if it has been silent for ``quiet`` seconds; whether it did."""
        if self.silent_for < self.quiet:
            return False
        self.say(f"{self._what} (still running, {elapsed_words(time.monotonic() - self._since)})")
        return True

    def start(self) -> "RunVoice":
        """Start the watch (a daemon thread; nothing when disabled or already started)."""
        if self.enabled and self._thread is None:
            self._stop.clear()
            tick = max(0.05, min(1.0, self.quiet / 4))

            def watch() -> None:
                while not self._stop.wait(tick):
                    self.check()

            self._thread = threading.Thread(target=watch, name="gridify-train-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the watch (no line after this returns)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "RunVoice":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _count(n: Any) -> str:
    """A batch count as Lightning gives it (``inf`` for an iterable of unknown length): ``"277"`` or ``"?"``."""
    try:
        return str(int(n))
    except (TypeError, ValueError, OverflowError):
        return "?"


class RunPhases(pl.Callback):
    """Keeps the run's voice told what the trainer is doing; says the plan of the training before its first
    step (``note``: what makes the first epoch slower, e.g. the samples read and their normals estimated)."""

    def __init__(self, voice: RunVoice, note: str = "", announce_sanity: bool = True) -> None:
        self.voice, self.note, self.announce_sanity = voice, note, announce_sanity

    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        n = sum(int(b) for b in trainer.num_sanity_val_batches) if trainer.num_sanity_val_batches else "a few"
        self.voice.doing(f"sanity check: {n} validation batch(es) before training", announce=self.announce_sanity)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        first, last = shown_epoch(trainer.current_epoch), trainer.max_epochs
        span = f"epoch {first}" if last == first else f"epochs {first}-{last if (last or 0) > 0 else '?'}"
        resumed = f" (resumed at step {trainer.global_step})" if trainer.global_step else ""
        steps = _count(trainer.num_training_batches)
        self.voice.say(
            f"training {span}{resumed}, {steps} step{'' if steps == '1' else 's'} each"
            + (f"; {self.note}" if self.note else "")
        )

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.voice.doing(f"epoch {epoch_of(trainer)}: waiting for its first batch")

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.voice.doing(f"epoch {epoch_of(trainer)} step {batch_idx + 1}/{_count(trainer.num_training_batches)}")

    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        what = "sanity check" if trainer.sanity_checking else f"validating after epoch {epoch_of(trainer)}"
        total = trainer.num_sanity_val_batches if trainer.sanity_checking else trainer.num_val_batches
        self.voice.doing(f"{what}: batch {batch_idx + 1}/{_count(total[dataloader_idx] if total else '?')}")

    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        total = trainer.num_test_batches
        self.voice.doing(f"testing: batch {batch_idx + 1}/{_count(total[dataloader_idx] if total else '?')}")


def _number(value: Any) -> str:
    v = float(value)
    return f"{v:.3e}" if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4) else f"{v:.4f}"


class LineProgress(ProgressBar):
    """Training progress as plain lines: ``[train] epoch 2/8 step 15/30 | train_loss 1.2345 | lr 4.000e-03``
    at the run's first step, then every ``every`` steps of an epoch, at its last step and whenever
    ``seconds`` (:data:`LINE_SECONDS`) passed without a line; one line per epoch with its time and the epoch metrics
    (``train_loss_epoch``, ``val_*``). Lines go through ``voice`` (:class:`RunVoice`)."""

    def __init__(self, every: int, voice: Optional[RunVoice] = None, seconds: Optional[float] = None) -> None:
        super().__init__()
        self.every = max(1, int(every))
        self.voice = voice if voice is not None else RunVoice()
        self.seconds = float(LINE_SECONDS if seconds is None else seconds)
        self._enabled = True
        self._started = time.time()
        self._partial = True  # the epoch's start was not seen (a resume inside it)
        self._first = True  # no step of this session has been shown

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def _line(self, text: str) -> None:
        self.voice.say(text)

    @staticmethod
    def _epoch(trainer: Any) -> str:
        """``2/8`` (``2/?`` when the run is bounded by steps)."""
        return epoch_of(trainer)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # a run resumed in the middle of an epoch gets no on_train_epoch_start for it: time it from here
        self._started, self._partial = time.time(), True

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._started, self._partial = time.time(), False

    def _due(self, step: int, total: Any) -> bool:
        return self._first or step % self.every == 0 or step == total or self.voice.silent_for >= self.seconds

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        total = self.total_train_batches
        if not self._enabled or not self._due(batch_idx + 1, total):
            return
        self._first = False
        shown = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None
        parts = [f"{k} {_number(v)}" for k, v in shown.items() if k.startswith("train")]
        parts += [] if lr is None else [f"lr {_number(lr)}"]
        self._line(f"epoch {self._epoch(trainer)} step {batch_idx + 1}/{_count(total)} | " + " | ".join(parts))

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


def _terminal_size() -> os.terminal_size:
    """The size of the terminal on stdout; ``0 x 0`` when it reports none (or stdout is no terminal)."""
    try:
        return os.get_terminal_size(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return os.terminal_size((0, 0))


def sized_bar(bar: Any) -> Any:
    """``bar`` (a tqdm bar) drawn at a fixed ``$COLUMNS x $LINES`` (80 x 24) when the terminal reports no size:
    tqdm sizes its bars from the terminal and, told ``0 x 0``, draws nothing."""
    size = _terminal_size()
    if size.columns > 0 and size.lines > 0:
        return bar
    fallback = shutil.get_terminal_size((80, 24))  # $COLUMNS / $LINES first
    bar.dynamic_ncols = False
    bar.ncols, bar.nrows = max(20, fallback.columns - 1), max(2, fallback.lines)
    return bar


class TerminalProgress(TQDMProgressBar):
    """Lightning's tqdm progress bars, drawn even in a terminal that reports no size (:func:`sized_bar`), the
    training bar named ``epoch 1/25`` as the run counts (Lightning's says ``Epoch 0``); every redraw tells the
    run's ``voice`` that progress is on the screen."""

    def __init__(self, voice: Optional[RunVoice] = None) -> None:
        super().__init__()
        self.voice = voice if voice is not None else RunVoice(bars=True)

    def on_train_epoch_start(self, trainer: Any, *args: Any) -> None:
        # Lightning's own, less its "Epoch 0" (drawn once before a description could replace it)
        if getattr(self, "_leave", False):
            self.train_progress_bar = self.init_train_tqdm()
        self.train_progress_bar.set_description(f"epoch {epoch_of(trainer)}", refresh=False)
        self.train_progress_bar.reset(convert_inf(self.total_train_batches))
        self.train_progress_bar.initial = 0

    def init_sanity_tqdm(self) -> Any:
        return sized_bar(super().init_sanity_tqdm())

    def init_train_tqdm(self) -> Any:
        return sized_bar(super().init_train_tqdm())

    def init_validation_tqdm(self) -> Any:
        return sized_bar(super().init_validation_tqdm())

    def init_test_tqdm(self) -> Any:
        return sized_bar(super().init_test_tqdm())

    def init_predict_tqdm(self) -> Any:
        return sized_bar(super().init_predict_tqdm())

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        super().on_train_batch_end(*args, **kwargs)
        self.voice.alive()

    def on_validation_batch_end(self, *args: Any, **kwargs: Any) -> None:
        super().on_validation_batch_end(*args, **kwargs)
        self.voice.alive()

    def on_test_batch_end(self, *args: Any, **kwargs: Any) -> None:
        super().on_test_batch_end(*args, **kwargs)
        self.voice.alive()


def interactive() -> bool:
    """Whether the standard output is a terminal (progress bars) rather than a file or a pipe (lines)."""
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


def progress_callbacks(tr: Dict[str, Any], voice: Optional[RunVoice] = None, note: str = "") -> List[pl.Callback]:
    """The console's callbacks for the ``trainer`` section ``tr``: :class:`RunPhases` always; with
    ``trainer.progress_bar`` on, :class:`TerminalProgress` in a terminal, else a :class:`LineProgress`
    every ``log_every_n_steps`` steps."""
    voice = voice if voice is not None else RunVoice()
    bars = bool(tr["progress_bar"]) and interactive()
    voice.bars = bars
    callbacks: List[pl.Callback] = [RunPhases(voice, note, announce_sanity=bool(tr["progress_bar"]) and not bars)]
    if bars:
        callbacks.append(TerminalProgress(voice))
    elif tr["progress_bar"]:
        callbacks.append(LineProgress(int(tr["log_every_n_steps"]), voice))
    return callbacks
