r"""Fixed-shape (traceable) forms of the bilateral kNN graph and of the (de-)gridification.

:class:`gridify.nn.Gridification` builds its graph with data-dependent code (a KD-tree,
``torch.unique``, chunked loops), which no exporter can trace. The functions here compute the same
layers on equally sized clouds ``[B, N, 3]`` with fixed-shape tensors (what the ONNX export,
:mod:`gridify.export`, traces), with the bilateral kNN graph built by brute force, per cloud ``b``:

    A_{b,i} = topk_k { ||c_i^G - c_j||^2 : j < N }              (grid node i <- its k nearest points)
    P_{b,j} = topk_k' { ||c_i^G - c_j||^2 : i < R^3 }           (point j -> its k' = min(k, R^3) nearest nodes)
    keep_{b,j,t} = [ j not in A_{b, P_{b,j,t}} ]                 (the point -> node edges A does not hold)

so ``E = {(j, i) : j in A_i} U {(j, i) : i in P_j, keep}`` is the deduplicated union without
``torch.unique``: ``R^3 k + N k'`` candidate edges, the duplicates masked out, so a mean counts
every edge once. The distances use the same float arithmetic as :func:`gridify.ops.knn` (torch
backend) for ``A`` and as :func:`gridify.ops.grid_knn` for ``P``, so ``E`` is
:func:`gridify.nn.bilateral_knn`'s edge set. Exact ties are broken by the lower index: for
equidistant points (duplicates) this is what the brute-force and KD-tree searches do too; a point
lying exactly on a symmetry plane of the lattice may keep a different but equally near node at
its k-th place than :func:`gridify.ops.grid_knn` (identical points, which normalize onto the
centre of the lattice, do; the parity check of :func:`gridify.export.export_onnx` tells such ties
apart). The gridification is then

    x_i^G = phi_upd( AGG( {phi_msg(phi_node(x_j), phi_pos(c_i^G - c_j)) : j in A_i}
                          U {... : i in P_j, keep_{j,i}} ) )

with the layer's own :class:`~gridify.nn.gridification.BipartiteConv` methods (``node_embedding``
for ``phi_node``, ``edge_message`` for ``phi_msg``, ``update`` for ``phi_upd``: the methods its
sparse autograd path calls); only the aggregation over the two edge kinds is written here.

On any grid ``(Rx, Ry, Rz)`` (:func:`dense_grid_knn_unchecked`) ``A`` runs in blocks of
:data:`NODE_CHUNK` nodes, by brute force or in the nearest buckets of a kd split of the points
with an exactness check and a brute-force fallback (:func:`node_points_bucketed`), and ``P``
among the nearest coordinates of every axis; :func:`gridify_dense_graph` gridifies over it and
:func:`degridify_dense_graph` de-gridifies over the transposed edges

    x_j^P = phi_upd( AGG( {phi_msg(phi_node(g_i), phi_pos(c_j - c_i^G)) : j in A_i}
                          U {... : i in P_j, keep_{j,i}} ) )

Shapes:
    dense_bilateral_knn: pos ``[B, N, 3]`` -> node_points ``[B, R^3, k]``, point_nodes ``[B, N, k']``,
    keep ``[B, N, k']`` (bool).
    gridify_dense: pos ``[B, N, 3]``, x ``[B, N, F]`` -> ``[B, C, R, R, R]``.
    gridify_dense_graph: pos ``[B, N, 3]``, x ``[B, N, F]``, graph -> ``[B, C, Rx, Ry, Rz]``.
    degridify_dense_graph: z ``[B, C, Rx, Ry, Rz]``, pos ``[B, N, 3]``, graph -> ``[B, N, C_out]``.
    node_points_bucketed: pos ``[B, N, 3]``, nodes ``[R, 3]`` -> node_points ``[B, R, k]``.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor

from .._checks import (
    check_alloc,
    check_finite,
    check_float,
    check_int,
    check_tensor,
    element_size,
    fail,
    validating,
)
from ..ops.grid import box_tensors
from ..ops.knn import smallest_by_index
from .grid import RegularGrid
from .gridification import Degridification, Gridification

__all__ = [
    "NODE_CHUNK",
    "SEARCHES",
    "BUCKET_LEVELS",
    "BUCKETS_SEARCHED",
    "BUCKETS_WIDENED",
    "BUCKET_MIN_POINTS",
    "check_dense_clouds",
    "check_dense_size",
    "dense_bilateral_knn",
    "dense_bilateral_knn_unchecked",
    "dense_edge_index",
    "dense_grid_knn_unchecked",
    "degridify_dense_graph",
    "grid_axes",
    "grid_tables",
    "gridify_dense",
    "gridify_dense_graph",
    "gridify_dense_unchecked",
    "node_points_bucketed",
    "point_buckets",
]


def check_dense_clouds(
    where: str,
    pos: Any,
    name: str,
    k: int = 1,
    dtype: Optional[torch.dtype] = None,
    device: Optional[torch.device] = None,
) -> Tensor:
    """``pos``: a finite floating tensor ``[B, N, 3]``, ``B >= 1``, ``N >= k`` (of ``dtype`` / on
    ``device`` when given); messages name ``name`` and, for a NaN / Inf, the cloud and row."""
    pos = check_tensor(where, name, pos)
    if pos.dim() != 3 or pos.size(-1) != 3 or pos.size(0) == 0:
        fail(where, f"{name} must have shape [B, N, 3] with B >= 1, got {tuple(pos.shape)}")
    check_float(where, name, pos)
    if dtype is not None and pos.dtype != dtype:
        fail(
            where,
            f"{name} must be {str(dtype).replace('torch.', '')} (the model's dtype), got {pos.dtype}; "
            f"convert it with .to({dtype})",
        )
    if device is not None and pos.device != device:
        fail(where, f"{name} is on {pos.device} but the model is on {device}")
    if pos.size(1) < k:
        fail(
            where,
            f"every cloud needs at least k={k} points, got N={pos.size(1)}"
            if k > 1
            else f"every cloud needs at least one point, got N={pos.size(1)}",
        )
    check_finite(where, name, pos.reshape(-1, 3), torch.arange(pos.size(0)).repeat_interleave(pos.size(1)))
    return pos


def check_dense_size(where: str, what: str, batch: int, num_points: int, num_nodes: int, dtype: torch.dtype) -> None:
    """Refuse (before allocating) a fixed-shape graph whose ``[B, R^3, N]`` distance matrix alone
    exceeds the allocation limit; ``what`` names the arguments that decide the size."""
    nbytes = batch * num_points * num_nodes * element_size(dtype)
    check_alloc(
        where, f"{what} (a [B, R^3, N] = [{batch}, {num_nodes}, {num_points}] {str(dtype)[6:]} distance matrix)", nbytes
    )


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


def grid_tables(
    grid: RegularGrid, device: Optional[torch.device] = None, dtype: torch.dtype = torch.float32
) -> Tuple[Tensor, Tensor]:
    """The constants of the traced graph: node positions ``[R^3, 3]`` (``linspace`` per axis, as
    the node -> points search uses) and per-axis node coordinates ``lo + a h`` ``[3, R]`` (as
    :func:`gridify.ops.grid_knn` computes them; the two may differ in the last bit)."""
    if not isinstance(grid, RegularGrid):
        fail("grid_tables", f"grid must be a RegularGrid, got {type(grid).__name__}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        fail("grid_tables", f"dtype must be a floating torch.dtype, got {dtype!r}")
    lo, hi = box_tensors(grid.lower, grid.upper, device, dtype)
    h = (hi - lo) / (grid.resolution - 1)
    axis = lo[:, None] + torch.arange(grid.resolution, device=device).to(dtype) * h[:, None]
    return grid.positions(device, dtype), axis


def _smallest(d: Tensor, k: int) -> Tensor:
    """Columns of the ``k`` smallest entries of every row of ``d [B, M, N]``, ties to the lower column
    as :func:`gridify.ops.knn` breaks them: in the exported graph ONNX ``TopK`` does that by
    definition; run eagerly, ``torch.topk`` does not promise it, so :func:`smallest_by_index` runs."""
    if torch.compiler.is_compiling() or torch.compiler.is_exporting():
        return torch.topk(d, k, dim=2, largest=False, sorted=True).indices
    return smallest_by_index(d.reshape(-1, d.size(2)), k)[1].view(d.size(0), d.size(1), k)


def dense_bilateral_knn_unchecked(pos: Tensor, k: int, nodes: Tensor, axis: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`dense_bilateral_knn` on validated inputs (finite ``[B, N, 3]``, ``N >= k``) and the
    grid's :func:`grid_tables` ``nodes [R^3, 3]``, ``axis [3, R]``; traceable with static ``k``."""
    B, N = pos.shape[:2]
    R = axis.size(1)
    R3 = nodes.size(0)
    d = (nodes[None, :, None, 0] - pos[:, None, :, 0]).pow(2)
    d = d + (nodes[None, :, None, 1] - pos[:, None, :, 1]).pow(2)
    d = d + (nodes[None, :, None, 2] - pos[:, None, :, 2]).pow(2)  # [B, R^3, N], as knn's torch backend
    node_points = _smallest(d, k)
    da = (axis - pos[..., None]).pow(2)  # [B, N, 3, R], as grid_knn
    dist = da[:, :, 0, :, None, None] + da[:, :, 1, None, :, None]
    dist = dist + da[:, :, 2, None, None, :]  # [B, N, R, R, R]: node a R^2 + b R + c
    kk = min(k, R3)
    point_nodes = _smallest(dist.reshape(B, N, R**3), kk)  # ties to the lower node, eagerly as in the graph
    chosen = torch.gather(node_points, 1, point_nodes.reshape(B, N * kk, 1).expand(-1, -1, k))
    own = torch.arange(N, device=pos.device).view(1, N, 1, 1)
    keep = ~(chosen.view(B, N, kk, k) == own).any(-1)
    return node_points, point_nodes, keep


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


