"""Metrics of gridify.metrics against hand-computed values."""
import math

import pytest
import torch

pytest.importorskip("torchmetrics")

from torchmetrics.utilities.data import dim_zero_sum  # noqa: E402

from gridify.datasets import SHAPENET_CATEGORY_TO_PARTS  # noqa: E402
from gridify.metrics import MeanClassAccuracy, OverallAccuracy, ShapeNetPartIoU  # noqa: E402

BEFORE_UPDATE = "called before the ``update`` method"

# two toy categories: A has parts {0, 1}, B has parts {2, 3, 4}
TOY = [[0, 1], [2, 3, 4]]


def _onehot_logits(labels, num_parts=5, boost=None):
    """Logits whose argmax is ``labels``; ``boost`` adds a larger score on a foreign part."""
    logits = torch.zeros(len(labels), num_parts)
    logits[torch.arange(len(labels)), torch.tensor(labels)] = 1.0
    if boost is not None:
        logits[:, boost] = 5.0
    return logits


def test_overall_accuracy_accumulates():
    m = OverallAccuracy()
    with pytest.warns(UserWarning, match=BEFORE_UPDATE):
        assert math.isnan(float(m.compute()))
    m.update(torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]), torch.tensor([0, 0, 0]))  # 2/3
    m.update(torch.tensor([1]), torch.tensor([1]))  # ids accepted too: 3/4
    assert float(m.compute()) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="target has 2 entries but preds has 1"):
        m.update(torch.tensor([1]), torch.tensor([1, 0]))


def test_mean_class_accuracy_hand_case():
    m = MeanClassAccuracy(num_classes=4)
    # class 0: 2/2, class 1: 1/3, class 2: 0/1, class 3: absent (excluded from the mean)
    m.update(torch.tensor([0, 0, 1, 2, 2]), torch.tensor([0, 0, 1, 1, 1]))
    m.update(torch.tensor([0]), torch.tensor([2]))
    assert float(m.compute()) == pytest.approx((1.0 + 1 / 3 + 0.0) / 3)
    assert math.isnan(float(m.per_class()[3]))
    with pytest.raises(ValueError, match="target ids must be in 0..3"):
        m.update(torch.tensor([0]), torch.tensor([4]))


def test_part_iou_hand_case_with_absent_parts_and_restricted_argmax():
    m = ShapeNetPartIoU(TOY)
    # shape 0 (cat A): target [0,0,1,1], prediction [0,1,1,1] -> IoU0 = 1/2, IoU1 = 2/3 -> 7/12
    # the logits put the highest score on part 4 (category B): restricted argmax must ignore it
    s0 = _onehot_logits([0, 1, 1, 1], boost=4)
    # shape 1 (cat B): target [2,2,2], prediction [2,2,2] -> IoU2 = 1, parts 3,4 absent from both -> 1
    s1 = _onehot_logits([2, 2, 2])
    preds = torch.cat([s0, s1])
    target = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    m.update(preds, target, torch.tensor([0, 1]), batch=batch)
    out = m.compute()
    assert float(out["instance_miou"]) == pytest.approx((7 / 12 + 1.0) / 2)
    assert float(out["class_miou"]) == pytest.approx((7 / 12 + 1.0) / 2)
    assert out["per_category"].dtype == torch.float64


def test_part_iou_partial_last_batch_and_class_mean():
    m = ShapeNetPartIoU(TOY)
    # batch 1: two shapes of category A, dense [B, N, P]
    t1 = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 1]])
    p1 = torch.stack([_onehot_logits([0, 0, 1, 1]), _onehot_logits([0, 0, 0, 0])])  # IoUs: 1.0 and (1/4 + 0)/2
    m.update(p1, t1, torch.tensor([0, 0]))
    # partial last batch: a single shape of category B; prediction 3 everywhere, target 2 everywhere
    # -> IoU2 = 0, IoU3 = 0, IoU4 absent from both = 1 -> 1/3
    m.update(_onehot_logits([3, 3]).unsqueeze(0), torch.tensor([[2, 2]]), torch.tensor([1]))
    out = m.compute()
    a_mean = (1.0 + 0.125) / 2
    assert float(out["instance_miou"]) == pytest.approx((1.0 + 0.125 + 1 / 3) / 3)  # every shape counted
    assert float(out["class_miou"]) == pytest.approx((a_mean + 1 / 3) / 2)  # mean of per-category means
    assert m.shape_count.tolist() == [2, 1]


