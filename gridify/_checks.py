"""Input validation shared by ops and modules.

Every check raises :class:`ValueError` with a message that names the argument, the problem
and, for batched point clouds, the index of the offending cloud, so users never see a bare
traceback from deep inside torch.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor


def fail(where: str, msg: str) -> None:
    raise ValueError(f"{where}: {msg}")


def check_tensor(t: object, name: str, where: str) -> Tensor:
    if not isinstance(t, Tensor):
        fail(where, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t  # type: ignore[return-value]


def check_float(t: Tensor, name: str, where: str) -> None:
    if not t.is_floating_point():
        fail(where, f"{name} must be a floating-point tensor, got dtype {t.dtype}")


def check_point_pair(x: object, y: object, where: str) -> Tuple[Tensor, Tensor]:
    """Validate two point sets of one dimension on one device (the ``x``/``y`` of a search)."""
    x = check_tensor(x, "x", where)
    y = check_tensor(y, "y", where)
    for name, t in (("x", x), ("y", y)):
        if t.dim() != 2:
            fail(where, f"{name} must have shape [num_points, dim], got {tuple(t.shape)}")
        check_float(t, name, where)
    if x.size(1) != y.size(1):
        fail(where, f"x and y must have the same dimension, got {x.size(1)} and {y.size(1)}")
    if x.device != y.device:
        fail(where, f"x is on {x.device} but y is on {y.device}")
    return x, y


def cloud_of(batch: Optional[Tensor], row: int) -> int:
    return 0 if batch is None else int(batch[row])


def check_finite(t: Tensor, name: str, where: str, batch: Optional[Tensor] = None) -> None:
    """Raise if ``t`` holds NaN or Inf, naming the first offending row's cloud."""
    bad = ~torch.isfinite(t)
    if bad.any():
        rows = bad.reshape(t.size(0), -1).any(1).nonzero().flatten()
        row = int(rows[0])
        what = "NaN" if torch.isnan(t[row]).any() else "Inf"
        fail(where, f"{name} contains {what} values ({rows.numel()} rows affected); first in cloud "
                    f"{cloud_of(batch, row)} at row {row}")


def check_batch(batch: Optional[Tensor], num_rows: int, where: str, name: str = "batch",
                num_clouds: Optional[int] = None, device: Optional[torch.device] = None,
                allow_empty: bool = False) -> Tuple[Tensor, int, Tensor]:
    """Validate a PyG-style batch vector and return ``(batch, num_clouds, counts)``.

    The vector must be 1-D, integer, of length ``num_rows``, non-negative and sorted (all rows of
    cloud 0, then cloud 1, ...). Every cloud in ``range(num_clouds)`` must be non-empty.
    """
    if batch is None:
        batch = torch.zeros(num_rows, dtype=torch.long, device=device)
    check_tensor(batch, name, where)
    if batch.dim() != 1 or batch.numel() != num_rows:
        fail(where, f"{name} must be a 1-D tensor with one entry per point ({num_rows}), "
                    f"got shape {tuple(batch.shape)}")
    if batch.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
        fail(where, f"{name} must be an integer tensor, got dtype {batch.dtype}")
    if device is not None and batch.device != device:
        fail(where, f"{name} is on {batch.device} but the points are on {device}")
    batch = batch.long()
    if num_rows == 0:
        n = int(num_clouds or 0)
        if n > 0:
            fail(where, "cloud 0 is empty (no points at all); every cloud needs at least one point")
        return batch, n, batch.new_zeros(0)
    if int(batch.min()) < 0:
        fail(where, f"{name} holds negative cloud indices")
    if num_rows > 1 and bool((batch[1:] < batch[:-1]).any()):
        row = int((batch[1:] < batch[:-1]).nonzero()[0]) + 1
        fail(where, f"{name} must be sorted (all points of cloud 0, then cloud 1, ...); it decreases at "
                    f"row {row}")
    n = int(batch[-1]) + 1
    if num_clouds is not None:
        if num_clouds < n:
            fail(where, f"{name} refers to cloud {n - 1} but num_clouds={num_clouds}")
        n = int(num_clouds)
    counts = torch.bincount(batch, minlength=n)
    if not allow_empty and bool((counts == 0).any()):
        empty = (counts == 0).nonzero().flatten().tolist()
        fail(where, f"cloud {empty[0]} is empty (no points); empty clouds: {empty[:10]}")
    return batch, n, counts


def check_points(pos: object, where: str, name: str = "pos", dim: int = 3) -> Tensor:
    """``pos`` must be a floating tensor of shape [N, dim]."""
    pos = check_tensor(pos, name, where)
    if pos.dim() != 2 or pos.size(-1) != dim:
        fail(where, f"{name} must have shape [N, {dim}], got {tuple(pos.shape)}")
    check_float(pos, name, where)
    return pos
