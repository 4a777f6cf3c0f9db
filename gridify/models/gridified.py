"""Gridified networks for global (classification) and dense (segmentation) prediction.

Both share one trunk, ``z = Backbone(LN_c(Gridify(P)))`` (see :meth:`GridifiedModel.trunk`); the
classifier pools it, the segmenter de-gridifies it back to the points.

Validation: the gridification validates the points once (and the segmenter its categories)
before anything that changes state runs; the backbone, the norms and the de-gridification then
run on the model's own intermediate results without re-validating
(:func:`gridify._checks.trusted_inputs`). Widths and resolutions whose parameters or grids would
exceed the allocation limit are refused at construction, before anything is allocated;
:meth:`GridifiedModel.set_resolution` is all or nothing.

The same ``forward`` is the exported one: inside :func:`gridify.nn.dense.fixed_shapes` the layers take
their fixed-shape (traceable) path on equally sized clouds ``[B, N, 3]`` (validated by the caller, the
ONNX wrappers of :mod:`gridify.export`), and :meth:`GridifiedModel.point_inputs` names what the model
takes beside the points there (:class:`PointInputs`).

Shapes:
    classifier: pos [N, 3], x [N, F], batch [N] -> [B, num_classes]; segmenter: -> [N, num_classes]
    (dense [B, N, 3] inputs, and the fixed-shape path: -> [B, num_classes], [B, N, num_classes])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from .._checks import check_choice, check_int, check_parameters, check_positive_int, fail, trusted_inputs
from ..backbones import build_backbone
from ..backbones.blocks import MaskDropout
from ..nn.connectivity import BipartiteGraph
from ..nn.gridification import Degridification, Gridification
from ..nn.inputs import category_onehot, module_dtype, parse_points
from ..nn.norm import ChannelLayerNorm, recalibrate_batchnorm
from ..nn.state import all_or_nothing
from ..registry import MODELS

__all__ = [
    "GridifiedModel",
    "GridifiedClassifier",
    "GridifiedSegmenter",
    "CLASSIFIER_PRESETS",
    "PointInputs",
    "xyz_inputs",
]

POOLS = ("mean", "max", "meanmax")


@dataclass(frozen=True)
class PointInputs:
    """What a gridified model takes beside ``points [B, N, 3]``, by name (the inputs of its exported file).

    ``features``: ``(name, width)`` of the per-point inputs ``[B, N, width]`` that make up ``x``, in order
    (``"points"``: the coordinates themselves); ``per_cloud``: ``(name, classes)`` of the int64 ``[B]``
    inputs with values in ``[0, classes)``, passed to ``forward`` by keyword (``category``); ``without``: the
    inputs a model of its kind may take that this one was built without (named in messages).
    """

    features: Tuple[Tuple[str, int], ...]
    per_cloud: Tuple[Tuple[str, int], ...] = ()
    without: Tuple[str, ...] = ()

    @property
    def names(self) -> List[str]:
        """``points``, then the other per-point inputs, then the per-cloud ones."""
        return ["points"] + [n for n, _ in self.features if n != "points"] + [n for n, _ in self.per_cloud]

    def call(self, model: nn.Module, points: Tensor, *inputs: Tensor) -> Tensor:
        """``model(points, x, **per_cloud)`` on the named inputs of :attr:`names` (``x``: the ``features``
        concatenated; None without any)."""
        named = dict(zip(self.names, (points, *inputs)))
        parts = [named[n] for n, _ in self.features]
        x = (torch.cat(parts, -1) if len(parts) > 1 else parts[0]) if parts else None
        return model(points, x, **{n: named[n] for n, _ in self.per_cloud})


def xyz_inputs(in_channels: int, per_cloud: Tuple[Tuple[str, int], ...] = (), without: Tuple[str, ...] = ()):
    """The :class:`PointInputs` of a model of normalized clouds: xyz (``in_channels=3``) or xyz + normals (6),
    the features :class:`gridify.Predictor` builds; None for any other width."""
    if in_channels == 3:
        return PointInputs((("points", 3),), per_cloud, ("normals",) + without)
    if in_channels == 6:
        return PointInputs((("points", 3), ("normals", 3)), per_cloud, without)
    return None


#: Named configurations of :class:`GridifiedClassifier` (keyword arguments; any can be overridden).
#: ``"thesis"`` is the ModelNet40 configuration of the thesis (the class defaults). ``"fast"`` cuts
#: the training FLOPs about 3x: messages and positional field 64 wide instead of 128 (the per-edge
#: matrix products shrink from 2 x 128^2 to 64 x 128 multiply-adds), k = 6 instead of 9 (about
#: 2/3 of the edges) and 5^3 instead of 9^3 grid kernels; README "Fast training" gives its
#: measured speed and ModelNet10 accuracy (the thesis configuration stays the default).
CLASSIFIER_PRESETS: Dict[str, Dict[str, Any]] = {
    "thesis": dict(k=9, hidden_channels=128, depth=3, kernel_size=9),
    "fast": dict(k=6, hidden_channels=128, depth=3, kernel_size=5, message_channels=64, pos_hidden_channels=64),
}


class GridifiedModel(nn.Module):
    r"""The trunk shared by the gridified models: gridify -> per-node LayerNorm -> grid backbone.

        z = Backbone(LN_c(Gridify(P)))

    Subclasses call ``_build_trunk`` (keyword arguments only) and add a head.

    Shapes:
        :meth:`trunk`: pos [N, 3], x [N, F], batch [N] (or dense [B, N, 3]) -> z [B, C, R, R, R]
    """

    def _build_trunk(
        self,
        *,
        in_channels: int,
        hidden_channels: int,
        resolution: Any,
        k: int,
        omega0: float,
        aggr: str,
        message: str,
        pos_embedding: str,
        backbone: str,
        depth: int,
        dropout: float,
        kernel_size: Union[int, str],
        backbone_kwargs: Optional[Dict[str, Any]],
        bounds: Tuple[Any, Any],
        outside: str,
        message_channels: Optional[int] = None,
        pos_hidden_channels: Optional[int] = None,
    ) -> None:
        self.gridify = Gridification(
            in_channels,
            hidden_channels,
            resolution,
            k=k,
            omega0=omega0,
            aggr=aggr,
            message=message,
            pos_embedding=pos_embedding,
            bounds=bounds,
            outside=outside,
            hidden_channels=message_channels,
            pos_hidden_channels=pos_hidden_channels,
        )
        self.grid_norm = ChannelLayerNorm(hidden_channels)
        kwargs = dict(backbone_kwargs or {})
        if isinstance(resolution, (tuple, list)) and len(set(resolution)) > 1:
            kwargs.setdefault("cubic", False)  # a per-axis grid: the backbone must not assume a cube
        self.backbone = build_backbone(
            backbone,
            in_channels=hidden_channels,
            out_channels=hidden_channels,
            hidden_channels=hidden_channels,
            depth=depth,
            dropout=dropout,
            kernel_size=kernel_size,
            **kwargs,
        )

    @staticmethod
    def check_sizes(where: str, hidden_channels: int, depth: int, what: str, head_parameters: int) -> None:
        """Refuse absurd widths and depths before anything is built: every block holds a few C x C
        pointwise layers and some 15 modules (~64 KiB of Python objects, counted as 16k parameters);
        ``head_parameters`` (named by ``what``) are the model's head."""
        check_positive_int(where, hidden_channels=hidden_channels, depth=depth)
        check_parameters(
            where,
            f"hidden_channels={hidden_channels}, depth={depth}",
            hidden_channels * hidden_channels * (3 * depth + 10) + 16384 * depth,
        )
        check_parameters(where, what, head_parameters)

    def trunk(
        self,
        pos: Tensor,
        x: Optional[Tensor] = None,
        batch: Optional[Tensor] = None,
        *,
        return_graph: bool = False,
        graph: Optional[BipartiteGraph] = None,
    ) -> Union[Tensor, Tuple[Tensor, BipartiteGraph]]:
        """Backbone grid features ``[B, C, R, R, R]`` of a batch of clouds (inputs validated once,
        by the gridification); with ``return_graph`` also the bilateral kNN graph. ``graph``: these
        points' graph, built ahead by ``self.gridify.graph_builder()`` (e.g. in a DataLoader worker)."""
        grid, graph = self.gridify(pos, x, batch, return_graph=True, graph=graph)
        z = self._grid_network(grid)
        return (z, graph) if return_graph else z

    def _grid_network(self, grid: Tensor) -> Tensor:
        """``Backbone(LN_c(grid))`` on a grid this model's gridification produced (not re-validated)."""
        with trusted_inputs():
            return self.backbone(self.grid_norm(grid))

    def set_resolution(self, resolution: int, calibration_batches: Optional[Iterable[Any]] = None) -> None:
        """Run at another grid resolution without retraining (resolution transfer).

        The gridification grid changes to ``resolution``; continuous-kernel backbones (``ccnn``)
        re-sample their kernels at the new spacing automatically. Discrete backbones run too,
        but their kernels then cover a different physical extent.

        Feature statistics shift with the resolution; pass ``calibration_batches`` (inputs only,
        e.g. ``[(pos, x), ...]``, no labels) to re-estimate BatchNorm statistics at the new
        resolution (:func:`gridify.nn.recalibrate_batchnorm`: no gradient, no weight changes).

        All or nothing: if anything fails (a bad resolution, a calibration batch that raises),
        the resolution and every BatchNorm statistic are left as they were.
        """
        with all_or_nothing(self):
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

    def point_inputs(self) -> Optional[PointInputs]:
        """What the model takes beside its points, by name (:class:`PointInputs`); None: nothing a deployment
        builds (a model of other features)."""
        return None


