"""The :class:`Predictor`: a trained model plus what is needed to run it on new clouds.

What :meth:`Predictor.predict` does depends on the task: it hands the cloud to the task's predictor
(:mod:`gridify.api.task_predictors`, found through the task by
:func:`gridify.api.task_predictors.predictor_for`); the procedures are in the :mod:`gridify.api`
docstring. :meth:`Predictor.prepare` (reading, checking and normalizing one cloud) and
:meth:`Predictor.embed` are the same for every task.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor, nn

from .._checks import check_int, fail, is_int
from .._progress import resolve_progress
from ..nn.state import all_or_nothing, evaluating
from ..tasks import get_task
from ..transforms import check_up_axis, normalization_name, to_z_up
from ..io import read_points
from .inputs import PointsLike, as_float32, normalize_cloud, read_cloud
from .inputs import estimate_normals as estimate_unit_normals
from .prediction import Prediction
from .task_predictors import (
    TaskPredictor,
    check_batch_sizes,
    check_predict_arguments,
    chunks,
    is_served,
    pooled,
    predictor_for,
    served_tasks,
)

__all__ = ["Predictor", "names_problem"]


def names_problem(
    model: nn.Module,
    class_names: Sequence[str],
    category_names: Optional[Sequence[str]] = None,
    category_to_parts: Optional[Sequence[Sequence[int]]] = None,
) -> Optional[str]:
    """What is wrong with the names of a model's outputs and categories, or None: one class name per output
    (``model.num_classes``), one category name (and one part list) per object category (``model.num_categories``)
    and parts within the classes. :func:`gridify.load` raises it as a CheckpointError naming the file, the
    :class:`Predictor` as a ValueError."""
    outputs = getattr(model, "num_classes", None)
    if is_int(outputs) and len(class_names) != outputs:
        return f"class_names names {len(class_names)} classes but the model has {outputs} outputs"
    categories = getattr(model, "num_categories", None)
    for key, given in (("category_names", category_names), ("category_to_parts", category_to_parts)):
        if given is not None and is_int(categories) and categories > 0 and len(given) != categories:
            return f"{key} holds {len(given)} entries but the model takes {categories} object categories"
    parts = [p for group in category_to_parts or [] for p in group]
    if any(not is_int(p) or not 0 <= p < len(class_names) for p in parts):
        return f"category_to_parts names parts beyond the {len(class_names)} classes (0..{len(class_names) - 1})"
    return None


class Predictor(nn.Module):
    """A trained gridified model plus what is needed to run it on new clouds.

    Build it with :func:`load`. ``forward`` is the bare model's forward (normalized, PyG-style
    inputs); :meth:`predict` and :meth:`embed` take raw clouds of any size (see the module
    docstring for the exact procedure).

    Attributes:
        model: the network (eval mode). task: a registered task (:mod:`gridify.tasks`); ``dense``:
            it labels every point (segmentation, scene_segmentation) rather than the cloud.
        class_names: names of the outputs (classes, or parts for segmentation).
        category_names / category_to_parts: object categories of a segmentation model (or None).
        num_points: points per training cloud ``n``. normalize: whether clouds are normalized;
            normalization: how (``"sphere"`` or ``"cube"``, :data:`gridify.transforms.NORMALIZATIONS`; the
            ``normalize`` argument: True (= ``"sphere"``), False or a name; None when not normalized).
        in_channels / use_normals: point features the model takes (6 = xyz + normals).
        estimated_normals: ``k`` when the model was trained on normals estimated from the points
            (``data.estimate_normals``): :meth:`prepare` then estimates them the same way unless
            ``normals=`` is given, whatever the file holds; None: the file's or the given normals.
        gridify_version: the version that trained the model. meta: the checkpoint's info/config.

    Shapes:
        forward: pos ``[N, 3]``, x ``[N, F]``, batch ``[N]`` -> logits ``[B, K]`` or ``[N, K]``.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        task: str,
        class_names: Sequence[str],
        num_points: Optional[int],
        in_channels: int,
        normalize: Union[bool, str] = True,
        category_names: Optional[Sequence[str]] = None,
        category_to_parts: Optional[Sequence[Sequence[int]]] = None,
        gridify_version: Optional[str] = None,
        meta: Optional[Dict[str, Any]] = None,
        estimated_normals: Optional[int] = None,
    ) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise ValueError(f"Predictor: model must be a torch.nn.Module, got {type(model).__name__}")
        if not is_served(task):
            raise ValueError(f"Predictor: task must be one of {served_tasks()}, got {task!r}")
        task_predictor = predictor_for(task)
        check_int("Predictor", "num_points", num_points, 1, allow_none=True)
        check_int("Predictor", "estimated_normals", estimated_normals, 1, allow_none=True)
        # a scene segmenter may take no features beside its coordinates (in_channels=0)
        check_int("Predictor", "in_channels", in_channels, task_predictor.min_in_channels)
        if isinstance(class_names, str) or not class_names:
            raise ValueError(f"Predictor: class_names must be a non-empty list of names, got {class_names!r}")
        problem = names_problem(model, class_names, category_names, category_to_parts)
        if problem is not None:  # else an IndexError when a label is named (Prediction.names)
            source = f" ({meta['path']})" if isinstance(meta, dict) and meta.get("path") else ""
            raise ValueError(f"Predictor{source}: {problem}")
        self.model = model.eval()
        self.task = task
        self.task_predictor: TaskPredictor = task_predictor
        self.class_names = [str(c) for c in class_names]
        self.num_points = None if num_points is None else int(num_points)
        self.in_channels = int(in_channels)
        self.use_normals = self.in_channels == 6
        self.estimated_normals = None if estimated_normals is None else int(estimated_normals)
        #: the named normalization of every cloud (:data:`gridify.transforms.NORMALIZATIONS`; None: as given)
        self.normalization: Optional[str] = normalization_name("Predictor", normalize)
        self.normalize = self.normalization is not None
        self.category_names = None if category_names is None else [str(c) for c in category_names]
        self.category_to_parts = None if category_to_parts is None else [list(map(int, p)) for p in category_to_parts]
        self.num_categories = int(getattr(model, "num_categories", 0) or 0)
        self.gridify_version = gridify_version
        self.meta = dict(meta or {})
        self.eval()

    # ---- plumbing ----------------------------------------------------------------------
    @property
    def dense(self) -> bool:
        """Whether :meth:`predict` labels every point (``labels`` ``[N]``) rather than the cloud (``[]``):
        the task's :attr:`gridify.tasks.Task.dense`."""
        return get_task(self.task).dense

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def resolution(self) -> Union[int, Tuple[int, ...]]:
        """The model's grid resolution ``R`` (a per-axis tuple for a scene segmenter's grid)."""
        r = self.model.resolution
        return tuple(int(v) for v in r) if isinstance(r, (tuple, list)) else int(r)

    def forward(
        self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None, category: Optional[Tensor] = None
    ) -> Tensor:
        if self.num_categories:  # a part segmenter trained with object categories
            return self.model(pos, x, batch, category=category)
        if category is not None:
            raise ValueError(
                f"Predictor.forward: category is only used by part segmenters trained with object categories; "
                f"this {self.task} model takes none"
            )
        return self.model(pos, x, batch)

    def extra_repr(self) -> str:
        return (
            f"task={self.task}, classes={len(self.class_names)}, num_points={self.num_points}, "
            f"in_channels={self.in_channels}, normalize={self.normalization if self.normalization == 'cube' else self.normalize}, version={self.gridify_version}"
        )

    def prepare(
        self,
        points: PointsLike,
        normals: Any = None,
        *,
        estimate_normals: bool = False,
        up_axis: str = "z",
        where: str = "Predictor.prepare",
    ) -> Dict[str, Any]:
        """Validate and normalize one cloud: a dict with ``pos`` ``[N, 3]`` (normalized, z up), ``x``
        ``[N, F]`` (model features), ``center`` ``[3]``, ``scale``, ``normals``, ``normals_k`` (the
        neighbours the normals were estimated with for a model trained on estimated normals, else None:
        :func:`gridify.api.task_predictors.subset_features` then estimates them again on every subset
        of ``num_points``, the density the training files had) and ``source``.
        ``up_axis``: the cloud's up direction (:data:`gridify.transforms.UP_AXES`), rotated to z first."""
        up_axis = check_up_axis(where, up_axis)
        pos, nrm, source = read_cloud(points, normals, where)
        pos, nrm = to_z_up(pos, up_axis, nrm)
        normals_k = None
        if self.use_normals and self.estimated_normals is not None and normals is None:
            # as the training data did; a subset larger clouds are scored through gets its own (subset_features)
            normals_k = self.estimated_normals
            nrm = estimate_unit_normals(pos, normals_k)
        elif self.use_normals and nrm is None:
            if not estimate_normals:
                raise ValueError(
                    f"{where}: the model was trained with normals (in_channels=6) but the cloud has "
                    f"none; pass normals=..., a file with normals (or a mesh), or estimate them (estimate_normals=True; "
                    f"gridify predict/show: --estimate-normals)"
                )
            nrm = estimate_unit_normals(pos)
        center, scale = np.zeros(3), 1.0
        if self.normalize:
            try:
                pos, center, scale = normalize_cloud(pos, self.normalization)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
        else:
            pos = as_float32(pos, "points", where)
        x = np.concatenate([pos, nrm], 1) if self.use_normals else pos
        if x.shape[1] != self.in_channels:
            raise ValueError(
                f"{where}: the model takes {self.in_channels} features per point, but the cloud gives {x.shape[1]}"
            )
        return {
            "pos": pos,
            "x": x,
            "normals": nrm,
            "normals_k": normals_k,
            "center": center,
            "scale": scale,
            "source": source,
        }

    # ---- prediction ----------------------------------------------------------------------
    def _options(self, options: Dict[str, Any], entry: str, where: str) -> Dict[str, Any]:
        """The options of ``entry`` (``"predict"`` / ``"inspect"``) checked by the task's predictor
        (:meth:`~gridify.api.task_predictors.TaskPredictor.check_options`), ``progress`` resolved first (its one
        meaning for every task: :func:`gridify._progress.resolve_progress`; None / False: no option given)."""
        if "progress" in options:
            options = dict(options, progress=resolve_progress(where, options["progress"], entry))
        return self.task_predictor.check_options(self.task, options, entry, where)

    @torch.no_grad()
    def predict(
        self, points: PointsLike, normals: Any = None, *, up_axis: Optional[str] = None, **options: Any
    ) -> Prediction:
        """Labels and probabilities for one cloud of any size (see the module docstring).

        Every task takes the cloud, its normals and ``up_axis``; the other options are the task's own
        (:attr:`gridify.api.task_predictors.TaskPredictor.options`), and an option of another task is refused
        naming the tasks that take it (``num_votes`` of a part segmenter, ``max_fragments`` of a classifier).

        Args:
            points: ``[N, 3]`` numpy array or tensor, a :class:`gridify.io.PointCloud`, or a file
                path (read with :func:`gridify.io.read_points`; its normals are used).
            normals: ``[N, 3]`` normals (required when the model was trained with normals,
                unless the file/PointCloud has them or ``estimate_normals=True``).
            up_axis: the cloud's up direction, ``"z"`` (what the shipped models expect; ``None``, the
                default, reads it as z up too, and a classifier then also reads it y up: when that reading
                is clearly more confident, :attr:`Prediction.hints` says so and names the option),
                ``"y"`` (e.g. ``modelnet40_normal_resampled``, glTF), ``"x"`` or their negatives: the
                points (and normals) are rotated to z up before anything else (a proper rotation,
                :func:`gridify.transforms.up_axis_rotation`); labels keep the input order.
            seed: every task: seed of the subsets / chunks / views (the result is a function of the cloud and seed).
            batch_size: every task: subsets, chunks or scene crops per forward pass (bounds the memory; a scene runs
                fewer crops per pass where that many would pass the allocation limit: the same probabilities).
            estimate_normals: every task: estimate missing normals from the points (local PCA of the 30 nearest; see
                :func:`estimate_normals`).
            category: classifiers and part segmenters: the object category (name or index) of a part segmenter
                trained with object categories (another model refuses one).
            num_votes: classifiers and scene segmenters: random subsets averaged by a classifier when
                ``N != num_points`` (default 4); views (evenly spaced rotations about z) averaged by a scene segmenter
                (default: the model's, 1 unless its checkpoint records another).
            features: scene segmenters only: the model's per-point features ``[N, F]`` (the columns
                of its training ``features``), instead of building them from the file.
            progress: scene segmenters only: ``progress(crops_done, crops_total)`` after every pass, or
                ``True`` for a bar on stderr (``None`` / ``False``: silent, taken by every task).
            max_fragments: scene segmenters only: grid-subsampled fragments of the scan per view at most
                (``None``: the model's default, 4 unless its checkpoint records another; ``"all"``: every
                point in a fragment; see :mod:`gridify.scene_inference`). Fewer fragments, fewer model calls:
                1 makes about a quarter of the calls of 4 on a LiDAR scan.

        Returns:
            A :class:`Prediction`.

        Raises:
            ValueError: empty cloud, wrong shapes, NaN/Inf, missing normals, missing/unknown
                category, an option of another task; work or memory beyond the allocation limit (``num_votes``
                subsets or views, a scene's peak: :func:`gridify.scene_inference.check_scene_cost`), named with the
                figure before anything runs. TypeError: unsupported input type, an option no task takes.
        """
        where = f"{type(self).__name__}.predict"
        stated = up_axis is not None
        up_axis = check_up_axis(where, up_axis) if stated else "z"
        options = self._options(options, "predict", where)
        hint = not stated and self.task_predictor.hints_up_axis
        if hint and isinstance(points, (str, os.PathLike)):
            points = read_points(points)  # read once for both readings (errors name the file as predict would)
        pred = self.task_predictor.predict(self, points, normals, up_axis=up_axis, where=where, **options)
        if hint:
            self._hint_up_axis(pred, points, normals, options, where)
        return pred

    def _hint_up_axis(self, pred: Prediction, points: Any, normals: Any, options: Dict[str, Any], where: str) -> None:
        """Read the cloud y up too and add the task predictor's hint (if any) to ``pred.hints``."""
        y_up = self.task_predictor.predict(self, points, normals, up_axis="y", where=where, **options)
        text = self.task_predictor.up_axis_hint(pred, y_up)
        if text:
            pred.hints.append(text)

    @property
    def whole_scenes(self) -> bool:
        """Whether the model labels metric scenes (:attr:`gridify.tasks.Task.whole_scenes`)."""
        return get_task(self.task).whole_scenes

    @property
    def scene_features(self) -> Tuple[str, ...]:
        """The names of the per-point features a scene segmenter was trained with (``x``'s columns)."""
        info = self.meta.get("info") or {}
        names = info.get("features")
        if names is None:
            names = ((self.meta.get("config") or {}).get("data") or {}).get("features")
        if names is None:
            names = () if self.in_channels == 0 else None
        if names is None:
            fail(
                "Predictor",
                f"the checkpoint does not record the scene features of its x ({self.in_channels} "
                f"columns, data.features); in Python, pass features=[N, {self.in_channels}] to predict (gridify "
                f"predict builds them from the recorded names only)",
            )
        return tuple([names] if isinstance(names, str) else names)

    # ---- features ----------------------------------------------------------------------
    def _embed_dense(self, pos: Tensor, x: Tensor) -> Tensor:
        embed = getattr(self.model, "embed", None)
        if callable(embed):
            return embed(pos, x)
        return self.model.trunk(pos, x).flatten(2).mean(-1)

    @torch.no_grad()
    def embed(
        self,
        points: PointsLike,
        normals: Any = None,
        *,
        num_votes: int = 4,
        seed: int = 0,
        batch_size: int = 8,
        estimate_normals: bool = False,
    ) -> np.ndarray:
        """One descriptor per cloud: the pooled backbone grid features ``[C]``.

        For a classifier this is ``model.embed`` (the input of its MLP head, ``[2C]`` with
        ``pool="meanmax"``); for a segmenter the mean of its backbone grid. Subsets are drawn
        and averaged exactly as :meth:`predict` does for a classifier.
        """
        where = f"{type(self).__name__}.embed"
        check_predict_arguments(where, num_votes, batch_size, seed, estimate_normals)
        cloud = self.prepare(points, normals, estimate_normals=estimate_normals, where=where)
        with evaluating(self.model), all_or_nothing(self.model):
            check_batch_sizes(self, where, len(cloud["pos"]), num_votes, batch_size, count=num_votes)
            return pooled(self, cloud, num_votes, seed, batch_size, self._embed_dense)

    @torch.no_grad()
    def inspect(
        self, points: PointsLike, normals: Any = None, *, up_axis: Optional[str] = None, **options: Any
    ) -> Dict[str, Any]:
        """Everything :func:`gridify.vis.show` draws, in the normalized frame (z up: ``up_axis`` as in
        :meth:`predict`; the options: the task's :attr:`~gridify.api.task_predictors.TaskPredictor.inspect_options`,
        as in :meth:`predict`: ``seed``, ``estimate_normals``, ``category``, ``num_votes`` (the prediction's subsets
        or views), and a scene segmenter's ``progress`` and ``max_fragments``).

        Returns a dict: ``pos`` ``[N, 3]`` (all points, normalized), ``prediction``
        (:class:`Prediction`), ``grid`` ``[C, R, R, R]`` (the *gridification* output, i.e. the
        learned grid before the backbone) and ``graph`` (its :class:`BipartiteGraph`), both for
        one canonical subset/chunk of ``num_points`` points (the whole cloud when smaller).
        A scene segmenter: ``pos`` in metres, every point labelled, ``grid`` and ``graph`` None
        (each crop has its own grid box). ``up_axis`` not given: z up, and the prediction carries
        :meth:`predict`'s y-up hint where a classifier's y-up reading is clearly more confident.
        """
        where = f"{type(self).__name__}.inspect"
        stated = up_axis is not None
        up_axis = check_up_axis(where, up_axis) if stated else "z"
        options = self._options(options, "inspect", where)
        hint = not stated and self.task_predictor.hints_up_axis
        if hint and isinstance(points, (str, os.PathLike)):
            points = read_points(points)  # read once for both readings
        res = self.task_predictor.inspect(self, points, normals, up_axis=up_axis, where=where, **options)
        if hint:
            self._hint_up_axis(res["prediction"], points, normals, options, where)
        return res

    def _chunks(self, cloud: Dict[str, Any], seed: int) -> Any:
        """The chunks a part segmenter labels (:func:`gridify.api.task_predictors.chunks`)."""
        return chunks(self.num_points, cloud, seed)
