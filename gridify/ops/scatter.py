"""Scatter aggregation: reduce rows of ``src`` into ``dim_size`` buckets given by ``index``.

    out[i] = REDUCE_{e : index[e] = i} src[e]          REDUCE in {sum, mean, max, min}

Buckets that receive nothing are 0 for every reduction. ``torch_scatter`` is used when it is
installed (and ``backend="auto"``); otherwise native ``Tensor.index_add_`` /
``Tensor.scatter_reduce_`` do the same, with gradients.

Shapes:
    src: [E, *], index: [E] (int64), output: [dim_size, *]
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .. import _optional
from .._checks import check_choice, fail

REDUCTIONS = ("sum", "mean", "max", "min")
BACKENDS = ("auto", "torch_scatter", "torch")


def _check(src: Tensor, index: Tensor, dim_size: Optional[int], reduce: str, backend: str) -> int:
    where = "scatter"
    if not isinstance(src, Tensor) or not isinstance(index, Tensor):
        fail(where, "src and index must be torch.Tensors")
    check_choice(where, "reduce", reduce, REDUCTIONS, unknown=True)
    check_choice(where, "backend", backend, BACKENDS, unknown=True)
    if index.dim() != 1 or index.dtype not in (torch.int64, torch.int32):
        fail(where, f"index must be a 1-D integer tensor, got shape {tuple(index.shape)} and dtype {index.dtype}")
    if src.dim() == 0 or src.size(0) != index.numel():
        fail(where, f"src has {src.size(0) if src.dim() else 0} rows but index has {index.numel()} entries")
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() else 0
    elif index.numel() and (int(index.min()) < 0 or int(index.max()) >= dim_size):
        fail(where, f"index values must lie in [0, {dim_size}), got [{int(index.min())}, {int(index.max())}]")
    return dim_size


def scatter(src: Tensor, index: Tensor, dim_size: Optional[int] = None, reduce: str = "sum",
            backend: str = "auto") -> Tensor:
    """Reduce rows of ``src`` (dim 0) into ``dim_size`` buckets given by ``index``.

    Validates its arguments, then runs :func:`scatter_unchecked`.
    """
    dim_size = _check(src, index, dim_size, reduce, backend)
    return scatter_unchecked(src, index, dim_size, reduce, backend)


def scatter_unchecked(src: Tensor, index: Tensor, dim_size: int, reduce: str = "sum", backend: str = "auto") -> Tensor:
    """:func:`scatter` without validation: ``index`` holds values in ``[0, dim_size)``, one per row of ``src``."""
    index = index.long()
    use_ext = backend == "torch_scatter" or (backend == "auto" and _optional.WITH_TORCH_SCATTER)
    if use_ext:
        if not _optional.WITH_TORCH_SCATTER:
            fail("scatter", "backend='torch_scatter' requested but torch_scatter is not installed")
        ts = _optional.torch_scatter
        if reduce in ("max", "min"):
            return getattr(ts, f"scatter_{reduce}")(src, index, dim=0, dim_size=dim_size)[0]
        return ts.scatter(src, index, dim=0, dim_size=dim_size, reduce=reduce)
    return _scatter_native(src, index, dim_size, reduce)


def _scatter_native(src: Tensor, index: Tensor, dim_size: int, reduce: str) -> Tensor:
    shape = (dim_size,) + tuple(src.shape[1:])
    if reduce in ("sum", "mean"):
        out = src.new_zeros(shape).index_add_(0, index, src)
        if reduce == "mean":
            count = torch.bincount(index, minlength=dim_size).clamp_(min=1).to(src.dtype)
            out = out / count.view((-1,) + (1,) * (src.dim() - 1))
        return out
    idx = index.view((-1,) + (1,) * (src.dim() - 1)).expand_as(src)
    out = src.new_zeros(shape).scatter_reduce_(0, idx, src, reduce="amax" if reduce == "max" else "amin",
                                               include_self=False)
    return out


def scatter_reference(src: Tensor, index: Tensor, dim_size: int, reduce: str = "sum") -> Tensor:
    """Loop-based reference of :func:`scatter` for tests (slow, obviously correct)."""
    out = src.new_zeros((dim_size,) + tuple(src.shape[1:]))
    for i in range(dim_size):
        rows = src[index == i]
        if rows.numel() == 0:
            continue
        if reduce == "sum":
            out[i] = rows.sum(0)
        elif reduce == "mean":
            out[i] = rows.mean(0)
        elif reduce == "max":
            out[i] = rows.max(0).values
        else:
            out[i] = rows.min(0).values
    return out
