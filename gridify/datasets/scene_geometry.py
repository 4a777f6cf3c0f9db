"""Scene-level point features computed on the whole scan, before any crop (as ``height`` is), so that training
crops and whole-scan prediction see the same values: :func:`strength_scan`, :func:`ground_height`,
:func:`local_geometry` (``verticality``, ``planarity``), and :func:`scene_level_features`, which computes the ones
a list of feature names asks for (the scene datasets per scene,
:func:`~gridify.datasets.scene_base.build_scene_features` for a scan given whole).

* ``strength_scan = clip((s - median(s)) / (p90(s) - p10(s)), -STRENGTH_CLIP, STRENGTH_CLIP)`` over the scan's own
  intensities ``s``: the same for ``a s`` (any ``a > 0``), so another sensor's or city's calibration of the
  intensity scale does not move it; 0 for a scan whose p90 equals its p10 (a constant intensity).
* ``ground_height = z - g(x, y)``: the scan's points binned into square xy cells of :data:`GROUND_CELL` metres;
  a cell's ground is the :data:`GROUND_PERCENTILE`-th percentile of its z, but at most its ``GROUND_MAX_RANK + 1``-th
  lowest z (the wall or pole standing in a cell holds most of its points). Pits (a cell more than
  :data:`GROUND_TOLERANCE` below the median of its non-empty neighbours among the 8 around it: stray returns below
  the ground) take that median; bumps (more than :data:`GROUND_TOLERANCE` above the grey opening of the grid over
  ``(2 GROUND_RADIUS + 1)^2`` cells: cells holding only a canopy, a roof, the top of an object) take the opening's
  value. Both keep a plane of any slope, so a tilted ground keeps ``ground_height ~ 0`` (the low percentile inside
  a cell reads up to about ``0.4 GROUND_CELL x slope`` below the plane). ``g`` is the bilinear interpolation of the
  cells' grounds at their centres, over the non-empty ones among the 4 nearest (a point's own cell always
  counts), so it is continuous across cells. Empty cells hold no ground.
* ``verticality = 1 - |n_z|`` and ``planarity = (l2 - l3) / l1`` (``l1 >= l2 >= l3`` the eigenvalues) of the
  local PCA (:func:`gridify.ops.local_pca`) of the :data:`GEOMETRY_NEIGHBOURS` nearest voxels: the scan is
  first reduced to the centroids of its occupied :data:`GEOMETRY_VOXEL` voxels (the neighbourhood then spans
  about the same metres near and far from a LiDAR sensor, and a 125k-point scan costs about a second), every
  point takes its voxel's values. A wall: verticality ~1, planarity ~1; a floor: verticality ~0; a pole or a
  line of points: planarity ~0.

Shapes:
    pos ``[N, 3]`` (metres, z up), strength ``[N]`` or ``[N, 1]`` -> ``[N]`` float32 each.
"""

from __future__ import annotations

import warnings
from typing import Any, Dict, Sequence, Tuple

import numpy as np
import torch

from .._checks import check_alloc
from ..ops.normals import local_pca
from ..transforms import voxel_ids

__all__ = [
    "SCENE_LEVEL_FEATURES",
    "strength_scan",
    "ground_height",
    "local_geometry",
    "scene_level_features",
    "STRENGTH_CLIP",
    "GROUND_CELL",
    "GROUND_PERCENTILE",
    "GROUND_MAX_RANK",
    "GROUND_RADIUS",
    "GROUND_TOLERANCE",
    "GEOMETRY_VOXEL",
    "GEOMETRY_NEIGHBOURS",
]

#: the features computed here, on the whole scan (``height``, :func:`~gridify.datasets.scene_base.scene_height`,
#: is the other scene-level one)
SCENE_LEVEL_FEATURES = ("strength_scan", "ground_height", "verticality", "planarity")

#: ``strength_scan`` is clipped to ``[-STRENGTH_CLIP, STRENGTH_CLIP]`` (a few retro-reflectors stay in range)
STRENGTH_CLIP = 5.0
#: the xy cell edge of the ground estimate (metres)
GROUND_CELL = 1.0
#: a cell's ground: this percentile of its points' z (robust to a few stray returns below the ground)
GROUND_PERCENTILE = 10.0
#: ... but at most its ``GROUND_MAX_RANK + 1``-th lowest z: a dense wall or pole in the cell does not lift it
GROUND_MAX_RANK = 3
#: the opening that removes raised cells spans ``2 GROUND_RADIUS + 1`` cells (7 m): objects up to about 6 m
#: across with no ground return inside them
GROUND_RADIUS = 3
#: a cell's own ground is replaced only when it lies this far (metres) below its neighbours' median or above the
#: opening: the opening's error at the grid's border on a slope of up to 0.3 stays below it
GROUND_TOLERANCE = 1.5
#: the voxel edge (metres) of the centroids :func:`local_geometry` runs on
GEOMETRY_VOXEL = 0.1
#: the neighbours (voxel centroids) of a local PCA
GEOMETRY_NEIGHBOURS = 16


