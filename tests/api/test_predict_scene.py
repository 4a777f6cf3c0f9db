"""Predictions on raw scene files: ``Predictor.predict`` / ``Predictor.inspect`` on scene segmenters (the
training features built from the file, every point scored through fragments and crops)."""

import numpy as np
import pytest
import torch

from gridify import load
from tests.helpers import SCENE_CLASSES, SCENE_SMALL, export_scene_model, write_scan
from gridify.scene_inference import predict_scene
from gridify.datasets.scene_base import scene_height

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
    x = torch.from_numpy(np.stack([rows[:, 3], scene_height(rows[:, 2])], 1))
    want = predict_scene(model, pos, x, voxel_size=0.5, max_points=200, batch_size=2)
    assert pred.labels.shape == (700,) and pred.probabilities.shape == (700, 3) and pred.dense
    np.testing.assert_allclose(pred.probabilities, want.numpy(), atol=1e-5)
    np.testing.assert_array_equal(pred.labels, want.argmax(1).numpy())
    assert calls and calls[-1][0] == calls[-1][1] and len(calls) == -(-calls[-1][1] // 2)
    # the same through features= (no file needed)
    again = pred_model.predict(rows[:, :3], features=x.numpy())
    np.testing.assert_allclose(again.probabilities, want.numpy(), atol=1e-5)


def test_progress_true_draws_a_bar_on_stderr_and_false_is_silent(tmp_path, capsys):
    _scan(tmp_path / "scan.bin")
    path, model = _export(tmp_path)
    m = load(path)
    quiet = m.predict(tmp_path / "scan.bin", progress=False, batch_size=2)
    assert capsys.readouterr().err == ""
    shown = m.predict(tmp_path / "scan.bin", progress=True, batch_size=2)
    err = capsys.readouterr().err  # stderr is no terminal here: a line per 10 %, the last at 100 %
    assert err.startswith("[predict] ") and err.rstrip().endswith("crops (100 %)")
    np.testing.assert_array_equal(quiet.labels, shown.labels)
    pos = torch.from_numpy(np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32))
    predict_scene(model, pos, torch.zeros(50, 2), progress=True)
    assert capsys.readouterr().err.startswith("[predict_scene] ")
    with pytest.raises(ValueError, match=r"^predict_scene: progress must be None, True / False or callable"):
        predict_scene(model, pos, torch.zeros(50, 2), progress="yes")


def test_predict_scene_errors_name_the_missing_feature(tmp_path):
    _scan(tmp_path / "scan.bin")
    path, _ = _export(tmp_path)
    m = load(path)
    with pytest.raises(ValueError, match=r"trained with LiDAR intensity .* has no intensity field") as bare:
        m.predict(np.zeros((10, 3), np.float32))
    assert "read_points keeps a file's fields only when asked" not in str(bare.value)  # no file behind it
    # a .bin read without its fields (read_points' default) is told how to keep them, not to read a .bin
    from gridify.io import read_points

    with pytest.raises(ValueError, match=r"read_points keeps a file's fields only when asked: read it with "):
        m.predict(read_points(tmp_path / "scan.bin"))
    assert m.predict(read_points(tmp_path / "scan.bin", fields="all"), progress=False).labels.shape == (
        read_points(tmp_path / "scan.bin").points.shape[0],
    )
    with pytest.raises(ValueError, match=r"features must have shape \[N, F\] = \[10, 2\]"):
        m.predict(np.zeros((10, 3), np.float32), features=np.zeros((10, 3)))
    with pytest.raises(ValueError, match=r"features contain NaN/Inf values \(row 4\)"):
        bad = np.zeros((10, 2))
        bad[4, 1] = np.nan
        m.predict(np.zeros((10, 3), np.float32), features=bad)
    with pytest.raises(ValueError, match=r"category \(--category\) is only used by part segmenters"):
        m.predict(tmp_path / "scan.bin", category="chair")
    with pytest.raises(
        ValueError, match=r"progress must be None, True / False or callable as progress\(done, total\), got int"
    ):
        m.predict(tmp_path / "scan.bin", progress=3)
    # coordinates far beyond metres: named at the entry, not by the voxel step inside
    far = np.random.default_rng(0).normal(size=(10, 3)) * 1e18
    with pytest.raises(ValueError, match=r"^Predictor.predict: coordinates up to .* are too large for voxel_size=0.5"):
        m.predict(far, features=np.zeros((10, 2)))
    with pytest.raises(ValueError, match=r"^predict_scene: coordinates up to .* too large for voxel_size=0.5"):
        predict_scene(m.model, torch.from_numpy(far), voxel_size=0.5)
    # normals a model does not take are refused, not ignored
    with pytest.raises(ValueError, match=r"normals= is not used by this model: .*\['strength', 'height'\], without"):
        m.predict(tmp_path / "scan.bin", normals=np.zeros((700, 3)))
    with pytest.raises(ValueError, match=r"estimate_normals=True \(--estimate-normals\) is not used by this model"):
        m.inspect(tmp_path / "scan.bin", estimate_normals=True)
    with pytest.raises(ValueError, match=r"normals= is not used when features= is given"):
        m.predict(np.zeros((10, 3), np.float32), normals=np.zeros((10, 3)), features=np.zeros((10, 2)))
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
    calls = []
    m.inspect(tmp_path / "scan.bin", progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1]  # progress as in predict: after every model call
    with pytest.raises(ValueError, match=r"Predictor\.inspect: progress must be None, True / False or callable"):
        m.inspect(tmp_path / "scan.bin", progress="yes")