@MODELS.register("gridified_classifier")
class GridifiedClassifier(GridifiedModel):
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
        message_channels: width ``H`` of the gridification's per-edge messages (default
            ``max(hidden_channels, in_channels + 3)``); pos_hidden_channels: hidden width of its
            positional field (default ``H``). Both trade per-edge work for capacity (see :class:`Gridification`).

    Everything after ``num_classes`` is keyword-only.

    Shapes:
        pos [N, 3], x [N, F], batch [N] (or dense [B, N, 3], [B, N, F]) -> logits [B, num_classes]
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        resolution: int = 9,
        k: int = 9,
        hidden_channels: int = 128,
        backbone: str = "ccnn",
        depth: int = 3,
        dropout: float = 0.1,
        kernel_size: Union[int, str] = 9,
        omega0: float = 0.1,
        aggr: str = "mean",
        message: str = "product",
        pos_embedding: str = "rff",
        pool: str = "mean",
        backbone_kwargs: Optional[Dict[str, Any]] = None,
        bounds: Tuple[Any, Any] = (-1.0, 1.0),
        outside: str = "error",
        message_channels: Optional[int] = None,
        pos_hidden_channels: Optional[int] = None,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        check_positive_int(where, in_channels=in_channels, num_classes=num_classes, hidden_channels=hidden_channels)
        check_choice(where, "pool", pool, POOLS)
        self.check_sizes(
            where,
            hidden_channels,
            depth,
            f"num_classes={num_classes} (the head)",
            hidden_channels * (3 * hidden_channels + num_classes),
        )
        self._build_trunk(
            in_channels=in_channels,
            hidden_channels=hidden_channels,
            resolution=resolution,
            k=k,
            omega0=omega0,
            aggr=aggr,
            message=message,
            pos_embedding=pos_embedding,
            backbone=backbone,
            depth=depth,
            dropout=dropout,
            kernel_size=kernel_size,
            backbone_kwargs=backbone_kwargs,
            bounds=bounds,
            outside=outside,
            message_channels=message_channels,
            pos_hidden_channels=pos_hidden_channels,
        )
        self.pool = pool
        feat = hidden_channels * (2 if pool == "meanmax" else 1)
        self.head = nn.Sequential(
            nn.LayerNorm(feat),
            nn.Linear(feat, hidden_channels),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_channels, num_classes),
        )
        self.in_channels, self.num_classes = in_channels, num_classes

    def pool_grid(self, z: Tensor) -> Tensor:
        """Global pooling of backbone features ``[B, C, R, R, R] -> [B, C]`` (``[B, 2C]`` for ``meanmax``)."""
        channels = self.gridify.out_channels
        if not isinstance(z, Tensor) or z.dim() != 5 or z.size(1) != channels:
            fail(
                f"{type(self).__name__}.pool_grid",
                f"z must be backbone features [B, {channels}, R, R, R], got "
                f"{tuple(z.shape) if isinstance(z, Tensor) else type(z).__name__}",
            )
        flat = z.flatten(2)
        if self.pool == "mean":
            return flat.mean(-1)
        if self.pool == "max":
            return flat.amax(-1)
        return torch.cat([flat.mean(-1), flat.amax(-1)], 1)

    def point_inputs(self) -> Optional[PointInputs]:
        """``points`` (+ ``normals`` for ``in_channels=6``): ``x`` is ``[points, normals]`` (:func:`xyz_inputs`)."""
        return xyz_inputs(self.in_channels)

    def embed(
        self,
        pos: Tensor,
        x: Optional[Tensor] = None,
        batch: Optional[Tensor] = None,
        *,
        graph: Optional[BipartiteGraph] = None,
    ) -> Tensor:
        """Pooled grid features, one vector per cloud. [B, C] (or [B, 2C] for ``meanmax``)"""
        return self.pool_grid(self.trunk(pos, x, batch, graph=graph))

    def forward(
        self,
        pos: Tensor,
        x: Optional[Tensor] = None,
        batch: Optional[Tensor] = None,
        *,
        graph: Optional[BipartiteGraph] = None,
    ) -> Tensor:
        """Logits ``[B, num_classes]``; ``graph`` as in :meth:`trunk`."""
        return self.head(self.embed(pos, x, batch, graph=graph))


