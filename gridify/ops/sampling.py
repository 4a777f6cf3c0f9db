"""Point sampling and ball queries: farthest point sampling and radius neighbourhoods.

PyG 2.8 routes ``torch_geometric.nn.fps`` / ``radius`` through pyg-lib or torch-cluster, neither
of which has wheels on PyPI; these native PyTorch versions let PointNet++-style models run
anywhere.

**Farthest point sampling** (:func:`fps`). For every cloud ``b`` with ``n_b`` points choose
``m_b = ceil(ratio * n_b)`` points greedily:

    s_0 = start,     s_t = argmax_i  min_{u < t} ||p_i - p_{s_u}||^2

(ties go to the lowest index). All clouds of a batch are processed at once on a padded
``[B, max n_b]`` distance table; the Python loop runs only over the sample index ``t``.
Cost O(max m_b * B * max n_b), memory O(B * max n_b).

**Ball query** (:func:`radius`). For every row ``y_i`` the points ``x_j`` of the same cloud
with ``||x_j - y_i|| <= r``; when more than ``max_num_neighbors`` qualify, the nearest ones are
kept (distance, then index), so the result does not depend on the order of the points
(torch-cluster keeps the first ones by index instead). Returned PyG-style as
``edge_index[0]`` = query rows (into ``y``), ``edge_index[1]`` = neighbour rows (into ``x``),
grouped by query, nearest first.

Backends of :func:`radius`: ``"torch"`` (brute force in chunks of queries against only their
own clouds: memory O(chunk x N), any device), ``"kdtree"`` (SciPy cKDTree, CPU, O(N log N)),
``"auto"`` (kdtree for large CPU inputs, torch otherwise).

Both ops compare squared distances in the working frame of :mod:`gridify.ops.distance`
(float32 for float16/bfloat16/float32, float64 for float64, exactly rescaled for extreme
coordinates), so float16 clouds with a spread of hundreds of units and float64 clouds at 1e160
sample and group as exact arithmetic would. Requests whose tables exceed the allocation limit
(:func:`gridify._checks.check_alloc`) are refused before anything is allocated.

Shapes:
    fps: pos [N, D], batch [N] (sorted) -> index [sum_b m_b] (int64, grouped by cloud, in
    selection order)
    radius: x [N, D], y [M, D], batch_x [N], batch_y [M] -> edge_index [2, E],
    E <= M * max_num_neighbors
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from .._checks import (
    check_alloc,
    check_batch,
    check_choice,
    check_device,
    check_finite,
    check_float,
    check_fraction,
    check_int,
    check_integer,
    check_number,
    check_point_pair,
    check_tensor,
    element_size,
    fail,
)
from .distance import distance_frame, working_dtype

__all__ = ["fps", "fps_unchecked", "fps_reference", "radius", "radius_unchecked", "radius_reference"]

RADIUS_BACKENDS = ("auto", "torch", "kdtree")
#: Elements of the distance block held in memory at once by the brute-force ball query.
CHUNK_ELEMENTS = 1 << 24
#: Above this many candidate pairs (N * M), ``auto`` on CPU picks the KD-tree.
KDTREE_MIN_PAIRS = 1 << 20


def _ptr(counts: Tensor) -> Tensor:
    ptr = counts.new_zeros(counts.numel() + 1)
    ptr[1:] = torch.cumsum(counts, 0)
    return ptr


def fps(
    pos: Tensor,
    batch: Optional[Tensor] = None,
    ratio: float = 0.5,
    random_start: bool = True,
    generator: Optional[torch.Generator] = None,
    start: Optional[Tensor] = None,
) -> Tensor:
    """Farthest point sampling of ``ceil(ratio * n_b)`` points per cloud (see module docstring).

    Args:
        pos: point coordinates ``[N, D]``.
        batch: sorted cloud index per point ``[N]`` (``None``: one cloud).
        ratio: fraction of each cloud to keep, in ``(0, 1]``.
        random_start: start every cloud at a uniformly random point (else at its first point).
        generator: optional random generator for the start points.
        start: explicit first sample of every cloud ``[B]``, as an index local to the cloud
            (overrides ``random_start``).

    Returns:
        global indices into ``pos`` ``[sum_b m_b]``, cloud 0's samples first, each cloud's in
        selection order.

    Validates its arguments, then runs :func:`fps_unchecked`.
    """
    where = "fps"
    pos = check_tensor(where, "pos", pos)
    if pos.dim() != 2 or pos.size(0) == 0 or pos.size(1) == 0:
        fail(where, f"pos must have shape [N, D] with N >= 1 and D >= 1, got {tuple(pos.shape)}")
    check_float(where, "pos", pos)
    ratio = check_fraction(where, "ratio", ratio)
    if not isinstance(random_start, bool):
        fail(where, f"random_start must be a bool, got {random_start!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        fail(where, f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    bx, nclouds, counts = check_batch(where, "batch", batch, pos.size(0), device=pos.device)
    check_finite(where, "pos", pos, bx)
    if start is not None:
        start = check_tensor(where, "start", start)
        if start.dim() != 1 or start.numel() != nclouds:
            fail(
                where,
                f"start must be a 1-D integer tensor with one entry per cloud ({nclouds}), "
                f"got shape {tuple(start.shape)} and dtype {start.dtype}",
            )
        check_integer(where, "start", start)
        check_device(where, "start", start, pos.device)
        start = start.long()
        if bool(((start < 0) | (start >= counts)).any()):
            b = int(((start < 0) | (start >= counts)).nonzero()[0])
            fail(
                where,
                f"start holds an index outside its cloud: cloud {b} has {int(counts[b])} points, "
                f"start[{b}] = {int(start[b])}",
            )
    check_fps_size(where, pos, counts)
    return fps_unchecked(pos, bx, counts, ratio, random_start, generator, start)


def check_fps_size(where: str, pos: Tensor, counts: Tensor) -> None:
    """Refuse a batch whose padded ``[B, max n_b]`` tables would exceed the allocation limit."""
    nclouds, nmax = counts.numel(), int(counts.max())
    item = element_size(working_dtype(pos.dtype))
    check_alloc(
        where,
        f"batch (padded to {nclouds} clouds x {nmax} points, the largest cloud)",
        nclouds * nmax * ((pos.size(1) + 3) * item + 9),
        pos.device,
    )


def fps_unchecked(
    pos: Tensor,
    batch: Tensor,
    counts: Tensor,
    ratio: float = 0.5,
    random_start: bool = True,
    generator: Optional[torch.Generator] = None,
    start: Optional[Tensor] = None,
) -> Tensor:
    """:func:`fps` without validation: finite ``pos [N, D]``, sorted int64 ``batch``, ``counts [B]`` > 0,
    ``0 < ratio <= 1``, ``start`` (if given) int64 local indices inside each cloud."""
    bx, nclouds = batch, counts.numel()
    dev = pos.device
    ptr = _ptr(counts)
    nmax = int(counts.max())
    num = torch.ceil(counts.double() * ratio).long().clamp_(min=1, max=None)
    num = torch.minimum(num, counts)
    mmax = int(num.max())
    # padded coordinate planes [D, B, nmax] (contiguous per axis); padded slots get distance -1
    # so they are never chosen
    local = torch.arange(pos.size(0), device=dev) - ptr[bx]
    (work,), _ = distance_frame(pos)  # squares that neither overflow nor round to the input's precision
    planes = work.new_zeros(pos.size(1), nclouds, nmax)
    planes[:, bx, local] = work.t()
    valid = torch.zeros(nclouds, nmax, dtype=torch.bool, device=dev)
    valid[bx, local] = True
    if start is not None:
        cur = start
    elif random_start:
        u = torch.rand(nclouds, generator=generator, device="cpu" if generator is None else generator.device)
        cur = torch.minimum((u.to(dev) * counts.double()).long(), counts - 1)
    else:
        cur = torch.zeros(nclouds, dtype=torch.long, device=dev)
    mind = torch.full((nclouds, nmax), float("inf"), dtype=work.dtype, device=dev)
    mind.masked_fill_(~valid, -1.0)
    rows = torch.arange(nclouds, device=dev)
    out = torch.empty(nclouds, mmax, dtype=torch.long, device=dev)
    out[:, 0] = cur
    d = torch.empty_like(mind)
    tmp = torch.empty_like(mind)
    for t in range(1, mmax):
        c = planes[:, rows, cur].unsqueeze(-1)  # [D, B, 1] coordinates of the last sample
        # squared distance summed axis by axis in the same order as ((p - c) ** 2).sum(-1)
        torch.sub(planes[0], c[0], out=d).mul_(d)
        for a in range(1, planes.size(0)):
            torch.sub(planes[a], c[a], out=tmp).mul_(tmp)
            d.add_(tmp)
        torch.minimum(mind, d, out=mind)  # padded slots stay at -1
        cur = mind.argmax(1)
        out[:, t] = cur
    keep = torch.arange(mmax, device=dev).unsqueeze(0) < num.unsqueeze(1)
    return (out + ptr[:-1].unsqueeze(1))[keep]


def fps_reference(
    pos: Tensor, batch: Optional[Tensor] = None, ratio: float = 0.5, start: Optional[Tensor] = None
) -> Tensor:
    """Loop-over-clouds greedy farthest point sampling, the obviously-correct reference for tests.

    ``start`` holds each cloud's first sample as an index local to the cloud (default 0).
    Distances in float64, in the (exactly scaled) working frame.
    """
    bx = torch.zeros(pos.size(0), dtype=torch.long) if batch is None else batch.long()
    (pos,), _ = distance_frame(pos.double())
    nclouds = int(bx.max()) + 1
    out = []
    for b in range(nclouds):
        idx = (bx == b).nonzero().flatten()
        p = pos[idx]
        m = min(idx.numel(), max(1, math.ceil(idx.numel() * ratio)))
        chosen = [0 if start is None else int(start[b])]
        mind = torch.full((idx.numel(),), float("inf"), dtype=pos.dtype)
        for _ in range(1, m):
            mind = torch.minimum(mind, ((p - p[chosen[-1]]) ** 2).sum(-1))
            chosen.append(int(torch.argmax(mind)))
        out += [int(idx[c]) for c in chosen]
    return torch.tensor(out, dtype=torch.long)


def _is_batch_vector(b: object, rows: int) -> bool:
    return (
        isinstance(b, Tensor)
        and b.dim() == 1
        and b.numel() == rows
        and not b.is_floating_point()
        and not b.is_complex()
        and b.dtype != torch.bool
    )


def _compact_cloud_ids(
    batch_x: Optional[Tensor], batch_y: Optional[Tensor], x: Tensor, y: Tensor, where: str
) -> Tuple[Optional[Tensor], Optional[Tensor]]:
    """Sparse cloud ids renumbered ``0 .. K-1`` (K the distinct ids of both vectors, order kept), so the
    per-cloud tables are bounded by the points, not by the largest id (ids up to 5e7 would otherwise
    make tables of 5e7 counts); vectors that are dense, or that check_batch will refuse, pass unchanged."""
    n, m = x.size(0), y.size(0)
    bx = torch.zeros(n, dtype=torch.long, device=x.device) if batch_x is None else batch_x
    by = torch.zeros(m, dtype=torch.long, device=y.device) if batch_y is None else batch_y
    if not (_is_batch_vector(bx, n) and _is_batch_vector(by, m)) or bx.device != by.device:
        return batch_x, batch_y
    both = torch.cat([bx.long(), by.long()])
    if both.numel() == 0 or int(both.min()) < 0 or int(both.max()) < n + m:
        return batch_x, batch_y
    if m and int(by.max()) > int(bx.max()):
        fail(where, f"batch_y refers to cloud {int(by.max())} but x has points for clouds up to {int(bx.max())} only")
    ids = torch.unique(both, sorted=True, return_inverse=True)[1]
    return ids[:n], ids[n:]


def _validate_radius(x, y, r, batch_x, batch_y, max_num_neighbors, backend, where="radius"):
    x, y = check_point_pair(where, ("x", "y"), x, y)
    r = check_number(where, "r", r)
    max_num_neighbors = check_int(where, "max_num_neighbors", max_num_neighbors)
    check_choice(where, "backend", backend, RADIUS_BACKENDS, unknown=True)
    if x.size(0) == 0:
        fail(where, "x holds no points")
    batch_x, batch_y = _compact_cloud_ids(batch_x, batch_y, x, y, where)
    bx, nx, cx = check_batch(where, "batch_x", batch_x, x.size(0), device=x.device, allow_empty=True)
    by, ny = (
        (check_batch(where, "batch_y", batch_y, y.size(0), device=y.device, allow_empty=True)[:2])
        if y.size(0)
        else (torch.zeros(0, dtype=torch.long, device=y.device), 0)
    )
    if ny > nx:
        fail(where, f"batch_y refers to cloud {ny - 1} but x has points for only {nx} clouds")
    check_finite(where, "x", x, bx)
    check_finite(where, "y", y, by)
    if backend == "kdtree" and x.device.type != "cpu":
        fail(where, f"backend='kdtree' runs on the CPU only; inputs are on {x.device}")
    check_radius_size(where, y.size(0), x.size(0), max_num_neighbors)
    return x, y, float(r), bx, by, cx, int(max_num_neighbors)


def check_radius_size(where: str, num_queries: int, num_points: int, max_num_neighbors: int) -> None:
    """Refuse a ball query whose result tables (the KD-tree's ``[M, min(max_num_neighbors, N)]``
    distances and indices; the brute force holds fewer) would exceed the allocation limit."""
    check_alloc(
        where,
        f"max_num_neighbors={max_num_neighbors} for {num_queries} queries (the KD-tree's "
        f"[M, min(max_num_neighbors, N)] result tables)",
        24 * num_queries * min(max_num_neighbors, max(num_points, 1)),
    )


def radius(
    x: Tensor,
    y: Tensor,
    r: float,
    batch_x: Optional[Tensor] = None,
    batch_y: Optional[Tensor] = None,
    max_num_neighbors: int = 64,
    backend: str = "auto",
) -> Tensor:
    """Rows of ``x`` within distance ``r`` of every row of ``y`` (same cloud); see module docstring.

    Validates its arguments, then runs :func:`radius_unchecked`.
    """
    x, y, r, bx, by, counts, kmax = _validate_radius(x, y, r, batch_x, batch_y, max_num_neighbors, backend)
    return radius_unchecked(x, y, r, bx, by, counts, kmax, backend)


def radius_unchecked(
    x: Tensor,
    y: Tensor,
    r: float,
    batch_x: Tensor,
    batch_y: Tensor,
    counts: Tensor,
    max_num_neighbors: int = 64,
    backend: str = "auto",
) -> Tensor:
    """:func:`radius` without validation: finite points, sorted int64 batch vectors, ``counts`` the
    points of ``x`` per cloud (``[B]``), ``r > 0``, ``max_num_neighbors >= 1``, a backend that runs
    on the inputs' device and tables within the allocation limit (:func:`check_radius_size`)."""
    if y.size(0) == 0:
        return torch.zeros(2, 0, dtype=torch.long, device=x.device)
    if backend == "auto":
        backend = "kdtree" if x.device.type == "cpu" and x.size(0) * y.size(0) > KDTREE_MIN_PAIRS else "torch"
    if backend == "kdtree":
        return _radius_kdtree(x, y, r, batch_x, batch_y, counts, max_num_neighbors)
    return _radius_torch(x, y, r, batch_x, batch_y, counts, max_num_neighbors)


