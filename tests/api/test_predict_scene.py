"""Predictions on raw scene files: ``Predictor.predict`` / ``Predictor.inspect`` on scene segmenters (the
training features built from the file, every point scored through fragments and crops)."""

import numpy as np
import pytest
import torch

from gridify import load
from tests.helpers import SCENE_CLASSES, SCENE_SMALL, export_scene_model, write_scan
from gridify.scene_inference import predict_scene

CLASSES, SMALL = SCENE_CLASSES, SCENE_SMALL
_scan, _export = write_scan, export_scene_model


def test_predict_scene_file_equals_predict_scene_on_the_training_features(tmp_path):
    rows = _scan(tmp_path / "scan.bin")
    path, model = _export(tmp_path)
    pred_model = load(path)
    assert pred_model.whole_scenes and pred_model.scene_features == ("strength", "height")
    calls = []
    pred = pred_model.predict(tmp_path / "scan.bin", progress=lambda d, t: calls.append((d, t)), batch_size=2)
    pos = torch.from_numpy(rows[:, :3].copy())
    x = torch.from_numpy(np.stack([rows[:, 3], rows[:, 2] - rows[:, 2].min()], 1))
    want = predict_scene(model, pos, x, voxel_size=0.5, max_points=200, batch_size=2)
    assert pred.labels.shape == (700,) and pred.probabilities.shape == (700, 3) and pred.dense
    np.testing.assert_allclose(pred.probabilities, want.numpy(), atol=1e-5)
    np.testing.assert_array_equal(pred.labels, want.argmax(1).numpy())
    assert calls and calls[-1][0] == calls[-1][1] and len(calls) == -(-calls[-1][1] // 2)
    # the same through features= (no file needed)
    again = pred_model.predict(rows[:, :3], features=x.numpy())
    np.testing.assert_allclose(again.probabilities, want.numpy(), atol=1e-5)


def test_predict_scene_errors_name_the_missing_feature(tmp_path):
    _scan(tmp_path / "scan.bin")
    path, _ = _export(tmp_path)
    m = load(path)
    with pytest.raises(ValueError, match=r"trained with LiDAR intensity .* has no intensity field"):
        m.predict(np.zeros((10, 3), np.float32))
    with pytest.raises(ValueError, match=r"features must have shape \[N, F\] = \[10, 2\]"):
        m.predict(np.zeros((10, 3), np.float32), features=np.zeros((10, 3)))
    with pytest.raises(ValueError, match=r"features contain NaN/Inf values \(row 4\)"):
        bad = np.zeros((10, 2))
        bad[4, 1] = np.nan
        m.predict(np.zeros((10, 3), np.float32), features=bad)
    with pytest.raises(ValueError, match="category is only used by part segmenters"):
        m.predict(tmp_path / "scan.bin", category="chair")
    with pytest.raises(ValueError, match="progress must be None or callable"):
        m.predict(tmp_path / "scan.bin", progress=3)
    path2, _ = _export(tmp_path, features=("color",))
    with pytest.raises(ValueError, match=r"trained with colours .* has none"):
        load(path2).predict(tmp_path / "scan.bin")


def test_inspect_scene_labels_every_metric_point_without_a_grid(tmp_path):
    rows = _scan(tmp_path / "scan.bin", n=300)
    path, _ = _export(tmp_path)
    m = load(path)
    res = m.inspect(tmp_path / "scan.bin")
    np.testing.assert_allclose(res["pos"], rows[:, :3])  # metres, not normalized
    assert res["grid"] is None and res["graph"] is None
    np.testing.assert_array_equal(res["prediction"].labels, m.predict(tmp_path / "scan.bin").labels)
