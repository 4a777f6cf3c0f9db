"""Input validation shared by the whole library: the one place where arguments are checked.

Every check raises :class:`ValueError` with a message that names the entry point (``where``),
the argument, the problem and, for batched point clouds, the index of the offending cloud, so
users never see a bare traceback from deep inside torch.

The convention: a public function or module validates its arguments once, with these helpers,
and then calls an unchecked implementation; library code that has already validated its inputs
calls the unchecked implementations directly, so a nested call inside a forward pass never
re-validates (no repeated host synchronisation on a GPU).

Scalar hyper-parameters: :func:`check_int` / :func:`check_positive_int` (integers, ``bool``
refused), :func:`check_number` (finite real numbers with a lower bound), :func:`check_fraction`, :func:`check_probability`
and :func:`check_choice`. Tensors: :func:`check_tensor`, :func:`check_float`, :func:`check_points`,
:func:`check_point_pair`, :func:`check_batch`, :func:`check_finite`.
"""
from __future__ import annotations

import math
from typing import Any, NoReturn, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor


def fail(where: str, msg: str) -> NoReturn:
    raise ValueError(f"{where}: {msg}")


def is_int(value: Any) -> bool:
    """A Python or NumPy integer, not a ``bool``."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(where: str, name: str, value: Any, minimum: int = 1, allow_none: bool = False,
              as_bound: bool = False) -> Optional[int]:
    """``value`` as an ``int >= minimum`` (or None when ``allow_none``); else ValueError.

    The message says "a positive integer" (``minimum=1``), "a non-negative integer" (0) or
    "an integer >= m" (any minimum, or always with ``as_bound``), with " or None" when None
    is allowed.
    """
    if value is None and allow_none:
        return None
    if not is_int(value) or value < minimum:
        words = {} if as_bound else {1: "a positive integer", 0: "a non-negative integer"}
        what = words.get(minimum, f"an integer >= {minimum}")
        fail(where, f"{name} must be {what}{' or None' if allow_none else ''}, got {value!r}")
    return int(value)


def check_positive_int(where: str, **values: Any) -> None:
    """Every keyword value must be a positive integer (``check_positive_int("Conv", channels=c)``)."""
    for name, value in values.items():
        check_int(where, name, value, 1)


def check_number(where: str, name: str, value: Any, minimum: float = 0.0, strict: bool = True,
                 allow_none: bool = False) -> Optional[float]:
    """``value`` as a finite ``float`` above ``minimum`` (``> minimum`` when ``strict``, else ``>=``).

    With ``minimum=0`` the message says "a positive finite number" (strict) or "a non-negative
    finite number"; otherwise "a finite number > m" / ">= m".
    """
    if value is None and allow_none:
        return None
    ok = (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
          and math.isfinite(value) and (value > minimum if strict else value >= minimum))
    if not ok:
        if minimum == 0:
            what = "a positive finite number" if strict else "a non-negative finite number"
        else:
            what = f"a finite number {'>' if strict else '>='} {minimum:g}"
        fail(where, f"{name} must be {what}{' or None' if allow_none else ''}, got {value!r}")
    return float(value)


def check_fraction(where: str, name: str, value: Any) -> float:
    """``value`` as a finite number in ``(0, 1]`` (a fraction of something to keep)."""
    ok = (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
          and math.isfinite(value) and 0.0 < value <= 1.0)
    if not ok:
        fail(where, f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def check_probability(where: str, name: str, value: Any, include_one: bool = False) -> float:
    """``value`` as a probability in ``[0, 1)`` (``[0, 1]`` with ``include_one``)."""
    ok = (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
          and math.isfinite(value) and 0.0 <= value and (value <= 1.0 if include_one else value < 1.0))
    if not ok:
        fail(where, f"{name} must be a probability in [0, {'1]' if include_one else '1)'}, got {value!r}")
    return float(value)


def check_choice(where: str, name: str, value: Any, choices: Sequence[Any], unknown: bool = False) -> Any:
    """``value`` must be one of ``choices`` (shown as given: a tuple or a list).

    The message reads "name must be one of ..., got v", or with ``unknown`` (for names of
    backends and reductions) "unknown name v; expected one of ...".
    """
    try:
        ok = value in choices
    except TypeError:  # unhashable value against a set
        ok = False
    if not ok:
        fail(where, f"unknown {name} {value!r}; expected one of {choices}" if unknown
             else f"{name} must be one of {choices}, got {value!r}")
    return value


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
