"""The cloud check every public entry of :mod:`gridify.vis` shares, and the array conversion under it.

:func:`check_cloud` validates a cloud once, at the public entry (:func:`gridify.vis.show`,
:func:`~gridify.vis.touched_nodes`, :func:`~gridify.vis.view_direction`, ...); the code behind the
entries takes the checked ``float64`` array and checks nothing again.

Shapes:
    :func:`to_numpy` any array or tensor -> the same shape as a numpy array (tensors detached, on
    the CPU); :func:`check_cloud` ``[N, 3]`` (numeric, finite, ``N >= 1``) -> ``[N, 3]`` float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import fail


def to_numpy(a: Any) -> np.ndarray:
    """``a`` as a numpy array (a tensor detached and moved to the CPU first)."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def check_cloud(where: str, points: Any, name: str = "points") -> np.ndarray:
    """``points`` as float64 ``[N, 3]``: numeric, ``N >= 1``, finite (else ``fail`` names ``where`` and ``name``)."""
    pos = to_numpy(points)
    if pos.ndim != 2 or pos.shape[1] != 3 or len(pos) == 0 or pos.dtype.kind not in "iuf":
        fail(where, f"{name} must be a numeric array of shape [N, 3] with N >= 1, got shape {pos.shape}")
    pos = pos.astype(np.float64)
    bad = ~np.isfinite(pos).all(1)
    if bad.any():
        fail(
            where,
            f"{name} contain NaN/Inf values ({int(bad.sum())} rows affected); first at row "
            f"{int(np.flatnonzero(bad)[0])}",
        )
    return pos
