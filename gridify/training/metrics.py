"""Forward passes and metrics shared by training (Lightning) and plain evaluation.

Thin functions over the task objects of :mod:`gridify.tasks`, which own the loss, the metrics
and their presentation: classification is scored by overall accuracy (OA) and mean class
accuracy (mAcc), with an optional confusion matrix; part segmentation by instance and class
mIoU, the argmax restricted to the parts of each shape's category; scene segmentation by
mIoU / OA / mAcc over whole scenes (ignored points, label -1, count nowhere). Every metric also
tracks the mean cross-entropy and the number of clouds scored. The metrics are torchmetrics
objects, so under DDP they are reduced over all processes. No Lightning import.

Shapes:
    logits ``[B, classes]`` (classification) or ``[sum N_i, classes]`` (per point); y alike.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

import torch

from gridify.tasks import VOTE_SCALE, Task, get_task

__all__ = [
    "forward_batch",
    "vote_logits",
    "make_metrics",
    "update_metrics",
    "compute_metrics",
    "evaluate_model",
    "format_metrics",
    "eval_settings",
    "VOTE_SCALE",
]

TaskLike = Any  # a task name or a gridify.tasks.Task


def forward_batch(model: torch.nn.Module, batch: Dict[str, Any], task: TaskLike) -> torch.Tensor:
    """Logits of a collated batch: ``[B, classes]`` or ``[N, classes]`` (:meth:`gridify.tasks.Task.forward_batch`)."""
    return get_task(task).forward_batch(model, batch)


def vote_logits(
    model: torch.nn.Module, batch: Dict[str, Any], task: TaskLike, votes: int, seed: int = 0, **settings: Any
) -> torch.Tensor:
    r"""Test-time voting: log of the mean softmax over ``votes`` views of every cloud.

        p(y | P) = 1/V sum_v softmax(f(fit(S_v P))),    S_0 = I,  S_v = diag(s),  s ~ U(0.85, 1.15)^3

    (:meth:`gridify.tasks.Task.eval_logits`; a scene task scores whole scenes with the
    ``settings`` ``voxel_size`` / ``max_points``). ``votes=1``: the plain forward pass.

    Shapes:
        returns ``[B, classes]`` or ``[N, classes]`` (log-probabilities for ``votes > 1``)
    """
    return get_task(task).eval_logits(model, batch, votes=votes, seed=seed, **settings)


def make_metrics(task: TaskLike, info: Dict[str, Any], confusion: bool = False) -> torch.nn.ModuleDict:
    """The metrics of ``task`` for a dataset described by ``info`` (see :func:`~.data.dataset_info`)."""
    return get_task(task).make_metrics(info, confusion=confusion)


def update_metrics(
    metrics: torch.nn.ModuleDict, task: TaskLike, logits: torch.Tensor, batch: Dict[str, Any], loss: torch.Tensor
) -> None:
    """Add one batch (its logits and mean loss) to ``metrics``."""
    get_task(task).update_metrics(metrics, logits, batch, loss)


def compute_metrics(
    metrics: torch.nn.ModuleDict, task: TaskLike, category_names: Optional[Sequence[str]] = None
) -> Tuple[Dict[str, float], Dict[str, Any]]:
    """(scalar metrics, extras such as the confusion matrix / per-category IoU); resets the metrics.

    ``per_category_iou`` (segmentation) / ``per_class_iou`` (scenes) map each name
    (``category_names``, else its index) to its IoU (None: nothing of it was scored).
    """
    return get_task(task).compute_metrics(metrics, category_names)


def eval_settings(info: Dict[str, Any]) -> Dict[str, Any]:
    """What a scene task's whole-scene evaluation takes from the dataset info (``voxel_size``,
    ``max_points``, recorded by :func:`~.data.inference_info`); empty for the other tasks."""
    return {k: info[k] for k in ("voxel_size", "max_points") if k in info}


@torch.no_grad()
def evaluate_model(
    model: torch.nn.Module,
    loader: Iterable[Dict[str, Any]],
    task: TaskLike,
    info: Dict[str, Any],
    device: torch.device | str = "cpu",
    progress: bool = False,
    votes: int = 1,
    settings: Optional[Dict[str, Any]] = None,
) -> Tuple[Dict[str, float], Dict[str, Any]]:
    """Plain evaluation loop (no Lightning): the metrics of ``model`` over ``loader`` (with
    ``votes`` test-time views per cloud, see :func:`vote_logits`; ``settings``: a scene task's
    ``voxel_size`` / ``max_points``, by default :func:`eval_settings` of ``info``)."""
    t: Task = get_task(task)
    model.eval().to(device)
    metrics = t.make_metrics(info, confusion=t.test_confusion).to(device)
    it = loader
    if progress:
        try:
            from tqdm.auto import tqdm

            it = tqdm(loader, desc="evaluating", leave=False)
        except ImportError:
            pass
    for batch in it:
        batch = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
        logits = t.eval_logits(model, batch, votes=votes, **(eval_settings(info) if settings is None else settings))
        t.update_metrics(metrics, logits, batch, t.loss(logits, batch["y"]))
    return t.compute_metrics(metrics, t.result_names(info) or info.get("category_names"))


def format_metrics(task: TaskLike, metrics: Dict[str, float]) -> str:
    """``OA 91.20 %, mAcc 88.50 %``, ``instance mIoU 84.10, class mIoU 80.30`` or ``mIoU 61.30, OA ...``."""
    return get_task(task).format_metrics(metrics)
