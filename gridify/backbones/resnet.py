"""Discrete-kernel residual grid backbone (the official gridification code's grid network)."""

from __future__ import annotations

from typing import Union

from ..registry import BACKBONES
from .blocks import DepthwiseSeparableConv3d, ResidualStack, check_cubic, check_kernel_size

__all__ = ["ResNet3d"]


@BACKBONES.register("resnet")
class ResNet3d(ResidualStack):
    r"""Residual network of discrete depthwise-separable 3D convolutions.

        h_0 = W_in x
        h_l = h_{l-1} + GELU(W_2 Dropout(GELU(W_1 DWConv_K(BN(h_{l-1}))))),   l = 1..depth
        y   = W_out [BN](h_depth)

    The same block as :class:`gridify.backbones.CCNN` with a discrete depthwise kernel
    (``nn.Conv3d(C, C, K, groups=C, padding=K // 2)``) in place of the continuous one. Its
    kernel is tied to the grid spacing: applied at another resolution it covers another
    physical extent. ``fft`` picks the depthwise backend (same result; ``"auto"`` uses the FFT
    for large kernels, see :class:`~gridify.backbones.blocks.DepthwiseSeparableConv3d`).
    ``cubic=False`` accepts non-cubic grids ``[B, C, Rx, Ry, Rz]`` (a per-axis resolution for flat
    scenes; kernels cropped per axis to ``2 R_a - 1`` taps); the default refuses them.

    Shapes:
        input ``[B, in_channels, Rx, Ry, Rz]`` -> output ``[B, out_channels, Rx, Ry, Rz]`` (``R`` each
        axis unless ``cubic=False``)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 128,
        depth: int = 3,
        dropout: float = 0.1,
        kernel_size: int = 9,
        final_norm: bool = False,
        fft: Union[str, bool] = "auto",
        cubic: bool = True,
    ) -> None:
        super().__init__()
        self._check_widths("ResNet3d", in_channels, out_channels, hidden_channels, depth, dropout)
        check_kernel_size("ResNet3d", kernel_size)
        self.cubic = check_cubic("ResNet3d", cubic)
        self.kernel_size = kernel_size
        self._build(
            in_channels,
            hidden_channels,
            out_channels,
            depth,
            lambda: DepthwiseSeparableConv3d(hidden_channels, hidden_channels, kernel_size, fft=fft, cubic=cubic),
            dropout,
            final_norm,
        )
