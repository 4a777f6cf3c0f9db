"""Nearest nodes of a regular grid by index arithmetic (no search).

The grid has ``R_a`` nodes along axis ``a`` (``resolution``: one int ``R`` for a cube, or a
per-axis triple ``(Rx, Ry, Rz)`` for a flat scene), node ``(a, b, c)`` at
``lower + (a, b, c) * h`` with spacing ``h_a = (upper_a - lower_a) / (R_a - 1)``, flattened as
``a * Ry * Rz + b * Rz + c`` (``a * R^2 + b * R + c`` for a cube). For a point ``p`` with
continuous index ``u = (p - lower) / h``, its ``k`` nearest nodes lie in a window of
``L_a = min(2m, R_a)`` nodes per axis around ``floor(u)``: any node outside the window is at
least ``m * h_a`` away along a windowed axis ``a``. The window's ``k`` nearest are therefore
exact whenever the ``k``-th of them is within ``min_a m * h_a`` (over the axes the window does
not cover whole); the rare points where that fails (outside the box, tiny ``R``, large ``k``)
are retried with a doubled window. Cost O(N * L^3), independent of the grid size.

Distances are compared in the working frame of :mod:`gridify.ops.distance` (float32 for
float16/bfloat16/float32 points, float64 for float64, exactly rescaled for extreme boxes), so a
float16 cloud in a box of hundreds of units or a float64 box at 1e160 gets the exact nodes. The
box is checked once by :func:`check_box` (finite corners, ``upper > lower``, a finite extent).

Shapes:
    pos: [N, 3], batch: [N] -> edge_index: [2, N * k] with edge_index[0] = point index and
    edge_index[1] = global node index ``batch * Rx Ry Rz + local``;
    grid_positions: -> [Rx Ry Rz, 3].
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .._checks import check_alloc, check_batch, check_finite, check_float, check_int, check_points, element_size, fail
from .distance import distance_frame, working_dtype

Bound = Union[float, Sequence[float], Tensor]
#: Grid nodes per axis: one int ``R`` (a cube) or a per-axis triple ``(Rx, Ry, Rz)``.
Resolution = Union[int, Sequence[int]]


def grid_shape(resolution: Resolution) -> Tuple[int, int, int]:
    """``(Rx, Ry, Rz)`` of a validated resolution (an int ``R`` gives ``(R, R, R)``; no checks)."""
    if isinstance(resolution, (tuple, list)):
        return tuple(int(r) for r in resolution)  # type: ignore[return-value]
    r = int(resolution)
    return (r, r, r)


def resolution_value(shape: Sequence[int]) -> Resolution:
    """The user-facing resolution of a grid shape: the int ``R`` of a cube, else the triple."""
    shape = tuple(int(r) for r in shape)
    return shape[0] if shape[0] == shape[1] == shape[2] else shape


def check_resolution(where: str, resolution: object, minimum: int = 2) -> Tuple[int, int, int]:
    """Validate ``resolution``: an int ``R >= minimum`` or a triple of them (per axis x, y, z);
    returns ``(Rx, Ry, Rz)``. Messages name ``resolution`` (and the axis)."""
    if isinstance(resolution, (tuple, list)):
        if len(resolution) != 3:
            fail(
                where,
                f"resolution must be an integer >= {minimum} or one per axis (Rx, Ry, Rz), got "
                f"{len(resolution)} values {tuple(resolution)!r}",
            )
        return tuple(
            check_int(where, f"resolution[{a}] ({'xyz'[a]})", r, minimum)  # type: ignore[return-value]
            for a, r in enumerate(resolution)
        )
    r = check_int(where, "resolution", resolution, minimum)
    return (r, r, r)


def describe_resolution(shape: Sequence[int]) -> str:
    """``"R^3"`` text of a cube, ``"Rx x Ry x Rz"`` otherwise (for messages)."""
    shape = tuple(shape)
    return f"{shape[0]}^3" if shape[0] == shape[1] == shape[2] else " x ".join(str(r) for r in shape)


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


def check_grid_size(where: str, resolution: Resolution, num_clouds: int) -> None:
    """Refuse grids whose global node numbers ``cloud * Rx Ry Rz + local`` would overflow int64."""
    shape = grid_shape(resolution)
    if num_clouds * math.prod(shape) >= 2**62:
        fail(
            where,
            f"resolution={resolution_value(shape)} with {num_clouds} clouds numbers {num_clouds} x "
            f"{describe_resolution(shape)} grid nodes, beyond int64 node indices",
        )


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


def _rank_triples(L: Tuple[int, int, int], k: int, device) -> Tuple[Tensor, Tensor, Tensor]:
    """Rank triples ``(p, q, r)`` in ``[0, Lx) x [0, Ly) x [0, Lz)`` with ``(p+1)(q+1)(r+1) <= k``
    (at least ``k``; the caller guarantees ``Lx Ly Lz >= k``)."""
    key = (L, k, str(device))
    hit = _RANK_TRIPLES.get(key)
    if hit is None:
        p, q, s = torch.meshgrid(torch.arange(L[0]), torch.arange(L[1]), torch.arange(L[2]), indexing="ij")
        keep = ((p + 1) * (q + 1) * (s + 1) <= k).flatten()
        if int(keep.sum()) < k:  # (never for Lx Ly Lz >= k; kept as a guard)
            keep[:] = True
        hit = tuple(t.flatten()[keep].to(device) for t in (p, q, s))
        _RANK_TRIPLES[key] = hit
    return hit


def grid_knn(
    pos: Tensor, k: int, resolution: Resolution, lower: Bound = -1.0, upper: Bound = 1.0, batch: Optional[Tensor] = None
) -> Tensor:
    """The ``k`` nearest grid nodes of every point (exact), as ``[2, N*k]`` (point, global node).

    ``resolution``: ``R`` or ``(Rx, Ry, Rz)`` nodes per axis. Validates its arguments, then runs
    :func:`grid_knn_unchecked`.
    """
    where = "grid_knn"
    pos = check_points(where, "pos", pos)
    shape = check_resolution(where, resolution)
    k = check_int(where, "k", k)
    nodes = math.prod(shape)
    if k > nodes:
        what = "R^3" if shape[0] == shape[1] == shape[2] else "Rx Ry Rz"
        fail(where, f"k={k} exceeds the number of grid nodes {what}={nodes}")
    lo, hi = check_box(where, lower, upper)
    batch, num_clouds, _ = check_batch(where, "batch", batch, pos.size(0), device=pos.device, allow_empty=True)
    check_grid_size(where, shape, num_clouds)
    check_finite(where, "pos", pos, batch)
    check_grid_knn_size(where, pos.size(0), k, pos.device)
    work = working_dtype(pos.dtype)
    return grid_knn_unchecked(pos, k, resolution_value(shape), lo.to(pos.device, work), hi.to(pos.device, work), batch)


def grid_knn_bytes(num_points: int, k: int) -> int:
    """Bytes :func:`grid_knn_unchecked` allocates for ``num_points`` points: the output ``[2, N k]``
    and index table ``[N, k]`` (int64), and a round's candidate table ``[N, s]`` of distances and
    their indices, ``s <= k (1 + ln k)^2`` rank triples."""
    return num_points * k * (24 + int((1 + math.log(max(k, 1))) ** 2) * 12)


def check_grid_knn_size(where: str, num_points: int, k: int, device: Optional[torch.device]) -> None:
    """Refuse a :func:`grid_knn` whose tables (:func:`grid_knn_bytes`) exceed the allocation limit."""
    check_alloc(where, f"k={k} for {num_points} points", grid_knn_bytes(num_points, k), device)


def grid_knn_unchecked(
    pos: Tensor, k: int, resolution: Resolution, lower: Tensor, upper: Tensor, batch: Tensor
) -> Tensor:
    """:func:`grid_knn` without validation: finite ``pos [N, 3]``, sorted int64 ``batch [N]``,
    ``1 <= k <= Rx Ry Rz``, box corners ``lower < upper`` as ``[3]`` tensors on ``pos``'s device
    (in the working dtype of ``pos``, :func:`gridify.ops.distance.working_dtype`, to stay exact),
    tables within the allocation limit (:func:`check_grid_knn_size`, checked by the caller)."""
    n = pos.size(0)
    (pos, lo, hi), _ = distance_frame(pos, lower, upper)  # exact nodes for any dtype and magnitude
    R = grid_shape(resolution)
    h = (hi - lo) / torch.tensor([r - 1 for r in R], dtype=pos.dtype, device=pos.device)
    if n == 0:
        return torch.zeros(2, 0, dtype=torch.long, device=pos.device)
    base = torch.floor((pos - lo) / h).long()
    out = torch.empty(n, k, dtype=torch.long, device=pos.device)
    todo = torch.arange(n, device=pos.device)
    m = _initial_half_width(k)
    while todo.numel():
        L = tuple(min(2 * m, r) for r in R)
        if math.prod(L) >= k:
            ok, node = _window_knn(pos[todo], base[todo], lo, h, R, L, m, k)
            out[todo[ok]] = node[ok]
            todo = todo[~ok]
        m *= 2
    out = out + (batch * math.prod(R))[:, None]
    row = torch.arange(n, device=pos.device).repeat_interleave(k)
    return torch.stack([row, out.reshape(-1)])


def _window_knn(
    pos: Tensor, base: Tensor, lo: Tensor, h: Tensor, R: Tuple[int, int, int], L: Tuple[int, int, int], m: int, k: int
) -> Tuple[Tensor, Tensor]:
    """One round of :func:`grid_knn_unchecked`: the ``k`` nearest nodes ``[n, k]`` (local indices)
    within each point's window of ``L_a`` nodes per axis, and whether they are exact ``[n]``."""
    dists, idxs = [], []
    for a in range(3):
        start = (base[:, a] - m + 1).clamp(min=0, max=R[a] - L[a])  # [n]
        idx = start[:, None] + torch.arange(L[a], device=pos.device)  # [n, L_a] node indices on axis a
        d = (lo[a] + idx.to(pos.dtype) * h[a] - pos[:, a : a + 1]).pow(2)
        # squared distance = dx[a] + dy[b] + dz[c]. With each axis sorted, a combination of ranks
        # (p, q, r) has at least (p+1)(q+1)(r+1) combinations no farther than itself, so only the
        # rank triples with (p+1)(q+1)(r+1) <= k can be among the k nearest
        d, order = torch.sort(d, dim=1)
        dists.append(d)
        idxs.append(idx.gather(1, order))
    pr, qr, rr = _rank_triples(L, k, pos.device)
    dist = torch.index_select(dists[0], 1, pr)  # [n, s]
    dist += torch.index_select(dists[1], 1, qr)
    dist += torch.index_select(dists[2], 1, rr)
    val, arg = torch.topk(dist, k, dim=1, largest=False, sorted=True)
    a, b, c = pr[arg], qr[arg], rr[arg]
    node = (idxs[0].gather(1, a) * R[1] + idxs[1].gather(1, b)) * R[2] + idxs[2].gather(1, c)
    windowed = [a for a in range(3) if L[a] < R[a]]
    if not windowed:
        return torch.ones(pos.size(0), dtype=torch.bool, device=pos.device), node
    bound = torch.stack([m * h[a] for a in windowed]).min()
    return val[:, -1] <= bound * bound * (1 + 1e-6), node


