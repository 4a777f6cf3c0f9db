"""The exportable form of a gridified model: :class:`OnnxModel` (and :class:`OnnxClassifier`, :class:`OnnxSegmenter`).

A wrapper holds a trained model (shared weights) and runs the model's own ``forward`` on fixed-shape
tensors, inside :func:`gridify.nn.dense.fixed_shapes` (the layers' fixed-shape, traceable path: the graph
by brute force or bucketed search, ``OnnxModel.search``). It handles the inputs only, the same way for
every model: their names, shapes and checks (the model's :meth:`~gridify.models.GridifiedModel.point_inputs`),
the up axis (points and normals turned to z up, ``p R^T``), and with ``normalize`` the in-graph normalization
of models of normalized clouds (a model of clouds in metres, whose task does not normalize, maps every
cloud into its grid itself):

    p' = (p - mean(p)) / max_j |p_j - mean(p)|

or, with ``normalize="cube"``, into the cube ``[-1, 1]^3``: ``p' = (p - c) / max_{j,d} |p_jd - c_d|``,
``c = (min_j p_j + max_j p_j) / 2`` (in float64, as :func:`gridify.api.normalize_cloud`). Called eagerly, the wrappers check their
inputs; traced (``torch.onnx.export`` under :func:`gridify.export.tracing.tracing_mode`) they do not.
:meth:`OnnxModel.reference` is the same call of the model's ``forward`` off the switch (its own sparse path).

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
from ..nn.dense import fixed_shapes
from ..ops.knn_dense import NODE_CHUNK, SEARCHES, check_dense_clouds
from ..tasks import get_task
from ..transforms import (
    NORMALIZATIONS,
    centre_and_scale_unchecked,
    check_up_axis,
    normalization_name,
    up_axis_rotation,
)

__all__ = [
    "ExportError",
    "OnnxClassifier",
    "OnnxModel",
    "OnnxSegmenter",
    "check_exportable",
    "clouds_in_metres",
    "fail_export",
    "normalize_points",
]


class ExportError(RuntimeError):
    """A model (or an export option) that this exporter cannot handle; the message says what."""


def check_exportable(model: Any, where: str = "export_onnx") -> None:
    """Raise :class:`ExportError` naming what makes ``model`` unexportable (None when it is fine)."""
    if not (isinstance(model, nn.Module) and callable(getattr(model, "point_inputs", None))):
        fail_export(
            where,
            f"{type(model).__name__} is not exportable: the gridified classifier, part segmenter and "
            f"scene segmenter (gridified_classifier, gridified_segmenter, scene_segmenter) have an ONNX "
            f"route",
        )
    if model.point_inputs() is None:
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


def clouds_in_metres(model: nn.Module) -> bool:
    """Whether ``model`` takes clouds in metres and maps them into its grid itself (its task's clouds are not
    normalized, :attr:`gridify.tasks.Task.normalized`: a scene segmenter); the export then normalizes nothing."""
    return not get_task(model_task(model)).normalized


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
    """:func:`normalize_points` on validated inputs (what the export traces): the one normalization rule,
    :func:`gridify.transforms.centre_and_scale_unchecked` (a cloud of zero extent to the origin)."""
    q, _, _ = centre_and_scale_unchecked(points.to(torch.float64), *NORMALIZATIONS[mode])
    return q.to(points.dtype)


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


class OnnxModel(nn.Module):
    """A gridified model on fixed-shape inputs, ready for ``torch.onnx.export`` (module docstring).

    ``forward(points [B, N, 3], *inputs)``, the other inputs as the model names them (:attr:`input_names`:
    ``normals [B, N, 3]``, ``features [B, N, F]``, ``category [B]`` int64) -> the model's logits on them:
    ``[B, K]`` or per point ``[B, N, K]``. ``search`` (:data:`gridify.ops.knn_dense.SEARCHES`; None: the
    gridification's own ``fixed_search``) and ``node_chunk``: the graph's node -> points search. The wrapped
    model is the given one (shared weights); put it in eval mode. Called eagerly, ``forward`` and
    :meth:`reference` check their inputs (finite tensors of the model's dtype and device, ``[B, N, ...]`` with
    ``N >= k``, categories in range); while traced they do not, so the exported graph holds no checks.

    Shapes:
        points ``[B, N, 3]`` (+ normals / features ``[B, N, F]``, category ``[B]``) -> ``[B, K]`` or ``[B, N, K]``
    """

    def __init__(
        self,
        model: nn.Module,
        normalize: Union[bool, str] = True,
        up_axis: str = "z",
        search: Optional[str] = None,
        node_chunk: int = NODE_CHUNK,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        check_exportable(model, where)
        self.check_model(where, model)
        normalization = check_normalize(where, normalize)
        if search is not None and search not in SEARCHES:
            fail(where, f"search must be one of {', '.join(SEARCHES)} (or None: by model), got {search!r}")
        self.node_chunk = check_int(where, "node_chunk", node_chunk, 1)
        self.up_axis = check_up_axis(where, up_axis)
        self.model = model
        #: what the model takes beside the points (gridify.models.PointInputs)
        self.inputs = model.point_inputs()
        self.search = search or model.gridify.fixed_search
        #: clouds in metres that the model maps into its grid itself: nothing normalized in the graph
        self.metric = clouds_in_metres(model)
        #: the named normalization inside the graph (None: the clouds come normalized, or in metres); normalize: whether any
        self.normalization = None if self.metric else normalization
        self.normalize = self.normalization is not None
        dtype = next(model.parameters()).dtype
        self.register_buffer("up_rotation", _up_rotation(self.up_axis, dtype), persistent=False)
        model.gridify.fixed_tables(dtype)  # eagerly now: the traced graph holds the grid's tables as constants

    def check_model(self, where: str, model: nn.Module) -> None:
        """Refuse a model this wrapper does not take (:class:`OnnxModel`: any exportable one)."""

    @property
    def input_names(self) -> List[str]:
        return self.inputs.names

    @property
    def nodes(self) -> Tensor:
        """The grid's node positions ``[R, 3]`` the graph is built on."""
        return self.model.gridify.fixed_tables(self.model_dtype)[0]

    @property
    def axes(self) -> Tuple[Tensor, Tensor, Tensor]:
        """The grid's per-axis node coordinates (:func:`gridify.nn.dense.grid_axes`)."""
        return self.model.gridify.fixed_tables(self.model_dtype)[1]

    @property
    def model_dtype(self) -> torch.dtype:
        """The model's dtype (the inputs' dtype)."""
        return next(self.model.parameters()).dtype

    def model_inputs(self, inputs: Tuple[Tensor, ...]) -> Tuple[Tensor, ...]:
        """The inputs as the model takes them: points and normals turned to z up, the points normalized."""
        inputs = _to_z_up(self.up_rotation, inputs, self.input_names)
        if not self.normalize:
            return inputs
        return (_normalize_points(inputs[0], self.normalization),) + tuple(inputs[1:])

    def forward(self, *inputs: Tensor) -> Tensor:
        if not validating():  # traced (or called by library code that checked): the graph itself
            return self._forward(*inputs)
        self.check_inputs(*inputs)
        with trusted_inputs():  # checked once here; the nested modules need not repeat it
            return self._forward(*inputs)

    def _forward(self, *inputs: Tensor) -> Tensor:
        with fixed_shapes(self.search, self.node_chunk):
            return self.inputs.call(self.model, *self.model_inputs(inputs))

    @torch.no_grad()
    def reference(self, *inputs: Tensor) -> Tensor:
        """The same logits through the model's own sparse path (bilateral kNN graph): the reference path."""
        if validating():
            self.check_inputs(*inputs, where=f"{type(self).__name__}.reference")
        return self.inputs.call(self.model, *self.model_inputs(inputs))

    def check_inputs(self, *inputs: Any, where: Optional[str] = None) -> None:
        """Raise ValueError naming what is wrong with ``forward``'s arguments (None when they are fine)."""
        where = where or f"{type(self).__name__}.forward"
        names = self.input_names
        if len(inputs) != len(names):
            self._fail_count(where, len(inputs))
        dtype, device = self.model_dtype, next(self.model.parameters()).device
        points = check_dense_clouds(where, inputs[0], "points", self.model.gridify.k, dtype, device)
        widths, classes = dict(self.inputs.features), dict(self.inputs.per_cloud)
        for name, value in zip(names[1:], inputs[1:]):
            if name in classes:
                _check_per_cloud(where, name, value, points.size(0), classes[name])
            else:
                _check_per_point(where, name, value, points, widths[name])
        chunk = min(self.node_chunk, self.model.gridify.grid.num_nodes)
        B, N = points.shape[:2]
        check_alloc(
            where,
            f"points {tuple(points.shape)} (a [B, {chunk}, N] distance block)",
            B * N * chunk * element_size(dtype),
        )

    def _fail_count(self, where: str, count: int) -> NoReturn:
        """The message of a wrong number of inputs: the first one missing, or one the model was built without."""
        names = self.input_names
        expected = f"expected the inputs {', '.join(names)} ({len(names)}), got {count} tensors"
        channels = f"in_channels={self.model.in_channels}"
        if count < len(names):
            missing = names[count]
            takes = " + ".join("xyz" if n == "points" else n for n, _ in self.inputs.features) or "points"
            verb = "are" if missing.endswith("s") else "is"
            fail(where, f"{missing} {verb} required: the model takes {takes} ({channels}); {expected}")
        if self.inputs.without:
            fail(where, f"the model takes no {self.inputs.without[0]} ({channels}); pass the {', '.join(names)} only")
        fail(where, expected)

    def example_inputs(self, batch: int, n: int, seed: int) -> Tuple[Tensor, ...]:
        """Seeded clouds ``[batch, n, 3]`` (+ their other inputs): in metres as :meth:`place` places them for a
        model of clouds in metres; else on a noisy sphere inside the grid box when the wrapper does not
        normalize, off-centre and larger when it does."""
        g = torch.Generator().manual_seed(seed)
        if self.metric:
            return self.place(2 * torch.rand(batch, n, 3, generator=g, dtype=torch.float64) - 1, g)
        direction = nn.functional.normalize(torch.randn(batch, n, 3, generator=g, dtype=torch.float64), dim=-1)
        radius = 0.6 + 0.3 * torch.rand(batch, n, 1, generator=g, dtype=torch.float64)
        return (self._box_points(direction * radius, 1.0).to(self.model_dtype),) + self._other_inputs(batch, n, g)

    def place(self, u: Tensor, g: torch.Generator) -> Tuple[Tensor, ...]:
        """Clouds ``u`` (float64, in ``[-1, 1]^3``) as inputs, with seeded other inputs (unit normals, features in
        ``[0, 1]``, categories): for a model of clouds in metres a 30 x 30 x 3 m box far from the origin (a scan
        in map coordinates); else in the grid box, off-centre and larger when the wrapper normalizes."""
        batch, n = u.shape[:2]
        if self.metric:
            box = torch.tensor([15.0, 15.0, 1.5], dtype=torch.float64)
            points = torch.tensor([350.0, -120.0, 2.0], dtype=torch.float64) + u * box
        else:
            points = self._box_points(u, 0.9).contiguous()
        return (points.to(self.model_dtype),) + self._other_inputs(batch, n, g)

    def _box_points(self, u: Tensor, fill: float) -> Tensor:
        """``u`` within the unit ball placed in the grid box (``fill`` of its half width), then off-centre
        and larger (``3 p + 2``) when the wrapper normalizes."""
        grid = self.model.gridify.grid
        lo, hi = (torch.tensor(v, dtype=torch.float64) for v in (grid.lower, grid.upper))
        points = (lo + hi) / 2 + u * fill * float((hi - lo).min()) / 2
        return points * 3.0 + 2.0 if self.normalize else points

    def _other_inputs(self, batch: int, n: int, g: torch.Generator) -> Tuple[Tensor, ...]:
        """Seeded inputs after the points, in order: unit normals, features in ``[0, 1]``, categories."""
        widths, classes = dict(self.inputs.features), dict(self.inputs.per_cloud)
        out: List[Tensor] = []
        for name in self.input_names[1:]:
            if name in classes:
                out.append(torch.randint(0, classes[name], (batch,), generator=g))
            elif name == "normals":
                normals = torch.randn(batch, n, 3, generator=g, dtype=torch.float64)
                out.append(nn.functional.normalize(normals, dim=-1).to(self.model_dtype))
            else:
                out.append(torch.rand(batch, n, widths[name], generator=g, dtype=torch.float64).to(self.model_dtype))
        return tuple(out)


def _check_per_point(where: str, name: str, value: Any, points: Tensor, width: int) -> None:
    """A per-point input ``[B, N, width]`` of ``points``' dtype and device, finite (messages name the cloud and row)."""
    value = check_tensor(where, name, value)
    B, N = points.shape[:2]
    if value.dim() != 3 or tuple(value.shape) != (B, N, width):
        if width == 3:
            fail(where, f"{name} must have the shape of points {tuple(points.shape)}, got {tuple(value.shape)}")
        fail(
            where,
            f"{name} must have shape [B, N, {width}] = [{B}, {N}, {width}] (one row per point), got {tuple(value.shape)}",
        )
    check_float(where, name, value)
    if value.dtype != points.dtype or value.device != points.device:
        fail(
            where,
            f"{name} must be {str(points.dtype).replace('torch.', '')} on {points.device} (the model's), got "
            f"{value.dtype} on {value.device}",
        )
    check_finite(where, name, value.reshape(B * N, width), torch.arange(B).repeat_interleave(N))


def _check_per_cloud(where: str, name: str, value: Any, B: int, classes: int) -> None:
    """A per-cloud input: int64 ``[B]`` with values in ``[0, classes)``."""
    value = check_tensor(where, name, value)
    if value.dim() != 1 or value.numel() != B or value.dtype != torch.int64:
        fail(where, f"{name} must be an int64 tensor [B] = [{B}], got {value.dtype} {tuple(value.shape)}")
    bad = ((value < 0) | (value >= classes)).nonzero().flatten()
    if bad.numel():
        fail(where, f"{name} must hold integers in [0, {classes}), got {int(value[bad[0]])} for cloud {int(bad[0])}")


class OnnxClassifier(OnnxModel):
    """An :class:`OnnxModel` of a :class:`gridify.models.GridifiedClassifier`: ``forward(points [B, N, 3],
    normals [B, N, 3])`` (``normals`` only for models with ``in_channels == 6``) -> logits ``[B, K]``.

    Shapes:
        points ``[B, N, 3]``, normals ``[B, N, 3]`` -> logits ``[B, num_classes]``
    """

    def check_model(self, where: str, model: nn.Module) -> None:
        """Refuse a segmenter (a model whose task labels every point) naming its task."""
        _check_wrapped(where, model, classifier=True)


class OnnxSegmenter(OnnxModel):
    """An :class:`OnnxModel` of a part or scene segmenter: per-point logits ``[B, N, K]``.

    * :class:`gridify.models.GridifiedSceneSegmenter` (``scene_segmenter``): ``points [B, N, 3]``
      in metres (+ ``features [B, N, F]``, the checkpoint's per-point features, when ``F > 0``);
      the model maps every cloud into its grid box (:func:`gridify.models.scene.scene_box_dense`), its graph
      searches by bucket.
    * :class:`gridify.models.GridifiedSegmenter` (``gridified_segmenter``, part segmentation):
      ``points [B, N, 3]`` (+ ``normals [B, N, 3]`` for 6-feature models, + ``category [B]``
      int64 for models trained with object categories), normalized as :class:`OnnxClassifier`
      normalizes.

    Shapes:
        points ``[B, N, 3]`` (+ features ``[B, N, F]`` / normals ``[B, N, 3]``, category ``[B]``)
        -> logits ``[B, N, num_classes]``
    """

    def check_model(self, where: str, model: nn.Module) -> None:
        """Refuse a classifier (one label per cloud) naming its task."""
        _check_wrapped(where, model, classifier=False)


def _check_wrapped(where: str, model: Any, classifier: bool) -> None:
    """Refuse (:class:`ExportError`) a model of the wrong task for a wrapper: :class:`OnnxClassifier` (``classifier``)
    takes a model of one label per cloud, :class:`OnnxSegmenter` one of a label per point (a part or scene segmenter,
    :attr:`gridify.tasks.Task.dense`); the message names the model's task and the wrapper that takes it."""
    task = model_task(model)
    if get_task(task).dense != classifier:
        return
    right = "OnnxSegmenter" if classifier else "OnnxClassifier"
    takes = "a classifier (GridifiedClassifier)" if classifier else "a part or scene segmenter"
    fail_export(
        where,
        f"the model is a {type(model).__name__}, a {task} model, but {where} wraps {takes}: use "
        f"{right}(model) (or export_onnx, which picks the wrapper by the model)",
    )
