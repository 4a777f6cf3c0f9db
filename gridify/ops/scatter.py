"""Scatter aggregation: reduce rows of ``src`` into ``dim_size`` buckets given by ``index``.

    out[i] = REDUCE_{e : index[e] = i} src[e]          REDUCE in {sum, mean, max, min}

Buckets that receive nothing are 0 for every reduction. A max/min whose gradient is needed runs
through ``ScatterExtreme``: ``scatter_reduce`` forward and a backward pass over whole rows
(``index_select`` / ``index_add_`` instead of ``scatter_reduce``'s element-wise gathers and scatters),
with the same gradient, ties sharing it equally. Measured on one core of an AMD EPYC, a 65,536-point
training step of the scene segmenter (torch profiler): the backward of its two max aggregations 242 ms
against 784 ms for ``scatter_reduce``'s autograd; the whole step 1.25x faster (median of 3 interleaved runs). ``torch_scatter`` is used when it is
installed (and ``backend="auto"``); otherwise native ``Tensor.index_add_`` /
``Tensor.scatter_reduce_`` do the same, with gradients. Sums and means of float16/bfloat16
rows are accumulated in float32 and rounded once at the end (a float16 sum overflows beyond
65504 and a bfloat16 count loses integers beyond 256).

:func:`scatter` validates ``src`` (floating or integer, finite), ``index`` (integers in
``[0, dim_size)``, one per row, on ``src``'s device) and ``dim_size`` (a non-negative integer
whose output fits the allocation limit of :func:`gridify._checks.check_alloc`), then runs
:func:`scatter_unchecked`.

:func:`scatter_fixed` is the same reduction in fixed shapes (traceable: what the exported
(de-)gridification runs), for rows that come in two kinds: every bucket ``d < D`` has ``t`` rows of its
own, ``own [D, t, H]``, and further rows ``extra [E, H]`` go to the buckets ``index [E]``; masks drop rows
(a duplicate edge of the fixed-shape graph):

    out[d] = REDUCE( {own[d, s] : own_keep[d, s]}  U  {extra[e] : index[e] = d, extra_keep[e]} )

with ``REDUCE`` in {sum, mean, max}, written without ``bincount`` or data-dependent shapes: the own rows
reduce along their axis, the extra rows are added with ``index_add`` (sum, mean) or ``scatter_reduce``
(max; exported as ``ScatterND`` on whole rows by :func:`gridify.export.tracing.scatter_reduce_rows`).

Shapes:
    src: [E, *], index: [E] (int64), output: [dim_size, *];
    scatter_fixed: own [D, t, H] (own_keep [D, t]), extra [E, H] (extra_keep [E]), index [E] -> [D, H]
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from .. import _optional
from .._checks import (
    INTEGER_DTYPES,
    check_alloc,
    check_choice,
    check_finite,
    check_float,
    check_index,
    check_int,
    check_tensor,
    fail,
)

REDUCTIONS = ("sum", "mean", "max", "min")
BACKENDS = ("auto", "torch_scatter", "torch")
#: dtypes whose sums are accumulated in float32
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype sums of ``dtype`` values are accumulated in: float32 for float16/bfloat16, else ``dtype``."""
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def _check(src: Tensor, index: Tensor, dim_size: Optional[int], reduce: str, backend: str) -> int:
    where = "scatter"
    src = check_tensor(where, "src", src)
    index = check_tensor(where, "index", index)
    check_choice(where, "reduce", reduce, REDUCTIONS, unknown=True)
    check_choice(where, "backend", backend, BACKENDS, unknown=True)
    if index.dim() != 1 or index.dtype not in INTEGER_DTYPES:
        fail(where, f"index must be a 1-D integer tensor, got shape {tuple(index.shape)} and dtype {index.dtype}")
    if src.dim() == 0 or src.size(0) != index.numel():
        fail(where, f"src has {src.size(0) if src.dim() else 0} rows but index has {index.numel()} entries")
    if src.is_floating_point():
        check_float(where, "src", src)
        check_finite(where, "src", src, dims=("row",))
    elif src.dtype not in INTEGER_DTYPES:
        fail(where, f"src must be a floating-point or integer tensor, got dtype {src.dtype}")
    elif reduce == "mean":
        fail(where, f"reduce='mean' needs a floating-point src, got dtype {src.dtype}")
    if index.device != src.device:
        fail(where, f"index is on {index.device} but src is on {src.device}")
    if dim_size is None:
        if index.numel() and int(index.min()) < 0:
            bad = int((index < 0).nonzero()[0])
            fail(where, f"index values must be non-negative bucket numbers, got {int(index[bad])} at position {bad}")
        dim_size = int(index.max()) + 1 if index.numel() else 0
    else:
        dim_size = check_int(where, "dim_size", dim_size, 0)
        check_index(where, "index", index, dim_size)
    row = math.prod(src.shape[1:]) * src.element_size()
    check_alloc(
        where,
        f"dim_size={dim_size} (an output of [{dim_size}, {', '.join(map(str, src.shape[1:])) or '-'}] {src.dtype})",
        dim_size * (row + 8),
    )
    return dim_size


