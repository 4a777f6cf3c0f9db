"""Nearest nodes of a regular grid by index arithmetic (no search).

The grid has ``R`` nodes per axis, node ``(a, b, c)`` at ``lower + (a, b, c) * h`` with spacing
``h = (upper - lower) / (R - 1)`` per axis, flattened as ``a * R^2 + b * R + c``. For a point
``p`` with continuous index ``u = (p - lower) / h``, its ``k`` nearest nodes lie in a window of
``L = 2m`` nodes per axis around ``floor(u)``: any node outside the window is at least ``m * h``
away along some axis. The window's ``k`` nearest are therefore exact whenever the ``k``-th of
them is within ``m * h``; the rare points where that fails (outside the box, tiny ``R``, large
``k``) are retried with a doubled window. Cost O(N * L^3), independent of the grid size.

Shapes:
    pos: [N, 3], batch: [N] -> edge_index: [2, N * k] with edge_index[0] = point index and
    edge_index[1] = global node index ``batch * R^3 + local``.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .._checks import check_batch, check_finite, check_int, check_points, fail

Bound = Union[float, Sequence[float], Tensor]


def box_tensors(lower: Bound, upper: Bound, device=None, dtype=torch.float32) -> Tuple[Tensor, Tensor]:
    lo = torch.as_tensor(lower, dtype=dtype, device=device).expand(3).clone()
    hi = torch.as_tensor(upper, dtype=dtype, device=device).expand(3).clone()
    return lo, hi


def _initial_half_width(k: int) -> int:
    # smallest m such that even a point sitting exactly on a corner node has k lattice nodes
    # within distance m*h (an octant of the ball of radius m)
    m = 1
    while True:
        r = torch.arange(m + 1)
        sq = r[:, None, None] ** 2 + r[None, :, None] ** 2 + r[None, None, :] ** 2
        if int((sq <= m * m).sum()) >= k:
            return m
        m += 1


_RANK_TRIPLES: dict = {}


def _rank_triples(L: int, k: int, device) -> Tuple[Tensor, Tensor, Tensor]:
    """Rank triples ``(p, q, r)`` in ``[0, L)^3`` with ``(p+1)(q+1)(r+1) <= k`` (at least ``k``)."""
    key = (L, k, str(device))
    hit = _RANK_TRIPLES.get(key)
    if hit is None:
        r = torch.arange(L)
        p, q, s = torch.meshgrid(r, r, r, indexing="ij")
        keep = ((p + 1) * (q + 1) * (s + 1) <= k).flatten()
        if int(keep.sum()) < k:  # (never for L^3 >= k; kept as a guard)
            keep[:] = True
        hit = tuple(t.flatten()[keep].to(device) for t in (p, q, s))
        _RANK_TRIPLES[key] = hit
    return hit


def grid_knn(pos: Tensor, k: int, resolution: int, lower: Bound = -1.0, upper: Bound = 1.0,
             batch: Optional[Tensor] = None) -> Tensor:
    """The ``k`` nearest grid nodes of every point (exact), as ``[2, N*k]`` (point, global node).

    Validates its arguments, then runs :func:`grid_knn_unchecked`.
    """
    where = "grid_knn"
    pos = check_points(pos, where)
    R = check_int(where, "resolution", resolution, 2)
    k = check_int(where, "k", k)
    if k > R ** 3:
        fail(where, f"k={k} exceeds the number of grid nodes R^3={R ** 3}")
    batch, _, _ = check_batch(batch, pos.size(0), where, device=pos.device)
    check_finite(pos, "pos", where, batch)
    lo, hi = box_tensors(lower, upper, pos.device, pos.dtype)
    if bool((hi <= lo).any()):
        fail(where, f"grid box must have upper > lower on every axis, got {lo.tolist()} .. {hi.tolist()}")
    return grid_knn_unchecked(pos, k, R, lo, hi, batch)


def grid_knn_unchecked(pos: Tensor, k: int, resolution: int, lower: Tensor, upper: Tensor, batch: Tensor) -> Tensor:
    """:func:`grid_knn` without validation: finite ``pos [N, 3]``, sorted int64 ``batch [N]``,
    ``1 <= k <= R^3``, box corners ``lower < upper`` as ``[3]`` tensors of ``pos``'s dtype and device."""
    R, lo, hi = resolution, lower, upper
    h = (hi - lo) / (R - 1)
    n = pos.size(0)
    if n == 0:
        return torch.zeros(2, 0, dtype=torch.long, device=pos.device)
    u = (pos - lo) / h
    base = torch.floor(u).long()
    out = torch.empty(n, k, dtype=torch.long, device=pos.device)
    todo = torch.arange(n, device=pos.device)
    m = _initial_half_width(k)
    while todo.numel():
        L = min(2 * m, R)
        start = (base[todo] - m + 1).clamp(min=0, max=R - L)  # [n', 3]
        offs = torch.arange(L, device=pos.device)
        idx = start[:, :, None] + offs  # [n', 3, L] node indices per axis
        coord = lo[None, :, None] + idx.to(pos.dtype) * h[None, :, None]
        d = (coord - pos[todo][:, :, None]).pow(2)  # [n', 3, L]
        # squared distance = dx[a] + dy[b] + dz[c]. With each axis sorted, a combination of ranks
        # (p, q, r) has at least (p+1)(q+1)(r+1) combinations no farther than itself, so only the
        # rank triples with (p+1)(q+1)(r+1) <= k can be among the k nearest
        d, order = torch.sort(d, dim=2)
        idx = idx.gather(2, order)
        pr, qr, rr = _rank_triples(L, k, pos.device)
        dist = torch.index_select(d[:, 0], 1, pr)  # [n', s]
        dist += torch.index_select(d[:, 1], 1, qr)
        dist += torch.index_select(d[:, 2], 1, rr)
        val, arg = torch.topk(dist, k, dim=1, largest=False, sorted=True)
        a, b, c = pr[arg], qr[arg], rr[arg]
        node = (idx[:, 0].gather(1, a) * R + idx[:, 1].gather(1, b)) * R + idx[:, 2].gather(1, c)
        if L == R:
            ok = torch.ones(todo.numel(), dtype=torch.bool, device=pos.device)
        else:
            bound = (m * h).min()
            ok = val[:, -1] <= bound * bound * (1 + 1e-6)
        out[todo[ok]] = node[ok]
        todo = todo[~ok]
        m *= 2
    out = out + (batch * R ** 3)[:, None]
    row = torch.arange(n, device=pos.device).repeat_interleave(k)
    return torch.stack([row, out.reshape(-1)])


def grid_positions(resolution: int, lower: Bound = -1.0, upper: Bound = 1.0, device=None,
                   dtype=torch.float32) -> Tensor:
    """Coordinates of the ``R^3`` grid nodes in flattened order ``a * R^2 + b * R + c``. [R^3, 3]"""
    lo, hi = box_tensors(lower, upper, device, dtype)
    axes = [torch.linspace(float(lo[i]), float(hi[i]), resolution, device=device, dtype=dtype)
            for i in range(3)]
    g = torch.meshgrid(*axes, indexing="ij")
    return torch.stack(g, -1).reshape(-1, 3)
