"""Squared distances that neither overflow nor lose the input's precision, for any floating dtype.

Every neighbour search, sampling and interpolation of gridify compares squared distances
``||p - q||^2 = sum_a (p_a - q_a)^2``. Computed in the input dtype this goes wrong silently:
float16 squares overflow beyond a spread of ~256 (and round to 11 bits), float32 squares
overflow beyond ~1e19 and underflow below ~1e-19, float64 squares overflow beyond ~1e154. So
coordinates are first brought into a *working frame*:

    p' = p * 2^-e,      e = the exponent of max |p| (so max |p'| lies in [0.5, 1)),
    ||p' - q'||^2 = ||p - q||^2 * 2^-2e

in the working dtype: float32 for float16, bfloat16 and float32 inputs, float64 for float64
inputs. Scaling by a power of two is exact (no rounding) and every square of the frame lies in
``[0, 4 D]``, so rankings of distances are those of exact arithmetic up to one rounding of the
working dtype; a radius ``r`` is compared as ``r * 2^-e``. When ``max |p|`` already lies where
no square can overflow or underflow (:data:`SAFE_EXPONENTS`) the scale is 1 (no extra pass).

Shapes:
    distance_frame: tensors of any shapes -> the same shapes in the working dtype, and the scale
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor

__all__ = ["working_dtype", "frame_scale", "distance_frame", "SAFE_EXPONENTS"]

#: ``(lo, hi)``: with ``2^lo <= max |p| <= 2^hi`` no square of a difference overflows, and squares
#: of differences at the working precision stay normal numbers, so no scaling is needed
SAFE_EXPONENTS = {torch.float32: (-30, 40), torch.float64: (-400, 400)}


def working_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """float64 when any of ``dtypes`` is float64, else float32."""
    return torch.float64 if torch.float64 in dtypes else torch.float32


def frame_scale(max_abs: float, dtype: torch.dtype = torch.float32) -> float:
    """The power of two ``2^-e`` that maps ``max_abs`` into ``[0.5, 1)``; 1 for 0, non-finite values
    and values already in the safe range of the working ``dtype`` (:data:`SAFE_EXPONENTS`)."""
    if not max_abs > 0 or not math.isfinite(max_abs):
        return 1.0
    lo, hi = SAFE_EXPONENTS[working_dtype(dtype)]
    e = math.frexp(max_abs)[1]
    return 1.0 if lo <= e <= hi else math.ldexp(1.0, -e)


def distance_frame(*tensors: Tensor) -> Tuple[Tuple[Tensor, ...], float]:
    """``tensors`` in the working dtype, all scaled by one exact power of two, and that scale.

    The scale maps the largest absolute value of all ``tensors`` into ``[0.5, 1)`` (see
    :func:`frame_scale`); empty tensors are allowed. Scaling and conversion do not change which
    of two distances is smaller. The results carry no gradient.
    """
    work = working_dtype(*(t.dtype for t in tensors))
    out = tuple(t.detach().to(work) for t in tensors)
    max_abs = max((float(t.abs().max()) for t in out if t.numel()), default=0.0)
    scale = frame_scale(max_abs, work)
    if scale != 1.0:
        out = tuple(t * scale for t in out)
    return out, scale
