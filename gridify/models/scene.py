"""Gridified semantic segmentation of scenes (rooms, LiDAR scans) on a per-axis grid.

A scene crop is flat: a cube of ``R^3`` nodes would waste most of them, so the grid has
``(Rx, Ry, Rz)`` nodes (default ``32 x 32 x 8``). Every cloud ``b`` of the batch is centred on
its bounding-box centre ``c_b = (min_b + max_b) / 2`` and mapped into the grid box ``[-1, 1]^3``:

    u_j = clamp((p_j - c_b) / s_b, -1, 1),
    s_b = extent / 2                      (a fixed metric box, ``extent = (ex, ey, ez)`` metres)
    s_b = (max_b - min_b) / 2 per axis    (``extent=None``: each cloud's own box; an axis of
                                           (almost) zero extent gets ``s = 1``, so a flat or
                                           single-point cloud gives finite ``u = 0`` there)

With ``box_trim = t > 0`` the box leaves out ``m = floor(t n)`` of a cloud's ``n`` points at each end of
every axis: ``min_b`` / ``max_b`` are the ``(m + 1)``-th smallest / largest coordinate (a LiDAR crop's
stray returns metres below the ground would otherwise spend the few z nodes on empty space); the points
left out are clamped onto the box like those beyond a fixed ``extent``.

Each cloud's own box hides its metric size (a crop of 12 m and one of 100 m both fill ``[-1, 1]``);
with ``scale_input=True`` the log of the half extents in metres joins the inputs of every point,

    a_j = log(s_b / 10 m)                 (3 values, the same for every point of cloud ``b``)

so the gridification and the point branch take ``[u, x, a]`` instead of ``[u, x]``.

Points beyond a fixed ``extent`` are clamped onto the box for the graph (they connect to the
nearest boundary nodes and take their labels from there). Then, as :class:`GridifiedSegmenter`:

    g = Backbone(LN_c(Gridify([u, x])))        v_j = Degridify(g)_j          (voxel branch)
    p_j = MLP_point([u_j, x_j])                                               (point branch)
    logits_j = W_2 Dropout(GELU(LN(W_1 [v_j, p_j])))

with ``x`` whatever per-point features the data has (colour, intensity, normals, height; may be
empty: ``in_channels=0``).

Validation: the points, features and batch are checked once at :meth:`GridifiedSceneSegmenter.forward` (types, shapes,
NaN/Inf naming the cloud and row), the gridification then checks the batch structure only.

On the fixed-shape path (:func:`gridify.nn.dense.fixed_shapes`: the exported file) the same ``forward`` maps
equally sized clouds ``[B, N, 3]`` with :func:`scene_box_dense_scaled` (the same arithmetic, traceable) and
checks nothing (its caller did).

Shapes:
    pos [N, 3] metres, x [N, F], batch [N] -> logits [N, num_classes]
    (dense pos [B, N, 3], x [B, N, F], and the fixed-shape path -> [B, N, num_classes])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .._checks import (
    check_batch,
    check_finite,
    check_number,
    check_points,
    check_positive_int,
    fail,
    is_real,
    trusted_inputs,
)
from ..backbones.blocks import MaskDropout
from ..nn.connectivity import BipartiteGraph, GraphBuilder
from ..nn.dense import fixed_shape_settings
from ..nn.gridification import Degridification
from ..nn.inputs import module_dtype, parse_points
from ..ops.grid import check_resolution, resolution_value
from ..registry import MODELS
from .gridified import GridifiedModel, PointInputs

__all__ = [
    "GridifiedSceneSegmenter",
    "SceneGraphBuilder",
    "scale_features",
    "scene_box",
    "scene_box_coordinates",
    "scene_box_dense",
    "scene_box_dense_scaled",
]

#: Backbones that run on a per-axis (non-cubic) grid.
PER_AXIS_BACKBONES = ("ccnn", "resnet", "unet")

#: A cloud's axis counts as flat (``s = 1``) when its half extent is at most this fraction of
#: ``1 + |c|`` (the centre's magnitude: float32 noise of coordinates far from the origin).
FLAT_TOLERANCE = 1e-5


#: the fixed ``extent`` a scene segmenter takes, metres (both ends included): a crop's box in float32 from a
#: micrometre to a thousand kilometres. Beyond it an axis collapses: 1e-300 m is 0 in float32 (a division by zero),
#: 1e300 m infinite (every point at the box centre).
EXTENT_RANGE = (1e-6, 1e6)


def check_extent(where: str, extent: Any) -> Optional[Tuple[float, float, float]]:
    """``extent``: None, one positive finite number of metres, or one per axis ``(ex, ey, ez)``, each within
    :data:`EXTENT_RANGE`; else a ValueError naming ``where``, the axis, the value and the range."""
    if extent is None:
        return None
    values = tuple(extent) if isinstance(extent, (tuple, list)) else (extent,) * 3
    if len(values) != 3:
        fail(
            where,
            f"extent must be None, a positive number of metres or one per axis (ex, ey, ez), got "
            f"{len(values)} values {values!r}",
        )
    for a, v in enumerate(values):
        if isinstance(v, bool) or not is_real(v):
            fail(where, f"extent[{a}] ({'xyz'[a]}) must be a positive finite number of metres, got {v!r}")
        check_number(where, f"extent[{a}] ({'xyz'[a]})", v)
        lo, hi = EXTENT_RANGE
        if not lo <= float(v) <= hi:
            fail(
                where,
                f"extent[{a}] ({'xyz'[a]}) must be a number of metres in [{lo:g}, {hi:g}] (a crop's box in float32; "
                f"beyond it the axis collapses), got {v!r}",
            )
    return tuple(float(v) for v in values)  # type: ignore[return-value]


def _box_scale(lo: Tensor, hi: Tensor, extent: Optional[Sequence[float]]) -> Tuple[Tensor, Tensor]:
    """``(c, s)`` of the module docstring from every cloud's bounds ``lo, hi [..., 3]`` (the arithmetic
    that :func:`scene_box_coordinates` and :func:`scene_box_dense` share)."""
    centre = (lo + hi) / 2
    if extent is None:
        half = (hi - lo) / 2
        return centre, torch.where(half > FLAT_TOLERANCE * (1 + centre.abs()), half, torch.ones_like(half))
    return centre, torch.tensor(extent, dtype=lo.dtype, device=lo.device).expand_as(lo) / 2


def trimmed_count(n: Any, trim: float) -> Any:
    """``m = floor(trim * n)``: the points of a cloud of ``n`` left beyond each end of an axis of its box
    (``trim`` in millionths, integer arithmetic: a symbolic ``n`` stays symbolic in an exported graph)."""
    return n * round(trim * 1_000_000) // 1_000_000


def _trimmed_bounds(p: Tensor, batch: Tensor, num_clouds: int, trim: float) -> Tuple[Tensor, Tensor]:
    """Every cloud's ``(m + 1)``-th smallest and largest coordinate per axis, ``m`` = :func:`trimmed_count`."""
    counts = torch.bincount(batch, minlength=num_clouds).tolist()
    lo, hi = [], []
    for cloud in torch.split(p, counts):
        k = trimmed_count(cloud.size(0), trim) + 1
        lo.append(cloud.kthvalue(k, 0).values)
        hi.append(cloud.kthvalue(cloud.size(0) + 1 - k, 0).values)
    return torch.stack(lo), torch.stack(hi)