def test_inspect_refuses_progress_for_a_classifier():
    model = load("modelnet10")
    with pytest.raises(ValueError, match=r"Predictor\.inspect: progress= is for scene segmenters"):
        model.inspect(np.random.default_rng(0).normal(size=(300, 3)).astype(np.float32), progress=True)


@pytest.mark.parametrize(
    "features",
    [
        ("strength", "height"),
        ("xyz", "intensity", "height"),
        ("strength", "strength_scan", "ground_height", "verticality", "planarity", "has_strength"),
    ],
)
def test_a_scan_reaches_the_model_with_the_same_inputs_from_the_dataset_and_from_predict(
    tmp_path, monkeypatch, features
):
    """One builder (build_scene_features): the SemanticKITTI dataset's whole-scan item, Predictor.predict on
    the .bin and the exported runner's features() give the model identical points and features."""
    import gridify.scene_inference as SI
    from gridify.datasets import SemanticKITTI
    from gridify.datasets.scene_base import build_scene_features

    seq = tmp_path / "sequences" / "00"
    (seq / "velodyne").mkdir(parents=True)
    (seq / "labels").mkdir()
    rows = _scan(seq / "velodyne" / "000000.bin", n=500, seed=4)
    np.full(500, 40, np.uint32).tofile(seq / "labels" / "000000.label")  # road
    item = SemanticKITTI(tmp_path, "val", sequences=["00"], features=list(features))[0]
    path, _ = _export(tmp_path, features=features)
    seen = {}
    real_unchecked = SI.predict_scene_unchecked  # Predictor.predict validates once, then calls it

    def spy(model, pos, x, *args, **kw):
        seen["pos"], seen["x"] = pos.clone(), x.clone()
        return real_unchecked(model, pos, x, *args, **kw)

    monkeypatch.setattr(SI, "predict_scene_unchecked", spy)
    load(path).predict(seq / "velodyne" / "000000.bin")
    assert torch.equal(seen["pos"], item["pos"]) and torch.equal(seen["x"], item["x"])
    # the runner of an exported file builds them with the same function (its metadata's names)
    runner = type("R", (), {"features": list(features), "up_axis": "z"})()
    from gridify.export import OnnxSceneModel

    assert torch.equal(OnnxSceneModel.features_of(runner, seq / "velodyne" / "000000.bin"), item["x"])
    # integer intensities (LAS uint16) are put on the unit scale, as .bin remission is
    x16 = build_scene_features(["strength"], rows[:, :3], strength=np.array([0, 65535] * 250, np.uint16))
    assert x16.dtype == np.float32 and x16.min() == 0.0 and x16.max() == 1.0


