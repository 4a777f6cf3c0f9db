"""k-nearest-neighbour search between two (batched) point sets.

For every row ``y_i`` of ``y`` find the ``k`` rows ``x_j`` of ``x`` in the same cloud with the
smallest Euclidean distance ``||y_i - x_j||``. Returned as a PyG-style ``edge_index``:

    edge_index[0] = indices into y (queries), edge_index[1] = indices into x (neighbours),

grouped by query and, within a query, ordered by increasing distance. A query whose cloud holds
fewer than ``k`` points gets all of them (``min(k, n_b)`` edges), never points of another cloud.

Backends (``backend=``):

* ``"torch_cluster"``: ``torch_cluster.knn`` (optional dependency, CPU and CUDA).
* ``"torch"``: exact brute force in pure PyTorch, computed in chunks of queries against only
  the clouds those queries belong to, so memory is O(chunk x N) (any device).
* ``"kdtree"``: SciPy ``cKDTree`` (CPU, O(N log N)). All clouds share one tree: the cloud index
  becomes an extra coordinate scaled far beyond any in-cloud distance, so no Python loop over
  clouds is needed and no neighbour can come from another cloud.
* ``"auto"``: torch_cluster when installed; otherwise kdtree for large CPU inputs, torch else.

Distances are compared in the working frame of :mod:`gridify.ops.distance` (float32 for
float16/bfloat16/float32 inputs, float64 for float64, scaled by a power of two when the
coordinates are extreme), so no dtype and no magnitude of coordinates loses neighbours. The
result ``[2, E]`` is refused before it is allocated when it would exceed the allocation limit
(:func:`gridify._checks.check_alloc`).

Shapes:
    x: [N, D], y: [M, D], batch_x: [N] (sorted), batch_y: [M] (sorted) -> edge_index: [2, E],
    E <= M * k
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from .. import _optional
from .._checks import check_alloc, check_batch, check_choice, check_finite, check_int, check_point_pair, fail
from .distance import distance_frame

BACKENDS = ("auto", "torch_cluster", "torch", "kdtree")
#: Above this many candidate pairs (N * M), ``auto`` on CPU picks the KD-tree.
KDTREE_MIN_PAIRS = 1 << 20
#: Elements of the distance block held in memory at once by the brute-force path.
CHUNK_ELEMENTS = 1 << 24
#: Largest ``k`` a KD-tree re-query of tied rows asks for before the brute force takes them.
TIE_QUERY_MAX = 1 << 10


def check_knn_inputs(
    x: object,
    y: object,
    k: object,
    batch_x: Optional[Tensor],
    batch_y: Optional[Tensor],
    backend: str = "auto",
    where: str = "knn",
    names: Tuple[str, str] = ("x", "y"),
) -> Tuple[Tensor, Tensor, int, Tensor, Tensor, Tensor]:
    """Validate the arguments of a kNN search once: ``(x, y, k, batch_x, batch_y, counts of x)``.

    ``names`` are the caller's names of ``x`` and ``y`` (used in the messages).
    """
    nx_name, ny_name = names
    x, y = check_point_pair(where, names, x, y)
    k = check_int(where, "k", k)
    check_choice(where, "backend", backend, BACKENDS, unknown=True)
    bx, nx, cx = check_batch(where, "batch_x", batch_x, x.size(0), device=x.device, allow_empty=x.size(0) == 0)
    by, ny, _ = check_batch(where, "batch_y", batch_y, y.size(0), device=y.device, allow_empty=True)
    if ny > nx:
        fail(where, f"batch_y refers to cloud {ny - 1} but {nx_name} has points for only {nx} clouds")
    check_finite(where, nx_name, x, bx)
    check_finite(where, ny_name, y, by)
    check_knn_backend(where, backend, x.device)
    check_knn_size(where, y.size(0), x.size(0), k, x.device)
    return x, y, k, bx, by, cx


def knn_bytes(num_queries: int, num_points: int, k: int) -> int:
    """Bytes a search of ``num_queries`` queries among ``num_points`` points allocates: at most
    ``min(k, N)`` neighbours per query, two int64 indices per edge and the search's own distance
    and index tables of the same size."""
    return 32 * num_queries * min(k, num_points)


def check_knn_size(where: str, num_queries: int, num_points: int, k: int, device: Optional[torch.device]) -> None:
    """Refuse a search whose result (``knn_bytes``) would exceed the allocation limit."""
    check_alloc(
        where,
        f"k={k} for {num_queries} queries among {num_points} points",
        knn_bytes(num_queries, num_points, k),
        device,
    )


def check_knn_backend(where: str, backend: str, device: torch.device, name: str = "backend") -> None:
    """Refuse a backend that cannot run here: ``torch_cluster`` when it is not installed, the
    KD-tree on another device than the CPU (``backend`` itself already one of ``BACKENDS``)."""
    if backend == "torch_cluster" and not _optional.WITH_TORCH_CLUSTER:
        fail(
            where,
            f"{name}='torch_cluster' requested but torch_cluster is not installed "
            "(pip install --no-build-isolation torch-cluster)",
        )
    if backend == "kdtree" and device.type != "cpu":
        fail(where, f"{name}='kdtree' runs on the CPU only; inputs are on {device}")


def choose_knn_backend(backend: str, x: Tensor, y: Tensor) -> str:
    """The backend ``"auto"`` stands for with these inputs (any other name is returned as is):
    torch_cluster when installed, else the KD-tree for large CPU inputs, else brute force."""
    if backend != "auto":
        return backend
    if _optional.WITH_TORCH_CLUSTER:
        return "torch_cluster"
    if x.device.type == "cpu" and x.size(0) * y.size(0) > KDTREE_MIN_PAIRS:
        return "kdtree"
    return "torch"


def knn(
    x: Tensor,
    y: Tensor,
    k: int,
    batch_x: Optional[Tensor] = None,
    batch_y: Optional[Tensor] = None,
    backend: str = "auto",
) -> Tensor:
    """The ``k`` nearest rows of ``x`` (same cloud) for every row of ``y``; see module docstring.

    Validates its arguments (ValueError naming the problem), then runs :func:`knn_unchecked`.
    """
    x, y, k, bx, by, counts = check_knn_inputs(x, y, k, batch_x, batch_y, backend)
    return knn_unchecked(x, y, k, bx, by, counts, backend)


def knn_unchecked(
    x: Tensor, y: Tensor, k: int, batch_x: Tensor, batch_y: Tensor, counts: Tensor, backend: str = "auto"
) -> Tensor:
    """:func:`knn` without validation, for callers that have validated their inputs already.

    ``batch_x``/``batch_y`` are sorted int64 vectors, ``counts`` the number of points of ``x`` per
    cloud (``[B]``, every entry > 0), ``x``/``y`` finite floating tensors on one device, a
    ``backend`` that runs there (``check_knn_backend``) and a result within the allocation
    limit (``check_knn_size``): the caller's public entry checked all of it.
    """
    if y.size(0) == 0 or x.size(0) == 0:
        return torch.zeros(2, 0, dtype=torch.long, device=x.device)
    backend = choose_knn_backend(backend, x, y)
    if backend == "torch_cluster":
        row, col = _knn_cluster(x, y, k, batch_x, batch_y)
        return _canonical(x, y, row, col)
    if backend == "kdtree":
        row, col = _knn_kdtree(x, y, k, batch_x, batch_y, counts)
    else:
        row, col = _knn_torch(x, y, k, batch_x, batch_y, counts)
    return torch.stack([row, col])  # both already grouped by query, nearest first


def _canonical(x: Tensor, y: Tensor, row: Tensor, col: Tensor) -> Tensor:
    """Order edges by query, then by distance, then by neighbour index."""
    (x, y), _ = distance_frame(x, y)
    d = (y[row] - x[col]).pow(2).sum(-1)
    order = torch.argsort(col, stable=True)
    order = order[torch.argsort(d[order], stable=True)]
    order = order[torch.argsort(row[order], stable=True)]
    return torch.stack([row[order], col[order]])


def _knn_cluster(x, y, k, bx, by):
    ei = _optional.torch_cluster.knn(x.contiguous(), y.contiguous(), k, bx, by)
    row, col = ei[0], ei[1]
    keep = bx[col] == by[row]  # defensive: never across clouds
    return row[keep], col[keep]


def _knn_torch(x: Tensor, y: Tensor, k: int, bx: Tensor, by: Tensor, counts: Tensor):
    ptr = torch.zeros(counts.numel() + 1, dtype=torch.long, device=x.device)
    ptr[1:] = torch.cumsum(counts, 0)
    ptr_l = ptr.tolist()
    by_l = by
    rows, cols = [], []
    m = y.size(0)
    # squared distances in the working frame (gridify.ops.distance); other-cloud candidates are
    # excluded by a mask, not by their value
    (x, y), _ = distance_frame(x, y)
    start = 0
    while start < m:
        b0 = int(by_l[start])
        # grow the chunk while the candidate block stays within budget
        span = max(1, ptr_l[b0 + 1] - ptr_l[b0])
        step = max(1, CHUNK_ELEMENTS // span)
        end = min(m, start + step)
        b1 = int(by_l[end - 1])
        while end - start > 1 and (end - start) * (ptr_l[b1 + 1] - ptr_l[b0]) > CHUNK_ELEMENTS:
            end = start + max(1, (end - start) // 2)
            b1 = int(by_l[end - 1])
        lo, hi = ptr_l[b0], ptr_l[b1 + 1]
        xs, ys = x[lo:hi], y[start:end]
        d = torch.zeros(end - start, hi - lo, dtype=x.dtype, device=x.device)
        for c in range(x.size(1)):
            d += (ys[:, c, None] - xs[None, :, c]).pow(2)
        same = by[start:end, None] == bx[None, lo:hi]
        d.masked_fill_(~same, float("inf"))
        kk = min(k, hi - lo)
        dist, idx = smallest_by_index(d, kk)
        valid = same.gather(1, idx)
        r = torch.arange(start, end, device=x.device).unsqueeze(1).expand(-1, kk)
        rows.append(r[valid])
        cols.append(idx[valid] + lo)
        start = end
    return torch.cat(rows), torch.cat(cols)


def smallest_by_index(d: Tensor, kk: int) -> Tuple[Tensor, Tensor]:
    """The ``kk`` smallest entries of every row of ``d [M, N]`` and their columns, ordered by
    (value, column). Among entries equal to a row's ``kk``-th smallest value, the lowest columns are
    taken, so the selection does not depend on the row's length or on how ``topk`` breaks ties
    (a cloud's neighbours are the same alone and in any batch). ``inf`` marks excluded entries."""
    extra = int(kk < d.size(1))  # one more entry shows whether the kk-th is tied
    dist, idx = torch.topk(d, kk + extra, dim=1, largest=False, sorted=True)
    kth = dist[:, kk - 1 : kk]
    # a row is ambiguous when an entry equal to its kk-th value was left out (exact ties only)
    ambiguous = (dist[:, -1] == kth[:, 0]) & torch.isfinite(kth[:, 0]) if extra else None
    dist, idx = dist[:, :kk].contiguous(), idx[:, :kk].contiguous()
    if ambiguous is not None and bool(ambiguous.any()):
        rows = ambiguous.nonzero().squeeze(1)
        sub, th = d[rows], kth[rows]
        below, tied = sub < th, sub == th
        take = below | (tied & (tied.cumsum(1) <= kk - below.sum(1, keepdim=True)))
        cols = take.nonzero()[:, 1].view(-1, kk)  # row-major: ascending columns
        # by distance; a stable sort keeps equal distances in column order
        dist[rows], order = torch.sort(sub.gather(1, cols), dim=1, stable=True)
        idx[rows] = cols.gather(1, order)
    return _order_ties(dist, idx)


def _order_ties(dist: Tensor, idx: Tensor) -> Tuple[Tensor, Tensor]:
    """Rows of (distance, column) pairs, sorted by distance, re-sorted by distance then column
    where a row holds equal distances."""
    tied = (dist[:, 1:] == dist[:, :-1]).any(1)
    if bool(tied.any()):
        rows = tied.nonzero().squeeze(1)
        sub_i, order = torch.sort(idx[rows], dim=1)
        sub_d, order2 = torch.sort(dist[rows].gather(1, order), dim=1, stable=True)
        dist[rows], idx[rows] = sub_d, sub_i.gather(1, order2)
    return dist, idx


def _tree_workers() -> int:
    """Threads of a KD-tree query: torch's (1 in a DataLoader worker, so a worker building graphs
    ahead does not compete with the training step's threads)."""
    return max(1, torch.get_num_threads())


def _knn_kdtree(x: Tensor, y: Tensor, k: int, bx: Tensor, by: Tensor, counts: Tensor):
    from scipy.spatial import cKDTree

    (x64, y64), _ = distance_frame(x.to(torch.float64), y.to(torch.float64))  # no overflowing squares
    xn, yn = x64.numpy(), y64.numpy()
    bxn, byn = bx.numpy(), by.numpy()
    nclouds = counts.numel()
    if nclouds > 1:
        extent = float(max(np.ptp(xn, axis=0).max(), 0.0) + max(np.ptp(yn, axis=0).max(), 0.0))
        lo = float(min(xn.min(), yn.min()))
        hi = float(max(xn.max(), yn.max()))
        sep = 4.0 * (extent + (hi - lo)) + 1.0  # > any in-cloud distance
        xn = np.concatenate([xn, bxn[:, None] * sep], 1)
        yn = np.concatenate([yn, byn[:, None] * sep], 1)
    kk = min(k, x.size(0))
    groups = _duplicate_groups(xn)
    if groups is None:
        # an unbalanced tree (sliding-midpoint splits) builds and queries faster on clouds sampled
        # from surfaces (measured: 32 x 1,024 points, 32k grid-node queries, 2 threads: 1.13 vs
        # 1.54 ms per cloud); the search stays exact
        tree = cKDTree(xn, leafsize=32, balanced_tree=False, compact_nodes=False)
        extra = int(kk < x.size(0))  # one more neighbour shows whether the kk-th is tied
        dist, idx = tree.query(yn, k=kk + extra, workers=_tree_workers())
        dist = np.asarray(dist).reshape(y.size(0), kk + extra)
        idx = np.asarray(idx).reshape(y.size(0), kk + extra)
        if extra:
            tied = np.flatnonzero(np.isfinite(dist[:, kk]) & (dist[:, kk] == dist[:, kk - 1]))
            dist, idx = dist[:, :kk], idx[:, :kk]
            if tied.size:  # exact ties at the k-th distance: take the tied neighbours of lowest index
                _resolve_kdtree_ties(tree, x, y, k, bx, by, counts, yn, tied, dist, idx)
    else:  # duplicated points: search the distinct ones, then hand out their copies by index
        dist, idx = _knn_distinct(x, y, k, bx, by, counts, xn, yn, kk, groups)
    ties = np.flatnonzero((dist[:, 1:] == dist[:, :-1]).any(1))  # sorted by distance: order ties by index
    if ties.size:
        order = np.lexsort((idx[ties], dist[ties]), axis=-1)
        idx[ties] = np.take_along_axis(idx[ties], order, axis=-1)
    valid = idx < x.size(0)
    idx_safe = np.where(valid, idx, 0)
    valid &= bxn[idx_safe] == byn[:, None]
    rows = np.broadcast_to(np.arange(y.size(0))[:, None], idx.shape)[valid]
    cols = idx_safe[valid]
    return (torch.from_numpy(np.ascontiguousarray(rows)).long(), torch.from_numpy(np.ascontiguousarray(cols)).long())


#: Odd 64-bit multipliers of the coordinate hash that finds duplicated points.
_HASH = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93], dtype=np.uint64)


