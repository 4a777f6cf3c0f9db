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


NAN = float("nan")


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


# ---------------------------------------------------------------------------------------------
# input validation: every bad input is a ValueError from gridify naming the metric and argument
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [OverallAccuracy, lambda: MeanClassAccuracy(2)])
def test_accuracy_empty_batch_is_a_no_op(make):
    m = make()
    m.update(torch.randn(0, 2), torch.zeros(0, dtype=torch.long))
    m.update(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert math.isnan(float(m.compute()))
    m.update(torch.tensor([[0.0, 1.0]]), torch.tensor([1]))
    assert float(m.compute()) == 1.0


@pytest.mark.parametrize("shape", [(4, 0), (0, 0)])
def test_overall_accuracy_refuses_logits_without_classes(shape):
    with pytest.raises(ValueError, match=r"OverallAccuracy: preds \(logits\) has 0 columns"):
        OverallAccuracy().update(torch.randn(*shape), torch.zeros(shape[0], dtype=torch.long))


@pytest.mark.parametrize(
    "name,make", [("OverallAccuracy", OverallAccuracy), ("MeanClassAccuracy", lambda: MeanClassAccuracy(2))]
)
def test_accuracy_bad_inputs(name, make):
    m = make()
    logits = torch.randn(4, 2)
    with pytest.raises(ValueError, match=f"{name}: target ids must be .*got -1 at sample 1"):
        m.update(logits, torch.tensor([0, -1, 0, 1]))
    with pytest.raises(ValueError, match=f"{name}: target ids must be in 0..1, got 5 at sample 2"):
        m.update(logits, torch.tensor([0, 1, 5, 1]))
    with pytest.raises(ValueError, match=f"{name}: target must have shape \\[B\\]"):
        m.update(logits, torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=f"{name}: preds is on the meta device"):
        m.update(torch.randn(4, 2, device="meta"), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=f"{name}: target is on the meta device"):
        m.update(logits, torch.zeros(4, dtype=torch.long, device="meta"))
    with pytest.raises(ValueError, match=f"{name}: 1-D preds must be integer class ids, got dtype torch.bool"):
        m.update(torch.ones(4, dtype=torch.bool), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=f"{name}: target must hold integer class ids, got dtype torch.complex64"):
        m.update(logits, torch.zeros(4, dtype=torch.complex64))
    assert int(m.total.sum()) == 0  # failed updates change nothing
    m.update(logits, torch.zeros(4, 1, dtype=torch.long))  # a [B, 1] column of ids is still accepted


def test_overall_accuracy_refuses_negative_targets_with_ids():
    with pytest.raises(ValueError, match="OverallAccuracy: target ids must be non-negative, got -1 at sample 0"):
        OverallAccuracy().update(torch.tensor([0, 1]), torch.tensor([-1, 1]))


@pytest.mark.parametrize(
    "bad,message",
    [
        (5, r"category_to_parts must be a list of part-id lists .* got int 5"),
        (None, r"category_to_parts must be a list .* got NoneType"),
        ("abc", r"category_to_parts must be a list .* got str"),
        ({0.5: [0], 1: [1]}, r"category ids \(the keys of category_to_parts\) must be integers, got float 0.5"),
        ({"a": [0]}, r"category ids \(the keys of category_to_parts\) must be integers, got str 'a'"),
        ({True: [0], 1: [1]}, r"category ids \(the keys of category_to_parts\) must be integers, got bool True"),  # noqa: F601
        ({0: [0], 2: [1]}, r"category ids must be 0..C-1, got \[0, 2\]"),
        ([[0], 5], r"category_to_parts\[1\] must be a list of part ids, got int 5"),
        ([[0], "ab"], r"category_to_parts\[1\] must be a list of part ids, got str"),
        ([[0], []], r"every category needs at least one part; category_to_parts\[1\] is empty"),
        ([], r"every category needs at least one part; category_to_parts has no categories"),
        ([[0], [0.5]], r"part ids must be integers; category_to_parts\[1\] holds float 0.5"),
        ([[0], [True]], r"part ids must be integers; category_to_parts\[1\] holds bool True"),
        ({0: [0], 1: [-2]}, r"part ids must be non-negative; category_to_parts\[1\] holds -2"),
    ],
)
def test_part_iou_constructor_validates_category_to_parts(bad, message):
    with pytest.raises(ValueError, match="ShapeNetPartIoU: " + message):
        ShapeNetPartIoU(bad)


def test_part_iou_constructor_accepts_numpy_ids_and_mappings():
    np = pytest.importorskip("numpy")
    m = ShapeNetPartIoU({np.int64(1): (np.int64(2), 3), 0: [0, 1]}, category_names=("a", "b"))
    assert m.num_parts == 4 and m.part_mask[1].tolist() == [False, False, True, True]


@pytest.mark.parametrize(
    "names,message",
    [
        (5, r"category_names must be a list of str \(one per category\) or None, got int 5"),
        ("ab", r"category_names must be a list of str .* got str 'ab'"),
        ({"a", "b"}, r"category_names must be a list of str .* got set"),
        (["a"], r"1 names for 2 categories"),
        (["a", 1], r"category_names\[1\] must be a str, got int 1"),
        (["a", "a"], r"category_names holds 'a' twice"),
    ],
)
def test_part_iou_constructor_validates_category_names(names, message):
    with pytest.raises(ValueError, match="ShapeNetPartIoU: " + message):
        ShapeNetPartIoU(TOY, category_names=names)


def test_part_iou_shapes_without_points_are_refused():
    m = ShapeNetPartIoU(TOY)
    cats = torch.tensor([0, 1])
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: target has shape \(2, 0\): no points per shape"):
        m.update(torch.randn(2, 0, 5), torch.zeros(2, 0, dtype=torch.long), cats)
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: target has shape \(2, 0\): no points per shape"):
        m.update(torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long), cats)
    with pytest.raises(ValueError, match="ShapeNetPartIoU: shape 1 has no points"):
        m.update(_onehot_logits([0, 1]), torch.tensor([0, 1]), cats, batch=torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="ShapeNetPartIoU: batch has 2 points but category is empty"):
        m.update(
            _onehot_logits([0, 1]), torch.tensor([0, 1]), torch.zeros(0, dtype=torch.long), batch=torch.tensor([0, 0])
        )
    # no shapes at all: a no-op, in both forms
    m.update(torch.randn(0, 3, 5), torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    m.update(
        torch.randn(0, 5),
        torch.zeros(0, dtype=torch.long),
        torch.zeros(0, dtype=torch.long),
        batch=torch.zeros(0, dtype=torch.long),
    )
    assert int(m.shape_count.sum()) == 0
    assert math.isnan(float(m.compute()["instance_miou"]))


def test_part_iou_update_bad_shapes_and_devices():
    m = ShapeNetPartIoU(TOY)
    one = torch.tensor([0])
    zero = torch.zeros(1, dtype=torch.long)
    with pytest.raises(
        ValueError, match=r"ShapeNetPartIoU: with batch, preds must be logits \[sum N_i, P\].*shape \(\)"
    ):
        m.update(torch.tensor(1.0), zero, one, batch=zero)
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: with batch, preds must be .*got ids of shape \(\)"):
        m.update(torch.tensor(1), zero, one, batch=zero)
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: without batch, preds must be logits \[1, 1, P\]"):
        m.update(torch.tensor(1.0), torch.zeros(1, 1, dtype=torch.long), one)
    with pytest.raises(
        ValueError, match=r"ShapeNetPartIoU: with batch, preds must be .*got logits of shape \(3, 5, 1\)"
    ):
        m.update(torch.randn(3, 5, 1), torch.zeros(3, dtype=torch.long), one, batch=torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: target must have shape \[sum N_i\]"):
        m.update(torch.randn(4, 5), torch.zeros(2, 2, dtype=torch.long), one, batch=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: batch must have shape \[sum N_i\]"):
        m.update(torch.randn(4, 5), torch.zeros(4, dtype=torch.long), one, batch=torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: category must have shape \[B\]"):
        m.update(torch.randn(4, 3, 5), torch.zeros(4, 3, dtype=torch.long), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: logits need at least 5 columns, got \(1, 2, 0\)"):
        m.update(torch.randn(1, 2, 0), torch.zeros(1, 2, dtype=torch.long), one)
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: category ids must be in 0..1, got -1 for shape 1"):
        m.update(torch.randn(2, 1, 5), torch.zeros(2, 1, dtype=torch.long), torch.tensor([0, -1]))
    with pytest.raises(
        ValueError, match="ShapeNetPartIoU: preds contains NaN values .* first at shape 1, point 0, part 2"
    ):
        logits = torch.zeros(2, 1, 5)
        logits[1, 0, 2] = float("nan")
        m.update(logits, torch.tensor([[0], [2]]), torch.tensor([0, 1]))
    for name, args in [
        ("preds", (torch.randn(1, 2, 5, device="meta"), torch.zeros(1, 2, dtype=torch.long), one)),
        ("target", (torch.randn(1, 2, 5), torch.zeros(1, 2, dtype=torch.long, device="meta"), one)),
        ("category", (torch.randn(1, 2, 5), torch.zeros(1, 2, dtype=torch.long), one.to("meta"))),
    ]:
        with pytest.raises(ValueError, match=f"ShapeNetPartIoU: {name} is on the meta device"):
            m.update(*args)
    with pytest.raises(ValueError, match="ShapeNetPartIoU: batch is on the meta device"):
        m.update(
            torch.randn(2, 5),
            torch.zeros(2, dtype=torch.long),
            one,
            batch=torch.zeros(2, dtype=torch.long, device="meta"),
        )
    assert int(m.shape_count.sum()) == 0  # failed updates change nothing


def test_failed_metric_update_leaves_the_state():
    metric = ShapeNetPartIoU([[0, 1], [2, 3]])
    metric.update(torch.randn(1, 5, 4), torch.tensor([[0, 1, 0, 1, 1]]), torch.tensor([0]))
    before = (metric.iou_sum.clone(), metric.shape_count.clone())
    logits = torch.randn(2, 5, 4)
    logits[1, 2, 3] = NAN
    with pytest.raises(ValueError, match=r"ShapeNetPartIoU: preds contains NaN .* shape 1, point 2, part 3"):
        metric.update(logits, torch.tensor([[0, 1, 0, 1, 1], [2, 3, 2, 2, 3]]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="category must be an integer tensor"):
        metric.update(torch.randn(1, 5, 4), torch.tensor([[0, 1, 0, 1, 1]]), torch.tensor([0.0]))
    assert torch.equal(metric.iou_sum, before[0]) and torch.equal(metric.shape_count, before[1])
