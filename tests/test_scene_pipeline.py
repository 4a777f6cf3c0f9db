"""The scene pipeline: SegmentationIoU, grid sampling and crops of training scenes, whole-scene inference.

* :class:`gridify.metrics.SegmentationIoU` against a plain loop (with ignored points);
* :class:`gridify.transforms.GridSample` / :class:`~gridify.transforms.SceneCrop` and the scene
  datasets' ``voxel_size`` / ``max_points`` (budget, labels follow their points, seeded, whole
  scenes outside ``train``);
* :func:`gridify.scene_inference.predict_scene`: every point covered, crops within the budget, equal
  to the loop reference, independent of the point order; :func:`~gridify.scene_inference.evaluate_scenes`
  on generated scenes and on a real SemanticKITTI scan (skipped when the shared data is absent).
"""
import argparse

import numpy as np
import pytest
import torch

from gridify.datasets import ProceduralScenes
from gridify.metrics import SegmentationIoU, segmentation_iou_reference
from gridify.scene_inference import (evaluate_scenes, predict_scene, predict_scene_reference, scene_fragments)
from gridify.transforms import GridSample, SceneCrop, SceneSampler, crop_xy, voxel_ids


# --------------------------------------------------------------------------------------
# SegmentationIoU
# --------------------------------------------------------------------------------------
def _close(a, b):
    a, b = float(a), float(b)
    return (np.isnan(a) and np.isnan(b)) or abs(a - b) < 1e-12


def test_segmentation_iou_matches_the_loop_reference_with_ignore():
    g = torch.Generator().manual_seed(0)
    c = 6
    metric = SegmentationIoU(c)
    preds, targets = [], []
    for n in (50, 1, 0, 200):
        logits = torch.randn(n, c, generator=g)
        target = torch.randint(-1, c - 1, (n,), generator=g)  # class c-1 never in the target
        metric.update(logits, target)
        preds += logits.argmax(1).tolist()
        targets += target.tolist()
    ids = torch.randint(0, c, (30,), generator=g)
    t = torch.randint(-1, c - 1, (30,), generator=g)
    metric.update(ids, t)
    preds += ids.tolist()
    targets += t.tolist()
    res, ref = metric.compute(), segmentation_iou_reference(preds, targets, c)
    for key in ("miou", "oa", "macc"):
        assert _close(res[key], ref[key]), key
    assert all(_close(a, b) for a, b in zip(res["iou"].tolist(), ref["iou"]))
    assert np.isnan(float(res["iou"][c - 1])) and res["confusion"].tolist() == ref["confusion"]
    assert int(res["confusion"].sum()) == sum(1 for t in targets if t != -1)
    assert res["confusion"].dtype == torch.int64


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_segmentation_iou_custom_ignore_index_and_empty():
    m = SegmentationIoU(3, ignore_index=255)
    assert np.isnan(float(m.compute()["miou"]))
    m.update(torch.tensor([0, 1, 2, 2]), torch.tensor([0, 255, 2, 1]))
    res = m.compute()
    assert float(res["oa"]) == pytest.approx(2 / 3)
    assert res["iou"].tolist() == pytest.approx([1.0, 0.0, 0.5])


