"""3D U-Net grid backbone that works on odd grid sizes (R = 9, 13, ...) and, with ``cubic=False``,
on per-axis grids ``(Rx, Ry, Rz)`` of flat scenes (e.g. 32 x 32 x 8).

Shapes:
    ``[B, C_in, Rx, Ry, Rz]`` -> ``[B, C_out, Rx, Ry, Rz]``
"""

from __future__ import annotations

from typing import List, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import check_parameters, check_positive_int, check_probability, checked_forward
from ..registry import BACKBONES
from ..nn.inputs import check_grid_module_input
from .blocks import (
    DepthwiseSeparableConv3d,
    GridBackbone,
    ResidualBlock3d,
    check_cubic,
    check_kernel_size,
    pointwise_conv3d,
)

__all__ = ["UNet3d"]


class _Down(nn.Module):
    r"""``y = Conv3d_{3, stride s, pad 1}(BN(x))``: ``R_a -> ceil(R_a / 2)`` along every axis with
    ``R_a >= 3`` (``s_a = 2``), unchanged along a smaller one (``s_a = 1``); ``C_in -> C_out``.

    For odd ``R`` the output nodes sit exactly on every other input node, endpoints included,
    i.e. on ``linspace(-1, 1, (R + 1) / 2)``. A cubic grid halves on every axis, as before.

    Shapes:
        ``[B, C_in, Rx, Ry, Rz]`` -> ``[B, C_out, ceil(Rx/2), ceil(Ry/2), ceil(Rz/2)]`` (axes < 3 kept)
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.norm = nn.BatchNorm3d(in_channels)
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size=3, stride=2, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        stride = down_strides(tuple(x.shape[-3:]))
        if stride == (2, 2, 2):
            return self.conv(self.norm(x))
        return F.conv3d(self.norm(x), self.conv.weight, self.conv.bias, stride=stride, padding=1)


def down_strides(shape: Tuple[int, ...]) -> Tuple[int, int, int]:
    """Per-axis stride of a down-sampling step: 2 along axes of at least 3 nodes, else 1."""
    return tuple(2 if r >= 3 else 1 for r in shape)  # type: ignore[return-value]


class _Up(nn.Module):
    r"""``y = W_f [W_u Interp(x -> size(skip)), skip]``: trilinear up-sampling to the skip's size.

    ``align_corners=True`` keeps the grid's endpoints fixed (nodes on ``linspace(-1, 1, R)``),
    so odd sizes up-sample exactly onto the finer lattice; any target size works.

    Shapes:
        x ``[B, C_in, r, r, r]``, skip ``[B, C_out, R, R, R]`` -> ``[B, C_out, R, R, R]``
    """

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.reduce = pointwise_conv3d(in_channels, out_channels)
        self.fuse = pointwise_conv3d(2 * out_channels, out_channels)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        size = skip.shape[-3:]
        if x.shape[-3:] != size:
            x = F.interpolate(x, size=size, mode="trilinear", align_corners=True)
        return self.fuse(torch.cat([self.reduce(x), skip], dim=1))


@BACKBONES.register("unet")
class UNet3d(GridBackbone):
    r"""3D U-Net with residual depthwise-separable blocks and skip connections.

    With ``L = depth`` levels and widths ``C_l = hidden_channels * channel_multiplier^l``:

        e_0 = Blocks_0(W_in x)
        e_l = Blocks_l(Down_l(e_{l-1}))                           l = 1..L-1   (R_l = ceil(R_{l-1} / 2))
        d_{L-1} = e_{L-1}
        d_l = Blocks'_l(W_f [W_u Up(d_{l+1} -> R_l), e_l])         l = L-2..0
        y   = W_out d_0

    ``Blocks`` are ``blocks_per_level`` :class:`~gridify.backbones.blocks.ResidualBlock3d`
    with discrete depthwise ``kernel_size`` kernels; ``Down`` is BN + a stride-2 3x3x3
    convolution (padding 1, so ``R -> ceil(R / 2)``: 9 -> 5 -> 3, 13 -> 7 -> 4); ``Up`` is trilinear
    interpolation to exactly the skip's size followed by pointwise layers. Any ``R >= 1`` works:
    a level is only entered while the grid still has at least 3 nodes along some axis
    (down-sampling a 2-node grid to a single node carries no geometry and breaks BatchNorm at
    batch size 1), so on tiny grids the deepest levels are skipped (``R = 3``: two levels;
    ``R <= 2``: one), and their parameters receive no gradient.

    **Per-axis grids** (``cubic=False``, e.g. ``32 x 32 x 8`` for a room): each step halves only
    the axes that still have at least 3 nodes (``8 -> 4 -> 2``, then ``z`` stays at 2 while
    ``x, y`` keep halving), and the kernels are cropped per axis to ``2 R_a - 1`` taps. With the
    default ``cubic=True`` a non-cubic input is refused.

    Shapes:
        input ``[B, in_channels, Rx, Ry, Rz]`` -> output ``[B, out_channels, Rx, Ry, Rz]`` (``R``
        on every axis unless ``cubic=False``)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 128,
        depth: int = 3,
        dropout: float = 0.1,
        kernel_size: int = 9,
        channel_multiplier: int = 2,
        blocks_per_level: int = 1,
        fft: Union[str, bool] = "auto",
        cubic: bool = True,
    ) -> None:
        super().__init__()
        check_positive_int(
            "UNet3d",
            in_channels=in_channels,
            out_channels=out_channels,
            hidden_channels=hidden_channels,
            depth=depth,
            channel_multiplier=channel_multiplier,
            blocks_per_level=blocks_per_level,
        )
        check_probability("UNet3d", "dropout", dropout)
        check_kernel_size("UNet3d", kernel_size)
        self.cubic = check_cubic("UNet3d", cubic)
        top = hidden_channels * channel_multiplier ** (depth - 1)  # the widest level
        check_parameters(
            "UNet3d",
            f"hidden_channels={hidden_channels}, channel_multiplier={channel_multiplier}, depth={depth}",
            depth * (2 * blocks_per_level + 4) * top * (top + kernel_size**3),
        )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.hidden_channels, self.depth, self.kernel_size = hidden_channels, depth, kernel_size
        widths: List[int] = [hidden_channels * channel_multiplier**l for l in range(depth)]
        self.widths = widths

        def stage(c: int) -> nn.Sequential:
            return nn.Sequential(
                *[
                    ResidualBlock3d(
                        c, DepthwiseSeparableConv3d(c, c, kernel_size, fft=fft, cubic=cubic), dropout=dropout
                    )
                    for _ in range(blocks_per_level)
                ]
            )

        self.in_proj = pointwise_conv3d(in_channels, widths[0])
        self.encoders = nn.ModuleList(stage(c) for c in widths)
        self.downs = nn.ModuleList(_Down(widths[l], widths[l + 1]) for l in range(depth - 1))
        self.ups = nn.ModuleList(_Up(widths[l + 1], widths[l]) for l in range(depth - 1))
        self.decoders = nn.ModuleList(stage(widths[l]) for l in range(depth - 1))
        self.out_proj = pointwise_conv3d(widths[0], out_channels)

    @checked_forward(check_grid_module_input)
    def forward(self, x: Tensor) -> Tensor:
        self._check_input(x)
        h = self.encoders[0](self.in_proj(x))
        skips = [h]
        for down, enc in zip(self.downs, self.encoders[1:]):
            if max(h.shape[-3:]) < 3:
                break
            h = enc(down(h))
            skips.append(h)
        for l in range(len(skips) - 2, -1, -1):
            h = self.decoders[l](self.ups[l](h, skips[l]))
        return self.out_proj(h)

    def levels_used(self, resolution: Union[int, Sequence[int]]) -> int:
        """Number of levels a grid of ``resolution`` (``R`` or ``(Rx, Ry, Rz)``) nodes per axis goes through."""
        n = 1
        shape = tuple(resolution) if isinstance(resolution, (tuple, list)) else (resolution,) * 3
        while n < self.depth and max(shape) >= 3:
            shape, n = tuple((r + 1) // 2 if s == 2 else r for r, s in zip(shape, down_strides(shape))), n + 1
        return n
