"""The ModelNet10 classifier shipped in gridify/pretrained/: loadable by name, portable, accurate."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import gridify
from gridify import cli
from gridify.api import PRETRAINED, pretrained_path
from gridify.io import read_points
from tests.helpers import shared_path

CLASSES = ["bathtub", "bed", "chair", "desk", "dresser", "monitor", "night_stand", "sofa", "table", "toilet"]


def _strings(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


def test_shipped_file_is_small_portable_and_documented():
    path = pretrained_path("modelnet10")
    assert path.suffix == ".pt" and path.stat().st_size < 2_000_000
    payload = torch.load(path, weights_only=True)
    meta = {k: v for k, v in payload.items() if k != "state_dict"}
    assert not [s for s in _strings(meta) if s.startswith("/")], "an absolute path of the training machine"
    card = payload["info"]["pretrained"]
    assert card["name"] == "modelnet10" and card["test_metrics"]["oa"] >= 0.93 and card["num_test_samples"] == 908


def test_the_modelnet40_classifier_is_shipped_with_its_validation_provenance():
    path = pretrained_path("modelnet40")
    assert path.stat().st_size < 2_000_000
    payload = torch.load(path, weights_only=True)
    assert not [s for s in _strings({k: v for k, v in payload.items() if k != "state_dict"}) if s.startswith("/")]
    card = payload["info"]["pretrained"]
    assert card["name"] == "modelnet40" and "test_metrics" not in card  # selected on validation only
    assert card["val_metrics"]["val_oa"] > 0.85
    model = gridify.load("modelnet40")
    assert model.task == "classification" and len(model.class_names) == 40 and "airplane" in model.class_names
    g = torch.Generator().manual_seed(0)
    pred = model.predict(torch.randn(900, 3, generator=g))
    assert pred.probabilities.shape == (40,) and abs(float(pred.probabilities.sum()) - 1) < 1e-5


def test_modelnet40_model_names_a_training_shape(shared_data):
    root = shared_path(shared_data, "modelnet40_train_fp16/ModelNet40/airplane/train")
    pred = gridify.load("modelnet40").predict(np.load(root / "airplane_0001.npy", allow_pickle=False).astype("float32"))
    assert pred.names == "airplane"


def test_load_by_name_gives_the_modelnet10_classifier():
    model = gridify.load("modelnet10")
    assert model.task == "classification" and list(model.class_names) == CLASSES
    g = torch.Generator().manual_seed(0)
    pred = model.predict(torch.randn(700, 3, generator=g))  # any number of points
    assert pred.probabilities.shape == (10,) and abs(float(pred.probabilities.sum()) - 1) < 1e-5


def test_unknown_name_and_missing_file_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"unknown pretrained model 'modelnet99'.*'modelnet10', 'modelnet40'"):
        pretrained_path("modelnet99")
    with pytest.raises(ValueError, match="path must be a str"):
        gridify.load(10)
    monkeypatch.setitem(PRETRAINED, "gone", "gone.pt")
    with pytest.raises(gridify.checkpoint.CheckpointError, match="'gone' is missing from this installation"):
        gridify.load("gone")


def test_a_file_of_that_name_wins_over_the_shipped_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "modelnet10").write_bytes(b"not a checkpoint")
    with pytest.raises(gridify.checkpoint.CheckpointError, match="modelnet10"):
        gridify.load("modelnet10")


def test_a_folder_named_like_a_shipped_model_does_not_hide_it(tmp_path, monkeypatch):
    """One rule for every entry (gridify._pretrained.shipped_name): a shipped model's name means the shipped model
    unless a *file* of that name is here; a dataset folder ``modelnet10/`` beside the command does not hide it (it
    failed as "is not a file"). A ``Path`` is always a path."""
    from pathlib import Path

    from gridify._pretrained import shipped_name
    from gridify.checkpoint import CheckpointError, checkpoint_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "modelnet10").mkdir()
    assert shipped_name("modelnet10") == "modelnet10" and shipped_name(Path("modelnet10")) is None
    assert checkpoint_file("modelnet10") == pretrained_path("modelnet10")
    assert list(gridify.load("modelnet10").class_names) == CLASSES
    with pytest.raises(CheckpointError, match="is not a file"):
        gridify.load(Path("modelnet10"))  # a path: the folder itself
    (tmp_path / "modelnet40").write_bytes(b"not a checkpoint")  # a file of that name wins, as before
    assert shipped_name("modelnet40") is None and checkpoint_file("modelnet40") == "modelnet40"


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_model_path_is_named(empty, tmp_path):
    """``gridify.load("")`` said "checkpoint . is not a file"."""
    from gridify.export import export_onnx

    with pytest.raises(ValueError, match=r"^gridify\.load: the model path is empty \('\s*'\); give a checkpoint file"):
        gridify.load(empty)
    with pytest.raises(ValueError, match=r"^export_onnx: the model path is empty .*shipped model \(modelnet10"):
        export_onnx(empty, tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def test_shipped_model_on_real_test_shapes(shared_data):
    """Five test shapes of every class, spread over the split (50 shapes, not seen in training):
    at least 44 right (the model scores 93.7 % on all 908; these 50 give 47)."""
    root = shared_path(shared_data, "modelnet10_pcd/ModelNet10/pcd")
    model = gridify.load("modelnet10")
    right = 0
    for label, name in enumerate(CLASSES):
        files = sorted((root / name / "test").glob("*.pcd"))
        for path in files[3 :: len(files) // 5][:5]:
            right += int(model.predict(read_points(path)).label == label)
    assert right >= 44


def test_cli_predict_with_the_shipped_model(tmp_path, capsys, shared_data):
    root = shared_data / "modelnet10_pcd" / "ModelNet10" / "pcd" / "chair" / "test"
    if not root.is_dir():
        pytest.skip("modelnet10_pcd not in the shared data")
    scan = sorted(root.glob("*.pcd"))[0]
    out = tmp_path / "pred.json"
    assert cli.main(["predict", str(scan), "--model", "modelnet10", "--out", str(out)]) == 0
    assert "chair" in capsys.readouterr().out
    written = json.loads(out.read_text())
    assert written["class_names"][written["labels"]] == "chair"


def test_cli_model_and_ckpt_are_exclusive(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "gridify.cli", "predict", "x.ply", "--model", "modelnet10", "--ckpt", "m.pt"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert res.returncode == 2 and "not allowed with argument" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "gridify.cli", "predict", "x.ply", "--model", "modelnet99"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert res.returncode == 2 and "invalid choice: 'modelnet99'" in res.stderr


def test_up_axis_reads_a_y_up_cloud_of_the_normal_resampled_release(shared_data, tmp_path, capsys):
    """modelnet40_normal_resampled is y up: read as z up, an airplane is not one; with up_axis="y" it is,
    through Predictor.predict and gridify predict --up-axis alike."""
    folder = shared_path(shared_data, "modelnet40_normal_resampled_sample/data/modelnet40_normal_resampled/airplane")
    path = sorted(folder.glob("*.txt"))[0]
    model = gridify.load("modelnet40")
    pts = np.loadtxt(path, delimiter=",")[:, :3]
    as_z = model.predict(pts)
    as_y = model.predict(pts, up_axis="y")
    assert as_y.names == "airplane" and as_z.names != "airplane"
    assert np.isclose(model.predict(pts[:, [0, 2, 1]] * [1, -1, 1]).probabilities, as_y.probabilities).all()
    with pytest.raises(ValueError, match="up_axis must be one of"):
        model.predict(pts, up_axis="w")
    xyz = tmp_path / "cloud.xyz"
    np.savetxt(xyz, pts[:2048])
    assert cli.main(["predict", str(xyz), "--model", "modelnet40", "--up-axis", "y"]) == 0
    assert "airplane" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        cli.main(["predict", str(xyz), "--model", "modelnet40", "--up-axis", "up"])
    assert exc.value.code == 2
    assert "--up-axis: must be one of z, y, x, -z, -y, -x, got 'up'" in capsys.readouterr().err


def test_the_semantickitti_segmenter_is_shipped_with_its_validation_provenance():
    path = pretrained_path("semantickitti")
    assert path.stat().st_size < 10_000_000
    payload = torch.load(path, weights_only=True)
    assert not [s for s in _strings({k: v for k, v in payload.items() if k != "state_dict"}) if s.startswith("/")]
    card = payload["info"]["pretrained"]
    assert card["name"] == "semantickitti" and "test_metrics" not in card and card["val_metrics"]["val_miou"] > 0.2
    model = gridify.load("semantickitti")
    assert model.whole_scenes and len(model.class_names) == 19 and model.class_names[:2] == ["car", "bicycle"]
    assert model.scene_features == ("strength", "height")
    # whole-scan default measured on validation: 4 evenly rotated views of 1 fragment (32.33 % against 30.79 % with
    # 1 view of 4 fragments, about as many crops); predict, evaluate --scan and the exported runner use it
    assert (payload["info"]["votes"], payload["info"]["max_fragments"]) == (4, 1)
    whole = card["whole_scan"]
    assert whole["val_miou"] > card["val_metrics"]["val_miou"] and (whole["votes"], whole["max_fragments"]) == (4, 1)


def _small_scan(n=1500):
    rng = np.random.default_rng(3)
    xyz = (rng.normal(size=(n, 3)) * [8.0, 8.0, 0.8]).astype(np.float32)
    return xyz, rng.uniform(0.0, 0.9, n).astype(np.float32)


def test_a_scan_array_with_intensity_is_refused_by_name_and_its_fields_route_works(tmp_path, capsys):
    model = gridify.load("semantickitti")
    xyz, strength = _small_scan()
    table = np.hstack([xyz, strength[:, None]])
    with pytest.raises(
        ValueError, match=r"Predictor\.predict: points must have shape \[N, 3\].*got \(1500, 4\).*fields="
    ):
        model.predict(table)
    with pytest.raises(ValueError, match=r"Predictor\.predict: points must have shape \[N, 3\].*got \(1500,\)"):
        model.predict(xyz[:, 0])
    want = model.predict(gridify.io.PointCloud(points=xyz, fields={"intensity": strength})).labels
    # the same scan as a KITTI .bin (intensity read by the format) and as a named .npy table: the same labels
    table.astype(np.float32).tofile(tmp_path / "scan.bin")
    np.testing.assert_array_equal(model.predict(tmp_path / "scan.bin").labels, want)
    np.save(tmp_path / "scan.npy", table)
    out = tmp_path / "labels.npy"
    argv = ["predict", str(tmp_path / "scan.npy"), "--model", "semantickitti", "--no-progress", "--out", str(out)]
    assert cli.main([*argv, "--columns", "x", "y", "z", "intensity"]) == 0
    np.testing.assert_array_equal(np.load(out), want)
    with pytest.raises(SystemExit, match=r"no intensity field.*--columns x y z intensity"):
        cli.main(argv)  # unnamed, the 4th column is not guessed: the error says how to name it
    bad = strength.copy()
    bad[7] = np.nan  # the features are built from the field: the message names the field and its row
    with pytest.raises(ValueError, match=r"hold NaN/Inf \(row 7\); its field 'intensity' holds NaN/Inf \(row 7\)"):
        model.predict(gridify.io.PointCloud(points=xyz, fields={"intensity": bad}))
    # a row the reader dropped (NaN coordinate at row 5) does not shift the row named: row 8 of the file
    rows = table.astype(np.float32)
    rows[5, 0], rows[8, 3] = np.nan, np.inf
    rows.tofile(tmp_path / "holes.bin")
    with pytest.warns(UserWarning, match="dropped 1"):
        with pytest.raises(ValueError, match=r"holds NaN/Inf \(row 8 of the file\)"):
            model.predict(tmp_path / "holes.bin")


def test_an_intensity_off_the_unit_scale_warns_and_an_overflowing_input_is_refused():
    """0-255 floats reach a model trained on [0, 1] remission as they are: a warning naming the field, the row and
    the fix; a value so large that the model's output overflows (1e30) is an error, never NaN labels."""
    model = gridify.load("semantickitti")
    xyz, strength = _small_scan(400)
    with pytest.warns(
        UserWarning,
        match=r"its field 'intensity': 400 intensity value\(s\) outside \[0, 1\].*"
        r"at row 0\): divide 8-bit values by 255",
    ):
        model.predict(gridify.io.PointCloud(points=xyz, fields={"intensity": strength * 255 + 1}))
    huge = strength.copy()
    huge[7] = 1e30
    with (
        pytest.warns(UserWarning, match="outside"),
        pytest.raises(
            ValueError, match=r"Predictor\.predict: the model's output is NaN/Inf for \d+ of 400 points.*1e\+30"
        ),
    ):
        model.predict(gridify.io.PointCloud(points=xyz, fields={"intensity": huge}))
    with pytest.raises(ValueError, match=r"Predictor\.forward: category is only used by part segmenters"):
        model(torch.from_numpy(xyz), torch.zeros(400, 2), torch.zeros(400, dtype=torch.long), category=torch.zeros(1))


