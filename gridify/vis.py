"""Visual inspection with Open3D: labelled clouds, grid nodes and bilateral kNN edges.

:func:`show` draws up to three layers:

``points``  the cloud, coloured by ``labels`` (predicted class or part; one fixed colour per id
            from :func:`palette`), by explicit ``colors``, or when neither is given light grey
            beside a grid or edges (so their colours stand out) and by height along the
            camera's up vector on its own;
``grid``    grid nodes over ``grid_bounds``, coloured by the norm of their features
            (``grid_color="norm"``, a viridis-like ramp from min to max) or by the first three
            principal components of the features mapped to RGB (``grid_color="pca"``), both
            scaled over the nodes drawn;
``edges``   bilateral kNN edges between points and grid nodes, as a line set: by default the
            edges of a few chosen grid nodes, each node in its own colour of
            :func:`edge_palette`, drawn as a large marker and named in the legend.

What is drawn, and why:

* **Grid nodes** (``grid_nodes``). ``"touched"`` (the default) draws the nodes the cloud touches,

      T = { argmin_i |c_i - p_j| : j = 1..N },

  the nearest grid node of every point: the nodes whose cell holds part of the cloud, each
  joined to that point by the point -> node half of the bilateral kNN. ``"all"`` draws the whole
  ``R^3`` lattice. Touched is the better default because in the bilateral kNN *every* node has
  edges (each node takes its ``k`` nearest points), so the full lattice is a cube of mostly empty
  space whose nodes hide the object; ``T`` draws the shape as the grid sees it, coloured by what
  the gridification put there.
* **Edges** (``edge_nodes``). All edges (``"all"``, one grey) make a star of lines from the far
  nodes into the object. By default only the edges of ``n = 8`` nodes are drawn: ``n`` points
  spread over the cloud by farthest point sampling,

      s_1 = p_1,   s_{t+1} = argmax_j min_{u <= t} |p_j - s_u|,

  each replaced by its nearest grid node that has edges (repeats skipped; more samples are taken
  until ``n`` distinct nodes are found or the cloud is exhausted), so the chosen nodes are spread
  over the object and lie in ``T``. A list of node indices (``a * R^2 + b * R + c``) chooses them
  by hand. At most ``max_edges`` edges are drawn (a seeded random subset beyond that).
* **Camera** (``view``). ``"pca"`` (the default) looks along the axis of least variance of the
  cloud, the eigenvector ``e_3`` of the smallest eigenvalue of

      Sigma = 1/N sum_j (p_j - mu)(p_j - mu)^T,

  at the plane of the two largest. The eye sits at ``centre + t d`` with ``d = +-e_3`` (the sign
  on the side of the ``"iso"`` direction ``(1, -1.4, 0.9)``); ``up`` is the z axis projected on
  the image plane (the y axis when the view is within 26 degrees of vertical, so a top view has
  +y up). ``t`` is the smallest distance at which every drawn point is in the field of view,
  and the centre is the middle of their projected extent. ``"iso"`` or a direction vector
  replace ``d``, ``up=`` the up vector; window and PNG use the same camera.

With ``out=None`` an interactive Open3D window opens (the layers not in ``layers`` start hidden
and every layer can be toggled in the window's scene panel; the legend is printed and drawn as
3D labels). With ``out="view.png"`` the scene is rendered headless with Open3D's
``OffscreenRenderer`` (unlit shaders and no post-processing, so every point has exactly its
colour) and the legend is composited onto the image with Pillow (a colour swatch and the name
of every label present and of every chosen edge node; skipped with a warning if Pillow is
missing). Headless rendering needs a Vulkan or EGL driver; on Debian/Ubuntu
``apt-get install mesa-vulkan-drivers`` gives a software (llvmpipe) one that works on machines
without a GPU or display.

Shapes:
    points ``[N, 3]``, labels ``[N]``, colors ``[N, 3]``; grid features ``[C, R, R, R]``; edges a
    :class:`gridify.nn.connectivity.BipartiteGraph`, ``[E, 2, 3]`` segments or a ``[2, E]``
    (point, node) index; :func:`touched_nodes` ``[N, 3] -> [|T|]``; :func:`edge_subset`
    ``-> ([E'], [S])``; :func:`view_direction` ``[N, 3] -> ([3], [3])``; images ``[H, W, 3]`` uint8.

Open3D is imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import colorsys
import contextlib
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ._checks import check_choice, check_int, check_number, fail, is_int, is_real
from ._files import atomic_write
from ._paths import check_output_file
from .ops.grid import box_tensors, grid_knn_unchecked, grid_positions
from .ops.sampling import fps_unchecked

__all__ = [
    "show",
    "show_comparison",
    "render",
    "palette",
    "edge_palette",
    "label_colors",
    "grid_node_colors",
    "touched_nodes",
    "edge_subset",
    "view_direction",
    "LAYERS",
    "GRID_NODES",
    "VIEWS",
    "RenderError",
]

LAYERS = ("points", "grid", "edges")
#: which grid nodes :func:`show` draws (see the module docstring)
GRID_NODES = ("touched", "all")
#: named camera directions (or pass a direction vector)
VIEWS = ("pca", "iso")
ISO_DIRECTION = (1.0, -1.4, 0.9)
DEFAULT_EDGE_NODES = 8
#: edges drawn at most by default: about 125 per node for 8 nodes, enough to show where a node
#: reaches, few enough to see the cloud through (a dense scan gives a node thousands)
DEFAULT_MAX_EDGES = 1000

#: distinct, saturated colours (no greys, none close to the white background or the edge grey)
_BASE = np.array(
    [
        [0.894, 0.102, 0.110],
        [0.216, 0.494, 0.722],
        [0.302, 0.686, 0.290],
        [0.596, 0.306, 0.639],
        [1.000, 0.498, 0.000],
        [0.651, 0.337, 0.157],
        [0.969, 0.506, 0.749],
        [0.000, 0.620, 0.620],
        [0.737, 0.741, 0.133],
        [0.090, 0.745, 0.812],
        [0.400, 0.000, 0.800],
        [0.600, 0.000, 0.200],
    ]
)
EDGE_COLOR = (0.55, 0.55, 0.55)
#: points without labels or colours beside a grid or edges (light, so nodes and edges stand out)
POINT_GREY = (0.72, 0.72, 0.72)
#: brightness of the edge colours relative to the label colours
EDGE_SHADE = 0.6
_VIRIDIS = np.array(
    [[0.267, 0.005, 0.329], [0.229, 0.322, 0.546], [0.128, 0.567, 0.551], [0.369, 0.789, 0.383], [0.993, 0.906, 0.144]]
)
#: a legend entry: text, RGB colour in [0, 1], and the 3D point a window label is attached to
Entry = Tuple[str, Tuple[float, float, float], np.ndarray]


class RenderError(RuntimeError):
    """Open3D could not render (no display for a window, or no driver for offscreen rendering)."""


def palette(n: int) -> np.ndarray:
    """``n`` distinct RGB colours in ``[0, 1]`` (12 fixed ones, then golden-ratio hues). [n, 3]"""
    if n <= len(_BASE):
        return _BASE[:n].copy()
    extra = [
        colorsys.hsv_to_rgb((0.13 + i * 0.618034) % 1.0, 0.75 if i % 2 else 0.95, 0.85 if i % 3 else 0.65)
        for i in range(n - len(_BASE))
    ]
    return np.concatenate([_BASE, np.asarray(extra)], 0)


def edge_palette(n: int) -> np.ndarray:
    """Colours of the edges of ``n`` chosen nodes: :func:`palette` at ``EDGE_SHADE`` brightness,
    dark enough to stand out on the points and never equal to a label colour. [n, 3]"""
    return palette(n) * EDGE_SHADE


def label_colors(labels: Any, num_classes: Optional[int] = None) -> np.ndarray:
    """The :func:`palette` colour of every label. ``[N] -> [N, 3]``"""
    lab = np.asarray(labels).reshape(-1).astype(np.int64)
    if len(lab) and lab.min() < 0:
        raise ValueError(f"label_colors: labels must be non-negative, got {int(lab.min())}")
    n = int(num_classes if num_classes is not None else (lab.max() + 1 if len(lab) else 0))
    if len(lab) and lab.max() >= n:
        raise ValueError(f"label_colors: label {int(lab.max())} out of range for {n} classes")
    return palette(max(n, 1))[lab]


def _ramp(t: np.ndarray) -> np.ndarray:
    """Viridis-like colours of values in [0, 1]. [M] -> [M, 3]"""
    t = np.clip(np.asarray(t, dtype=np.float64), 0.0, 1.0) * (len(_VIRIDIS) - 1)
    i = np.minimum(t.astype(np.int64), len(_VIRIDIS) - 2)
    f = (t - i)[:, None]
    return _VIRIDIS[i] * (1 - f) + _VIRIDIS[i + 1] * f


def _to_numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def grid_node_colors(features: Any, mode: str = "norm") -> np.ndarray:
    """Colours of grid nodes from their features ``[C, R, R, R]`` (or ``[M, C]``). -> ``[R^3 or M, 3]``

    ``"norm"``: ``ramp((|f_i| - min) / (max - min))``; ``"pca"``: the centred features projected
    on their top three principal directions, each min-max scaled to ``[0, 1]`` as R, G, B.
    Nodes are in the flattened order ``a * R^2 + b * R + c`` of :class:`gridify.nn.RegularGrid`.
    """
    f = _to_numpy(features).astype(np.float64)
    if f.ndim == 4:
        f = f.reshape(f.shape[0], -1).T
    if f.ndim != 2:
        raise ValueError(f"grid_node_colors: features must be [C, R, R, R] or [R^3, C], got {f.shape}")
    if mode == "norm":
        v = np.linalg.norm(f, axis=1)
        span = v.max() - v.min()
        return _ramp((v - v.min()) / span if span > 0 else np.zeros_like(v))
    if mode == "pca":
        q = f - f.mean(0)
        _, _, vt = np.linalg.svd(q, full_matrices=False)
        proj = q @ vt[:3].T
        if proj.shape[1] < 3:
            proj = np.concatenate([proj, np.zeros((len(proj), 3 - proj.shape[1]))], 1)
        lo, hi = proj.min(0), proj.max(0)
        return np.where(hi > lo, (proj - lo) / np.where(hi > lo, hi - lo, 1.0), 0.5)
    raise ValueError(f"grid_node_colors: mode must be 'norm' or 'pca', got {mode!r}")


# --------------------------------------------------------------------------------------
# argument checks (once, at the public entries)
# --------------------------------------------------------------------------------------
def _check_cloud(where: str, points: Any, name: str = "points") -> np.ndarray:
    pos = _to_numpy(points)
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


def _check_vector(where: str, name: str, value: Any) -> np.ndarray:
    v = np.asarray(value, dtype=object).reshape(-1)
    ok = v.size == 3 and all(
        isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) for x in v
    )
    v = v.astype(np.float64) if ok else v
    if not ok or not np.isfinite(v).all() or not np.linalg.norm(v) > 0:
        fail(where, f"{name} must be three finite numbers, not all zero, got {value!r}")
    return v / np.linalg.norm(v)


def _check_view(where: str, view: Any, up: Any) -> Tuple[Union[str, np.ndarray], Optional[np.ndarray]]:
    if isinstance(view, str):
        check_choice(where, "view", view, VIEWS)
    else:
        view = _check_vector(where, "view", view)
    up = None if up is None else _check_vector(where, "up", up)
    if up is not None and not isinstance(view, str) and abs(float(up @ view)) > 1 - 1e-9:
        fail(where, f"up {up.round(3).tolist()} is parallel to the view direction {view.round(3).tolist()}")
    return view, up


def _check_angles(where: str, azimuth: Any, elevation: Any) -> Tuple[float, float]:
    """Camera angles in degrees: azimuth in (-360, 360), elevation in (-90, 90)."""
    out = []
    for name, value, limit in (("azimuth", azimuth, 360), ("elevation", elevation, 90)):
        ok = is_real(value) and bool(np.isfinite(value)) and abs(value) < limit
        if not ok:
            fail(where, f"{name} must be a number of degrees in (-{limit}, {limit}), got {value!r}")
        out.append(float(value))
    return out[0], out[1]


def _check_camera(
    where: str, view: Any, up: Any, azimuth: Any, elevation: Any
) -> Tuple[Union[str, np.ndarray], Optional[np.ndarray], float, float]:
    """``(view, up, azimuth, elevation)`` checked, as :func:`_view` takes them after the points."""
    view, up = _check_view(where, view, up)
    return (view, up, *_check_angles(where, azimuth, elevation))


def _check_edge_nodes(where: str, edge_nodes: Any) -> Union[str, int, np.ndarray]:
    if isinstance(edge_nodes, str) and edge_nodes == "all":
        return "all"
    if is_int(edge_nodes) and edge_nodes >= 1:
        return int(edge_nodes)
    if isinstance(edge_nodes, (list, tuple)) and edge_nodes and all(is_int(i) and i >= 0 for i in edge_nodes):
        return np.asarray(edge_nodes, dtype=np.int64)
    if isinstance(edge_nodes, (np.ndarray, torch.Tensor)):
        ids = _to_numpy(edge_nodes)
        if ids.ndim == 1 and ids.size and ids.dtype.kind in "iu" and ids.min() >= 0:
            return ids.astype(np.int64)
    fail(
        where,
        f"edge_nodes must be a positive integer (how many nodes), 'all', or a non-empty list of "
        f"node indices >= 0, got {edge_nodes!r}",
    )


def _check_bounds(where: str, bounds: Any) -> Tuple[float, float]:
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        lo = hi = float("nan")
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        fail(where, f"grid_bounds must be (lower, upper) with finite lower < upper, got {bounds!r}")
    return lo, hi


# --------------------------------------------------------------------------------------
# what is drawn: touched grid nodes, the edges of chosen nodes, the camera
# --------------------------------------------------------------------------------------
def _lattice(resolution: int, bounds: Tuple[float, float]) -> np.ndarray:
    """Positions of the ``R^3`` nodes, flattened ``a * R^2 + b * R + c``. [R^3, 3]"""
    return grid_positions(resolution, bounds[0], bounds[1], dtype=torch.float64).numpy()


def _touched_nodes(pos: np.ndarray, resolution: int, bounds: Tuple[float, float]) -> np.ndarray:
    """:func:`touched_nodes` without validation."""
    p = torch.from_numpy(np.ascontiguousarray(pos, dtype=np.float64))
    lo, hi = box_tensors(bounds[0], bounds[1], dtype=torch.float64)
    nearest = grid_knn_unchecked(p, 1, resolution, lo, hi, torch.zeros(len(p), dtype=torch.long))[1]
    return np.unique(nearest.numpy())


def touched_nodes(points: Any, resolution: int, bounds: Tuple[float, float] = (-1.0, 1.0)) -> np.ndarray:
    """The grid nodes the cloud touches: ``T = {argmin_i |c_i - p_j| : j}``, sorted. ``[N, 3] -> [|T|]``

    Indices ``a * R^2 + b * R + c`` of the ``R^3`` nodes over ``[lower, upper]^3``: every point's
    nearest node (exact, by :func:`gridify.ops.grid_knn` index arithmetic with ``k = 1``).
    """
    where = "touched_nodes"
    pos = _check_cloud(where, points)
    R = check_int(where, "resolution", resolution, 2)
    return _touched_nodes(pos, R, _check_bounds(where, bounds))


@dataclass
class _EdgeTable:
    """Edges as (point, node) index pairs into point and node positions."""

    point_pos: np.ndarray  # [P, 3]
    point: np.ndarray  # [E]
    node_pos: np.ndarray  # [M, 3]
    node: np.ndarray  # [E]
    resolution: Optional[int]  # R when the nodes are the R^3 lattice (named (a, b, c))

    def segments(self, ids: np.ndarray) -> np.ndarray:
        return np.stack([self.point_pos[self.point[ids]], self.node_pos[self.node[ids]]], 1)

    def node_name(self, i: int) -> str:
        if self.resolution is None:
            return "node at ({:.2f}, {:.2f}, {:.2f})".format(*self.node_pos[i])
        R = self.resolution
        return f"node {i} ({i // (R * R)}, {i // R % R}, {i % R})"


def _edge_table(where: str, edges: Any, points: Optional[np.ndarray], grid_pos: Optional[np.ndarray]) -> _EdgeTable:
    """Validate ``edges`` (a BipartiteGraph, ``[E, 2, 3]`` segments or a ``[2, E]`` index)."""
    if hasattr(edges, "edge_index") and hasattr(edges, "grid"):  # BipartiteGraph
        point, node = _to_numpy(edges.edge_index).astype(np.int64)
        R = int(edges.grid.resolution)
        nodes = _to_numpy(edges.grid.positions(dtype=torch.float64))
        return _EdgeTable(_to_numpy(edges.pos).astype(np.float64), point, nodes, node % R**3, R)
    e = _to_numpy(edges)
    if e.ndim == 3 and e.shape[1:] == (2, 3) and len(e) and e.dtype.kind in "iuf":
        e = e.astype(np.float64)
        if not np.isfinite(e).all():
            fail(where, "edge segments contain NaN/Inf values")
        point_pos, point = np.unique(e[:, 0], axis=0, return_inverse=True)
        node_pos, node = np.unique(e[:, 1], axis=0, return_inverse=True)
        return _EdgeTable(point_pos, point.reshape(-1), node_pos, node.reshape(-1), None)
    if e.ndim == 2 and e.shape[0] == 2 and e.shape[1] and e.dtype.kind in "iu":
        if grid_pos is None or points is None:
            fail(where, "an edge index [2, E] needs grid= to place the grid nodes")
        e = e.astype(np.int64)
        if e[0].min() < 0 or e[0].max() >= len(points) or e[1].min() < 0:
            fail(where, f"edge index out of range: points must be in [0, {len(points)}), nodes >= 0")
        R = round(len(grid_pos) ** (1 / 3))
        return _EdgeTable(points, e[0], grid_pos, e[1] % len(grid_pos), R if R**3 == len(grid_pos) else None)
    fail(
        where,
        f"edges must be a BipartiteGraph, an [E, 2, 3] array of segments or a [2, E] integer edge "
        f"index with E >= 1, got shape {e.shape}",
    )


def _fps_nodes(table: _EdgeTable, n: int) -> np.ndarray:
    """The nearest nodes with edges of points spread by farthest point sampling: ``n`` distinct ones
    (fewer only when the cloud runs out of points). FPS starts at point 0, so a longer run extends
    a shorter one and doubling the samples keeps the nodes found so far."""
    cand = np.flatnonzero(np.bincount(table.node, minlength=len(table.node_pos)) > 0)
    pts = torch.from_numpy(np.ascontiguousarray(table.point_pos))
    P = len(pts)
    one_cloud = (torch.zeros(P, dtype=torch.long), torch.tensor([P]))
    m = min(P, 2 * n)
    while True:
        idx = fps_unchecked(pts, *one_cloud, ratio=m / P, random_start=False).numpy()
        d = ((table.point_pos[idx][:, None, :] - table.node_pos[cand][None, :, :]) ** 2).sum(-1)
        near = cand[d.argmin(1)]
        _, first = np.unique(near, return_index=True)
        chosen = near[np.sort(first)]
        if len(chosen) >= n or m >= P:
            return chosen[:n]
        m = min(P, 2 * m)


def _choose(
    where: str, table: _EdgeTable, edge_nodes: Union[str, int, np.ndarray], max_edges: int, seed: int
) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """:func:`edge_subset` on validated arguments."""
    if isinstance(edge_nodes, str):
        chosen, ids = None, np.arange(len(table.node))
    else:
        if is_int(edge_nodes):
            chosen = _fps_nodes(table, edge_nodes)
        else:
            M = len(table.node_pos)
            degree = np.bincount(table.node, minlength=M)
            bad = [int(i) for i in edge_nodes if i >= M or degree[i] == 0]
            if bad:
                fail(
                    where,
                    f"edge_nodes: node {bad[0]} "
                    + ("has no edges" if bad[0] < M else f"does not exist (the nodes are 0..{M - 1})"),
                )
            _, first = np.unique(edge_nodes, return_index=True)
            chosen = edge_nodes[np.sort(first)]
        ids = np.flatnonzero(np.isin(table.node, chosen))
    if len(ids) > max_edges:
        ids = np.sort(np.random.default_rng(seed).choice(ids, max_edges, replace=False))
    return ids, chosen


def edge_subset(
    edges: Any,
    edge_nodes: Any = DEFAULT_EDGE_NODES,
    max_edges: int = DEFAULT_MAX_EDGES,
    seed: int = 0,
    *,
    points: Any = None,
    grid_pos: Any = None,
) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """The edges :func:`show` draws: ``(edge ids [E'] (sorted), chosen node ids [S] or None)``.

    ``edge_nodes``: how many nodes to choose by farthest point sampling (an int), explicit node
    ids, or ``"all"`` (every edge; no chosen nodes). ``edges`` as in :func:`show` (a ``[2, E]``
    index needs ``points [N, 3]`` and ``grid_pos [M, 3]``). Edge ids index ``edges``' own order
    (the columns of ``edge_index``); node ids are lattice indices ``a * R^2 + b * R + c`` (for
    segments: indices of the distinct node ends in sorted order). At most ``max_edges`` ids,
    a seeded random subset beyond that.
    """
    where = "edge_subset"
    edge_nodes = _check_edge_nodes(where, edge_nodes)
    max_edges = check_int(where, "max_edges", max_edges)
    seed = check_int(where, "seed", seed, 0)
    points = None if points is None else _check_cloud(where, points)
    grid_pos = None if grid_pos is None else _check_cloud(where, grid_pos, "grid_pos")
    return _choose(where, _edge_table(where, edges, points, grid_pos), edge_nodes, max_edges, seed)


def _view(
    where: str,
    pos: np.ndarray,
    view: Union[str, np.ndarray],
    up: Optional[np.ndarray],
    azimuth: float = 0.0,
    elevation: float = 0.0,
) -> Tuple[np.ndarray, np.ndarray]:
    """:func:`view_direction` on validated arguments."""
    iso = np.asarray(ISO_DIRECTION) / np.linalg.norm(ISO_DIRECTION)
    if isinstance(view, str) and view == "pca":
        q = pos - pos.mean(0)
        d = np.linalg.eigh(q.T @ q / len(q))[1][:, 0]  # eigenvalues ascending: least variance first
        d = -d if d @ iso < 0 else d
    else:
        d = iso if isinstance(view, str) else view
    u = up if up is not None else (np.array([0.0, 0.0, 1.0]) if abs(d[2]) < 0.9 else np.array([0.0, 1.0, 0.0]))
    u = u - (u @ d) * d
    if not np.linalg.norm(u) > 1e-9:
        fail(where, f"up {up.round(3).tolist()} is parallel to the view direction {d.round(3).tolist()}")
    u = u / np.linalg.norm(u)
    a, e = np.radians(azimuth), np.radians(elevation)
    d = np.cos(a) * d + np.sin(a) * np.cross(u, d)  # turn about up (the eye moves right), then raise it
    return np.cos(e) * d + np.sin(e) * u, np.cos(e) * u - np.sin(e) * d


def view_direction(
    points: Any, view: Any = "pca", up: Any = None, azimuth: float = 0.0, elevation: float = 0.0
) -> Tuple[np.ndarray, np.ndarray]:
    """The camera of :func:`show` for a cloud: unit ``direction`` (from the centre to the eye) and ``up``.

    ``view="pca"``: along the axis of least variance (see the module docstring); ``"iso"``: the
    fixed direction ``(1, -1.4, 0.9)``; or a direction vector. ``up`` (a vector) replaces the
    automatic up (z, or y for views within 26 degrees of vertical), projected on the image plane.
    ``azimuth`` then turns the eye about the up vector and ``elevation`` raises it toward up
    (degrees; e.g. 30 and 20 for a three-quarter view). ``[N, 3] -> ([3], [3])``
    """
    where = "view_direction"
    pos = _check_cloud(where, points)
    view, up = _check_view(where, view, up)
    return _view(where, pos, view, up, *_check_angles(where, azimuth, elevation))


def _fit_camera(
    pts: np.ndarray, d: np.ndarray, up: np.ndarray, fov: float, aspect: float
) -> Tuple[np.ndarray, np.ndarray]:
    """``(centre, eye)``: the eye on ``centre + t d`` at the smallest ``t`` that keeps every point of
    ``pts`` in a ``fov`` (vertical, degrees) view of width/height ``aspect``, with a 6 % margin."""
    right = np.cross(up, d)  # the image's right: the camera looks along -d
    c0 = pts.mean(0)
    q = pts - c0
    x, y, z = q @ right, q @ up, q @ d
    cx, cy = (x.max() + x.min()) / 2, (y.max() + y.min()) / 2
    tan_v = np.tan(np.radians(fov) / 2)
    reach = 1.06 * np.maximum(np.abs(x - cx) / (tan_v * aspect), np.abs(y - cy) / tan_v)
    size = max(float(np.ptp(q, 0).max()), 1e-6)
    t = max(float((z + reach).max()), float(z.max()) + 0.05 * size)
    centre = c0 + cx * right + cy * up
    return centre, centre + t * d


# --------------------------------------------------------------------------------------
# layers
# --------------------------------------------------------------------------------------
def _read_cloud(points: Any, labels: Any, colors: Any) -> Tuple[Any, Any, Any]:
    """Points, labels and colours from a file path or a PointCloud (its own labels/colours when
    neither is given), or as given."""
    if isinstance(points, (str, os.PathLike)):
        from .io import read_points

        points = read_points(points)
    if hasattr(points, "points") and hasattr(points, "normals"):  # gridify.io.PointCloud
        if colors is None and labels is None:
            colors, labels = points.colors, points.labels
        points = points.points
    return points, labels, colors


def _point_layer(
    where: str, pos: np.ndarray, labels: Any, colors: Any, num_classes: Optional[int], height_axis: Optional[np.ndarray]
) -> Tuple[Dict[str, np.ndarray], Optional[np.ndarray]]:
    """Colours by label, by ``colors``, by height along ``height_axis`` (the camera's up), or
    ``POINT_GREY`` (when ``height_axis`` is None)."""
    lab = None
    if labels is not None:
        lab = _to_numpy(labels).reshape(-1)
        if lab.size == 1 and len(pos) > 1:
            lab = np.full(len(pos), int(lab[0]))
        if lab.shape != (len(pos),):
            fail(where, f"labels must have shape [{len(pos)}] (one per point), got {lab.shape}")
        col = label_colors(lab, num_classes)
    elif colors is not None:
        col = _to_numpy(colors).astype(np.float64)
        if col.shape != pos.shape:
            fail(where, f"colors must have shape {list(pos.shape)}, got {col.shape}")
        if col.max() > 1.0:
            col = col / 255.0
    elif height_axis is not None:
        z = pos @ height_axis
        col = _ramp((z - z.min()) / (np.ptp(z) or 1.0))
    else:
        col = np.tile(np.asarray(POINT_GREY), (len(pos), 1))
    return {"pos": pos, "colors": np.clip(col, 0, 1)}, lab


def _grid_features(where: str, grid: Any) -> np.ndarray:
    g = _to_numpy(grid)
    if g.ndim == 5 and g.shape[0] == 1:
        g = g[0]
    if g.ndim != 4 or not g.shape[1] == g.shape[2] == g.shape[3] or g.shape[1] < 2:
        fail(where, f"grid must be [C, R, R, R] features with R >= 2, got {g.shape}")
    return g


def _grid_layer(
    g: np.ndarray, pos: np.ndarray, grid_color: str, grid_nodes: str, bounds: Tuple[float, float]
) -> Dict[str, np.ndarray]:
    """The touched (or all) nodes of features ``g [C, R, R, R]``, coloured over the nodes drawn."""
    R = g.shape[1]
    ids = _touched_nodes(pos, R, bounds) if grid_nodes == "touched" else np.arange(R**3)
    feats = g.reshape(g.shape[0], -1).T[ids]
    return {"pos": _lattice(R, bounds)[ids], "colors": grid_node_colors(feats, grid_color), "ids": ids}


def _edge_layer(
    table: _EdgeTable, ids: np.ndarray, chosen: Optional[np.ndarray]
) -> Tuple[Dict[str, np.ndarray], List[Entry]]:
    """Segments coloured per chosen node (grey for ``"all"``), the node markers and legend entries."""
    seg = table.segments(ids)
    if chosen is None:
        return {"segments": seg, "colors": np.tile(np.asarray(EDGE_COLOR), (len(seg), 1))}, []
    pal = edge_palette(len(chosen))
    rank = np.full(len(table.node_pos), -1)
    rank[chosen] = np.arange(len(chosen))
    r = rank[table.node[ids]]
    drawn = np.bincount(r, minlength=len(chosen))
    total = np.bincount(table.node, minlength=len(table.node_pos))[chosen]
    entries: List[Entry] = []
    for s, (i, n, t) in enumerate(zip(chosen.tolist(), drawn.tolist(), total.tolist())):
        count = f"{n}" if n == t else f"{n} of {t}"
        entries.append((f"edges of {table.node_name(i)}: {count}", tuple(pal[s]), table.node_pos[i]))
    layer = {"segments": seg, "colors": pal[r], "nodes": table.node_pos[chosen], "node_colors": pal}
    return layer, entries


def _label_entries(
    lab: Optional[np.ndarray], pos: np.ndarray, class_names: Optional[Sequence[str]], num_classes: Optional[int]
) -> List[Entry]:
    """One entry per label present: its name, point count, colour, and the centroid of its points."""
    if lab is None:
        return []
    lab = lab.astype(np.int64)
    present = np.unique(lab)
    n = int(num_classes if num_classes is not None else (len(class_names) if class_names else present.max() + 1))
    pal = palette(max(n, 1))
    counts = np.bincount(lab, minlength=n)
    out = []
    for i in present.tolist():
        name = class_names[i] if class_names is not None and i < len(class_names) else str(i)
        out.append((f"{name} ({counts[i]})", tuple(pal[i]), pos[lab == i].mean(0)))
    return out


@dataclass(frozen=True)
class _LayerOptions:
    """The checked options of :func:`show`'s grid and edges layers."""

    grid_color: str
    grid_nodes: str
    bounds: Tuple[float, float]
    edge_nodes: Union[str, int, np.ndarray]
    max_edges: int
    seed: int


def _check_layer_options(
    where: str, grid_color: Any, grid_nodes: Any, edge_nodes: Any, max_edges: Any, seed: Any, grid_bounds: Any
) -> _LayerOptions:
    """:func:`show`'s grid and edge options, checked in the order of its signature."""
    check_choice(where, "grid_color", grid_color, ("norm", "pca"))
    check_choice(where, "grid_nodes", grid_nodes, GRID_NODES)
    edge_nodes = _check_edge_nodes(where, edge_nodes)
    max_edges, seed = check_int(where, "max_edges", max_edges), check_int(where, "seed", seed, 0)
    return _LayerOptions(grid_color, grid_nodes, _check_bounds(where, grid_bounds), edge_nodes, max_edges, seed)


def _layer_data(
    where: str,
    pos: np.ndarray,
    labels: Any,
    colors: Any,
    class_names: Optional[Sequence[str]],
    num_classes: Optional[int],
    grid: Any,
    edges: Any,
    opts: _LayerOptions,
    up: np.ndarray,
) -> Tuple[Dict[str, Dict[str, np.ndarray]], List[Entry], List[Entry]]:
    """Plain numpy arrays of every layer that has data, and the legend entries of labels and edges.
    Points without labels or colours are grey beside a grid or edges, else coloured by height."""
    plain = grid is None and edges is None
    points, lab = _point_layer(where, pos, labels, colors, num_classes, up if plain else None)
    data = {"points": points}
    grid_pos = None
    if grid is not None:
        g = _grid_features(where, grid)
        data["grid"] = _grid_layer(g, pos, opts.grid_color, opts.grid_nodes, opts.bounds)
        grid_pos = _lattice(g.shape[1], opts.bounds)
    edge_entries: List[Entry] = []
    if edges is not None:
        table = _edge_table(where, edges, pos, grid_pos)
        ids, chosen = _choose(where, table, opts.edge_nodes, opts.max_edges, opts.seed)
        data["edges"], edge_entries = _edge_layer(table, ids, chosen)
    return data, _label_entries(lab, pos, class_names, num_classes), edge_entries


# --------------------------------------------------------------------------------------
# rendering
# --------------------------------------------------------------------------------------
@dataclass
class _Style:
    width: int = 800
    height: int = 600
    point_size: float = 3.0
    grid_point_size: float = 6.0
    line_width: float = 1.0
    fov: float = 40.0
    background: Tuple[float, float, float] = (1.0, 1.0, 1.0)


def _check_style(
    where: str,
    width: Any,
    height: Any,
    point_size: Any,
    grid_point_size: Any,
    line_width: Any,
    fov: Any = 40.0,
    background: Any = (1.0, 1.0, 1.0),
) -> _Style:
    bg = np.asarray(background, dtype=object).reshape(-1)
    if bg.size != 3 or not all(isinstance(v, (int, float, np.integer, np.floating)) and 0 <= v <= 1 for v in bg):
        fail(where, f"background must be three numbers in [0, 1], got {background!r}")
    fov = check_number(where, "fov", fov)
    if fov >= 180:
        fail(where, f"fov must be below 180 degrees, got {fov!r}")
    return _Style(
        check_int(where, "width", width),
        check_int(where, "height", height),
        check_number(where, "point_size", point_size),
        check_number(where, "grid_point_size", grid_point_size),
        check_number(where, "line_width", line_width),
        fov,
        tuple(float(v) for v in bg),
    )


@contextlib.contextmanager
def _quiet_native_output():
    """Silence Open3D/Filament's C++ start-up messages (fd 1 and 2); re-raise with their text."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
    except (OSError, ValueError, AttributeError):  # no real file descriptors (e.g. some notebooks)
        yield lambda: ""
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)

        def text() -> str:
            tmp.flush()
            tmp.seek(0)
            return tmp.read().decode("utf-8", "replace")

        try:
            yield text
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _import_open3d():
    try:
        import open3d as o3d
    except ImportError as exc:  # pragma: no cover - open3d is a dependency
        raise RenderError(f"gridify.vis needs open3d (pip install open3d): {exc}") from None
    return o3d


def _renderer(o3d: Any, width: int, height: int):
    """A fresh OffscreenRenderer (about 0.3 s). Renderers are not cached: Filament aborts the
    process when a renderer still alive at interpreter exit is destroyed."""
    with _quiet_native_output() as captured:
        try:
            return o3d.visualization.rendering.OffscreenRenderer(int(width), int(height))
        except Exception as exc:  # noqa: BLE001 - one clear message for every driver problem
            log = captured().strip().splitlines()
            raise RenderError(
                f"Open3D's offscreen renderer could not start ({exc}). Headless rendering needs a Vulkan or "
                f"EGL driver; on Debian/Ubuntu install the software one with `apt-get install "
                f"mesa-vulkan-drivers`." + (f" Open3D said: {' | '.join(log[-3:])}" if log else "")
            ) from None


#: the layer a geometry belongs to (for the toggles), when its name is not a layer
_LAYER_OF = {"edge nodes": "edges"}


def _o3d_geometries(o3d: Any, data: Dict[str, Dict[str, np.ndarray]], style: _Style) -> Dict[str, Tuple[Any, Any]]:
    R = o3d.visualization.rendering
    V3 = o3d.utility.Vector3dVector

    def cloud(pos: np.ndarray, colors: np.ndarray, size: float) -> Tuple[Any, Any]:
        geo = o3d.geometry.PointCloud(V3(pos))
        geo.colors = V3(colors)
        mat = R.MaterialRecord()
        mat.shader, mat.point_size = "defaultUnlit", float(size)
        return geo, mat

    out = {}
    for name, d in data.items():
        if name != "edges":
            out[name] = cloud(d["pos"], d["colors"], style.grid_point_size if name == "grid" else style.point_size)
            continue
        seg = d["segments"]
        geo = o3d.geometry.LineSet(
            V3(seg.reshape(-1, 3)), o3d.utility.Vector2iVector(np.arange(2 * len(seg)).reshape(-1, 2))
        )
        geo.colors = V3(d.get("colors", np.tile(np.asarray(EDGE_COLOR, dtype=np.float64), (len(seg), 1))))
        mat = R.MaterialRecord()
        mat.shader, mat.line_width = "unlitLine", float(style.line_width)
        out[name] = (geo, mat)
        if len(d.get("nodes", ())):
            out["edge nodes"] = cloud(d["nodes"], d["node_colors"], style.grid_point_size + 6)
    return out


def _positions(data: Dict[str, Dict[str, np.ndarray]]) -> np.ndarray:
    """Every drawn 3D position (points, nodes, segment ends). [M, 3]"""
    parts = [d[key].reshape(-1, 3) for d in data.values() for key in ("pos", "segments", "nodes") if key in d]
    return np.concatenate(parts, 0)


def _render(data: Dict[str, Dict[str, np.ndarray]], style: _Style, d: np.ndarray, up: np.ndarray) -> np.ndarray:
    o3d = _import_open3d()
    r = _renderer(o3d, style.width, style.height)
    scene = r.scene
    scene.clear_geometry()
    for name, (geo, mat) in _o3d_geometries(o3d, data, style).items():
        scene.add_geometry(name, geo, mat)
    scene.set_background([*style.background, 1.0])
    scene.view.set_post_processing(False)  # no tone mapping / anti-aliasing: exact colours
    centre, eye = _fit_camera(_positions(data), d, up, style.fov, style.width / style.height)
    r.setup_camera(style.fov, centre.astype(np.float32), eye.astype(np.float32), up.astype(np.float32))
    with _quiet_native_output():
        img = np.array(r.render_to_image())
    scene.clear_geometry()
    del scene, r  # release the engine before its materials (see _renderer)
    return np.ascontiguousarray(img[..., :3])


def render(
    data: Dict[str, Dict[str, np.ndarray]],
    *,
    width: int = 800,
    height: int = 600,
    point_size: float = 3.0,
    grid_point_size: float = 6.0,
    line_width: float = 1.0,
    background: Sequence[float] = (1.0, 1.0, 1.0),
    fov: float = 40.0,
    view: Any = "pca",
    up: Any = None,
    azimuth: float = 0.0,
    elevation: float = 0.0,
) -> np.ndarray:
    """Render layer data offscreen. Returns the RGB image ``[H, W, 3]`` uint8.

    ``data`` maps layer names to arrays: ``{"points": {"pos": [N, 3], "colors": [N, 3]}, "grid":
    {"pos", "colors"}, "edges": {"segments": [E, 2, 3], optional "colors": [E, 3] (default
    ``EDGE_COLOR``), "nodes": [S, 3], "node_colors": [S, 3]}}``. The camera (``view``, ``up``,
    ``azimuth``, ``elevation``, see :func:`view_direction`) comes from the ``points`` layer (every
    position when it is absent).
    """
    where = "render"
    style = _check_style(where, width, height, point_size, grid_point_size, line_width, fov, background)
    view, up = _check_view(where, view, up)
    angles = _check_angles(where, azimuth, elevation)
    bad = [name for name in data if name not in LAYERS]
    if bad or not data:
        fail(where, f"data must map layer names {list(LAYERS)} to arrays, got {sorted(data)}")
    pos = data["points"]["pos"] if "points" in data else _positions(data)
    d, up = _view(where, _check_cloud(where, pos, "the positions"), view, up, *angles)
    return _render(data, style, d, up)


def _draw_legend(img: np.ndarray, labels: List[Entry], edges: List[Entry], title: Optional[str]) -> np.ndarray:
    """Title, label swatches (squares) and edge swatches (thick lines) in the top-left corner, on a
    translucent white box so that they stay readable over the scene."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        warnings.warn("Pillow is not installed: the PNG has no legend (pip install pillow)")
        return img
    font = ImageFont.load_default()
    rows, y = [], 6  # (y, text, colour or None, is a label)
    if title:
        rows.append((y, title, None, False))
        y += 16
    for i, (text, rgb, _) in enumerate((labels + edges)[:40]):
        y += 6 if i == len(labels) and labels else 0  # a gap between the labels and the edges
        rows.append((y, text, rgb, i < len(labels)))
        y += 16
    im = Image.fromarray(img).convert("RGBA")
    box = Image.new("RGBA", im.size, (0, 0, 0, 0))
    right = 8 + max(18 * (c is not None) + ImageDraw.Draw(box).textlength(t, font=font) for _, t, c, _ in rows)
    ImageDraw.Draw(box).rectangle([2, 2, int(right) + 6, y + 2], fill=(255, 255, 255, 200))
    im = Image.alpha_composite(im, box).convert("RGB")
    draw = ImageDraw.Draw(im)
    for top, text, rgb, is_label in rows:
        if rgb is not None:
            c = tuple(int(v) for v in np.floor(np.asarray(rgb) * 255 + 0.5).clip(0, 255))
            draw.rectangle(
                [8, top + 1, 20, top + 12] if is_label else [8, top + 5, 20, top + 8],
                fill=c,
                outline=(0, 0, 0) if is_label else None,
            )
        draw.text((8 + 18 * (rgb is not None), top), text, fill=(0, 0, 0), font=font)
    return np.asarray(im)


def show(
    points: Any,
    labels: Any = None,
    class_names: Optional[Sequence[str]] = None,
    *,
    colors: Any = None,
    grid: Any = None,
    grid_color: str = "norm",
    grid_bounds: Tuple[float, float] = (-1.0, 1.0),
    grid_nodes: str = "touched",
    edges: Any = None,
    edge_nodes: Any = DEFAULT_EDGE_NODES,
    max_edges: int = DEFAULT_MAX_EDGES,
    layers: Optional[Sequence[str]] = None,
    view: Any = "pca",
    up: Any = None,
    azimuth: float = 0.0,
    elevation: float = 0.0,
    out: Union[str, os.PathLike, None] = None,
    width: int = 800,
    height: int = 600,
    point_size: float = 3.0,
    grid_point_size: float = 6.0,
    line_width: float = 1.0,
    legend: bool = True,
    title: Optional[str] = None,
    seed: int = 0,
    num_classes: Optional[int] = None,
) -> Optional[np.ndarray]:
    """Show a cloud with its labels, grid and edges; or render it to a PNG when ``out`` is given.

    Args:
        points: ``[N, 3]`` (array/tensor), a :class:`gridify.io.PointCloud` or a file path
            (then the file's colours/labels are used when ``labels``/``colors`` are None).
        labels: ``[N]`` integer labels (a single class id colours the whole cloud).
        class_names: names for the legend (``class_names[label]``).
        colors: ``[N, 3]`` RGB in ``[0, 1]`` (or 0-255), used when ``labels`` is None.
        grid: grid features ``[C, R, R, R]`` (e.g. ``gridify.gridify(...)`` or
            ``Predictor.inspect(...)["grid"]``), drawn as nodes over ``grid_bounds``.
        grid_color: ``"norm"`` or ``"pca"`` (see :func:`grid_node_colors`).
        grid_nodes: ``"touched"`` (the nodes nearest to a point; default) or ``"all"`` ``R^3``.
        edges: a :class:`BipartiteGraph`, ``[E, 2, 3]`` segments or a ``[2, E]`` (point, node) index (needs ``grid``).
        edge_nodes: the nodes whose edges are drawn: how many, spread over the cloud (default
            8), a list of node indices ``a * R^2 + b * R + c``, or ``"all"`` (every edge, grey).
        max_edges: edges drawn at most (a seeded random subset beyond that).
        layers: the layers to show (default: every layer given); interactive windows still get
            the others, hidden, so they can be toggled.
        view, up, azimuth, elevation: the camera: ``"pca"`` (along the cloud's axis of least
            variance), ``"iso"`` or a direction vector from the centre to the eye; ``up`` an up
            vector (default: z, or y for top views); then turned by ``azimuth`` about the up
            vector and raised by ``elevation`` (degrees). See :func:`view_direction`.
        out: PNG path for headless rendering; None opens a window.
        width, height, point_size, grid_point_size, line_width: image size, point sizes and edge width in pixels
            (chosen nodes are drawn ``grid_point_size + 6`` wide).
        legend, title: the legend (labels present, chosen edge nodes) and an optional title.
        seed: seed of the ``max_edges`` subset.
        num_classes: size of the palette (default ``len(class_names)`` or ``max(labels) + 1``).

    Returns:
        The rendered RGB image ``[H, W, 3]`` uint8 (legend included) when ``out`` is given.

    Raises:
        ValueError: bad shapes, layer names or options, an ``out`` that cannot be written (checked before
            rendering; :class:`gridify._paths.PathError`). RenderError: no display / no render driver.
    """
    where = "show"
    if out is not None:  # before the scene is built and rendered
        check_output_file(out, f"{where}: out", suffixes=[".png"])
    style = _check_style(where, width, height, point_size, grid_point_size, line_width)
    camera = _check_camera(where, view, up, azimuth, elevation)
    opts = _check_layer_options(where, grid_color, grid_nodes, edge_nodes, max_edges, seed, grid_bounds)
    scene = _build_scene(where, points, labels, colors, class_names, num_classes, grid, edges, opts, camera)
    return _present(where, scene, layers, legend, title, out, style)


def show_comparison(
    points: Any,
    truth: Any,
    prediction: Any,
    class_names: Optional[Sequence[str]] = None,
    *,
    out: Union[str, os.PathLike, None] = None,
    title: Optional[str] = None,
    view: Any = "pca",
    up: Any = None,
    azimuth: float = 0.0,
    elevation: float = 0.0,
    width: int = 800,
    height: int = 600,
    point_size: float = 3.0,
) -> Optional[np.ndarray]:
    """Ground truth and prediction of one labelled cloud, side by side, with one palette and legend.

    With ``out`` (a PNG): two renders from the same camera, ground truth on the left and prediction on
    the right (``2 * width x height``), each titled, the legend listing the classes of each panel.
    Without: one window with the prediction's copy of the cloud shifted along its longest axis by 1.1
    times that extent (the title says which copy is which). Points whose ground truth is ``-1``
    (ignored) are drawn grey as ``unlabelled``.

    Shapes:
        points ``[N, 3]``, truth ``[N]`` (ids ``-1..K-1``), prediction ``[N]`` -> ``[H, 2W, 3]`` uint8 (``out``)
    """
    where = "show_comparison"
    if out is not None:
        check_output_file(out, f"{where}: out", suffixes=[".png"])
    pos = _check_cloud(where, _to_numpy(points))
    truth = np.asarray(_to_numpy(truth)).reshape(-1)
    pred = np.asarray(_to_numpy(prediction)).reshape(-1)
    for name, lab in (("truth", truth), ("prediction", pred)):
        if len(lab) != len(pos) or not np.issubdtype(lab.dtype, np.integer):
            fail(where, f"{name} must hold one integer label per point ({len(pos)}), got {lab.dtype} {lab.shape}")
    k = int(
        max(len(class_names) if class_names is not None else 0, truth.max(initial=-1) + 1, pred.max(initial=-1) + 1)
    )
    names = list(class_names) if class_names is not None else [str(i) for i in range(k)]
    names = names + [f"class {i}" for i in range(len(names), k)] + ["unlabelled"]
    if (truth < -1).any() or (pred < 0).any():
        fail(where, "labels must be class ids >= 0 (the truth also -1: unlabelled)")
    truth = np.where(truth < 0, k, truth)
    common = dict(
        class_names=names,
        num_classes=k + 1,
        view=view,
        up=up,
        azimuth=azimuth,
        elevation=elevation,
        width=width,
        height=height,
        point_size=point_size,
    )
    if out is None:
        ext = pos.max(0) - pos.min(0)
        axis = int(np.argmax(ext))
        shift = np.zeros(3)
        shift[axis] = 1.1 * float(ext[axis]) or 1.0
        both = np.concatenate([pos, pos + shift])
        caption = f"ground truth | prediction (shifted {shift[axis]:.3g} along {'xyz'[axis]})"
        return show(both, np.concatenate([truth, pred]), **common, title=f"{title}: {caption}" if title else caption)
    style = _check_style(where, width, height, point_size, 6.0, 1.0)
    camera = _check_camera(where, view, up, azimuth, elevation)
    opts = _check_layer_options(where, "norm", "touched", DEFAULT_EDGE_NODES, DEFAULT_MAX_EDGES, 0, (-1.0, 1.0))
    panels = []
    for lab, caption in ((truth, "ground truth"), (pred, "prediction")):
        scene = _build_scene(where, pos, lab, None, names, k + 1, None, None, opts, camera)
        img = _render(scene.data, style, scene.direction, scene.up)
        panels.append(_draw_legend(img, scene.label_entries, [], f"{title}: {caption}" if title else caption))
    img = np.concatenate(panels, axis=1)
    _write_png(Path(os.fspath(out)), img)
    return img


@dataclass
class _Scene:
    """What :func:`show` draws: the layers' arrays, the legend entries and the camera direction."""

    data: Dict[str, Dict[str, np.ndarray]]
    label_entries: List[Entry]
    edge_entries: List[Entry]
    direction: np.ndarray
    up: np.ndarray


def _build_scene(
    where: str,
    points: Any,
    labels: Any,
    colors: Any,
    class_names: Optional[Sequence[str]],
    num_classes: Optional[int],
    grid: Any,
    edges: Any,
    opts: _LayerOptions,
    camera: Tuple[Any, ...],
) -> _Scene:
    """Read and check the cloud, aim the camera (``(view, up, azimuth, elevation)``, checked) and build the layers."""
    if num_classes is None and class_names is not None:
        num_classes = len(class_names)
    points, labels, colors = _read_cloud(points, labels, colors)
    pos = _check_cloud(where, points)
    d, up = _view(where, pos, *camera)
    data, label_entries, edge_entries = _layer_data(
        where, pos, labels, colors, class_names, num_classes, grid, edges, opts, up
    )
    return _Scene(data, label_entries, edge_entries, d, up)


def _present(
    where: str,
    scene: _Scene,
    layers: Optional[Sequence[str]],
    legend: bool,
    title: Optional[str],
    out: Union[str, os.PathLike, None],
    style: _Style,
) -> Optional[np.ndarray]:
    """Open a window on the scene's visible layers, or render them (with the legend) to the PNG ``out``."""
    data, d, up = scene.data, scene.direction, scene.up
    visible = _visible_layers(where, layers, data)
    edge_entries = scene.edge_entries if "edges" in visible else []
    label_entries, edge_entries = (scene.label_entries, edge_entries) if legend else ([], [])
    if out is None:
        _show_window(data, visible, label_entries + edge_entries, title or "gridify", style, d, up)
        return None
    img = _render({k: v for k, v in data.items() if k in visible}, style, d, up)
    if label_entries or edge_entries or title:
        img = _draw_legend(img, label_entries, edge_entries, title)
    _write_png(Path(os.fspath(out)), img)
    return img


def _visible_layers(where: str, layers: Optional[Sequence[str]], data: Dict[str, Any]) -> List[str]:
    """The layers to show: ``layers`` (all known and given) or every layer given."""
    bad = [name for name in (layers or ()) if name not in LAYERS]
    if bad:
        fail(where, f"unknown layer(s) {bad}; layers are {list(LAYERS)}")
    missing = [name for name in (layers or ()) if name not in data]
    if missing:
        fail(
            where,
            f"layer(s) {missing} requested but not given (pass grid= / edges=; gridify show: a model with a "
            f"grid, --layers points otherwise)",
        )
    return list(layers) if layers is not None else list(data)


def _write_png(path: Path, img: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        from PIL import Image

        atomic_write(path, lambda fh: Image.fromarray(img).save(fh, format="PNG"))
    except ImportError:
        o3d = _import_open3d()
        if not o3d.io.write_image(str(path), o3d.geometry.Image(np.ascontiguousarray(img))):
            raise RenderError(f"could not write {path}") from None


def _show_window(
    data: Dict[str, Dict[str, np.ndarray]],
    visible: List[str],
    entries: List[Entry],
    title: str,
    style: _Style,
    d: np.ndarray,
    up: np.ndarray,
) -> None:
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise RenderError(
            "no display for an interactive window (DISPLAY is not set); pass out='view.png' "
            "(gridify show ... --out view.png) to render headless"
        )
    o3d = _import_open3d()
    geoms = [
        {"name": name, "geometry": geo, "material": mat, "is_visible": _LAYER_OF.get(name, name) in visible}
        for name, (geo, mat) in _o3d_geometries(o3d, data, style).items()
    ]
    for text, _, _ in entries:
        print(f"[gridify.vis] {text}")
    centre, eye = _fit_camera(
        _positions({k: v for k, v in data.items() if k in visible}), d, up, style.fov, style.width / style.height
    )

    def on_init(vis: Any) -> None:
        for text, _, anchor in entries:
            vis.add_3d_label(np.asarray(anchor, dtype=np.float32), text)

    o3d.visualization.draw(
        geoms,
        title=title,
        width=style.width,
        height=style.height,
        show_ui=True,
        point_size=int(style.point_size),
        line_width=int(style.line_width),
        lookat=centre,
        eye=eye,
        up=up,
        field_of_view=style.fov,
        on_init=on_init,
    )
