"""The learning-rate schedule and the step counts it is sized with.

The schedule is per optimizer step: a linear warm-up over ``warmup`` steps, then a cosine from
the base rate down to ``floor`` times it at step ``total`` (:func:`warmup_cosine`); or torch's
one-cycle policy (:func:`one_cycle`, :class:`OneCycle`: ``optim.schedule: one_cycle``). Its length
is known before the trainer exists: :func:`steps_per_epoch` counts the optimizer steps of an
epoch the way Lightning counts batches, for the number of processes :func:`world_size_guess`
expects. No Lightning import.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Dict, List, Tuple

import torch

__all__ = ["steps_per_epoch", "world_size_guess", "warmup_cosine", "one_cycle", "OneCycle"]


def steps_per_epoch(
    num_samples: int, batch_size: int, world_size: int, drop_last: bool, limit: Any, accumulate: int
) -> int:
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


def _one_cycle_phase(step: int, warmup: float, total: int) -> Tuple[int, float]:
    """``(phase, fraction of it done)`` of ``OneCycleLR`` at ``step``: phase 0 rises until step ``warmup - 1``,
    phase 1 falls until step ``total - 1`` (later steps stay at its end)."""
    rise_end, fall_end = float(warmup) - 1.0, float(total) - 1.0
    if step <= rise_end:
        return 0, step / rise_end if rise_end > 0 else 1.0
    span = fall_end - rise_end
    return 1, min(1.0, (step - rise_end) / span) if span > 0 else 1.0


def one_cycle(
    step: int,
    *,
    warmup: float,
    total: int,
    div: float = 25.0,
    final_div: float = 1e4,
    momentum: Tuple[float, float] = (0.85, 0.95),
) -> Tuple[float, float]:
    r"""``(LR factor, beta1)`` of torch's ``OneCycleLR`` (two phases, cosine annealing) at ``step``, with
    ``pct_start * total_steps = warmup``:

        a(s, e, p) = e + (s - e) (1 + cos(pi p)) / 2
        step <= w - 1:   factor = a(1/div, 1, step / (w - 1)),              beta1 = a(m_max, m_base, .)
        later:           factor = a(1, 1/(div final_div), (step - w + 1) / (T - w)),  beta1 = a(m_base, m_max, .)

    (``momentum = (m_base, m_max)``); the fraction of the second phase is capped at 1.
    """
    phase, pct = _one_cycle_phase(step, warmup, total)
    cos = (1.0 + math.cos(math.pi * pct)) / 2.0
    base, top = momentum
    if phase == 0:
        return 1.0 + (1.0 / div - 1.0) * cos, base + (top - base) * cos
    low = 1.0 / (div * final_div)
    return low + (1.0 - low) * cos, top + (base - top) * cos


def _one_cycle_lr(step: int, **kw: Any) -> float:
    return one_cycle(step, **kw)[0]


class OneCycle(torch.optim.lr_scheduler.LambdaLR):
    """torch's ``OneCycleLR`` (:func:`one_cycle`) as a ``LambdaLR``: the learning rate is ``lr`` times the
    factor, and the first beta (Adam) or the momentum (SGD) of every group follows the cycle too.

    Unlike ``OneCycleLR`` it keeps no schedule in its state (a resumed run follows the config's length)
    and steps past ``total`` stay at the end instead of raising.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        warmup: float,
        total: int,
        div: float = 25.0,
        final_div: float = 1e4,
        momentum: Tuple[float, float] = (0.85, 0.95),
    ) -> None:
        self.cycle = functools.partial(
            one_cycle,
            warmup=float(warmup),
            total=int(total),
            div=float(div),
            final_div=float(final_div),
            momentum=tuple(momentum),
        )
        super().__init__(
            optimizer,
            functools.partial(
                _one_cycle_lr, warmup=float(warmup), total=int(total), div=float(div), final_div=float(final_div)
            ),
        )

    def get_lr(self) -> List[float]:
        beta1 = self.cycle(self.last_epoch)[1]
        for group in self.optimizer.param_groups:
            if "betas" in group:
                group["betas"] = (beta1, *tuple(group["betas"])[1:])
            elif "momentum" in group:
                group["momentum"] = beta1
        return super().get_lr()

    def state_dict(self) -> Dict[str, Any]:
        state = super().state_dict()
        state.pop("cycle", None)  # a function: the config's schedule, never the checkpoint's
        return state
