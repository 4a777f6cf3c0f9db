r"""Fixed-shape (traceable) neighbour searches between equally sized clouds and a lattice of grid nodes.

:func:`gridify.ops.knn` and :func:`gridify.ops.grid_knn` search with data-dependent code (a KD-tree,
chunk sizes read from the data, loops until a window is exact), which no exporter can trace. The
searches here give the same neighbours on clouds ``pos [B, N, 3]`` with tensors whose shapes follow
``B`` and ``N`` alone (what the ONNX export traces, through :mod:`gridify.nn.dense`), per cloud ``b``:

    knn_dense:       A_{b,i} = topk_k { ||c_i - p_j||^2 : j < N }        (node i <- its k nearest points)
    grid_knn_dense:  P_{b,j} = topk_k' { ||c_i - p_j||^2 : i < R }       (point j -> its k' = min(k, R) nearest nodes)

with ``c_i`` the ``R = Rx Ry Rz`` nodes of the lattice ``axes`` (node ``(a Ry + b) Rz + c`` at
``(x_a, y_b, z_c)``). Squared distances are summed x, y, z in that order, as :func:`gridify.ops.knn`'s
torch backend sums them (``A``) and as :func:`gridify.ops.grid_knn` does per axis (``P``), and exact ties
go to the lower index, as every backend of :func:`gridify.ops.knn` breaks them (in a traced graph by ONNX
``TopK``'s definition; eagerly by ``gridify.ops.knn.smallest_by_index``).

``A`` runs in blocks of ``node_chunk`` nodes (``[B, node_chunk, N]`` distances at a time), by brute force
(``search="brute"``) or, with ``search="bucketed"`` (:func:`node_points_bucketed`), in the nearest buckets
of a kd split of the points with an exactness check and a brute-force fallback: the same neighbours from far
fewer distances. ``P`` looks only at the ``m_a = min(k', R_a)`` nearest coordinates of every axis: a node
whose ``x`` coordinate is not among them has ``m_a >= k'`` nodes (same ``y, z``) that are nearer, or as near
and of lower index, so the ``k'`` nearest lie among the ``m_x m_y m_z`` candidates, listed in increasing
node index (ties to the lower node).

:func:`knn_dense` and :func:`grid_knn_dense` validate their arguments, then run the ``*_unchecked``
implementations; the tests compare both with :func:`gridify.ops.knn_reference`.

Shapes:
    knn_dense: pos ``[B, N, 3]``, nodes ``[R, 3]``, axes ``[Rx], [Ry], [Rz]`` -> node_points ``[B, R, k]``.
    grid_knn_dense: pos ``[B, N, 3]``, axes -> point_nodes ``[B, N, min(k, R)]``.
    point_buckets: pos ``[B, N, 3]`` -> padded ``[B, Np, 3]``, members ``[B, G, M]``, lo / hi ``[B, G, 3]``.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from .._checks import (
    check_alloc,
    check_choice,
    check_finite,
    check_float,
    check_int,
    check_tensor,
    element_size,
    fail,
)
from .knn import smallest_by_index

__all__ = [
    "NODE_CHUNK",
    "SEARCHES",
    "BUCKET_LEVELS",
    "BUCKETS_SEARCHED",
    "BUCKETS_WIDENED",
    "BUCKET_MIN_POINTS",
    "BUCKET_GROUP_LEVELS",
    "BUCKET_GROUPS_SEARCHED",
    "check_dense_clouds",
    "check_dense_size",
    "grid_knn_dense",
    "grid_knn_dense_unchecked",
    "index_rows",
    "knn_dense",
    "knn_dense_unchecked",
    "node_points_bucketed",
    "point_buckets",
]

#: Grid nodes per block of the node -> points search: its distance block is ``[B, NODE_CHUNK, N]``
#: (a 16,384-point crop: 64 MiB), so a scene grid of 8,192 nodes never holds the whole ``[B, R, N]`` matrix.
NODE_CHUNK = 1024
#: The node -> points searches (:func:`knn_dense` ``search``): ``"brute"`` forms every node-point
#: distance (in blocks of ``node_chunk`` nodes); ``"bucketed"`` (:func:`node_points_bucketed`) looks in
#: the nearest buckets of a kd split of the points and falls back to every point only for the nodes it
#: cannot prove exact. Both give the same neighbours.
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


# --------------------------------------------------------------------------------------
# checks of the entries
# --------------------------------------------------------------------------------------
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
    """Refuse (before allocating) a search whose ``[B, R, N]`` distance block (``R`` nodes at a time) alone
    exceeds the allocation limit; ``what`` names the arguments that decide the size."""
    nbytes = batch * num_points * num_nodes * element_size(dtype)
    check_alloc(
        where, f"{what} (a [B, R^3, N] = [{batch}, {num_nodes}, {num_points}] {str(dtype)[6:]} distance matrix)", nbytes
    )


def _check_lattice(where: str, pos: Tensor, axes: Any, nodes: Optional[Any] = None) -> Tuple[Tensor, Tensor, Tensor]:
    """``axes``: three 1-D floating tensors (the lattice's coordinates per axis, at least one each) of ``pos``'
    dtype and device; ``nodes``, when given, ``[Rx Ry Rz, 3]`` of the same."""
    if not (isinstance(axes, (tuple, list)) and len(axes) == 3 and all(isinstance(a, Tensor) for a in axes)):
        fail(where, "axes must be three 1-D tensors: the lattice's node coordinates along x, y and z")
    for a, t in zip("xyz", axes):
        if t.dim() != 1 or t.numel() == 0 or t.dtype != pos.dtype or t.device != pos.device:
            fail(
                where,
                f"axes[{'xyz'.index(a)}] ({a}) must be a non-empty 1-D tensor of pos' dtype and device "
                f"({pos.dtype} on {pos.device}), got {t.dtype} {tuple(t.shape)} on {t.device}",
            )
        check_finite(where, f"axes[{'xyz'.index(a)}]", t)
    if nodes is not None:
        R = math.prod(a.numel() for a in axes)
        nodes = check_tensor(where, "nodes", nodes)
        if tuple(nodes.shape) != (R, 3) or nodes.dtype != pos.dtype or nodes.device != pos.device:
            fail(
                where,
                f"nodes must be the lattice of axes, [Rx Ry Rz, 3] = [{R}, 3] of pos' dtype and device, got "
                f"{nodes.dtype} {tuple(nodes.shape)} on {nodes.device}",
            )
        check_finite(where, "nodes", nodes)
    return tuple(axes)  # type: ignore[return-value]


def knn_dense(
    pos: Tensor,
    k: int,
    nodes: Tensor,
    axes: Sequence[Tensor],
    node_chunk: int = NODE_CHUNK,
    search: str = "brute",
) -> Tensor:
    """Every lattice node's ``k`` nearest points of each cloud, ``[B, R, k]`` (module docstring ``A``).

    ``pos [B, N, 3]`` (finite, ``N >= k``), ``nodes [R, 3]`` the lattice of ``axes`` (``grid.positions()``),
    ``search`` one of :data:`SEARCHES`. Validates its arguments, then runs :func:`knn_dense_unchecked`.
    """
    where = "knn_dense"
    k = check_int(where, "k", k)
    pos = check_dense_clouds(where, pos, "pos", k)
    axes = _check_lattice(where, pos, axes, nodes)
    node_chunk = check_int(where, "node_chunk", node_chunk)
    check_choice(where, "search", search, SEARCHES)
    check_dense_size(
        where, f"pos {tuple(pos.shape)}", pos.size(0), pos.size(1), min(node_chunk, nodes.size(0)), pos.dtype
    )
    return knn_dense_unchecked(pos, k, nodes, axes, node_chunk, search)


def grid_knn_dense(pos: Tensor, k: int, axes: Sequence[Tensor]) -> Tensor:
    """Every point's ``k' = min(k, R)`` nearest lattice nodes, ``[B, N, k']`` (module docstring ``P``).

    ``pos [B, N, 3]`` finite, ``axes`` the lattice's coordinates per axis. Validates its arguments, then
    runs :func:`grid_knn_dense_unchecked`.
    """
    where = "grid_knn_dense"
    k = check_int(where, "k", k)
    pos = check_dense_clouds(where, pos, "pos")
    axes = _check_lattice(where, pos, axes)
    R = math.prod(a.numel() for a in axes)
    m = math.prod(min(k, a.numel()) for a in axes)
    check_alloc(where, f"k={k} for pos {tuple(pos.shape)}", pos.size(0) * pos.size(1) * (m + min(k, R)) * 8)
    return grid_knn_dense_unchecked(pos, k, axes)


# --------------------------------------------------------------------------------------
# the searches
# --------------------------------------------------------------------------------------
def _smallest(d: Tensor, k: int) -> Tensor:
    """Columns of the ``k`` smallest entries of every row of ``d [B, M, N]``, ties to the lower column
    as :func:`gridify.ops.knn` breaks them: in the exported graph ONNX ``TopK`` does that by
    definition; run eagerly, ``torch.topk`` does not promise it, so :func:`smallest_by_index` runs."""
    if torch.compiler.is_compiling() or torch.compiler.is_exporting():
        return torch.topk(d, k, dim=2, largest=False, sorted=True).indices
    return smallest_by_index(d.reshape(-1, d.size(2)), k)[1].view(d.size(0), d.size(1), k)


def _squared_distances(c: Tensor, p: Tensor) -> Tensor:
    """``|c - p|^2`` summed x, y, z in that order (as :func:`gridify.ops.knn`'s torch backend), ``c [..., 3]``
    broadcast against ``p [..., 3]``."""
    d = (c[..., 0] - p[..., 0]).pow(2)
    d = d + (c[..., 1] - p[..., 1]).pow(2)
    return d + (c[..., 2] - p[..., 2]).pow(2)


def index_rows(table: Tensor, idx: Tensor) -> Tensor:
    """``table[idx]`` for ``table [T, ...]`` and integer ``idx`` of any shape: one ``index_select`` of the
    flattened index (exported as ONNX ``Gather``, which onnxruntime runs faster than the ``GatherND`` of
    advanced indexing)."""
    return table.index_select(0, idx.reshape(-1)).view(*idx.shape, *table.shape[1:])


def _gather_rows(table: Tensor, idx: Tensor) -> Tensor:
    """``table[b, idx[b, ...]]`` for ``table [B, T, ...]`` and ``idx [B, ...]`` (one flat gather)."""
    B, T = table.shape[:2]
    offset = (torch.arange(B, device=idx.device) * T).view(B, *([1] * (idx.dim() - 1)))
    return index_rows(table.reshape(B * T, *table.shape[2:]), idx + offset)


def knn_dense_unchecked(
    pos: Tensor,
    k: int,
    nodes: Tensor,
    axes: Sequence[Tensor],
    node_chunk: int = NODE_CHUNK,
    search: str = "brute",
) -> Tensor:
    """:func:`knn_dense` on validated inputs: blocks of ``node_chunk`` nodes by brute force (``[B, node_chunk, N]``
    distances at a time, as :func:`gridify.ops.knn`'s torch backend computes them), or
    :func:`node_points_bucketed` (``search="bucketed"``). Traceable with static ``k``."""
    if search == "bucketed":
        return node_points_bucketed(pos, k, nodes, tuple(axes), node_chunk)  # type: ignore[arg-type]
    blocks = []
    for s in range(0, nodes.size(0), node_chunk):
        blocks.append(_smallest(_squared_distances(nodes[None, s : s + node_chunk, None], pos[:, None]), k))
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, 1)


def grid_knn_dense_unchecked(pos: Tensor, k: int, axes: Sequence[Tensor]) -> Tensor:
    """:func:`grid_knn_dense` on validated inputs: the ``m_a`` nearest coordinates of every axis
    (``(x_a - p_a)^2``, as :func:`gridify.ops.grid_knn`), their sums over the ``m_x m_y m_z`` candidates
    in node order, the ``k'`` smallest (ties to the lower node). Traceable with static ``k``."""
    B, N = pos.shape[:2]
    shape = [a.size(0) for a in axes]
    kk = min(k, math.prod(shape))
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
    return (ix * shape[1] + iy) * shape[2] + torch.gather(idxs[2], 2, local % m_z)


# --------------------------------------------------------------------------------------
# the bucketed node -> points search
# --------------------------------------------------------------------------------------
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
    gap = (index_rows(lo, b) - c[:, None]).clamp(min=0) + (c[:, None] - index_rows(hi, b)).clamp(min=0)  # [F, G, 3]
    gap = gap.pow(2)
    bounds, nearest = torch.topk(gap[..., 0] + gap[..., 1] + gap[..., 2], t + 1, dim=1, largest=False, sorted=True)
    cand = index_rows(members.reshape(B * G, M), b[:, None] * G + nearest[:, :t]).reshape(c.size(0), t * M)
    pts = index_rows(padded.reshape(-1, 3), b[:, None] * padded.size(1) + cand)
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
    r"""``A`` of :func:`knn_dense_unchecked` (node -> its ``k`` nearest points, ties to the lower
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
        again, sure = _widened_search(index_rows(c, cn), cb, padded, members, lo, hi, k, wide)
        found = found.index_put((cb, cn), again)
        left = (~sure).nonzero().squeeze(1)  # [F']: still unproven, every point
        lb, ln = index_rows(cb, left), index_rows(cn, left)
        brute = _squared_distances(index_rows(c, ln).unsqueeze(1), index_rows(pos, lb))  # [F', N]
        found = found.index_put((lb, ln), _smallest(brute.unsqueeze(0), k).squeeze(0))
        blocks.append(found)
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, 1)
