"""Tests of the inference API (gridify.load / Predictor.predict / embed) and gridify.gridify.

Two tiny models (a classifier and a part segmenter, 96 training points, 1 epoch) are trained
once per module through gridify.training.main; everything else runs on them.
"""

import numpy as np
import pytest
import torch

import gridify
from gridify.api import Predictor, canonical_order, normalize_cloud
from gridify.checkpoint import CheckpointError, load_checkpoint
from gridify.datasets import ProceduralShapes
from gridify.io import write_ply
from gridify.nn import Gridification

pytest.importorskip("lightning")
pytest.importorskip("yaml")

COMMON = [
    "data.name=procedural",
    "data.num_points=96",
    "data.val={num_samples_per_class: 1}",
    "data.test={num_samples_per_class: 1}",
    "model.resolution=4",
    "model.k=4",
    "model.hidden_channels=8",
    "model.depth=1",
    "model.kernel_size=3",
    "trainer.max_epochs=1",
    "trainer.num_threads=1",
    "trainer.progress_bar=false",
    "trainer.plots=false",
    "trainer.log_every_n_steps=1",
]
CLS = [
    "task=classification",
    "data.num_samples_per_class=2",
    "data.classes=[box, sphere, cylinder, torus]",
    "data.batch_size=4",
    "model.name=gridified_classifier",
    "model.dropout=0.2",
    "optim.lr=5e-3",
]
SEG = [
    "task=segmentation",
    "data.num_samples_per_class=1",
    "data.classes=[chair, lamp, box]",
    "data.batch_size=3",
    "model.name=gridified_segmenter",
    "model.point_channels=8",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from gridify import training as T

    out = {}
    for name, extra, cfg in (("cls", CLS, "procedural.yaml"), ("seg", SEG, "procedural_seg.yaml")):
        d = tmp_path_factory.mktemp(f"api_{name}")
        T.main(["--config", str(T.REPO_ROOT / "configs" / cfg), f"output_dir={d}", *COMMON, *extra])
        out[name] = d / "checkpoints"
    return out


def shape(category, n, seed=0, task="classification"):
    classes = ["box", "sphere", "cylinder", "torus"] if task == "classification" else ["chair", "lamp", "box"]
    ds = ProceduralShapes(
        split="test", task=task, num_points=n, num_samples_per_class=1, classes=classes, normalize=False, seed=seed
    )
    s = ds[classes.index(category)]
    return s["pos"].numpy() * 3.0 + 1.5, s["normal"].numpy()  # off-centre and larger: the API normalizes


def test_load_reads_the_metadata(trained):
    for f in ("model.pt", "last.ckpt"):
        m = gridify.load(trained["cls"] / f)
        assert isinstance(m, Predictor) and isinstance(m, torch.nn.Module) and not m.training
        assert m.task == "classification" and m.class_names == ["box", "sphere", "cylinder", "torus"]
        assert (m.num_points, m.in_channels, m.use_normals, m.normalize) == (96, 6, True, True)
        assert m.gridify_version == gridify.__version__ and m.resolution == 4
        # the training run records what inference needs explicitly, not only inside the config
        info = load_checkpoint(trained["cls"] / f)["info"]
        assert info["num_points"] == 96 and info["normalization"] == {"center": "mean", "scale": "unit_sphere"}
    s = gridify.load(trained["seg"] / "model.pt")
    assert s.task == "segmentation" and s.num_categories == 3 and len(s.category_names) == 3
    assert len(s.class_names) == 23 and s.category_to_parts[s.category_names.index("chair")] == [11, 12, 13]
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        gridify.load(trained["cls"] / "missing.pt")


def test_a_run_records_the_task_of_its_network_in_both_checkpoints(trained):
    """The Lightning checkpoint and model.pt record ``model_task`` when written (gridify.checkpoint.MODEL_TASK): a
    reader checks the file's task against it instead of guessing from the model's class."""
    from gridify.checkpoint import MODEL_TASK

    for name, task in (("cls", "classification"), ("seg", "segmentation")):
        for f in ("model.pt", "last.ckpt"):
            raw = torch.load(trained[name] / f, map_location="cpu", weights_only=True)
            written = raw["hyper_parameters"] if f == "last.ckpt" else raw
            assert written[MODEL_TASK] == task and load_checkpoint(trained[name] / f)[MODEL_TASK] == task, (name, f)


def test_training_n_agrees_with_the_bare_model(trained):
    """N == training N: one pass over the normalized cloud, exactly the model's own output."""
    pos, nrm = shape("torus", 96)
    for f in ("model.pt", "last.ckpt"):
        m = gridify.load(trained["cls"] / f)
        pred = m.predict(pos, nrm)
        p, _, _ = normalize_cloud(pos)
        with torch.no_grad():
            ref = torch.softmax(m.model(torch.from_numpy(p), torch.from_numpy(np.concatenate([p, nrm], 1))), -1)[0]
        np.testing.assert_allclose(pred.probabilities, ref.numpy(), rtol=1e-5, atol=1e-6)
    # the exported (reparameterized) model and the Lightning checkpoint predict alike
    a = gridify.load(trained["cls"] / "model.pt").predict(pos, nrm).probabilities
    b = gridify.load(trained["cls"] / "last.ckpt", reparameterize=False).predict(pos, nrm).probabilities
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [37, 300])
def test_classify_any_number_of_points(trained, n):
    m = gridify.load(trained["cls"] / "model.pt")
    pos, nrm = shape("box", n)
    pred = m.predict(pos, nrm, num_votes=3)
    assert pred.labels.shape == () and pred.probabilities.shape == (4,) and pred.num_points == n
    assert pred.probabilities.sum() == pytest.approx(1.0, abs=1e-5) and 0 <= pred.label < 4
    assert pred.names == m.class_names[pred.label] and pred.point_labels.shape == (n,)
    perm = np.random.default_rng(3).permutation(n)
    again = m.predict(torch.from_numpy(pos[perm]), torch.from_numpy(nrm[perm]), num_votes=3)
    np.testing.assert_allclose(again.probabilities, pred.probabilities, rtol=1e-5, atol=1e-6)  # order-invariant
    other = m.predict(pos, nrm, num_votes=3, seed=1)
    assert not np.allclose(other.probabilities, pred.probabilities, atol=1e-7)  # the seed picks the subsets
    e = m.embed(pos, nrm, num_votes=2)
    assert e.shape == (8,) and np.isfinite(e).all()


