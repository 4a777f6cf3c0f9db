"""Input handling of the inference API: clouds from arrays, tensors, nested lists, :class:`gridify.io.PointCloud`
objects and files, checked and converted without losing precision; normalization, canonical order, normals.

Coordinates stay float64 until they are centred and scaled (``p' = (p - mean(p)) / max_j |p_j - mean(p)|``,
:func:`normalize_cloud`) and only then are cast to float32, so UTM coordinates ~5e5 m keep their centimetres;
ragged lists, unsupported dtypes and values beyond float32 are refused with a message naming them.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from .._checks import check_int
from ..io import PointCloud, read_points
from ..ops.normals import DEFAULT_NORMAL_NEIGHBOURS
from ..ops.normals import estimate_normals as ops_estimate_normals
from ..transforms import NORMALIZATIONS, centre_and_scale

__all__ = [
    "PointsLike",
    "to_numpy",
    "as_float32",
    "check_xyz",
    "read_cloud",
    "normalize_cloud",
    "canonical_order",
    "estimate_normals",
]

#: what a cloud may be given as: an ``[N, 3]`` array or tensor, a :class:`gridify.io.PointCloud` or a file path
PointsLike = Union[np.ndarray, Tensor, PointCloud, str, "os.PathLike[str]"]


def to_numpy(a: Any, name: str, where: str) -> np.ndarray:
    """``a`` (array, tensor, nested list) as a numeric numpy array, without losing precision."""
    if isinstance(a, Tensor):
        if a.device.type == "meta":
            raise ValueError(f"{where}: {name} is a meta tensor (shapes only, no values); pass real values")
        t = a.detach().cpu()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds it exactly
            t = t.float()
        if t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{where}: {name} must hold real numbers, got dtype {t.dtype}")
        a = t.numpy()
    if not isinstance(a, np.ndarray):
        if not isinstance(a, (list, tuple)):
            raise TypeError(
                f"{where}: {name} must be a numpy array, a torch tensor, a gridify.io.PointCloud "
                f"or a file path, got {type(a).__name__}"
            )
        try:
            a = np.asarray(a)
        except ValueError:
            raise ValueError(
                f"{where}: {name} is a ragged nested list (rows of different lengths); give every "
                f"point the same number of coordinates"
            ) from None
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{where}: {name} must hold numbers, got dtype {a.dtype}")
    return a


def as_float32(a: np.ndarray, name: str, where: str) -> np.ndarray:
    """``a`` in float32, refusing values that only overflow in float32 (finite before the cast)."""
    with np.errstate(over="ignore"):
        out = a.astype(np.float32)
    if not np.isfinite(out).all():
        bad = int((~np.isfinite(out)).reshape(len(out), -1).any(1).sum())
        raise ValueError(
            f"{where}: {name} hold values beyond float32's range (|v| > 3.4e38) in {bad} of "
            f"{len(out)} points; scale them (normalize=True centres and scales in float64 first)"
        )
    return out


def check_xyz(pos: np.ndarray, where: str, scene: bool = False) -> np.ndarray:
    """``pos`` when it is ``[N, 3]`` (x, y, z); ValueError naming ``where`` and the shape otherwise, with where the
    extra columns of an ``[N, 3 + C]`` array go (normals, or a scene's intensity and other fields)."""
    if pos.ndim == 2 and pos.shape[-1] == 3:
        return pos
    hint = ""
    if pos.ndim == 2 and pos.shape[-1] > 3 and scene:
        hint = (
            "; a scan's extra columns (e.g. intensity) go beside the coordinates, by name: "
            "gridify.io.PointCloud(points=a[:, :3], fields={'intensity': a[:, 3]}), or read the file itself "
            "(gridify.io.read_points(path, fields='all'), or pass the path)"
        )
    elif pos.ndim == 2 and pos.shape[-1] == 6:
        hint = " (pass normals separately: normals=...)"
    raise ValueError(f"{where}: points must have shape [N, 3], got {tuple(pos.shape)}{hint}")


def read_cloud(points: PointsLike, normals: Any, where: str) -> Tuple[np.ndarray, Optional[np.ndarray], str]:
    """``(points [N, 3] float64, normals [N, 3] float32 or None, source)`` from any supported input.

    The points stay in float64 until they are normalized (see :meth:`Predictor.prepare`).
    """
    source = ""
    if isinstance(points, (str, os.PathLike)):
        points = read_points(points)
    if isinstance(points, PointCloud):
        source = points.source
        if normals is None:
            normals = points.normals
        points = points.points
    pos = check_xyz(to_numpy(points, "points", where), where)
    if pos.shape[0] == 0:
        raise ValueError(f"{where}: the cloud is empty (0 points)")
    pos = pos.astype(np.float64)
    if not np.isfinite(pos).all():
        bad = int((~np.isfinite(pos)).any(1).sum())
        raise ValueError(f"{where}: points contain NaN/Inf values ({bad} of {len(pos)} points); drop them first")
    if normals is not None:
        nrm = to_numpy(normals, "normals", where)
        if nrm.shape != pos.shape:
            raise ValueError(f"{where}: normals must have shape {list(pos.shape)} like points, got {tuple(nrm.shape)}")
        if not np.isfinite(nrm).all():
            raise ValueError(f"{where}: normals contain NaN/Inf values")
        normals = as_float32(nrm, "normals", where)
    return pos, normals, source


def normalize_cloud(pos: np.ndarray, mode: str = "sphere") -> Tuple[np.ndarray, np.ndarray, float]:
    """Centre and scale: ``(p - c) / s``, as the named normalization ``mode`` of
    :data:`gridify.transforms.NORMALIZATIONS` does it: ``"sphere"`` (``c`` the centroid,
    ``s = max_j |p_j - c|``: into the unit sphere) or ``"cube"`` (``c`` the bounding-box centre,
    ``s`` half its longest side: into ``[-1, 1]^3``).

    Returns ``(normalized [N, 3] float32, c [3], s)``; the original points are
    ``normalized * s + c``. Computed in float64 (the input is not cast to float32 first) and
    without overflow (:func:`gridify.transforms.centre_and_scale`). Raises ValueError for a
    zero-extent cloud or an unknown ``mode``.
    """
    if not (isinstance(mode, str) and mode in NORMALIZATIONS):
        raise ValueError(f"normalize_cloud: mode must be one of {tuple(NORMALIZATIONS)}, got {mode!r}")
    try:
        q, c, s = centre_and_scale(pos, *NORMALIZATIONS[mode])
    except ValueError as exc:
        raise ValueError(f"normalize_cloud: {exc}") from None
    return q.astype(np.float32), c, s


def canonical_order(pos: np.ndarray, normals: Optional[np.ndarray] = None) -> np.ndarray:
    """A permutation that depends only on the rows' content: lexicographic by ``[x, y, z, normals]``."""
    cols = [pos[:, 2], pos[:, 1], pos[:, 0]]
    if normals is not None:
        cols = [normals[:, 2], normals[:, 1], normals[:, 0]] + cols
    return np.lexsort(cols)  # the last key is the primary one


def estimate_normals(pos: np.ndarray, k: int = DEFAULT_NORMAL_NEIGHBOURS) -> np.ndarray:
    """Unit normals ``[N, 3]`` (float32) from the covariance of the ``k`` nearest neighbours: the numpy entry of
    :func:`gridify.ops.estimate_normals` (the same function, not a second estimator: a numpy array or tensor in,
    computed in float64, float32 numpy out, its arguments checked here), which the datasets' ``estimate_normals``
    option uses too, so a model trained on estimated normals sees the same ones at prediction. (The
    ``estimate_normals=`` argument of :meth:`gridify.Predictor.predict` is the switch that calls it.)

    Normals are oriented away from the centroid (``n . (p - mean) >= 0``), which suits closed,
    roughly star-shaped objects; open scans may get some flipped normals.
    """
    check_int("estimate_normals", "k", k)
    pos = to_numpy(pos, "pos", "estimate_normals")
    if pos.ndim != 2 or pos.shape[1] != 3 or len(pos) == 0 or not np.isfinite(pos).all():
        raise ValueError(f"estimate_normals: pos must be a finite, non-empty [N, 3] array, got shape {pos.shape}")
    return ops_estimate_normals(torch.from_numpy(np.asarray(pos, dtype=np.float64)), int(k)).numpy().astype(np.float32)
