"""The names of the shipped models (``gridify.load("<name>")``, ``--model <name>``) and their files.

Kept apart from :mod:`gridify.api` so that the command line can list them and parse ``--model``
without importing PyTorch (``gridify --help`` answers at once).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PRETRAINED", "pretrained_file"]

#: shipped model name -> its file under ``gridify/pretrained/``
PRETRAINED = {"modelnet10": "modelnet10.pt", "modelnet40": "modelnet40.pt", "semantickitti": "semantickitti.pt"}


def pretrained_file(name: str) -> Path:
    """Where the shipped model ``name`` lives (whether or not the file is there); ValueError for an unknown name."""
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; shipped: {sorted(PRETRAINED)}")
    return Path(__file__).resolve().parent / "pretrained" / PRETRAINED[name]