def _radius_torch(x: Tensor, y: Tensor, r: float, bx: Tensor, by: Tensor, counts: Tensor, kmax: int) -> Tensor:
    ptr_l = _ptr(counts).tolist()
    by_l = by.tolist()
    rows, cols = [], []
    m = y.size(0)
    (x, y), scale = distance_frame(x, y)
    rs = r * scale
    r2 = rs * rs if rs < 1e150 else math.inf  # (1e155) ** 2 raises OverflowError; such a radius takes all pairs
    start = 0
    while start < m:
        b0 = by_l[start]
        span = max(1, ptr_l[b0 + 1] - ptr_l[b0])
        end = min(m, start + max(1, CHUNK_ELEMENTS // span))
        b1 = by_l[end - 1]
        while end - start > 1 and (end - start) * (ptr_l[b1 + 1] - ptr_l[b0]) > CHUNK_ELEMENTS:
            end = start + max(1, (end - start) // 2)
            b1 = by_l[end - 1]
        lo, hi = ptr_l[b0], ptr_l[b1 + 1]
        if hi == lo:  # queries of clouds without points
            start = end
            continue
        xs, ys = x[lo:hi], y[start:end]
        d = torch.zeros(end - start, hi - lo, dtype=x.dtype, device=x.device)
        for c in range(x.size(1)):
            d += (ys[:, c, None] - xs[None, :, c]).pow(2)
        d.masked_fill_((by[start:end, None] != bx[None, lo:hi]) | (d > r2), float("inf"))
        kk = min(kmax, hi - lo)
        dist, idx = torch.topk(d, kk, dim=1, largest=False, sorted=True)
        ok = torch.isfinite(dist)
        q = torch.arange(start, end, device=x.device).unsqueeze(1).expand(-1, kk)
        rows.append(q[ok])
        cols.append(idx[ok] + lo)
        start = end
    if not rows:
        return torch.zeros(2, 0, dtype=torch.long, device=x.device)
    return torch.stack([torch.cat(rows), torch.cat(cols)])


def _radius_kdtree(x: Tensor, y: Tensor, r: float, bx: Tensor, by: Tensor, counts: Tensor, kmax: int) -> Tensor:
    from scipy.spatial import cKDTree

    kk = min(kmax, x.size(0))
    (x, y), scale = distance_frame(x, y)  # the exact test below is the torch path's, in the same frame
    r = r * scale
    xn, yn = x.double().numpy(), y.double().numpy()
    bxn, byn = bx.numpy(), by.numpy()
    # no two points are farther apart than ``reach``: a larger radius searches like ``reach``
    reach = min(r, 2.0 * math.sqrt(xn.shape[1]) * max(np.abs(xn).max(), np.abs(yn).max()) + 1.0)
    if counts.numel() > 1:  # the cloud index as an extra coordinate far beyond r: no cross-cloud pairs
        sep = 4.0 * reach + 1.0
        xn = np.concatenate([xn, bxn[:, None] * sep], 1)
        yn = np.concatenate([yn, byn[:, None] * sep], 1)
    tree = cKDTree(xn)
    _, idx = tree.query(yn, k=kk, distance_upper_bound=reach * (1 + 1e-6) + 1e-12, workers=-1)
    idx = np.asarray(idx).reshape(y.size(0), kk)
    valid = idx < x.size(0)
    idx_safe = np.where(valid, idx, 0)
    rows = torch.from_numpy(
        np.ascontiguousarray(np.broadcast_to(np.arange(y.size(0))[:, None], idx.shape)[valid])
    ).long()
    cols = torch.from_numpy(np.ascontiguousarray(idx_safe[valid])).long()
    # exact test in the working frame, same formula as the torch path
    d = (y[rows] - x[cols]).pow(2).sum(-1)
    keep = (d <= r * r) & (bx[cols] == by[rows])
    return torch.stack([rows[keep], cols[keep]])


def radius_reference(
    x: Tensor,
    y: Tensor,
    r: float,
    batch_x: Optional[Tensor] = None,
    batch_y: Optional[Tensor] = None,
    max_num_neighbors: int = 64,
) -> Tensor:
    """Loop-over-queries ball query, the obviously-correct reference for tests (float64, in the
    exactly scaled working frame)."""
    bx = torch.zeros(x.size(0), dtype=torch.long) if batch_x is None else batch_x
    by = torch.zeros(y.size(0), dtype=torch.long) if batch_y is None else batch_y
    (x, y), scale = distance_frame(x.double(), y.double())
    r = r * scale
    rows, cols = [], []
    for i in range(y.size(0)):
        cand = (bx == by[i]).nonzero().flatten()
        d = ((x[cand] - y[i]) ** 2).sum(-1)
        inside = [j for j in range(cand.numel()) if float(d[j]) <= r * r]
        inside = sorted(inside, key=lambda j: (float(d[j]), int(cand[j])))[:max_num_neighbors]
        rows += [i] * len(inside)
        cols += [int(cand[j]) for j in inside]
    return torch.tensor([rows, cols], dtype=torch.long).reshape(2, -1)
