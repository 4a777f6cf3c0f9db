"""Classification, part- and scene-segmentation metrics as torchmetrics ``Metric`` subclasses.

All states are sums (``dist_reduce_fx="sum"``), so the metrics reduce exactly under DDP and
count every sample, including a partial last batch. Arithmetic is float64.

* :class:`OverallAccuracy` -- correct / total over all samples (OA).
* :class:`MeanClassAccuracy` -- mean over classes of per-class accuracy (mAcc); classes that
  never occur in the targets are left out of the mean.
* :class:`ShapeNetPartIoU` -- ShapeNet-Part instance mIoU (mean over shapes) and class mIoU
  (mean over categories of the per-category mean shape IoU). The argmax is restricted to the
  parts of the shape's (known) category; a part absent from both prediction and label has
  IoU 1.0; per-shape IoU averages over the category's parts.
* :class:`SegmentationIoU` -- semantic (scene) segmentation over points: a confusion matrix
  ``M[t, p]`` (rows = target, cols = prediction) accumulated over every scored point, points whose
  target is ``ignore_index`` left out; ``IoU_c = M_cc / (sum_p M_cp + sum_t M_tc - M_cc)``
  (TP / (TP + FP + FN)), ``Acc_c = M_cc / sum_p M_cp``; mIoU and mAcc average over the classes
  present in the targets so far (``TP + FN > 0``); OA = ``trace(M) / sum(M)``.

Every ``update`` validates all its inputs before it changes any state (logits finite and
floating, ids integer, shapes and devices consistent), so a failed update leaves the metric
exactly as it was; state sizes given to a constructor are checked against the allocation limit.

Under DDP, a ``DistributedSampler`` pads the last rank with repeated samples unless the
dataset size divides evenly; for exact test numbers evaluate on one process or with an
unpadded sampler.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torchmetrics import Metric

from ._checks import INTEGER_DTYPES, check_alloc, check_finite, check_float, check_int, fail, is_int

__all__ = [
    "OverallAccuracy",
    "MeanClassAccuracy",
    "ShapeNetPartIoU",
    "SegmentationIoU",
    "confusion_scores",
    "segmentation_iou_reference",
]


def _check_has_data(t: Tensor, name: str, where: str) -> None:
    """Refuse a tensor on the meta device: it has a shape but no values to score."""
    if t.device.type == "meta":
        fail(where, f"{name} is on the meta device (it holds no values); metrics need real tensors")


def _vector(t: Tensor, name: str, where: str, what: str) -> Tensor:
    """``t`` as a 1-D tensor; ``[B]``, ``[B, 1]`` and a 0-d tensor (one entry) are accepted."""
    if t.dim() > 2 or (t.dim() == 2 and t.size(1) != 1):
        fail(where, f"{name} must have shape {what}, got {tuple(t.shape)}")
    return t.reshape(-1)


def _first_bad(bad: Tensor) -> int:
    return int(bad.nonzero()[0, 0])


def _labels_from(preds: Tensor, where: str, num_classes: Optional[int] = None) -> Tensor:
    """Class ids from logits ``[B, C]`` or ids ``[B]``."""
    if not isinstance(preds, Tensor):
        raise ValueError(f"{where}: preds must be a torch.Tensor, got {type(preds).__name__}")
    _check_has_data(preds, "preds", where)
    if preds.dim() == 2:
        if num_classes is not None and preds.size(1) != num_classes:
            raise ValueError(f"{where}: preds has {preds.size(1)} columns but num_classes={num_classes}")
        if preds.size(1) == 0:
            fail(where, f"preds (logits) has 0 columns, shape {tuple(preds.shape)}; logits need one column per class")
        check_float(where, "preds (logits)", preds)
        check_finite(where, "preds", preds, dims=("sample", "class"))
        return preds.argmax(dim=1)
    if preds.dim() == 1:
        if preds.dtype not in INTEGER_DTYPES:
            raise ValueError(f"{where}: 1-D preds must be integer class ids, got dtype {preds.dtype}")
        return preds.long()
    raise ValueError(f"{where}: preds must be logits [B, C] or class ids [B], got shape {tuple(preds.shape)}")


def _check_target(target: Tensor, n: int, where: str, num_classes: Optional[int] = None) -> Tensor:
    """Class ids ``[B]`` (``[B, 1]`` accepted), integer, in ``0..num_classes-1`` (non-negative when
    ``num_classes`` is None)."""
    if not isinstance(target, Tensor):
        raise ValueError(f"{where}: target must be a torch.Tensor, got {type(target).__name__}")
    _check_has_data(target, "target", where)
    target = _vector(target, "target", where, f"[B] (one class id per sample, B={n})")
    if target.numel() != n:
        raise ValueError(f"{where}: target has {target.numel()} entries but preds has {n} samples")
    if target.dtype not in INTEGER_DTYPES:
        raise ValueError(f"{where}: target must hold integer class ids, got dtype {target.dtype}")
    target = target.long()
    if target.numel():
        bad = (target < 0) if num_classes is None else (target < 0) | (target >= num_classes)
        if bool(bad.any()):
            i = _first_bad(bad)
            what = "non-negative" if num_classes is None else f"in 0..{num_classes - 1}"
            fail(where, f"target ids must be {what}, got {int(target[i])} at sample {i}")
    return target


class OverallAccuracy(Metric):
    """Overall accuracy: correctly classified samples / all samples.

    ``update(preds, target)``; ``compute()`` returns a 0-d float64 tensor (NaN before any update).
    Target ids must be non-negative (and below ``C`` with logits); predicted ids outside the
    classes count as wrong. An empty batch (``B = 0``) is a no-op; logits need ``C >= 1``.

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
        num_classes = preds.size(1) if preds.dim() == 2 else None
        target = _check_target(target, pred.numel(), "OverallAccuracy", num_classes).to(pred.device)
        self.correct += (pred == target).sum().to(self.correct.device)
        self.total += target.numel()

    def compute(self) -> Tensor:
        if int(self.total) == 0:
            return torch.tensor(float("nan"), dtype=torch.float64)
        return self.correct.double() / self.total.double()


