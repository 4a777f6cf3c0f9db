"""The named normalizations (``data.normalize: sphere | cube``) from the dataset to the exported file.

* ``centre_and_scale(..., scale="cube")`` puts the cloud's longest side on ``[-1, 1]`` and inverts exactly;
* a dataset, a training run, its checkpoint record, ``gridify.load`` and the Predictor, and the ONNX wrapper
  and file all apply the one the model was trained with (the same logits as the bare model on the cloud
  normalized by hand), and refuse a value or record that names no normalization.
"""

import importlib.util

import numpy as np
import pytest
import torch

import gridify
from gridify import export as E
from gridify.api import normalize_cloud
from gridify.checkpoint import CheckpointError, export_model, inference_settings, load_checkpoint
from gridify.datasets import ProceduralShapes
from gridify.transforms import (
    NORMALIZATIONS,
    Normalize,
    centre_and_scale,
    normalization_name,
    normalization_of_record,
    normalization_record,
)

HAVE_ONNX = all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxscript", "onnxruntime"))
CLASSES = ["box", "sphere", "cylinder", "torus"]


def _cloud(seed=0, n=200):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)) * [3.0, 1.0, 0.5] + [10.0, -4.0, 2.0]  # elongated, off-centre


def test_cube_puts_the_longest_side_on_the_unit_interval_and_inverts():
    p = _cloud()
    q, c, s = centre_and_scale(p, "bbox", "cube")
    np.testing.assert_allclose(q * s + c, p, atol=1e-12)
    np.testing.assert_allclose(q.min(0), -q.max(0), atol=1e-12)  # the bounding box is centred
    assert np.isclose(np.abs(q).max(), 1.0) and np.isclose(q[:, 0].max(), 1.0)  # x is the longest side
    qs, _, _ = centre_and_scale(p)
    assert np.isclose(np.sqrt((qs**2).sum(1)).max(), 1.0) and np.abs(qs).max() < 1.0
    perm = np.random.default_rng(1).permutation(len(p))  # independent of the point order
    np.testing.assert_allclose(centre_and_scale(p[perm], "bbox", "cube")[0], q[perm], atol=1e-12)
    out = Normalize("bbox", "cube")({"pos": p.astype(np.float32)})["pos"]
    assert out.dtype == np.float32 and np.abs(out).max() <= 1.0
    np.testing.assert_allclose(normalize_cloud(p, "cube")[0], q, atol=1e-6)
    assert repr(Normalize("bbox", "cube")) == "Normalize(center='bbox', scale='cube')"


def test_bad_normalization_names_are_refused():
    with pytest.raises(ValueError, match=r"scale must be one of \('sphere', 'cube'\), got 'ball'"):
        centre_and_scale(_cloud(), scale="ball")
    with pytest.raises(ValueError, match="Normalize: scale must be one of"):
        Normalize(scale="box")
    with pytest.raises(ValueError, match=r"normalize_cloud: mode must be one of \('sphere', 'cube'\), got 'box'"):
        normalize_cloud(_cloud(), "box")
    with pytest.raises(ValueError, match="zero extent.*unit cube"):
        centre_and_scale(np.ones((4, 3)), "bbox", "cube")
    assert [normalization_name("w", v) for v in (True, False, None, "sphere", "cube")] == [
        "sphere",
        None,
        None,
        "sphere",
        "cube",
    ]
    for bad in ("yes", 1, 0, ["cube"]):
        with pytest.raises(ValueError, match=r"w: normalize must be true, false or one of \('sphere', 'cube'\)"):
            normalization_name("w", bad)
    for name in NORMALIZATIONS:
        assert normalization_of_record(normalization_record(name)) == name
    assert normalization_record(None) is None and normalization_of_record(None) is None
    with pytest.raises(ValueError, match="unknown normalization record"):
        normalization_of_record({"center": "median"})


def test_a_dataset_normalizes_as_asked():
    kw = dict(split="test", task="classification", num_points=128, num_samples_per_class=1, classes=CLASSES, seed=0)
    cube = ProceduralShapes(normalize="cube", **kw)
    sphere = ProceduralShapes(normalize=True, **kw)
    for i in range(len(CLASSES)):
        pc, ps = cube[i]["pos"], sphere[i]["pos"]
        assert torch.isclose(pc.abs().max(), torch.tensor(1.0)) and torch.allclose(pc.amin(0), -pc.amax(0), atol=1e-5)
        assert torch.isclose(ps.norm(dim=1).max(), torch.tensor(1.0), atol=1e-5)
    with pytest.raises(ValueError, match="ProceduralShapes: normalize must be true, false or one of"):
        ProceduralShapes(normalize="unit_cube", **kw)


def test_the_config_key_takes_the_names_and_refuses_others():
    from gridify.training.config import ConfigError
    from gridify.training.schema import DATASET_KEYS

    spec = DATASET_KEYS["normalize"]
    assert all(spec.ok(v) for v in (True, False, "sphere", "cube"))
    with pytest.raises(ConfigError, match=r"data.normalize must be true or false or 'sphere' or 'cube', got 'box'"):
        spec.check("data.normalize", "box")


pytest.importorskip("lightning")
pytest.importorskip("yaml")

