"""gridify.evaluation on scene checkpoints: the scene settings, the whole-scene config, ``gridify evaluate``."""

import argparse

import pytest
import torch

from gridify.datasets import ProceduralScenes
from gridify.scene_inference import evaluate_scenes


# --------------------------------------------------------------------------------------
# whole-scene inference
# --------------------------------------------------------------------------------------
class PerPoint(torch.nn.Module):
    """A per-point model: logits = Linear(x), whatever the crop."""

    def __init__(self, f=4, c=5):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(f, c)
        self.sizes = []

    def forward(self, pos, x, batch):
        self.sizes.append(len(pos))
        return self.lin(x)


def test_evaluation_scene_settings_and_whole_scene_config():
    from gridify.evaluation import FROM_CONFIG, scene_dataset_config, scene_settings

    cfg = {
        "task": "scene_segmentation",
        "data": {"voxel_size": 0.05, "max_points": 20_000, "train": {"max_points": 10}},
    }
    args = argparse.Namespace(voxel_size=None, max_points=None)
    assert scene_settings(cfg, args) == {"voxel_size": 0.05, "max_points": 20_000}
    assert scene_settings(cfg, argparse.Namespace(voxel_size=0.1, max_points=None)) == {
        "voxel_size": 0.1,
        "max_points": 20_000,
    }
    assert scene_settings(cfg, args, max_points=None, voxel_size=FROM_CONFIG) == {
        "voxel_size": 0.05,
        "max_points": None,
    }
    whole = scene_dataset_config(cfg)
    assert whole["data"]["voxel_size"] is None and whole["data"]["train"]["max_points"] is None
    assert cfg["data"]["max_points"] == 20_000  # the given config is left as it was


def test_gridify_evaluate_scene_checkpoint_scores_whole_scenes(tmp_path, monkeypatch):
    import json

    import gridify.evaluation as evaluation

    data = {
        "name": "scene_procedural",
        "num_scenes": 2,
        "num_points": 3000,
        "kind": "indoor",
        "seed": 4,
        "voxel_size": 0.1,
        "max_points": 800,
    }
    model = PerPoint(f=3, c=10)
    payload = {
        "config": {"task": "scene_segmentation", "data": data},
        "task": "scene_segmentation",
        "kind": "model",
        "info": {"num_outputs": 10, "in_channels": 3},
        "gridify_version": "test",
    }
    monkeypatch.setattr(evaluation, "load_checkpoint", lambda path: payload)
    monkeypatch.setattr(evaluation, "build_model_from_checkpoint", lambda p, reparameterize=True: model)
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"")
    report = evaluation.main(["--ckpt", str(ckpt), "--split", "val", "--no-progress", "--device", "cpu"])
    ds = ProceduralScenes("val", num_scenes=2, num_points=3000, kind="indoor", seed=4)
    values, extra = evaluate_scenes(model, ds, voxel_size=0.1, max_points=800)
    assert report["metrics"] == pytest.approx(values) and report["num_points"] == 6000
    assert report["per_class_iou"] == extra["per_class_iou"] and report["max_points"] == 800
    written = json.loads((tmp_path / "model.val_metrics.json").read_text())
    assert written["confusion_matrix"] == extra["confusion_matrix"]
    model.sizes.clear()
    report = evaluation.main(
        [
            "--ckpt",
            str(ckpt),
            "--split",
            "train",
            "--no-progress",
            "--device",
            "cpu",
            "--max-points",
            "500",
            "--output",
            str(tmp_path / "train.json"),
        ]
    )
    assert report["num_points"] == 6000 and report["max_points"] == 500 and max(model.sizes) <= 500


def test_a_dataset_whose_columns_are_not_the_model_s_is_refused_before_evaluating():
    """The dataset's own features (data.features null) of another width than the model's in_channels: one config
    error naming data.features and the features the model was trained with, before any forward pass."""
    pytest.importorskip("lightning")
    from gridify.evaluation import _check_input_width

    ds = ProceduralScenes("test", kind="outdoor", num_scenes=1, num_points=50, features=["strength"])
    payload = {"model_kwargs": {"in_channels": 2}, "info": {"features": ["strength", "height"]}}
    with pytest.raises(SystemExit) as exc:
        _check_input_width(ds, payload, True, "gridify evaluate")
    assert str(exc.value) == (
        "gridify evaluate: config error: data.features: ['strength'] give 1 column(s) per point but the model takes "
        "2; evaluate with the features it was trained with (data.features=['strength', 'height'])"
    )
    _check_input_width(ds, {"model_kwargs": {"in_channels": 1}}, True, "gridify evaluate")  # the same width: fine
