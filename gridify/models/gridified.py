"""Gridified networks for global (classification) and dense (segmentation) prediction."""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from ..backbones import build_backbone
from ..nn.gridification import Degridification, Gridification
from ..nn.norm import ChannelLayerNorm, recalibrate_batchnorm
from ..registry import MODELS


def _check_int(where: str, **values: int) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{where}: {name} must be a positive integer, got {v!r}")


class _GridifiedBase(nn.Module):
    def _build_trunk(self, in_channels: int, hidden_channels: int, resolution: int, k: int, omega0: float,
                     aggr: str, message: str, pos_embedding: str, backbone: str, depth: int, dropout: float,
                     kernel_size: Union[int, str], backbone_kwargs: Optional[Dict[str, Any]],
                     bounds: Tuple[Any, Any], outside: str) -> None:
        """gridify -> per-node LayerNorm -> backbone, shared by the classifier and the segmenter."""
        self.gridify = Gridification(in_channels, hidden_channels, resolution, k=k, omega0=omega0, aggr=aggr,
                                     message=message, pos_embedding=pos_embedding, bounds=bounds,
                                     outside=outside)
        self.grid_norm = ChannelLayerNorm(hidden_channels)
        self.backbone = build_backbone(backbone, in_channels=hidden_channels, out_channels=hidden_channels,
                                       hidden_channels=hidden_channels, depth=depth, dropout=dropout,
                                       kernel_size=kernel_size, **(backbone_kwargs or {}))

    def set_resolution(self, resolution: int, calibration_batches: Optional[Iterable[Any]] = None) -> None:
        """Run at another grid resolution without retraining (resolution transfer).

        The gridification grid changes to ``resolution``; continuous-kernel backbones (``ccnn``)
        re-sample their kernels at the new spacing automatically. Discrete backbones run too,
        but their kernels then cover a different physical extent.

        Feature statistics shift with the resolution; pass ``calibration_batches`` (inputs only,
        e.g. ``[(pos, x), ...]``, no labels) to re-estimate BatchNorm statistics at the new
        resolution (:func:`gridify.nn.recalibrate_batchnorm`: no gradient, no weight changes).
        """
        self.gridify.set_resolution(resolution)
        if calibration_batches is not None:
            recalibrate_batchnorm(self, calibration_batches)

    @property
    def resolution(self) -> int:
        return self.gridify.resolution

    def kernel_l2(self) -> Tensor:
        """Squared L2 norm of the generated grid kernels, for the kernel regularizer."""
        fn = getattr(self.backbone, "kernel_l2", None)
        return fn() if fn is not None else torch.zeros(())

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


@MODELS.register("gridified_classifier")
class GridifiedClassifier(_GridifiedBase):
    r"""Gridify -> grid backbone -> global pool -> MLP -> class logits.

        z = Backbone(LN_c(Gridify(P))),   logits = W_2 Dropout(GELU(W_1 Pool(LN(z))))

    (``LN_c``: LayerNorm over the channels of each grid node, see :class:`ChannelLayerNorm`.)

    Defaults follow the ModelNet40 configuration of the thesis (R = 9, k = 9, C = 128, 3 CCNN
    blocks, 9^3 kernels, omega0 = 0.1, mean aggregation, product messages, dropout 0.1).

    Args:
        in_channels: point features (6 for xyz + normals, 3 for xyz).
        num_classes: number of classes.
        resolution, k, omega0, aggr, message, pos_embedding: of the :class:`Gridification`.
        hidden_channels: grid channels and backbone width ``C``.
        backbone: registered backbone name (``"ccnn"``, ``"resnet"``, ``"unet"``, ...).
        depth, dropout, kernel_size: of the backbone.
        pool: ``"mean"``, ``"max"`` or ``"meanmax"`` (concatenation) over the grid.
        backbone_kwargs: extra keyword arguments for the backbone (e.g. ``kernel_net``).
        bounds, outside: grid box and the handling of points outside it (see :class:`Gridification`).

    Shapes:
        pos [N, 3], x [N, F], batch [N] (or dense [B, N, 3], [B, N, F]) -> logits [B, num_classes]
    """

    def __init__(self, in_channels: int, num_classes: int, resolution: int = 9, k: int = 9,
                 hidden_channels: int = 128, backbone: str = "ccnn", depth: int = 3, dropout: float = 0.1,
                 kernel_size: Union[int, str] = 9, omega0: float = 0.1, aggr: str = "mean",
                 message: str = "product", pos_embedding: str = "rff", pool: str = "mean",
                 backbone_kwargs: Optional[Dict[str, Any]] = None,
                 bounds: Tuple[Any, Any] = (-1.0, 1.0), outside: str = "error") -> None:
        super().__init__()
        _check_int(type(self).__name__, in_channels=in_channels, num_classes=num_classes,
                   hidden_channels=hidden_channels)
        if pool not in ("mean", "max", "meanmax"):
            raise ValueError(f"{type(self).__name__}: pool must be 'mean', 'max' or 'meanmax', got {pool!r}")
        self._build_trunk(in_channels, hidden_channels, resolution, k, omega0, aggr, message, pos_embedding,
                          backbone, depth, dropout, kernel_size, backbone_kwargs, bounds, outside)
        self.pool = pool
        feat = hidden_channels * (2 if pool == "meanmax" else 1)
        self.head = nn.Sequential(nn.LayerNorm(feat), nn.Linear(feat, hidden_channels), nn.GELU(),
                                  nn.Dropout(dropout), nn.Linear(hidden_channels, num_classes))
        self.in_channels, self.num_classes = in_channels, num_classes

    def embed(self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None) -> Tensor:
        """Pooled grid features, one vector per cloud. [B, C] (or [B, 2C] for ``meanmax``)"""
        z = self.backbone(self.grid_norm(self.gridify(pos, x, batch)))
        flat = z.flatten(2)
        if self.pool == "mean":
            return flat.mean(-1)
        if self.pool == "max":
            return flat.amax(-1)
        return torch.cat([flat.mean(-1), flat.amax(-1)], 1)

    def forward(self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None) -> Tensor:
        return self.head(self.embed(pos, x, batch))


