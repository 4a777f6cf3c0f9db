"""Forward passes and metrics shared by training (Lightning) and plain evaluation.

Classification is scored by overall accuracy (OA) and mean class accuracy (mAcc), with an
optional confusion matrix; part segmentation by instance and class mIoU, the argmax restricted
to the parts of each shape's category. Every metric also tracks the mean cross-entropy and the
number of clouds scored. The metrics are torchmetrics objects, so under DDP they are reduced
over all processes. No Lightning import.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from gridify.metrics import MeanClassAccuracy, OverallAccuracy, ShapeNetPartIoU

__all__ = ["forward_batch", "vote_logits", "make_metrics", "update_metrics", "compute_metrics", "evaluate_model",
           "format_metrics", "VOTE_SCALE"]

#: Range of the per-axis scale factors of test-time voting (as the training ``scale`` augmentation).
VOTE_SCALE = (0.85, 1.15)


def forward_batch(model: torch.nn.Module, batch: Dict[str, Any], task: str) -> torch.Tensor:
    """Logits of a collated batch: ``[B, classes]`` or ``[N, parts]``."""
    x = batch.get("x")
    # a graph built ahead by the loader's workers (GraphCollate) for exactly these points
    extra = {"graph": batch["graph"]} if batch.get("graph") is not None else {}
    if task == "segmentation" and getattr(model, "num_categories", 0):
        return model(batch["pos"], x, batch["batch"], category=batch["category"], **extra)
    return model(batch["pos"], x, batch["batch"], **extra)


def vote_logits(model: torch.nn.Module, batch: Dict[str, Any], task: str, votes: int, seed: int = 0) -> torch.Tensor:
    r"""Test-time voting: log of the mean softmax over ``votes`` views of every cloud.

        p(y | P) = 1/V sum_v softmax(f(fit(S_v P))),    S_0 = I,  S_v = diag(s),  s ~ U(0.85, 1.15)^3

    ``fit`` shrinks a view that leaves ``[-1, 1]^3`` back into it (as the training pipeline does);
    the coordinates inside the features ``x`` (its first three columns) are scaled alike, normals
    are left alone. The views depend only on ``seed`` and the vote index. ``votes=1``: the plain
    forward pass.

    Shapes:
        returns ``[B, classes]`` or ``[N, parts]`` (log-probabilities for ``votes > 1``)
    """
    if votes <= 1:
        return forward_batch(model, batch, task)
    pos, bidx = batch["pos"], batch["batch"]
    num_clouds = int(bidx.max()) + 1 if bidx.numel() else 0
    g = torch.Generator().manual_seed(int(seed))
    total = None
    for v in range(votes):
        scale = torch.ones(num_clouds, 3) if v == 0 else torch.empty(num_clouds, 3).uniform_(*VOTE_SCALE, generator=g)
        p = pos * scale.to(pos)[bidx]
        extent = torch.zeros(num_clouds, dtype=p.dtype, device=p.device).scatter_reduce_(
            0, bidx, p.abs().amax(1), "amax", include_self=True)
        p = p / extent.clamp_min(1.0)[bidx, None]
        view = dict(batch, pos=p, graph=None)  # another view: a prebuilt graph does not fit it
        if batch.get("x") is not None and batch["x"].size(-1) >= 3:
            view["x"] = torch.cat([p, batch["x"][:, 3:]], 1)
        probs = torch.softmax(forward_batch(model, view, task).float(), -1)
        total = probs if total is None else total + probs
    return torch.log(total / votes)


def make_metrics(task: str, info: Dict[str, Any], confusion: bool = False) -> torch.nn.ModuleDict:
    """The metrics of ``task`` for a dataset described by ``info`` (see :func:`~.data.dataset_info`)."""
    from torchmetrics import MeanMetric, SumMetric

    metrics: Dict[str, Any] = {"loss": MeanMetric(), "count": SumMetric()}
    if task == "classification":
        n = int(info["num_outputs"])
        metrics.update(oa=OverallAccuracy(), macc=MeanClassAccuracy(n))
        if confusion:
            from torchmetrics.classification import MulticlassConfusionMatrix

            metrics["confusion"] = MulticlassConfusionMatrix(num_classes=n)
    else:
        metrics["iou"] = ShapeNetPartIoU(info["category_to_parts"])
    return torch.nn.ModuleDict(metrics)


def update_metrics(metrics: torch.nn.ModuleDict, task: str, logits: torch.Tensor, batch: Dict[str, Any],
                   loss: torch.Tensor) -> None:
    """Add one batch (its logits and mean loss) to ``metrics``."""
    y = batch["y"]
    metrics["loss"].update(loss.detach().float(), weight=y.numel())
    metrics["count"].update(float(batch["ptr"].numel() - 1 if "ptr" in batch else int(batch["batch"].max()) + 1))
    logits = logits.detach().float()
    if task == "classification":
        metrics["oa"].update(logits, y)
        metrics["macc"].update(logits, y)
        if "confusion" in metrics:
            metrics["confusion"].update(logits.argmax(1), y)
    else:
        # the metric restricts the argmax to the parts of each shape's category
        metrics["iou"].update(logits, y, batch["category"], batch["batch"])


def compute_metrics(metrics: torch.nn.ModuleDict, task: str, category_names: Optional[Sequence[str]] = None
                    ) -> Tuple[Dict[str, float], Dict[str, Any]]:
    """(scalar metrics, extras such as the confusion matrix / per-category IoU); resets the metrics.

    ``per_category_iou`` maps each category's name (``category_names``, else its index) to its mean
    IoU over the category's shapes (None: no shape of it was scored).
    """
    out: Dict[str, float] = {"loss": float(metrics["loss"].compute())}
    extra: Dict[str, Any] = {"num_scored": int(metrics["count"].compute())}  # clouds, over all processes
    if task == "classification":
        out["oa"] = float(metrics["oa"].compute())
        out["macc"] = float(metrics["macc"].compute())
        if "confusion" in metrics:
            extra["confusion_matrix"] = metrics["confusion"].compute().cpu().long().tolist()
    else:
        res = metrics["iou"].compute()
        out["instance_miou"] = float(res["instance_miou"])
        out["class_miou"] = float(res["class_miou"])
        ious = [None if math.isnan(v) else float(v) for v in res["per_category"].reshape(-1).tolist()]
        names = list(category_names) if category_names is not None and len(category_names) == len(ious) else range(
            len(ious))
        extra["per_category_iou"] = {str(n): v for n, v in zip(names, ious)}
    for m in metrics.values():
        m.reset()
    return out, extra


@torch.no_grad()
def evaluate_model(model: torch.nn.Module, loader: Iterable[Dict[str, Any]], task: str, info: Dict[str, Any],
                   device: torch.device | str = "cpu", progress: bool = False, votes: int = 1
                   ) -> Tuple[Dict[str, float], Dict[str, Any]]:
    """Plain evaluation loop (no Lightning): the metrics of ``model`` over ``loader`` (with
    ``votes`` test-time views per cloud, see :func:`vote_logits`)."""
    model.eval().to(device)
    metrics = make_metrics(task, info, confusion=(task == "classification")).to(device)
    it = loader
    if progress:
        try:
            from tqdm.auto import tqdm

            it = tqdm(loader, desc="evaluating", leave=False)
        except ImportError:
            pass
    for batch in it:
        batch = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
        logits = vote_logits(model, batch, task, votes)
        loss = F.cross_entropy(logits.float(), batch["y"])
        update_metrics(metrics, task, logits, batch, loss)
    return compute_metrics(metrics, task, info.get("category_names"))


def format_metrics(task: str, metrics: Dict[str, float]) -> str:
    """``OA 91.20 %, mAcc 88.50 %`` or ``instance mIoU 84.10, class mIoU 80.30``."""
    if task == "classification":
        return f"OA {100 * metrics['oa']:.2f} %, mAcc {100 * metrics['macc']:.2f} %"
    return f"instance mIoU {100 * metrics['instance_miou']:.2f}, class mIoU {100 * metrics['class_miou']:.2f}"
