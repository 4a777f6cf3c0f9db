"""Exponential moving average of a model's weights (``optim.ema_decay``).

After optimizer step ``s`` (``s = 1, 2, ...``), with ``d = optim.ema_decay`` and the warm-up of
TensorFlow's ``ExponentialMovingAverage(num_updates=s)``:

    d_s = min(d, (1 + s) / (10 + s))
    theta_ema <- d_s * theta_ema + (1 - d_s) * theta

for every parameter; buffers (BatchNorm running statistics) are copied, not averaged. The averaged
copy starts as the trained model's weights (after ``init_weights``), validates and tests in its place,
is the run's ``model.pt`` and is what :func:`gridify.checkpoint.load_checkpoint` reads from a Lightning
checkpoint (its ``ema.*`` entries); the live weights stay under ``model.*`` so that ``--resume`` goes on
training them.

Shapes:
    ``ema`` and ``model`` are two instances of one architecture: their ``state_dict`` entries pair up
    by name with equal shapes.
"""

from __future__ import annotations

import torch

__all__ = ["ema_decay_at", "update_ema"]


def ema_decay_at(decay: float, step: int) -> float:
    """``d_s = min(d, (1 + s) / (10 + s))``: the averaging weight after optimizer step ``s >= 1``."""
    return min(float(decay), (1.0 + step) / (10.0 + step))


@torch.no_grad()
def update_ema(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    """``theta_ema <- decay * theta_ema + (1 - decay) * theta`` per parameter (in place); buffers copied."""
    for e, p in zip(ema.parameters(), model.parameters()):
        e.lerp_(p.detach().to(e.dtype), 1.0 - decay)
    for e, b in zip(ema.buffers(), model.buffers()):
        e.copy_(b)