def test_segmentation_iou_errors_name_the_argument_and_row():
    m = SegmentationIoU(4)
    with pytest.raises(ValueError, match=r"target ids must be in 0\.\.3 or ignore_index=-1, got 4 at row 2"):
        m.update(torch.zeros(5, 4), torch.tensor([0, 1, 4, 5, -1]))
    with pytest.raises(ValueError, match=r"target ids .* got -2 at row 0"):
        m.update(torch.zeros(1, 4), torch.tensor([-2]))
    with pytest.raises(ValueError, match=r"preds \(class ids\) must be in 0\.\.3, got 7 at row 1"):
        m.update(torch.tensor([0, 7]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="preds has 3 columns but num_classes=4"):
        m.update(torch.zeros(2, 3), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="target has 3 entries but preds has 2"):
        m.update(torch.zeros(2, 4), torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match="target must hold integer"):
        m.update(torch.zeros(2, 4), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="num_classes"):
        SegmentationIoU(0)
    with pytest.raises(ValueError, match="ignore_index"):
        SegmentationIoU(3, ignore_index=1.5)
    assert int(m.compute()["confusion"].sum()) == 0  # failed updates changed nothing


# --------------------------------------------------------------------------------------
# grid sampling and crops
# --------------------------------------------------------------------------------------
def _cloud(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    pos = (rng.random((n, 3)) * [12.0, 8.0, 3.0]).astype(np.float32)
    return {"pos": pos, "y": np.arange(n), "color": rng.random((n, 3)).astype(np.float32)}


def test_grid_sample_one_point_per_voxel_labels_follow_and_seeded():
    s = _cloud()
    inverse, v = voxel_ids(s["pos"], 0.5)
    out = GridSample(0.5, seed=3)(s)
    assert len(out["pos"]) == v and len(np.unique(inverse[out["y"]])) == v
    np.testing.assert_array_equal(out["pos"], s["pos"][out["y"]])  # every per-point entry alike
    np.testing.assert_array_equal(out["color"], s["color"][out["y"]])
    assert np.all(np.diff(out["y"]) > 0)  # original order kept
    again = GridSample(0.5, seed=3)(s)
    np.testing.assert_array_equal(out["y"], again["y"])
    assert not np.array_equal(GridSample(0.5, seed=4)(s)["y"], out["y"])
    first = GridSample(0.5, "first")(s)["y"]
    expect = np.array(sorted({int(inverse[j]): j for j in range(len(inverse) - 1, -1, -1)}.values()))
    np.testing.assert_array_equal(first, expect)  # the lowest index of every voxel
    det = GridSample(0.5, deterministic=True, seed=1)
    det(_cloud(seed=9))
    np.testing.assert_array_equal(det(s)["y"], GridSample(0.5, deterministic=True, seed=1)(s)["y"])
    t = GridSample(0.5, seed=3)({k: torch.as_tensor(a) for k, a in s.items()})
    np.testing.assert_array_equal(t["y"].numpy(), out["y"])
    with pytest.raises(ValueError, match="GridSample: voxel_size must be a positive finite number"):
        GridSample(0.0)
    with pytest.raises(ValueError, match="mode"):
        GridSample(0.1, "mean")


def test_scene_crop_budget_nearest_in_xy_and_whole_under_budget():
    s = _cloud()
    out = SceneCrop(500, seed=2)(s)
    idx = out["y"]
    assert len(idx) == 500 and np.all(np.diff(idx) > 0)
    np.testing.assert_array_equal(out["color"], s["color"][idx])
    # the kept points are the nearest in xy to some point: a disc around it holds exactly them
    p = s["pos"][:, :2].astype(np.float64)
    kept = np.zeros(len(p), bool)
    kept[idx] = True
    found = False
    for c in idx:
        d = ((p - p[c]) ** 2).sum(1)
        if d[kept].max() <= d[~kept].min():
            found = True
            break
    assert found
    np.testing.assert_array_equal(SceneCrop(500, seed=2)(s)["y"], idx)
    whole = SceneCrop(4000)(s)
    np.testing.assert_array_equal(whole["y"], s["y"])
    with pytest.raises(ValueError, match="SceneCrop: max_points must be a positive integer"):
        SceneCrop(0)


def test_crop_xy_partition_equals_the_stable_sort_reference_with_ties():
    rng = np.random.default_rng(3)
    for n, m in ((50, 7), (400, 100), (1000, 999), (30, 30), (30, 40)):
        p = rng.integers(0, 4, (n, 3)).astype(np.float64)  # many equal distances: ties at the cut
        for c in (0, n // 2, n - 1):
            d = ((p[:, :2] - p[c, :2]) ** 2).sum(1)
            ref = np.sort(np.argsort(d, kind="stable")[:m])
            np.testing.assert_array_equal(crop_xy(p, c, m), ref)
            np.testing.assert_array_equal(crop_xy(torch.as_tensor(p, dtype=torch.float32), c, m), ref)


def test_height_feature_is_scene_relative_in_training_crops():
    kw = dict(num_scenes=1, num_points=6000, kind="indoor", seed=1, features=("height",))
    train = ProceduralScenes("train", voxel_size=0.1, max_points=600, **kw)
    full = train.scene(0)
    zmin = float(full["coord"][:, 2].min())
    item = train[0]
    # the crop's own lowest point need not be the floor's lowest: height is z - the scene's min z
    torch.testing.assert_close(item["x"][:, 0], item["pos"][:, 2] - zmin)
    assert "height" not in item
    whole = ProceduralScenes("val", voxel_size=0.1, max_points=600, **kw)[0]
    torch.testing.assert_close(whole["x"][:, 0], whole["pos"][:, 2] - whole["pos"][:, 2].min())


def test_scene_sampler_deterministic_mode_and_reseed():
    s = _cloud()
    a = SceneSampler(0.3, 700, seed=5, deterministic=True)
    a(_cloud(seed=1))  # earlier draws do not matter in deterministic mode
    b = SceneSampler(0.3, 700, seed=5, deterministic=True)
    np.testing.assert_array_equal(a(s)["y"], b(s)["y"])
    b.reseed(6)
    assert not np.array_equal(a(s)["y"], b(s)["y"])
    assert len(SceneSampler(None, 700, 256)(s)["y"]) == 256


def test_scene_dataset_train_crops_val_whole_scenes():
    kw = dict(num_scenes=2, num_points=6000, kind="indoor", seed=1)
    train = ProceduralScenes("train", voxel_size=0.1, max_points=1500, **kw)
    full = train.scene(0)
    item = train[0]
    assert len(item["pos"]) <= 1500 and item["x"].shape == (len(item["pos"]), 3)
    # labels follow their points: every kept point is a point of the scene with its label
    key = {tuple(p): int(y) for p, y in zip(full["coord"].tolist(), full["segment"].tolist())}
    assert all(key[tuple(p)] == int(y) for p, y in zip(item["pos"].tolist(), item["y"].tolist()))
    cells = np.floor(item["pos"].numpy().astype(np.float64) / 0.1)
    assert len(np.unique(cells, axis=0)) == len(cells)  # at most one point per voxel
    again = ProceduralScenes("train", voxel_size=0.1, max_points=1500, **kw)[0]
    torch.testing.assert_close(item["pos"], again["pos"])  # seeded
    val = ProceduralScenes("val", voxel_size=0.1, max_points=1500, **kw)
    whole = val[1]
    np.testing.assert_array_equal(whole["pos"].numpy(), val.scene(1)["coord"])
    np.testing.assert_array_equal(whole["y"].numpy(), val.scene(1)["segment"])
    counts = val.label_counts()
    expect = sum(np.bincount(val.scene(i)["segment"], minlength=val.num_classes) for i in range(2))
    np.testing.assert_array_equal(counts, expect)
    assert counts.dtype == np.int64 and counts.shape == (val.num_classes,)
    with pytest.raises(ValueError, match="voxel_size must be a positive finite number or None"):
        ProceduralScenes("train", voxel_size=-1.0, **kw)
    with pytest.raises(ValueError, match="max_points must be a positive integer or None"):
        ProceduralScenes("train", max_points=0, **kw)


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


class CropDependent(PerPoint):
    """Logits that depend on the crop: Linear(x - the crop's mean of x) + z."""

    def forward(self, pos, x, batch):
        self.sizes.append(len(pos))
        n = int(batch.max()) + 1
        mean = torch.zeros(n, x.size(1)).index_add_(0, batch, x) / torch.bincount(batch, minlength=n)[:, None]
        return self.lin(x - mean[batch]) + pos[:, 2:3]


def _scene(n=3000, seed=0):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 3, generator=g) * torch.tensor([10.0, 10.0, 3.0])
    return pos, torch.randn(n, 4, generator=g)


def test_scene_fragments_cover_every_point_within_budget():
    pos, _ = _scene()
    crops = scene_fragments(pos, 0.5, 400, seed=1)
    assert all(len(c) <= 400 for c in crops)
    assert torch.cat(crops).unique().numel() == len(pos)
    # without max_points: fragment i takes one point of every voxel, the voxels' points cycling
    inverse, v = voxel_ids(pos.numpy(), 0.5)
    frags = scene_fragments(pos, 0.5, None, seed=1)
    count = np.bincount(inverse)
    assert len(frags) == count.max()
    for f in frags:
        assert sorted(inverse[f.numpy()].tolist()) == list(range(v))
    assert torch.cat(frags).unique().numel() == len(pos)
    whole = scene_fragments(pos)
    assert len(whole) == 1 and torch.equal(whole[0], torch.arange(len(pos)))
    assert [len(c) for c in scene_fragments(pos, None, 1000)] and all(
        len(c) <= 1000 for c in scene_fragments(pos, None, 1000))


def test_predict_scene_equals_the_loop_reference():
    pos, x = _scene(1200)
    model = CropDependent()
    fast = predict_scene(model, pos, x, voxel_size=0.7, max_points=150, votes=2, seed=3, batch_size=3,
                         max_fragments=None)
    ref = predict_scene_reference(model, pos, x, voxel_size=0.7, max_points=150, votes=2, seed=3, max_fragments=None)
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-6)
    assert fast.shape == (1200, 5) and fast.dtype == torch.float32
    torch.testing.assert_close(fast.sum(1), torch.ones(1200))
    model.train()
    predict_scene(model, pos, x, max_points=600)
    assert model.training  # the mode is restored


def test_fragment_cap_covers_every_voxel_and_fills_the_rest_from_voxel_mates():
    pos, x = _scene(1200)
    inverse, v = voxel_ids(pos.numpy(), 0.7)
    assert np.bincount(inverse).max() > 2
    frags = scene_fragments(pos, 0.7, None, seed=3, max_fragments=2)
    assert len(frags) == 2
    for f in frags:  # every fragment still holds one point of every voxel
        assert sorted(inverse[f.numpy()].tolist()) == list(range(v))
    assert torch.cat(frags).unique().numel() < len(pos)
    model = CropDependent()
    fast = predict_scene(model, pos, x, voxel_size=0.7, max_points=150, votes=2, seed=3, batch_size=3,
                         max_fragments=2)
    ref = predict_scene_reference(model, pos, x, voxel_size=0.7, max_points=150, votes=2, seed=3, max_fragments=2)
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.sum(1), torch.ones(1200))
    # a per-point model on voxels of identical points: the filled points get exactly their voxel's answer
    same = torch.repeat_interleave(torch.rand(50, 3) * 10, 9, dim=0)
    feats = torch.repeat_interleave(torch.randn(50, 4), 9, dim=0)
    per_point = PerPoint()
    probs = predict_scene(per_point, same, feats, voxel_size=0.01, max_fragments=1)
    torch.testing.assert_close(probs, torch.softmax(per_point.lin(feats), 1).detach(), rtol=1e-5, atol=1e-6)
    assert max(per_point.sizes) == 50  # one point of each voxel was run
    with pytest.raises(ValueError, match="max_fragments"):
        predict_scene(per_point, same, feats, voxel_size=0.01, max_fragments=0)


