r"""What a model predicts, as objects: :class:`Task` and the registered tasks (:data:`~gridify.registry.TASKS`).

A task owns everything that depends on *what* is predicted, so adding one touches one file:
the forward pass of a collated batch, the loss, the metrics (their keys, update, computation
and one-line summary), the primary metric that picks the best checkpoint, the metric curves
of ``metrics.png``, the shape of a prediction (``dense``: one label per point, else one per
cloud), whether it can be exported, the datasets that hold only its data and what the model
needs to know about a dataset. Find one with :func:`get_task` (an unknown name raises
:class:`~gridify.registry.UnknownNameError` listing the registered tasks)::

    task = get_task("scene_segmentation")
    loss = task.loss(logits, y, weight=class_weights(counts, "inverse"))

Tasks:

* ``classification``: one label per cloud; OA and mAcc (+ confusion matrix); primary ``oa``.
* ``segmentation``: ShapeNet-Part style part segmentation, the argmax restricted to the parts of
  each shape's category; instance and class mIoU; primary ``instance_miou``.
* ``scene_segmentation``: per-point semantic labels of rooms and LiDAR scans (metres), ``-1`` =
  ignore; the loss is

      L = sum_i w_{y_i} CE(z_i, y_i) / sum_i w_{y_i}      over the points i with y_i != -1

  (``w = 1`` without class weights, :func:`class_weights`), plus ``lovasz`` times the Lovász-softmax
  loss (:func:`lovasz_softmax`, ``optim.lovasz_weight``) when it is above 0; metrics from
  :class:`gridify.metrics.SegmentationIoU`: mIoU, OA, mAcc over the classes present in the
  target, per-class IoU and the confusion matrix; primary ``miou``. Validation and test score
  whole scenes (:meth:`SceneSegmentationTask.eval_logits`, through
  :func:`gridify.scene_inference.predict_scene`).
* ``sequence_classification``: one label per sequence of point clouds observed at (irregular)
  times (the temporal model ``temporal_cfc``, the dataset ``dynamic_shapes``); items are
  sequences, batched by :func:`gridify.datasets.collate_sequences` (:meth:`Task.collate`);
  metrics as classification; primary ``oa``.

Class weights of ``optim.class_weights`` (:func:`class_weights`), from the training label counts n_c:

    inverse:       w_c = 1 / n_c            inverse_sqrt:  w_c = 1 / sqrt(n_c)
    then w_c <- w_c * |{c : n_c > 0}| / sum_{c : n_c > 0} w_c   (mean 1 over classes with points),
    and w_c = 0 for classes without points.

Shapes:
    classification: logits ``[B, classes]``, y ``[B]``; segmentation / scene_segmentation: logits
    ``[sum N_i, classes]``, y ``[sum N_i]``; sequence_classification: pos ``[B, T, N, 3]``, times
    ``[B, T]``, mask ``[B, T]`` -> logits ``[B, classes]``, y ``[B]``; class_weights: counts ``[C]`` ->
    ``[C]`` float32.

Only torch and torchmetrics are imported (no Lightning, no matplotlib).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ._checks import check_choice, fail
from .registry import TASKS

__all__ = [
    "Task",
    "ClassificationTask",
    "SegmentationTask",
    "SceneSegmentationTask",
    "SequenceClassificationTask",
    "get_task",
    "task_names",
    "lovasz_softmax",
    "lovasz_softmax_reference",
    "task_of_dataset",
    "class_weights",
    "class_weights_reference",
    "CLASS_WEIGHTS",
    "VOTE_SCALE",
]

#: ``optim.class_weights`` choices (see :func:`class_weights`)
CLASS_WEIGHTS = ("none", "inverse", "inverse_sqrt")
#: Range of the per-axis scale factors of test-time voting (as the training ``scale`` augmentation).
VOTE_SCALE = (0.85, 1.15)


class Task:
    """What a model predicts: loss, metrics and their presentation (subclasses set the attributes).

    Attributes:
        name: the registry name. dense: one label per point (else one per cloud).
        primary_metric: the validation metric (key of :meth:`compute_metrics`) that picks the best
            checkpoint. plot_metrics: the ``val_*`` curves of ``metrics.png``.
        exportable / export_reason: whether ``gridify export`` has a route, and why not.
        normalized: clouds live in the unit box (augmented clouds are fitted back into
            ``[-1, 1]^3``); False: metres, left as they are.
        datasets: registry names of the datasets that hold only this task's data.
        models: registry names of models made for this task that do not declare a ``task`` attribute (what
            :func:`gridify.checkpoint.model_task` records in a checkpoint for them).
        model_tasks: the tasks of models (:func:`gridify.checkpoint.model_task`) that serve it.
        model_kind: what the command line calls its models (its routes' facts,
            ``gridify._commands.MODEL_KINDS``): ``classifier``, ``part-segmenter`` or ``scene-segmenter``.
        test_confusion: the test metrics include the confusion matrix.
        whole_scenes: clouds in metres, scored whole through fragments and crops
            (:mod:`gridify.scene_inference`; ``Predictor.predict`` builds the training features).
        predictor: ``gridify.load`` (the :class:`gridify.Predictor`, one cloud in, labels out) serves
            its models.
        predicted_by: the name of the predictor that runs its models in ``Predictor.predict`` (the
            registry ``gridify.api.PREDICTORS``: ``classification``, ``segmentation``,
            ``scene_segmentation``); empty: the task's own name. A new task that predicts like an
            existing one names that one here; one with a way of its own registers a predictor under its name.
    """

    name: str = ""
    dense: bool = False
    primary_metric: str = ""
    plot_metrics: Tuple[str, ...] = ()
    exportable: bool = False
    export_reason: str = ""
    normalized: bool = True
    datasets: Tuple[str, ...] = ()
    models: Tuple[str, ...] = ()
    model_tasks: Tuple[str, ...] = ()
    model_kind: str = "classifier"
    whole_scenes: bool = False
    test_confusion: bool = False
    predictor: bool = True
    predicted_by: str = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dense={self.dense}, primary_metric={self.primary_metric!r})"

    # ---- batches, forward and loss ----------------------------------------------------------
    def collate(self, items: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
        """One batch of dataset items (:func:`gridify.datasets.collate_points`: the clouds concatenated
        with a ``batch`` vector); the DataLoaders of training and evaluation use it."""
        from .datasets import collate_points

        return collate_points(items)

    def num_items(self, batch: Dict[str, Any]) -> int:
        """The clouds (sequences, scenes) in a collated batch."""
        return int(batch["ptr"].numel() - 1 if "ptr" in batch else int(batch["batch"].max()) + 1)

    def forward_batch(self, model: torch.nn.Module, batch: Dict[str, Any]) -> torch.Tensor:
        """Logits of a collated batch (a graph the loader's workers built ahead goes with it)."""
        extra = {"graph": batch["graph"]} if batch.get("graph") is not None else {}
        return model(batch["pos"], batch.get("x"), batch["batch"], **extra)

    def loss(
        self,
        logits: torch.Tensor,
        y: torch.Tensor,
        *,
        label_smoothing: float = 0.0,
        weight: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Mean cross-entropy of the logits (in float32), optionally class-weighted."""
        w = None if weight is None else weight.to(device=logits.device, dtype=torch.float32)
        return F.cross_entropy(logits.float(), y, weight=w, label_smoothing=float(label_smoothing))

    def eval_logits(
        self, model: torch.nn.Module, batch: Dict[str, Any], *, votes: int = 1, seed: int = 0, **settings: Any
    ) -> torch.Tensor:
        r"""Evaluation logits: log of the mean softmax over ``votes`` views of every cloud.

            p(y | P) = 1/V sum_v softmax(f(fit(S_v P))),    S_0 = I,  S_v = diag(s),  s ~ U(0.85, 1.15)^3

        ``fit`` shrinks a view that leaves ``[-1, 1]^3`` back into it (as the training pipeline
        does); the coordinates inside ``x`` (its first three columns) are scaled alike, normals
        are left alone. The views depend only on ``seed`` and the vote index. ``votes=1``: the
        plain forward pass. ``settings``: what other tasks need (ignored here).
        """
        if votes <= 1:
            return self.forward_batch(model, batch)
        pos, bidx = batch["pos"], batch["batch"]
        num_clouds = int(bidx.max()) + 1 if bidx.numel() else 0
        g = torch.Generator().manual_seed(int(seed))
        total = None
        for v in range(votes):
            scale = (
                torch.ones(num_clouds, 3) if v == 0 else torch.empty(num_clouds, 3).uniform_(*VOTE_SCALE, generator=g)
            )
            p = pos * scale.to(pos)[bidx]
            extent = torch.zeros(num_clouds, dtype=p.dtype, device=p.device).scatter_reduce_(
                0, bidx, p.abs().amax(1), "amax", include_self=True
            )
            p = p / extent.clamp_min(1.0)[bidx, None]
            view = dict(batch, pos=p, graph=None)  # another view: a prebuilt graph does not fit it
            if batch.get("x") is not None and batch["x"].size(-1) >= 3:
                view["x"] = torch.cat([p, batch["x"][:, 3:]], 1)
            probs = torch.softmax(self.forward_batch(model, view).float(), -1)
            total = probs if total is None else total + probs
        return torch.log(total / votes)

    # ---- data ------------------------------------------------------------------------------
    def dataset_info(self, ds: Any) -> Dict[str, Any]:
        """What the model and the metrics need to know about dataset ``ds`` (plain values)."""
        raise NotImplementedError

    def model_kwargs(self, info: Dict[str, Any]) -> Dict[str, Any]:
        """Model arguments the data decides besides ``in_channels`` / ``num_classes``."""
        return {}

    def result_names(self, info: Dict[str, Any]) -> Optional[Sequence[str]]:
        """The names :meth:`compute_metrics` gives its per-item results (categories, classes)."""
        return None

    # ---- metrics -----------------------------------------------------------------------------
    def make_metrics(self, info: Dict[str, Any], confusion: bool = False) -> torch.nn.ModuleDict:
        """The metrics of this task for a dataset described by ``info`` (``loss`` and ``count`` + the task's)."""
        from torchmetrics import MeanMetric, SumMetric

        return torch.nn.ModuleDict({"loss": MeanMetric(), "count": SumMetric(), **self._metrics(info, confusion)})

    def _metrics(self, info: Dict[str, Any], confusion: bool) -> Dict[str, Any]:
        raise NotImplementedError

    def update_metrics(
        self, metrics: torch.nn.ModuleDict, logits: torch.Tensor, batch: Dict[str, Any], loss: torch.Tensor
    ) -> None:
        """Add one batch (its logits and mean loss) to ``metrics``."""
        y = batch["y"]
        metrics["loss"].update(loss.detach().float(), weight=self._loss_weight(y))
        metrics["count"].update(float(self.num_items(batch)))
        self._update(metrics, logits.detach().float(), batch)

    def _loss_weight(self, y: torch.Tensor) -> int:
        """The number of targets the batch's mean loss averages."""
        return int(y.numel())

    def _update(self, metrics: torch.nn.ModuleDict, logits: torch.Tensor, batch: Dict[str, Any]) -> None:
        raise NotImplementedError

    def compute_metrics(
        self, metrics: torch.nn.ModuleDict, category_names: Optional[Sequence[str]] = None
    ) -> Tuple[Dict[str, float], Dict[str, Any]]:
        """(scalar metrics, extras such as the confusion matrix / per-item IoU); resets the metrics.

        ``category_names``: the names of the per-item results (:meth:`result_names`), else indices.
        """
        out: Dict[str, float] = {"loss": float(metrics["loss"].compute())}
        extra: Dict[str, Any] = {"num_scored": int(metrics["count"].compute())}  # clouds, over all processes
        self._compute(metrics, category_names, out, extra)
        for m in metrics.values():
            m.reset()
        return out, extra

    def _compute(
        self, metrics: torch.nn.ModuleDict, names: Optional[Sequence[str]], out: Dict[str, float], extra: Dict[str, Any]
    ) -> None:
        raise NotImplementedError

    def format_metrics(self, values: Dict[str, float]) -> str:
        """The metrics in one line (``OA 91.20 %, mAcc 88.50 %``)."""
        raise NotImplementedError

    def scored_nothing(self, values: Dict[str, float], extra: Dict[str, Any]) -> str:
        """Why metrics (of :meth:`compute_metrics`, or a whole-scene evaluation) measured nothing, or ``''``: no
        item was scored (``extra['num_scored']`` or ``extra['num_scored_points']`` is 0), or the primary metric is
        NaN or missing (no labelled point or shape). An evaluation or a run that measured nothing fails with it
        instead of reporting 0.00 or NaN as a result."""
        if extra.get("num_scored") == 0:
            return "no sample was scored"
        if extra.get("num_scored_points") == 0:
            return "no labelled point was scored"
        value = values.get(self.primary_metric)
        if not isinstance(value, (int, float)) or math.isnan(value):
            return f"{self.primary_metric} is undefined: no labelled point or sample was scored"
        return ""


def _named(values: Sequence[float], names: Optional[Sequence[str]]) -> Dict[str, Optional[float]]:
    """``{name: value}`` (NaN -> None), named by ``names`` when they match in number, else by index."""
    vals = [None if math.isnan(v) else float(v) for v in values]
    keys = list(names) if names is not None and len(names) == len(vals) else range(len(vals))
    return {str(k): v for k, v in zip(keys, vals)}


@TASKS.register("classification")
class ClassificationTask(Task):
    """One label per cloud: overall and mean class accuracy (and, for tests, the confusion matrix)."""

    name = "classification"
    primary_metric = "oa"
    plot_metrics = ("val_oa", "val_macc")
    exportable = True
    datasets = ("modelnet",)
    models = ("gridified_classifier", "pointnet2_classifier", "point_ckconv_classifier")
    model_tasks = ("classification",)
    test_confusion = True

    def dataset_info(self, ds: Any) -> Dict[str, Any]:
        names = [str(c) for c in ds.class_names]
        return {"num_outputs": len(names), "class_names": names}

    def _metrics(self, info: Dict[str, Any], confusion: bool) -> Dict[str, Any]:
        n = int(info["num_outputs"])
        from .metrics import MeanClassAccuracy, OverallAccuracy  # torchmetrics: not at import time

        out: Dict[str, Any] = {"oa": OverallAccuracy(), "macc": MeanClassAccuracy(n)}
        if confusion:
            from torchmetrics.classification import MulticlassConfusionMatrix

            out["confusion"] = MulticlassConfusionMatrix(num_classes=n)
        return out

    def _update(self, metrics: torch.nn.ModuleDict, logits: torch.Tensor, batch: Dict[str, Any]) -> None:
        y = batch["y"]
        metrics["oa"].update(logits, y)
        metrics["macc"].update(logits, y)
        if "confusion" in metrics:
            metrics["confusion"].update(logits.argmax(1), y)

    def _compute(
        self, metrics: torch.nn.ModuleDict, names: Optional[Sequence[str]], out: Dict[str, float], extra: Dict[str, Any]
    ) -> None:
        out["oa"] = float(metrics["oa"].compute())
        out["macc"] = float(metrics["macc"].compute())
        if "confusion" in metrics:
            extra["confusion_matrix"] = metrics["confusion"].compute().cpu().long().tolist()

    def format_metrics(self, values: Dict[str, float]) -> str:
        return f"OA {100 * values['oa']:.2f} %, mAcc {100 * values['macc']:.2f} %"


@TASKS.register("segmentation")
class SegmentationTask(Task):
    """ShapeNet-Part style part segmentation: instance / class mIoU, the argmax restricted to the
    parts of each shape's category (models trained with categories get ``category=``)."""

    name = "segmentation"
    dense = True
    primary_metric = "instance_miou"
    plot_metrics = ("val_instance_miou", "val_class_miou")
    exportable = True
    datasets = ("shapenet",)
    models = ("gridified_segmenter", "pointnet2_segmenter", "point_ckconv_segmenter")
    model_tasks = ("segmentation",)
    model_kind = "part-segmenter"

    def forward_batch(self, model: torch.nn.Module, batch: Dict[str, Any]) -> torch.Tensor:
        if getattr(model, "num_categories", 0):
            extra = {"graph": batch["graph"]} if batch.get("graph") is not None else {}
            return model(batch["pos"], batch.get("x"), batch["batch"], category=batch["category"], **extra)
        return super().forward_batch(model, batch)

    def dataset_info(self, ds: Any) -> Dict[str, Any]:
        parts = [list(map(int, p)) for p in ds.category_to_parts]
        cat_names = [str(c) for c in (getattr(ds, "category_names", None) or getattr(ds, "class_names"))]
        num_parts = int(getattr(ds, "num_parts", max(max(p) for p in parts) + 1))
        part_names = getattr(ds, "part_names", None)
        part_names = [str(p) for p in part_names] if part_names is not None else [f"part{i}" for i in range(num_parts)]
        return {
            "num_outputs": num_parts,
            "class_names": part_names,
            "category_names": cat_names,
            "category_to_parts": parts,
            "num_categories": len(parts),
        }

    def model_kwargs(self, info: Dict[str, Any]) -> Dict[str, Any]:
        return {"num_categories": info["num_categories"]}

    def result_names(self, info: Dict[str, Any]) -> Optional[Sequence[str]]:
        return info.get("category_names")

    def _metrics(self, info: Dict[str, Any], confusion: bool) -> Dict[str, Any]:
        from .metrics import ShapeNetPartIoU  # torchmetrics: not at import time

        return {"iou": ShapeNetPartIoU(info["category_to_parts"])}

    def _update(self, metrics: torch.nn.ModuleDict, logits: torch.Tensor, batch: Dict[str, Any]) -> None:
        # the metric restricts the argmax to the parts of each shape's category
        metrics["iou"].update(logits, batch["y"], batch["category"], batch["batch"])

    def _compute(
        self, metrics: torch.nn.ModuleDict, names: Optional[Sequence[str]], out: Dict[str, float], extra: Dict[str, Any]
    ) -> None:
        res = metrics["iou"].compute()
        out["instance_miou"] = float(res["instance_miou"])
        out["class_miou"] = float(res["class_miou"])
        extra["per_category_iou"] = _named(res["per_category"].reshape(-1).tolist(), names)

    def format_metrics(self, values: Dict[str, float]) -> str:
        return f"instance mIoU {100 * values['instance_miou']:.2f}, class mIoU {100 * values['class_miou']:.2f}"


#: ignored points of a scene (the datasets' ``ignore_index``)
SCENE_IGNORE = -1


@TASKS.register("scene_segmentation")
class SceneSegmentationTask(Task):
    """Per-point semantic labels of scenes in metres (``-1`` = ignore): class-weighted cross-entropy,
    mIoU / OA / mAcc, per-class IoU and the confusion matrix; evaluation scores whole scenes."""

    name = "scene_segmentation"
    dense = True
    primary_metric = "miou"
    plot_metrics = ("val_miou", "val_oa")
    exportable = True
    normalized = False
    datasets = ("scene", "s3dis", "scannet", "semantickitti", "scene_procedural")
    models = ("scene_segmenter",)
    model_tasks = ("scene_segmentation", "segmentation")
    model_kind = "scene-segmenter"
    test_confusion = True
    whole_scenes = True

    def loss(
        self,
        logits: torch.Tensor,
        y: torch.Tensor,
        *,
        label_smoothing: float = 0.0,
        weight: Optional[torch.Tensor] = None,
        lovasz: float = 0.0,
    ) -> torch.Tensor:
        """Cross-entropy over the points whose label is not -1 (0 with the graph kept when there are none),
        plus ``lovasz`` times :func:`lovasz_softmax` of the same points."""
        keep = y != SCENE_IGNORE
        if not bool(keep.any()):
            return logits.float().sum() * 0.0
        w = None if weight is None else weight.to(device=logits.device, dtype=torch.float32)
        loss = F.cross_entropy(
            logits.float(), y, weight=w, ignore_index=SCENE_IGNORE, label_smoothing=float(label_smoothing)
        )
        if lovasz > 0:
            loss = loss + float(lovasz) * lovasz_softmax(logits[keep].float().softmax(-1), y[keep])
        return loss

    def eval_logits(
        self,
        model: torch.nn.Module,
        batch: Dict[str, Any],
        *,
        votes: int = 1,
        seed: int = 0,
        voxel_size: Optional[float] = None,
        max_points: Optional[int] = None,
        **settings: Any,
    ) -> torch.Tensor:
        """Log mean softmax for every point of every whole scene of the batch, each scene cut into
        fragments / crops by :func:`gridify.scene_inference.predict_scene` (``votes`` views)."""
        from .scene_inference import predict_scene

        pos, bidx, x = batch["pos"], batch["batch"], batch.get("x")
        num = int(bidx.max()) + 1 if bidx.numel() else 0
        out = []
        for i in range(num):
            rows = (bidx == i).nonzero().reshape(-1)
            probs = predict_scene(
                model,
                pos[rows],
                None if x is None else x[rows],
                voxel_size=voxel_size,
                max_points=max_points,
                votes=max(1, int(votes)),
                seed=int(seed),
            )
            out.append(probs.to(pos.device).float())
        probs = torch.cat(out, 0) if out else pos.new_zeros(0, 1)
        return torch.log(probs.clamp_min(torch.finfo(torch.float32).tiny))

    def dataset_info(self, ds: Any) -> Dict[str, Any]:
        names = [str(c) for c in ds.class_names]
        info = {
            "num_outputs": len(names),
            "class_names": names,
            "ignore_index": int(getattr(ds, "ignore_index", SCENE_IGNORE)),
        }
        if getattr(ds, "features", None) is not None:  # the columns of x, for predictions on new scans
            info["features"] = [str(f) for f in ds.features]
        return info

    def result_names(self, info: Dict[str, Any]) -> Optional[Sequence[str]]:
        return info.get("class_names")

    def _metrics(self, info: Dict[str, Any], confusion: bool) -> Dict[str, Any]:
        from .metrics import SegmentationIoU  # noqa: PLC0415 (interface (a) of gridify.metrics)

        return {
            "iou": SegmentationIoU(int(info["num_outputs"]), ignore_index=int(info.get("ignore_index", SCENE_IGNORE)))
        }

    def _loss_weight(self, y: torch.Tensor) -> int:
        return int((y != SCENE_IGNORE).sum())

    def _update(self, metrics: torch.nn.ModuleDict, logits: torch.Tensor, batch: Dict[str, Any]) -> None:
        metrics["iou"].update(logits, batch["y"])

    def _compute(
        self, metrics: torch.nn.ModuleDict, names: Optional[Sequence[str]], out: Dict[str, float], extra: Dict[str, Any]
    ) -> None:
        res = metrics["iou"].compute()
        for key in ("miou", "oa", "macc"):
            out[key] = float(res[key])
        extra["per_class_iou"] = _named(res["iou"].reshape(-1).tolist(), names)
        extra["confusion_matrix"] = res["confusion"].cpu().long().tolist()

    def format_metrics(self, values: Dict[str, float]) -> str:
        return f"mIoU {100 * values['miou']:.2f}, OA {100 * values['oa']:.2f} %, mAcc {100 * values['macc']:.2f} %"


@TASKS.register("sequence_classification")
class SequenceClassificationTask(ClassificationTask):
    r"""One label per sequence of point clouds observed at (irregular) times: the metrics of
    classification (OA, mAcc, the test confusion matrix) over sequences.

    Items are sequences (``pos [T_i, N, 3]``, ``times [T_i]``, ``y``), batched by
    :func:`gridify.datasets.collate_sequences` (padded to ``T_max`` with a ``mask``); the model
    (``temporal_cfc``) is called as ``model(pos, times, mask=mask)`` and its sequence logits are
    scored. Test-time views scale a whole sequence (every frame alike, so the motion is kept):

        p(y | S) = 1/V sum_v softmax(f(fit(s_v S))),    s_0 = 1,  s_v ~ U(0.85, 1.15)^3 per sequence
    """

    name = "sequence_classification"
    exportable = False
    export_reason = "the temporal model (temporal_cfc) has no ONNX route"
    datasets = ("dynamic_shapes",)
    models = ()  # temporal_cfc declares its task
    model_tasks = ("sequence_classification",)
    predictor = False

    def collate(self, items: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
        """Sequences padded into one batch (:func:`gridify.datasets.collate_sequences`)."""
        from .datasets import collate_sequences

        return collate_sequences(items)

    def num_items(self, batch: Dict[str, Any]) -> int:
        return int(batch["y"].numel())

    def forward_batch(self, model: torch.nn.Module, batch: Dict[str, Any]) -> torch.Tensor:
        extra = {"x": batch["x"]} if batch.get("x") is not None else {}
        out = model(batch["pos"], batch["times"], mask=batch["mask"], **extra)
        return out.logits if hasattr(out, "logits") else out

    def eval_logits(
        self, model: torch.nn.Module, batch: Dict[str, Any], *, votes: int = 1, seed: int = 0, **settings: Any
    ) -> torch.Tensor:
        """Evaluation logits: log of the mean softmax over ``votes`` scaled views of every sequence."""
        if votes <= 1:
            return self.forward_batch(model, batch)
        pos = batch["pos"]
        g = torch.Generator().manual_seed(int(seed))
        total = None
        for v in range(votes):
            scale = (
                torch.ones(pos.size(0), 3) if v == 0 else torch.empty(pos.size(0), 3).uniform_(*VOTE_SCALE, generator=g)
            )
            p = pos * scale.to(pos)[:, None, None, :]
            p = p / p.abs().amax(dim=(1, 2, 3)).clamp_min(1.0)[:, None, None, None]
            probs = torch.softmax(self.forward_batch(model, dict(batch, pos=p, x=None)).float(), -1)
            total = probs if total is None else total + probs
        return torch.log(total / votes)

    def dataset_info(self, ds: Any) -> Dict[str, Any]:
        info = super().dataset_info(ds)
        for key in ("num_frames", "num_points"):  # what a sequence of the training data looked like
            if isinstance(getattr(ds, key, None), int):
                info[key] = int(getattr(ds, key))
        return info


@functools.lru_cache(maxsize=None)
def _task(cls: type) -> Task:
    return cls()


def get_task(name: Any) -> Task:
    """The task registered as ``name`` (one shared instance per task); an unknown name raises
    :class:`~gridify.registry.UnknownNameError` listing the registered tasks."""
    if isinstance(name, Task):
        return name
    return _task(TASKS.get(name))  # the registry's error names the choices (and a non-string)


def task_names() -> list:
    """The registered task names, in the order they were registered (classification, segmentation, ...)."""
    return TASKS.registered()


def task_of_dataset(dataset_name: str, dataset_cls: Any = None) -> Optional[str]:
    """The task whose data dataset ``dataset_name`` holds only (its class's ``task`` attribute when it
    declares one, else the task listing it in :attr:`Task.datasets`); None: a dataset of any task."""
    declared = getattr(dataset_cls, "task", None)
    if isinstance(declared, str) and declared in TASKS:
        return declared
    return next((n for n in task_names() if dataset_name in get_task(n).datasets), None)


def lovasz_softmax(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    r"""The Lovász-softmax loss (Berman et al., 2018): a convex surrogate of ``1 - IoU`` per class,
    averaged over the classes present in ``labels``.

    For class ``c`` with errors ``e_i = |[y_i = c] - p_ic|`` sorted in decreasing order (``pi``), the
    loss is ``sum_k e_pi(k) * g_k`` with ``g`` the discrete gradient of the Jaccard loss along that
    order, ``J_k = 1 - (|G| - F_k) / (|G| + k - F_k)`` (``G``: the points of class ``c``; ``F_k``: those
    among the first ``k``),
    ``g_1 = J_1``, ``g_k = J_k - J_{k-1}``. :func:`lovasz_softmax_reference` is the same in a loop.

    Shapes:
        probs [N, K] (softmax probabilities), labels [N] in ``0..K-1`` -> scalar
    """
    losses = []
    for c in torch.unique(labels).tolist():
        fg = (labels == c).to(probs.dtype)
        errors = (fg - probs[:, c]).abs()
        errors, order = torch.sort(errors, descending=True)
        fg = fg[order]
        gts = fg.sum()
        inter = gts - fg.cumsum(0)
        union = gts + (1.0 - fg).cumsum(0)
        jaccard = 1.0 - inter / union
        grad = torch.cat([jaccard[:1], jaccard[1:] - jaccard[:-1]])
        losses.append(torch.dot(errors, grad))
    if not losses:
        return probs.sum() * 0.0
    return torch.stack(losses).mean()


def lovasz_softmax_reference(probs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """:func:`lovasz_softmax` by its definition, one point at a time (for tests)."""
    total, classes = probs.new_zeros(()), 0
    for c in sorted(set(labels.tolist())):
        fg = [1.0 if int(v) == c else 0.0 for v in labels]
        errs = [abs(f - float(p)) for f, p in zip(fg, probs[:, c].detach())]
        order = sorted(range(len(errs)), key=lambda i: -errs[i])
        gts, prev, acc, seen_fg = sum(fg), 0.0, probs.new_zeros(()), 0.0
        for k, i in enumerate(order, 1):
            seen_fg += fg[i]
            j = 1.0 - (gts - seen_fg) / (gts + k - seen_fg)
            acc = acc + (fg[i] - probs[i, c]).abs() * (j - prev)
            prev = j
        total, classes = total + acc, classes + 1
    return total / max(classes, 1)


def class_weights(counts: Any, mode: str = "inverse", where: str = "class_weights") -> Optional[torch.Tensor]:
    """Per-class loss weights from the label counts ``counts`` ``[C]`` (see the module docstring).

    ``mode``: ``none`` (None), ``inverse`` or ``inverse_sqrt``. Classes without points weigh 0;
    the others have mean weight 1. Counts must be finite and non-negative, and some class must
    have points.
    """
    check_choice(where, "mode", mode, CLASS_WEIGHTS)
    if mode == "none":
        return None
    c = np.asarray(counts, dtype=np.float64).reshape(-1)
    if c.size == 0 or not np.isfinite(c).all() or (c < 0).any():
        fail(where, f"counts must be a non-empty list of finite non-negative label counts, got {counts!r}")
    present = c > 0
    if not present.any():
        fail(where, "no class has any labelled point: the training split has no labels to weight")
    w = np.zeros_like(c)
    w[present] = 1.0 / (c[present] if mode == "inverse" else np.sqrt(c[present]))
    w[present] *= present.sum() / w[present].sum()
    return torch.from_numpy(w).float()


def class_weights_reference(counts: Sequence[float], mode: str) -> Optional[torch.Tensor]:
    """:func:`class_weights` as a plain loop (the reference the tests compare it with)."""
    if mode == "none":
        return None
    raw = [0.0 if n <= 0 else (1.0 / n if mode == "inverse" else 1.0 / math.sqrt(n)) for n in counts]
    k = sum(1 for n in counts if n > 0)
    total = sum(raw)
    return torch.tensor([r * k / total for r in raw], dtype=torch.float32)
