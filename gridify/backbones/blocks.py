"""Building blocks shared by the grid backbones.

All blocks act on dense grids ``[B, C, R, R, R]`` and keep the spatial size; the discrete ones
built with ``cubic=False`` accept any ``[B, C, Rx, Ry, Rz]`` (a per-axis grid of a flat scene).

Shapes:
    input ``[B, C, Rx, Ry, Rz]`` -> output ``[B, C', Rx, Ry, Rz]``
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_parameters, check_positive_int, check_probability, checked_forward, fail, is_int
from ..nn.flexconv import (
    DEFAULT_FFT_THRESHOLD,  # noqa: F401
    PointwiseConv3d,
    check_grid_input,  # noqa: F401
    direct_depthwise_conv3d,
    fft_depthwise_conv3d,
    use_fft_conv,
)
from ..nn.inputs import check_grid_module_input

__all__ = [
    "GridBackbone",
    "ResidualBlock3d",
    "DepthwiseSeparableConv3d",
    "PointwiseConv3d",
    "pointwise_conv3d",
    "check_kernel_size",
    "check_cubic",
    "grid_gelu",
    "MaskDropout",
]


def check_kernel_size(where: str, kernel_size: int) -> None:
    """A discrete kernel's taps per axis: an odd positive integer (a centred, same-size convolution)."""
    if not is_int(kernel_size) or kernel_size < 1:
        fail(where, f"kernel_size must be an odd positive integer, got {kernel_size!r}")
    if kernel_size % 2 == 0:
        fail(where, f"kernel_size must be odd (same-size 'centred' convolution), got {kernel_size}")


def check_cubic(where: str, cubic: object) -> bool:
    """The ``cubic`` flag of a grid layer: True (only ``[B, C, R, R, R]``) or False (any ``[B, C, Rx, Ry, Rz]``)."""
    if not isinstance(cubic, bool):
        fail(where, f"cubic must be True or False, got {cubic!r}")
    return cubic