def strength_scan(strength: Any) -> np.ndarray:
    """The scan's intensities over its own robust scale (module docstring); NaN rows stay NaN (their row is
    named by the caller's check), the others are computed from the finite ones.

    Shapes:
        strength ``[N]`` or ``[N, 1]`` -> ``[N]`` float32
    """
    s = np.asarray(strength, np.float64).reshape(-1)
    finite = np.isfinite(s)
    if not finite.any():
        return np.where(finite, 0.0, np.nan).astype(np.float32)
    med, p10, p90 = np.percentile(s[finite], [50.0, 10.0, 90.0])
    scale = p90 - p10
    if not scale > 0:
        return np.where(finite, 0.0, np.nan).astype(np.float32)
    with np.errstate(invalid="ignore"):
        return np.clip((s - med) / scale, -STRENGTH_CLIP, STRENGTH_CLIP).astype(np.float32)


def _window(grid: np.ndarray, radius: int, op: Any) -> np.ndarray:
    """``op`` (``np.fmin`` / ``np.fmax``: NaN, an empty cell, left out) over the square of ``2 radius + 1``
    cells around every cell, separably (rows, then columns); NaN only where the whole square is empty."""
    out = grid
    for axis in (0, 1):
        acc = out.copy()
        for d in range(1, radius + 1):
            lo = [slice(None)] * 2
            hi = [slice(None)] * 2
            lo[axis], hi[axis] = slice(d, None), slice(None, -d)
            acc[tuple(lo)] = op(acc[tuple(lo)], out[tuple(hi)])
            acc[tuple(hi)] = op(acc[tuple(hi)], out[tuple(lo)])
        out = acc
    return out


def _opening(grid: np.ndarray, radius: int) -> np.ndarray:
    """The grey opening (the minimum over squares of ``2 radius + 1`` cells, then the maximum of that) of the
    non-empty cells of ``grid``: below or at every cell, equal on a plane; empty cells stay NaN."""
    empty = np.isnan(grid)
    inner = _window(grid, radius, np.fmin)
    inner[empty] = np.nan
    out = _window(inner, radius, np.fmax)
    out[empty] = np.nan
    return out


def _neighbour_median(grid: np.ndarray) -> np.ndarray:
    """The median of the non-empty cells among the 8 around every cell (NaN where all 8 are empty)."""
    rows, cols = grid.shape
    padded = np.pad(grid, 1, constant_values=np.nan)
    steps = [(di, dj) for di in (-1, 0, 1) for dj in (-1, 0, 1) if di or dj]
    ring = [padded[1 + di : 1 + di + rows, 1 + dj : 1 + dj + cols] for di, dj in steps]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-empty rings: NaN, which compares False below
        return np.nanmedian(np.stack(ring), axis=0)