def scene_box_coordinates(
    pos: Tensor, batch: Tensor, num_clouds: int, extent: Optional[Sequence[float]] = None, trim: float = 0.0
) -> Tensor:
    """The grid-box coordinates ``u [N, 3]`` in ``[-1, 1]^3`` of metric points (module docstring),
    without validation: finite ``pos [N, 3]``, sorted ``batch [N]`` of ``num_clouds`` non-empty clouds."""
    return scene_box(pos, batch, num_clouds, extent, trim)[0]


def scene_box(
    pos: Tensor, batch: Tensor, num_clouds: int, extent: Optional[Sequence[float]] = None, trim: float = 0.0
) -> Tuple[Tensor, Tensor]:
    """``(u [N, 3], s [num_clouds, 3])``: :func:`scene_box_coordinates` and every cloud's half extents
    ``s_b`` in metres (module docstring), without validation."""
    p = pos.detach()
    if trim > 0:
        lo, hi = _trimmed_bounds(p, batch, num_clouds, trim)
    else:
        index = batch[:, None].expand(-1, 3)
        lo = p.new_full((num_clouds, 3), float("inf")).scatter_reduce_(0, index, p, "amin")
        hi = p.new_full((num_clouds, 3), float("-inf")).scatter_reduce_(0, index, p, "amax")
    centre, half = _box_scale(lo, hi, extent)
    return ((pos - centre[batch]) / half[batch]).clamp(-1.0, 1.0), half


