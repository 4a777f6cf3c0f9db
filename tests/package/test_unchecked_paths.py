"""``*_unchecked`` means unchecked: a model validates its inputs and the sizes of its searches once,
at its public entry, and the data path below it calls nothing from :mod:`gridify._checks`.

Every call into ``_checks`` during a forward pass is recorded with the Python stack that made it;
none may have a ``*_unchecked`` function (an unchecked op, an unchecked grid method) on that stack.
The ops called directly on valid inputs likewise run no check at all.
"""

import sys

import pytest
import torch

from gridify.baselines.point_ckconv import PointCKConvClassifier, knn_neighbourhoods_unchecked
from gridify.baselines.pointnet2 import PointNet2Classifier, PointNet2Segmenter
from gridify.models import GridifiedClassifier, GridifiedSceneSegmenter, GridifiedSegmenter
from gridify.nn import RegularGrid
from gridify.nn.connectivity import bilateral_knn_unchecked
from gridify.ops import fps_unchecked, grid_knn_unchecked, knn_unchecked, radius_unchecked, scatter_unchecked
from gridify.ops.grid import grid_positions_unchecked


def _checks_calls(fn):
    """Run ``fn``; return ``[(check name, [function names on the stack])]`` for every call into ``_checks``."""
    calls = []

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.endswith("_checks.py"):
            return
        if frame.f_back is not None and frame.f_back.f_code.co_filename.endswith("_checks.py"):
            return  # one helper calling another: the outer call is recorded
        stack, f = [], frame.f_back
        while f is not None:
            stack.append(f.f_code.co_name)
            f = f.f_back
        calls.append((frame.f_code.co_name, stack))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def _cloud(n=300, clouds=2, scale=1.0):
    g = torch.Generator().manual_seed(0)
    pos = (torch.rand(n * clouds, 3, generator=g) * 2 - 1) * scale
    return pos, torch.arange(clouds).repeat_interleave(n)


MODELS = {
    "gridified_classifier": (lambda: GridifiedClassifier(3, 4, resolution=5, k=4), 1.0),
    "gridified_segmenter": (lambda: GridifiedSegmenter(3, 4, resolution=5, k=4), 1.0),
    "scene_segmenter": (lambda: GridifiedSceneSegmenter(3, 4), 3.0),
    "pointnet2_classifier": (lambda: PointNet2Classifier(3, 4), 1.0),
    "pointnet2_segmenter": (lambda: PointNet2Segmenter(3, 4), 1.0),
    "point_ckconv_classifier": (lambda: PointCKConvClassifier(3, 4, k=8), 1.0),
}


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_forward_checks_only_at_its_entry(name, train):
    make, scale = MODELS[name]
    torch.manual_seed(0)
    model = make().train(train)
    pos, batch = _cloud(scale=scale)
    with torch.set_grad_enabled(train):
        calls = _checks_calls(lambda: model(pos, pos, batch))
    assert calls, "the model's entry validates its inputs"
    inside = [(check, [f for f in stack if f.endswith("_unchecked")]) for check, stack in calls]
    assert [c for c in inside if c[1]] == []


def test_unchecked_ops_run_no_check():
    pos, batch = _cloud(n=200)
    counts = torch.bincount(batch)
    grid = RegularGrid(5)
    lo, hi = torch.full((3,), -1.0), torch.full((3,), 1.0)
    ops = [
        lambda: knn_unchecked(pos, pos[:50], 4, batch, batch[:50], counts),
        lambda: knn_unchecked(pos, pos[:50], 4, batch, batch[:50], counts, "kdtree"),
        lambda: grid_knn_unchecked(pos, 4, 5, lo, hi, batch),
        lambda: grid_positions_unchecked((5, 6, 7), (-1.0, -1.0, -1.0), (1.0, 1.0, 1.0)),
        lambda: radius_unchecked(pos, pos[:50], 0.3, batch, batch[:50], counts, 16),
        lambda: fps_unchecked(pos, batch, counts, 0.25),
        lambda: scatter_unchecked(pos, batch, 2, "mean"),
        lambda: bilateral_knn_unchecked(pos, grid, 4, batch, counts),
        lambda: knn_neighbourhoods_unchecked(pos, batch, 6),
        lambda: grid.to_dense_unchecked(torch.zeros(2 * 125, 3), 2),
        lambda: grid.contains_unchecked(pos),
    ]
    for i, op in enumerate(ops):
        assert _checks_calls(op) == [], f"op {i} ran a check"


def test_unchecked_grid_positions_match_checked():
    torch.testing.assert_close(
        grid_positions_unchecked((3, 4, 5), (-1.0, 0.0, 2.0), (1.0, 3.0, 4.0), dtype=torch.float64),
        RegularGrid((3, 4, 5), (-1.0, 0.0, 2.0), (1.0, 3.0, 4.0)).positions(dtype=torch.float64),
        rtol=0,
        atol=0,
    )
