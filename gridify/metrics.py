"""Classification and part-segmentation metrics as torchmetrics ``Metric`` subclasses.

All states are sums (``dist_reduce_fx="sum"``), so the metrics reduce exactly under DDP and
count every sample, including a partial last batch. Arithmetic is float64.

* :class:`OverallAccuracy` -- correct / total over all samples (OA).
* :class:`MeanClassAccuracy` -- mean over classes of per-class accuracy (mAcc); classes that
  never occur in the targets are left out of the mean.
* :class:`ShapeNetPartIoU` -- ShapeNet-Part instance mIoU (mean over shapes) and class mIoU
  (mean over categories of the per-category mean shape IoU). The argmax is restricted to the
  parts of the shape's (known) category; a part absent from both prediction and label has
  IoU 1.0; per-shape IoU averages over the category's parts.

Every ``update`` validates all its inputs before it changes any state (logits finite and
floating, ids integer, shapes and devices consistent), so a failed update leaves the metric
exactly as it was; state sizes given to a constructor are checked against the allocation limit.

Under DDP, a ``DistributedSampler`` pads the last rank with repeated samples unless the
dataset size divides evenly; for exact test numbers evaluate on one process or with an
unpadded sampler.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Union

import torch
from torch import Tensor
from torchmetrics import Metric

from ._checks import INTEGER_DTYPES, check_alloc, check_finite, check_float, check_int

__all__ = ["OverallAccuracy", "MeanClassAccuracy", "ShapeNetPartIoU"]


def _labels_from(preds: Tensor, where: str, num_classes: Optional[int] = None) -> Tensor:
    """Class ids from logits ``[B, C]`` or ids ``[B]``."""
    if not isinstance(preds, Tensor):
        raise ValueError(f"{where}: preds must be a torch.Tensor, got {type(preds).__name__}")
    if preds.dim() == 2:
        if num_classes is not None and preds.size(1) != num_classes:
            raise ValueError(f"{where}: preds has {preds.size(1)} columns but num_classes={num_classes}")
        check_float(preds, "preds (logits)", where)
        check_finite(preds, "preds", where, dims=("sample", "class"))
        return preds.argmax(dim=1)
    if preds.dim() == 1:
        if preds.dtype not in INTEGER_DTYPES:
            raise ValueError(f"{where}: 1-D preds must be integer class ids, got dtype {preds.dtype}")
        return preds.long()
    raise ValueError(f"{where}: preds must be logits [B, C] or class ids [B], got shape {tuple(preds.shape)}")


def _check_target(target: Tensor, n: int, where: str) -> Tensor:
    if not isinstance(target, Tensor):
        raise ValueError(f"{where}: target must be a torch.Tensor, got {type(target).__name__}")
    target = target.reshape(-1)
    if target.numel() != n:
        raise ValueError(f"{where}: target has {target.numel()} entries but preds has {n} samples")
    if target.dtype not in INTEGER_DTYPES:
        raise ValueError(f"{where}: target must hold integer class ids, got dtype {target.dtype}")
    return target.long()


class OverallAccuracy(Metric):
    """Overall accuracy: correctly classified samples / all samples.

    ``update(preds, target)``; ``compute()`` returns a 0-d float64 tensor (NaN before any update).

    Shapes:
        preds: logits ``[B, C]`` or class ids ``[B]``; target: ``[B]``.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("correct", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor) -> None:
        pred = _labels_from(preds, "OverallAccuracy")
        target = _check_target(target, pred.numel(), "OverallAccuracy").to(pred.device)
        self.correct += (pred == target).sum()
        self.total += target.numel()

    def compute(self) -> Tensor:
        if int(self.total) == 0:
            return torch.tensor(float("nan"), dtype=torch.float64)
        return self.correct.double() / self.total.double()