def _crop_taps(weight: Tensor, shape: tuple) -> Tensor:
    """A kernel ``[C, 1, K, K, K]`` cropped per axis to at most ``2 R_a - 1`` taps (the taps beyond
    can only see zero padding). ``[C, 1, Kx, Ky, Kz]``"""
    k = weight.shape[-1]
    c = [max(0, (k - (2 * r - 1)) // 2) for r in shape]
    return weight[..., c[0] : k - c[0], c[1] : k - c[1], c[2] : k - c[2]]


def pointwise_conv3d(in_channels: int, out_channels: int, bias: bool = True) -> PointwiseConv3d:
    """A 1x1x1 convolution (per-node linear layer) with LeCun-normal weights and zero bias.

    ``W ~ N(0, 1 / C_in)`` keeps unit-variance inputs at unit variance.
    """
    conv = PointwiseConv3d(in_channels, out_channels, bias=bias)
    nn.init.normal_(conv.weight, 0.0, 1.0 / math.sqrt(in_channels))
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    return conv


class DepthwiseSeparableConv3d(nn.Module):
    r"""Discrete depthwise convolution followed by a pointwise linear layer.

        z_c(p) = sum_{o in [-P, P]^3} w_c(o) x_c(p + o)     (zero padding, P = K // 2)
        y(p)   = W z(p) + b

    Depthwise weights ``w ~ N(0, 1 / K^3)`` (fan-in ``K^3``), pointwise ``W ~ N(0, 1 / C_in)``.
    On a grid with ``2R - 1 < K`` the taps that can only ever see the zero padding are cropped
    before the convolution (same result, less work), per axis on a non-cubic grid (accepted
    with ``cubic=False``; a cubic input is required otherwise). ``fft`` selects the backend as in
    :class:`gridify.nn.flexconv.SepFlexConv3d` (``"auto"``: FFT from ``fft_threshold`` taps per
    axis, default per device); both compute the same cross-correlation.

    Shapes:
        input ``[B, C_in, R, R, R]`` -> output ``[B, C_out, R, R, R]`` (``[B, C, Rx, Ry, Rz]`` with
        ``cubic=False``)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 9,
        bias: bool = True,
        fft: Union[str, bool] = "auto",
        fft_threshold: Optional[int] = None,
        cubic: bool = True,
    ) -> None:
        super().__init__()
        check_positive_int("DepthwiseSeparableConv3d", in_channels=in_channels, out_channels=out_channels)
        check_kernel_size("DepthwiseSeparableConv3d", kernel_size)
        check_parameters(
            "DepthwiseSeparableConv3d",
            f"in_channels={in_channels}, out_channels={out_channels}, kernel_size={kernel_size}",
            in_channels * (kernel_size**3 + out_channels + 1),
        )
        if fft not in ("auto", True, False):
            raise ValueError(f"DepthwiseSeparableConv3d: fft must be 'auto', True or False, got {fft!r}")
        if fft_threshold is not None:
            check_positive_int("DepthwiseSeparableConv3d", fft_threshold=fft_threshold)
        self.fft, self.fft_threshold, self.cubic = fft, fft_threshold, check_cubic("DepthwiseSeparableConv3d", cubic)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
        self.depthwise = nn.Conv3d(
            in_channels, in_channels, kernel_size, padding=kernel_size // 2, groups=in_channels, bias=False
        )
        self.pointwise = pointwise_conv3d(in_channels, out_channels, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.depthwise.weight, 0.0, 1.0 / math.sqrt(self.kernel_size**3))
        nn.init.normal_(self.pointwise.weight, 0.0, 1.0 / math.sqrt(self.in_channels))
        if self.pointwise.bias is not None:
            nn.init.zeros_(self.pointwise.bias)

    @checked_forward(check_grid_module_input)
    def forward(self, x: Tensor) -> Tensor:
        r = check_grid_input(type(self).__name__, x, self.in_channels, cubic=self.cubic)
        weight = self.depthwise.weight
        k = self.kernel_size
        if not self.cubic:
            weight = _crop_taps(weight, tuple(x.shape[2:]))
            k = max(weight.shape[-3:])
        elif k > 2 * r - 1:
            c = (k - (2 * r - 1)) // 2
            weight = weight[..., c : k - c, c : k - c, c : k - c]
            k = 2 * r - 1
        needs_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
        if use_fft_conv(self.fft, k, x.device, self.fft_threshold, needs_grad):
            z = fft_depthwise_conv3d(x, weight)
        else:
            z = direct_depthwise_conv3d(x, weight)
        return self.pointwise(z)


def grid_gelu(x: Tensor, inplace: bool = False) -> Tensor:
    """Exact GELU of a grid ``[B, C, R, R, R]``, computed on its channels-last view when that view
    is contiguous (the layout the backbones keep).

    The same function as ``F.gelu(x)`` (to float rounding: torch's vectorized and scalar GELU
    kernels differ in the last bits, about 1e-6 at most), but its CPU kernel is about 6x slower on a
    ``channels_last_3d`` tensor than on the same memory viewed as ``[B, R, R, R, C]`` (measured,
    1 thread, 4M values of a CCNN block: 10.1 vs 1.55 ms in place, 10.2 vs 2.75 ms out of place).
    ``inplace=True`` overwrites ``x`` (only for tensors no one else holds, without autograd).
    """
    v = x.movedim(1, -1) if x.dim() == 5 else x
    if not v.is_contiguous():
        v = x
    y = torch.ops.aten.gelu_(v) if inplace else F.gelu(v)
    return y.movedim(-1, 1) if v is not x else y


class MaskDropout(nn.Dropout):
    r"""Dropout by a uniform mask: ``y = x * 1[u >= p] / (1 - p)``, ``u`` uniform per element.

    The same distribution as :class:`torch.nn.Dropout` (each element kept with probability
    ``1 - p`` and scaled by ``1 / (1 - p)``), drawn without ``bernoulli_``. On CPU ``u`` is a
    16-bit integer, four of them cut from each 64-bit word of ``random_`` over the full int64
    range, compared with ``round(p 2^16)`` (so ``p`` is applied to within ``2^-17``): measured
    (2 threads, AMD EPYC, 2M values) 2.3-2.5 ms against 6.5-7.2 ms for ``torch.rand_like`` and
    about 2.5x that for ``F.dropout``. Elsewhere ``u = torch.rand_like(x)``. The numbers come
    from torch's global generator, so ``torch.manual_seed`` makes it reproducible.

    Shapes:
        any -> the same
    """

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:  # everything dropped, as F.dropout does
            return x.mul_(0.0) if self.inplace else x * 0.0
        keep = _keep_mask(x, self.p).to(x.dtype).mul_(1.0 / (1.0 - self.p))
        return x.mul_(keep) if self.inplace else x * keep


def _keep_mask(x: Tensor, p: float) -> Tensor:
    """Boolean ``[*x.shape]``: each element True with probability ``1 - p`` (see :class:`MaskDropout`)."""
    if x.device.type != "cpu":
        return torch.rand_like(x) >= p
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)
    u = words.view(torch.int16)[:n].view(x.shape)  # uniform on [-2^15, 2^15)
    return u >= round(p * 65536) - 32768


def _is_fresh(h: Tensor, x: Tensor) -> bool:
    """``h`` may be overwritten: a spatial layer's output that shares no memory with the input."""
    dense = h.is_contiguous() or h.is_contiguous(memory_format=torch.channels_last_3d)
    return dense and h.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


class ResidualBlock3d(nn.Module):
    r"""Pre-norm residual block of the grid networks (CCNN block).

        y = x + GELU(W_2 Dropout(GELU(S(BN(x)))))

    ``S`` is the spatial mixing layer given to the constructor, which ends with its own
    pointwise linear ``W_1``: a :class:`gridify.nn.flexconv.SepFlexConv3d` (continuous
    depthwise kernel, CCNN) or a :class:`DepthwiseSeparableConv3d` (discrete). ``W_2`` is a
    1x1x1 convolution. The identity path is untouched: the block returns ``x + F(x)``.

    Shapes:
        input ``[B, C, R, R, R]`` -> output ``[B, C, R, R, R]``
    """

    def __init__(self, channels: int, spatial: nn.Module, dropout: float = 0.1) -> None:
        super().__init__()
        check_positive_int("ResidualBlock3d", channels=channels)
        check_probability("ResidualBlock3d", "dropout", dropout)
        self.channels = channels
        self.norm = nn.BatchNorm3d(channels)
        self.spatial = spatial
        self.dropout = MaskDropout(dropout)
        self.linear = pointwise_conv3d(channels, channels)

    @property
    def cubic(self) -> bool:
        """Whether only cubic grids are accepted (the spatial layer's ``cubic``, default True)."""
        return getattr(self.spatial, "cubic", True)

    @checked_forward(check_grid_module_input)
    def forward(self, x: Tensor) -> Tensor:
        check_grid_input(type(self).__name__, x, self.channels, cubic=self.cubic)
        if torch.is_grad_enabled():
            h = grid_gelu(self.spatial(self.norm(x)))
            h = grid_gelu(self.linear(self.dropout(h)))
            return x + h
        # Without autograd: the same values, computed in place on the block's own fresh
        # temporaries (on CPU each fresh grid-sized buffer costs page faults).
        h = self.spatial(self.norm(x))
        h = grid_gelu(h, inplace=_is_fresh(h, x))
        h = grid_gelu(self.linear(self.dropout(h)), inplace=True)
        return h.add_(x)


class GridBackbone(nn.Module):
    """Common helpers of the registered grid backbones (dense ``[B, C_in, R^3] -> [B, C_out, R^3]``)."""

    in_channels: int
    out_channels: int

    def kernel_l2(self) -> Tensor:
        """Sum over layers of the squared L2 norm of the *generated* continuous kernels.

        Zero (a tensor on the parameters' device) for backbones with discrete kernels.
        """
        total: Optional[Tensor] = None
        for module in self.modules():
            if module is not self and hasattr(module, "kernel_l2") and not isinstance(module, GridBackbone):
                term = module.kernel_l2()
                total = term if total is None else total + term
        if total is None:
            p = next(self.parameters())
            return torch.zeros((), device=p.device, dtype=p.dtype)
        return total

    def num_parameters(self, trainable_only: bool = True) -> int:
        """Number of (trainable) parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def _check_input(self, x: Tensor) -> int:
        return check_grid_input(type(self).__name__, x, self.in_channels, cubic=getattr(self, "cubic", True))


class ResidualStack(GridBackbone):
    """``W_out [BN](block_depth(... block_1(W_in x)))``: the trunk shared by ``ccnn``, ``resnet`` and
    ``mrconv``.

    Subclasses call ``_check_widths`` (the shared argument checks, with the backbone's name in the
    messages) and ``_build`` with a factory returning one depthwise-separable convolution.

    Shapes:
        input ``[B, in_channels, R, R, R]`` -> output ``[B, out_channels, R, R, R]``
    """

    def _check_widths(
        self, where: str, in_channels: int, out_channels: int, hidden_channels: int, depth: int, dropout: float
    ) -> None:
        """Validate the arguments every residual stack shares (positive widths and depth, a parameter
        count within the allocation limit, a dropout probability; ``where`` names the backbone in
        the messages) and store the widths and depth."""
        check_positive_int(
            where, in_channels=in_channels, out_channels=out_channels, hidden_channels=hidden_channels, depth=depth
        )
        check_parameters(
            where,
            f"hidden_channels={hidden_channels}, depth={depth}",
            hidden_channels * ((3 * depth + 2) * hidden_channels + in_channels + out_channels),
        )
        check_probability(where, "dropout", dropout)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.hidden_channels, self.depth = hidden_channels, depth

    def _build(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        depth: int,
        make_conv: Callable[[], nn.Module],
        dropout: float,
        final_norm: bool,
    ) -> None:
        self.in_proj = pointwise_conv3d(in_channels, hidden_channels)
        self.blocks = nn.ModuleList(
            ResidualBlock3d(hidden_channels, make_conv(), dropout=dropout) for _ in range(depth)
        )
        self.norm = nn.BatchNorm3d(hidden_channels) if final_norm else nn.Identity()
        self.out_proj = pointwise_conv3d(hidden_channels, out_channels)

    @checked_forward(check_grid_module_input)
    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        h = self.in_proj(x)
        for block in self.blocks:
            h = block(h)
        return self.out_proj(self.norm(h))