def test_a_has_strength_model_labels_a_scan_without_intensity_and_a_model_without_it_refuses(tmp_path, monkeypatch):
    """A model trained with has_strength (and drop_strength) takes an xyz-only scan with strength 0 and has_strength 0,
    through predict and the exported runner's features_of; a model without has_strength refuses the scan and says
    which model takes it."""
    import gridify.scene_inference as SI
    from gridify.export import OnnxSceneModel

    rows = _scan(tmp_path / "scan.bin", n=400, seed=5)
    np.savetxt(tmp_path / "plot.xyz", rows[:, :3], fmt="%.6f")  # no intensity: a forest plot's x y z
    names = ("strength", "strength_scan", "height", "ground_height", "has_strength")
    path, _ = _export(tmp_path, features=names)
    seen = []
    real_unchecked = SI.predict_scene_unchecked

    def spy(model, pos, x, *args, **kw):
        seen.append(x.clone())
        return real_unchecked(model, pos, x, *args, **kw)

    monkeypatch.setattr(SI, "predict_scene_unchecked", spy)
    m = load(path)
    pred = m.predict(tmp_path / "plot.xyz", progress=False)
    assert pred.labels.shape == (400,)
    x = seen[-1].numpy()
    assert not x[:, [0, 1, 4]].any()  # strength, strength_scan and has_strength: 0
    np.testing.assert_allclose(x[:, 2], scene_height(rows[:, 2]), atol=1e-5)  # the geometry as from any scan
    with_intensity = m.predict(tmp_path / "scan.bin", progress=False)
    assert with_intensity.labels.shape == (400,) and (seen[-1].numpy()[:, 4] == 1).all() and seen[-1][:, 0].any()
    runner = type("R", (), {"features": list(names), "up_axis": "z"})()
    np.testing.assert_array_equal(OnnxSceneModel.features_of(runner, tmp_path / "plot.xyz").numpy(), x)
    # the same model in Python on bare coordinates (the file's six decimals aside)
    m.predict(rows[:, :3], progress=False)
    np.testing.assert_allclose(seen[-1].numpy(), x, atol=1e-5)
    plain, _ = _export(tmp_path, features=("strength", "height"))
    message = r"has no intensity field .* or use a model trained with has_strength among its features"
    with pytest.raises(ValueError, match=message):
        load(plain).predict(tmp_path / "plot.xyz")
    runner = type("R", (), {"features": ["strength_scan", "height"], "up_axis": "z"})()
    with pytest.raises(ValueError, match=r"^OnnxSceneModel.features_of: the model was trained with LiDAR intensity"):
        OnnxSceneModel.features_of(runner, tmp_path / "plot.xyz")


@pytest.mark.parametrize(
    "entry,value,message",
    [
        ("voxel_size", "0.1", r"entry info\['voxel_size'\] must be null or a positive number of metres, got '0.1'"),
        ("max_points", 2.5, r"entry info\['max_points'\] must be null or a positive integer, got 2.5"),
        ("features", 3, r"entry info\['features'\] must be a list of the scene feature names"),
        ("features", ["strength", "colour"], r"entry info\['features'\] must be a list of the scene feature names"),
        ("features", ["strength"], r"entry info\['features'\] \['strength'\] gives 1 columns but the model takes 2"),
        (
            "features",
            ["strength", "has_strength", "verticality"],
            r"entry info\['features'\] \['strength', 'has_strength', 'verticality'\] gives 3 columns but the model "
            r"takes 2",
        ),
    ],
)
def test_scene_checkpoint_entries_of_the_wrong_type_are_named_at_load(tmp_path, entry, value, message):
    from gridify.checkpoint import CheckpointError

    path, _ = _export(tmp_path)
    payload = torch.load(path, weights_only=True)
    payload["info"][entry] = value
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=rf"bad.pt: {message}"):
        load(tmp_path / "bad.pt")


def test_utm_scans_reach_the_model_with_their_millimetres(tmp_path, monkeypatch):
    """A float64 cloud in UTM metres (x ~ 5e5, y ~ 4.2e6: float32 keeps 0.5 m there) is centred in float64 before
    any float32 cast: by Predictor.predict / inspect on a file, and by predict_scene on a float64 tensor (the
    exported runner's crops are cast to float32 one by one)."""
    import gridify.scene_inference as SI

    rng = np.random.default_rng(3)
    utm = np.stack([5e5 + rng.uniform(0, 40, 400), 4.2e6 + rng.uniform(0, 40, 400), 90 + rng.uniform(0, 3, 400)], 1)

    def err(pos):
        p = np.asarray(pos, np.float64)
        return float(np.abs((p - p[0]) - (utm - utm[0])).max())

    np.save(tmp_path / "tile.npy", utm)  # float64 rows: read back as float64 (a large offset)
    path, model = _export(tmp_path, features=("height",))
    seen = {}
    real_unchecked = SI.predict_scene_unchecked  # Predictor.predict validates once, then calls it

    def spy(model, pos, x, *args, **kw):
        seen["pos"], seen["x"] = pos.clone(), x.clone()
        return real_unchecked(model, pos, x, *args, **kw)

    monkeypatch.setattr(SI, "predict_scene_unchecked", spy)
    m = load(path)
    m.predict(tmp_path / "tile.npy")
    assert seen["pos"].dtype == torch.float32 and err(seen["pos"]) < 1e-3
    np.testing.assert_allclose(seen["x"][:, 0].numpy(), scene_height(utm[:, 2] - utm[:, 2].mean()), atol=1e-3)
    assert err(m.inspect(tmp_path / "tile.npy")["pos"]) < 1e-3
    from gridify.export import OnnxSceneModel  # the exported runner's features of the same file (no fields in .npy)

    runner = type("R", (), {"features": ["xyz", "height"], "up_axis": "z"})()
    x = OnnxSceneModel.features_of(runner, tmp_path / "tile.npy")
    assert err(x[:, :3]) < 1e-3 and float(x[:, :3].abs().max()) < 50
    crops = []

    def runner(pos, x, batch):  # as the ONNX scene runner: each crop cast to float32
        crops.append((pos.float().double() - pos.double()).abs().max().item())
        return torch.zeros(pos.size(0), 3)

    monkeypatch.setattr(SI, "predict_scene_unchecked", real_unchecked)
    SI.predict_scene(runner, torch.from_numpy(utm), voxel_size=0.5, max_points=200)
    assert crops and max(crops) < 1e-4