def _duplicate_groups(xn: np.ndarray) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Runs of identical rows of ``xn [N, D]`` (D <= 4): ``(order, starts, mult)`` with ``order``
    the rows sorted by a hash of their bits (stable: equal rows in ascending index), ``starts`` the
    position in ``order`` of each run and ``mult`` its length; None when no two rows are equal.

    Equal rows are found by a 64-bit hash, then compared bit for bit; a hash collision that puts
    another row between two copies only splits their run (the copies then tie as distinct points,
    which the search handles too), so correctness never rests on the hash.
    """
    keys = np.ascontiguousarray(xn + 0.0).view(np.uint64)  # + 0.0: -0.0 and 0.0 hash alike
    h = keys[:, 0] * _HASH[0]
    for j in range(1, keys.shape[1]):
        h ^= keys[:, j] * _HASH[j]
    h ^= h >> np.uint64(29)
    order = np.argsort(h, kind="stable")
    hs = h[order]
    same = hs[1:] == hs[:-1]
    if not same.any():
        return None
    ks = keys[order]
    same &= (ks[1:] == ks[:-1]).all(1)
    if not same.any():
        return None
    starts = np.flatnonzero(np.concatenate([[True], ~same]))
    return order, starts, np.diff(np.append(starts, order.size))


def _knn_distinct(
    x: Tensor,
    y: Tensor,
    k: int,
    bx: Tensor,
    by: Tensor,
    counts: Tensor,
    xn: np.ndarray,
    yn: np.ndarray,
    kk: int,
    groups: Tuple[np.ndarray, np.ndarray, np.ndarray],
) -> Tuple[np.ndarray, np.ndarray]:
    """kNN among points with duplicates: ``(dist, idx) [M, kk]`` ordered by (distance, index).

    The tree holds one copy of every distinct point; a query's distinct neighbours are taken until
    their copies number at least ``kk`` among the points strictly nearer than the last one returned
    (so every point tied at the ``kk``-th distance is in; else ``k`` doubles for that row), then the
    copies are handed out nearest first, lowest index first. Duplicates cost nothing extra: the
    search runs on fewer points, and no tie needs a second search. Rows whose search outgrows
    :data:`TIE_QUERY_MAX` (distinct points tied in large groups) take the brute force.
    """
    from scipy.spatial import cKDTree

    order, starts, mult = groups
    distinct = starts.size
    tree = cKDTree(xn[order[starts]], leafsize=32, balanced_tree=False, compact_nodes=False)
    dist = np.zeros((y.size(0), kk))
    idx = np.zeros((y.size(0), kk), dtype=np.int64)
    rows, want = np.arange(y.size(0)), min(kk + 1, distinct)
    while rows.size:
        if TIE_QUERY_MAX < want < distinct:
            _brute_force_rows(x, y, k, bx, by, counts, rows, dist, idx)
            break
        d, u = tree.query(yn[rows], k=want, workers=_tree_workers())
        d, u = np.asarray(d).reshape(rows.size, want), np.asarray(u).reshape(rows.size, want)
        # entries strictly nearer than the last one returned are all the points at those distances
        near = np.ones(d.shape, dtype=bool) if want >= distinct else d < d[:, -1:]
        copies = np.where(near, mult[u], 0)
        done = copies.sum(1) >= kk
        if done.any():
            # distinct points at equal distances (rare off a lattice) need their copies sorted by index
            eq = ((d[:, 1:] == d[:, :-1]) & near[:, 1:]).any(1)
            plain, mixed = done & ~eq, done & eq
            if plain.any():
                dist[rows[plain]], idx[rows[plain]] = _first_copies(d[plain], u[plain], copies[plain], groups, kk)
            if mixed.any():
                _hand_out_copies(rows[mixed], d[mixed], u[mixed], near[mixed], groups, kk, dist, idx)
        rows, want = rows[~done], min(2 * want, distinct)
    return dist, idx


def _first_copies(
    d: np.ndarray, u: np.ndarray, copies: np.ndarray, groups: Tuple[np.ndarray, np.ndarray, np.ndarray], kk: int
) -> Tuple[np.ndarray, np.ndarray]:
    """The first ``kk`` copies of distinct neighbours ``u [r, w]`` (at strictly increasing distances,
    ``copies`` of each counted), in that order, a run's copies in ascending index: ``(dist, idx)``."""
    order, starts, _ = groups
    total = np.cumsum(copies, 1)
    slot = np.arange(kk)
    j = (total[:, None, :] <= slot[None, :, None]).sum(2)  # the neighbour holding each slot
    before = np.take_along_axis(np.concatenate([np.zeros_like(total[:, :1]), total], 1), j, 1)
    return np.take_along_axis(d, j, 1), order[starts[np.take_along_axis(u, j, 1)] + slot - before]


