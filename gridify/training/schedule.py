"""The learning-rate schedule and the step counts it is sized with.

The schedule is per optimizer step: a linear warm-up over ``warmup`` steps, then a cosine from
the base rate down to ``floor`` times it at step ``total`` (:func:`warmup_cosine`). Its length
is known before the trainer exists: :func:`steps_per_epoch` counts the optimizer steps of an
epoch the way Lightning counts batches, for the number of processes :func:`world_size_guess`
expects. No Lightning import.
"""
from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["steps_per_epoch", "world_size_guess", "warmup_cosine"]


def steps_per_epoch(num_samples: int, batch_size: int, world_size: int, drop_last: bool,
                    limit: Any, accumulate: int) -> int:
    """Optimizer steps per epoch, computed the way Lightning counts batches."""
    per_rank = math.ceil(num_samples / world_size)
    batches = per_rank // batch_size if drop_last else math.ceil(per_rank / batch_size)
    if limit is not None:
        if isinstance(limit, float) and limit <= 1.0:
            batches = int(batches * limit)
        else:
            batches = min(batches, int(limit))
    return max(1, math.ceil(batches / max(1, int(accumulate))))


def world_size_guess(devices: Any, num_nodes: int, accelerator: str) -> int:
    """Number of processes the trainer will run (for the LR schedule length, before the trainer exists)."""
    if isinstance(devices, int):
        n = devices
    elif isinstance(devices, (list, tuple)):
        n = len(devices)
    elif isinstance(devices, str) and devices.strip().lstrip("-").isascii() and devices.strip().lstrip("-").isdigit():
        n = int(devices)
    elif isinstance(devices, str) and "," in devices:
        n = len([d for d in devices.split(",") if d.strip()])
    else:  # "auto" / -1: every visible accelerator
        if accelerator in ("gpu", "cuda", "auto") and torch.cuda.is_available():
            n = torch.cuda.device_count()
        else:
            n = 1
    if n == -1:
        n = torch.cuda.device_count() if torch.cuda.is_available() and accelerator != "cpu" else 1
    return max(1, n) * max(1, int(num_nodes))


def warmup_cosine(step: int, *, warmup: int, total: int, floor: float) -> float:
    """LR factor: linear warm-up over ``warmup`` steps, then cosine from 1 down to ``floor``."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    span = max(1, total - warmup)
    t = min(1.0, (step - warmup) / span)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * t))
