"""The names of the shipped models (``gridify.load("<name>")``, ``--model <name>``) and their files.

Kept apart from :mod:`gridify.api` so that the command line can list them and parse ``--model``
without importing PyTorch (``gridify --help`` answers at once).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Optional

__all__ = ["PRETRAINED", "pretrained_file", "shipped_name", "not_found_hint", "closest_shipped"]

#: shipped model name -> its file under ``gridify/pretrained/``
PRETRAINED = {"modelnet10": "modelnet10.pt", "modelnet40": "modelnet40.pt", "semantickitti": "semantickitti.pt"}


def pretrained_file(name: str) -> Path:
    """Where the shipped model ``name`` lives (whether or not the file is there); ValueError for an unknown name."""
    if name not in PRETRAINED:
        close = closest_shipped(name) if isinstance(name, str) else None
        also = f"; did you mean {close!r}?" if close else ""
        raise ValueError(f"unknown pretrained model {name!r}; shipped: {sorted(PRETRAINED)}{also}")
    return Path(__file__).resolve().parent / "pretrained" / PRETRAINED[name]


def shipped_name(model: Any) -> Optional[str]:
    """The shipped model a model argument names, or None: the one rule of every entry that takes a model
    (``gridify.load``, ``export_onnx``, ``gridify predict / show / evaluate / export``, the benchmarks). ``model``
    is a shipped model's name (``"modelnet40"``, exactly) and no *file* of that name is here: a file of that
    name is a checkpoint and wins; a folder of that name (a dataset folder ``modelnet40/`` beside the command)
    does not hide the shipped model. A :class:`pathlib.Path` is always a path."""
    if isinstance(model, str) and model in PRETRAINED and not os.path.isfile(model):
        return model
    return None


def not_found_hint(text: str, flag: Optional[str] = None) -> str:
    """What to add to "checkpoint not found: ``text``" when ``text`` is a bare name (no folder, no extension):
    the shipped models' names and the closest one; with ``flag`` (``--ckpt``), the ``--model`` that loads a
    shipped model. ``''`` for anything that looks like a path."""
    if not text or os.sep in text or "/" in text or Path(text).suffix:
        return ""
    if text in PRETRAINED:
        return f" (a shipped model is given by name: --model {text})" if flag else ""
    close = closest_shipped(text)
    also = (f"; did you mean --model {close}?" if flag else f"; did you mean {close!r}?") if close else ""
    return f"; it is not the name of a shipped model either ({', '.join(PRETRAINED)}){also}"


def closest_shipped(text: str) -> Optional[str]:
    """The shipped model's name closest to ``text`` (any case), or None when none is close."""
    close = difflib.get_close_matches(text.lower(), list(PRETRAINED), n=1, cutoff=0.6)
    return close[0] if close else None
