"""Whole-scene inference (gridify.scene_inference).

* :func:`gridify.scene_inference.predict_scene`: every point covered, crops within the budget, equal
  to the loop reference, independent of the point order; :func:`~gridify.scene_inference.evaluate_scenes`
  on generated scenes and on a real SemanticKITTI scan (skipped when the shared data is absent).
"""

import numpy as np
import pytest
import torch

from gridify.datasets import ProceduralScenes
from gridify.metrics import SegmentationIoU
from gridify.scene_inference import evaluate_scenes, predict_scene, predict_scene_reference, scene_fragments
from gridify.transforms import voxel_ids


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
        len(c) <= 1000 for c in scene_fragments(pos, None, 1000)
    )


def test_predict_scene_equals_the_loop_reference():
    pos, x = _scene(1200)
    model = CropDependent()
    fast = predict_scene(
        model, pos, x, voxel_size=0.7, max_points=150, votes=2, seed=3, batch_size=3, max_fragments=None
    )
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
    fast = predict_scene(model, pos, x, voxel_size=0.7, max_points=150, votes=2, seed=3, batch_size=3, max_fragments=2)
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

    # a model that overflows on some points is refused by name, never argmax'ed into labels
    def overflow(p, f, b):
        return model(p, f, b).masked_fill(p[:, :1] > 0, float("inf"))

    with pytest.raises(ValueError, match=r"^predict_scene: the model's output is NaN/Inf for \d+ of 100 points .*row"):
        predict_scene(overflow, pos, x)


# --------------------------------------------------------------------------------------
# evaluate_scenes
# --------------------------------------------------------------------------------------
def test_evaluate_scenes_scores_every_point_of_procedural_scenes():
    ds = ProceduralScenes(
        "val",
        num_scenes=2,
        num_points=4000,
        kind="outdoor",
        beams=32,
        seed=2,
        features=("xyz", "strength"),
        voxel_size=0.2,
        max_points=1000,
    )
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


class _Scenes(list):
    """A list of whole scenes with the attributes evaluate_scenes reads."""

    num_classes, class_names = 5, list("abcde")


def _item(n=40, seed=0, **kw):
    pos, x = _scene(n, seed)
    return {"pos": pos, "x": x, "y": torch.arange(n) % 5, **kw}


@pytest.mark.parametrize(
    "scenes, kwargs, message",
    [
        ([], {}, r"^evaluate_scenes: the dataset has no scenes"),  # was NaN metrics
        (
            [_item(), _item(y=torch.zeros(10, dtype=torch.long))],
            {},
            r"^evaluate_scenes: scene 1: y must have shape \[N\] "
            r"with N=40",
        ),
        (
            [_item(), _item(y=torch.full((40,), 9), scene="s9")],
            {},
            r"^evaluate_scenes: scene 1 \(s9\): y holds label 9 at "
            r"row 0, outside 0..4",
        ),
        ([_item(y=torch.zeros(40))], {}, r"scene 0: y must be an integer tensor"),
        ([_item(y=np.zeros(40, int))], {}, r"scene 0: y must be a torch.Tensor, got ndarray"),  # was AttributeError
        ([_item(pos=np.zeros((40, 3)))], {}, r"scene 0: pos must be a torch.Tensor"),  # was AttributeError
        ([{"pos": torch.zeros(4, 3)}], {}, r"scene 0: dataset items must be dicts .*got \['pos'\]"),  # was KeyError
        ([(1, 2)], {}, r"scene 0: dataset items must be dicts .*got tuple"),  # was TypeError
        ([_item(), _item(pos=torch.full((40, 3), float("nan")))], {}, r"^evaluate_scenes: scene 1: pos contains NaN"),
        ([_item(y=torch.full((40,), -1))], {}, r"every point of the 1 scene\(s\) is ignored"),  # was NaN metrics
        ([_item()], {"progress": "yes"}, r"^evaluate_scenes: progress must be True or False"),  # was accepted
        ([_item()], {"votes": 0}, r"^evaluate_scenes: votes must be a positive integer"),  # was named predict_scene
        ([_item()], {"voxel_size": -1}, r"^evaluate_scenes: voxel_size must be a positive finite number"),
    ],
)
def test_evaluate_scenes_names_the_bad_scene_label_or_setting(scenes, kwargs, message):
    with pytest.raises(ValueError, match=message):
        evaluate_scenes(PerPoint(), _Scenes(scenes), **kwargs)