def test_predict_scene_memory_bounded_and_point_order_free():
    pos, x = _scene()
    model = PerPoint()
    probs = predict_scene(model, pos, x, voxel_size=0.4, max_points=300, votes=3, seed=0)
    assert max(model.sizes) <= 300 and len(model.sizes) > 10
    expect = torch.softmax(model.lin(x), 1).detach()
    torch.testing.assert_close(probs, expect, rtol=1e-5, atol=1e-6)  # a per-point model: every vote agrees
    perm = torch.randperm(len(pos), generator=torch.Generator().manual_seed(1))
    permuted = predict_scene(model, pos[perm], x[perm], voxel_size=0.4, max_points=300, votes=3, seed=0)
    back = torch.empty_like(permuted)
    back[perm] = permuted
    torch.testing.assert_close(back, probs, rtol=1e-5, atol=1e-6)
    model.sizes.clear()
    predict_scene(model, pos, x, voxel_size=0.4, max_points=300, batch_size=4)
    assert max(model.sizes) <= 4 * 300
    one = predict_scene(model, pos, x)  # no voxel_size, no max_points: one pass
    torch.testing.assert_close(one, expect, rtol=1e-5, atol=1e-6)


def test_predict_scene_errors():
    pos, x = _scene(100)
    model = PerPoint()
    with pytest.raises(ValueError, match=r"predict_scene: x must have shape \[N, F\] with N=100"):
        predict_scene(model, pos, x[:50])
    with pytest.raises(ValueError, match="predict_scene: pos has no points"):
        predict_scene(model, pos[:0], x[:0])
    with pytest.raises(ValueError, match=r"predict_scene: pos must have shape \[N, 3\]"):
        predict_scene(model, pos[:, :2], x)
    with pytest.raises(ValueError, match="voxel_size must be a positive finite number or None"):
        predict_scene(model, pos, x, voxel_size=0)
    with pytest.raises(ValueError, match="votes must be a positive integer"):
        predict_scene(model, pos, x, votes=0)
    with pytest.raises(ValueError, match="model must be callable"):
        predict_scene("model", pos, x)
    with pytest.raises(ValueError, match=r"model must return per-point logits \[n, C\] for a crop of n=100"):
        predict_scene(lambda p, f, b: f.sum(1), pos, x)
    bad = pos.clone()
    bad[7, 1] = float("nan")
    with pytest.raises(ValueError, match="pos contains NaN"):
        predict_scene(model, bad, x)