def test_segment_every_point_in_input_order(trained):
    m = gridify.load(trained["seg"] / "model.pt")
    pos, nrm = shape("chair", 250, task="segmentation")
    pred = m.predict(pos, nrm, category="chair")
    assert pred.labels.shape == (250,) and pred.probabilities.shape == (250, 23) and pred.category == "chair"
    np.testing.assert_allclose(pred.probabilities.sum(1), 1.0, atol=1e-5)
    assert set(pred.labels.tolist()) <= {11, 12, 13}  # restricted to the chair's parts
    assert pred.probabilities[:, [i for i in range(23) if i not in (11, 12, 13)]].max() == 0.0
    # 250 points -> 3 chunks of at most 96 that cover every point once
    chunks = m._chunks(m.prepare(pos, nrm), 0)
    assert [len(c) for c in chunks] == [84, 83, 83] and np.array_equal(np.sort(np.concatenate(chunks)), np.arange(250))
    # permuting the input permutes the output (chunks depend on the content, not the order)
    perm = np.random.default_rng(0).permutation(250)
    again = m.predict(pos[perm], nrm[perm], category=1)
    assert np.array_equal(again.labels, pred.labels[perm])
    np.testing.assert_allclose(again.probabilities, pred.probabilities[perm], atol=1e-5)
    # N == training N: the bare model's output, point by point
    pos96, nrm96 = pos[:96], nrm[:96]
    p, _, _ = normalize_cloud(pos96)
    with torch.no_grad():
        logits = m.model(
            torch.from_numpy(p), torch.from_numpy(np.concatenate([p, nrm96], 1)), category=torch.tensor([1])
        )
    mask = torch.full((23,), float("-inf"))
    mask[[11, 12, 13]] = 0
    ref = torch.softmax(logits + mask, -1).numpy()
    np.testing.assert_allclose(m.predict(pos96, nrm96, category="chair").probabilities, ref, atol=1e-5)


def test_predict_a_file(trained, tmp_path):
    m = gridify.load(trained["seg"] / "model.pt")
    pos, nrm = shape("lamp", 150, task="segmentation")
    f = write_ply(tmp_path / "lamp.ply", pos, normals=nrm)
    a = m.predict(f, category="lamp")
    b = m.predict(pos, nrm, category="lamp")
    assert a.source == str(f) and np.array_equal(a.labels, b.labels)
    assert "150 points [lamp]" in a.summary()


