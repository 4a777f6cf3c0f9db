""":class:`gridify.metrics.SegmentationIoU` against a plain loop (with ignored points)."""

import numpy as np
import pytest
import torch

from gridify.metrics import SegmentationIoU, segmentation_iou_reference


# --------------------------------------------------------------------------------------
# SegmentationIoU
# --------------------------------------------------------------------------------------
def _close(a, b):
    a, b = float(a), float(b)
    return (np.isnan(a) and np.isnan(b)) or abs(a - b) < 1e-12


def test_segmentation_iou_matches_the_loop_reference_with_ignore():
    g = torch.Generator().manual_seed(0)
    c = 6
    metric = SegmentationIoU(c)
    preds, targets = [], []
    for n in (50, 1, 0, 200):
        logits = torch.randn(n, c, generator=g)
        target = torch.randint(-1, c - 1, (n,), generator=g)  # class c-1 never in the target
        metric.update(logits, target)
        preds += logits.argmax(1).tolist()
        targets += target.tolist()
    ids = torch.randint(0, c, (30,), generator=g)
    t = torch.randint(-1, c - 1, (30,), generator=g)
    metric.update(ids, t)
    preds += ids.tolist()
    targets += t.tolist()
    res, ref = metric.compute(), segmentation_iou_reference(preds, targets, c)
    for key in ("miou", "oa", "macc"):
        assert _close(res[key], ref[key]), key
    assert all(_close(a, b) for a, b in zip(res["iou"].tolist(), ref["iou"]))
    assert np.isnan(float(res["iou"][c - 1])) and res["confusion"].tolist() == ref["confusion"]
    assert int(res["confusion"].sum()) == sum(1 for t in targets if t != -1)
    assert res["confusion"].dtype == torch.int64


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_segmentation_iou_custom_ignore_index_and_empty():
    m = SegmentationIoU(3, ignore_index=255)
    assert np.isnan(float(m.compute()["miou"]))
    m.update(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 255, 2, 1]))
    res = m.compute()
    assert float(res["oa"]) == pytest.approx(2 / 3)
    assert res["iou"].tolist() == pytest.approx([1.0, 0.0, 0.5])


def test_segmentation_iou_errors_name_the_argument_and_row():
    m = SegmentationIoU(4)
    with pytest.raises(ValueError, match=r"target ids must be in 0\.\.3 or ignore_index=-1, got 4 at row 2"):
        m.update(torch.zeros(5, 4), torch.tensor([0, 1, 4, 5, -1]))
    with pytest.raises(ValueError, match=r"target ids .* got -2 at row 0"):
        m.update(torch.zeros(1, 4), torch.tensor([-2]))
    with pytest.raises(ValueError, match=r"preds \(class ids\) must be in 0\.\.3, got 7 at row 1"):
        m.update(torch.tensor([0, 7]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="preds has 3 columns but num_classes=4"):
        m.update(torch.zeros(2, 3), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="target has 3 entries but preds has 2"):
        m.update(torch.zeros(2, 4), torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match="target must hold integer"):
        m.update(torch.zeros(2, 4), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="num_classes"):
        SegmentationIoU(0)
    with pytest.raises(ValueError, match="ignore_index"):
        SegmentationIoU(3, ignore_index=1.5)
    assert int(m.compute()["confusion"].sum()) == 0  # failed updates changed nothing