# --------------------------------------------------------------------------------------
# evaluate_scenes
# --------------------------------------------------------------------------------------
def test_evaluate_scenes_scores_every_point_of_procedural_scenes():
    ds = ProceduralScenes("val", num_scenes=2, num_points=4000, kind="outdoor", beams=32, seed=2,
                          features=("xyz", "strength"), voxel_size=0.2, max_points=1000)
    model = PerPoint(f=4, c=ds.num_classes)
    values, extra = evaluate_scenes(model, ds, voxel_size=0.2, max_points=1000, votes=2)
    ref = SegmentationIoU(ds.num_classes)
    for i in range(len(ds)):
        ref.update(model.lin(ds[i]["x"]).detach(), ds[i]["y"])
    res = ref.compute()
    assert values["miou"] == pytest.approx(float(res["miou"])) and values["oa"] == pytest.approx(float(res["oa"]))
    assert extra["num_scenes"] == 2 and extra["num_points"] == 8000
    assert extra["confusion_matrix"] == res["confusion"].tolist()
    assert list(extra["per_class_iou"]) == list(ds.class_names)
    assert max(model.sizes) <= 1000
    cropping = ProceduralScenes("train", num_scenes=1, num_points=4000, max_points=1000)
    with pytest.raises(ValueError, match="evaluate_scenes: the dataset crops its items"):
        evaluate_scenes(PerPoint(3, 10), cropping, voxel_size=None, max_points=None)