def test_bad_inputs_give_clear_errors(trained, tmp_path):
    cls = gridify.load(trained["cls"] / "model.pt")
    seg = gridify.load(trained["seg"] / "model.pt")
    pos, nrm = shape("box", 50)
    with pytest.raises(ValueError, match=r"trained with normals \(in_channels=6\) but the cloud has none"):
        cls.predict(pos)
    assert cls.predict(pos, estimate_normals=True).probabilities.shape == (4,)
    with pytest.raises(ValueError, match=r"points must have shape \[N, 3\], got \(50, 6\) \(pass normals separately"):
        cls.predict(np.concatenate([pos, nrm], 1))
    with pytest.raises(ValueError, match=r"normals must have shape \[50, 3\] like points, got \(49, 3\)"):
        cls.predict(pos, nrm[:49])
    bad = pos.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"points contain NaN/Inf values \(1 of 50 points\)"):
        cls.predict(bad, nrm)
    with pytest.raises(ValueError, match=r"the cloud is empty \(0 points\)"):
        cls.predict(np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="all 50 points are identical"):
        cls.predict(np.ones((50, 3)), nrm)
    with pytest.raises(TypeError, match="points must be a numpy array, a torch tensor"):
        cls.predict({"pos": pos})
    with pytest.raises(ValueError, match="num_votes must be a positive integer"):
        cls.predict(pos, nrm, num_votes=0)
    with pytest.raises(ValueError, match="this model does not take one"):
        cls.predict(pos, nrm, category="chair")
    with pytest.raises(
        ValueError, match=r"needs the object category: pass category= \(gridify predict / show: --category\) one of \["
    ):
        seg.predict(pos, nrm)
    with pytest.raises(ValueError, match="unknown category 'plane'"):
        seg.predict(pos, nrm, category="plane")
    with pytest.raises(ValueError, match=r"category must be a name or an index in \[0, 3\)"):
        seg.predict(pos, nrm, category=7)
    with pytest.raises(ValueError, match="unknown category '²'"):  # str.isdigit() but not int()-able
        seg.predict(pos, nrm, category="²")
    with pytest.raises(FileNotFoundError):
        seg.predict(tmp_path / "nope.ply", category=0)
    # progress=False / None: nothing to report, accepted by every model; a bar or callback is for scene models
    np.testing.assert_array_equal(
        cls.predict(pos, nrm, progress=False).probabilities, cls.predict(pos, nrm).probabilities
    )
    with pytest.raises(ValueError, match=r"features= and progress= are for scene segmenters; this is a classification"):
        cls.predict(pos, nrm, progress=True)
    with pytest.raises(ValueError, match=r"progress must be None, True / False or callable .*got str"):
        cls.predict(pos, nrm, progress="bar")


def test_a_model_trained_on_estimated_normals_estimates_them_at_prediction(trained, tmp_path):
    """data.estimate_normals in the checkpoint's config: predict estimates the normals the way the training
    data did (the same function, the same k), whatever a file holds, unless normals= is given."""
    from gridify.ops import estimate_normals

    payload = torch.load(trained["cls"] / "model.pt", weights_only=True)
    payload["config"]["data"]["estimate_normals"] = 8
    torch.save(payload, tmp_path / "est.pt")
    m = gridify.load(tmp_path / "est.pt")
    assert m.estimated_normals == 8 and gridify.load(trained["cls"] / "model.pt").estimated_normals is None
    pos, nrm = shape("torus", m.num_points)  # one pass over all points (larger clouds: the next test)
    own = estimate_normals(torch.as_tensor(pos, dtype=torch.float64), 8).numpy()
    auto = m.predict(pos).probabilities
    np.testing.assert_allclose(auto, m.predict(pos, own).probabilities, atol=1e-6)
    f = write_ply(tmp_path / "torus.ply", pos, normals=-nrm)  # the file's own normals are not what it learnt from
    np.testing.assert_allclose(m.predict(f).probabilities, auto, atol=1e-5)
    np.testing.assert_allclose(
        m.predict(pos, nrm).probabilities,
        gridify.load(trained["cls"] / "model.pt").predict(pos, nrm).probabilities,
        atol=1e-6,
    )  # normals= given: used as given
    payload["config"]["data"]["estimate_normals"] = "30"
    torch.save(payload, tmp_path / "bad.pt")
    with pytest.raises(CheckpointError, match=r"estimate_normals'\] must be a positive integer, got '30'"):
        gridify.load(tmp_path / "bad.pt")