def ground_height(pos: Any, where: str = "ground_height") -> np.ndarray:
    """``z`` minus the local ground under every point (module docstring), computed in float64.

    Shapes:
        pos ``[N, 3]`` -> ``[N]`` float32 (empty stays empty)
    """
    p = np.asarray(pos, np.float64)
    n = len(p)
    if n == 0:
        return np.zeros(0, np.float32)
    xy, z = p[:, :2], p[:, 2]
    lo = xy.min(0)
    u = (xy - lo) / GROUND_CELL  # cell coordinates: cell (i, j) spans [i, i + 1) x [j, j + 1)
    top = np.floor(u.max(0)) + 1.0  # cells along x and y, as floats: far-flung coordinates checked before any cast
    check_alloc(
        where,
        f"the ground grid of {top[0]:.0f} x {top[1]:.0f} cells of {GROUND_CELL:g} m (the scan's extent in xy)",
        int(min(48.0 * float(top[0]) * float(top[1]), 2.0**62)),
    )
    dims = top.astype(np.int64)
    ij = np.minimum(np.floor(u).astype(np.int64), dims - 1)
    cell = ij[:, 0] * dims[1] + ij[:, 1]
    order = np.lexsort((z, cell))  # by cell, then by z
    sorted_cells = cell[order]
    starts = np.flatnonzero(np.r_[True, sorted_cells[1:] != sorted_cells[:-1]])
    counts = np.diff(np.r_[starts, n])
    rank = np.minimum(np.floor(GROUND_PERCENTILE / 100.0 * (counts - 1)).astype(np.int64), GROUND_MAX_RANK)
    pick = starts + rank
    grid = np.full(int(dims.prod()), np.nan)
    grid[sorted_cells[starts]] = z[order[pick]]
    grid = grid.reshape(int(dims[0]), int(dims[1]))
    around = _neighbour_median(grid)  # a plane's value at the centre: fills single-cell pits
    grid = np.where(grid < around - GROUND_TOLERANCE, around, grid)
    opened = _opening(grid, GROUND_RADIUS)  # <= grid: flattens bumps narrower than the window
    grid = np.where(grid > opened + GROUND_TOLERANCE, opened, grid)
    # bilinear over the 4 cell centres around each point, the empty ones left out (the point's own cell weighs >= 1/4)
    c = u - 0.5
    base = np.floor(c).astype(np.int64)
    frac = c - base
    total = np.zeros(n)
    weight = np.zeros(n)
    for di in (0, 1):
        for dj in (0, 1):
            i, j = base[:, 0] + di, base[:, 1] + dj
            w = (frac[:, 0] if di else 1 - frac[:, 0]) * (frac[:, 1] if dj else 1 - frac[:, 1])
            inside = (i >= 0) & (i < dims[0]) & (j >= 0) & (j < dims[1])
            v = np.full(n, np.nan)
            v[inside] = grid[i[inside], j[inside]]
            ok = np.isfinite(v)
            total[ok] += w[ok] * v[ok]
            weight[ok] += w[ok]
    return (z - total / weight).astype(np.float32)


def local_geometry(pos: Any, where: str = "local_geometry") -> Tuple[np.ndarray, np.ndarray]:
    """``(verticality, planarity)`` of every point (module docstring): the local PCA of the
    :data:`GEOMETRY_NEIGHBOURS` nearest centroids of the :data:`GEOMETRY_VOXEL` voxels, taken by every point of
    the voxel.

    Shapes:
        pos ``[N, 3]`` -> ``[N]``, ``[N]`` float32 (empty stays empty)
    """
    p = np.asarray(pos, np.float64)
    if len(p) == 0:
        return np.zeros(0, np.float32), np.zeros(0, np.float32)
    inverse, count = voxel_ids(p, GEOMETRY_VOXEL, where)
    size = np.bincount(inverse, minlength=count).astype(np.float64)
    centroid = np.stack([np.bincount(inverse, weights=p[:, d], minlength=count) for d in range(3)], 1) / size[:, None]
    values, vectors = local_pca(torch.from_numpy(centroid), GEOMETRY_NEIGHBOURS)
    values = values.clamp_min(0.0).numpy()  # ascending: l3, l2, l1
    vertical = 1.0 - np.abs(vectors[:, 2, 0].numpy())  # the z component of the normal (the smallest's vector)
    largest = values[:, 2]
    planar = np.divide(values[:, 1] - values[:, 0], largest, out=np.zeros(count), where=largest > 0)
    return vertical[inverse].astype(np.float32), planar[inverse].astype(np.float32)


def scene_level_features(
    names: Sequence[str], pos: Any, *, strength: Any = None, where: str = "scene"
) -> Dict[str, np.ndarray]:
    """The features among ``names`` that this module computes, of a whole scene: ``strength_scan`` (only when
    ``strength``, on its unit scale, is given), ``ground_height``, ``verticality``, ``planarity``; each ``[N]``
    float32 by its name. ``verticality`` and ``planarity`` share one local PCA.

    Shapes:
        pos ``[N, 3]``, strength ``[N]`` / ``[N, 1]`` or None -> ``{name: [N]}``
    """
    out: Dict[str, np.ndarray] = {}
    wanted = set(names)
    if "strength_scan" in wanted and strength is not None:
        out["strength_scan"] = strength_scan(strength)
    if "ground_height" in wanted:
        out["ground_height"] = ground_height(pos, where)
    if wanted & {"verticality", "planarity"}:
        vertical, planar = local_geometry(pos, where)
        for name, v in (("verticality", vertical), ("planarity", planar)):
            if name in wanted:
                out[name] = v
    return out