class MeanClassAccuracy(Metric):
    """Mean over classes of per-class accuracy (classes absent from the targets are skipped).

    ``compute()`` returns a 0-d float64 tensor; :meth:`per_class` the per-class accuracies
    (NaN for absent classes).

    Shapes:
        preds: logits ``[B, C]`` or class ids ``[B]``; target: ``[B]``.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_classes: int, **kwargs) -> None:
        super().__init__(**kwargs)
        check_int("MeanClassAccuracy", "num_classes", num_classes)
        check_alloc("MeanClassAccuracy", f"num_classes={num_classes} (two int64 counts per class)", 16 * num_classes)
        self.num_classes = num_classes
        self.add_state("correct", default=torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("total", default=torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor) -> None:
        pred = _labels_from(preds, "MeanClassAccuracy", self.num_classes)
        target = _check_target(target, pred.numel(), "MeanClassAccuracy").to(pred.device)
        if target.numel() and (int(target.min()) < 0 or int(target.max()) >= self.num_classes):
            raise ValueError(f"MeanClassAccuracy: target ids must be in 0..{self.num_classes - 1}")
        self.total += torch.bincount(target, minlength=self.num_classes)
        self.correct += torch.bincount(target[pred == target], minlength=self.num_classes)

    def per_class(self) -> Tensor:
        total = self.total.double()
        return torch.where(total > 0, self.correct.double() / total.clamp_min(1), torch.full_like(total, float("nan")))

    def compute(self) -> Tensor:
        acc = self.per_class()
        seen = ~torch.isnan(acc)
        if not bool(seen.any()):
            return torch.tensor(float("nan"), dtype=torch.float64)
        return acc[seen].mean()


CategoryParts = Union[Sequence[Sequence[int]], Mapping[int, Sequence[int]]]


class ShapeNetPartIoU(Metric):
    """ShapeNet-Part mIoU: instance mIoU (mean over shapes) and class mIoU.

    Args:
        category_to_parts: the global part ids of each category, as a list indexed by
            category id or a ``{category id: parts}`` mapping (e.g.
            :data:`gridify.datasets.SHAPENET_CATEGORY_TO_PARTS`).
        category_names: optional names used as keys of :meth:`per_category`.

    ``update(preds, target, category, batch=None)`` accepts either

    * dense: ``preds`` ``[B, N, P]`` logits, ``target`` ``[B, N]``, ``category`` ``[B]``; or
    * flat (PyG style): ``preds`` ``[sum N_i, P]`` logits, ``target`` ``[sum N_i]``,
      ``batch`` ``[sum N_i]`` (sorted shape index), ``category`` ``[B]``.

    ``preds`` may also be integer part ids (``[B, N]`` / ``[sum N_i]``), used as given.
    Logits are arg-maxed over the shape's category's parts only.

    ``compute()`` returns ``{"instance_miou", "class_miou", "per_category"}`` (float64; the
    per-category tensor holds NaN for categories without shapes).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, category_to_parts: CategoryParts, category_names: Optional[Sequence[str]] = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        if isinstance(category_to_parts, Mapping):
            keys = sorted(int(k) for k in category_to_parts)
            if keys != list(range(len(keys))):
                raise ValueError(f"ShapeNetPartIoU: category ids must be 0..C-1, got {keys}")
            table = [list(category_to_parts[k]) for k in keys]
        else:
            table = [list(p) for p in category_to_parts]
        if not table or any(len(p) == 0 for p in table):
            raise ValueError("ShapeNetPartIoU: every category needs at least one part")
        if not all(isinstance(i, int) and not isinstance(i, bool) for p in table for i in p):
            raise ValueError("ShapeNetPartIoU: part ids must be integers")
        num_parts = max(max(p) for p in table) + 1
        if min(min(p) for p in table) < 0:
            raise ValueError("ShapeNetPartIoU: part ids must be non-negative")
        check_alloc("ShapeNetPartIoU", f"part ids up to {num_parts - 1} ({len(table)} x {num_parts} part masks)",
                    len(table) * num_parts)
        mask = torch.zeros(len(table), num_parts, dtype=torch.bool)
        for c, parts in enumerate(table):
            mask[c, parts] = True
        if category_names is not None and len(category_names) != len(table):
            raise ValueError(f"ShapeNetPartIoU: {len(category_names)} names for {len(table)} categories")
        self.category_names = list(category_names) if category_names is not None else None
        self.num_categories = len(table)
        self.num_parts = num_parts
        self.register_buffer("part_mask", mask, persistent=False)
        self.add_state("iou_sum", default=torch.zeros(len(table), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("shape_count", default=torch.zeros(len(table), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor, category: Tensor, batch: Optional[Tensor] = None) -> None:
        where = "ShapeNetPartIoU"
        if not all(isinstance(t, Tensor) for t in (preds, target, category)):
            raise ValueError(f"{where}: preds, target and category must be tensors")
        ids = (("category", category), ("target", target)) + ((("batch", batch),) if batch is not None else ())
        for name, t in ids:
            if not isinstance(t, Tensor) or t.dtype not in INTEGER_DTYPES:
                raise ValueError(f"{where}: {name} must be an integer tensor, got "
                                 f"{getattr(t, 'dtype', type(t).__name__)}")
        if preds.is_floating_point():
            check_float(preds, "preds (logits)", where)
            check_finite(preds, "preds", where, dims=("shape", "point", "part")[-preds.dim():])
        elif preds.dtype not in INTEGER_DTYPES:
            raise ValueError(f"{where}: preds must be logits or integer part ids, got dtype {preds.dtype}")
        category = category.reshape(-1).long()
        num_shapes = category.numel()
        if num_shapes == 0:
            return
        if int(category.min()) < 0 or int(category.max()) >= self.num_categories:
            raise ValueError(f"{where}: category ids must be in 0..{self.num_categories - 1}")
        is_logits = preds.is_floating_point()
        if batch is None:  # dense [B, N, (P)]
            if target.dim() != 2 or target.size(0) != num_shapes:
                raise ValueError(f"{where}: without batch, target must be [B, N] with B={num_shapes}, "
                                 f"got {tuple(target.shape)}")
            n = target.size(1)
            expect = (num_shapes, n, preds.size(-1)) if is_logits else (num_shapes, n)
            if tuple(preds.shape) != expect:
                raise ValueError(f"{where}: preds must have shape {expect}, got {tuple(preds.shape)}")
            batch = torch.arange(num_shapes, device=target.device).repeat_interleave(n)
            preds = preds.reshape(num_shapes * n, -1) if is_logits else preds.reshape(-1)
            target = target.reshape(-1)
        else:
            batch = batch.reshape(-1).long()
            target = target.reshape(-1)
            if batch.numel() != target.numel() or preds.size(0) != target.numel():
                raise ValueError(f"{where}: preds ({preds.size(0)}), target ({target.numel()}) and batch "
                                 f"({batch.numel()}) need one entry per point")
            if batch.numel() and (int(batch.min()) < 0 or int(batch.max()) >= num_shapes):
                raise ValueError(f"{where}: batch refers to shapes outside 0..{num_shapes - 1} "
                                 f"(category has {num_shapes} entries)")
        if target.is_floating_point():
            raise ValueError(f"{where}: target must hold integer part ids, got dtype {target.dtype}")
        target = target.long()
        device = target.device
        mask = self.part_mask.to(device)
        point_cat = category.to(device)[batch]
        if target.numel() and (int(target.min()) < 0 or int(target.max()) >= self.num_parts
                               or not bool(mask[point_cat, target].all())):
            bad = int((~mask[point_cat, target.clamp(0, self.num_parts - 1)]
                       | (target < 0) | (target >= self.num_parts)).nonzero()[0])
            raise ValueError(f"{where}: target part {int(target[bad])} of shape {int(batch[bad])} does not "
                             f"belong to its category {int(point_cat[bad])}")
        if is_logits:
            if preds.dim() != 2 or preds.size(1) < self.num_parts:
                raise ValueError(f"{where}: logits need at least {self.num_parts} columns, got "
                                 f"{tuple(preds.shape)}")
            logits = preds[:, : self.num_parts].double()
            logits = logits.masked_fill(~mask[point_cat], float("-inf"))
            pred = logits.argmax(dim=1)
        else:
            pred = preds.reshape(-1).long()
            if pred.numel() != target.numel():
                raise ValueError(f"{where}: preds has {pred.numel()} ids for {target.numel()} points")
            # out-of-range ids go to a spare bin: they count as wrong, never as some part
            pred = torch.where((pred < 0) | (pred >= self.num_parts), torch.full_like(pred, self.num_parts), pred)
        p = self.num_parts + 1  # one spare bin for out-of-range predictions
        inter = torch.bincount(batch[pred == target] * p + target[pred == target], minlength=num_shapes * p)
        pred_cnt = torch.bincount(batch * p + pred, minlength=num_shapes * p)
        tgt_cnt = torch.bincount(batch * p + target, minlength=num_shapes * p)
        inter, pred_cnt, tgt_cnt = (t.reshape(num_shapes, p)[:, : self.num_parts].double()
                                    for t in (inter, pred_cnt, tgt_cnt))
        union = pred_cnt + tgt_cnt - inter
        iou = torch.where(union > 0, inter / union.clamp_min(1), torch.ones_like(union))
        shape_mask = mask[category.to(device)].double()
        shape_iou = (iou * shape_mask).sum(1) / shape_mask.sum(1)
        cat = category.to(self.iou_sum.device)
        self.iou_sum.index_add_(0, cat, shape_iou.to(self.iou_sum.device))
        self.shape_count += torch.bincount(cat, minlength=self.num_categories)

    def per_category(self) -> Tensor:
        count = self.shape_count.double()
        return torch.where(count > 0, self.iou_sum / count.clamp_min(1), torch.full_like(count, float("nan")))

    def compute(self) -> Dict[str, Tensor]:
        total = self.shape_count.sum()
        per_cat = self.per_category()
        if int(total) == 0:
            nan = torch.tensor(float("nan"), dtype=torch.float64)
            return {"instance_miou": nan, "class_miou": nan.clone(), "per_category": per_cat}
        seen = self.shape_count > 0
        return {"instance_miou": self.iou_sum.sum() / total.double(),
                "class_miou": per_cat[seen].mean(),
                "per_category": per_cat}