@MODELS.register("gridified_segmenter")
class GridifiedSegmenter(_GridifiedBase):
    r"""Gridify -> dense backbone -> de-gridify -> hybrid voxel/point head -> per-point logits.

        g = Backbone(LN_c(Gridify(P))),   v_j = Degridify(g)_j      (voxel branch)
        p_j = MLP_point(x_j)                                      (point branch)
        logits_j = MLP_head([v_j, p_j, onehot(category)])

    The head fuses the de-gridified grid features with a per-point embedding of the raw point
    features and, when ``num_categories > 0``, a one-hot object category (ShapeNet-Part).
    Defaults follow the ShapeNet configuration (R = 13, k = 9, omega0 = 1.0, max aggregation,
    concat messages, dropout 0.3; 4 blocks as in the official code).

    Shapes:
        pos [N, 3], x [N, F], batch [N], category [B] -> logits [N, num_classes]
        (dense [B, N, 3] inputs give [B, N, num_classes])
    """

    def __init__(self, in_channels: int, num_classes: int, num_categories: int = 0, resolution: int = 13,
                 k: int = 9, hidden_channels: int = 128, backbone: str = "ccnn", depth: int = 4,
                 dropout: float = 0.3, kernel_size: Union[int, str] = 9, omega0: float = 1.0,
                 aggr: str = "max", message: str = "concat", pos_embedding: str = "rff",
                 point_channels: int = 64, backbone_kwargs: Optional[Dict[str, Any]] = None,
                 bounds: Tuple[Any, Any] = (-1.0, 1.0), outside: str = "error") -> None:
        super().__init__()
        where = type(self).__name__
        _check_int(where, in_channels=in_channels, num_classes=num_classes, hidden_channels=hidden_channels,
                   point_channels=point_channels)
        if isinstance(num_categories, bool) or not isinstance(num_categories, int) or num_categories < 0:
            raise ValueError(f"{where}: num_categories must be a non-negative integer, got {num_categories!r}")
        self._build_trunk(in_channels, hidden_channels, resolution, k, omega0, aggr, message, pos_embedding,
                          backbone, depth, dropout, kernel_size, backbone_kwargs, bounds, outside)
        self.degridify = Degridification(hidden_channels, hidden_channels, omega0=omega0, aggr=aggr,
                                         message=message, pos_embedding=pos_embedding)
        self.point_mlp = nn.Sequential(nn.Linear(in_channels, point_channels), nn.GELU(),
                                       nn.Linear(point_channels, point_channels))
        fused = hidden_channels + point_channels + num_categories
        self.head = nn.Sequential(nn.Linear(fused, hidden_channels), nn.LayerNorm(hidden_channels), nn.GELU(),
                                  nn.Dropout(dropout), nn.Linear(hidden_channels, num_classes))
        self.in_channels, self.num_classes, self.num_categories = in_channels, num_classes, num_categories

    def forward(self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None,
                category: Optional[Tensor] = None) -> Tensor:
        where = type(self).__name__
        grid, graph = self.gridify(pos, x, batch, return_graph=True)
        voxel = self.degridify(self.backbone(self.grid_norm(grid)), graph)
        dense = graph.dense_shape is not None
        if dense:
            voxel = voxel.reshape(-1, voxel.size(-1))
        feats = pos.reshape(-1, 3) if x is None else x.reshape(-1, x.size(-1))
        parts = [voxel, self.point_mlp(feats.to(voxel.dtype))]
        if self.num_categories:
            if category is None:
                raise ValueError(f"{where}: built with num_categories={self.num_categories}, so category "
                                 f"([B] object category per cloud) is required")
            if not isinstance(category, Tensor) or category.dim() != 1 or category.numel() != graph.num_clouds:
                raise ValueError(f"{where}: category must be a 1-D tensor with one entry per cloud "
                                 f"({graph.num_clouds}), got {getattr(category, 'shape', type(category))}")
            if category.is_floating_point() or int(category.min()) < 0 or int(category.max()) >= self.num_categories:
                raise ValueError(f"{where}: category must hold integers in [0, {self.num_categories})")
            onehot = nn.functional.one_hot(category.long(), self.num_categories).to(voxel.dtype)
            parts.append(onehot[graph.batch])
        elif category is not None:
            raise ValueError(f"{where}: got category but the model was built with num_categories=0")
        logits = self.head(torch.cat(parts, -1))
        return logits.view(*graph.dense_shape, -1) if dense else logits
