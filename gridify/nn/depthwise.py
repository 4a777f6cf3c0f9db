r"""Depthwise 3D cross-correlation for training: direct forward, direct input gradient, GEMM weight gradient.

    y[b, c, p] = sum_{o in [-P, P]^3} w[c, o] x[b, c, p + o]          (zero padding, P = (K - 1) / 2)

PyTorch's CPU depthwise ``conv3d`` (oneDNN, channels-last) computes this forward fast, but its
backward is slow (about 20x the forward at 9^3 taps), which is why training used the FFT path.
:class:`DepthwiseConv3dFunction` keeps the fast forward and computes the two gradients itself:

    dL/dx[b, c, p] = sum_o w[c, o] g[b, c, p - o]      a depthwise convolution of g with the flipped
                                                     kernel: the same fast direct kernel
    dL/dw[c, o]    = sum_b sum_p g[b, c, p] x[b, c, p + o]

The weight gradient is a cross-correlation summed over the batch. It runs as one batched matrix
product per channel over the (y, z) planes: with ``x`` unfolded along the x axis (``K`` shifted
copies), ``S_c[(y,z), (a, y', z')] = sum_{b, x} g[b, c, x, y, z] x[b, c, x + a - P, y', z']`` is a
``[R^2, b R] x [b R, K R^2]`` product, and ``dL/dw[c, a, dy, dz]`` sums ``S_c`` along the band
``(y', z') = (y, z) + (dy, dz) - P`` (a gather and a sum). Its cost grows as ``K R^5`` (against
``K^3 R^3`` for the forward), so for larger grids the weight gradient comes from FFTs instead
(:func:`fft_weight_gradient`, the same quantity as ``irfft(sum_b conj(G_b) X_b)``).

Measured on the development machine (2 cores, AMD EPYC, torch 2.13, batch 32 x 128 channels,
R = 10, forward + backward): 9^3 taps 231 ms here against 532 ms through the FFT path; 5^3 taps
96 ms against 223 ms. :func:`gridify.nn.flexconv.use_fft_conv` picks between them.

A non-cubic grid ``[B, C, Rx, Ry, Rz]`` (a flat scene) with a kernel ``[C, 1, Kx, Ky, Kz]`` (each
odd, ``K_a <= 2 R_a - 1``) runs the same way, its weight gradient always through FFTs.

Shapes:
    x [B, C, R, R, R] (channels-last or contiguous), kernel [C, 1, K, K, K] (K odd, K <= 2R - 1)
    -> [B, C, R, R, R]; per axis: x [B, C, Rx, Ry, Rz], kernel [C, 1, Kx, Ky, Kz] -> [B, C, Rx, Ry, Rz]
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "DepthwiseConv3dFunction",
    "depthwise_conv3d_direct",
    "gemm_weight_gradient",
    "fft_weight_gradient",
    "GEMM_WEIGHT_GRADIENT_MAX_RESOLUTION",
    "next_fast_len",
]

#: Largest grid resolution whose weight gradient uses the batched matrix product (its cost grows as
#: R^5); larger grids use FFTs. Measured (2 cores, 128 channels, 9^3 taps): GEMM 168 ms vs FFT
#: 207 ms at R = 10, 508 vs 357 ms at R = 13.
GEMM_WEIGHT_GRADIENT_MAX_RESOLUTION = 12

_BAND_INDEX: Dict[Tuple[int, int, str], Tensor] = {}


def _band_index(R: int, K: int, device: torch.device) -> Tensor:
    """``[R^2, K^2]``: for each plane position ``(y, z)`` and tap ``(dy, dz)``, the flat index of
    ``(y + dy - P, z + dz - P)`` in the plane, or ``R^2`` (a zero column) when it falls outside."""
    key = (R, K, str(device))
    hit = _BAND_INDEX.get(key)
    if hit is None:
        P = (K - 1) // 2
        r = torch.arange(R)
        pos = r[:, None] + torch.arange(K)[None, :] - P  # [R, K]
        ok = (pos >= 0) & (pos < R)
        pos = pos.clamp(0, R - 1)
        idx = pos[:, None, :, None] * R + pos[None, :, None, :]  # [y, z, dy, dz]
        valid = ok[:, None, :, None] & ok[None, :, None, :]
        hit = torch.where(valid, idx, torch.full_like(idx, R * R)).reshape(R * R, K * K).to(device)
        _BAND_INDEX[key] = hit
    return hit


def gemm_weight_gradient(x: Tensor, g: Tensor, K: int) -> Tensor:
    """``dL/dw[c, 0, o] = sum_b sum_p g[b, c, p] x[b, c, p + o]`` by batched matrix products (module docstring).

    Shapes:
        x, g [B, C, R, R, R] -> [C, 1, K, K, K]
    """
    B, C, R = x.shape[0], x.shape[1], x.shape[-1]
    P = (K - 1) // 2
    G = g.permute(1, 0, 2, 3, 4).reshape(C, B * R, R * R).transpose(1, 2).contiguous()  # [C, yz, (b, x)]
    xp = F.pad(x.permute(1, 0, 2, 3, 4), (0, 0, 0, 0, P, P))  # [C, B, R + 2P, R, R]
    U = xp.unfold(2, R, 1).permute(0, 1, 5, 2, 3, 4).reshape(C, B * R, K * R * R)  # [C, (b, x), (a, y'z')]
    S = F.pad(torch.bmm(G, U).view(C, R * R, K, R * R), (0, 1))  # [C, yz, a, y'z' (+ a zero column)]
    idx = _band_index(R, K, x.device)[None, :, None, :].expand(C, R * R, K, K * K)
    return torch.gather(S, 3, idx).sum(1).reshape(C, 1, K, K, K)


def fft_weight_gradient(x: Tensor, g: Tensor, K: Union[int, Sequence[int]]) -> Tensor:
    """The same quantity as :func:`gemm_weight_gradient` through FFTs (for larger grids).

    ``c[o] = irfft(sum_b conj(G_b) X_b)[o mod n]`` with ``n_a >= R_a + P_a`` per axis, so the lags
    ``|o_a| <= P_a`` do not wrap around. ``K``: taps per axis, one int or ``(Kx, Ky, Kz)``.

    Shapes:
        x, g [B, C, Rx, Ry, Rz] -> [C, 1, Kx, Ky, Kz]
    """
    Ks = (K, K, K) if isinstance(K, int) else tuple(K)
    P = [(k - 1) // 2 for k in Ks]
    n = tuple(next_fast_len(r + p) for r, p in zip(x.shape[-3:], P))
    dims = (-3, -2, -1)
    work = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    X = torch.fft.rfftn(x.to(work).contiguous(), s=n, dim=dims)
    G = torch.fft.rfftn(g.to(work).contiguous(), s=n, dim=dims)
    c = torch.fft.irfftn((X * G.conj()).sum(0), s=n, dim=dims)  # [C, nx, ny, nz]
    lx, ly, lz = (torch.arange(-p, p + 1, device=x.device) % m for p, m in zip(P, n))
    return c[:, lx][:, :, ly][:, :, :, lz].unsqueeze(1).to(x.dtype)


def next_fast_len(n: int) -> int:
    """Smallest integer >= n whose prime factors are 2, 3 and 5 (fast FFT sizes)."""
    while True:
        m = n
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        if m == 1:
            return n
        n += 1


def depthwise_conv3d_direct(x: Tensor, kernel: Tensor) -> Tensor:
    """The forward: PyTorch's direct grouped ``conv3d`` (oneDNN on CPU); ``(K_a - 1) / 2`` padding per axis."""
    k = kernel.shape[-1]
    if kernel.shape[-3] == kernel.shape[-2] == k:
        return F.conv3d(x, kernel, padding=(k - 1) // 2, groups=x.shape[1])
    return F.conv3d(x, kernel, padding=tuple((s - 1) // 2 for s in kernel.shape[-3:]), groups=x.shape[1])


class DepthwiseConv3dFunction(torch.autograd.Function):
    """Direct depthwise cross-correlation with the gradients of the module docstring."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, kernel: Tensor) -> Tensor:
        ctx.save_for_backward(x, kernel)
        return depthwise_conv3d_direct(x, kernel)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        x, kernel = ctx.saved_tensors
        if x.is_contiguous(memory_format=torch.channels_last_3d):
            grad = grad.contiguous(memory_format=torch.channels_last_3d)
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = depthwise_conv3d_direct(grad, torch.flip(kernel, (-3, -2, -1)))
        if ctx.needs_input_grad[1]:
            K = kernel.shape[-1]
            cubic = len(set(x.shape[-3:])) == 1 and len(set(kernel.shape[-3:])) == 1
            if cubic and x.shape[-1] <= GEMM_WEIGHT_GRADIENT_MAX_RESOLUTION:
                grad_w = gemm_weight_gradient(x, grad, K)
            elif cubic:
                grad_w = fft_weight_gradient(x, grad, K)
            else:  # a flat grid: per-axis taps
                grad_w = fft_weight_gradient(x, grad, tuple(kernel.shape[-3:]))
        return grad_x, grad_w
