"""Helpers shared by the test modules (import them: ``from tests.helpers import ragged_batch``).

Fixtures live in ``tests/conftest.py``; plain functions live here.
"""

import os
from pathlib import Path

import torch

#: the repository root (the folder holding ``gridify/``, ``scripts/`` and ``tests/``)
ROOT = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path | None:
    """``../shared/data`` beside the project, or ``$GRIDIFY_SHARED_DATA``; None when absent."""
    env = os.environ.get("GRIDIFY_SHARED_DATA")
    root = Path(env) if env else ROOT.parent / "shared" / "data"
    return root if root.is_dir() else None


def ragged_batch(sizes, seed=0, scale=1.0):
    """Points of len(sizes) clouds in [-scale, scale]^3, with a sorted batch vector."""
    g = torch.Generator().manual_seed(seed)
    pos = (torch.rand(sum(sizes), 3, generator=g) * 2 - 1) * scale
    batch = torch.cat([torch.full((n,), i, dtype=torch.long) for i, n in enumerate(sizes)])
    return pos, batch