def test_estimated_normals_are_estimated_again_on_every_subset_of_a_larger_cloud(trained, tmp_path):
    """A model trained on normals estimated from files of about num_points points sees, for a larger cloud,
    normals estimated from each vote subset's own points (the training density), not from all points."""
    from gridify.ops import estimate_normals

    payload = torch.load(trained["cls"] / "model.pt", weights_only=True)
    payload["config"]["data"]["estimate_normals"] = 8
    torch.save(payload, tmp_path / "est.pt")
    m = gridify.load(tmp_path / "est.pt")
    n = m.num_points
    pos, _ = shape("torus", 4 * n)
    seen = []
    hook = m.model.register_forward_hook(lambda mod, args, out: seen.append(args[1].detach().clone()))
    try:
        m.predict(pos, num_votes=3)
        m.inspect(pos)
    finally:
        hook.remove()
    assert len(seen) >= 2 and all(x.shape[-2] == n for x in seen)
    cloud = m.prepare(pos)
    assert cloud["normals_k"] == 8
    whole, at = (
        torch.as_tensor(cloud["normals"], dtype=torch.float64),
        torch.as_tensor(cloud["pos"], dtype=torch.float64),
    )
    for x in seen:
        for sub in x.reshape(-1, n, x.shape[-1]).double():
            own = estimate_normals(sub[:, :3], 8)
            torch.testing.assert_close(sub[:, 3:], own, atol=1e-4, rtol=0)
            # the whole cloud's normals at those points differ: a finer neighbourhood
            rows = torch.cdist(sub[:, :3], at).argmin(1)
            assert (sub[:, 3:] * whole[rows]).sum(1).abs().min() < 0.999


def test_a_classifier_reads_an_unstated_cloud_y_up_too_and_hints_when_that_is_clearly_better(trained, monkeypatch):
    """up_axis not given: the z-up result is returned, and a y-up reading that names another class with a top
    probability UP_AXIS_HINT_MARGIN higher adds a hint (printed by summary); up_axis="z" reads once, no hint."""
    from gridify.api import task_predictors as tp

    m = gridify.load(trained["cls"] / "model.pt")
    pos, nrm = shape("torus", 96)
    seen = []
    real = tp.CloudPredictor.predict

    def spy(self, predictor, *args, up_axis, **kw):
        seen.append(up_axis)
        pred = real(self, predictor, *args, up_axis=up_axis, **kw)
        if up_axis == "y":  # pretend the y-up reading is a confident other class
            k = len(pred.class_names)
            pred.labels = np.asarray((int(base.labels) + 1) % k)
            pred.probabilities = np.eye(k, dtype=np.float32)[int(pred.labels)]
        return pred

    base = m.predict(pos, nrm, up_axis="z")
    monkeypatch.setattr(tp.CloudPredictor, "predict", spy)
    got = m.predict(pos, nrm)
    assert seen == ["z", "y"]
    np.testing.assert_array_equal(got.probabilities, base.probabilities)  # the z-up reading is the result
    assert len(got.hints) == 1 and "up_axis='y' (--up-axis y)" in got.hints[0]
    assert got.summary().splitlines()[1].startswith("hint: read y up this cloud is ")
    seen.clear()
    stated = m.predict(pos, nrm, up_axis="z")
    assert seen == ["z"] and stated.hints == [] and len(stated.summary().splitlines()) == 1
    seen.clear()  # inspect (gridify show) gives the same hint beside its prediction
    shown = m.inspect(pos, nrm)["prediction"]
    assert seen == ["y"] and shown.hints == got.hints
    np.testing.assert_array_equal(shown.probabilities, base.probabilities)
    seen.clear()
    assert m.inspect(pos, nrm, up_axis="z")["prediction"].hints == [] and seen == []
    # the rule itself: another class, and at least the margin more confident
    z = gridify.Prediction(np.asarray(0), np.array([0.6, 0.4]), ["a", "b"], "classification", 5)
    y_close = gridify.Prediction(np.asarray(1), np.array([0.3, 0.7]), ["a", "b"], "classification", 5)
    y_far = gridify.Prediction(np.asarray(1), np.array([0.1, 0.9]), ["a", "b"], "classification", 5)
    y_same = gridify.Prediction(np.asarray(0), np.array([0.95, 0.05]), ["a", "b"], "classification", 5)
    rule = tp.ClassificationPredictor()
    assert rule.up_axis_hint(z, y_close) is None and rule.up_axis_hint(z, y_same) is None
    assert "read y up this cloud is b (p=0.900 against 0.600" in rule.up_axis_hint(z, y_far)


