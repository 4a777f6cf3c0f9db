"""Grid backbones: dense ``[B, C_in, R, R, R] -> [B, C_out, R, R, R]`` networks, by name.

Registered in :data:`gridify.registry.BACKBONES`:

* ``"ccnn"`` -- :class:`CCNN`, residual blocks of continuous-kernel SepFlexConv3d (default).
* ``"resnet"`` -- :class:`ResNet3d`, the same blocks with discrete depthwise kernels.
* ``"unet"`` -- :class:`UNet3d`, a 3D U-Net that handles odd grid sizes.
* ``"mrconv"`` -- :class:`MRConvNet`, the same blocks with multi-resolution reparameterizable
  depthwise kernels (:class:`gridify.nn.MRConv3d`).

All share the keyword arguments ``in_channels, out_channels, hidden_channels=128, depth=3,
dropout=0.1, kernel_size=9`` plus backbone-specific extras, and a ``kernel_l2()`` method.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..registry import BACKBONES
from .blocks import DepthwiseSeparableConv3d, GridBackbone, ResidualBlock3d
from .ccnn import CCNN
from .mrconv import MRConvNet
from .resnet import ResNet3d
from .unet import UNet3d


def build_backbone(name: str, **kwargs: Any) -> nn.Module:
    """Instantiate the backbone registered under ``name`` (``"ccnn"``, ``"resnet"``, ``"unet"``).

    Unknown names raise :class:`gridify.registry.UnknownNameError` (a ``KeyError`` and a
    ``ValueError``) listing the registered ones.
    """
    return BACKBONES.build(name, **kwargs)


__all__ = [
    "CCNN",
    "ResNet3d",
    "UNet3d",
    "MRConvNet",
    "build_backbone",
    "GridBackbone",
    "ResidualBlock3d",
    "DepthwiseSeparableConv3d",
]
