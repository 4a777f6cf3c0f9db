"""Nearest nodes of a regular grid by index arithmetic (no search).

The grid has ``R`` nodes per axis, node ``(a, b, c)`` at ``lower + (a, b, c) * h`` with spacing
``h = (upper - lower) / (R - 1)`` per axis, flattened as ``a * R^2 + b * R + c``. For a point
``p`` with continuous index ``u = (p - lower) / h``, its ``k`` nearest nodes lie in a window of
``L = 2m`` nodes per axis around ``floor(u)``: any node outside the window is at least ``m * h``
away along some axis. The window's ``k`` nearest are therefore exact whenever the ``k``-th of
them is within ``m * h``; the rare points where that fails (outside the box, tiny ``R``, large
``k``) are retried with a doubled window. Cost O(N * L^3), independent of the grid size.

Distances are compared in the working frame of :mod:`gridify.ops.distance` (float32 for
float16/bfloat16/float32 points, float64 for float64, exactly rescaled for extreme boxes), so a
float16 cloud in a box of hundreds of units or a float64 box at 1e160 gets the exact nodes. The
box is checked once by :func:`check_box` (finite corners, ``upper > lower``, a finite extent).

Shapes:
    pos: [N, 3], batch: [N] -> edge_index: [2, N * k] with edge_index[0] = point index and
    edge_index[1] = global node index ``batch * R^3 + local``.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .._checks import check_alloc, check_batch, check_finite, check_float, check_int, check_points, element_size, fail
from .distance import distance_frame, working_dtype

Bound = Union[float, Sequence[float], Tensor]


def box_tensors(lower: Bound, upper: Bound, device=None, dtype=torch.float32) -> Tuple[Tensor, Tensor]:
    """Box corners as two ``[3]`` tensors (no checks: see :func:`check_box`)."""
    lo = torch.as_tensor(lower, dtype=dtype, device=device).expand(3).clone()
    hi = torch.as_tensor(upper, dtype=dtype, device=device).expand(3).clone()
    return lo, hi


def _corner(where: str, name: str, value: object) -> Tensor:
    if isinstance(value, Tensor):
        value = value.detach().cpu()
    try:
        t = torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        fail(where, f"{name} must be a number or one number per axis (3), got {value!r}")
    if t.dim() > 1 or t.numel() not in (1, 3):
        fail(where, f"{name} must be a number or one number per axis (3), got shape {tuple(t.shape)}")
    t = t.reshape(-1).expand(3).clone()
    if not bool(torch.isfinite(t).all()):
        fail(where, f"{name} must be finite, got {t.tolist()}")
    return t


def check_box(where: str, lower: Bound, upper: Bound) -> Tuple[Tensor, Tensor]:
    """Validate grid box corners: ``(lower [3], upper [3])`` in float64, finite, ``upper > lower``
    on every axis and a finite extent ``upper - lower``."""
    lo, hi = _corner(where, "lower", lower), _corner(where, "upper", upper)
    if bool((hi <= lo).any()):
        fail(where, f"upper must exceed lower on every axis (upper > lower), got {lo.tolist()} .. {hi.tolist()}")
    if not bool(torch.isfinite(hi - lo).all()):
        fail(where, f"the box extent upper - lower overflows float64, got {lo.tolist()} .. {hi.tolist()}")
    return lo, hi


def check_grid_size(where: str, resolution: int, num_clouds: int) -> None:
    """Refuse grids whose global node numbers ``cloud * R^3 + local`` would overflow int64."""
    if num_clouds * resolution ** 3 >= 2 ** 62:
        fail(where, f"resolution={resolution} with {num_clouds} clouds numbers {num_clouds} x {resolution}^3 grid "
                    f"nodes, beyond int64 node indices")


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
    lo, hi = check_box(where, lower, upper)
    batch, num_clouds, _ = check_batch(batch, pos.size(0), where, device=pos.device, allow_empty=True)
    check_grid_size(where, R, num_clouds)
    check_finite(pos, "pos", where, batch)
    work = working_dtype(pos.dtype)
    return grid_knn_unchecked(pos, k, R, lo.to(pos.device, work), hi.to(pos.device, work), batch)


def grid_knn_unchecked(pos: Tensor, k: int, resolution: int, lower: Tensor, upper: Tensor, batch: Tensor) -> Tensor:
    """:func:`grid_knn` without validation: finite ``pos [N, 3]``, sorted int64 ``batch [N]``,
    ``1 <= k <= R^3``, box corners ``lower < upper`` as ``[3]`` tensors on ``pos``'s device (in the
    working dtype of ``pos``, :func:`gridify.ops.distance.working_dtype`, to stay exact)."""
    n = pos.size(0)
    # the output [2, N k] and index table [N, k] (int64), and a round's candidate table [N, s],
    # s <= k (1 + ln k)^2 rank triples of distances and their indices
    check_alloc("grid_knn", f"k={k} for {n} points", n * k * (24 + int((1 + math.log(k)) ** 2) * 12), pos.device)
    (pos, lo, hi), _ = distance_frame(pos, lower, upper)  # exact nodes for any dtype and magnitude
    R = resolution
    h = (hi - lo) / (R - 1)
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
    """Coordinates of the ``R^3`` grid nodes in flattened order ``a * R^2 + b * R + c``. [R^3, 3]

    Computed in float64 and rounded once to ``dtype``. The box and ``resolution`` are validated
    and the ``[R^3, 3]`` table is refused when it exceeds the allocation limit.
    """
    where = "grid_positions"
    resolution = check_int(where, "resolution", resolution, 2)
    if not isinstance(dtype, torch.dtype):
        fail(where, f"dtype must be a torch.dtype, got {dtype!r}")
    check_float(torch.empty(0, dtype=dtype), "dtype", where)
    lo, hi = check_box(where, lower, upper)
    check_alloc(where, f"resolution={resolution} ([R^3, 3] node positions in {dtype})",
                3 * resolution ** 3 * max(element_size(dtype), 8), device)
    axes = [torch.linspace(float(lo[i]), float(hi[i]), resolution, device=device, dtype=torch.float64)
            for i in range(3)]
    g = torch.meshgrid(*axes, indexing="ij")
    return torch.stack(g, -1).reshape(-1, 3).to(dtype)