def test_evaluate_scenes_refuses_datasets_whose_classes_disagree():
    with pytest.raises(
        ValueError,
        match=r"^evaluate_scenes: scene 0: the model gives 3 classes but the dataset has "
        r"num_classes=5",
    ):
        evaluate_scenes(PerPoint(c=3), _Scenes([_item()]))

    class Short(_Scenes):  # per_class_iou was cut to the names given
        class_names = ["a"]

    with pytest.raises(ValueError, match=r"dataset.class_names has 1 names but dataset.num_classes=5"):
        evaluate_scenes(PerPoint(), Short([_item()]))

    class Fractional(_Scenes):  # was truncated to ignore_index=2 (class 2 silently dropped from the scores)
        ignore_index = 2.5

    with pytest.raises(ValueError, match=r"dataset.ignore_index must be an integer, got 2.5"):
        evaluate_scenes(PerPoint(), Fractional([_item()]))
    values, extra = evaluate_scenes(PerPoint(), _Scenes([_item(), _item(seed=1, y=(torch.arange(40) % 5)[:, None])]))
    assert extra["num_points"] == 80 and 0.0 <= values["miou"] <= 1.0


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


def test_votes_build_one_view_of_crops_at_a_time_and_progress_ends_exact(monkeypatch):
    """Many votes hold the crops of one view at a time (not every view at once), with the same result."""
    import gridify.scene_inference as SI

    g = torch.Generator().manual_seed(0)
    pos = torch.rand(600, 3, generator=g) * torch.tensor([20.0, 20.0, 2.0])
    x = torch.rand(600, 1, generator=g)

    def model(p, f, b):
        return torch.stack([p[:, 0], p[:, 1], f[:, 0]], 1)

    live, peak = {"n": 0}, {"n": 0}
    real = SI.scene_fragments_unchecked

    def counted(*a, **k):
        live["n"] += 1
        peak["n"] = max(peak["n"], live["n"])
        return real(*a, **k)

    calls = []
    monkeypatch.setattr(SI, "scene_fragments_unchecked", counted)
    orig_iter = SI._iter_vote_crops

    def iter_views(*a, **k):
        for item in orig_iter(*a, **k):
            yield item
            live["n"] -= 1

    monkeypatch.setattr(SI, "_iter_vote_crops", iter_views)
    got = SI.predict_scene(
        model, pos, x, voxel_size=0.5, max_points=100, votes=5, progress=lambda d, t: calls.append((d, t))
    )
    assert peak["n"] == 1  # one view's crops alive at a time
    assert calls[-1][0] == calls[-1][1] and all(d <= t for d, t in calls)
    monkeypatch.setattr(SI, "_iter_vote_crops", orig_iter)
    want = SI.predict_scene_reference(model, pos, x, voxel_size=0.5, max_points=100, votes=5)
    assert torch.allclose(got, want, atol=1e-6)


