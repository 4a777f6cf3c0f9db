"""The exportable forms of the gridified models: :class:`OnnxClassifier` and :class:`OnnxSegmenter`.

Each wraps a trained model (shared weights) and runs it on fixed-shape tensors, with the layers'
traceable forms of :mod:`gridify.nn.dense` (the bilateral kNN graph by brute force or bucketed
search, the (de-)gridification over it) and :func:`gridify.models.scene.scene_box_dense` for a
scene crop; the backbone, pooling, point branch and head are the model's own modules. With
``normalize`` the graph first centres every cloud and scales it into the unit sphere,

    p' = (p - mean(p)) / max_j |p_j - mean(p)|

or, with ``normalize="cube"``, into the cube ``[-1, 1]^3``: ``p' = (p - c) / max_{j,d} |p_jd - c_d|``,
``c = (min_j p_j + max_j p_j) / 2`` (in float64, as :func:`gridify.api.normalize_cloud`). Called eagerly, the wrappers check their
inputs; traced (``torch.onnx.export`` under :func:`gridify.export.tracing.tracing_mode`) they do not.

Shapes:
    OnnxClassifier: points ``[B, N, 3]`` (+ normals ``[B, N, 3]`` for 6-feature models) -> logits ``[B, K]``.
    OnnxSegmenter: points ``[B, N, 3]`` (+ features / normals ``[B, N, F]``, category ``[B]``) -> logits ``[B, N, K]``.
"""

from __future__ import annotations

from typing import Any, List, NoReturn, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from .._checks import (
    check_alloc,
    check_finite,
    check_float,
    check_int,
    check_tensor,
    element_size,
    fail,
    trusted_inputs,
    validating,
)
from ..checkpoint import model_task
from ..models import GridifiedClassifier, GridifiedSceneSegmenter, GridifiedSegmenter
from ..models.scene import scale_features, scene_box_dense, scene_box_dense_scaled
from ..nn.dense import (
    NODE_CHUNK,
    SEARCHES,
    check_dense_clouds,
    check_dense_size,
    degridify_dense_graph,
    dense_bilateral_knn_unchecked,
    dense_grid_knn_unchecked,
    grid_axes,
    grid_tables,
    gridify_dense_graph,
    gridify_dense_unchecked,
)
from ..transforms import NORMALIZATIONS, check_up_axis, normalization_name, up_axis_rotation

__all__ = [
    "ExportError",
    "OnnxClassifier",
    "OnnxSegmenter",
    "check_exportable",
    "fail_export",
    "normalize_points",
]


class ExportError(RuntimeError):
    """A model (or an export option) that this exporter cannot handle; the message says what."""


def check_exportable(model: Any, where: str = "export_onnx") -> None:
    """Raise :class:`ExportError` naming what makes ``model`` unexportable (None when it is fine)."""
    if not isinstance(model, (GridifiedClassifier, GridifiedSegmenter, GridifiedSceneSegmenter)):
        fail_export(
            where,
            f"{type(model).__name__} is not exportable: the gridified classifier, part segmenter and "
            f"scene segmenter (gridified_classifier, gridified_segmenter, scene_segmenter) have an ONNX "
            f"route",
        )
    if not isinstance(model, GridifiedSceneSegmenter) and model.in_channels not in (3, 6):
        fail_export(
            where,
            f"the model takes {model.in_channels} features per point; only xyz (3) and xyz + "
            f"normals (6) models are exportable (the features gridify.load's Predictor builds)",
        )
    if model.gridify.max_in_degree is not None:
        fail_export(
            where,
            f"the gridification caps the in-degree (max_in_degree={model.gridify.max_in_degree}); "
            f"only the uncapped bilateral kNN graph is exportable",
        )
    p = next(model.parameters())
    if p.dtype != torch.float32 or p.device.type != "cpu":
        fail_export(
            where,
            f"the model's weights are {p.dtype} on {p.device}; the export traces float32 models on "
            f"the CPU (model.float().cpu())",
        )


