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


def test_a_dataset_whose_features_or_classes_differ_from_the_checkpoint_s_is_refused_naming_both():
    """``data.features`` in another order than the checkpoint's (the same width) ran and reported the metrics of
    a wrongly fed model; classes of other names or order scored its outputs against the wrong labels."""
    pytest.importorskip("lightning")
    from gridify.evaluation import _check_dataset_matches

    ds = ProceduralScenes("test", kind="outdoor", num_scenes=1, num_points=50, features=["height", "strength"])
    names = list(ds.class_names)
    with pytest.raises(SystemExit) as exc:
        _check_dataset_matches(
            ds, {"info": {"features": ["strength", "height"]}}, "scene_segmentation", "gridify evaluate"
        )
    assert str(exc.value) == (
        "gridify evaluate: config error: data.features: the dataset gives ['height', 'strength'] but the model was "
        "trained with ['strength', 'height'] (the same names in another order); evaluate with "
        "data.features=['strength', 'height']"
    )
    payload = {"info": {"features": ["height", "strength"], "class_names": names[::-1]}}
    with pytest.raises(SystemExit, match=r"config error: the class names: the dataset gives \[.*\(the same names in"):
        _check_dataset_matches(ds, payload, "scene_segmentation", "gridify evaluate")
    payload = {"info": {"features": ["height", "strength"], "class_names": names, "num_outputs": len(names) + 1}}
    with pytest.raises(SystemExit, match=rf"the number of classes: the dataset gives {len(names)} but the model"):
        _check_dataset_matches(ds, payload, "scene_segmentation", "gridify evaluate")
    _check_dataset_matches(
        ds, {"info": {"features": ["height", "strength"], "class_names": names}}, "scene_segmentation", "p"
    )
    _check_dataset_matches(ds, {"info": {}}, "scene_segmentation", "p")  # nothing recorded: nothing to compare


def _scene_payload(features):
    data = {"name": "scene_procedural", "num_scenes": 1, "num_points": 400, "kind": "outdoor", "seed": 4}
    data.update(voxel_size=0.5, max_points=200, features=list(features))
    return {
        "config": {"task": "scene_segmentation", "data": data},
        "task": "scene_segmentation",
        "kind": "model",
        "info": {"num_outputs": 11, "in_channels": len(features), "features": list(features)},
        "gridify_version": "test",
    }


def test_gridify_evaluate_with_features_in_another_order_fails_before_evaluating(tmp_path, monkeypatch, capsys):
    import gridify.evaluation as evaluation

    model = PerPoint(f=2, c=11)  # the 11 outdoor classes
    monkeypatch.setattr(evaluation, "load_checkpoint", lambda path: _scene_payload(["strength", "height"]))
    monkeypatch.setattr(evaluation, "build_model_from_checkpoint", lambda p, reparameterize=True: model)
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"")
    argv = ["--ckpt", str(ckpt), "--split", "val", "--no-progress", "data.features=[height, strength]"]
    with pytest.raises(SystemExit, match=r"data.features: the dataset gives \['height', 'strength'\] but the model"):
        evaluation.main(argv)
    assert model.sizes == [] and not (tmp_path / "model.val_metrics.json").exists()
    assert evaluation.main(argv[:-1])["task"] == "scene_segmentation"  # the checkpoint's order: evaluated


def test_an_evaluation_that_scored_nothing_fails_and_writes_no_metrics(tmp_path, monkeypatch):
    """Exit status 0 with mIoU 0.00 / NaN after scoring nothing read as a model that scores 0 %: a split that
    measured nothing (no sample, no labelled point) fails with one line, and no metrics file is written."""
    import gridify.evaluation as evaluation

    payload = _scene_payload(["strength", "height"])
    payload.update(task="classification", config={"task": "classification", "data": {"name": "procedural"}})
    payload["info"] = {"num_outputs": 3, "in_channels": 3}
    monkeypatch.setattr(evaluation, "load_checkpoint", lambda path: payload)
    monkeypatch.setattr(evaluation, "build_model_from_checkpoint", lambda p, reparameterize=True: PerPoint(3, 3))
    monkeypatch.setattr(evaluation, "_evaluation_dataset", lambda cfg, split, scenes, prog: [])
    nan = float("nan")
    scored = {"loss": nan, "oa": nan, "macc": nan}, {"num_scored": 0}
    monkeypatch.setattr(evaluation, "evaluate_model", lambda *a, **k: scored)
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"")
    with pytest.raises(SystemExit) as exc:
        evaluation.main(["--ckpt", str(ckpt), "--no-progress"])
    assert str(exc.value).split(": ", 1)[1] == (
        "error: no sample was scored on the test split of procedural (0 samples): nothing was "
        "measured (no metrics written)"
    )
    assert not (tmp_path / "model.test_metrics.json").exists()