def test_a_scene_far_wider_than_the_voxel_grid_warns_about_its_unit():
    """More than 100,000 voxels across (a scan in millimetres given with a voxel size in metres) warns with the
    extent and the unit; the same scene in metres is silent."""
    import warnings

    pos, x = _scene(400)
    model = PerPoint()
    with pytest.warns(
        UserWarning, match=r"predict_scene: the scene spans 9\.9\d+e\+04 along [xy], 9\.9\de\+05 voxels.*millimetres"
    ):
        predict_scene(model, pos * 10_000, x, voxel_size=0.1, max_points=300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predict_scene(model, pos, x, voxel_size=0.1, max_points=300)


def test_heartbeat_reports_long_work_and_stops_with_it():
    """Work that cannot count its units says it is still running, with the time so far, and falls silent after."""
    import time

    from gridify._progress import elapsed_words, heartbeat

    lines = []
    with heartbeat(lines.append, "tracing", every=0.05):
        time.sleep(0.32)
    seen = len(lines)
    assert seen >= 3 and all(line.startswith("tracing: still running (") for line in lines), lines
    time.sleep(0.15)
    assert len(lines) == seen  # no line after the block
    with pytest.raises(KeyError):  # the block's own exception passes through
        with heartbeat(lines.append, "checking", every=10):
            raise KeyError("x")
    with pytest.raises(ValueError, match="every must be a positive number of seconds"):
        with heartbeat(lines.append, "x", every=0):
            pass
    assert [elapsed_words(s) for s in (4.4, 150, 3600 * 2 + 300)] == ["4 s", "2 min 30 s", "2 h 05 min"]


@pytest.mark.parametrize("votes", [2, 3, 4])
def test_views_are_rotations_by_evenly_spaced_angles_whatever_the_seed(votes):
    """View v of V is the scene rotated about z through its xy centroid by 2 pi v / V (view 0 as given); the seed
    draws the crops only."""
    from gridify import scene_inference as SI

    pos = torch.tensor(np.random.default_rng(1).normal(size=(200, 3)) * [5.0, 3.0, 1.0] + [10.0, -4.0, 2.0])
    centre = pos.mean(0)
    for seed in (0, 7):
        views = [view for view, _ in SI._iter_vote_crops(pos, 0.5, None, votes, seed, 1)]
        assert len(views) == votes and torch.equal(views[0], pos)
        for v, view in enumerate(views):
            a = 2 * np.pi * v / votes
            x, y = pos[:, 0] - centre[0], pos[:, 1] - centre[1]
            expected = torch.stack(
                [x * np.cos(a) - y * np.sin(a) + centre[0], x * np.sin(a) + y * np.cos(a) + centre[1], pos[:, 2]], 1
            )
            torch.testing.assert_close(view, expected, rtol=0, atol=1e-9)


def test_the_progress_total_is_exact_from_the_first_report():
    """``evaluate --scan`` showed 28/56 crops, then 36/50, then 47/54: the total was estimated from the views built
    so far. Every view's crops are counted before the first model call now: one total, from first to last."""
    import gridify.scene_inference as SI

    g = torch.Generator().manual_seed(1)
    pos = torch.rand(900, 3, generator=g) * torch.tensor([30.0, 6.0, 2.0])  # rotated views cut other crop counts
    x = torch.rand(900, 1, generator=g)
    counts = [len(c) for _, c in SI._iter_vote_crops(pos, 0.5, 60, 5, 0, 2)]
    assert len(set(counts)) > 1  # the views differ: an estimate from the first would be wrong
    calls = []
    SI.predict_scene(
        lambda p, f, b: torch.stack([p[:, 0], f[:, 0]], 1),
        pos,
        x,
        voxel_size=0.5,
        max_points=60,
        votes=5,
        max_fragments=2,
        progress=lambda d, t: calls.append((d, t)),
    )
    assert {t for _, t in calls} == {sum(counts)} and calls[-1][0] == sum(counts)


# --------------------------------------------------------------------------------------
# the cost of a whole-scene prediction, sized before it starts
# --------------------------------------------------------------------------------------
def test_a_huge_votes_is_refused_before_the_first_view(monkeypatch):
    """``votes=10**9`` ran view after view for ever (over 90 s before a test gave up); the work of votes x fragments
    x voxels is sized first and refused by the allocation rule, with the figure."""
    import time

    pos, x = _scene(500)
    model = PerPoint()
    start = time.perf_counter()
    with pytest.raises(
        ValueError,
        match=r"^predict_scene: votes=1000000000 \(--votes\) views x 4 fragment\(s\) of "
        r"\d[\d,]* voxels of 0\.5 m \(max_fragments=4, --max-fragments\) of the scene .* would need .*"
        r"more than the allocation limit .*; lower --votes or --max-fragments$",
    ):
        predict_scene(model, pos, x, voxel_size=0.5, max_points=100, votes=10**9)
    assert time.perf_counter() - start < 5 and model.sizes == []  # no crop ran
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", str(10**6))
    with pytest.raises(ValueError, match=r"votes=1000 \(--votes\) views x 1 fragment\(s\) .*GRIDIFY_MAX_ALLOC_BYTES"):
        predict_scene(model, pos, x, voxel_size=0.5, max_points=100, votes=1000, max_fragments=1)
    assert model.sizes == []


def test_a_scene_beyond_the_memory_limit_is_refused_with_the_figure_and_the_settings_that_lower_it(monkeypatch):
    """It ended in torch's own allocation error, part way through the scan."""
    from gridify.scene_inference import SCAN_BYTES_PER_POINT

    pos, x = _scene(3000)
    model = PerPoint()
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", str(3000 * SCAN_BYTES_PER_POINT))
    with pytest.raises(ValueError) as err:
        predict_scene(model, pos, x, voxel_size=0.5, max_points=400, max_fragments=None)
    msg = str(err.value)
    assert (
        msg.startswith("predict_scene: a whole-scene prediction of the 3,000 points of the scene (") and "\n" not in msg
    )
    assert "fragment(s) of " in msg and "(max_fragments='all', --max-fragments)" in msg and "crop(s) of up to" in msg
    assert "more than the allocation limit of " in msg and "(GRIDIFY_MAX_ALLOC_BYTES;" in msg
    assert msg.endswith(
        "; lower it with fewer fragments per view (--max-fragments, max_fragments=), or a coarser voxel size (now 0.5 "
        "m; evaluate: --voxel-size); --votes sets the time, not the peak (one view at a time)"
    )
    assert model.sizes == []


def test_a_batch_of_crops_that_would_not_fit_runs_in_smaller_batches_with_the_same_result(monkeypatch):
    """Crops are independent: where ``batch_size`` crops at a time would pass the limit, fewer run per call (the same
    probabilities) instead of a refusal the command line could not lower (``predict`` has no --batch-size)."""
    from gridify.scene_inference import check_scene_cost, scene_cost

    pos, x = _scene(3000)
    small = PerPoint()
    want = predict_scene(small, pos, x, voxel_size=0.5, max_points=400, batch_size=1, max_fragments=1)
    cost = scene_cost(small, pos, 4, 0.5, 400, 1)
    assert cost.crops > 2 and cost.crop == 400
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", str(cost.peak(2) + 1000))
    assert check_scene_cost("t", small, pos, 4, 0.5, 400, 1, 8, 1) == 2
    model = PerPoint()
    got = predict_scene(model, pos, x, voxel_size=0.5, max_points=400, batch_size=8, max_fragments=1)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert max(model.sizes) <= 2 * 400 < sum(model.sizes)  # at most two crops per call


def test_the_memory_estimate_covers_the_measured_peaks_of_the_shipped_scene_model():
    """The calibration recorded in crop_forward_bytes / check_scene_cost: the shipped semantickitti model's widths
    (a 64 x 64 x 8 grid of 64 channels, k = 6) give at least the peaks measured for its crops, and not over twice."""
    from types import SimpleNamespace

    from gridify.scene_inference import crop_forward_bytes

    shipped = SimpleNamespace(resolution=(64, 64, 8), num_classes=19, gridify=SimpleNamespace(out_channels=64, k=6))
    mib = 2**20
    for points, measured in ((4096, 74), (16384, 80), (65536, 126), (131072, 206)):
        estimate = crop_forward_bytes(shipped, points, 2) / mib
        assert measured <= estimate <= 2 * measured, (points, estimate)


def test_a_stray_row_beside_a_utm_scene_is_not_called_a_unit_problem():
    """One (0, 0, 0) placeholder row beside a scan at UTM offsets widened the scene to millions of metres, and the
    warning blamed millimetre units: a few stray rows do not decide the extent (the bulk of the rows does)."""
    import warnings

    from gridify.scene_inference import warn_off_metric_scale

    pos, _ = _scene(400)
    utm = pos.double().numpy() * 10 + np.array([5.0e5, 4.2e6, 100.0])
    utm[7] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_off_metric_scale("predict_scene", utm, 0.1)
    with pytest.warns(UserWarning, match="millimetres"):  # every row far apart: the unit
        warn_off_metric_scale("predict_scene", pos.double().numpy() * 10_000, 0.1)
