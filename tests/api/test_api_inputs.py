"""Inputs of the library API (gridify.gridify, gridify.load, Predictor): bad arguments get gridify's own error
naming the argument; large coordinates keep their precision; a failure leaves no half-done state."""

import numpy as np
import pytest
import torch

import gridify
from gridify.api import Predictor
from gridify.models import GridifiedClassifier
from gridify.nn import Gridification, SepFlexConv3d


def _tiny_classifier(**kw):
    args = dict(resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    args.update(kw)
    return GridifiedClassifier(3, 3, **args)


def _assert_same(a, b):
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "device, why",
    [
        ("xpu", "this torch build has no usable 'xpu'"),
        ("mps", "this torch build has no usable 'mps'"),
        ("meta", "meta tensors hold no data"),
    ],
)
def test_load_refuses_devices_that_cannot_run(device, why):
    with pytest.raises(ValueError, match=f"gridify.load: device '{device}' cannot run gridify \\({why}"):
        gridify.load("modelnet10", device=device)


def test_gridify_seed_and_empty_features():
    pts = np.random.default_rng(1).random((60, 3))
    with pytest.raises(ValueError, match=r"seed must be below 2\*\*64"):
        gridify.gridify(pts, seed=2**70)
    with pytest.raises(ValueError, match="features have 0 channels"):
        gridify.gridify(pts, np.ones((60, 0)))


@pytest.mark.parametrize("kwargs", [dict(omega0=1e38), dict(omega0=1e38, pos_embedding="siren")])
def test_frequency_scales_beyond_float32_phases_are_refused(kwargs):
    pts = np.random.default_rng(2).random((60, 3))
    with pytest.raises(ValueError, match="omega0 must be at most 10000"):
        gridify.gridify(pts, resolution=5, k=4, **kwargs)
    with pytest.raises(ValueError, match="omega0 must be at most 10000"):
        GridifiedClassifier(3, 4, **kwargs)
    assert torch.isfinite(gridify.gridify(pts, resolution=5, k=4, omega0=1e4)).all()


def test_batched_gridify_names_the_cloud_that_cannot_be_normalized():
    pts = np.random.default_rng(3).random((3, 60, 3))
    pts[1] = 0.5
    with pytest.raises(ValueError, match="gridify.gridify: cloud 1: normalize_cloud: all 60 points are identical"):
        gridify.gridify(pts, resolution=5, k=4)


def test_meta_tensors_are_refused_by_the_library_api():
    pos = torch.rand(50, 3, device="meta")
    for call, match in (
        (lambda: gridify.gridify(pos), "points is a meta"),
        (lambda: gridify.load("modelnet10").predict(pos), "points is a meta"),
    ):
        with pytest.raises(ValueError, match=match):
            call()


def test_gridify_keeps_utm_precision():
    pts = np.random.default_rng(0).uniform(-1, 1, (100, 3))
    ref = gridify.gridify(pts)
    for offset in (5e5, 4e6, 1e9):
        torch.testing.assert_close(gridify.gridify(pts + offset), ref, rtol=1e-4, atol=1e-5)


def test_predictor_keeps_utm_precision():
    torch.manual_seed(0)
    pred = Predictor(
        _tiny_classifier(), task="classification", class_names=["a", "b", "c"], num_points=50, in_channels=3
    )
    pts = np.random.default_rng(1).uniform(-1, 1, (80, 3))
    ref = pred.predict(pts).probabilities
    np.testing.assert_allclose(pred.predict(pts + np.array([5e5, 4e6, 120.0])).probabilities, ref, atol=1e-5)
    np.testing.assert_allclose(pred.predict(torch.from_numpy(pts).bfloat16()).probabilities.sum(), 1, atol=1e-5)


def test_predictor_size_and_seed_arguments(monkeypatch):
    pred = Predictor(
        _tiny_classifier(), task="classification", class_names=["a", "b", "c"], num_points=50, in_channels=3
    )
    pts = np.random.default_rng(0).uniform(-1, 1, (70, 3))
    with pytest.raises(
        ValueError, match=r"Predictor.predict: num_votes=1000000000 \(subsets of 50 points\) would need"
    ):
        pred.predict(pts, num_votes=10**9)
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -1"):
        pred.predict(pts, seed=-1)
    with pytest.raises(ValueError, match="Predictor.embed: num_votes must be a positive integer, got 0"):
        pred.embed(pts, num_votes=0)
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 2.5"):
        pred.embed(pts, batch_size=2.5)
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", "2e6")
    with pytest.raises(ValueError, match=r"batch_size=64 \(up to 64 clouds of 50 points per forward pass\)"):
        pred.predict(pts, num_votes=64, batch_size=64)


def test_api_input_conversion_names_the_problem():
    with pytest.raises(ValueError, match="points is a ragged nested list"):
        gridify.gridify([[0.0, 0.0, 0.0], [1.0, 2.0]])
    with pytest.raises(TypeError, match="points must hold real numbers, got dtype torch.complex64"):
        gridify.gridify(torch.zeros(5, 3, dtype=torch.complex64))
    with pytest.raises(ValueError, match="points hold values beyond float32's range"):
        gridify.gridify(np.random.rand(20, 3) * 1e300, normalize=False)
    assert gridify.gridify(np.random.rand(20, 3) * 1e300, resolution=3, k=2).shape == (16, 3, 3, 3)
    with pytest.raises(ValueError, match="features hold values beyond float32's range"):
        gridify.gridify(np.random.rand(20, 3), np.full((20, 2), 1e200))
    with pytest.raises(ValueError, match="channels must be a positive integer, got 2.5"):
        gridify.gridify(np.random.rand(20, 3), channels=2.5)
    assert gridify.gridify(torch.rand(30, 3, dtype=torch.bfloat16), resolution=3, k=2).shape == (16, 3, 3, 3)


def test_predictor_failing_halfway_leaves_mode_buffers_and_caches(monkeypatch):
    torch.manual_seed(0)
    pred = Predictor(
        _tiny_classifier(), task="classification", class_names=["a", "b", "c"], num_points=50, in_channels=3
    )
    pts = np.random.default_rng(0).uniform(-1, 1, (70, 3))
    ref = pred.predict(pts, num_votes=3, batch_size=1).probabilities
    pred.model.train()  # a user's setting: predict runs in eval mode and restores it
    np.testing.assert_allclose(pred.predict(pts, num_votes=3, batch_size=1).probabilities, ref, atol=1e-6)
    assert all(m.training for m in pred.model.modules())
    pred.model.eval()
    fresh = Gridification(3, 8, 4, k=4)
    conv = next(m for m in pred.model.modules() if isinstance(m, SepFlexConv3d))
    cache = getattr(conv, "_kernel_cache", None)
    buffers = {k: v.clone() for k, v in pred.model.named_buffers()}
    calls = []

    def fail_second(module, args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("device lost")

    handle = pred.model.register_forward_pre_hook(fail_second)
    pred.model.gridify.grid = fresh.grid  # an attribute that the call must not change
    with pytest.raises(RuntimeError, match="device lost"):
        pred.predict(pts, num_votes=3, batch_size=1)
    handle.remove()
    assert not any(m.training for m in pred.model.modules())
    assert getattr(conv, "_kernel_cache", None) is cache and pred.model.gridify.grid is fresh.grid
    _assert_same(buffers, dict(pred.model.named_buffers()))