def _dense_scan(path, n=2000, seed=3):
    """A KITTI ``.bin`` of ``n`` points in an 8 x 8 x 1 m box: several points per 0.5 m voxel, so the
    fragment cap decides how many fragments a view has."""
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.uniform(0, 8, (n, 2)), rng.uniform(0, 1, (n, 1)), rng.uniform(0, 1, (n, 1))], 1)
    rows.astype("<f4").tofile(path)
    return rows.astype(np.float32)


def test_max_fragments_is_predict_scenes_cap_and_all_covers_every_point(tmp_path):
    rows = _dense_scan(tmp_path / "scan.bin")
    path, model = _export(tmp_path)
    m = load(path)
    pos = torch.from_numpy(rows[:, :3].copy())
    x = torch.from_numpy(np.stack([rows[:, 3], scene_height(rows[:, 2])], 1))
    calls = {}
    for cap in (1, 4, None):
        want = predict_scene(model, pos, x, voxel_size=0.5, max_points=200, max_fragments=cap)
        given = "all" if cap is None else cap
        seen = []
        got = m.predict(tmp_path / "scan.bin", max_fragments=given, progress=lambda d, t: seen.append(t))
        np.testing.assert_allclose(got.probabilities, want.numpy(), atol=1e-5)
        calls[cap] = seen[-1]
    assert calls[1] < calls[4] < calls[None]  # fewer fragments, fewer crops: the cap is what predict used
    default = m.predict(tmp_path / "scan.bin")  # the default is 4, as predict_scene's
    np.testing.assert_allclose(default.probabilities, m.predict(tmp_path / "scan.bin", max_fragments=4).probabilities)
    np.testing.assert_array_equal(
        m.predict(tmp_path / "scan.bin", max_fragments=None).labels,
        m.predict(tmp_path / "scan.bin", max_fragments="ALL").labels,
    )
    res = m.inspect(tmp_path / "scan.bin", max_fragments=1)  # show labels the scan the same way
    np.testing.assert_array_equal(res["prediction"].labels, m.predict(tmp_path / "scan.bin", max_fragments=1).labels)


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "some", "4"])
def test_max_fragments_errors_name_the_argument(tmp_path, bad):
    _scan(tmp_path / "scan.bin", n=100)
    path, _ = _export(tmp_path)
    m = load(path)
    with pytest.raises(ValueError, match=r"^Predictor\.predict: max_fragments must be a positive integer"):
        m.predict(tmp_path / "scan.bin", max_fragments=bad)
    with pytest.raises(ValueError, match=r"^Predictor\.inspect: max_fragments must be a positive integer"):
        m.inspect(tmp_path / "scan.bin", max_fragments=bad)
    with pytest.raises(ValueError, match=r"^predict_scene: max_fragments must be a positive integer"):
        predict_scene(m.model, torch.rand(20, 3), torch.rand(20, 2), max_fragments=bad)


def test_max_fragments_is_refused_for_a_classifier():
    model = load("modelnet10")
    cloud = np.random.default_rng(0).normal(size=(300, 3)).astype(np.float32)
    for call in (model.predict, model.inspect):
        for cap in (1, 4, "all"):
            with pytest.raises(ValueError, match=r"max_fragments= \(--max-fragments\) is for scene segmenters"):
                call(cloud, max_fragments=cap)
    assert model.predict(cloud, max_fragments=None).labels.shape == ()  # None: the default, nothing asked


