"""Bad arguments found by probing the public API: each gets gridify's own error naming the argument."""
import numpy as np
import pytest
import torch

import gridify
from gridify.checkpoint import CheckpointError, build_model_from_checkpoint, export_model
from gridify.models import GridifiedClassifier, TemporalGridifiedClassifier, build_model
from gridify.registry import BACKBONES, UnknownNameError


def test_unknown_registry_names_are_value_errors_and_key_errors():
    for call in (lambda: build_model("nope"), lambda: BACKBONES.get("zzz"),
                 lambda: GridifiedClassifier(3, 4, backbone="zzz"),
                 lambda: GridifiedClassifier(3, 4, pos_embedding="zzz")):
        with pytest.raises(ValueError) as err:
            call()
        assert isinstance(err.value, KeyError) and isinstance(err.value, UnknownNameError)
        assert str(err.value).startswith("unknown ") and "known" in str(err.value)  # not quoted like a KeyError


def _tiny_payload(**model_kwargs):
    kw = dict(in_channels=3, num_classes=4, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    kw.update(model_kwargs)
    model = GridifiedClassifier(**kw).eval()
    return model, dict(model_name="gridified_classifier", model_kwargs=kw, task="classification",
                       info=dict(class_names=list("abcd"), num_points=32))


def test_checkpoint_with_an_unknown_backbone_names_the_backbone(tmp_path):
    model, meta = _tiny_payload()
    path = tmp_path / "m.pt"
    export_model(path, model, meta)
    payload = torch.load(path, weights_only=True)
    payload["model_kwargs"]["backbone"] = "zzz"
    with pytest.raises(CheckpointError, match=r"cannot rebuild 'gridified_classifier'.*unknown backbone 'zzz'"):
        build_model_from_checkpoint(payload)
    payload["model_name"] = "zzz"
    with pytest.raises(CheckpointError, match=r"model 'zzz' is not registered \(known models: "):
        build_model_from_checkpoint(payload)


def test_fresh_mrconv_model_saved_unfolded_loads_and_predicts(tmp_path):
    torch.manual_seed(0)
    model, meta = _tiny_payload(backbone="mrconv")
    path = tmp_path / "mr.pt"
    export_model(path, model, meta, reparameterize=False)
    pts = np.random.default_rng(0).random((50, 3))
    folded = gridify.load(path).predict(pts)  # folds for the model's resolution, not a placeholder
    plain = gridify.load(path, reparameterize=False).predict(pts)
    np.testing.assert_allclose(folded.probabilities, plain.probabilities, atol=1e-5)


@pytest.mark.parametrize("device, why", [("xpu", "this torch build has no usable 'xpu'"), ("mps", "this torch build has no usable 'mps'"),
                                         ("meta", "meta tensors hold no data")])
def test_load_refuses_devices_that_cannot_run(device, why):
    with pytest.raises(ValueError, match=f"gridify.load: device '{device}' cannot run gridify \\({why}"):
        gridify.load("modelnet10", device=device)


def test_gridify_seed_and_empty_features():
    pts = np.random.default_rng(1).random((60, 3))
    with pytest.raises(ValueError, match=r"seed must be below 2\*\*64"):
        gridify.gridify(pts, seed=2 ** 70)
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


@pytest.mark.parametrize("backend", ["torch", "kdtree"])
def test_radius_larger_than_any_distance_takes_every_pair(backend):
    x = torch.rand(20, 3)
    for r in (1e155, 1e300):
        edges = gridify.ops.radius(x, x, r, backend=backend, max_num_neighbors=64)
        assert edges.shape == (2, 400)


def test_temporal_errors_name_sequence_frame_and_point():
    torch.manual_seed(0)
    m = TemporalGridifiedClassifier(in_channels=3, num_classes=3).eval()
    pos = torch.rand(2, 3, 40, 3) * 1.6 - 0.8
    bad = pos.clone()
    bad[1, 1, 7] = torch.tensor([5.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"outside the grid box .* first at sequence 1, frame 1, point 7"):
        m(bad)
    mask = torch.ones(2, 3, dtype=torch.bool)
    mask[1, 1] = False
    assert m(bad, mask=mask).logits.shape == (2, 3)  # a padded frame may hold anything
    with pytest.raises(ValueError, match="pos has the unsupported dtype torch.float8_e4m3fn"):
        m(pos.to(torch.float8_e4m3fn))


@pytest.mark.parametrize("seed", ["seed=-1", "seed=4294967296", "seed=true"])
def test_config_seed_outside_the_trainer_range_is_a_config_error(seed):
    from gridify.training.config import ConfigError, resolve_config

    with pytest.raises(ConfigError, match=r"seed must be an integer in \[0, 2\*\*32 - 1\]"):
        resolve_config("procedural", [seed])


def test_config_with_an_unknown_model_or_backbone_names_it():
    from gridify.training.config import ConfigError
    from gridify.training.data import make_model

    with pytest.raises(ConfigError, match="model.name: unknown model 'nope'; known models: "):
        make_model("nope", {})
    with pytest.raises(ConfigError, match="model 'gridified_classifier': unknown backbone 'zzz'"):
        make_model("gridified_classifier", dict(in_channels=3, num_classes=4, backbone="zzz"))


@pytest.mark.parametrize("value", [0, -3, 2.5, True])
def test_pos_hidden_channels_zero_or_non_int_is_refused(value):
    with pytest.raises(ValueError, match=f"pos_hidden_channels must be a positive integer, got {value!r}"):
        GridifiedClassifier(3, 4, pos_hidden_channels=value)


def test_batched_gridify_names_the_cloud_that_cannot_be_normalized():
    pts = np.random.default_rng(3).random((3, 60, 3))
    pts[1] = 0.5
    with pytest.raises(ValueError, match="gridify.gridify: cloud 1: normalize_cloud: all 60 points are identical"):
        gridify.gridify(pts, resolution=5, k=4)


def test_meta_tensors_are_refused_by_the_library_api():
    pos = torch.rand(50, 3, device="meta")
    for call, match in ((lambda: gridify.gridify(pos), "points is a meta"),
                        (lambda: gridify.load("modelnet10").predict(pos), "points is a meta")):
        with pytest.raises(ValueError, match=match):
            call()
