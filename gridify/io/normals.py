r"""Repair of per-point normals read from files: :func:`repair_normals`.

Some datasets store placeholder or broken normals (the ``(1, 1, 1)`` rows of
``modelnet40_normal_resampled``, NaNs); each invalid one is replaced by the normal of the
nearest point whose normal is valid:

    valid_j = isfinite(n_j) and | ||n_j|| - 1 | <= tol
    out_j   = n_j / ||n_j||                                   if valid_j
    out_j   = out_m(j),  m(j) = argmin_{l valid} ||p_j - p_l||  otherwise (the lowest ``l`` among ties)

The nearest valid point is :func:`gridify.ops.knn`'s (``k = 1``, in float64): the neighbour search
lives in ``ops`` alone, which is why ``io`` sits above ``ops`` in the layers.
:func:`repair_normals_reference` is the loop over the invalid rows that the tests compare with.

Shapes:
    points ``[N, 3]``, normals ``[N, 3]`` -> ``[N, 3]`` float32 unit normals.
"""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np
import torch

from .._checks import check_number, fail
from ..ops.knn import knn

__all__ = ["repair_normals", "repair_normals_reference"]

_WHERE = "repair_normals"


def _real(name: str, arr: np.ndarray) -> None:
    """Refuse strings, objects, complex and booleans before numpy's cast raises or makes 0/1 numbers."""
    if arr.dtype.kind not in "iuf":
        fail(_WHERE, f"{name} must hold real numbers, got dtype {arr.dtype}")


def _check(points: Any, normals: Any, tol: Any) -> Tuple[np.ndarray, np.ndarray, float]:
    """Both arrays real ``[N, 3]`` of one ``N``, the points finite, ``tol`` a finite number >= 0."""
    pts = np.asarray(points)
    if pts.ndim != 2 or pts.shape[1] != 3:
        fail(_WHERE, f"points must have shape [N, 3], got {pts.shape}")
    _real("points", pts)
    nrm = np.asarray(normals)
    if nrm.shape != pts.shape:
        fail(_WHERE, f"normals must have the shape of points, [{len(pts)}, 3], got {nrm.shape}")
    _real("normals", nrm)
    pts = pts.astype(np.float64)
    bad = ~np.isfinite(pts).all(axis=1)
    if bad.any():
        fail(
            _WHERE,
            f"points contain NaN or Inf values ({int(bad.sum())} rows affected); first at row {int(np.argmax(bad))}",
        )
    tol = check_number(_WHERE, "tol", tol, strict=False)
    return pts, nrm.astype(np.float64), float(tol)


def _unit_where_valid(normals: np.ndarray, tol: float) -> Tuple[np.ndarray, np.ndarray]:
    """The valid rows' unit normals (zeros elsewhere) and the mask of valid rows."""
    with np.errstate(over="ignore", invalid="ignore"):
        norm = np.linalg.norm(normals, axis=1)
    good = np.isfinite(norm) & (np.abs(norm - 1.0) <= tol)
    out = np.zeros_like(normals)
    out[good] = normals[good] / norm[good, None]
    return out, good


def repair_normals(points: np.ndarray, normals: np.ndarray, tol: float = 0.1) -> np.ndarray:
    """Replace invalid normals with the normal of the nearest point whose normal is valid.

    A normal is invalid when it is not finite or its norm differs from 1 by more than
    ``tol`` (e.g. the ``(1, 1, 1)`` placeholders of ``modelnet40_normal_resampled``).
    Valid normals are renormalized to unit length. A ``ValueError`` names a wrong shape, a
    non-finite point, a negative ``tol`` or a cloud without any valid normal.

    Shapes:
        points: ``[N, 3]``; normals: ``[N, 3]``; returns ``[N, 3]`` float32.
    """
    pts, nrm, tol = _check(points, normals, tol)
    out, good = _unit_where_valid(nrm, tol)
    if not good.all():
        if not good.any():
            fail(_WHERE, "no valid normal to copy from (all are invalid)")
        # the nearest valid point of every invalid one: one neighbour each, in query order
        col = knn(torch.from_numpy(pts[good]), torch.from_numpy(pts[~good]), 1)[1].numpy()
        out[~good] = out[good][col]
    return out.astype(np.float32)


def repair_normals_reference(points: np.ndarray, normals: np.ndarray, tol: float = 0.1) -> np.ndarray:
    """:func:`repair_normals` as a loop over the invalid rows (brute-force distances), for the tests."""
    pts, nrm, tol = _check(points, normals, tol)
    out, good = _unit_where_valid(nrm, tol)
    valid = np.flatnonzero(good)
    for j in np.flatnonzero(~good):
        if valid.size == 0:
            fail(_WHERE, "no valid normal to copy from (all are invalid)")
        d = ((pts[valid] - pts[j]) ** 2).sum(axis=1)
        out[j] = out[valid[int(np.argmin(d))]]
    return out.astype(np.float32)