def scene_box_dense(points: Tensor, extent: Optional[Sequence[float]], trim: float = 0.0) -> Tensor:
    """:func:`scene_box_dense_scaled` without the half extents (the grid-box coordinates only)."""
    return scene_box_dense_scaled(points, extent, trim)[0]


def scene_box_dense_scaled(
    points: Tensor, extent: Optional[Sequence[float]], trim: float = 0.0
) -> Tuple[Tensor, Tensor]:
    """:func:`scene_box_coordinates` of equally sized clouds ``points [B, N, 3]`` (the same float
    arithmetic, traceable: what the exported scene segmenter computes): every cloud centred on its
    bounding-box centre, divided by half the fixed ``extent`` (or its own half extent, 1 on a flat
    axis), clamped into ``[-1, 1]``. No validation (finite points, ``N >= 1``).

    Shapes:
        points ``[B, N, 3]`` metres -> ``[B, N, 3]`` in ``[-1, 1]^3``, half extents ``[B, 1, 3]`` metres
    """
    if trim > 0:  # the (m + 1)-th smallest and largest, as scene_box_coordinates (TopK in a traced graph)
        k = trimmed_count(points.size(1), trim) + 1
        lo = points.topk(k, dim=1, largest=False).values[:, k - 1 : k]
        hi = points.topk(k, dim=1, largest=True).values[:, k - 1 : k]
    else:
        lo, hi = points.amin(1, keepdim=True), points.amax(1, keepdim=True)
    centre, half = _box_scale(lo, hi, extent)
    return ((points - centre) / half).clamp(-1.0, 1.0), half


#: the metric size ``a = log(s / SCALE_REFERENCE)`` of ``scale_input`` is measured against (metres)
SCALE_REFERENCE = 10.0


def scale_features(half: Tensor) -> Tensor:
    """``a = log(s / 10 m)`` of half extents ``s`` in metres (module docstring; any shape)."""
    return torch.log(half / SCALE_REFERENCE)


def _check_box_args(where: str, box_trim: Any, scale_input: Any) -> Tuple[float, bool]:
    """``(box_trim, scale_input)`` of :class:`GridifiedSceneSegmenter`, checked."""
    box_trim = check_number(where, "box_trim", box_trim, 0.0, strict=False)
    if box_trim >= 0.5:
        fail(
            where,
            f"box_trim must be in [0, 0.5) (the share of a cloud's points beyond each end of an axis), got {box_trim}",
        )
    if not isinstance(scale_input, bool):
        fail(where, f"scale_input must be True or False, got {scale_input!r}")
    return float(box_trim), scale_input


@dataclass(frozen=True)
class SceneGraphBuilder:
    """The graph of a :class:`GridifiedSceneSegmenter`, built away from the model (a DataLoader
    worker): maps metric points into the grid box as the model does, then builds the bilateral
    kNN graph; hand it over as ``model(pos, x, batch, graph=graph)``.

    Shapes:
        pos [N, 3] metres, batch [N] -> BipartiteGraph with edge_index [2, E]
    """

    builder: GraphBuilder
    extent: Optional[Tuple[float, float, float]] = None
    trim: float = 0.0

    def __call__(self, pos: Tensor, batch: Optional[Tensor] = None) -> BipartiteGraph:
        where = "SceneGraphBuilder"
        pos = check_points(where, "pos", pos)
        batch, num_clouds, _ = check_batch(where, "batch", batch, pos.size(0), device=pos.device)
        check_finite(where, "pos", pos, batch)
        return self.builder(scene_box_coordinates(pos, batch, num_clouds, self.extent, self.trim), batch, num_clouds)


