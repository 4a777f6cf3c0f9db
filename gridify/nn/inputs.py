"""Input conventions shared by the point-cloud modules (gridification and the point baselines).

Point clouds come PyG-style (``pos [N, 3]``, features ``x [N, F]``, a sorted ``batch [N]``), as a
PyG ``Data``/``Batch`` object with those attributes, or dense (``pos [B, N, 3]``, ``x [B, N, F]``).

Shapes:
    parse_points: any of the above -> ``pos [N, 3]``, ``x [N, F]``, ``batch [N]`` (or None), and
    ``dense_shape = (B, N)`` for dense input.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
from torch import Tensor, nn

from .._checks import check_float, check_tensor, fail

__all__ = ["category_onehot", "module_dtype", "parse_points"]


def module_dtype(module: nn.Module) -> torch.dtype:
    """The floating dtype of a module's first parameter (inputs are cast to it)."""
    return next(module.parameters()).dtype


def parse_points(where: str, pos: Any, x: Any, batch: Any, in_channels: Optional[int], dtype: torch.dtype
                 ) -> Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tuple[int, int]]]:
    """Accept PyG-style ``pos [N,3], x [N,F], batch [N]``, a PyG ``Data``/``Batch`` object, or dense
    ``pos [B,N,3], x [B,N,F]``; return ``(pos [N,3], x [N,F], batch or None, dense_shape)``.

    Checks types, shapes, dtypes, devices and the feature count (metadata only: no values are
    read, so nothing synchronises with a GPU); ``x=None`` uses the coordinates. ``batch`` is
    returned as given (validate it with :func:`gridify._checks.check_batch`); dense input gives
    ``dense_shape = (B, N)`` and a generated batch vector. Both tensors are cast to ``dtype``.
    """
    if not isinstance(pos, Tensor) and isinstance(getattr(pos, "pos", None), Tensor):  # PyG Data / Batch
        if x is not None or batch is not None:
            fail(where, "pass either a PyG Data/Batch object or tensors pos, x, batch, not both")
        data = pos
        pos, x, batch = data.pos, getattr(data, "x", None), getattr(data, "batch", None)
    pos = check_tensor(pos, "pos", where)
    check_float(pos, "pos", where)
    dense_shape = None
    if pos.dim() == 3:
        if batch is not None:
            fail(where, "batch must be None when pos is dense [B, N, 3]")
        if pos.size(-1) != 3:
            fail(where, f"pos must have shape [N, 3] or [B, N, 3], got {tuple(pos.shape)}")
        B, N = pos.shape[:2]
        if B == 0 or N == 0:
            fail(where, f"pos holds no points (shape {tuple(pos.shape)}); every cloud needs at least one point")
        dense_shape = (B, N)
        batch = torch.arange(B, device=pos.device).repeat_interleave(N)
        pos = pos.reshape(B * N, 3)
        if x is not None:
            x = check_tensor(x, "x", where)
            if x.dim() != 3 or tuple(x.shape[:2]) != (B, N):
                fail(where, f"x must have shape [{B}, {N}, F] to match pos, got {tuple(x.shape)}")
            x = x.reshape(B * N, x.size(-1))
    elif pos.dim() == 2:
        if pos.size(-1) != 3:
            fail(where, f"pos must have shape [N, 3] or [B, N, 3], got {tuple(pos.shape)}")
        if pos.size(0) == 0:
            fail(where, "pos holds no points; every cloud needs at least one point")
        if x is not None:
            x = check_tensor(x, "x", where)
            if x.dim() != 2 or x.size(0) != pos.size(0):
                fail(where, f"x must have shape [{pos.size(0)}, F] to match pos, got {tuple(x.shape)}")
    else:
        fail(where, f"pos must have shape [N, 3] or [B, N, 3], got {tuple(pos.shape)}")
    if x is None:
        x = pos
    check_float(x, "x", where)
    if x.device != pos.device:
        fail(where, f"x is on {x.device} but pos is on {pos.device}")
    if in_channels is not None and x.size(-1) != in_channels:
        fail(where, f"x has {x.size(-1)} features per point but the module was built with "
                    f"in_channels={in_channels}" + (" (x=None uses the 3 coordinates)" if x is pos else ""))
    return pos.to(dtype), x.to(dtype), batch, dense_shape


def category_onehot(where: str, category, num_categories: int, num_clouds: int, dtype: torch.dtype
                    ) -> Optional[Tensor]:
    """One-hot ``[B, num_categories]`` of the object category (None when the model has none).

    ``category`` must be given exactly when ``num_categories > 0``: a 1-D integer tensor with one
    entry per cloud, each in ``[0, num_categories)``.
    """
    if num_categories:
        if category is None:
            raise ValueError(f"{where}: built with num_categories={num_categories}, so category "
                             f"([B] object category per cloud) is required")
        if not isinstance(category, Tensor) or category.dim() != 1 or category.numel() != num_clouds:
            raise ValueError(f"{where}: category must be a 1-D tensor with one entry per cloud "
                             f"({num_clouds}), got {getattr(category, 'shape', type(category))}")
        if category.is_floating_point() or int(category.min()) < 0 or int(category.max()) >= num_categories:
            raise ValueError(f"{where}: category must hold integers in [0, {num_categories})")
        return nn.functional.one_hot(category.long(), num_categories).to(dtype)
    if category is not None:
        raise ValueError(f"{where}: got category but the model was built with num_categories=0")
    return None