def test_evaluate_scenes_real_semantickitti_scan(shared_data):
    root = shared_data / "semantickitti_mini" / "dataset"
    if not root.is_dir():
        pytest.skip("semantickitti_mini not in the shared data")
    from gridify.datasets import SemanticKITTI

    ds = SemanticKITTI(root, "val", sequences=["10"], voxel_size=0.1, max_points=40_000)
    ds.refs = ds.refs[:1]
    scene = ds.scene(0)
    model = PerPoint(f=ds.in_channels, c=ds.num_classes)
    values, extra = evaluate_scenes(model, ds, voxel_size=0.2, max_points=40_000)
    assert extra["num_points"] == len(scene["coord"]) > 100_000
    assert extra["num_scored_points"] == int((scene["segment"] != -1).sum())
    assert max(model.sizes) <= 40_000
    assert 0.0 <= values["miou"] <= 1.0 and 0.0 <= values["oa"] <= 1.0


def test_evaluation_scene_settings_and_whole_scene_config():
    from gridify.evaluation import FROM_CONFIG, scene_dataset_config, scene_settings

    cfg = {"task": "scene_segmentation", "data": {"voxel_size": 0.05, "max_points": 20_000,
                                                  "train": {"max_points": 10}}}
    args = argparse.Namespace(voxel_size=None, max_points=None)
    assert scene_settings(cfg, args) == {"voxel_size": 0.05, "max_points": 20_000}
    assert scene_settings(cfg, argparse.Namespace(voxel_size=0.1, max_points=None)) == {
        "voxel_size": 0.1, "max_points": 20_000}
    assert scene_settings(cfg, args, max_points=None, voxel_size=FROM_CONFIG) == {"voxel_size": 0.05,
                                                                                   "max_points": None}
    whole = scene_dataset_config(cfg)
    assert whole["data"]["voxel_size"] is None and whole["data"]["train"]["max_points"] is None
    assert cfg["data"]["max_points"] == 20_000  # the given config is left as it was


def test_gridify_evaluate_scene_checkpoint_scores_whole_scenes(tmp_path, monkeypatch):
    import json

    import gridify.evaluation as evaluation

    data = {"name": "scene_procedural", "num_scenes": 2, "num_points": 3000, "kind": "indoor", "seed": 4,
            "voxel_size": 0.1, "max_points": 800}
    model = PerPoint(f=3, c=10)
    payload = {"config": {"task": "scene_segmentation", "data": data}, "task": "scene_segmentation",
               "kind": "model", "info": {"num_outputs": 10, "in_channels": 3}, "gridify_version": "test"}
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
    report = evaluation.main(["--ckpt", str(ckpt), "--split", "train", "--no-progress", "--device", "cpu",
                              "--max-points", "500", "--output", str(tmp_path / "train.json")])
    assert report["num_points"] == 6000 and report["max_points"] == 500 and max(model.sizes) <= 500