def check_wrapped(where: str, model: Any, classifier: bool) -> None:
    """Refuse (:class:`ExportError`) a model of the wrong task for a wrapper: :class:`OnnxClassifier` (``classifier``)
    takes a classifier, :class:`OnnxSegmenter` a part or scene segmenter; the message names the model's task and the
    wrapper that takes it, before anything of the wrapper is built (a scene segmenter's per-axis grid ended in a
    TypeError about a tuple)."""
    if isinstance(model, GridifiedClassifier) == classifier:
        return
    right = "OnnxSegmenter" if classifier else "OnnxClassifier"
    takes = "a classifier (GridifiedClassifier)" if classifier else "a part or scene segmenter"
    fail_export(
        where,
        f"the model is a {type(model).__name__}, a {model_task(model)} model, but {where} wraps {takes}: use "
        f"{right}(model) (or export_onnx, which picks the wrapper by the model)",
    )


def fail_export(where: str, msg: str) -> NoReturn:
    raise ExportError(f"{where}: {msg}")


def normalize_points(points: Tensor, mode: str = "sphere") -> Tensor:
    """Centre every cloud of ``points [B, N, 3]`` and scale it: ``p' = (p - c) / s``, as the named
    normalization ``mode`` does it (:data:`gridify.transforms.NORMALIZATIONS`): ``"sphere"``:
    ``c = mean_j p_j``, ``s = max_j |p_j - c|`` (into the unit sphere); ``"cube"``: ``c`` the
    bounding-box centre ``(min_j p_j + max_j p_j) / 2``, ``s = max_{j,d} |p_jd - c_d|`` (into ``[-1, 1]^3``).

    Computed in float64 (as :func:`gridify.api.normalize_cloud`) and returned in ``points``' dtype. A
    cloud of identical points (``s = 0``) maps to the origin. ``points``: a finite floating tensor,
    ``B, N >= 1``.
    """
    if validating():
        check_dense_clouds("normalize_points", points, "points")
        if not (isinstance(mode, str) and mode in NORMALIZATIONS):
            fail("normalize_points", f"mode must be one of {tuple(NORMALIZATIONS)}, got {mode!r}")
    return _normalize_points(points, mode)


def _normalize_points(points: Tensor, mode: str = "sphere") -> Tensor:
    """:func:`normalize_points` on validated inputs (what the export traces)."""
    p = points.to(torch.float64)
    if mode == "cube":
        q = p - (p.amin(1, keepdim=True) + p.amax(1, keepdim=True)) / 2
        s = q.abs().amax(-1).amax(1)
    else:
        q = p - p.mean(1, keepdim=True)
        s = q.pow(2).sum(-1).amax(1).sqrt()
    # s = 0 only when every q is 0: divide by 1 there. No tiny clamp constant: the exporter writes
    # Python scalars through float32, where a clamp_min(1e-300) became 0.0 and the graph 0 / 0 = NaN.
    s = torch.where(s > 0, s, torch.ones_like(s))
    return (q / s.view(-1, 1, 1)).to(points.dtype)


def check_normalize(where: str, normalize: Any) -> Optional[str]:
    """The named normalization of a wrapper's ``normalize`` (True = ``"sphere"``, False = None, or a name
    of :data:`gridify.transforms.NORMALIZATIONS`); anything else fails naming ``where``."""
    if isinstance(normalize, bool) or (isinstance(normalize, str) and normalize in NORMALIZATIONS):
        return normalization_name(where, normalize)
    fail(where, f"normalize must be True or False, got {normalize!r} (or a normalization: {', '.join(NORMALIZATIONS)})")


def _up_rotation(up_axis: str, dtype: torch.dtype) -> Optional[Tensor]:
    """The ``3 x 3`` rotation to z up of ``up_axis`` (None for ``"z"``: nothing in the graph)."""
    return None if up_axis == "z" else torch.as_tensor(up_axis_rotation(up_axis), dtype=dtype)


def _to_z_up(rotation: Optional[Tensor], inputs: Tuple[Tensor, ...], names: List[str]) -> Tuple[Tensor, ...]:
    """``points`` (and ``normals``) of the inputs rotated to z up (``p @ R^T``); the others as they are."""
    if rotation is None:
        return inputs
    return tuple(t @ rotation.T if name in ("points", "normals") else t for t, name in zip(inputs, names))


