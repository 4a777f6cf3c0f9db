r"""The fixed-shape (traceable) path of the layers: its switch, and the bilateral kNN graph it runs on.

:class:`gridify.nn.Gridification` builds its graph with data-dependent code (a KD-tree,
``torch.unique``, chunked loops), which no exporter can trace. Inside :func:`fixed_shapes` (the switch the
ONNX wrappers of :mod:`gridify.export` turn on) the layers and the gridified models run their own
``forward`` on equally sized clouds ``[B, N, 3]`` with fixed-shape tensors instead: the inputs keep their
``[B, N, ...]`` layout (:func:`gridify.nn.inputs.parse_points`), :class:`~gridify.nn.Gridification` builds
the graph below (:func:`fixed_bilateral_knn`) and aggregates over it, :class:`~gridify.nn.Degridification`
sends back over its transposed edges, both with :class:`~gridify.nn.BipartiteConv`'s own message and update
(and :func:`gridify.ops.scatter_fixed`); nothing is validated there (the wrappers validate once).

The graph, per cloud ``b``, with the searches of :mod:`gridify.ops.knn_dense`:

    A_{b,i} = topk_k { ||c_i^G - c_j||^2 : j < N }              (grid node i <- its k nearest points)
    P_{b,j} = topk_k' { ||c_i^G - c_j||^2 : i < R }             (point j -> its k' = min(k, R) nearest nodes)
    keep_{b,j,t} = [ j not in A_{b, P_{b,j,t}} ]                 (the point -> node edges A does not hold)

so ``E = {(j, i) : j in A_i} U {(j, i) : i in P_j, keep}`` is the deduplicated union without
``torch.unique``: ``R k + N k'`` candidate edges, the duplicates masked out, so a mean counts every
edge once. The distances use the same float arithmetic as :func:`gridify.ops.knn` (torch backend) for
``A`` and as :func:`gridify.ops.grid_knn` for ``P``, so ``E`` is :func:`gridify.nn.bilateral_knn`'s edge
set. Exact ties are broken by the lower index: for equidistant points (duplicates) this is what the
brute-force and KD-tree searches do too; a point lying exactly on a symmetry plane of the lattice may keep
a different but equally near node at its k-th place than :func:`gridify.ops.grid_knn` (identical points,
which normalize onto the centre of the lattice, do; the parity check of :func:`gridify.export.export_onnx`
tells such ties apart).

Shapes:
    dense_bilateral_knn / fixed_bilateral_knn: pos ``[B, N, 3]`` -> node_points ``[B, R, k]``,
    point_nodes ``[B, N, k']``, keep ``[B, N, k']`` (bool).
    dense_edge_index: those -> edge_index ``[2, E]``.
    grid_tables: -> nodes ``[R^3, 3]``, axis ``[3, R]``; grid_axes: -> ``[Rx], [Ry], [Rz]``.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import torch
from torch import Tensor

from .._checks import check_choice, check_int, check_tensor, fail
from ..ops.grid import box_tensors
from ..ops.knn_dense import (
    NODE_CHUNK,
    SEARCHES,
    check_dense_clouds,
    check_dense_size,
    grid_knn_dense_unchecked,
    knn_dense_unchecked,
)
from .grid import RegularGrid

__all__ = [
    "FixedShapeGraph",
    "FixedShapes",
    "dense_bilateral_knn",
    "dense_bilateral_knn_unchecked",
    "dense_edge_index",
    "dense_grid_knn_unchecked",
    "fixed_bilateral_knn",
    "fixed_shape_settings",
    "fixed_shapes",
    "grid_axes",
    "grid_tables",
]


# --------------------------------------------------------------------------------------
# the switch
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FixedShapes:
    """The settings of the fixed-shape path: ``search``, the node -> points search of every gridification
    (:data:`gridify.ops.knn_dense.SEARCHES`; None: each layer's own ``fixed_search``), and ``node_chunk``,
    the nodes per block of that search."""

    search: Optional[str] = None
    node_chunk: int = NODE_CHUNK


_FIXED: "contextvars.ContextVar[Optional[FixedShapes]]" = contextvars.ContextVar("gridify_fixed_shapes", default=None)


@contextlib.contextmanager
def fixed_shapes(search: Optional[str] = None, node_chunk: int = NODE_CHUNK) -> Iterator[FixedShapes]:
    """Run the layers and models called inside on their fixed-shape path (module docstring): equally sized
    clouds ``[B, N, ...]`` in, the same layout out, nothing validated. ``search`` / ``node_chunk``: see
    :class:`FixedShapes`."""
    where = "fixed_shapes"
    if search is not None:
        check_choice(where, "search", search, SEARCHES)
    settings = FixedShapes(search, check_int(where, "node_chunk", node_chunk))
    token = _FIXED.set(settings)
    try:
        yield settings
    finally:
        _FIXED.reset(token)


def fixed_shape_settings() -> Optional[FixedShapes]:
    """The settings of the enclosing :func:`fixed_shapes` (None outside one: the layers' own, sparse path)."""
    return _FIXED.get()


# --------------------------------------------------------------------------------------
# the graph
# --------------------------------------------------------------------------------------
@dataclass
class FixedShapeGraph:
    """The bilateral kNN graph of :func:`fixed_bilateral_knn` with the points ``pos [B, N, 3]`` and grid
    nodes ``nodes [R, 3]`` it joins: what :class:`~gridify.nn.Degridification` sends back over (the
    fixed-shape counterpart of :class:`gridify.nn.BipartiteGraph`)."""

    node_points: Tensor
    point_nodes: Tensor
    keep: Tensor
    pos: Tensor
    nodes: Tensor
    #: always None: the fixed-shape path keeps the clouds' ``[B, N]`` layout (no flat rows to fold back)
    dense_shape: Optional[Tuple[int, int]] = None

    @property
    def num_clouds(self) -> int:
        return self.pos.size(0)

    def per_point(self, values: Tensor) -> Tensor:
        """Per-cloud ``values [B, F]`` at every point, ``[B, N, F]`` (the layout of the points' features)."""
        return values.unsqueeze(1).expand(-1, self.pos.size(1), -1)


def dense_grid_knn_unchecked(
    pos: Tensor,
    k: int,
    nodes: Tensor,
    axes: Tuple[Tensor, Tensor, Tensor],
    node_chunk: int = NODE_CHUNK,
    search: str = "brute",
) -> Tuple[Tensor, Tensor, Tensor]:
    r"""The fixed-shape bilateral kNN graph ``(node_points [B, R, k], point_nodes [B, N, k'], keep [B, N, k'])``
    of finite ``pos [B, N, 3]`` (``N >= k``) on the grid with nodes ``nodes [R, 3]`` and per-axis coordinates
    ``axes`` (:func:`grid_axes`): ``A`` by :func:`gridify.ops.knn_dense.knn_dense_unchecked` (blocks of
    ``node_chunk`` nodes, ``search``), ``P`` by :func:`gridify.ops.knn_dense.grid_knn_dense_unchecked`, and
    ``keep`` (module docstring). Traceable with static ``k``."""
    B, N = pos.shape[:2]
    node_points = knn_dense_unchecked(pos, k, nodes, axes, node_chunk, search)
    point_nodes = grid_knn_dense_unchecked(pos, k, axes)
    kk = point_nodes.size(2)
    chosen = torch.gather(node_points, 1, point_nodes.reshape(B, N * kk, 1).expand(-1, -1, k))
    own = torch.arange(N, device=pos.device).view(1, N, 1, 1)
    keep = ~(chosen.view(B, N, kk, k) == own).any(-1)
    return node_points, point_nodes, keep


def fixed_bilateral_knn(
    pos: Tensor,
    k: int,
    nodes: Tensor,
    axes: Tuple[Tensor, Tensor, Tensor],
    node_chunk: int = NODE_CHUNK,
    search: str = "brute",
) -> FixedShapeGraph:
    """:func:`dense_grid_knn_unchecked` as a :class:`FixedShapeGraph` (no checks: what the export traces)."""
    return FixedShapeGraph(*dense_grid_knn_unchecked(pos, k, nodes, axes, node_chunk, search), pos, nodes)


def dense_bilateral_knn(pos: Tensor, grid: RegularGrid, k: int) -> Tuple[Tensor, Tensor, Tensor]:
    """Bilateral kNN edges of equally sized clouds ``pos [B, N, 3]`` as fixed-shape index tensors.

    Returns ``(node_points [B, R^3, k], point_nodes [B, N, k'], keep [B, N, k'])`` (see the module
    docstring; ``k' = min(k, R^3)``). Validates its arguments, then runs
    :func:`dense_bilateral_knn_unchecked`. :func:`dense_edge_index` turns the result into the
    ``edge_index`` of :func:`gridify.nn.bilateral_knn`.
    """
    where = "dense_bilateral_knn"
    if not isinstance(grid, RegularGrid):
        fail(where, f"grid must be a RegularGrid, got {type(grid).__name__}")
    k = check_int(where, "k", k)
    pos = check_dense_clouds(where, pos, "pos", k)
    check_dense_size(where, f"pos {tuple(pos.shape)}", pos.size(0), pos.size(1), grid.num_nodes, pos.dtype)
    return dense_bilateral_knn_unchecked(pos, k, *grid_tables(grid, pos.device, pos.dtype))


def dense_bilateral_knn_unchecked(pos: Tensor, k: int, nodes: Tensor, axis: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`dense_bilateral_knn` on validated inputs (finite ``[B, N, 3]``, ``N >= k``) and the
    grid's :func:`grid_tables` ``nodes [R^3, 3]``, ``axis [3, R]``: :func:`dense_grid_knn_unchecked` with
    every node in one block."""
    return dense_grid_knn_unchecked(pos, k, nodes, (axis[0], axis[1], axis[2]), nodes.size(0))


def dense_edge_index(node_points: Tensor, point_nodes: Tensor, keep: Tensor) -> Tensor:
    """The edges of :func:`dense_bilateral_knn` as a :class:`gridify.nn.BipartiteGraph` ``edge_index``.

    ``[2, E]``: global point index ``b N + j`` and global node index ``b R^3 + i``, sorted by
    node, then point (the layout of :func:`gridify.nn.bilateral_knn`).
    """
    where = "dense_edge_index"
    for name, t in (("node_points", node_points), ("point_nodes", point_nodes), ("keep", keep)):
        check_tensor(where, name, t)
        if t.dim() != 3:
            fail(where, f"{name} must have 3 dimensions, got shape {tuple(t.shape)}")
        if name != "keep" and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
            fail(where, f"{name} must be an integer tensor, got dtype {t.dtype}")
    if keep.dtype != torch.bool:
        fail(where, f"keep must be a bool tensor, got dtype {keep.dtype}")
    if point_nodes.shape != keep.shape or point_nodes.size(0) != node_points.size(0):
        fail(
            where,
            f"node_points [B, R^3, k], point_nodes [B, N, k'] and keep [B, N, k'] do not fit together: "
            f"{tuple(node_points.shape)}, {tuple(point_nodes.shape)}, {tuple(keep.shape)}",
        )
    for name, t, size in (
        ("node_points", node_points, point_nodes.size(1)),
        ("point_nodes", point_nodes, node_points.size(1)),
    ):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= size):
            fail(where, f"{name} must hold indices in [0, {size}), got values in [{int(t.min())}, {int(t.max())}]")
    B, R3, k = node_points.shape
    N = point_nodes.size(1)
    cloud_pt = torch.arange(B).view(B, 1, 1) * N
    cloud_nd = torch.arange(B).view(B, 1, 1) * R3
    a_point = (node_points + cloud_pt).reshape(-1)
    a_node = (torch.arange(R3).view(1, R3, 1) + cloud_nd).expand(B, R3, k).reshape(-1)
    b_point = (torch.arange(N).view(1, N, 1) + cloud_pt).expand_as(point_nodes)[keep]
    b_node = (point_nodes + cloud_nd)[keep]
    point = torch.cat([a_point, b_point])
    node = torch.cat([a_node, b_node])
    order = torch.argsort(node * (B * N) + point)
    return torch.stack([point[order], node[order]])


# --------------------------------------------------------------------------------------
# the grid's constant tables
# --------------------------------------------------------------------------------------
def grid_tables(
    grid: RegularGrid, device: Optional[torch.device] = None, dtype: torch.dtype = torch.float32
) -> Tuple[Tensor, Tensor]:
    """The constants of the traced graph of a cubic grid: node positions ``[R^3, 3]`` (``linspace`` per axis,
    as the node -> points search uses) and per-axis node coordinates ``lo + a h`` ``[3, R]`` (as
    :func:`gridify.ops.grid_knn` computes them; the two may differ in the last bit)."""
    if not isinstance(grid, RegularGrid):
        fail("grid_tables", f"grid must be a RegularGrid, got {type(grid).__name__}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        fail("grid_tables", f"dtype must be a floating torch.dtype, got {dtype!r}")
    lo, hi = box_tensors(grid.lower, grid.upper, device, dtype)
    h = (hi - lo) / (grid.resolution - 1)
    axis = lo[:, None] + torch.arange(grid.resolution, device=device).to(dtype) * h[:, None]
    return grid.positions(device, dtype), axis


def grid_axes(
    grid: RegularGrid, device: Optional[torch.device] = None, dtype: torch.dtype = torch.float32
) -> Tuple[Tensor, Tensor, Tensor]:
    """The node coordinates of every axis ``lo_a + t h_a`` (``[Rx]``, ``[Ry]``, ``[Rz]``), as
    :func:`gridify.ops.grid_knn` computes them (a per-axis :func:`grid_tables` ``axis``)."""
    if not isinstance(grid, RegularGrid):
        fail("grid_axes", f"grid must be a RegularGrid, got {type(grid).__name__}")
    lo, hi = box_tensors(grid.lower, grid.upper, device, dtype)
    return tuple(
        lo[a] + torch.arange(r, device=device).to(dtype) * ((hi[a] - lo[a]) / (r - 1))  # type: ignore
        for a, r in enumerate(grid.shape)
    )