def scatter(
    src: Tensor, index: Tensor, dim_size: Optional[int] = None, reduce: str = "sum", backend: str = "auto"
) -> Tensor:
    """Reduce rows of ``src`` (dim 0) into ``dim_size`` buckets given by ``index``.

    ``dim_size=None`` uses ``max(index) + 1``. Validates its arguments, then runs
    :func:`scatter_unchecked`.
    """
    dim_size = _check(src, index, dim_size, reduce, backend)
    return scatter_unchecked(src, index, dim_size, reduce, backend)


def scatter_unchecked(src: Tensor, index: Tensor, dim_size: int, reduce: str = "sum", backend: str = "auto") -> Tensor:
    """:func:`scatter` without validation: ``index`` holds values in ``[0, dim_size)``, one per row of ``src``."""
    if reduce in ("sum", "mean") and src.dtype in _LOW_PRECISION:
        return scatter_unchecked(src.float(), index, dim_size, reduce, backend).to(src.dtype)
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


class ScatterExtreme(torch.autograd.Function):
    r"""``out[i] = max_{e : index[e] = i} src[e]`` (or min; empty buckets 0) with the gradient

        dL/dsrc[e] = [src[e] == out[index[e]]] dL/dout[index[e]] / #{e' : index[e'] = index[e], src[e'] == out[index[e]]}

    (ties share the gradient equally, as ``scatter_reduce``'s autograd does), computed row-wise.

    Shapes:
        src [E, *], index [E] int64 -> [dim_size, *]
    """

    @staticmethod
    def forward(ctx: Any, src: Tensor, index: Tensor, dim_size: int, reduce: str) -> Tensor:
        out = _extreme_native(src, index, dim_size, reduce)
        ctx.save_for_backward(src, index, out)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> Tuple[Optional[Tensor], None, None, None]:
        src, index, out = ctx.saved_tensors
        winner = out.index_select(0, index).eq_(src)  # 1.0 / 0.0 in src's dtype: no bool -> float pass
        count = torch.zeros_like(out).index_add_(0, index, winner).clamp_(min=1)
        grad = (grad_out / count).index_select(0, index).mul_(winner)
        return grad, None, None, None


def use_row_extreme(src: Tensor, reduce: str) -> bool:
    """Whether a native max/min scatter runs through ``ScatterExtreme``: a gradient is needed and
    no exporter is tracing (the custom function has no ONNX form; the exporter traces without one)."""
    if reduce not in ("max", "min") or not (src.requires_grad and torch.is_grad_enabled()):
        return False
    return not (torch.jit.is_tracing() or torch.onnx.is_in_onnx_export())


def _scatter_native(src: Tensor, index: Tensor, dim_size: int, reduce: str) -> Tensor:
    if use_row_extreme(src, reduce):
        return ScatterExtreme.apply(src, index, dim_size, reduce)
    if reduce in ("sum", "mean"):
        out = src.new_zeros((dim_size,) + tuple(src.shape[1:])).index_add_(0, index, src)
        if reduce == "mean":
            count = torch.bincount(index, minlength=dim_size).clamp_(min=1).to(src.dtype)
            out = out / count.view((-1,) + (1,) * (src.dim() - 1))
        return out
    return _extreme_native(src, index, dim_size, reduce)


def _extreme_native(src: Tensor, index: Tensor, dim_size: int, reduce: str) -> Tensor:
    """max/min of the rows of ``src`` per bucket with ``scatter_reduce_`` (empty buckets 0)."""
    idx = index.view((-1,) + (1,) * (src.dim() - 1)).expand_as(src)
    return src.new_zeros((dim_size,) + tuple(src.shape[1:])).scatter_reduce_(
        0, idx, src, reduce="amax" if reduce == "max" else "amin", include_self=False
    )