def test_canonical_order_depends_on_content_only():
    rng = np.random.default_rng(0)
    pos = rng.normal(size=(40, 3)).astype(np.float32)
    perm = rng.permutation(40)
    np.testing.assert_array_equal(pos[canonical_order(pos)], pos[perm][canonical_order(pos[perm])])


def test_functional_gridify():
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(200, 3)).astype(np.float32) * 4
    g = gridify.gridify(pts, resolution=5, k=4, channels=6)
    assert g.shape == (6, 5, 5, 5) and torch.isfinite(g).all() and not g.requires_grad
    torch.testing.assert_close(g, gridify.gridify(torch.from_numpy(pts), resolution=5, k=4, channels=6))  # seeded
    assert not torch.allclose(g, gridify.gridify(pts, resolution=5, k=4, channels=6, seed=1))
    # a given module: the same as calling it on the normalized cloud
    torch.manual_seed(0)
    mod = Gridification(5, 7, 4, k=3).eval()
    feats = rng.normal(size=(200, 5)).astype(np.float32)
    out, graph = gridify.gridify(pts, feats, module=mod, return_graph=True)
    with torch.no_grad():
        ref = mod(torch.from_numpy(normalize_cloud(pts)[0]), torch.from_numpy(feats))[0]
    torch.testing.assert_close(out, ref)
    assert graph.num_points == 200 and graph.grid.resolution == 4
    batch = gridify.gridify(np.stack([pts, pts[::-1].copy()]), resolution=4, k=3, channels=2)
    assert batch.shape == (2, 2, 4, 4, 4)
    torch.testing.assert_close(batch[0], batch[1], rtol=1e-4, atol=1e-5)  # same cloud, other order
    with pytest.raises(ValueError, match="resolution=9 but the given module has resolution=4"):
        gridify.gridify(pts, feats, resolution=9, module=mod)
    with pytest.raises(ValueError, match=r"features must have shape \[200, F\] to match points"):
        gridify.gridify(pts, feats[:10])
    with pytest.raises(ValueError, match=r"points must have shape \[N, 3\] or \[B, N, 3\]"):
        gridify.gridify(np.zeros((2, 3, 4, 3)))
    with pytest.raises(ValueError, match="cloud 0 has points outside the grid box"):
        gridify.gridify(pts, normalize=False)


# --------------------------------------------------------------------------------------
# issue 23: gridify.gridify names the cloud and row of a NaN in every batch form (class 5),
# a checkpoint whose task does not match its model is refused when loading (class 9)
# --------------------------------------------------------------------------------------
def _batch_forms(a, b):
    """The batch forms gridify.gridify takes, for the clouds a [Na, 3], b [Nb, 3] (equal sizes: dense too)."""
    flat = np.concatenate([a, b])
    ids = np.repeat([0, 1], [len(a), len(b)])
    forms = {
        "list of arrays": ([a, b], {}),
        "list of tensors": ([torch.from_numpy(a), torch.from_numpy(b)], {}),
        "nested lists": ([a.tolist(), b.tolist()], {}),
        "pos + batch (numpy)": (flat, dict(batch=ids)),
        "pos + batch (torch)": (torch.from_numpy(flat), dict(batch=torch.from_numpy(ids))),
    }
    if len(a) == len(b):
        forms.update({"dense array": (np.stack([a, b]), {}), "dense tensor": (torch.from_numpy(np.stack([a, b])), {})})
    return forms