def test_a_task_says_why_its_metrics_measured_nothing():
    from gridify.tasks import get_task

    nan = float("nan")
    scene, cls, seg = get_task("scene_segmentation"), get_task("classification"), get_task("segmentation")
    assert scene.scored_nothing({"miou": 0.5}, {"num_scored": 2, "num_scored_points": 10}) == ""
    assert (
        scene.scored_nothing({"miou": 0.0}, {"num_scored": 2, "num_scored_points": 0}) == "no labelled point was scored"
    )
    assert "miou is undefined" in scene.scored_nothing({"miou": nan}, {"num_scored": 2})
    assert cls.scored_nothing({"oa": 0.0}, {"num_scored": 0}) == "no sample was scored"
    assert cls.scored_nothing({"oa": 0.0}, {"num_scored": 5}) == ""  # a model that is wrong on every sample: measured
    assert "instance_miou is undefined" in seg.scored_nothing({"instance_miou": nan}, {"num_scored": 1})


# --------------------------------------------------------------------------------------
# gridify evaluate --scan
# --------------------------------------------------------------------------------------
def _labelled_scans(root):
    import numpy as np

    from tests.helpers import write_scan

    (root / "velodyne").mkdir(parents=True)
    (root / "labels").mkdir()
    for name in ("000000", "000001"):
        write_scan(root / "velodyne" / f"{name}.bin", n=300, seed=int(name))
        np.random.default_rng(int(name)).integers(0, 3, 300).astype(np.uint32).tofile(root / "labels" / f"{name}.label")
    (root / "calib.txt").write_text("P0: 1 0 0 0\n")
    (root / "times.txt").write_text("0.0\n")


def test_evaluate_scan_writes_its_metrics_where_the_help_says(tmp_path, capsys, monkeypatch):
    """``evaluate --scan`` without ``--output`` wrote no metrics file, though the help promised one: it goes
    beside the checkpoint (``<ckpt stem>.scan_metrics.json``), or for a shipped ``--model`` into the current
    folder, checked before anything is scored."""
    import json

    from gridify.cli import main
    from tests.helpers import export_scene_model

    _labelled_scans(tmp_path / "seq")
    path, _ = export_scene_model(tmp_path)
    assert main(["evaluate", "--ckpt", str(path), "--scan", str(tmp_path / "seq" / "velodyne"), "--no-progress"]) == 0
    written = tmp_path / f"{path.stem}.scan_metrics.json"
    assert f"metrics written to {written}" in capsys.readouterr().out
    report = json.loads(written.read_text())
    assert [r["points"] for r in report["scans"]] == [300, 300] and "miou" in report["metrics"]
    from gridify._commands import evaluate_parser

    assert "scan_metrics.json" in evaluate_parser().format_help()


def test_evaluate_scan_of_a_sequence_folder_points_at_its_velodyne_folder(tmp_path):
    """``--scan sequences/NN`` (one level above ``velodyne/``) read ``calib.txt`` as a point file and failed on
    ``calib.txt: line 1 is not numeric``; the dataset root above ``sequences/`` likewise."""
    from gridify.cli import main
    from tests.helpers import export_scene_model

    seq = tmp_path / "dataset" / "sequences" / "05"
    _labelled_scans(seq)
    path, _ = export_scene_model(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", "--ckpt", str(path), "--scan", str(seq)])
    text = str(exc.value)
    assert f"--scan {seq}: a SemanticKITTI sequence folder; its scans are the .bin files of {seq}/velodyne/" in text
    assert f"give --scan {seq}/velodyne" in text and "calib" not in text
    with pytest.raises(SystemExit, match=r"a SemanticKITTI dataset root folder; .*sequences/NN/velodyne"):
        main(["evaluate", "--ckpt", str(path), "--scan", str(tmp_path / "dataset")])
