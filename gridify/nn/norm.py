"""Normalization helpers for grid networks."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import torch
from torch import Tensor, nn


class ChannelLayerNorm(nn.Module):
    r"""LayerNorm over the channels of every grid node: ``y = (x - mu_c) / sigma_c * gamma + beta``.

    Gridification's output scale depends on the data and drifts quickly early in training; a
    per-node normalization without running statistics keeps train and eval mode consistent.

    Shapes:
        ``[B, C, R, R, R] -> [B, C, R, R, R]``
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=eps)

    def reset_parameters(self) -> None:
        self.norm.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x.movedim(1, -1)).movedim(-1, 1)


@torch.no_grad()
def recalibrate_batchnorm(model: nn.Module, batches: Iterable[Any],
                          forward: Optional[Callable[[nn.Module, Any], Any]] = None) -> int:
    """Re-estimate the running statistics of every BatchNorm in ``model`` from ``batches``.

    Running statistics lag behind the weights after short or fast training, and they change when
    a model is run at another grid resolution (:meth:`set_resolution`). This resets them and
    averages the batch statistics over ``batches`` (cumulative average, no gradient, no weight
    changes), then restores the model's train/eval mode. ``forward(model, batch)`` defaults to
    ``model(*batch)`` for tuples and ``model(batch)`` otherwise. Returns the number of batches used.
    """
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return 0
    was_training = model.training
    momenta = [bn.momentum for bn in bns]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative moving average
    model.train()
    n = 0
    try:
        for batch in batches:
            if forward is not None:
                forward(model, batch)
            elif isinstance(batch, (tuple, list)):
                model(*batch)
            else:
                model(batch)
            n += 1
    finally:
        for bn, mom in zip(bns, momenta):
            bn.momentum = mom
        model.train(was_training)
    if n == 0:
        raise ValueError("recalibrate_batchnorm: batches was empty; pass at least one batch")
    return n