def _hand_out_copies(
    rows: np.ndarray,
    d: np.ndarray,
    u: np.ndarray,
    near: np.ndarray,
    groups: Tuple[np.ndarray, np.ndarray, np.ndarray],
    kk: int,
    dist: np.ndarray,
    idx: np.ndarray,
) -> None:
    """Rows ``rows`` of ``(dist, idx)``: the first ``kk`` copies of the distinct neighbours ``u``
    marked ``near``, by (distance, index). Fills ``dist`` and ``idx`` in place."""
    order, starts, mult = groups
    rr, cc = np.nonzero(near)  # row-major: by row, then by distance
    uu, dd = u[rr, cc], d[rr, cc]
    m = mult[uu]
    rep_r, rep_d = np.repeat(rr, m), np.repeat(dd, m)
    within = np.arange(rep_r.size) - np.repeat(np.cumsum(m) - m, m)
    orig = order[np.repeat(starts[uu], m) + within]  # a run's copies in ascending index
    if ((rr[1:] == rr[:-1]) & (dd[1:] == dd[:-1])).any():  # distinct points at equal distances
        s = np.lexsort((orig, rep_d, rep_r))
        rep_r, rep_d, orig = rep_r[s], rep_d[s], orig[s]
    rank = np.arange(rep_r.size) - np.searchsorted(rep_r, rep_r)
    keep = rank < kk
    dist[rows[rep_r[keep]], rank[keep]] = rep_d[keep]
    idx[rows[rep_r[keep]], rank[keep]] = orig[keep]