def test_a_scene_checkpoint_records_its_whole_scan_defaults(tmp_path):
    import inspect

    from gridify.checkpoint import CheckpointError, export_model, load_checkpoint
    from gridify.export.runtime import OnnxSceneModel
    from gridify.scene_inference import MAX_FRAGMENTS, evaluate_scenes, scene_defaults

    rows = _dense_scan(tmp_path / "scan.bin")
    path, model = _export(tmp_path)
    assert scene_defaults(load(path).meta["info"]) == (1, MAX_FRAGMENTS)  # nothing recorded: 1 view, 4 fragments
    payload = load_checkpoint(path)
    meta = {k: payload[k] for k in ("model_name", "model_kwargs", "task")}
    export_model(tmp_path / "tta.pt", model, {**meta, "info": {**payload["info"], "votes": 3, "max_fragments": 1}})
    m = load(tmp_path / "tta.pt")
    pos = torch.from_numpy(rows[:, :3].copy())
    x = torch.from_numpy(np.stack([rows[:, 3], scene_height(rows[:, 2])], 1))
    want = predict_scene(model, pos, x, voxel_size=0.5, max_points=200, votes=3, max_fragments=1)
    np.testing.assert_allclose(m.predict(tmp_path / "scan.bin").probabilities, want.numpy(), atol=1e-5)
    plain = predict_scene(model, pos, x, voxel_size=0.5, max_points=200)  # the caller's settings win
    got = m.predict(tmp_path / "scan.bin", num_votes=1, max_fragments=4).probabilities
    np.testing.assert_allclose(got, plain.numpy(), atol=1e-5)
    for key, value in (("votes", 0), ("votes", "4"), ("max_fragments", 0), ("max_fragments", "every")):
        export_model(tmp_path / "bad.pt", model, {**meta, "info": {**payload["info"], key: value}})
        with pytest.raises(CheckpointError, match=rf"entry info\['{key}'\] must be null or a positive integer"):
            load(tmp_path / "bad.pt")
    # the public entries: None means the model's (or file's) default; the scene functions' is MAX_FRAGMENTS
    # (Predictor.predict / inspect hand max_fragments to the scene predictor, whose option it is)
    from gridify.api.task_predictors import ScenePredictor

    for fn in (ScenePredictor.predict, ScenePredictor.inspect, OnnxSceneModel.predict):
        assert inspect.signature(fn).parameters["max_fragments"].default is None, fn
    for fn in (predict_scene, evaluate_scenes):
        assert inspect.signature(fn).parameters["max_fragments"].default == MAX_FRAGMENTS, fn


def test_a_huge_num_votes_and_a_scan_beyond_the_memory_limit_are_refused_before_any_crop_runs(tmp_path, monkeypatch):
    """``num_votes=10**9`` (``predict --votes``) ran for ever; a scan whose whole-scan prediction needs more than the
    memory granted ended in torch's allocation error. Both are sized first (the allocation rule) and named with the
    figure, the file and the settings that lower it; a batch of crops that would not fit runs in smaller batches."""
    import gridify.scene_inference as SI

    _dense_scan(tmp_path / "scan.bin")
    path, _ = _export(tmp_path)
    m = load(path)
    ran = []
    real = SI.predict_scene_unchecked
    monkeypatch.setattr(SI, "predict_scene_unchecked", lambda *a, **k: ran.append(a[7]) or real(*a, **k))
    scan = str(tmp_path / "scan.bin")
    with pytest.raises(
        ValueError,
        match=rf"^Predictor\.predict: num_votes=1000000000 \(--votes\) views x 4 "
        rf"fragment\(s\) of [\d,]+ voxels of 0\.5 m \(max_fragments=4, --max-fragments\) of {scan} "
        r".* would need .* TiB .*; lower --votes or --max-fragments$",
    ):
        m.predict(scan, num_votes=10**9)
    cost = SI.scene_cost(m.model, torch.from_numpy(_dense_scan(tmp_path / "s.bin")[:, :3]), 2, 0.5, 200, 4)
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", str(cost.peak(1) - 1))
    with pytest.raises(
        ValueError,
        match=rf"^Predictor\.predict: a whole-scene prediction of the 2,000 points of "
        rf"{scan} \(.*more than the allocation limit of .* \(GRIDIFY_MAX_ALLOC_BYTES;.* lower it "
        r"with fewer fragments per view \(--max-fragments, max_fragments=\)",
    ):
        m.predict(scan)
    assert ran == []
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", str(cost.peak(3) + 1000))
    got = m.predict(scan, batch_size=8)
    assert ran == [3]  # three crops per call instead of eight
    monkeypatch.delenv("GRIDIFY_MAX_ALLOC_BYTES")
    np.testing.assert_allclose(got.probabilities, m.predict(scan, batch_size=8).probabilities, atol=1e-6)