@pytest.mark.parametrize("sizes", [(50, 30), (40, 40)])
def test_gridify_names_the_cloud_and_row_of_a_nan_in_every_batch_form(sizes):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(sizes[0], 3)), rng.normal(size=(sizes[1], 3))
    kw = dict(resolution=4, k=3, channels=2)
    for value, what in ((np.nan, "NaN"), (np.inf, "Inf")):
        bad = b.copy()
        bad[7, 1] = value
        bad[9, 0] = value
        for form, (points, extra) in _batch_forms(a, bad).items():
            with pytest.raises(
                ValueError,
                match=rf"gridify.gridify: points contains {what} values \(2 rows affected\); "
                rf"first in cloud 1 at row 7$",
            ):
                gridify.gridify(points, **extra, **kw)
    fa, fb = rng.normal(size=(sizes[0], 2)), rng.normal(size=(sizes[1], 2))
    fb[3, 1] = np.nan
    features = {"list": [fa, fb], "flat": np.concatenate([fa, fb])}
    for form, (points, extra) in _batch_forms(a, b).items():
        feats = features["flat"] if "batch" in extra else features["list"]
        with pytest.raises(
            ValueError, match=r"features contains NaN values \(1 row affected\); first in cloud 1 at row 3"
        ):
            gridify.gridify(points, feats, **extra, **kw)
    if sizes[0] == sizes[1]:
        with pytest.raises(ValueError, match=r"features contains NaN values .*; first in cloud 1 at row 3"):
            gridify.gridify(np.stack([a, b]), np.stack([fa, fb]), **kw)
    single = fa.copy()
    single[5] = np.inf
    with pytest.raises(ValueError, match=r"features contains Inf values \(1 row affected\); first at row 5"):
        gridify.gridify(a, single, **kw)


def test_gridify_batch_forms_give_each_clouds_own_grid():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(50, 3)) * 3 + 2, rng.normal(size=(30, 3))
    fa, fb = rng.normal(size=(50, 2)), rng.normal(size=(30, 2))
    kw = dict(resolution=4, k=3, channels=5)
    want = torch.stack([gridify.gridify(a, fa, **kw), gridify.gridify(b, fb, **kw)])
    for form, (points, extra) in _batch_forms(a, b).items():
        feats = np.concatenate([fa, fb]) if "batch" in extra else [fa, fb]
        got, graph = gridify.gridify(points, feats, return_graph=True, **extra, **kw)
        assert got.shape == (2, 5, 4, 4, 4) and graph.num_points == 80, form
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="gridify.gridify: batch must be sorted"):
        gridify.gridify(np.concatenate([a, b]), batch=np.repeat([1, 0], [50, 30]), **kw)
    with pytest.raises(ValueError, match=r"batch must be a 1-D tensor with one entry per point \(80\)"):
        gridify.gridify(np.concatenate([a, b]), batch=np.zeros(79, dtype=np.int64), **kw)
    with pytest.raises(ValueError, match=r"features must be a list of 2 arrays \[N_b, F\] \(N_b = \[50, 30\]\)"):
        gridify.gridify([a, b], np.concatenate([fa, fb]), **kw)
    with pytest.raises(ValueError, match=r"gridify.gridify: cloud 1: points must have shape \[N, 3\], got \(5, 4\)"):
        gridify.gridify([a, np.zeros((5, 4))], **kw)
    with pytest.raises(ValueError, match="gridify.gridify: cloud 1: the cloud is empty"):
        gridify.gridify([a, np.zeros((0, 3))], **kw)
    # a list of rows (1-D arrays) is still one cloud
    assert gridify.gridify(
        [np.array([1.0, 2, 3]), np.array([0.0, 1, 5]), np.array([2.0, 2, 2])], resolution=3, k=2, channels=2
    ).shape == (2, 3, 3, 3)


