"""``gridify.api.write_prediction``: the files ``gridify predict --out`` writes, one function for the CLI and the
scene benchmark."""

import json

import numpy as np
import pytest

from gridify.api import PREDICTION_FORMATS, Prediction, write_prediction
from gridify.io import PointCloud
from gridify.io.ply import read_ply_vertices


def _dense():
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]], np.float32)
    return Prediction(
        labels=probs.argmax(1),
        probabilities=probs,
        class_names=["ground", "car"],
        task="scene_segmentation",
        num_points=3,
    )


def test_every_format_holds_the_labels(tmp_path):
    cloud = PointCloud(np.arange(9, dtype=np.float32).reshape(3, 3))
    pred = _dense()
    assert set(PREDICTION_FORMATS) == {".txt", ".npy", ".ply", ".json"}
    assert np.loadtxt(write_prediction(tmp_path / "a.txt", cloud, pred), dtype=int).tolist() == [0, 1, 0]
    assert np.load(write_prediction(tmp_path / "a.npy", cloud, pred)).tolist() == [0, 1, 0]
    payload = json.loads(write_prediction(tmp_path / "a.json", cloud, pred).read_text())
    assert payload["labels"] == [0, 1, 0] and payload["class_names"] == ["ground", "car"]
    vertices = read_ply_vertices(write_prediction(tmp_path / "a.ply", cloud, pred))
    assert np.asarray(vertices["label"]).tolist() == [0, 1, 0]
    assert np.allclose(np.stack([vertices[c] for c in "xyz"], 1), cloud.points)


def test_another_extension_is_refused_and_nothing_is_written(tmp_path):
    with pytest.raises(ValueError, match=r"unsupported extension '\.csv'; use one of"):
        write_prediction(tmp_path / "a.csv", PointCloud(np.zeros((3, 3), np.float32)), _dense())
    assert not list(tmp_path.iterdir())