def grid_positions(
    resolution: Resolution, lower: Bound = -1.0, upper: Bound = 1.0, device=None, dtype=torch.float32
) -> Tensor:
    """Coordinates of the ``Rx Ry Rz`` grid nodes in flattened order ``a * Ry * Rz + b * Rz + c``
    (``a * R^2 + b * R + c`` for an int ``R``). [Rx Ry Rz, 3]

    Computed in float64 and rounded once to ``dtype``. The box and ``resolution`` (an int or a
    per-axis triple) are validated and the table is refused when it exceeds the allocation limit.
    """
    where = "grid_positions"
    shape = check_resolution(where, resolution)
    if not isinstance(dtype, torch.dtype):
        fail(where, f"dtype must be a torch.dtype, got {dtype!r}")
    check_float(where, "dtype", torch.empty(0, dtype=dtype))
    lo, hi = check_box(where, lower, upper)
    what = "R^3" if shape[0] == shape[1] == shape[2] else "Rx Ry Rz"
    check_alloc(
        where,
        f"resolution={resolution_value(shape)} ([{what}, 3] node positions in {dtype})",
        3 * math.prod(shape) * max(element_size(dtype), 8),
        device,
    )
    return grid_positions_unchecked(shape, tuple(float(v) for v in lo), tuple(float(v) for v in hi), device, dtype)


def grid_positions_unchecked(
    shape: Tuple[int, int, int],
    lower: Tuple[float, float, float],
    upper: Tuple[float, float, float],
    device=None,
    dtype=torch.float32,
) -> Tensor:
    """:func:`grid_positions` of a validated ``shape`` triple and box corners (per-axis floats),
    a floating ``dtype`` and a table within the allocation limit (checked by the caller)."""
    axes = [torch.linspace(lower[i], upper[i], shape[i], device=device, dtype=torch.float64) for i in range(3)]
    g = torch.meshgrid(*axes, indexing="ij")
    return torch.stack(g, -1).reshape(-1, 3).to(dtype)
