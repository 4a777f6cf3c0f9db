"""Bilateral kNN connectivity between a batch of point clouds and their grids.

    E = { (j -> i) : j in kNN_P(c_i^G) } U { (j -> i) : i in kNN_G(c_j^P) }

:func:`bilateral_knn` validates its inputs and builds the graph with
:func:`bilateral_knn_unchecked`, which :class:`gridify.nn.Gridification` calls directly after
validating its own inputs once. Distances are compared in the working frame of
:mod:`gridify.ops.distance` (grid nodes are never rounded to float16), and
:func:`check_graph_size` refuses batches whose graph would exceed the allocation limit.

Shapes:
    pos [N, 3], batch [N] -> BipartiteGraph.edge_index [2, E] (point, global node)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from .._checks import (
    check_alloc,
    check_batch,
    check_choice,
    check_finite,
    check_int,
    check_points,
    element_size,
    fail,
    is_int,
    warn_at_caller,
)
from ..ops.distance import distance_frame, working_dtype
from ..ops.grid import box_tensors, check_grid_size, grid_knn_bytes, grid_knn_unchecked
from ..ops.knn import BACKENDS as KNN_BACKENDS
from ..ops.knn import check_knn_backend, knn_bytes, knn_unchecked
from .grid import RegularGrid


@dataclass
class BipartiteGraph:
    """Edges between N points (of B clouds) and the B * Rx Ry Rz nodes of their grids.

    ``edge_index[0]`` indexes points, ``edge_index[1]`` global grid nodes
    (``cloud * Rx Ry Rz + a * Ry Rz + b * Rz + c``; ``R^3``, ``R^2``, ``R`` for a cube); sorted
    by node, then point. Gridification sends
    messages along point -> node, de-gridification along the transposed node -> point.

    Shapes:
        edge_index: [2, E], pos: [N, 3], batch: [N]
    """

    edge_index: Tensor
    pos: Tensor
    batch: Tensor
    num_clouds: int
    grid: RegularGrid
    #: ``(B, N)`` when the input was dense ``[B, N, 3]``, else ``None``.
    dense_shape: Optional[Tuple[int, int]] = None

    @property
    def num_points(self) -> int:
        return self.pos.size(0)

    @property
    def num_nodes(self) -> int:
        return self.num_clouds * self.grid.num_nodes

    def node_positions(self, dtype: Optional[torch.dtype] = None) -> Tensor:
        """Positions of the grid nodes of one cloud, ``[Rx Ry Rz, 3]`` (identical for every cloud)."""
        return self.grid.positions(self.pos.device, dtype or self.pos.dtype)

    def point_to_node_offsets(self) -> Tensor:
        """``c_node - c_point`` for every edge (target minus source for gridification). [E, 3]"""
        nodes = self.grid.positions_unchecked(self.pos.device, self.pos.dtype)
        point, node = self.edge_index
        return nodes[node % self.grid.num_nodes] - self.pos[point]

    def per_point(self, values: Tensor) -> Tensor:
        """Per-cloud ``values [B, F]`` at every point, ``[N, F]`` (the layout of the points' features; the
        fixed-shape graph's :meth:`gridify.nn.dense.FixedShapeGraph.per_point` keeps ``[B, N, F]``)."""
        return values[self.batch]

    def degree(self) -> Tuple[Tensor, Tensor]:
        """Number of edges at every point ``[N]`` and at every grid node ``[B * Rx Ry Rz]``."""
        point, node = self.edge_index
        return (torch.bincount(point, minlength=self.num_points), torch.bincount(node, minlength=self.num_nodes))


@dataclass(frozen=True)
class GraphBuilder:
    """The graph of a :class:`gridify.nn.Gridification`, built away from the model.

    A picklable value holding the module's grid, ``k``, kNN backend and in-degree cap: calling it
    on a batch gives exactly the :class:`BipartiteGraph` the module would build itself, so a
    DataLoader worker can build the next batch's graph while the model trains on this one and
    hand it over as ``model(..., graph=graph)``. Validates its inputs like :func:`bilateral_knn`.

    Shapes:
        pos [N, 3], batch [N] -> BipartiteGraph with edge_index [2, E]
    """

    grid: RegularGrid
    k: int
    knn_backend: str = "auto"
    max_in_degree: Optional[int] = None

    def __call__(self, pos: Tensor, batch: Optional[Tensor] = None, num_clouds: Optional[int] = None) -> BipartiteGraph:
        return bilateral_knn(pos, self.grid, self.k, batch, num_clouds, self.knn_backend, self.max_in_degree)


def bilateral_knn(
    pos: Tensor,
    grid: RegularGrid,
    k: int,
    batch: Optional[Tensor] = None,
    num_clouds: Optional[int] = None,
    knn_backend: str = "auto",
    max_in_degree: Optional[int] = None,
) -> BipartiteGraph:
    r"""Bilateral kNN connectivity (thesis sec. 4.2.5).

        E = { (j -> i) : j in kNN_P(c_i^G) } U { (j -> i) : i in kNN_G(c_j^P) }

    the union, deduplicated, of every grid node's ``k`` nearest points and every point's ``k``
    nearest grid nodes, within each cloud. Every point and node gets at least one edge: every node
    its ``k`` nearest points, every point its ``k`` nearest nodes. The union does *not* bound a
    node's in-degree by ``2k``: a node near a dense patch of points (a flat or clustered cloud) is
    chosen by many of them. ``max_in_degree`` (e.g. ``2 * k``) caps it: a node keeps its own ``k``
    nearest points plus the nearest of the points that chose it, up to the cap; a point left with
    no edge at all keeps the edge to its nearest node even past the cap, so coverage (every point
    connected) always wins over the cap. The
    point -> nodes half is exact index arithmetic on the regular grid (:func:`gridify.ops.grid_knn`),
    the nodes -> points half a kNN search (:func:`gridify.ops.knn`).

    A cloud with fewer than ``k`` points is allowed: its nodes connect to all of its points, and a
    warning says so.

    Shapes:
        pos: [N, 3], batch: [N] -> BipartiteGraph with edge_index [2, E], k*max(N, B*R^3) <= E <= 2k*...
    """
    where = "bilateral_knn"
    pos = check_points(where, "pos", pos)
    k = check_connectivity_args(where, grid, k, knn_backend, max_in_degree)
    batch, B, counts = check_batch(where, "batch", batch, pos.size(0), num_clouds, pos.device)
    if B == 0:
        fail(where, "no points: every cloud needs at least one point")
    check_graph_size(where, grid, k, pos.size(0), B, pos)
    check_knn_backend(where, knn_backend, pos.device, "knn_backend")
    check_finite(where, "pos", pos, batch)
    warn_small_clouds(where, counts, k)
    return bilateral_knn_unchecked(pos, grid, k, batch, counts, knn_backend, max_in_degree)


def check_graph_size(
    where: str, grid: RegularGrid, k: int, num_points: int, num_clouds: int, pos: Tensor, channels: int = 0
) -> None:
    """Refuse a batch whose graph (and ``channels`` features per grid node) exceeds the allocation limit.

    Estimate: per grid node its position and cloud (``3 w + 8`` bytes, ``w`` the working dtype's
    size) and ``channels`` features; the node -> points search (``gridify.ops.knn.knn_bytes``)
    twice (its result and the merged edge keys); the point -> nodes search
    (:func:`gridify.ops.grid.grid_knn_bytes`). The only size check of the graph: the searches
    themselves run unchecked.
    """
    R = grid.resolution
    check_grid_size(where, grid.shape, num_clouds)
    nodes = num_clouds * grid.num_nodes
    w = element_size(working_dtype(pos.dtype))
    nbytes = (
        nodes * (3 * w + 8 + channels * pos.element_size())
        + 2 * knn_bytes(nodes, num_points, k)
        + grid_knn_bytes(num_points, min(k, grid.num_nodes))
    )
    check_alloc(where, f"resolution={R} with k={k} for {num_clouds} clouds ({nodes} grid nodes)", nbytes, pos.device)


def check_connectivity_args(where: str, grid: Any, k: Any, knn_backend: Any, max_in_degree: Any) -> int:
    """Validate the hyper-parameters of :func:`bilateral_knn`; returns ``k``."""
    if not isinstance(grid, RegularGrid):
        fail(where, f"grid must be a RegularGrid, got {type(grid).__name__}")
    k = check_int(where, "k", k)
    check_choice(where, "knn_backend", knn_backend, KNN_BACKENDS, unknown=True)
    if max_in_degree is not None and (not is_int(max_in_degree) or max_in_degree < k):
        fail(where, f"max_in_degree must be None or an integer >= k={k}, got {max_in_degree!r}")
    return k


def warn_small_clouds(where: str, counts: Tensor, k: int) -> None:
    """Warn (once per call) when a cloud has fewer than ``k`` points."""
    small = (counts < min(k, int(counts.max()) + 1)).nonzero().flatten()  # (k may exceed int64)
    if small.numel():
        b = int(small[0])
        warn_at_caller(
            f"{where}: cloud {b} has {int(counts[b])} points, fewer than k={k}; its grid nodes "
            f"connect to all of its points ({small.numel()} such clouds)"
        )


def bilateral_knn_unchecked(
    pos: Tensor,
    grid: RegularGrid,
    k: int,
    batch: Tensor,
    counts: Tensor,
    knn_backend: str = "auto",
    max_in_degree: Optional[int] = None,
) -> BipartiteGraph:
    """:func:`bilateral_knn` on validated inputs: finite ``pos [N, 3]``, sorted int64 ``batch [N]``,
    ``counts [B]`` points per cloud (all > 0), valid hyper-parameters."""
    B = counts.numel()
    R3 = grid.num_nodes
    work = working_dtype(pos.dtype)  # node positions are not rounded to the points' (half) precision
    nodes = grid.positions_unchecked(pos.device, work)
    node_pos = nodes.repeat(B, 1)
    node_batch = torch.arange(B, device=pos.device).repeat_interleave(R3)
    g2p = knn_unchecked(pos, node_pos, k, batch, node_batch, counts, knn_backend)  # (node, point)
    lo, hi = box_tensors(grid.lower, grid.upper, pos.device, work)
    p2g = grid_knn_unchecked(pos, min(k, R3), grid.shape, lo, hi, batch)  # (point, node)
    n = pos.size(0)
    key_a = g2p[0] * n + g2p[1]
    key_b = p2g[1] * n + p2g[0]
    if max_in_degree is not None:
        key_b = _cap_in_degree(key_a, key_b, p2g, pos, nodes, n, R3, B, max_in_degree)
    keys = torch.unique(torch.cat([key_a, key_b]), sorted=True)
    edge_index = torch.stack([keys % n, keys // n])
    return BipartiteGraph(edge_index=edge_index, pos=pos, batch=batch, num_clouds=B, grid=grid)


def _cap_in_degree(
    key_a: Tensor, key_b: Tensor, p2g: Tensor, pos: Tensor, nodes: Tensor, n: int, R3: int, B: int, cap: int
) -> Tensor:
    """Keep the point -> node edges that fit under ``cap`` per node, plus coverage edges."""
    extra = ~torch.isin(key_b, key_a)
    point, node = p2g[0][extra], p2g[1][extra]
    own = torch.bincount(key_a // n, minlength=B * R3)  # edges each node has from its own search
    (nodes, pos), _ = distance_frame(nodes, pos)
    d = (nodes[node % R3] - pos[point]).pow(2).sum(-1)
    order = torch.argsort(d, stable=True)
    order = order[torch.argsort(node[order], stable=True)]
    node_sorted = node[order]
    rank = torch.arange(order.numel(), device=pos.device) - torch.searchsorted(node_sorted, node_sorted)
    keep = order[rank < (cap - own[node_sorted])]
    kept = key_b[extra][keep]
    covered = torch.zeros(n, dtype=torch.bool, device=pos.device)
    covered[key_a % n] = True
    covered[kept % n] = True
    lonely = (~covered).nonzero().flatten()
    if lonely.numel():  # grid_knn lists each point's nodes nearest first, k per point
        k_grid = p2g.size(1) // n
        nearest = p2g[1][lonely * k_grid]
        kept = torch.cat([kept, nearest * n + lonely])
    return kept