def gridify_dense(
    module: Gridification, pos: Tensor, x: Tensor, tables: Optional[Tuple[Tensor, Tensor]] = None
) -> Tensor:
    r"""The forward of a :class:`gridify.nn.Gridification` on fixed-shape tensors (traceable).

    ``pos [B, N, 3]`` (finite, ``N >= k``) and ``x [B, N, F]`` -> ``[B, C, R, R, R]``: the same
    result as ``module(pos, x)`` (to float rounding) over the edges of
    :func:`dense_bilateral_knn_unchecked`; points outside the grid box connect to their nearest
    nodes (``outside="allow"``). Aggregations ``mean``, ``sum`` and ``max``. ``tables``: the grid's
    :func:`grid_tables` (computed here when None; pass them when tracing). Validates its
    arguments (outside a trace), then runs the unchecked implementation that the export traces.
    """
    if validating():
        _check_gridify_dense(module, pos, x, tables)
    return gridify_dense_unchecked(module, pos, x, tables)


def _check_gridify_dense(module: Any, pos: Any, x: Any, tables: Any) -> None:
    where = "gridify_dense"
    if not isinstance(module, Gridification):
        fail(where, f"module must be a gridify.nn.Gridification, got {type(module).__name__}")
    if module.max_in_degree is not None:
        fail(
            where,
            f"the module caps the in-degree (max_in_degree={module.max_in_degree}); gridify_dense builds "
            f"the uncapped bilateral kNN graph",
        )
    p = next(module.parameters())
    pos = check_dense_clouds(where, pos, "pos", module.k, p.dtype, p.device)
    x = check_tensor(where, "x", x)
    if x.dim() != 3 or x.shape[:2] != pos.shape[:2] or x.size(2) != module.in_channels:
        fail(
            where,
            f"x must have shape [B, N, F] = [{pos.size(0)}, {pos.size(1)}, {module.in_channels}] (pos' B and "
            f"N, the module's in_channels), got {tuple(x.shape)}",
        )
    if x.dtype != pos.dtype or x.device != pos.device:
        fail(where, f"x must have pos' dtype and device ({pos.dtype} on {pos.device}), got {x.dtype} on {x.device}")
    check_finite(where, "x", x.reshape(-1, x.size(2)), torch.arange(x.size(0)).repeat_interleave(x.size(1)))
    if tables is not None:
        R = module.grid.resolution
        ok = (
            isinstance(tables, (tuple, list))
            and len(tables) == 2
            and all(isinstance(t, Tensor) for t in tables)
            and tuple(tables[0].shape) == (R**3, 3)
            and tuple(tables[1].shape) == (3, R)
            and all(t.dtype == pos.dtype and t.device == pos.device for t in tables)
        )
        if not ok:
            fail(
                where,
                f"tables must be None or the grid's grid_tables(grid, device, dtype): (nodes [{R**3}, 3], "
                f"axis [3, {R}]) of pos' dtype and device",
            )
    check_dense_size(where, f"pos {tuple(pos.shape)}", pos.size(0), pos.size(1), module.grid.num_nodes, pos.dtype)


