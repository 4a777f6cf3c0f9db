"""CCNN grid backbone: residual blocks of separable continuous-kernel convolutions."""

from __future__ import annotations

from typing import Optional, Union

from ..nn.flexconv import SepFlexConv3d
from ..registry import BACKBONES
from .blocks import ResidualStack, check_cubic

__all__ = ["CCNN"]


@BACKBONES.register("ccnn")
class CCNN(ResidualStack):
    r"""Continuous Convolutional Neural Network on a dense 3D grid (Knigge, Romero et al.).

        h_0 = W_in x
        h_l = h_{l-1} + GELU(W_2 Dropout(GELU(SepFlexConv(BN(h_{l-1}))))),   l = 1..depth
        y   = W_out [BN](h_depth)

    ``W_in``, ``W_out`` and ``W_2`` are 1x1x1 linear layers; ``SepFlexConv`` is a
    :class:`gridify.nn.flexconv.SepFlexConv3d` (MAGNet depthwise kernel with a Gaussian mask,
    CCNN initialisation, then a pointwise linear ``W_1``). The optional final BatchNorm
    (``final_norm``) is off by default so the output scale reflects the initialisation.

    The kernels are functions of physical position: a model built (or first run) at resolution
    ``R0`` can be applied to any ``R >= 2``; every SepFlexConv re-samples its kernel at the new
    spacing (see :class:`~gridify.nn.flexconv.SepFlexConv3d`).

    Args:
        in_channels, out_channels: channels of the input and output grids.
        hidden_channels: width ``C`` of the residual stream.
        depth: number of residual blocks.
        dropout: dropout probability inside the blocks.
        kernel_size: odd taps per axis at the base resolution, or ``"global"``.
        kernel_net, kernel_hidden, kernel_layers, omega0, mask, mask_init, fft, fft_threshold,
        base_resolution, kernel_init, quadrature: forwarded to every :class:`SepFlexConv3d`.
        final_norm: apply a BatchNorm before the output projection.
        cubic: True (default) accepts only cubic grids; False any ``[B, C, Rx, Ry, Rz]`` (a per-axis
            resolution of a flat scene): every kernel is sampled per axis (``kernel_size="global"``:
            ``2 R_a - 1`` taps along axis ``a``), see :class:`SepFlexConv3d`.

    Shapes:
        input ``[B, in_channels, R, R, R]`` -> output ``[B, out_channels, R, R, R]``
        (``[B, C, Rx, Ry, Rz]`` with ``cubic=False``)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 128,
        depth: int = 3,
        dropout: float = 0.1,
        kernel_size: Union[int, str] = 9,
        kernel_net: str = "magnet",
        kernel_hidden: int = 32,
        kernel_layers: int = 3,
        omega0: float = 3.0,
        mask: bool = True,
        mask_init: float = 0.5,
        fft: Union[str, bool] = "auto",
        fft_threshold: Optional[int] = None,
        base_resolution: Optional[int] = None,
        kernel_init: str = "ccnn",
        quadrature: str = "trapezoid",
        final_norm: bool = False,
        cubic: bool = True,
    ) -> None:
        super().__init__()
        self.cubic = check_cubic("CCNN", cubic)
        self._check_widths("CCNN", in_channels, out_channels, hidden_channels, depth, dropout)

        def make_conv() -> SepFlexConv3d:
            return SepFlexConv3d(
                hidden_channels,
                hidden_channels,
                kernel_size=kernel_size,
                kernel_net=kernel_net,
                kernel_hidden=kernel_hidden,
                kernel_layers=kernel_layers,
                omega0=omega0,
                mask=mask,
                mask_init=mask_init,
                fft=fft,
                fft_threshold=fft_threshold,
                base_resolution=base_resolution,
                kernel_init=kernel_init,
                quadrature=quadrature,
                cubic=cubic,
            )

        self._build(in_channels, hidden_channels, out_channels, depth, make_conv, dropout, final_norm)