TINY_RUN = [
    "task=classification",
    "data.name=procedural",
    "data.num_points=96",
    "data.num_samples_per_class=2",
    "data.classes=[box, sphere, cylinder, torus]",
    "data.val={num_samples_per_class: 1}",
    "data.test={num_samples_per_class: 1}",
    "data.batch_size=4",
    "data.use_normals=false",
    "data.normalize=cube",
    "model.name=gridified_classifier",
    "model.resolution=4",
    "model.k=4",
    "model.hidden_channels=8",
    "model.depth=1",
    "model.kernel_size=3",
    "trainer.max_epochs=1",
    "trainer.num_threads=1",
    "trainer.progress_bar=false",
    "trainer.plots=false",
]


@pytest.fixture(scope="module")
def cube_run(tmp_path_factory):
    from gridify import training as T

    d = tmp_path_factory.mktemp("cube_run")
    T.main(["--config", str(T.REPO_ROOT / "configs" / "procedural.yaml"), f"output_dir={d}", *TINY_RUN])
    return d / "checkpoints" / "model.pt"


def test_a_cube_run_records_it_and_predict_applies_it(cube_run):
    payload = load_checkpoint(cube_run)
    assert payload["info"]["normalization"] == {"center": "bbox", "scale": "unit_cube"}
    settings = inference_settings(payload)
    assert settings["normalize"] is True and settings["normalization"] == "cube"
    m = gridify.load(cube_run)
    assert m.normalize and m.normalization == "cube" and "normalize=cube" in repr(m)
    pos = _cloud(n=96).astype(np.float32)
    pred = m.predict(pos)
    with torch.no_grad():
        q = torch.from_numpy(normalize_cloud(pos, "cube")[0])
        ref = torch.softmax(m.model(q, q), -1)[0].numpy()
        qs = torch.from_numpy(normalize_cloud(pos)[0])
        other = torch.softmax(m.model(qs, qs), -1)[0].numpy()
    np.testing.assert_allclose(pred.probabilities, ref, rtol=1e-5, atol=1e-6)
    assert not np.allclose(ref, other, atol=1e-6)  # the sphere would have given other logits


def test_a_checkpoint_with_an_unknown_normalization_is_refused(cube_run, tmp_path):
    payload = load_checkpoint(cube_run)
    bad = tmp_path / "bad.pt"
    raw = torch.load(cube_run, weights_only=False)
    raw["info"]["normalization"] = {"center": "bbox", "scale": "unit_ball"}
    torch.save(raw, bad)
    with pytest.raises(CheckpointError, match=r"entry info\['normalization'\] must be a normalization record"):
        gridify.load(bad)
    assert payload["info"]["normalization"]["scale"] == "unit_cube"


def test_the_onnx_wrapper_normalizes_as_trained(cube_run):
    m = gridify.load(cube_run)
    wrapper = E.OnnxClassifier(m.model, normalize="cube")
    assert wrapper.normalization == "cube" and wrapper.normalize
    pts = torch.from_numpy(np.stack([_cloud(s, 96) for s in (0, 1)]).astype(np.float32))
    np.testing.assert_allclose(
        E.normalize_points(pts, "cube")[1].numpy(), normalize_cloud(pts[1].numpy(), "cube")[0], atol=1e-6
    )
    with torch.no_grad():
        np.testing.assert_allclose(wrapper(pts).numpy(), wrapper.reference(pts).numpy(), atol=1e-5)
        probs = torch.softmax(wrapper(pts), -1)[0].numpy()
    np.testing.assert_allclose(probs, m.predict(pts[0].numpy()).probabilities, atol=1e-5)
    with pytest.raises(ValueError, match=r"OnnxClassifier: normalize must be True or False, got 'box'"):
        E.OnnxClassifier(m.model, normalize="box")
    with pytest.raises(ValueError, match=r"normalize_points: mode must be one of"):
        E.normalize_points(pts, "box")


@pytest.mark.slow  # exports a model: about 18 s
@pytest.mark.skipif(not HAVE_ONNX, reason="needs the export extra: pip install 'gridify[export]'")
def test_the_exported_file_normalizes_as_trained(cube_run, tmp_path):
    import onnx
    import onnxruntime as ort

    report = E.export_onnx(cube_run, tmp_path / "m.onnx")
    assert report.normalize and report.normalization == "cube" and "unit cube" in report.summary()
    props = {p.key: p.value for p in onnx.load(str(tmp_path / "m.onnx")).metadata_props}
    assert props["normalization"] == "cube" and props["normalize"] == "true"
    pts = _cloud(n=96).astype(np.float32)[None]
    logits = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"points": pts})[0][0]
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose(probs, gridify.load(cube_run).predict(pts[0]).probabilities, atol=1e-5)
    assert E.export_onnx(cube_run, tmp_path / "s.onnx", normalize="sphere", verify=False).normalization == "sphere"


def test_export_model_keeps_the_record(cube_run, tmp_path):
    m = gridify.load(cube_run)
    meta = {
        "model_name": "gridified_classifier",
        "model_kwargs": load_checkpoint(cube_run)["model_kwargs"],
        "task": "classification",
        "info": {"class_names": CLASSES, "num_points": 96, "normalization": normalization_record("cube")},
    }
    export_model(tmp_path / "again.pt", m.model, meta)
    assert gridify.load(tmp_path / "again.pt").normalization == "cube"
