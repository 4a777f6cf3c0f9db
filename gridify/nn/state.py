"""All-or-nothing updates of modules: a failed call leaves a model exactly as it was.

    after a block that raises:   state(module) == state(module) before the block

where the state of a module is, for it and every sub-module, its attributes (train/eval flag,
BatchNorm momentum, grids and resolutions, caches), its buffer values (BatchNorm running
statistics, base resolutions, flags) and, on request, its parameter values. On success the
changes are kept. :func:`evaluating` runs a block in eval mode and restores every module's
train/eval flag afterwards, whatever happens.

Shapes:
    no tensors of their own; buffers and parameters keep their shapes.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List, Tuple

import torch
from torch import Tensor, nn

__all__ = ["all_or_nothing", "evaluating"]


def _attributes(module: nn.Module) -> Dict[str, Any]:
    """A copy of ``vars(module)`` one level deep (dicts such as ``_buffers`` and caches, and sets, copied)."""
    return {k: (type(v)(v) if isinstance(v, (dict, set)) else v) for k, v in vars(module).items()}


def _values(tensors: Dict[str, Any]) -> Dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in tensors.items() if isinstance(v, Tensor)}


@contextlib.contextmanager
def all_or_nothing(module: nn.Module, *, parameters: bool = False) -> Iterator[None]:
    """Undo every change to ``module`` made inside the block if the block raises, then re-raise.

    Restores the attributes and buffer values of ``module`` and all its sub-modules (and the
    parameter values with ``parameters=True``). Costs one copy of the buffers (and parameters).
    """
    saved: List[Tuple[nn.Module, Dict[str, Any], Dict[str, Tensor], Dict[str, Tensor]]] = [
        (m, _attributes(m), _values(m._buffers), _values(m._parameters) if parameters else {}) for m in module.modules()
    ]
    try:
        yield
    except BaseException:
        with torch.no_grad():
            for m, attrs, buffers, params in saved:
                vars(m).clear()
                vars(m).update(attrs)
                for store, values in ((m._buffers, buffers), (m._parameters, params)):
                    for name, value in values.items():
                        current = store.get(name)
                        if current is not None and current.shape == value.shape:
                            current.copy_(value)
                        else:
                            store[name] = (
                                value
                                if store is m._buffers
                                else nn.Parameter(
                                    value, requires_grad=bool(current is not None and current.requires_grad)
                                )
                            )
        raise


@contextlib.contextmanager
def evaluating(module: nn.Module) -> Iterator[None]:
    """Run the block with ``module`` in eval mode; every sub-module's flag is restored afterwards."""
    flags = [(m, m.training) for m in module.modules()]
    if any(flag for _, flag in flags):  # eval() is not free: some modules drop caches on a mode change
        module.eval()
    try:
        yield
    finally:
        for m, flag in flags:
            m.training = flag