def test_a_scan_in_millimetres_warns_naming_the_file_and_the_unit(tmp_path):
    """A scan in millimetres (or centimetres) reads as a huge, sparse scene and is labelled without another sign:
    a warning naming the file, the extent and the fix. A scan in metres, even with a UTM offset, does not warn."""
    import warnings

    model = gridify.load("semantickitti")
    xyz, strength = _small_scan(400)
    rows = np.c_[xyz * 1000, strength].astype(np.float32)
    rows.tofile(tmp_path / "mm.bin")
    with pytest.warns(
        UserWarning,
        match=r"mm\.bin spans [\d.e+]+ along ., [\d.e+]+ voxels of the model's "
        r"voxel_size=0\.1 m: .*divide them by 1000 or 100",
    ):
        model.predict(tmp_path / "mm.bin")
    utm = xyz.astype(np.float64) + [5e5, 4e6, 100.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.predict(gridify.io.PointCloud(points=xyz, fields={"intensity": strength}))
        model.predict(gridify.io.PointCloud(points=utm, fields={"intensity": strength}))


@pytest.mark.slow  # a whole 127k-point scan on the CPU: about a minute
def test_the_shipped_scene_model_labels_a_real_scan_with_several_classes(shared_data, tmp_path, capsys):
    scan = shared_path(shared_data, "semantickitti_mini/dataset/sequences/05/velodyne/000000.bin")
    out = tmp_path / "labels.npy"
    assert cli.main(["predict", str(scan), "--model", "semantickitti", "--out", str(out), "--no-progress"]) == 0
    labels = np.load(out)
    counts = np.bincount(labels, minlength=19)
    assert len(labels) == 126_956 and (counts > 0.01 * len(labels)).sum() >= 4  # not one class for everything
