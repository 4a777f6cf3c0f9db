"""Repair of per-point normals read from files: :func:`repair_normals`.

Some datasets store placeholder or broken normals (the ``(1, 1, 1)`` rows of
``modelnet40_normal_resampled``, NaNs); each invalid one is replaced by the normal of the
nearest point whose normal is valid (a scipy k-d tree, imported only when needed).

Shapes:
    points ``[N, 3]``, normals ``[N, 3]`` -> ``[N, 3]`` float32 unit normals.
"""

from __future__ import annotations

import numpy as np

__all__ = ["repair_normals"]


def repair_normals(points: np.ndarray, normals: np.ndarray, tol: float = 0.1) -> np.ndarray:
    """Replace invalid normals with the normal of the nearest point whose normal is valid.

    A normal is invalid when it is not finite or its norm differs from 1 by more than
    ``tol`` (e.g. the ``(1, 1, 1)`` placeholders of ``modelnet40_normal_resampled``).
    Valid normals are renormalized to unit length.

    Shapes:
        points: ``[N, 3]``; normals: ``[N, 3]``; returns ``[N, 3]`` float32.
    """
    normals = np.asarray(normals, dtype=np.float64)
    norm = np.linalg.norm(normals, axis=1)
    good = np.isfinite(norm) & (np.abs(norm - 1.0) <= tol)
    out = np.zeros_like(normals)
    out[good] = normals[good] / norm[good, None]
    if not good.all():
        if not good.any():
            raise ValueError("repair_normals: no valid normal to copy from (all are invalid)")
        from scipy.spatial import cKDTree

        tree = cKDTree(np.asarray(points, dtype=np.float64)[good])
        _, nn = tree.query(np.asarray(points, dtype=np.float64)[~good], k=1)
        out[~good] = out[good][nn]
    return out.astype(np.float32)