@MODELS.register("scene_segmenter")
class GridifiedSceneSegmenter(GridifiedModel):
    r"""Per-point semantic segmentation of metric scene crops on a per-axis grid.

        u = clamp((p - c_b) / s_b, -1, 1)                     (centre + box, module docstring)
        g = Backbone(LN_c(Gridify([u, x]))),   v_j = Degridify(g)_j,   p_j = MLP_point([u_j, x_j])
        logits_j = W_2 Dropout(GELU(LN(W_1 [v_j, p_j])))

    Args:
        in_channels: per-point features ``F`` in ``x`` (0: coordinates only, ``x`` may be None).
        num_classes: semantic classes.
        resolution: grid nodes per axis, ``(Rx, Ry, Rz)`` or an int ``R`` (a cube); a per-axis
            grid needs ``backbone="unet"``, ``"resnet"`` or ``"ccnn"`` (``kernel_size="global"``:
            every node sees the whole grid).
        extent: ``None`` (each cloud's own bounding box, per axis) or the metric size of a fixed
            box ``(ex, ey, ez)`` (or one number), centred on each cloud's bounding-box centre.
        k: neighbours in each direction of the bilateral kNN.
        hidden_channels: grid channels and backbone width ``C``.
        backbone, depth, kernel_size, dropout: of the grid backbone (``"unet"``: ``depth`` levels).
        point_channels: width of the point branch.
        omega0, aggr, message, pos_embedding: of the (de-)gridification (see :class:`Gridification`).
        message_channels, pos_hidden_channels: per-edge widths of the gridification (default:
            ``hidden_channels`` wide messages; narrower is cheaper per edge).
        backbone_kwargs: extra keyword arguments for the backbone.
        box_trim: the share ``t`` in ``[0, 0.5)`` of a cloud's points left beyond each end of every
            axis of its box, clamped onto it (module docstring; 0: the bounding box; read in millionths).
        scale_input: give every point its cloud's box size ``a = log(s_b / 10 m)`` as 3 more inputs
            (module docstring): each crop's own box otherwise hides how many metres it spans.

    Defaults are sized for CPU training on 16k-65k point crops (8192 nodes, C = 64, k = 6).

    Shapes:
        pos [N, 3] metres, x [N, F], batch [N] -> logits [N, num_classes]
        (dense pos [B, N, 3], x [B, N, F] -> [B, N, num_classes])
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        resolution: Union[int, Sequence[int]] = (32, 32, 8),
        extent: Optional[Union[float, Sequence[float]]] = None,
        k: int = 6,
        hidden_channels: int = 64,
        backbone: str = "unet",
        depth: int = 3,
        kernel_size: Union[int, str] = 3,
        point_channels: int = 32,
        dropout: float = 0.1,
        omega0: float = 1.0,
        aggr: str = "max",
        message: str = "concat",
        pos_embedding: str = "rff",
        message_channels: Optional[int] = 32,
        pos_hidden_channels: Optional[int] = 32,
        backbone_kwargs: Optional[Dict[str, Any]] = None,
        box_trim: float = 0.0,
        scale_input: bool = False,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        shape, self.extent = self._check_args(
            where, in_channels, num_classes, resolution, extent, backbone, hidden_channels, depth, point_channels
        )
        #: the share of a cloud's points left beyond each end of every axis of its own box (clamped onto it);
        #: whether every point gets its cloud's box size log(s_b / 10 m) as 3 more inputs
        self.box_trim, self.scale_input = _check_box_args(where, box_trim, scale_input)
        inputs = in_channels + 3 + (3 if scale_input else 0)
        kwargs = dict(backbone_kwargs or {})
        if backbone in PER_AXIS_BACKBONES:
            kwargs.setdefault("cubic", False)
        self._build_trunk(
            in_channels=inputs,
            hidden_channels=hidden_channels,
            resolution=resolution_value(shape),
            k=k,
            omega0=omega0,
            aggr=aggr,
            message=message,
            pos_embedding=pos_embedding,
            backbone=backbone,
            depth=depth,
            dropout=dropout,
            kernel_size=kernel_size,
            backbone_kwargs=kwargs,
            bounds=(-1.0, 1.0),
            outside="error",
            message_channels=message_channels,
            pos_hidden_channels=pos_hidden_channels,
        )
        self.gridify.fixed_search = "bucketed"  # thousands of nodes over crops of thousands of points
        self.degridify = Degridification(
            hidden_channels,
            hidden_channels,
            omega0=omega0,
            aggr=aggr,
            message=message,
            pos_embedding=pos_embedding,
            hidden_channels=message_channels,
            pos_hidden_channels=pos_hidden_channels,
        )
        self.point_mlp = nn.Sequential(
            nn.Linear(inputs, point_channels), nn.GELU(), nn.Linear(point_channels, point_channels)
        )
        self.head = nn.Sequential(
            nn.Linear(hidden_channels + point_channels, hidden_channels),
            nn.LayerNorm(hidden_channels),
            nn.GELU(),
            MaskDropout(dropout),  # per point: the mask without bernoulli_ (backbones.blocks)
            nn.Linear(hidden_channels, num_classes),
        )
        self.in_channels, self.num_classes = in_channels, num_classes

    def _check_args(
        self,
        where: str,
        in_channels: Any,
        num_classes: Any,
        resolution: Any,
        extent: Any,
        backbone: Any,
        hidden_channels: Any,
        depth: Any,
        point_channels: Any,
    ) -> Tuple[Tuple[int, int, int], Optional[Tuple[float, float, float]]]:
        """``(grid shape, extent)``: :meth:`__init__`'s arguments checked before anything is built."""
        if isinstance(in_channels, bool) or not isinstance(in_channels, int) or in_channels < 0:
            fail(where, f"in_channels must be a non-negative integer, got {in_channels!r}")
        check_positive_int(
            where, num_classes=num_classes, hidden_channels=hidden_channels, point_channels=point_channels
        )
        shape = check_resolution(where, resolution)
        extent = check_extent(where, extent)
        if not isinstance(backbone, str):
            fail(where, f"backbone must be a registered backbone name, got {backbone!r}")
        if len(set(shape)) > 1 and backbone not in PER_AXIS_BACKBONES:
            fail(
                where,
                f"resolution={shape} is not cubic; backbone={backbone!r} runs only on cubic grids "
                f"(an int resolution): use backbone='ccnn', 'resnet' or 'unet' for a per-axis resolution",
            )
        self.check_sizes(
            where,
            hidden_channels,
            depth,
            f"num_classes={num_classes}, point_channels={point_channels} (the heads)",
            (hidden_channels + point_channels) * hidden_channels
            + hidden_channels * num_classes
            + point_channels * (in_channels + 6 + point_channels),
        )
        return shape, extent

    def adapt_init_weights(self, payload: Dict[str, Any]) -> Dict[str, Any]:
        """Fine-tuning (``init_weights``) into this model with ``scale_input`` from a checkpoint of the same model
        without it: the layers that read the point inputs get zero weights on the 3 new columns, so training starts
        from exactly the checkpoint's function. Any other payload is returned as it is (checked by the caller)."""
        kwargs = dict(payload.get("model_kwargs") or {})
        state = payload.get("state_dict")
        if not self.scale_input or kwargs.get("scale_input", False) or not isinstance(state, dict):
            return payload
        wide = self.in_channels + 6
        state = dict(state)
        for name, module in self.named_modules():
            w = state.get(f"{name}.weight")
            if isinstance(module, nn.Linear) and module.in_features == wide and isinstance(w, Tensor):
                if w.dim() == 2 and w.shape == (module.out_features, wide - 3):
                    state[f"{name}.weight"] = torch.cat([w, w.new_zeros(w.size(0), 3)], 1)
        return {**payload, "state_dict": state, "model_kwargs": {**kwargs, "scale_input": True}}

    def graph_builder(self) -> SceneGraphBuilder:
        """A picklable builder of this model's graph from metric points (see :class:`SceneGraphBuilder`)."""
        return SceneGraphBuilder(self.gridify.graph_builder(), self.extent, self.box_trim)

    def box_coordinates(self, pos: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        """The grid-box coordinates ``u [N, 3]`` the model uses for metric ``pos [N, 3]`` (validated)."""
        where = f"{type(self).__name__}.box_coordinates"
        pos, _, batch, _ = parse_points(where, pos, None, batch, None, module_dtype(self))
        batch, num_clouds, _ = check_batch(where, "batch", batch, pos.size(0), device=pos.device)
        check_finite(where, "pos", pos, batch)
        return scene_box_coordinates(pos, batch, num_clouds, self.extent, self.box_trim)

    def point_inputs(self) -> PointInputs:
        """``points`` (metres) and, for ``in_channels > 0``, ``features``: ``x`` is the features alone (the
        model adds the grid-box coordinates itself)."""
        if self.in_channels:
            return PointInputs((("features", self.in_channels),))
        return PointInputs((), without=("features",))

    def _box_inputs(
        self, where: str, pos: Tensor, x: Tensor, batch: Optional[Tensor]
    ) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """``(u, [u, x, a], batch)`` (module docstring) of flat points ``pos [N, 3]``, ``x [N, F]``, checked here
        (the batch, NaN / Inf), or on the fixed-shape path of clouds ``[B, N, 3]``, ``[B, N, F]`` (checked by
        the caller, :func:`scene_box_dense_scaled`). ``[u, x, a]`` drops an empty ``x``."""
        if fixed_shape_settings() is not None:
            u, half = scene_box_dense_scaled(pos, self.extent, self.box_trim)
            scale = scale_features(half).expand(-1, pos.size(1), -1) if self.scale_input else None
        else:
            batch, num_clouds, _ = check_batch(where, "batch", batch, pos.size(0), device=pos.device)
            check_finite(where, "pos", pos, batch)
            check_finite(where, "x", x, batch)
            u, half = scene_box(pos, batch, num_clouds, self.extent, self.box_trim)
            scale = scale_features(half)[batch] if self.scale_input else None
        parts = [u] + ([x] if x.size(-1) else []) + ([scale] if scale is not None else [])
        return u, (torch.cat(parts, -1) if len(parts) > 1 else u), batch

    def forward(
        self,
        pos: Tensor,
        x: Optional[Tensor] = None,
        batch: Optional[Tensor] = None,
        *,
        graph: Optional[BipartiteGraph] = None,
    ) -> Tensor:
        """Per-point logits of metric points; ``graph``: these points' graph from :meth:`graph_builder`."""
        where = type(self).__name__
        if x is None and isinstance(pos, Tensor):
            x = pos.new_zeros(pos.shape[:-1] + (0,))
        pos, x, batch, dense_shape = parse_points(where, pos, x, batch, self.in_channels, module_dtype(self))
        u, feats, batch = self._box_inputs(where, pos, x, batch)
        if graph is None:
            with trusted_inputs():  # checked above; the gridification checks the batch structure
                grid, graph = self.gridify(u, feats, batch, return_graph=True)
        else:  # a graph from outside is checked against these points
            grid, graph = self.gridify(u, feats, batch, return_graph=True, graph=graph)
        with trusted_inputs():
            z = self._grid_network(grid)
            voxel = self.degridify.propagate(z, graph)  # z and graph come from this model: no re-validation
            logits = self.head(torch.cat([voxel, self.point_mlp(feats.to(voxel.dtype))], -1))
        return logits.view(*dense_shape, -1) if dense_shape is not None else logits