@MODELS.register("gridified_segmenter")
class GridifiedSegmenter(GridifiedModel):
    r"""Gridify -> dense backbone -> de-gridify -> hybrid voxel/point head -> per-point logits.

        g = Backbone(LN_c(Gridify(P))),   v_j = Degridify(g)_j      (voxel branch)
        p_j = MLP_point(x_j)                                      (point branch)
        logits_j = MLP_head([v_j, p_j, onehot(category)])

    The head fuses the de-gridified grid features with a per-point embedding of the raw point
    features and, when ``num_categories > 0``, a one-hot object category (ShapeNet-Part).
    Defaults follow the ShapeNet configuration (R = 13, k = 9, omega0 = 1.0, max aggregation,
    concat messages, dropout 0.3; 4 blocks as in the official code). Everything after
    ``num_classes`` is keyword-only.

    Shapes:
        pos [N, 3], x [N, F], batch [N], category [B] -> logits [N, num_classes]
        (dense [B, N, 3] inputs give [B, N, num_classes])
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        num_categories: int = 0,
        resolution: int = 13,
        k: int = 9,
        hidden_channels: int = 128,
        backbone: str = "ccnn",
        depth: int = 4,
        dropout: float = 0.3,
        kernel_size: Union[int, str] = 9,
        omega0: float = 1.0,
        aggr: str = "max",
        message: str = "concat",
        pos_embedding: str = "rff",
        point_channels: int = 64,
        backbone_kwargs: Optional[Dict[str, Any]] = None,
        bounds: Tuple[Any, Any] = (-1.0, 1.0),
        outside: str = "error",
    ) -> None:
        super().__init__()
        where = type(self).__name__
        check_positive_int(
            where,
            in_channels=in_channels,
            num_classes=num_classes,
            hidden_channels=hidden_channels,
            point_channels=point_channels,
        )
        check_int(where, "num_categories", num_categories, 0)
        self.check_sizes(
            where,
            hidden_channels,
            depth,
            f"num_classes={num_classes}, num_categories={num_categories}, point_channels={point_channels} (the heads)",
            (hidden_channels + point_channels + num_categories) * hidden_channels
            + hidden_channels * num_classes
            + point_channels * (in_channels + point_channels),
        )
        self._build_trunk(
            in_channels=in_channels,
            hidden_channels=hidden_channels,
            resolution=resolution,
            k=k,
            omega0=omega0,
            aggr=aggr,
            message=message,
            pos_embedding=pos_embedding,
            backbone=backbone,
            depth=depth,
            dropout=dropout,
            kernel_size=kernel_size,
            backbone_kwargs=backbone_kwargs,
            bounds=bounds,
            outside=outside,
        )
        self.degridify = Degridification(
            hidden_channels, hidden_channels, omega0=omega0, aggr=aggr, message=message, pos_embedding=pos_embedding
        )
        self.point_mlp = nn.Sequential(
            nn.Linear(in_channels, point_channels), nn.GELU(), nn.Linear(point_channels, point_channels)
        )
        fused = hidden_channels + point_channels + num_categories
        self.head = nn.Sequential(
            nn.Linear(fused, hidden_channels),
            nn.LayerNorm(hidden_channels),
            nn.GELU(),
            MaskDropout(dropout),  # per point: the mask without bernoulli_ (backbones.blocks)
            nn.Linear(hidden_channels, num_classes),
        )
        self.in_channels, self.num_classes, self.num_categories = in_channels, num_classes, num_categories

    def point_inputs(self) -> Optional[PointInputs]:
        """``points`` (+ ``normals`` for ``in_channels=6``, :func:`xyz_inputs`), + ``category`` for a model
        built with ``num_categories``."""
        if self.num_categories:
            return xyz_inputs(self.in_channels, (("category", self.num_categories),))
        return xyz_inputs(self.in_channels, without=("category",))

    def forward(
        self,
        pos: Tensor,
        x: Optional[Tensor] = None,
        batch: Optional[Tensor] = None,
        category: Optional[Tensor] = None,
        *,
        graph: Optional[BipartiteGraph] = None,
    ) -> Tensor:
        """Per-point logits; ``graph`` as in :meth:`trunk` (flat inputs)."""
        where = type(self).__name__
        pos, x, batch, dense_shape = parse_points(where, pos, x, batch, self.in_channels, module_dtype(self))
        grid, graph = self.gridify(pos, x, batch, return_graph=True, graph=graph)  # validates the points
        graph.dense_shape = dense_shape
        # the categories are checked before any layer with state (BatchNorm) runs
        onehot = category_onehot(where, category, self.num_categories, graph.num_clouds, grid.dtype, pos.device)
        z = self._grid_network(grid)
        with trusted_inputs():
            voxel = self.degridify.propagate(z, graph)  # z and graph come from this model: no re-validation
            dense = dense_shape is not None
            if dense:
                voxel = voxel.reshape(-1, voxel.size(-1))
            parts = [voxel, self.point_mlp(x.to(voxel.dtype))]
            if onehot is not None:
                parts.append(graph.per_point(onehot))
            logits = self.head(torch.cat(parts, -1))
        return logits.view(*dense_shape, -1) if dense else logits