def _resolve_kdtree_ties(
    tree,
    x: Tensor,
    y: Tensor,
    k: int,
    bx: Tensor,
    by: Tensor,
    counts: Tensor,
    yn: np.ndarray,
    tied: np.ndarray,
    dist: np.ndarray,
    idx: np.ndarray,
) -> None:
    """Rows ``tied`` of ``(dist, idx) [M, kk]`` had an entry equal to their ``kk``-th distance left
    out: re-query them with a doubled ``k`` until every entry at that distance is in (the last one
    returned lies farther), then keep the ``kk`` smallest by (distance, index). Fills ``dist`` and
    ``idx`` in place. Cost grows with the size of the tie group, not with the cloud (duplicated
    points tie in groups of a few); rows whose group outgrows :data:`TIE_QUERY_MAX` neighbours (a
    cloud of identical points) fall back to the brute force, which takes the lowest indices too.
    """
    kk = idx.shape[1]
    n = x.size(0)
    rows = tied
    kth = dist[tied, kk - 1]
    want = 2 * (kk + 1)
    while rows.size:
        want = min(want, n)
        if want > TIE_QUERY_MAX and want < n:
            _brute_force_rows(x, y, k, bx, by, counts, rows, dist, idx)
            return
        d2, i2 = tree.query(yn[rows], k=want, workers=_tree_workers())
        d2, i2 = np.asarray(d2).reshape(rows.size, want), np.asarray(i2).reshape(rows.size, want)
        done = (d2[:, -1] > kth) | (want >= n)  # the whole tie group is in
        if done.any():
            dd, ii = d2[done], i2[done]
            order = np.lexsort((ii, dd), axis=-1)[:, :kk]  # by distance, then index
            dist[rows[done]] = np.take_along_axis(dd, order, axis=-1)
            idx[rows[done]] = np.take_along_axis(ii, order, axis=-1)
        rows, kth, want = rows[~done], kth[~done], 2 * want