def test_part_iou_dense_flat_and_ids_agree():
    torch.manual_seed(0)
    cats = torch.tensor([4, 15, 4])  # Chair, Table, Chair
    n = 20
    logits = torch.randn(3, n, 50)
    target = torch.stack([torch.tensor(SHAPENET_CATEGORY_TO_PARTS[int(c)])[torch.randint(0, 3, (n,))] for c in cats])
    dense = ShapeNetPartIoU(SHAPENET_CATEGORY_TO_PARTS)
    dense.update(logits, target, cats)
    flat = ShapeNetPartIoU(SHAPENET_CATEGORY_TO_PARTS)
    flat.update(logits.reshape(-1, 50), target.reshape(-1), cats, batch=torch.arange(3).repeat_interleave(n))
    torch.testing.assert_close(dense.compute()["instance_miou"], flat.compute()["instance_miou"])
    # hard ids computed by a restricted argmax give the same numbers
    mask = torch.zeros(3, 50, dtype=torch.bool)
    for i, c in enumerate(cats):
        mask[i, SHAPENET_CATEGORY_TO_PARTS[int(c)]] = True
    ids = logits.masked_fill(~mask[:, None, :], float("-inf")).argmax(-1)
    hard = ShapeNetPartIoU(SHAPENET_CATEGORY_TO_PARTS)
    hard.update(ids, target, cats)
    torch.testing.assert_close(hard.compute()["class_miou"], dense.compute()["class_miou"])


def test_part_iou_merges_like_ddp():
    """Sum states from two 'ranks' == one process seeing all shapes (what DDP's sum-reduce does)."""
    torch.manual_seed(1)
    cats = torch.tensor([0, 1, 1, 0, 1])
    logits = torch.randn(5, 6, 5)
    target = torch.stack([torch.tensor(TOY[int(c)])[torch.randint(0, len(TOY[int(c)]), (6,))] for c in cats])
    whole = ShapeNetPartIoU(TOY)
    whole.update(logits, target, cats)
    r0, r1 = ShapeNetPartIoU(TOY), ShapeNetPartIoU(TOY)
    r0.update(logits[:3], target[:3], cats[:3])
    r1.update(logits[3:], target[3:], cats[3:])
    r0.merge_state(r1)
    for k in ("instance_miou", "class_miou"):
        torch.testing.assert_close(r0.compute()[k], whole.compute()[k])
    for name in ("iou_sum", "shape_count"):  # states reduce by summation across processes
        assert whole._reductions[name] is dim_zero_sum


def test_part_iou_errors():
    m = ShapeNetPartIoU(TOY)
    with pytest.raises(ValueError, match="target part 3 of shape 0 does not belong to its category 0"):
        m.update(_onehot_logits([0, 1]), torch.tensor([0, 3]), torch.tensor([0]), batch=torch.tensor([0, 0]))
    with pytest.raises(ValueError, match=r"category ids must be in 0..1"):
        m.update(_onehot_logits([0]), torch.tensor([0]), torch.tensor([2]), batch=torch.tensor([0]))
    with pytest.raises(ValueError, match="every category needs at least one part"):
        ShapeNetPartIoU([[0], []])
    with pytest.warns(UserWarning, match=BEFORE_UPDATE):
        assert math.isnan(float(ShapeNetPartIoU(TOY).compute()["instance_miou"]))