def gridify_dense_unchecked(
    module: Gridification, pos: Tensor, x: Tensor, tables: Optional[Tuple[Tensor, Tensor]] = None
) -> Tensor:
    """:func:`gridify_dense` on validated inputs (what the export traces): :func:`gridify_dense_graph`
    over :func:`dense_bilateral_knn_unchecked`'s graph."""
    nodes, axis = grid_tables(module.grid, pos.device, pos.dtype) if tables is None else tables
    return gridify_dense_graph(module, pos, x, nodes, dense_bilateral_knn_unchecked(pos, module.k, nodes, axis))


# --------------------------------------------------------------------------------------
# any grid (Rx, Ry, Rz): node chunks, the bucketed search, the de-gridification over the transposed edges
# --------------------------------------------------------------------------------------
#: Grid nodes per block of the node -> points search of the segmenter graph: its distance block is
#: ``[B, NODE_CHUNK, N]`` (a 16,384-point crop: 64 MiB), so a scene grid of 8,192 nodes never holds
#: the whole ``[B, R^3, N]`` matrix.
NODE_CHUNK = 1024


#: The node -> points searches of the segmenter graph (:class:`gridify.export.OnnxSegmenter` ``search``): ``"brute"``
#: forms every node-point distance (in blocks of ``node_chunk`` nodes); ``"bucketed"``
#: (:func:`node_points_bucketed`) looks in the nearest buckets of a kd split of the points and
#: falls back to every point only for the nodes it cannot prove exact. Both give the same neighbours.
SEARCHES = ("brute", "bucketed")
#: ``2 ** BUCKET_LEVELS`` point buckets (equal sizes, kd splits) in the bucketed search
BUCKET_LEVELS = 9
#: buckets a node looks in before its exactness check
BUCKETS_SEARCHED = 8
#: buckets a node that the first look could not prove looks in next, before the brute force (a node in the
#: empty space of a LiDAR crop sees many buckets at about the same distance)
BUCKETS_WIDENED = 64
#: points per bucket at least (a smaller cloud is padded with points at infinity)
BUCKET_MIN_POINTS = 8
#: ``2 ** BUCKET_GROUP_LEVELS`` buckets per group (a kd cell a few levels up) in the first look: a node ranks the
#: groups, then only the buckets of its ``BUCKET_GROUPS_SEARCHED`` nearest groups (not every bucket)
BUCKET_GROUP_LEVELS = 3
#: groups whose buckets a node ranks in its first look
BUCKET_GROUPS_SEARCHED = 6