class MeanClassAccuracy(Metric):
    """Mean over classes of per-class accuracy (classes absent from the targets are skipped).

    ``compute()`` returns a 0-d float64 tensor; :meth:`per_class` the per-class accuracies
    (NaN for absent classes). Target ids must lie in ``0..num_classes-1``; predicted ids outside
    that range count as wrong. An empty batch (``B = 0``) is a no-op.

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
        target = _check_target(target, pred.numel(), "MeanClassAccuracy", self.num_classes).to(pred.device)
        self.total += torch.bincount(target, minlength=self.num_classes).to(self.total.device)
        self.correct += torch.bincount(target[pred == target], minlength=self.num_classes).to(self.correct.device)

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


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def _part_table(category_to_parts: Any) -> List[List[int]]:
    """``category_to_parts`` as a list (indexed by category id) of lists of part ids.

    A list indexed by category id, or a mapping whose keys are the integers ``0..C-1``; every
    category holds a non-empty collection of non-negative integer part ids (``bool`` refused).
    Categories may share parts.
    """
    where, arg = "ShapeNetPartIoU", "category_to_parts"
    if isinstance(category_to_parts, Mapping):
        for key in category_to_parts:
            if not is_int(key):
                fail(where, f"category ids (the keys of {arg}) must be integers, got {_kind(key)}")
        by_id = {int(k): v for k, v in category_to_parts.items()}
        keys = sorted(by_id)
        if keys != list(range(len(keys))):
            fail(where, f"category ids must be 0..C-1, got {keys} (the keys of {arg})")
        entries = [(f"{arg}[{k}]", by_id[k]) for k in keys]
    elif isinstance(category_to_parts, Sequence) and not isinstance(category_to_parts, (str, bytes)):
        entries = [(f"{arg}[{c}]", p) for c, p in enumerate(category_to_parts)]
    else:
        fail(
            where,
            f"{arg} must be a list of part-id lists (one per category) or a {{category id: parts}} "
            f"mapping, got {_kind(category_to_parts)}",
        )
    if not entries:
        fail(where, f"every category needs at least one part; {arg} has no categories")
    table = []
    for name, parts in entries:
        if not isinstance(parts, Collection) or isinstance(parts, (str, bytes, Mapping)):
            fail(where, f"{name} must be a list of part ids, got {_kind(parts)}")
        parts = list(parts)
        if not parts:
            fail(where, f"every category needs at least one part; {name} is empty")
        for i in parts:
            if not is_int(i):
                fail(where, f"part ids must be integers; {name} holds {_kind(i)}")
            if i < 0:
                fail(where, f"part ids must be non-negative; {name} holds {int(i)}")
        table.append([int(i) for i in parts])
    return table


def _check_category_names(category_names: Any, num_categories: int) -> None:
    """``category_names``: None, or a list/tuple of distinct ``str``, one per category."""
    where, arg = "ShapeNetPartIoU", "category_names"
    if category_names is None:
        return
    if not isinstance(category_names, Sequence) or isinstance(category_names, (str, bytes)):
        fail(where, f"{arg} must be a list of str (one per category) or None, got {_kind(category_names)}")
    if len(category_names) != num_categories:
        fail(where, f"{len(category_names)} names for {num_categories} categories ({arg} needs one per category)")
    seen = set()
    for c, name in enumerate(category_names):
        if not isinstance(name, str):
            fail(where, f"{arg}[{c}] must be a str, got {_kind(name)}")
        if name in seen:
            fail(where, f"{arg} holds {name!r} twice (at {category_names.index(name)} and {c}); names must be distinct")
        seen.add(name)


class ShapeNetPartIoU(Metric):
    """ShapeNet-Part mIoU: instance mIoU (mean over shapes) and class mIoU.

    Args:
        category_to_parts: the global part ids of each category, as a list indexed by
            category id or a ``{category id: parts}`` mapping with keys ``0..C-1`` (e.g.
            :data:`gridify.datasets.SHAPENET_CATEGORY_TO_PARTS`); every category holds at least
            one part id, each a non-negative ``int`` (``bool`` refused).
        category_names: optional distinct names (``str``, one per category) used as keys of
            :meth:`per_category`.

    ``update(preds, target, category, batch=None)`` accepts either

    * dense: ``preds`` ``[B, N, P]`` logits, ``target`` ``[B, N]``, ``category`` ``[B]``; or
    * flat (PyG style): ``preds`` ``[sum N_i, P]`` logits, ``target`` ``[sum N_i]``,
      ``batch`` ``[sum N_i]`` (sorted shape index), ``category`` ``[B]``.

    ``preds`` may also be integer part ids (``[B, N]`` / ``[sum N_i]``), used as given.
    Logits are arg-maxed over the shape's category's parts only. Every shape needs at least one
    point (a shape without points has no IoU); an update with no shapes (``B = 0``) is a no-op.

    ``compute()`` returns ``{"instance_miou", "class_miou", "per_category"}`` (float64; the
    per-category tensor holds NaN for categories without shapes).
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(
        self, category_to_parts: CategoryParts, category_names: Optional[Sequence[str]] = None, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        table = _part_table(category_to_parts)
        num_parts = max(max(p) for p in table) + 1
        check_alloc(
            "ShapeNetPartIoU",
            f"part ids up to {num_parts - 1} ({len(table)} x {num_parts} part masks)",
            len(table) * num_parts,
        )
        mask = torch.zeros(len(table), num_parts, dtype=torch.bool)
        for c, parts in enumerate(table):
            mask[c, parts] = True
        _check_category_names(category_names, len(table))
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
                raise ValueError(
                    f"{where}: {name} must be an integer tensor, got {getattr(t, 'dtype', type(t).__name__)}"
                )
        if preds.is_floating_point():
            check_float(where, "preds (logits)", preds)
        elif preds.dtype not in INTEGER_DTYPES:
            raise ValueError(f"{where}: preds must be logits or integer part ids, got dtype {preds.dtype}")
        for name, t in (("preds", preds),) + ids:
            _check_has_data(t, name, where)
        for name, t in (("target", target), ("batch", batch)):
            if t is not None and t.device != preds.device:
                fail(where, f"{name} is on {t.device} but preds is on {preds.device}")
        category = _vector(category, "category", where, "[B] (one category id per shape)").long()
        num_shapes = category.numel()
        if num_shapes and (int(category.min()) < 0 or int(category.max()) >= self.num_categories):
            bad = _first_bad((category < 0) | (category >= self.num_categories))
            raise ValueError(
                f"{where}: category ids must be in 0..{self.num_categories - 1}, got "
                f"{int(category[bad])} for shape {bad}"
            )
        is_logits = preds.is_floating_point()
        given = preds  # as passed in, for the messages
        if batch is None:  # dense [B, N, (P)]
            preds, target, batch = self._dense_to_flat(where, preds, target, num_shapes, is_logits)
        else:
            preds, target, batch = self._check_flat(where, preds, target, batch, num_shapes, is_logits)
        if is_logits:
            if preds.size(1) < self.num_parts:
                raise ValueError(f"{where}: logits need at least {self.num_parts} columns, got {tuple(given.shape)}")
            check_finite(where, "preds", given, dims=("shape", "point", "part")[-given.dim() :])
        target = target.long()
        device = target.device
        mask = self.part_mask.to(device)
        point_cat = category.to(device)[batch]
        if target.numel() and (
            int(target.min()) < 0 or int(target.max()) >= self.num_parts or not bool(mask[point_cat, target].all())
        ):
            bad = int(
                (
                    ~mask[point_cat, target.clamp(0, self.num_parts - 1)] | (target < 0) | (target >= self.num_parts)
                ).nonzero()[0]
            )
            raise ValueError(
                f"{where}: target part {int(target[bad])} of shape {int(batch[bad])} does not "
                f"belong to its category {int(point_cat[bad])}"
            )
        if num_shapes == 0:  # an empty batch (validated above) changes nothing
            return
        self._accumulate(preds, target, batch, category, point_cat, mask, is_logits, num_shapes)

    @staticmethod
    def _dense_to_flat(
        where: str, preds: Tensor, target: Tensor, num_shapes: int, is_logits: bool
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """Checked dense ``preds [B, N, (P)]``, ``target [B, N]`` as flat ``(preds, target, batch)``."""
        if target.dim() != 2 or target.size(0) != num_shapes:
            raise ValueError(
                f"{where}: without batch, target must be [B, N] with B={num_shapes}, got {tuple(target.shape)}"
            )
        n = target.size(1)
        if preds.dim() == 0:
            fail(
                where,
                f"without batch, preds must be logits [{num_shapes}, {n}, P] or part ids "
                f"[{num_shapes}, {n}], got shape ()",
            )
        expect = (num_shapes, n, preds.size(-1)) if is_logits else (num_shapes, n)
        if tuple(preds.shape) != expect:
            shown = expect if not is_logits or preds.dim() == 3 else f"({num_shapes}, {n}, P)"
            raise ValueError(f"{where}: preds must have shape {shown}, got {tuple(preds.shape)}")
        if num_shapes and n == 0:
            fail(
                where,
                f"target has shape {tuple(target.shape)}: no points per shape; every shape needs at least one point",
            )
        batch = torch.arange(num_shapes, device=target.device).repeat_interleave(n)
        preds = preds.reshape(num_shapes * n, preds.size(-1)) if is_logits else preds.reshape(-1)
        target = target.reshape(-1)
        return preds, target, batch

    @staticmethod
    def _check_flat(
        where: str, preds: Tensor, target: Tensor, batch: Tensor, num_shapes: int, is_logits: bool
    ) -> Tuple[Tensor, Tensor, Tensor]:
        """Checked flat ``preds [sum N_i, (P)]``, ``target [sum N_i]`` and ``batch [sum N_i]``."""
        target = _vector(target, "target", where, "[sum N_i] (one part id per point) with batch")
        batch = _vector(batch, "batch", where, "[sum N_i] (the shape of every point)").long()
        if preds.dim() != (2 if is_logits else 1):
            fail(
                where,
                f"with batch, preds must be logits [sum N_i, P] (floating) or part ids [sum N_i] "
                f"(integer), got {'logits' if is_logits else 'ids'} of shape {tuple(preds.shape)}",
            )
        if batch.numel() != target.numel() or preds.size(0) != target.numel():
            raise ValueError(
                f"{where}: preds ({preds.size(0)}), target ({target.numel()}) and batch "
                f"({batch.numel()}) need one entry per point"
            )
        if num_shapes == 0 and batch.numel():
            fail(where, f"batch has {batch.numel()} points but category is empty (no shapes)")
        if batch.numel() and (int(batch.min()) < 0 or int(batch.max()) >= num_shapes):
            raise ValueError(
                f"{where}: batch refers to shapes outside 0..{num_shapes - 1} (category has {num_shapes} entries)"
            )
        if num_shapes:
            counts = torch.bincount(batch, minlength=num_shapes)
            if bool((counts == 0).any()):
                empty = (counts == 0).nonzero().flatten().tolist()
                fail(
                    where,
                    f"shape {empty[0]} has no points (batch never refers to it; shapes without "
                    f"points: {empty[:10]}); every shape needs at least one point",
                )
        return preds, target, batch

    def _accumulate(
        self,
        preds: Tensor,
        target: Tensor,
        batch: Tensor,
        category: Tensor,
        point_cat: Tensor,
        mask: Tensor,
        is_logits: bool,
        num_shapes: int,
    ) -> None:
        """Add the per-shape IoUs of validated flat inputs to the running sums."""
        device = target.device
        if is_logits:
            logits = preds[:, : self.num_parts].double()
            logits = logits.masked_fill(~mask[point_cat], float("-inf"))
            pred = logits.argmax(dim=1)
        else:
            pred = preds.reshape(-1).long()
            # out-of-range ids go to a spare bin: they count as wrong, never as some part
            pred = torch.where((pred < 0) | (pred >= self.num_parts), torch.full_like(pred, self.num_parts), pred)
        p = self.num_parts + 1  # one spare bin for out-of-range predictions
        inter = torch.bincount(batch[pred == target] * p + target[pred == target], minlength=num_shapes * p)
        pred_cnt = torch.bincount(batch * p + pred, minlength=num_shapes * p)
        tgt_cnt = torch.bincount(batch * p + target, minlength=num_shapes * p)
        inter, pred_cnt, tgt_cnt = (
            t.reshape(num_shapes, p)[:, : self.num_parts].double() for t in (inter, pred_cnt, tgt_cnt)
        )
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
        return {
            "instance_miou": self.iou_sum.sum() / total.double(),
            "class_miou": per_cat[seen].mean(),
            "per_category": per_cat,
        }


class SegmentationIoU(Metric):
    """Semantic segmentation IoU over points (a confusion matrix; see the module docstring).

    Args:
        num_classes: ``C`` (a positive integer).
        ignore_index: points whose target equals it count nowhere (any integer; default -1).

    ``update(preds, target)``: ``preds`` logits ``[N, C]`` (arg-maxed) or class ids ``[N]`` in
    ``0..C-1``; ``target`` ``[N]`` integer ids in ``0..C-1`` or ``ignore_index``. Everything is
    validated before the state changes; a bad id raises naming the argument and its first row.

    ``compute()`` -> ``{"miou", "oa", "macc"}`` (0-d float64, NaN before any scored point),
    ``"iou"`` and ``"acc"`` ``[C]`` float64 (NaN for classes absent from the targets) and
    ``"confusion"`` ``[C, C]`` int64 (rows = target, cols = prediction).

    Shapes:
        preds: ``[N, C]`` or ``[N]``; target: ``[N]`` (``[N, 1]`` accepted); confusion ``[C, C]``.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, num_classes: int, ignore_index: int = -1, **kwargs) -> None:
        super().__init__(**kwargs)
        where = "SegmentationIoU"
        check_int(where, "num_classes", num_classes)
        if not is_int(ignore_index):
            fail(where, f"ignore_index must be an integer, got {_kind(ignore_index)}")
        check_alloc(
            where,
            f"num_classes={num_classes} (a {num_classes} x {num_classes} int64 confusion matrix)",
            8 * num_classes * num_classes,
        )
        self.num_classes, self.ignore_index = int(num_classes), int(ignore_index)
        self.add_state(
            "confusion", default=torch.zeros(num_classes, num_classes, dtype=torch.long), dist_reduce_fx="sum"
        )

    def _checked(self, preds: Tensor, target: Tensor) -> Tuple[Tensor, Tensor]:
        """Validated ``(pred ids, target ids)`` of the scored points (ignored ones dropped)."""
        where, c = "SegmentationIoU", self.num_classes
        pred = _labels_from(preds, where, c)
        if preds.dim() == 1 and pred.numel():
            bad = (pred < 0) | (pred >= c)
            if bool(bad.any()):
                i = _first_bad(bad)
                fail(where, f"preds (class ids) must be in 0..{c - 1}, got {int(pred[i])} at row {i}")
        if not isinstance(target, Tensor):
            raise ValueError(f"{where}: target must be a torch.Tensor, got {type(target).__name__}")
        _check_has_data(target, "target", where)
        target = _vector(target, "target", where, f"[N] (one class id per point, N={pred.numel()})")
        if target.numel() != pred.numel():
            fail(where, f"target has {target.numel()} entries but preds has {pred.numel()} points")
        if target.dtype not in INTEGER_DTYPES:
            fail(where, f"target must hold integer class ids, got dtype {target.dtype}")
        target = target.long().to(pred.device)
        scored = target != self.ignore_index
        bad = scored & ((target < 0) | (target >= c))
        if target.numel() and bool(bad.any()):
            i = _first_bad(bad)
            fail(
                where,
                f"target ids must be in 0..{c - 1} or ignore_index={self.ignore_index}, got "
                f"{int(target[i])} at row {i}",
            )
        return pred[scored], target[scored]

    def update(self, preds: Tensor, target: Tensor) -> None:
        pred, target = self._checked(preds, target)
        c = self.num_classes
        counts = torch.bincount(target * c + pred, minlength=c * c).reshape(c, c)
        self.confusion += counts.to(self.confusion.device)

    def compute(self) -> Dict[str, Tensor]:
        return confusion_scores(self.confusion)


def confusion_scores(confusion: Tensor) -> Dict[str, Tensor]:
    """miou / oa / macc / iou / acc / confusion of a ``[C, C]`` confusion matrix (rows = target)."""
    cm = confusion.double()
    tp = cm.diagonal()
    support = cm.sum(1)  # TP + FN
    union = support + cm.sum(0) - tp  # TP + FN + FP
    present = support > 0
    nan = torch.full_like(tp, float("nan"))
    iou = torch.where(present, tp / union.clamp_min(1), nan)
    acc = torch.where(present, tp / support.clamp_min(1), nan)
    total = cm.sum()
    none = torch.tensor(float("nan"), dtype=torch.float64, device=cm.device)
    any_seen = bool(present.any())
    return {
        "miou": iou[present].mean() if any_seen else none,
        "macc": acc[present].mean() if any_seen else none.clone(),
        "oa": tp.sum() / total if any_seen else none.clone(),
        "iou": iou,
        "acc": acc,
        "confusion": confusion.clone(),
    }


def segmentation_iou_reference(
    pred: Sequence[int], target: Sequence[int], num_classes: int, ignore_index: int = -1
) -> Dict[str, Any]:
    """Loop reference of :class:`SegmentationIoU` on class ids (plain Python, for the tests)."""
    cm = [[0] * num_classes for _ in range(num_classes)]
    for p, t in zip(pred, target):
        if int(t) != ignore_index:
            cm[int(t)][int(p)] += 1
    ious, accs = [], []
    for c in range(num_classes):
        tp, fn = cm[c][c], sum(cm[c]) - cm[c][c]
        fp = sum(cm[r][c] for r in range(num_classes)) - tp
        ious.append(tp / (tp + fp + fn) if tp + fn > 0 else float("nan"))
        accs.append(tp / (tp + fn) if tp + fn > 0 else float("nan"))
    seen = [c for c in range(num_classes) if sum(cm[c]) > 0]
    total = sum(map(sum, cm))
    mean = (lambda v: sum(v[c] for c in seen) / len(seen)) if seen else (lambda v: float("nan"))
    return {
        "miou": mean(ious),
        "macc": mean(accs),
        "iou": ious,
        "acc": accs,
        "confusion": cm,
        "oa": sum(cm[c][c] for c in range(num_classes)) / total if total else float("nan"),
    }