class OnnxClassifier(nn.Module):
    """A :class:`gridify.models.GridifiedClassifier` on fixed-shape inputs, ready for ``torch.onnx.export``.

    ``forward(points [B, N, 3], normals [B, N, 3])`` (``normals`` only for models with
    ``in_channels == 6``) -> logits ``[B, K]``: optional normalization (:func:`normalize_points`),
    point features ``x = points'`` (3 features) or ``[points', normals]`` (6, as
    :class:`gridify.Predictor` builds them), :func:`gridify.nn.dense.gridify_dense`, then the model's
    ``grid_norm``, ``backbone``, ``pool_grid`` and ``head``. The wrapped model is the given one
    (shared weights); put it in eval mode. Called eagerly, ``forward`` and :meth:`reference`
    check their inputs (finite tensors of the model's dtype and device, ``[B, N, 3]`` with
    ``N >= k``, normals exactly when the model takes them); while traced they do not, so the
    exported graph holds no checks.

    Shapes:
        points ``[B, N, 3]``, normals ``[B, N, 3]`` -> logits ``[B, num_classes]``
    """

    def __init__(self, model: GridifiedClassifier, normalize: Union[bool, str] = True, up_axis: str = "z") -> None:
        super().__init__()
        check_exportable(model, type(self).__name__)
        check_wrapped(type(self).__name__, model, classifier=True)
        self.model = model
        #: the named normalization inside the graph (None: the clouds come normalized); normalize: whether any
        self.normalization = check_normalize(type(self).__name__, normalize)
        self.normalize = self.normalization is not None
        self.use_normals = model.in_channels == 6
        self.up_axis = check_up_axis(type(self).__name__, up_axis)
        dtype = next(model.parameters()).dtype
        nodes, axis = grid_tables(model.gridify.grid, dtype=dtype)
        self.register_buffer("nodes", nodes, persistent=False)
        self.register_buffer("axis", axis, persistent=False)
        self.register_buffer("up_rotation", _up_rotation(self.up_axis, dtype), persistent=False)

    @property
    def input_names(self) -> List[str]:
        return ["points", "normals"] if self.use_normals else ["points"]

    def _features(self, points: Tensor, normals: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        if self.up_rotation is not None:  # the file's clouds have another up axis: rotated to z up first
            points = points @ self.up_rotation.T
            normals = None if normals is None else normals @ self.up_rotation.T
        pos = _normalize_points(points, self.normalization) if self.normalize else points
        return pos, (torch.cat([pos, normals], -1) if self.use_normals else pos)

    def check_inputs(self, points: Any, normals: Any = None, where: Optional[str] = None) -> None:
        """Raise ValueError naming what is wrong with ``forward``'s arguments (None when they are fine)."""
        where = where or f"{type(self).__name__}.forward"
        dtype, device = self.nodes.dtype, self.nodes.device
        k = self.model.gridify.k
        points = check_dense_clouds(where, points, "points", k, dtype, device)
        if self.use_normals:
            if normals is None:
                fail(where, "normals are required: the model takes xyz + normals (in_channels=6)")
            normals = check_tensor(where, "normals", normals)
            if normals.shape != points.shape:
                fail(where, f"normals must have the shape of points {tuple(points.shape)}, got {tuple(normals.shape)}")
            check_dense_clouds(where, normals, "normals", k, dtype, device)
        elif normals is not None:
            fail(where, "the model takes no normals (in_channels=3); pass the points only")
        check_dense_size(
            where,
            f"points {tuple(points.shape)}",
            points.size(0),
            points.size(1),
            self.model.gridify.grid.num_nodes,
            dtype,
        )

    def forward(self, points: Tensor, normals: Optional[Tensor] = None) -> Tensor:
        if not validating():  # traced (or called by library code that checked): the graph itself
            return self._forward(points, normals)
        self.check_inputs(points, normals)
        with trusted_inputs():  # checked once here; the nested modules need not repeat it
            return self._forward(points, normals)

    def _forward(self, points: Tensor, normals: Optional[Tensor]) -> Tensor:
        pos, x = self._features(points, normals)
        m = self.model
        z = m.backbone(m.grid_norm(gridify_dense_unchecked(m.gridify, pos, x, (self.nodes, self.axis))))
        return m.head(m.pool_grid(z))

    @torch.no_grad()
    def reference(self, points: Tensor, normals: Optional[Tensor] = None) -> Tensor:
        """The same logits through the model's own forward (bilateral kNN graph): the reference path."""
        if validating():
            self.check_inputs(points, normals, f"{type(self).__name__}.reference")
        return self.model(*self._features(points, normals))

    def graph_points(self, points: Tensor, normals: Optional[Tensor] = None) -> Tensor:
        """The coordinates the graph is built on (normalized when the wrapper normalizes), ``[B, N, 3]``."""
        return _normalize_points(points, self.normalization) if self.normalize else points

    def point_nodes(self, u: Tensor) -> Tensor:
        """``P`` of the fixed-shape graph of grid-box points ``u [B, N, 3]``."""
        return dense_bilateral_knn_unchecked(u, self.model.gridify.k, self.nodes, self.axis)[1]

    def example_inputs(self, batch: int, n: int, seed: int) -> Tuple[Tensor, ...]:
        """Seeded clouds ``[batch, n, 3]`` on a noisy sphere (+ unit normals): inside the grid box when the
        wrapper does not normalize, off-centre and larger when it does."""
        g = torch.Generator().manual_seed(seed)
        dtype = self.nodes.dtype
        direction = nn.functional.normalize(torch.randn(batch, n, 3, generator=g, dtype=torch.float64), dim=-1)
        radius = 0.6 + 0.3 * torch.rand(batch, n, 1, generator=g, dtype=torch.float64)
        grid = self.model.gridify.grid
        lo, hi = (torch.tensor(v, dtype=torch.float64) for v in (grid.lower, grid.upper))
        half = float((hi - lo).min()) / 2
        points = (lo + hi) / 2 + direction * radius * half
        if self.normalize:
            points = points * 3.0 + 2.0
        out = (points.to(dtype),)
        if self.use_normals:
            out += (
                nn.functional.normalize(torch.randn(batch, n, 3, generator=g, dtype=torch.float64), dim=-1).to(dtype),
            )
        return out

    def place(self, u: Tensor, g: torch.Generator) -> Tuple[Tensor, ...]:
        """Clouds ``u`` (float64, within the unit ball) in the grid box as :meth:`example_inputs` places
        them (off-centre and larger when the wrapper normalizes), plus seeded unit normals."""
        grid = self.model.gridify.grid
        lo, hi = (torch.tensor(v, dtype=torch.float64) for v in (grid.lower, grid.upper))
        points = (lo + hi) / 2 + u * 0.9 * float((hi - lo).min()) / 2
        if self.normalize:
            points = points * 3.0 + 2.0
        dtype = self.nodes.dtype
        out = (points.contiguous().to(dtype),)
        if self.use_normals:
            out += (nn.functional.normalize(torch.randn(u.shape, generator=g, dtype=torch.float64), dim=-1).to(dtype),)
        return out


class OnnxSegmenter(nn.Module):
    """A gridified segmenter on fixed-shape inputs, ready for ``torch.onnx.export``: per-point logits.

    * :class:`gridify.models.GridifiedSceneSegmenter` (``scene_segmenter``): ``points [B, N, 3]``
      in metres (+ ``features [B, N, F]``, the checkpoint's per-point features, when ``F > 0``);
      every cloud is mapped into the grid box as the model does (:func:`scene_box_dense`).
    * :class:`gridify.models.GridifiedSegmenter` (``gridified_segmenter``, part segmentation):
      ``points [B, N, 3]`` (+ ``normals [B, N, 3]`` for 6-feature models, + ``category [B]``
      int64 for models trained with object categories), normalized as :class:`OnnxClassifier`
      normalizes.

    Then :func:`dense_grid_knn_unchecked` (node blocks of :data:`NODE_CHUNK`),
    :func:`gridify_dense_graph`, the model's ``grid_norm`` and ``backbone``,
    :func:`degridify_dense_graph` and the model's point branch and head: ``logits [B, N, K]``.
    The wrapped model is the given one (shared weights). Eager calls check their inputs; traced,
    the graph holds no checks.

    Shapes:
        points ``[B, N, 3]`` (+ features ``[B, N, F]`` / normals ``[B, N, 3]``, category ``[B]``)
        -> logits ``[B, N, num_classes]``
    """

    def __init__(
        self,
        model: nn.Module,
        normalize: Union[bool, str] = True,
        node_chunk: int = NODE_CHUNK,
        up_axis: str = "z",
        search: Optional[str] = None,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        check_exportable(model, where)
        check_wrapped(where, model, classifier=False)
        normalization = check_normalize(where, normalize)
        if search is not None and search not in SEARCHES:
            fail(where, f"search must be one of {', '.join(SEARCHES)} (or None: by model), got {search!r}")
        self.node_chunk = check_int(where, "node_chunk", node_chunk, 1)
        self.up_axis = check_up_axis(where, up_axis)
        self.model = model
        self.scene = isinstance(model, GridifiedSceneSegmenter)
        # a scene grid holds thousands of nodes over a crop of thousands of points: search by bucket
        self.search = search or ("bucketed" if self.scene else "brute")
        #: the named normalization inside the graph (None: the clouds come normalized, and always for a scene crop)
        self.normalization = None if self.scene else normalization
        self.normalize = self.normalization is not None
        self.use_normals = not self.scene and model.in_channels == 6
        self.num_features = model.in_channels if self.scene else 0
        self.num_categories = 0 if self.scene else int(model.num_categories)
        dtype = next(model.parameters()).dtype
        grid = model.gridify.grid
        self.register_buffer("up_rotation", _up_rotation(self.up_axis, dtype), persistent=False)
        self.register_buffer("nodes", grid.positions(dtype=dtype), persistent=False)
        for name, ax in zip(("axis_x", "axis_y", "axis_z"), grid_axes(grid, dtype=dtype)):
            self.register_buffer(name, ax, persistent=False)

    @property
    def input_names(self) -> List[str]:
        if self.scene:
            return ["points"] + (["features"] if self.num_features else [])
        return ["points"] + (["normals"] if self.use_normals else []) + (["category"] if self.num_categories else [])

    @property
    def axes(self) -> Tuple[Tensor, Tensor, Tensor]:
        return self.axis_x, self.axis_y, self.axis_z

    def graph_points(self, *inputs: Tensor) -> Tensor:
        """The coordinates the graph is built on (grid box), ``[B, N, 3]``."""
        if self.scene:
            return scene_box_dense(inputs[0], self.model.extent, getattr(self.model, "box_trim", 0.0))
        return _normalize_points(inputs[0], self.normalization) if self.normalize else inputs[0]

    def _features(self, inputs: Tuple[Tensor, ...]) -> Tuple[Tensor, Tensor]:
        if self.scene:
            u, half = scene_box_dense_scaled(inputs[0], self.model.extent, getattr(self.model, "box_trim", 0.0))
            parts = [u] + ([inputs[1]] if self.num_features else [])
            if getattr(self.model, "scale_input", False):
                parts.append(scale_features(half).expand(-1, u.size(1), -1))
            return u, torch.cat(parts, -1) if len(parts) > 1 else u
        u = self.graph_points(*inputs)
        return u, (torch.cat([u, inputs[1]], -1) if self.use_normals else u)

    def check_inputs(self, *inputs: Any, where: Optional[str] = None) -> None:
        """Raise ValueError naming what is wrong with ``forward``'s arguments (None when they are fine)."""
        where = where or f"{type(self).__name__}.forward"
        names = self.input_names
        if len(inputs) != len(names):
            fail(where, f"expected the inputs {', '.join(names)} ({len(names)}), got {len(inputs)} tensors")
        dtype, device = self.nodes.dtype, self.nodes.device
        k = self.model.gridify.k
        points = check_dense_clouds(where, inputs[0], "points", k, dtype, device)
        B, N = points.shape[:2]
        for name, value in zip(names[1:], inputs[1:]):
            value = check_tensor(where, name, value)
            if name == "category":
                if value.dim() != 1 or value.numel() != B or value.dtype != torch.int64:
                    fail(where, f"category must be an int64 tensor [B] = [{B}], got {value.dtype} {tuple(value.shape)}")
                bad = ((value < 0) | (value >= self.num_categories)).nonzero().flatten()
                if bad.numel():
                    fail(
                        where,
                        f"category must hold integers in [0, {self.num_categories}), got "
                        f"{int(value[bad[0]])} for cloud {int(bad[0])}",
                    )
                continue
            width = self.num_features if name == "features" else 3
            if value.dim() != 3 or tuple(value.shape) != (B, N, width):
                fail(
                    where,
                    f"{name} must have shape [B, N, {width}] = [{B}, {N}, {width}] (one row per point), got "
                    f"{tuple(value.shape)}",
                )
            check_float(where, name, value)
            if value.dtype != dtype or value.device != device:
                fail(
                    where,
                    f"{name} must be {str(dtype).replace('torch.', '')} on {device} (the model's), got "
                    f"{value.dtype} on {value.device}",
                )
            check_finite(where, name, value.reshape(B * N, width), torch.arange(B).repeat_interleave(N))
        nbytes = B * N * min(self.node_chunk, self.nodes.size(0)) * element_size(dtype)
        check_alloc(
            where,
            f"points {tuple(points.shape)} (a [B, {min(self.node_chunk, self.nodes.size(0))}, N] distance block)",
            nbytes,
        )

    def forward(self, *inputs: Tensor) -> Tensor:
        if not validating():
            return self._forward(*inputs)
        self.check_inputs(*inputs)
        with trusted_inputs():
            return self._forward(*inputs)

    def _forward(self, *inputs: Tensor) -> Tensor:
        m = self.model
        u, x = self._features(_to_z_up(self.up_rotation, inputs, self.input_names))
        graph = dense_grid_knn_unchecked(u, m.gridify.k, self.nodes, self.axes, self.node_chunk, self.search)
        z = m.backbone(m.grid_norm(gridify_dense_graph(m.gridify, u, x, self.nodes, graph)))
        voxel = degridify_dense_graph(m.degridify, z, u, self.nodes, graph)
        B, N = u.shape[:2]
        parts = [voxel, m.point_mlp(x)]
        if self.num_categories:
            onehot = nn.functional.one_hot(inputs[-1], self.num_categories).to(voxel.dtype)
            parts.append(onehot.unsqueeze(1).expand(-1, N, -1))
        return m.head(torch.cat(parts, -1))

    @torch.no_grad()
    def reference(self, *inputs: Tensor) -> Tensor:
        """The same logits through the model's own forward (bilateral kNN graph): the reference path."""
        if validating():
            self.check_inputs(*inputs, where=f"{type(self).__name__}.reference")
        inputs = _to_z_up(self.up_rotation, inputs, self.input_names)
        if self.scene:
            return self.model(inputs[0], inputs[1] if self.num_features else None)
        u, x = self._features(inputs)
        return self.model(u, x, category=inputs[-1] if self.num_categories else None)

    def point_nodes(self, u: Tensor) -> Tensor:
        """``P`` of the fixed-shape graph of grid-box points ``u [B, N, 3]``."""
        return dense_grid_knn_unchecked(u, self.model.gridify.k, self.nodes, self.axes, self.node_chunk, self.search)[1]

    def example_inputs(self, batch: int, n: int, seed: int) -> Tuple[Tensor, ...]:
        """Seeded random clouds ``[batch, n, 3]`` (+ their other inputs), as :meth:`place` places them."""
        g = torch.Generator().manual_seed(seed)
        u = 2 * torch.rand(batch, n, 3, generator=g, dtype=torch.float64) - 1
        if not self.scene:
            u = nn.functional.normalize(u, dim=-1) * (
                0.6 + 0.3 * torch.rand(batch, n, 1, generator=g, dtype=torch.float64)
            )
        return self.place(u, g)

    def place(self, u: Tensor, g: torch.Generator) -> Tuple[Tensor, ...]:
        """Clouds ``u`` (float64, in ``[-1, 1]^3``) as inputs: a scene segmenter gets metric points
        (a 30 x 30 x 3 m box far from the origin, as a scan in map coordinates) and features in
        ``[0, 1]``; a part segmenter gets them as :meth:`OnnxClassifier.place` places a classifier's, plus
        normals and categories."""
        dtype = self.nodes.dtype
        batch, n = u.shape[:2]
        if self.scene:
            points = torch.tensor([350.0, -120.0, 2.0], dtype=torch.float64) + u * torch.tensor(
                [15.0, 15.0, 1.5], dtype=torch.float64
            )
            out = (points.to(dtype),)
            if self.num_features:
                out += (torch.rand(batch, n, self.num_features, generator=g, dtype=torch.float64).to(dtype),)
            return out
        points = u * 0.9
        if self.normalize:
            points = points * 3.0 + 2.0
        out = (points.contiguous().to(dtype),)
        if self.use_normals:
            out += (nn.functional.normalize(torch.randn(u.shape, generator=g, dtype=torch.float64), dim=-1).to(dtype),)
        if self.num_categories:
            out += (torch.randint(0, self.num_categories, (batch,), generator=g),)
        return out
