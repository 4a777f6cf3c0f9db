"""Epochs as a run shows them: counted from 1, in every place, from this one module.

Lightning counts epochs from 0 (``trainer.current_epoch``, a checkpoint's ``"epoch"``); a person reads
"epoch 1/25". Everything a run prints or writes takes its epoch number from :func:`shown_epoch`:

* the console: ``[train] epoch 1/25 step 20/277``, ``interrupted at epoch 2, step 300`` (:func:`epoch_of`);
* checkpoint names: ``best-epoch018.ckpt`` and, with ``trainer.checkpoint.keep_all``,
  ``epoch018-step0004986.ckpt`` hold the epoch they end, as the log names it (:data:`BEST_NAME`, :data:`KEPT_NAME`);
* ``test_metrics.json``: ``epoch``, the tested checkpoint's epoch; ``run_info.json``: ``epoch_base: 1`` (for
  readers telling these runs from older ones) and, at the end, ``epochs_trained`` and ``tested_epoch``;
* ``csv/version_*/metrics.csv`` and TensorBoard: the ``epoch`` column / scalar (:func:`logged_epoch`), so the
  rows of epoch 1 say 1; ``plots/metrics.png``: the validation curve's axis.

**Older runs.** Runs written before this numbering (no ``epoch_base`` in ``run_info.json``, no ``epoch_base``
in ``csv/version_*/hparams.yaml``) named their checkpoints from 0 (``best-epoch017.ckpt`` was the 18th epoch)
and logged epochs from 0. The readers here keep reading them right: :func:`checkpoint_epoch` takes the base of
the run (or of the session, :func:`session_epoch_base`, for a run resumed by a newer gridify) and
:func:`read_epoch` the base of a log folder (:func:`log_epoch_base`). Lightning's own default names,
``epoch=N-step=M.ckpt``, count from 0 always. No Lightning import.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional

__all__ = [
    "EPOCH_BASE",
    "EPOCH_BASE_KEY",
    "LEGACY_EPOCH_BASE",
    "BEST_NAME",
    "KEPT_NAME",
    "CHECKPOINT_EPOCH",
    "shown_epoch",
    "epoch_of",
    "logged_epoch",
    "read_epoch",
    "log_epoch_base",
    "checkpoint_epoch",
    "session_epoch_base",
]

#: the number of the first epoch, everywhere a run shows one
EPOCH_BASE = 1
#: the key that records it (``run_info.json``, each of its ``sessions``, ``csv/version_*/hparams.yaml``)
EPOCH_BASE_KEY = "epoch_base"
#: the numbering of runs written before :data:`EPOCH_BASE` was recorded (and of Lightning's own names)
LEGACY_EPOCH_BASE = 0

#: ``ModelCheckpoint`` file names (``{epoch}``: :func:`shown_epoch` of the epoch the checkpoint ends)
BEST_NAME = "best-epoch{epoch:03d}"
KEPT_NAME = "epoch{epoch:03d}-step{step:07d}"

#: an epoch in a checkpoint's file name: gridify's ``best-epochNNN.ckpt`` / ``epochNNN-stepNNNNNNN.ckpt``
#: (group ``eq`` empty) and Lightning's default ``epoch=N-step=M.ckpt`` (``eq`` is ``=``), a ``-vN`` suffix allowed
CHECKPOINT_EPOCH = re.compile(r"^(?:best-)?epoch(?P<eq>=?)(?P<epoch>\d+)(?:-step=?(?P<step>\d+))?(?:-v\d+)?\.ckpt$")


def shown_epoch(index: Any) -> int:
    """The number a run shows for Lightning's 0-based epoch ``index`` (``trainer.current_epoch`` during the
    epoch, a checkpoint's ``"epoch"``): ``index + 1``."""
    return int(index) + EPOCH_BASE


def epoch_of(trainer: Any) -> str:
    """``"2/8"``: the epoch in progress of ``trainer`` and the run's last (``"2/?"`` when steps bound the run)."""
    last = trainer.max_epochs if (trainer.max_epochs or 0) > 0 else "?"
    return f"{shown_epoch(trainer.current_epoch)}/{last}"


def logged_epoch(row: Mapping[str, Any]) -> Dict[str, Any]:
    """A log row (Lightning's ``epoch``, 0-based) with its ``epoch`` as the run shows it.

    Rows logged while training carry the index of the epoch in progress (:func:`shown_epoch` of it); the
    test's rows (``test_*``), logged after training, carry the number of epochs trained, which already is the
    number of the last one, and are kept as they are."""
    out = dict(row)
    if "epoch" in out and not any(str(k).startswith("test_") for k in out):
        out["epoch"] = shown_epoch(out["epoch"])
    return out


def read_epoch(row: Mapping[str, Any], base: int) -> Dict[str, Any]:
    """A row read back from a log folder written with ``base`` (:func:`log_epoch_base`), its epoch counted from 1."""
    return dict(row) if base == EPOCH_BASE else logged_epoch(row)


def log_epoch_base(version_dir: Path) -> int:
    """The base of the ``epoch`` column in ``csv/version_N`` (its ``hparams.yaml`` records it; older logs: 0)."""
    try:
        text = (Path(version_dir) / "hparams.yaml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return LEGACY_EPOCH_BASE
    found = re.search(rf"^{EPOCH_BASE_KEY}: (\d+)\s*$", text, re.M)
    return int(found.group(1)) if found else LEGACY_EPOCH_BASE


def checkpoint_epoch(name: str, base: int = EPOCH_BASE) -> Optional[int]:
    """The epoch (counted from 1) a checkpoint's file name holds; None for a name without one (``last.ckpt``).

    ``base``: the numbering of gridify's names in the run that wrote the file (:data:`EPOCH_BASE`; 0 for runs
    written before it, see :func:`session_epoch_base`). Lightning's ``epoch=N-step=M.ckpt`` counts from 0
    whatever ``base`` says."""
    found = CHECKPOINT_EPOCH.match(Path(name).name)
    if not found:
        return None
    number = int(found.group("epoch"))
    return number + EPOCH_BASE - (LEGACY_EPOCH_BASE if found.group("eq") else int(base))


def session_epoch_base(info: Mapping[str, Any], when: Optional[float] = None) -> int:
    """The numbering of the checkpoint names written at ``when`` (seconds since 1970, a file's mtime) in the run
    whose ``run_info.json`` is ``info``: the base its session recorded, 0 for a session that recorded none (a
    run started by an older gridify and resumed by this one names its earlier checkpoints from 0). Without
    ``when``: the run's own (latest) base."""
    sessions = [s for s in info.get("sessions") or [] if isinstance(s, Mapping) and s.get("started")]
    base = int(info.get(EPOCH_BASE_KEY, LEGACY_EPOCH_BASE))
    if when is None or not sessions:
        return base
    for session in sorted(sessions, key=lambda s: str(s["started"]), reverse=True):
        try:
            started = time.mktime(time.strptime(str(session["started"]), "%Y-%m-%d %H:%M:%S"))
        except ValueError:
            continue
        if started <= when:
            return int(session.get(EPOCH_BASE_KEY, LEGACY_EPOCH_BASE))
    return int(sessions[0].get(EPOCH_BASE_KEY, LEGACY_EPOCH_BASE))