def _rows(table: Tensor, idx: Tensor) -> Tensor:
    """``table[idx]`` for ``table [T, ...]`` and integer ``idx`` of any shape: one ``index_select`` of the
    flattened index (exported as ONNX ``Gather``, which onnxruntime runs faster than the ``GatherND`` of
    advanced indexing)."""
    return table.index_select(0, idx.reshape(-1)).view(*idx.shape, *table.shape[1:])


def _gather_rows(table: Tensor, idx: Tensor) -> Tensor:
    """``table[b, idx[b, ...]]`` for ``table [B, T, ...]`` and ``idx [B, ...]`` (one flat gather)."""
    B, T = table.shape[:2]
    offset = (torch.arange(B, device=idx.device) * T).view(B, *([1] * (idx.dim() - 1)))
    return _rows(table.reshape(B * T, *table.shape[2:]), idx + offset)


def _bucket_box(padded: Tensor, negated: Tensor, idx: Tensor) -> Tuple[Tensor, Tensor]:
    """Per-axis min and max ``[B, G, 3]`` of the finite points of the buckets ``idx [B, G, S]``: ``padded``
    holds the points padded with ``+inf``, ``negated`` their negatives padded with ``+inf``, so padding never
    wins a minimum and ``hi = -min(-p)`` (exact) ignores it too (``inf, -inf`` for a bucket of padding only)."""
    return _gather_rows(padded, idx).amin(2), -_gather_rows(negated, idx).amin(2)