#: the reductions of :func:`scatter_fixed`
FIXED_REDUCTIONS = ("sum", "mean", "max")


def scatter_fixed(
    own: Tensor,
    extra: Tensor,
    index: Tensor,
    reduce: str = "sum",
    own_keep: Optional[Tensor] = None,
    extra_keep: Optional[Tensor] = None,
) -> Tensor:
    """Reduce every bucket's own rows ``own [D, t, H]`` (``t >= 1``) together with the rows ``extra [E, H]``
    that ``index [E]`` sends to it, masks dropping rows (module docstring). Validates its arguments, then
    runs :func:`scatter_fixed_unchecked`. ``[D, H]``; a bucket whose rows are all dropped is 0."""
    where = "scatter_fixed"
    own, extra, index = (check_tensor(where, n, t) for n, t in (("own", own), ("extra", extra), ("index", index)))
    check_choice(where, "reduce", reduce, FIXED_REDUCTIONS, unknown=True)
    if own.dim() != 3 or own.size(1) == 0:
        fail(where, f"own must have shape [D, t, H] with t >= 1, got {tuple(own.shape)}")
    if extra.dim() != 2 or extra.size(1) != own.size(2) or index.dim() != 1 or index.numel() != extra.size(0):
        fail(
            where,
            f"extra must have shape [E, H] = [E, {own.size(2)}] and index [E], got {tuple(extra.shape)} and "
            f"{tuple(index.shape)}",
        )
    for name, t in (("own", own), ("extra", extra)):
        check_float(where, name, t)
        if t.dtype != own.dtype or t.device != own.device:
            fail(where, f"{name} must have own's dtype and device ({own.dtype} on {own.device}), got {t.dtype}")
        check_finite(where, name, t.reshape(t.size(0), -1), dims=("row",))
    index = check_index(where, "index", index, own.size(0), device=own.device)
    for name, mask, shape in (("own_keep", own_keep, own.shape[:2]), ("extra_keep", extra_keep, index.shape)):
        if mask is not None and (not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != shape):
            fail(where, f"{name} must be None or a bool tensor {list(shape)}, got {getattr(mask, 'shape', mask)!r}")
    return scatter_fixed_unchecked(own, extra, index, reduce, own_keep, extra_keep)


def scatter_fixed_unchecked(
    own: Tensor,
    extra: Tensor,
    index: Tensor,
    reduce: str = "sum",
    own_keep: Optional[Tensor] = None,
    extra_keep: Optional[Tensor] = None,
) -> Tensor:
    """:func:`scatter_fixed` on validated inputs (what the exported (de-)gridification traces). Without masks the
    max is ``max_s own[d, s]`` folded with ``scatter_reduce(amax)`` of the extra rows; a mask turns the rows it
    drops into ``-inf`` first (and a bucket left without rows into 0)."""
    H = own.size(-1)
    if reduce == "max":
        if own_keep is not None:
            own = own.masked_fill(~own_keep.unsqueeze(-1), float("-inf"))
        if extra_keep is not None:
            extra = extra.masked_fill(~extra_keep.unsqueeze(-1), float("-inf"))
        out = own.amax(1).scatter_reduce(0, index.unsqueeze(-1).expand(-1, H), extra, "amax")
        if own_keep is None and extra_keep is None:  # every bucket has t >= 1 rows
            return out
        return out.masked_fill(out == float("-inf"), 0.0)
    ok = torch.ones(own.shape[:2], dtype=own.dtype, device=own.device) if own_keep is None else own_keep.to(own.dtype)
    ek = (
        torch.ones(extra.size(0), dtype=extra.dtype, device=extra.device)
        if extra_keep is None
        else extra_keep.to(extra.dtype)
    )
    out = (own * ok.unsqueeze(-1)).sum(1).index_add(0, index, extra * ek.unsqueeze(-1))
    if reduce == "mean":
        out = out / ok.sum(1).index_add(0, index, ek).clamp(min=1).unsqueeze(-1)
    return out


def scatter_reference(src: Tensor, index: Tensor, dim_size: int, reduce: str = "sum") -> Tensor:
    """Loop-based reference of :func:`scatter` for tests (slow, obviously correct).

    Floating rows are reduced in float64 and rounded once to ``src``'s dtype.
    """
    out = src.new_zeros((dim_size,) + tuple(src.shape[1:]))
    work = src.double() if src.is_floating_point() else src
    for i in range(dim_size):
        rows = work[index == i]
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