def _brute_force_rows(
    x: Tensor,
    y: Tensor,
    k: int,
    bx: Tensor,
    by: Tensor,
    counts: Tensor,
    rows: np.ndarray,
    dist: np.ndarray,
    idx: np.ndarray,
) -> None:
    """Rows ``rows`` of ``(dist, idx)`` by the brute force (ties broken by index), in place."""
    kk = idx.shape[1]
    sub = torch.from_numpy(rows)
    r, c = _knn_torch(x, y[sub], k, bx, by[sub], counts)
    fixed = np.full((rows.size, kk), x.size(0), dtype=idx.dtype)  # x.size(0) marks "none"
    slot = torch.arange(r.numel()) - torch.searchsorted(r, r)  # rank within its query
    fixed[r.numpy(), slot.numpy()] = c.numpy()
    idx[rows], dist[rows] = fixed, np.arange(kk)  # already ordered: the later tie sort keeps it


def knn_reference(
    x: Tensor, y: Tensor, k: int, batch_x: Optional[Tensor] = None, batch_y: Optional[Tensor] = None
) -> Tensor:
    """Loop-over-queries brute force, the obviously-correct reference for tests.

    Distances in float64, in the working frame (exactly scaled, so extreme coordinates of any
    dtype are ranked as exact arithmetic would, up to one float64 rounding).
    """
    bx = torch.zeros(x.size(0), dtype=torch.long) if batch_x is None else batch_x
    by = torch.zeros(y.size(0), dtype=torch.long) if batch_y is None else batch_y
    (x, y), _ = distance_frame(x.double(), y.double())
    rows, cols = [], []
    for i in range(y.size(0)):
        cand = (bx == by[i]).nonzero().flatten()
        d = ((x[cand] - y[i]) ** 2).sum(-1)
        order = sorted(range(cand.numel()), key=lambda j: (float(d[j]), int(cand[j])))[:k]
        rows += [i] * len(order)
        cols += [int(cand[j]) for j in order]
    return torch.tensor([rows, cols], dtype=torch.long).reshape(2, -1)
