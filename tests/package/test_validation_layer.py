"""One validation layer: a public entry validates its inputs once; nested calls inside a forward do not.

The value checks (NaN/Inf, batch vectors) read tensor values, which on a GPU means a host
synchronisation each; they are counted by profiling calls into ``gridify/_checks.py``.
"""

import sys
from collections import Counter

import pytest
import torch

from gridify import _checks
from gridify.models import GridifiedClassifier, GridifiedSegmenter
from gridify.nn import Degridification, Gridification, bilateral_knn
from gridify.ops import knn, scatter


def _count_checks(fn):
    calls = Counter()
    checks_file = _checks.__file__

    def profiler(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == checks_file:
            calls[frame.f_code.co_name] += 1

    sys.setprofile(profiler)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return out, calls


def _clouds(b=3, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(b * n, 3, generator=g) * 1.8 - 0.9
    batch = torch.arange(b).repeat_interleave(n)
    return pos, batch


def test_gridification_forward_checks_each_tensor_once():
    pos, batch = _clouds()
    layer = Gridification(3, 8, resolution=4, k=4)
    _, calls = _count_checks(lambda: layer(pos, pos * 0.5, batch))
    assert calls["check_batch"] == 1
    assert calls["check_finite"] == 2  # pos and x, nothing nested re-checks them


def test_classifier_forward_checks_inputs_once():
    pos, batch = _clouds()
    model = GridifiedClassifier(3, 5, resolution=4, k=4, hidden_channels=8, depth=2, kernel_size=3)
    _, calls = _count_checks(lambda: model(pos, None, batch))
    assert calls["check_batch"] == 1
    assert calls["check_finite"] == 2


def test_segmenter_forward_does_not_revalidate_its_own_grid():
    pos, batch = _clouds()
    model = GridifiedSegmenter(3, 4, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3, point_channels=8)
    out, calls = _count_checks(lambda: model(pos, None, batch))
    assert out.shape == (pos.size(0), 4)
    assert calls["check_batch"] == 1
    assert calls["check_finite"] == 2  # de-gridification of the model's own grid is unchecked


def test_public_entries_still_validate_everything():
    pos, batch = _clouds()
    bad = pos.clone()
    bad[70, 1] = float("nan")
    with pytest.raises(ValueError, match="knn: x contains NaN values .* cloud 1 at row 70"):
        knn(bad, pos, 2, batch, batch)
    with pytest.raises(ValueError, match="Gridification: pos contains NaN"):
        Gridification(3, 8, resolution=4, k=4)(bad, None, batch)
    from gridify.nn import RegularGrid

    with pytest.raises(ValueError, match="bilateral_knn: pos contains NaN"):
        bilateral_knn(bad, RegularGrid(4), 4, batch)
    with pytest.raises(ValueError, match=r"scatter: index values must lie in \[0, 2\)"):
        scatter(torch.ones(3, 2), torch.tensor([0, 1, 2]), dim_size=2)


def test_degridification_refuses_a_nan_grid():
    pos, batch = _clouds(b=2)
    gridify = Gridification(3, 8, resolution=4, k=4)
    grid, graph = gridify(pos, None, batch, return_graph=True)
    grid = grid.detach().clone()
    grid[1, 3, 2, 2, 2] = float("inf")
    with pytest.raises(ValueError, match="Degridification: grid contains Inf values .* cloud 1"):
        Degridification(8, 3)(grid, graph)


def test_every_model_validates_its_inputs_once():
    """No nested public module (backbone, block, convolution, field, RNN) re-validates a model's own tensors."""
    from gridify.baselines import PointCKConvClassifier, PointNet2Classifier
    from gridify.models import TemporalGridifiedClassifier

    pos, batch = _clouds()
    x = pos * 0.5
    for model in (
        GridifiedClassifier(3, 5, resolution=4, k=4, hidden_channels=8, depth=2, kernel_size=3, backbone="mrconv"),
        GridifiedClassifier(3, 5, resolution=5, k=4, hidden_channels=8, depth=2, kernel_size=3, backbone="unet"),
        PointNet2Classifier(3, 5),
        PointCKConvClassifier(3, 5, hidden_channels=8, depth=2, k=8),
    ):
        for mode in (model.train, model.eval):
            mode()
            _, calls = _count_checks(lambda: model(pos, x, batch))
            assert calls["check_batch"] == 1 and calls["check_finite"] == 2, (type(model).__name__, calls)
            assert calls["check_index"] == 0  # no module re-checks index tensors the model built
    temporal = TemporalGridifiedClassifier(3, 2, resolution=4, k=4, hidden_channels=8, depth=1)
    _, calls = _count_checks(lambda: temporal(pos.reshape(1, 3, 64, 3), x=x.reshape(1, 3, 64, 3)))
    assert calls["check_batch"] == 1 and calls["check_finite"] == 0  # pos/x checked per frame, by the model


def test_nested_modules_validate_when_called_directly():
    from gridify.backbones import CCNN

    grid = torch.randn(2, 4, 5, 5, 5)
    backbone = CCNN(4, 4, hidden_channels=8, depth=2, kernel_size=3)
    _, calls = _count_checks(lambda: backbone(grid))
    assert calls["check_finite"] == 1  # the backbone's input, once; blocks and convolutions are trusted
    with _checks.trusted_inputs():
        _, calls = _count_checks(lambda: backbone(grid))
    assert calls["check_finite"] == 0