def _raw_checkpoint(path, model_name, task, lightning=False):
    """A checkpoint of a tiny ``model_name`` whose metadata says ``task`` (a model.pt or a Lightning .ckpt)."""
    from gridify.models import build_model

    kwargs = dict(in_channels=3, num_classes=3, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    torch.manual_seed(0)
    model = build_model(model_name, **kwargs)
    meta = {
        "model_name": model_name,
        "model_kwargs": kwargs,
        "task": task,
        "info": {"class_names": ["a", "b", "c"], "num_points": 50},
        "config": {},
    }
    if lightning:
        raw = {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "hyper_parameters": meta}
    else:
        raw = dict(meta, state_dict=model.state_dict())
    torch.save(raw, path)
    return path


@pytest.mark.parametrize("lightning", [False, True])
@pytest.mark.parametrize(
    "model_name, task, serves",
    [
        ("gridified_classifier", "segmentation", "classification"),
        ("gridified_segmenter", "classification", "segmentation"),
        ("gridified_classifier", "sequence_classification", "classification"),
    ],
)
def test_load_refuses_a_task_that_does_not_match_the_model(tmp_path, lightning, model_name, task, serves):
    """Before: a classifier whose file said segmentation reached forward() with an unexpected
    'category' keyword (and a segmenter served as a classifier gave per-point logits)."""
    path = _raw_checkpoint(tmp_path / ("last.ckpt" if lightning else "model.pt"), model_name, task, lightning)
    message = (
        rf"{path}: entry 'task' is '{task}' but the model '{model_name}' is a {serves} model; the file's "
        rf"task and model do not match"
    )
    with pytest.raises(CheckpointError, match=message):
        gridify.load(path)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)
    right = _raw_checkpoint(tmp_path / "right.pt", model_name, serves)
    assert gridify.load(right).task == serves


def test_export_model_refuses_a_task_that_does_not_match_the_model(tmp_path):
    from gridify.checkpoint import export_model, model_task
    from gridify.models import GridifiedClassifier, TemporalGridifiedClassifier

    model = GridifiedClassifier(3, 3, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    meta = dict(
        model_name="gridified_classifier",
        model_kwargs=dict(in_channels=3, num_classes=3, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3),
        task="segmentation",
        info={"class_names": ["a", "b", "c"]},
    )
    with pytest.raises(
        ValueError,
        match="export_model: meta\\['task'\\]='segmentation' but the model "
        "\\(GridifiedClassifier\\) is a classification model",
    ):
        export_model(tmp_path / "model.pt", model, meta)
    assert not (tmp_path / "model.pt").exists()
    assert (
        model_task(TemporalGridifiedClassifier) == "sequence_classification" and model_task(model) == "classification"
    )


def test_names_that_do_not_cover_the_outputs_are_refused_when_the_predictor_is_built(tmp_path):
    """Fewer class names than outputs ended in an IndexError when a label was named (``Prediction.names``); a part
    segmenter's category names must be one per category (its category index named a name beyond the list)."""
    from gridify.models import build_model

    kwargs = dict(in_channels=3, num_classes=5, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    torch.manual_seed(0)
    model = build_model("gridified_classifier", **kwargs)
    with pytest.raises(ValueError, match=r"^Predictor: class_names names 2 classes but the model has 5 outputs"):
        Predictor(model, task="classification", class_names=["a", "b"], num_points=64, in_channels=3)
    with pytest.raises(ValueError, match=r"^Predictor \(model\.pt\): class_names names 2 classes but the model has 5"):
        Predictor(model, task="classification", class_names=["a", "b"], num_points=64, in_channels=3,
                  meta={"path": "model.pt"})  # fmt: skip
    seg = build_model("gridified_segmenter", num_categories=3, **kwargs)
    with pytest.raises(ValueError, match=r"category_names holds 2 entries but the model takes 3 object categories"):
        Predictor(seg, task="segmentation", class_names=list("abcde"), num_points=64, in_channels=3,
                  category_names=["x", "y"])  # fmt: skip
    with pytest.raises(ValueError, match=r"category_to_parts names parts beyond the 5 classes \(0\.\.4\)"):
        Predictor(seg, task="segmentation", class_names=list("abcde"), num_points=64, in_channels=3,
                  category_to_parts=[[0], [1], [7]])  # fmt: skip
    path = tmp_path / "seg.pt"
    torch.save(
        {
            "model_name": "gridified_segmenter",
            "model_kwargs": dict(kwargs, num_categories=3),
            "task": "segmentation",
            "info": {"class_names": list("abcde"), "num_points": 50, "category_names": ["x", "y"]},
            "config": {},
            "state_dict": seg.state_dict(),
        },
        path,
    )
    with pytest.raises(CheckpointError, match=rf"^{path}: entry category_names holds 2 entries but the model takes 3"):
        gridify.load(path)
    few = _raw_checkpoint(tmp_path / "few.pt", "gridified_classifier", "classification")
    raw = torch.load(few, weights_only=True)
    raw["info"]["class_names"] = ["a", "b"]
    torch.save(raw, few)
    with pytest.raises(
        CheckpointError, match=rf"^{few}: entry class_names names 2 classes but the model has 3 outputs"
    ):
        gridify.load(few)
