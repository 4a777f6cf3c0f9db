"""Normalization helpers for grid networks.

:class:`ChannelLayerNorm`: ``y = (x - mu_c) / sigma_c * gamma + beta`` over the channels of every
grid node. :func:`recalibrate_batchnorm`: running statistics re-estimated as the cumulative
average ``mu = 1/n sum_b mu_b`` over ``n`` batches; all or nothing (a failing batch leaves every
statistic as it was).

Shapes:
    ChannelLayerNorm: ``[B, C, ...] -> [B, C, ...]``
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

import torch
from torch import Tensor, nn

from .._checks import check_parameters, check_positive_int, checked_forward
from .inputs import check_channel_input
from .state import all_or_nothing


class ChannelLayerNorm(nn.Module):
    r"""LayerNorm over the channels of every grid node: ``y = (x - mu_c) / sigma_c * gamma + beta``.

    Gridification's output scale depends on the data and drifts quickly early in training; a
    per-node normalization without running statistics keeps train and eval mode consistent.

    Shapes:
        ``[B, C, R, R, R] -> [B, C, R, R, R]``
    """

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        check_positive_int("ChannelLayerNorm", channels=channels)
        check_parameters("ChannelLayerNorm", f"channels={channels}", 2 * channels)
        self.norm = nn.LayerNorm(channels, eps=eps)

    def reset_parameters(self) -> None:
        self.norm.reset_parameters()

    @checked_forward(check_channel_input)
    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x.movedim(1, -1)).movedim(-1, 1)


@torch.no_grad()
def recalibrate_batchnorm(
    model: nn.Module, batches: Iterable[Any], forward: Optional[Callable[[nn.Module, Any], Any]] = None
) -> int:
    """Re-estimate the running statistics of every BatchNorm in ``model`` from ``batches``.

    Running statistics lag behind the weights after short or fast training, and they change when
    a model is run at another grid resolution (:meth:`~gridify.models.GridifiedModel.set_resolution`). This resets them and
    averages the batch statistics over ``batches`` (cumulative average, no gradient, no weight
    changes), then restores the model's train/eval mode. ``forward(model, batch)`` defaults to
    ``model(*batch)`` for tuples and ``model(batch)`` otherwise. Returns the number of batches used.

    All or nothing: when a batch fails (or ``batches`` is empty) every statistic, momentum and
    train/eval flag is restored before the error propagates.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"recalibrate_batchnorm: model must be a torch.nn.Module, got {type(model).__name__}")
    if forward is not None and not callable(forward):
        raise ValueError(f"recalibrate_batchnorm: forward must be callable or None, got {forward!r}")
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return 0
    with all_or_nothing(model):
        was_training = model.training
        momenta = [bn.momentum for bn in bns]
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None  # cumulative moving average
        model.train()
        n = _run_batches(model, batches, forward)
        for bn, mom in zip(bns, momenta):
            bn.momentum = mom
        model.train(was_training)
        if n == 0:
            raise ValueError("recalibrate_batchnorm: batches was empty; pass at least one batch")
    return n


def _run_batches(model: nn.Module, batches: Iterable[Any], forward: Optional[Callable[[nn.Module, Any], Any]]) -> int:
    n = 0
    for batch in batches:
        if forward is not None:
            forward(model, batch)
        elif isinstance(batch, (tuple, list)):
            model(*batch)
        else:
            model(batch)
        n += 1
    return n