def point_buckets(pos: Tensor, levels: int, min_points: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """A kd split of every cloud of ``pos [B, N, 3]`` into ``G = 2 ** levels`` buckets of equal size ``M``:
    ``levels`` times, every bucket is sorted along its widest axis and cut in half. The clouds are
    padded to ``Np = G M >= max(N, G min_points)`` points with points at infinity (last, never
    anyone's neighbour). Returns the padded points ``[B, Np, 3]``, the members ``[B, G, M]`` (point
    indices) and every bucket's box ``lo, hi [B, G, 3]`` (of its finite points; ``inf, -inf`` when none).
    Traceable: the sizes follow ``N`` symbolically."""
    B, N = pos.shape[:2]
    G = 2**levels
    Np = torch.sym_max(N, G * min_points)
    Np = (Np + G - 1) // G * G
    pad = torch.full((B, Np - N, 3), float("inf"), dtype=pos.dtype, device=pos.device)
    padded, negated = torch.cat([pos, pad], 1), torch.cat([-pos, pad], 1)
    columns = padded.transpose(1, 2).reshape(B, 3 * Np)  # axis a of point j at a Np + j
    idx = torch.arange(Np, device=pos.device).expand(B, Np)
    for level in range(levels):
        seg = idx.reshape(B, 2**level, -1)
        lo, hi = _bucket_box(padded, negated, seg)  # [B, 2^l, 3]
        spread = hi - lo
        axis = torch.where(torch.isfinite(spread), spread, torch.zeros_like(spread)).argmax(-1)  # [B, 2^l]
        key = _gather_rows(columns, axis.unsqueeze(-1) * Np + seg)  # [B, 2^l, S]: the points along that axis
        idx = torch.gather(seg, 2, torch.argsort(key, dim=2)).reshape(B, Np)
    members = idx.reshape(B, G, -1)
    lo, hi = _bucket_box(padded, negated, members)
    return padded, members, lo, hi


def _squared_distances(c: Tensor, p: Tensor) -> Tensor:
    """``|c - p|^2`` summed x, y, z in that order (as :func:`gridify.ops.knn`'s torch backend), ``c [..., 3]``
    broadcast against ``p [..., 3]``."""
    d = (c[..., 0] - p[..., 0]).pow(2)
    d = d + (c[..., 1] - p[..., 1]).pow(2)
    return d + (c[..., 2] - p[..., 2]).pow(2)


#: per axis, the lowest and highest coordinate ``[R_a]`` the nodes of each lattice index take
Spans = Tuple[Tuple[Tensor, Tensor], Tuple[Tensor, Tensor], Tuple[Tensor, Tensor]]


def _node_spans(nodes: Tensor, axes: Tuple[Tensor, Tensor, Tensor]) -> Spans:
    """Per axis ``a`` and lattice index ``i``, the smallest and largest coordinate ``a`` of the nodes ``[R, 3]`` (node
    ``(i Ry + j) Rz + l``) of that index. The nodes' coordinates may differ from the per-axis ``axes`` by a
    rounding (a grid's positions and its axes are computed apart), and the bounds must hold for the
    coordinates the distances use."""
    shape = [a.size(0) for a in axes]
    lattice = nodes.view(*shape, 3)
    spans = []
    for a in range(3):
        others = tuple(i for i in range(3) if i != a)
        spans.append((lattice[..., a].amin(others), lattice[..., a].amax(others)))
    return tuple(spans)  # type: ignore[return-value]


def _axis_gaps(lo: Tensor, hi: Tensor, spans: Spans) -> List[Tensor]:
    """Per axis ``a``, ``[B, R_a, G]``: the squared gap between the nodes of each lattice index (coordinates
    within ``spans``) and every box ``lo, hi [B, G, 3]`` along ``a``. Rounding is monotone, so it is at most
    ``(c_a - p_a)^2`` as computed for any node ``c`` of that index and point ``p`` in the box."""
    gaps = []
    for a, (c_lo, c_hi) in enumerate(spans):
        lo_a, hi_a = lo[:, None, :, a], hi[:, None, :, a]
        gaps.append(((lo_a - c_hi[None, :, None]).clamp(min=0) + (c_lo[None, :, None] - hi_a).clamp(min=0)).pow(2))
    return gaps


def _bucket_bounds(lo: Tensor, hi: Tensor, spans: Spans) -> Tensor:
    """``lb [B, R, G]``: the squared distance from every grid node to every bucket box ``lo, hi [B, G, 3]``,
    per axis (:func:`_axis_gaps`) and summed x, y, z as :func:`_squared_distances` sums (node ``(a Ry + b) Rz
    + c``). Every term is at most the point's own, so ``lb`` never exceeds a member's distance."""
    gaps = _axis_gaps(lo, hi, spans)
    lb = gaps[0][:, :, None, None] + gaps[1][:, None, :, None]
    return (lb + gaps[2][:, None, None, :]).reshape(lo.size(0), -1, lo.size(1))


def _nearest_buckets(
    lo: Tensor, hi: Tensor, spans: Spans, t: int, group_levels: int, groups: int
) -> Tuple[Tensor, Tensor]:
    """Every node's ``t`` nearest buckets among those of its nearest groups, and a lower bound of its distance to
    every point of the other buckets: ``nearest [B, R, t]``, ``bound [B, R]``.

    The buckets (``lo, hi [B, G, 3]``, in kd order) form groups of ``S = 2 ** group_levels`` consecutive ones (a
    kd cell ``group_levels`` levels up), each with the box of its buckets. A node ranks the groups by their
    boxes (``_bucket_bounds``, ``[B, R, G / S]``: ``S`` times fewer than the buckets), then the ``g S``
    buckets of its ``g`` nearest groups, and keeps the ``t`` nearest. A bucket it did not keep is either in
    one of those groups, at least the ``(t+1)``-th bucket bound away, or in another group, at least the
    ``(g+1)``-th group bound away (a group's box holds its buckets' boxes): ``bound`` is the smaller of the two,
    summed x, y, z as :func:`_bucket_bounds` sums them, so it never exceeds a member's distance.
    """
    B, G = lo.shape[:2]
    S = 2 ** min(group_levels, max(G.bit_length() - 1, 0))
    count = G // S
    g = min(count, max(groups, -(-(t + 1) // S)))  # enough groups for t + 1 buckets
    glo, ghi = lo.view(B, count, S, 3).amin(2), hi.view(B, count, S, 3).amax(2)
    gbounds, gnear = torch.topk(_bucket_bounds(glo, ghi, spans), min(g + 1, count), dim=2, largest=False, sorted=True)
    shape = [c_lo.size(0) for c_lo, _ in spans]
    ids = (gnear[..., :g, None] * S + torch.arange(S, device=lo.device)).reshape(
        B, *shape, g * S
    )  # [B, Rx, Ry, Rz, gS]
    lb = None
    for a, table in enumerate(_axis_gaps(lo, hi, spans)):  # each bucket's gap along axis a, from that axis' table
        row = torch.arange(shape[a], device=lo.device).view([1 if i != a else -1 for i in range(3)] + [1]) * G
        term = _gather_rows(table.reshape(B, shape[a] * G), ids + row)
        lb = term if lb is None else lb + term  # summed x, y, z as _bucket_bounds sums them
    R = shape[0] * shape[1] * shape[2]
    ids, lb = ids.reshape(B, R, g * S), lb.reshape(B, R, g * S)
    kept = min(t + 1, g * S)
    bounds, local = torch.topk(lb, kept, dim=2, largest=False, sorted=True)
    inf = torch.full_like(bounds[..., 0], float("inf"))
    inner = bounds[..., t] if kept > t else inf  # the (t+1)-th bucket of the searched groups
    outer = gbounds[..., g] if count > g else inf  # the (g+1)-th group
    return torch.gather(ids, 2, local[..., :t]), torch.minimum(inner, outer)


def _nearest_candidates(c: Tensor, cand: Tensor, pts: Tensor, bound: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """The ``k`` nearest of the candidate points ``cand [..., S]`` (coordinates ``pts [..., S, 3]``) of the
    nodes ``c [..., 3]``, and whether that is provably every point's answer: the ``k``-th distance is below
    ``bound [...]`` (no other point is that near) and the ``k + 1`` nearest distances all differ (no tie)."""
    dist, local = torch.topk(_squared_distances(c.unsqueeze(-2), pts), k + 1, dim=-1, largest=False, sorted=True)
    found = torch.gather(cand, -1, local[..., :k])
    proven = (dist[..., k - 1] < bound) & ~(dist[..., 1:] == dist[..., :-1]).any(-1)
    return found, proven


def _widened_search(
    c: Tensor, b: Tensor, padded: Tensor, members: Tensor, lo: Tensor, hi: Tensor, k: int, t: int
) -> Tuple[Tensor, Tensor]:
    """The bucketed search again for ``F`` nodes ``c [F, 3]`` of the clouds ``b [F]``, in their ``t`` nearest
    buckets: ``found [F, k]`` and ``proven [F]`` (:func:`_nearest_candidates`). The bounds are summed x, y, z
    as :func:`_bucket_bounds` sums them, so none exceeds a member's distance."""
    B, G, M = members.shape
    gap = (_rows(lo, b) - c[:, None]).clamp(min=0) + (c[:, None] - _rows(hi, b)).clamp(min=0)  # [F, G, 3]
    gap = gap.pow(2)
    bounds, nearest = torch.topk(gap[..., 0] + gap[..., 1] + gap[..., 2], t + 1, dim=1, largest=False, sorted=True)
    cand = _rows(members.reshape(B * G, M), b[:, None] * G + nearest[:, :t]).reshape(c.size(0), t * M)
    pts = _rows(padded.reshape(-1, 3), b[:, None] * padded.size(1) + cand)
    return _nearest_candidates(c, cand, pts, bounds[:, t], k)


def node_points_bucketed(
    pos: Tensor,
    k: int,
    nodes: Tensor,
    axes: Tuple[Tensor, Tensor, Tensor],
    node_chunk: int = NODE_CHUNK,
    levels: int = BUCKET_LEVELS,
    searched: int = BUCKETS_SEARCHED,
    min_points: int = BUCKET_MIN_POINTS,
    widened: int = BUCKETS_WIDENED,
    group_levels: int = BUCKET_GROUP_LEVELS,
    groups: int = BUCKET_GROUPS_SEARCHED,
) -> Tensor:
    r"""``A`` of :func:`dense_grid_knn_unchecked` (node -> its ``k`` nearest points, ties to the lower
    point) without forming every node-point distance, exactly.

    The points are split into buckets (:func:`point_buckets`). A node ``c`` looks at the points of
    the ``t`` nearest buckets of its ``groups`` nearest groups of buckets (``_nearest_buckets``: ranking
    groups first spares ranking every bucket for every node) and takes the ``k + 1`` nearest of them (same
    distances). Every point outside those buckets is at least ``lb(c)`` away, the smaller of the ``(t+1)``-th
    bucket bound in those groups and the next group's bound: where the ``k``-th distance found is
    below it and the ``k + 1`` distances are all different, no other point and no other order can
    be the answer, and it is the exact one. The other nodes (a node in empty space, far from every
    point, sees many buckets at about the same distance: 8-29 % of the nodes of a 48 x 48 x 8 grid over
    a real 16k LiDAR crop) look again, the same way, in their ``widened`` nearest buckets; those still
    unproven (2-24 of those 18,432 nodes; tied distances) search every point with the brute force's tie
    rule. Node blocks of ``node_chunk`` bound the memory.

    Shapes:
        pos ``[B, N, 3]`` (finite, ``N >= k``), nodes ``[R, 3]`` (the lattice of ``axes``) -> node_points ``[B, R, k]``
    """
    B, N = pos.shape[:2]
    t = min(searched, 2**levels - 1)
    padded, members, lo, hi = point_buckets(pos, levels, max(min_points, -(-(k + 1) // t)))  # t M > k candidates
    nearest, bound = _nearest_buckets(lo, hi, _node_spans(nodes, axes), t, group_levels, groups)
    wide = max(t, min(widened, 2**levels - 1))
    blocks = []
    for s in range(0, nodes.size(0), node_chunk):
        c = nodes[s : s + node_chunk]
        cand = _gather_rows(members, nearest[:, s : s + node_chunk]).reshape(B, c.size(0), -1)  # [B, C, t M]
        found, proven = _nearest_candidates(c[None], cand, _gather_rows(padded, cand), bound[:, s : s + node_chunk], k)
        unproven = (~proven).nonzero()  # [F, 2]: (cloud, node of the block)
        cb, cn = unproven[:, 0], unproven[:, 1]
        again, sure = _widened_search(_rows(c, cn), cb, padded, members, lo, hi, k, wide)
        found = found.index_put((cb, cn), again)
        left = (~sure).nonzero().squeeze(1)  # [F']: still unproven, every point
        lb, ln = _rows(cb, left), _rows(cn, left)
        brute = _squared_distances(_rows(c, ln).unsqueeze(1), _rows(pos, lb))  # [F', N]
        found = found.index_put((lb, ln), _smallest(brute.unsqueeze(0), k).squeeze(0))
        blocks.append(found)
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, 1)


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


def dense_grid_knn_unchecked(
    pos: Tensor,
    k: int,
    nodes: Tensor,
    axes: Tuple[Tensor, Tensor, Tensor],
    node_chunk: int = NODE_CHUNK,
    search: str = "brute",
) -> Tuple[Tensor, Tensor, Tensor]:
    r"""The fixed-shape bilateral kNN graph of :func:`dense_bilateral_knn_unchecked` on any grid
    ``(Rx, Ry, Rz)``, in bounded memory (traceable with static ``k``).

    ``A`` (node -> its ``k`` nearest points) runs block by block over ``node_chunk`` nodes
    (``[B, node_chunk, N]`` distances at a time), or, with ``search="bucketed"``, through
    :func:`node_points_bucketed` (the same neighbours from far fewer distances). ``P`` (point -> its ``k' = min(k, R^3)`` nearest
    nodes) looks only at the ``m_a = min(k', R_a)`` nearest coordinates of every axis: a node whose
    ``x`` coordinate is not among them has ``m_a >= k'`` nodes (same ``y, z``) that are nearer, or
    as near and of lower index, so the ``k'`` nearest lie among the ``m_x m_y m_z`` candidates;
    these are listed in increasing node index, so ties go to the lower node as in
    :func:`dense_bilateral_knn_unchecked`. Same outputs (``node_points [B, R^3, k]``,
    ``point_nodes [B, N, k']``, ``keep [B, N, k']``) and float arithmetic.
    """
    B, N = pos.shape[:2]
    R3 = nodes.size(0)
    if search == "bucketed":
        node_points = node_points_bucketed(pos, k, nodes, axes, node_chunk)
    else:
        blocks = []
        for s in range(0, R3, node_chunk):  # [B, chunk, N] distances, as knn's torch backend
            blocks.append(_smallest(_squared_distances(nodes[None, s : s + node_chunk, None], pos[:, None]), k))
        node_points = blocks[0] if len(blocks) == 1 else torch.cat(blocks, 1)
    kk = min(k, R3)
    shape = [a.size(0) for a in axes]
    dists, idxs = [], []
    for a, ax in enumerate(axes):
        da = (ax - pos[..., a : a + 1]).pow(2)  # [B, N, R_a], as grid_knn
        idx = _smallest(da, min(kk, shape[a])).sort(-1).values  # the nearest coordinates, in index order
        dists.append(torch.gather(da, 2, idx))
        idxs.append(idx)
    dist = dists[0][..., :, None, None] + dists[1][..., None, :, None]
    dist = (dist + dists[2][..., None, None, :]).reshape(B, N, -1)  # candidate (x, y, z) at (x m_y + y) m_z + z
    local = _smallest(dist, kk)  # [B, N, k']: the candidates in node order, so ties go to the lower node
    m_y, m_z = idxs[1].size(-1), idxs[2].size(-1)
    ix = torch.gather(idxs[0], 2, local // (m_y * m_z))
    iy = torch.gather(idxs[1], 2, local // m_z % m_y)
    point_nodes = (ix * shape[1] + iy) * shape[2] + torch.gather(idxs[2], 2, local % m_z)
    chosen = torch.gather(node_points, 1, point_nodes.reshape(B, N * kk, 1).expand(-1, -1, k))
    own = torch.arange(N, device=pos.device).view(1, N, 1, 1)
    keep = ~(chosen.view(B, N, kk, k) == own).any(-1)
    return node_points, point_nodes, keep


def _aggregate_dense(
    aggr: str,
    dense: Tensor,
    dense_keep: Optional[Tensor],
    scat: Tensor,
    scat_dst: Tensor,
    scat_keep: Optional[Tensor],
) -> Tensor:
    """``AGG`` (a :class:`~gridify.nn.gridification.BipartiteConv` ``aggr``) over the two edge kinds of the
    fixed-shape graph: ``dense [D, t, H]`` (the ``t`` edges every target ``d < D`` has, ``dense_keep [D, t]``
    masking duplicates, None: all) and ``scat [E, H]`` scattered to the targets ``scat_dst [E]``
    (``scat_keep [E]``, None: all). The max needs no mask: a duplicate edge carries the message of the
    edge it repeats (same features, same offset; the same value up to the rounding of the two evaluations),
    and a maximum counts it once. It scatters whole rows (its index repeated along them): exported, it is ``ScatterND``
    (``gridify.export.tracing.scatter_reduce_rows``)."""
    H = dense.size(-1)
    if aggr == "max":
        return dense.amax(1).scatter_reduce(0, scat_dst.unsqueeze(-1).expand(-1, H), scat, "amax")
    dk = (
        torch.ones(dense.shape[:2], dtype=dense.dtype, device=dense.device)
        if dense_keep is None
        else dense_keep.to(dense.dtype)
    )
    sk = (
        torch.ones(scat.size(0), dtype=scat.dtype, device=scat.device)
        if scat_keep is None
        else scat_keep.to(scat.dtype)
    )
    agg = (dense * dk.unsqueeze(-1)).sum(1).index_add(0, scat_dst, scat * sk.unsqueeze(-1))
    if aggr == "mean":
        agg = agg / dk.sum(1).index_add(0, scat_dst, sk).unsqueeze(-1)
    return agg


def gridify_dense_graph(
    module: Gridification, pos: Tensor, x: Tensor, nodes: Tensor, graph: Tuple[Tensor, Tensor, Tensor]
) -> Tensor:
    """The gridification ``[B, C, Rx, Ry, Rz]`` of ``pos [B, N, 3]`` / ``x [B, N, F]`` over the
    fixed-shape ``graph`` of :func:`dense_grid_knn_unchecked` (no checks: what the export traces)."""
    node_points, point_nodes, keep = graph
    conv, grid = module.conv, module.grid
    B, N = pos.shape[:2]
    R3, k = nodes.size(0), node_points.size(2)
    h = conv.node_embedding(x)
    H = h.size(-1)
    cloud = torch.arange(B, device=pos.device)
    src = (node_points + (cloud * N).view(B, 1, 1)).reshape(-1)  # A: node <- its k points, [B R^3 k]
    dst = (point_nodes + (cloud * R3).view(B, 1, 1)).reshape(-1)  # P: point -> its k' nodes, [B N k']
    m_a = conv.edge_message(
        _rows(h.reshape(-1, H), src), nodes.repeat(B, 1).repeat_interleave(k, 0) - _rows(pos.reshape(-1, 3), src)
    )
    m_b = conv.edge_message(h.unsqueeze(2), _rows(nodes, point_nodes) - pos.unsqueeze(2)).reshape(-1, H)
    out = conv.update(_aggregate_dense(conv.aggr, m_a.view(B * R3, k, H), None, m_b, dst, keep.reshape(-1)))
    return grid.to_dense_unchecked(out, B)


def degridify_dense_graph(
    module: Degridification, z: Tensor, pos: Tensor, nodes: Tensor, graph: Tuple[Tensor, Tensor, Tensor]
) -> Tensor:
    r"""The de-gridification ``[B, N, C_out]`` of grid features ``z [B, C, Rx, Ry, Rz]`` at the points
    ``pos [B, N, 3]`` over the transposed edges of the fixed-shape ``graph``: node ``i`` sends to
    every point of ``A_i`` and to every point ``j`` whose ``P_j`` holds it (``keep``), with
    offsets ``c_j - c_i^G`` (no checks: what the export traces)."""
    node_points, point_nodes, keep = graph
    conv = module.conv
    B, N = pos.shape[:2]
    R3, k, kk = nodes.size(0), node_points.size(2), point_nodes.size(2)
    h = conv.node_embedding(z.permute(0, 2, 3, 4, 1).reshape(B * R3, -1))
    H = h.size(-1)
    cloud = torch.arange(B, device=pos.device)
    dst = (node_points + (cloud * N).view(B, 1, 1)).reshape(-1)  # A edges: node -> point, [B R^3 k]
    pos_flat = pos.reshape(-1, 3)
    m_a = conv.edge_message(
        h.repeat_interleave(k, 0), _rows(pos_flat, dst) - nodes.repeat(B, 1).repeat_interleave(k, 0)
    )
    src = (point_nodes + (cloud * R3).view(B, 1, 1)).reshape(-1)  # P edges: point <- node, [B N k']
    m_b = conv.edge_message(
        _rows(h, src), pos.unsqueeze(2).expand(-1, -1, kk, -1).reshape(-1, 3) - _rows(nodes, point_nodes).reshape(-1, 3)
    )
    out = conv.update(_aggregate_dense(conv.aggr, m_b.view(B * N, kk, H), keep.reshape(B * N, kk), m_a, dst, None))
    return out.view(B, N, -1)
