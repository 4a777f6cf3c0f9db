"""What :func:`gridify.vis.show` draws, as plain arrays: the points, the grid nodes, the edges, the legend entries.

The ``points`` layer colours the cloud by label, by given colours, by height or grey; the
``grid`` layer holds the touched nodes (:func:`touched_nodes`, ``T = {argmin_i |c_i - p_j| : j}``)
or all ``R^3`` nodes of a feature grid, coloured by :func:`gridify.vis.grid_node_colors`; the
``edges`` layer the bilateral kNN edges of a few nodes chosen by farthest point sampling, or of
given nodes, or all of them (:func:`edge_subset`), at most ``max_edges``. Edges come as a
:class:`gridify.nn.connectivity.BipartiteGraph`, ``[E, 2, 3]`` segments or a ``[2, E]``
(point, node) index, read into one edge table. :func:`layer_data` builds every layer given and
the legend entries of the labels and the chosen nodes; :func:`check_layer_options` checks the
grid and edge options once, at the public entry.

Shapes:
    :func:`touched_nodes` ``[N, 3] -> [|T|]``; :func:`edge_subset` ``-> ([E'], [S] or None)``;
    :func:`grid_layer` features ``[C, R, R, R]``, points ``[N, 3]`` ->
    ``{"pos": [M, 3], "colors": [M, 3], "ids": [M]}``; :func:`layer_data` -> the layers
    ``{"points": {"pos": [N, 3], "colors": [N, 3]}, "grid": {...}, "edges": {...}}`` (edges:
    ``"segments" [E', 2, 3]``, ``"colors" [E', 3]``, ``"nodes" [S, 3]``, ``"node_colors" [S, 3]``)
    and legend entries. Node indices are ``a * R^2 + b * R + c``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .._checks import check_choice, check_int, fail, is_int
from ..ops.grid import box_tensors, grid_knn_unchecked, grid_positions
from ..ops.sampling import fps_unchecked
from .checks import check_cloud, to_numpy
from .colors import EDGE_COLOR, POINT_GREY, Entry, edge_palette, grid_node_colors, label_colors, palette, ramp

LAYERS = ("points", "grid", "edges")
#: which grid nodes :func:`show` draws (see the module docstring)
GRID_NODES = ("touched", "all")
DEFAULT_EDGE_NODES = 8
#: edges drawn at most by default: about 125 per node for 8 nodes, enough to show where a node
#: reaches, few enough to see the cloud through (a dense scan gives a node thousands)
DEFAULT_MAX_EDGES = 1000


def _check_edge_nodes(where: str, edge_nodes: Any) -> Union[str, int, np.ndarray]:
    if isinstance(edge_nodes, str) and edge_nodes == "all":
        return "all"
    if is_int(edge_nodes) and edge_nodes >= 1:
        return int(edge_nodes)
    if isinstance(edge_nodes, (list, tuple)) and edge_nodes and all(is_int(i) and i >= 0 for i in edge_nodes):
        return np.asarray(edge_nodes, dtype=np.int64)
    if isinstance(edge_nodes, (np.ndarray, torch.Tensor)):
        ids = to_numpy(edge_nodes)
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
    pos = check_cloud(where, points)
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
        point, node = to_numpy(edges.edge_index).astype(np.int64)
        R = int(edges.grid.resolution)
        nodes = to_numpy(edges.grid.positions(dtype=torch.float64))
        return _EdgeTable(to_numpy(edges.pos).astype(np.float64), point, nodes, node % R**3, R)
    e = to_numpy(edges)
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
    points = None if points is None else check_cloud(where, points)
    grid_pos = None if grid_pos is None else check_cloud(where, grid_pos, "grid_pos")
    return _choose(where, _edge_table(where, edges, points, grid_pos), edge_nodes, max_edges, seed)


def _point_layer(
    where: str, pos: np.ndarray, labels: Any, colors: Any, num_classes: Optional[int], height_axis: Optional[np.ndarray]
) -> Tuple[Dict[str, np.ndarray], Optional[np.ndarray]]:
    """Colours by label, by ``colors``, by height along ``height_axis`` (the camera's up), or
    ``POINT_GREY`` (when ``height_axis`` is None)."""
    lab = None
    if labels is not None:
        lab = to_numpy(labels).reshape(-1)
        if lab.size == 1 and len(pos) > 1:
            lab = np.full(len(pos), int(lab[0]))
        if lab.shape != (len(pos),):
            fail(where, f"labels must have shape [{len(pos)}] (one per point), got {lab.shape}")
        col = label_colors(lab, num_classes)
    elif colors is not None:
        col = to_numpy(colors).astype(np.float64)
        if col.shape != pos.shape:
            fail(where, f"colors must have shape {list(pos.shape)}, got {col.shape}")
        if col.max() > 1.0:
            col = col / 255.0
    elif height_axis is not None:
        z = pos @ height_axis
        col = ramp((z - z.min()) / (np.ptp(z) or 1.0))
    else:
        col = np.tile(np.asarray(POINT_GREY), (len(pos), 1))
    return {"pos": pos, "colors": np.clip(col, 0, 1)}, lab


def _grid_features(where: str, grid: Any) -> np.ndarray:
    g = to_numpy(grid)
    if g.ndim == 5 and g.shape[0] == 1:
        g = g[0]
    if g.ndim != 4 or not g.shape[1] == g.shape[2] == g.shape[3] or g.shape[1] < 2:
        fail(where, f"grid must be [C, R, R, R] features with R >= 2, got {g.shape}")
    return g


def grid_layer(
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
class LayerOptions:
    """The checked options of :func:`show`'s grid and edges layers."""

    grid_color: str
    grid_nodes: str
    bounds: Tuple[float, float]
    edge_nodes: Union[str, int, np.ndarray]
    max_edges: int
    seed: int


def check_layer_options(
    where: str, grid_color: Any, grid_nodes: Any, edge_nodes: Any, max_edges: Any, seed: Any, grid_bounds: Any
) -> LayerOptions:
    """:func:`show`'s grid and edge options, checked in the order of its signature."""
    check_choice(where, "grid_color", grid_color, ("norm", "pca"))
    check_choice(where, "grid_nodes", grid_nodes, GRID_NODES)
    edge_nodes = _check_edge_nodes(where, edge_nodes)
    max_edges, seed = check_int(where, "max_edges", max_edges), check_int(where, "seed", seed, 0)
    return LayerOptions(grid_color, grid_nodes, _check_bounds(where, grid_bounds), edge_nodes, max_edges, seed)


def layer_data(
    where: str,
    pos: np.ndarray,
    labels: Any,
    colors: Any,
    class_names: Optional[Sequence[str]],
    num_classes: Optional[int],
    grid: Any,
    edges: Any,
    opts: LayerOptions,
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
        data["grid"] = grid_layer(g, pos, opts.grid_color, opts.grid_nodes, opts.bounds)
        grid_pos = _lattice(g.shape[1], opts.bounds)
    edge_entries: List[Entry] = []
    if edges is not None:
        table = _edge_table(where, edges, pos, grid_pos)
        ids, chosen = _choose(where, table, opts.edge_nodes, opts.max_edges, opts.seed)
        data["edges"], edge_entries = _edge_layer(table, ids, chosen)
    return data, _label_entries(lab, pos, class_names, num_classes), edge_entries
