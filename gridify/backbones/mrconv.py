"""MRConv grid backbone: residual blocks of multi-resolution, reparameterizable depthwise convolutions."""

from __future__ import annotations

from typing import Optional, Union

from ..nn.mrconv import MRConvSeparable3d
from ..nn.reparam import reparameterize_model
from ..registry import BACKBONES
from .blocks import ResidualStack

__all__ = ["MRConvNet"]


@BACKBONES.register("mrconv")
class MRConvNet(ResidualStack):
    r"""Residual network of multi-resolution depthwise convolutions (MRConv, generalized to 3D).

        h_0 = W_in x
        h_l = h_{l-1} + GELU(W_2 Dropout(GELU(W_1 MRConv(BN(h_{l-1}))))),   l = 1..depth
        y   = W_out [BN](h_depth)

    The same blocks as :class:`gridify.backbones.CCNN` and :class:`~gridify.backbones.ResNet3d`
    with a :class:`gridify.nn.MRConv3d` as the depthwise kernel: ``num_branches`` parallel
    kernels of growing support (``kernel_size``, ``2 kernel_size - 1``, ... up to the global
    ``2R - 1``) and a fixed parameter count each (``"dilated"`` or ``"fourier"`` kernels), each
    with its own BatchNorm, summed with learnable weights ``alpha`` (learnable kernel decay).
    For inference :func:`gridify.nn.reparameterize_model` (run automatically by
    ``export_model``) folds every MRConv3d into ONE depthwise convolution; the folded network
    gives the same outputs as the unfolded one in eval mode at the resolution it was folded for.

    Args:
        in_channels, out_channels: channels of the input and output grids.
        hidden_channels: width ``C`` of the residual stream.
        depth: number of residual blocks.
        dropout: dropout probability inside the blocks.
        kernel_size: odd support (>= 3) of the first branch, the dilated kernels' taps per axis.
        num_branches, kernel_type, modes, sparse_taps, global_kernel, decay, resolution, fft,
        fft_threshold: forwarded to every :class:`~gridify.nn.MRConv3d`.
        final_norm: apply a BatchNorm before the output projection.

    Shapes:
        input ``[B, in_channels, R, R, R]`` -> output ``[B, out_channels, R, R, R]``
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 128,
        depth: int = 3,
        dropout: float = 0.1,
        kernel_size: int = 3,
        num_branches: int = 4,
        kernel_type: str = "dilated",
        modes: int = 2,
        sparse_taps: int = 0,
        global_kernel: bool = True,
        decay: float = 0.5,
        resolution: Optional[int] = None,
        fft: Union[str, bool] = "auto",
        fft_threshold: Optional[int] = None,
        final_norm: bool = False,
    ) -> None:
        super().__init__()
        self._check_widths("MRConvNet", in_channels, out_channels, hidden_channels, depth, dropout)
        self.kernel_size = kernel_size

        def make_conv() -> MRConvSeparable3d:
            return MRConvSeparable3d(
                hidden_channels,
                hidden_channels,
                num_branches=num_branches,
                kernel_size=kernel_size,
                kernel_type=kernel_type,
                modes=modes,
                sparse_taps=sparse_taps,
                global_kernel=global_kernel,
                decay=decay,
                resolution=resolution,
                fft=fft,
                fft_threshold=fft_threshold,
            )

        self._build(in_channels, hidden_channels, out_channels, depth, make_conv, dropout, final_norm)

    def reparameterize(self) -> int:
        """Fold every MRConv3d layer into one depthwise convolution (in place; eval mode).

        Same as :func:`gridify.nn.reparameterize_model` on this backbone; returns the
        number of layers folded.
        """
        return reparameterize_model(self)
