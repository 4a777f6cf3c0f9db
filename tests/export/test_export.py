"""Tests of the deployment route (gridify.export) and of export_model's metadata checks.

* the wrapper (the model's own forward on its fixed-shape path) equals the model's reference forward in
  PyTorch; the depthwise conv3d as conv2d equals conv3d (the fixed-shape graph and (de-)gridification
  themselves are tested in tests/nn/test_dense.py, the searches in tests/ops/test_knn_dense.py);
* an ONNX file exported once (dynamic batch and N) gives onnxruntime logits within 1e-4 of the
  PyTorch model on random and real clouds of several sizes, and the probabilities of
  gridify.load(...).predict at the training size; the CLI round trip exports a fixed shape;
* unsupported models, options and missing dependencies give clear errors;
* export_model refuses metadata that gridify.load could not use, and what it writes loads and predicts.

The ONNX tests need the optional extra (onnx, onnxscript, onnxruntime) and are skipped without it.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gridify
from gridify import cli
from gridify import export as E
from gridify.export import exporter as X  # the exporter's private steps (monkeypatch targets)
from gridify.export import wrappers as W
from gridify.nn import dense as D
from gridify.nn import gridification as G  # gridify_dense's check (a monkeypatch target)
from gridify.ops import knn_dense as KD
from gridify.checkpoint import export_model, load_checkpoint
from gridify.models import GridifiedClassifier, GridifiedSegmenter
from tests.helpers import modelnet_clouds

ROOT = Path(__file__).resolve().parents[2]
HAVE_ONNX = all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxscript", "onnxruntime"))
needs_onnx = pytest.mark.skipif(not HAVE_ONNX, reason="needs the export extra: pip install 'gridify[export]'")
CLASSES = ["box", "sphere", "cylinder", "torus"]
TINY = dict(num_classes=4, resolution=5, k=6, hidden_channels=12, depth=1, kernel_size=3, dropout=0.1)


def tiny_classifier(in_channels=3, **overrides):
    torch.manual_seed(0)
    kwargs = dict(TINY, in_channels=in_channels, **overrides)
    model = GridifiedClassifier(**kwargs).eval()
    pos = torch.rand(2, 40, 3) * 2 - 1
    with torch.no_grad():  # lazy initialization (the CCNN kernels' scale) on a first input
        model(pos, pos if in_channels == 3 else torch.cat([pos, pos], -1))
    return model, kwargs


def write_checkpoint(
    path, model, kwargs, name="gridified_classifier", task="classification", classes=CLASSES, num_points=64
):
    meta = dict(
        model_name=name,
        model_kwargs=kwargs,
        task=task,
        info={
            "class_names": classes,
            "num_points": num_points,
            "normalization": {"center": "mean", "scale": "unit_sphere"},
        },
    )
    export_model(path, model, meta)
    return path


# --------------------------------------------------------------------------------------
# the traced forms and the wrapper in PyTorch (no ONNX needed)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("C, R, K, bias", [(6, 5, 3, False), (4, 9, 9, True), (3, 4, 9, True), (2, 6, 1, False)])
def test_depthwise_conv3d_as_2d_equals_conv3d(C, R, K, bias):
    g = torch.Generator().manual_seed(R * K)
    x = torch.randn(2, C, R, R, R, generator=g)
    w = torch.randn(C, 1, K, K, K, generator=g)
    b = torch.randn(C, generator=g) if bias else None
    want = F.conv3d(x, w, b, padding=K // 2, groups=C)
    got = E.depthwise_conv3d_as_2d(x, w, b)
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-4, rtol=1e-5)
    dense_w = torch.randn(5, C, 3, 3, 3, generator=g)
    others = [((x, dense_w), dict(stride=2, padding=1)), ((x, w, b), dict(padding=K // 2 + 1, groups=C))]
    plain = [F.conv3d(*a, **kw) for a, kw in others]
    with E.DepthwiseConv3dAs2d():  # depthwise same-size calls are rerouted, every other call is untouched
        assert torch.equal(F.conv3d(x, w, b, padding=K // 2, groups=C), got)
        assert torch.equal(F.conv3d(x, w, b, 1, K // 2, 1, C), got)  # positional arguments
        assert all(torch.equal(F.conv3d(*a, **kw), y) for (a, kw), y in zip(others, plain))


def test_onnx_classifier_equals_its_reference_in_pytorch():
    """The traced module itself (before any ONNX): the fixed-shape graph gives the model's logits."""
    for in_channels, normalize in ((3, True), (6, False)):
        model, _ = tiny_classifier(in_channels)
        wrapper = E.OnnxClassifier(model, normalize=normalize)
        g = torch.Generator().manual_seed(in_channels)
        pts = torch.rand(3, 50, 3, generator=g) * 1.2 - 0.6
        inputs = (pts,) if in_channels == 3 else (pts, torch.randn(3, 50, 3, generator=g))
        with torch.no_grad():
            got = wrapper(*inputs)
        assert got.shape == (3, 4) and torch.allclose(got, wrapper.reference(*inputs), atol=1e-5)
        assert wrapper.input_names == (["points"] if in_channels == 3 else ["points", "normals"])


def test_normalize_points_matches_the_predictor():
    from gridify.api import normalize_cloud

    g = torch.Generator().manual_seed(0)
    pts = torch.randn(2, 50, 3, generator=g) * 7 + 3
    got = E.normalize_points(pts)
    for b in range(2):
        assert torch.equal(got[b], torch.from_numpy(normalize_cloud(pts[b].numpy())[0]))
    assert torch.equal(E.normalize_points(torch.ones(1, 4, 3)), torch.zeros(1, 4, 3))  # no NaN for a point


# --------------------------------------------------------------------------------------
# what is not exportable
# --------------------------------------------------------------------------------------
def test_unsupported_models_are_named(tmp_path):
    with pytest.raises(
        E.ExportError, match="Linear is not exportable: the gridified classifier, part segmenter and scene segmenter"
    ):
        E.export_onnx(torch.nn.Linear(3, 3), tmp_path / "m.onnx", verify=False)
    four = GridifiedClassifier(4, 3, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    with pytest.raises(E.ExportError, match="takes 4 features per point; only xyz"):
        E.export_onnx(four, tmp_path / "m.onnx", verify=False)
    capped, _ = tiny_classifier()
    capped.gridify.max_in_degree = 12
    with pytest.raises(E.ExportError, match=r"caps the in-degree \(max_in_degree=12\)"):
        E.check_exportable(capped)
    double, _ = tiny_classifier()
    with pytest.raises(E.ExportError, match="torch.float64 on cpu; the export traces float32 models"):
        E.check_exportable(double.double())
    with pytest.raises(ValueError, match="model must be a checkpoint path, a gridify.Predictor or a Gridified"):
        E.export_onnx(42, tmp_path / "m.onnx", verify=False)
    assert not (tmp_path / "m.onnx").exists()


def test_a_shipped_model_is_exported_by_its_name(tmp_path, monkeypatch):
    """``export_onnx("modelnet10", ...)`` takes the name as ``gridify.load`` and ``gridify export`` do; a misspelt
    name is named with the closest shipped one, before anything is traced."""
    from gridify.checkpoint import CheckpointError

    class Traced(Exception):
        pass

    def stop(model, net, *args, **kwargs):
        raise Traced(type(net).__name__, net.num_classes)

    monkeypatch.setattr(X, "_onnx_model", stop)
    with pytest.raises(Traced) as got:
        E.export_onnx("modelnet10", tmp_path / "m.onnx")
    assert got.value.args == ("GridifiedClassifier", 10)
    with pytest.raises(CheckpointError, match="modelnet1; it is not the name of a shipped model .*'modelnet10'"):
        E.export_onnx("modelnet1", tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def test_export_by_name_beside_a_folder_of_that_name(tmp_path, monkeypatch):
    """``export_onnx("modelnet10")`` in a folder holding a dataset folder ``modelnet10/`` exports the shipped model,
    as ``gridify.load`` and ``predict --model`` take it (it failed on the folder)."""

    class Traced(Exception):
        pass

    def stop(model, net, *args, **kwargs):
        raise Traced(type(net).__name__, net.num_classes, str(model))

    monkeypatch.chdir(tmp_path)
    (tmp_path / "modelnet10").mkdir()
    monkeypatch.setattr(X, "_onnx_model", stop)
    with pytest.raises(Traced) as got:
        E.export_onnx("modelnet10", tmp_path / "m.onnx")
    assert got.value.args[:2] == ("GridifiedClassifier", 10)


def test_bad_options(tmp_path):
    model, _ = tiny_classifier()
    with pytest.raises(ValueError, match="num_points=4 is below k=6"):
        E.export_onnx(model, tmp_path / "m.onnx", num_points=4)
    with pytest.raises(ValueError, match="batch_size must be a positive integer or None, got 0"):
        E.export_onnx(model, tmp_path / "m.onnx", batch_size=0)
    with pytest.raises(ValueError, match="normalize must be None, True or False, got 1"):
        E.export_onnx(model, tmp_path / "m.onnx", normalize=1)


def test_missing_dependencies_say_what_to_install(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else real(name, *a))
    model, _ = tiny_classifier()
    with pytest.raises(
        ImportError,
        match=r"needs onnxscript, which is not installed; run: pip install "
        r"'gridify\[export\]'",
    ):
        E.export_onnx(model, tmp_path / "m.onnx")


def test_the_library_imports_without_the_export_extra():
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('onnx', 'onnxruntime', 'onnxscript'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import gridify, gridify.export, gridify.cli\n"
        "print(gridify.export.INSTALL_HINT)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'gridify[export]'" in out.stdout


# --------------------------------------------------------------------------------------
# ONNX: one dynamic export through the Python API, one fixed export through the CLI
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dynamic_export(tmp_path_factory):
    if not HAVE_ONNX:
        pytest.skip("needs the export extra: pip install 'gridify[export]'")
    import onnxruntime as ort

    d = tmp_path_factory.mktemp("export_dyn")
    model, kwargs = tiny_classifier(3)
    ckpt = write_checkpoint(d / "model.pt", model, kwargs)
    report = E.export_onnx(ckpt, d / "model.onnx")  # dynamic batch and N
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(report.path), options, providers=["CPUExecutionProvider"])
    return {"report": report, "session": session, "predictor": gridify.load(ckpt)}


def run_onnx(session, *inputs):
    names = [i.name for i in session.get_inputs()]
    return torch.from_numpy(session.run(["logits"], {n: t.numpy() for n, t in zip(names, inputs)})[0])


def reference(predictor, points):
    """Logits of the PyTorch model on clouds normalized as the Predictor does (in float64)."""
    return E.OnnxClassifier(predictor.model, normalize=True).reference(points)


@needs_onnx
def test_dynamic_export_report(dynamic_export):
    r = dynamic_export["report"]
    assert r.inputs == {"points": ["batch", "num_points", 3]} and r.outputs == {"logits": ["batch", 4]}
    assert r.normalize and r.class_names == CLASSES and r.max_abs_diff <= 1e-4
    assert r.path.stat().st_size == r.num_bytes
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(r.path)).metadata_props}
    assert meta["class_names"] == '["box", "sphere", "cylinder", "torus"]' and meta["normalize"] == "true"
    assert (meta["k"], meta["resolution"], meta["inputs"]) == ("6", "5", '["points"]')


@needs_onnx
def test_the_file_carries_no_debug_metadata_of_the_exporting_machine(dynamic_export):
    """torch's exporter gives every node its stack trace (this machine's file paths), module path and FX node:
    cleared before the file is written (about half of a scene file's bytes)."""
    import onnx

    model = onnx.load(str(dynamic_export["report"].path))
    assert len(model.graph.node) > 50
    assert [n.name for n in model.graph.node if len(n.metadata_props) or n.doc_string] == []
    root = str(Path(E.__file__).resolve().parents[2])
    assert root.encode() not in Path(dynamic_export["report"].path).read_bytes()


@needs_onnx
@pytest.mark.parametrize("B, N", [(1, 6), (1, 64), (3, 200), (2, 1000)])
def test_onnx_logits_equal_pytorch_on_random_clouds(dynamic_export, B, N):
    g = torch.Generator().manual_seed(B * 1000 + N)
    pts = torch.randn(B, N, 3, generator=g) * torch.tensor([3.0, 1.0, 0.5]) + 4.0  # raw: the file normalizes
    got = run_onnx(dynamic_export["session"], pts)
    want = reference(dynamic_export["predictor"], pts)
    assert got.shape == want.shape == (B, 4)
    assert (got - want).abs().max() <= 1e-4


@needs_onnx
def test_onnx_with_duplicate_points_equals_pytorch(dynamic_export):
    g = torch.Generator().manual_seed(3)
    half = torch.rand(2, 40, 3, generator=g)
    pts = torch.cat([half, half, half[:, :10]], 1)  # exact ties between points
    assert (run_onnx(dynamic_export["session"], pts) - reference(dynamic_export["predictor"], pts)).abs().max() <= 1e-4


@needs_onnx
def test_onnx_matches_predict_at_the_training_size(dynamic_export):
    """At N = num_points, gridify predict is one pass of the model: same probabilities as the file."""
    predictor = dynamic_export["predictor"]
    assert predictor.num_points == 64
    g = torch.Generator().manual_seed(5)
    pts = torch.randn(64, 3, generator=g) * 2 + 1
    probs = torch.softmax(run_onnx(dynamic_export["session"], pts[None]), -1)[0].numpy()
    assert np.allclose(probs, predictor.predict(pts.numpy()).probabilities, atol=1e-5)


@needs_onnx
def test_onnx_logits_equal_pytorch_on_modelnet(dynamic_export, shared_data):
    clouds = modelnet_clouds(shared_data)
    full = torch.stack(clouds)  # [10, 1024, 3], centred, original mesh units
    for pts in (full[:2], full[2:5, :500], full[5:, ::8]):  # N = 1024, 500, 128
        got = run_onnx(dynamic_export["session"], pts)
        assert (got - reference(dynamic_export["predictor"], pts)).abs().max() <= 1e-4


@needs_onnx
def test_cli_export_round_trip(tmp_path, capsys):
    """A model with normals, exported with a fixed shape from the shell, runs without gridify."""
    import onnxruntime as ort

    model, kwargs = tiny_classifier(6)
    ckpt = write_checkpoint(tmp_path / "model.pt", model, kwargs)
    out = tmp_path / "deploy" / "model.onnx"
    assert (
        cli.main(["export", str(ckpt), "--format", "onnx", "--num-points", "80", "--batch", "2", "--out", str(out)])
        == 0
    )
    cap = capsys.readouterr()
    text = cap.out
    assert f"wrote {out} (onnx" in text and "points [2, 80, 3], normals [2, 80, 3] -> logits [2, 4]" in text
    lines = [line for line in cap.err.splitlines() if line.startswith("[export] ")]
    stages = [line for line in lines if "still running" not in line]  # a line per stage (and heartbeats)
    assert [s.split()[1] for s in stages] == ["tracing", "checking", "writing"], cap.err
    assert "the trace took " in stages[1] and "the check took " in stages[2], cap.err  # how long each stage ran
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    g = torch.Generator().manual_seed(0)
    pts = torch.randn(2, 80, 3, generator=g) + 2
    nrm = torch.nn.functional.normalize(torch.randn(2, 80, 3, generator=g), dim=-1)
    want = E.OnnxClassifier(gridify.load(ckpt).model, normalize=True).reference(pts, nrm)
    assert (run_onnx(session, pts, nrm) - want).abs().max() <= 1e-4
    with pytest.raises(Exception, match="points"):  # the shape is fixed
        run_onnx(session, pts[:1], nrm[:1])


def test_cli_export_help(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["export", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "usage: gridify export" in out
    assert all(opt in out for opt in ("--format {onnx}", "--num-points", "--batch", "--out", "--no-verify"))


def test_cli_export_errors(tmp_path):
    with pytest.raises(SystemExit, match="gridify export: error: checkpoint not found"):
        cli.main(["export", str(tmp_path / "missing.pt"), "--out", str(tmp_path / "m.onnx")])
    seg = GridifiedSegmenter(3, 2, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    ckpt = write_checkpoint(
        tmp_path / "seg.pt",
        seg,
        dict(in_channels=3, num_classes=2, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3),
        name="gridified_segmenter",
        task="segmentation",
        classes=["a", "b"],
    )
    with pytest.raises(SystemExit):
        cli.main(["export", str(ckpt), "--format", "tflite", "--out", str(tmp_path / "m.tflite")])
    assert not list(tmp_path.glob("*.onnx"))


@needs_onnx
@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        dict(backbone="resnet", kernel_size=5),
        dict(backbone="unet", resolution=7),
        dict(backbone="mrconv"),  # unfolded: export_onnx folds a copy
        dict(pos_embedding="siren", aggr="max", message="concat", pool="meanmax"),
        dict(kernel_size=11, resolution=9),  # a CCNN kernel past the FFT threshold
    ],
)
def test_other_backbones_and_options(tmp_path, overrides):
    model, _ = tiny_classifier(6, **overrides)
    model.train()
    report = E.export_onnx(model, tmp_path / "m.onnx", num_points=70, batch_size=2)
    assert report.max_abs_diff <= 1e-4 and model.training  # export_onnx verified; the mode is restored
    assert all(p.requires_grad for p in model.parameters())


@needs_onnx
@pytest.mark.slow
def test_modelnet40_configuration_on_modelnet(tmp_path, shared_data):
    """The thesis configuration (R = k = 9, C = 128, three 9^3 CCNN blocks), N = 1024, real clouds."""
    import onnxruntime as ort

    torch.manual_seed(0)
    model = GridifiedClassifier(3, 10).eval()
    report = E.export_onnx(model, tmp_path / "m40.onnx", num_points=1024)
    session = ort.InferenceSession(str(report.path), providers=["CPUExecutionProvider"])
    pts = torch.stack(modelnet_clouds(shared_data))
    want = E.OnnxClassifier(model).reference(pts)
    assert (run_onnx(session, pts) - want).abs().max() <= 1e-4


# --------------------------------------------------------------------------------------
# export_model: only files gridify.load can use
# --------------------------------------------------------------------------------------
META = dict(model_name="gridified_classifier", task="classification", info={"class_names": CLASSES})


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(model_name=None), r"meta lacks \['model_name'\]"),
        (
            dict(model_name="gridified_clasifier"),
            r"meta\['model_name'\]='gridified_clasifier' is not a registered model; "
            "registered: ",
        ),
        (dict(model_kwargs=None), r"meta lacks \['model_kwargs'\]"),
        (
            dict(model_kwargs=dict(TINY, in_channels=3, hidden_channels=16)),
            "meta does not describe the model: the checkpoint's weights do not fit",
        ),
        (dict(model_kwargs=dict(TINY, in_channels=3, width=3)), "meta does not describe the model: cannot rebuild"),
        (dict(task="detection"), r"meta\['task'\] must be one of \('classification', 'segmentation', "),
        (dict(info={}), "meta has no class names: pass info={'class_names': \\[...\\]}"),
        (dict(info={"class_names": ["a", "b"]}), r"2 class names for a model with 4 outputs \(num_classes\)"),
        (dict(info={"class_names": "abcd"}), "the class names must be a non-empty list of strings"),
        (dict(config=[1]), r"meta\['config'\] must be a dict \(the training config\)"),
        (dict(config={"when": object()}), "meta must hold only plain data"),
        (
            dict(model_name="gridified_segmenter", model_kwargs=dict(TINY, in_channels=3)),
            "meta does not describe the model",
        ),
    ],
)
def test_export_model_refuses_an_indescribable_model(tmp_path, change, message):
    model, kwargs = tiny_classifier()
    meta = dict(META, model_kwargs=kwargs)
    meta.update(change)
    meta = {k: v for k, v in meta.items() if v is not None}
    with pytest.raises(ValueError, match=f"^export_model: {message}"):
        export_model(tmp_path / "model.pt", model, meta)
    assert not list(tmp_path.iterdir())  # nothing written


def test_export_model_fills_a_minimal_config_and_the_file_predicts(tmp_path):
    """The user's case: no config. The file gets a minimal one and gridify.load predicts with it."""
    model, kwargs = tiny_classifier()
    export_model(tmp_path / "model.pt", model, dict(META, model_kwargs=kwargs))
    payload = load_checkpoint(tmp_path / "model.pt")
    assert payload["config"] == {"task": "classification", "model": {"name": "gridified_classifier", **kwargs}}
    assert payload["class_names"] == CLASSES
    pred = gridify.load(tmp_path / "model.pt").predict(np.random.default_rng(0).normal(size=(50, 3)))
    assert pred.probabilities.shape == (4,) and abs(pred.probabilities.sum() - 1) < 1e-5
    assert pred.names in CLASSES


@pytest.mark.parametrize("kind", ["classifier", "folded_mrconv", "segmenter"])
def test_every_file_export_model_writes_loads_and_predicts(tmp_path, kind):
    torch.manual_seed(0)
    if kind == "segmenter":
        kwargs = dict(
            in_channels=6, num_classes=3, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3, point_channels=8
        )
        model, name, task = GridifiedSegmenter(**kwargs), "gridified_segmenter", "segmentation"
    else:
        model, kwargs = tiny_classifier(6, **(dict(backbone="mrconv") if kind == "folded_mrconv" else {}))
        name, task = "gridified_classifier", "classification"
    names = [f"part{i}" for i in range(kwargs["num_classes"])]
    write_checkpoint(tmp_path / "model.pt", model, kwargs, name=name, task=task, classes=names)
    predictor = gridify.load(tmp_path / "model.pt")
    rng = np.random.default_rng(1)
    pts, nrm = rng.normal(size=(70, 3)), rng.normal(size=(70, 3))
    pred = predictor.predict(pts, nrm)
    assert pred.class_names == names and pred.task == task
    assert pred.point_labels.shape == (70,) and set(pred.point_labels.tolist()) <= set(range(len(names)))


# --------------------------------------------------------------------------------------
# argument checks: every bad input named before anything is traced
# --------------------------------------------------------------------------------------
@pytest.fixture
def no_tracing(monkeypatch):
    """Fail the test if export_onnx gets as far as tracing."""

    def traced(*args, **kwargs):
        raise AssertionError("export_onnx traced the model before refusing its arguments")

    monkeypatch.setattr(X, "_trace", traced)


@pytest.mark.parametrize("opset", [7, 17, 26, 99])
def test_unsupported_opsets_are_refused_before_tracing(tmp_path, no_tracing, opset):
    """torch's exporter writes opsets 18..25 here: a lower request came back as an opset-18 file
    (tracebacks on stderr), a higher one as a file onnxruntime rejects (No Op registered for Gelu)."""
    model, _ = tiny_classifier()
    with pytest.raises(
        ValueError,
        match=f"export_onnx: opset={opset} is not supported: the exporter writes ONNX opsets 18 to 25 \\(None: 20\\)",
    ):
        E.export_onnx(model, tmp_path / "m.onnx", opset=opset)
    for bad in (True, 18.0, "18"):
        with pytest.raises(ValueError, match="opset must be an int from 18 to 25 or None, got"):
            E.export_onnx(model, tmp_path / "m.onnx", opset=bad)
    assert E.ONNX_OPSETS == (18, 25) and E.DEFAULT_OPSET == 20
    assert not list(tmp_path.iterdir())


@needs_onnx
def test_the_file_declares_the_requested_opset(tmp_path, dynamic_export):
    import onnx

    def opset_of(path):
        return [o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx")]

    assert opset_of(dynamic_export["report"].path) == [E.DEFAULT_OPSET]  # the default
    model, _ = tiny_classifier()
    report = E.export_onnx(model, tmp_path / "m18.onnx", opset=18, num_points=20, batch_size=1)
    assert opset_of(report.path) == [18] and report.max_abs_diff <= 1e-4


def test_bad_paths_are_refused_before_tracing(tmp_path, no_tracing):
    model, _ = tiny_classifier()
    (tmp_path / "file").write_text("x")
    cases = [
        (tmp_path, "is a folder; give the file to write"),
        (str(tmp_path) + "/", "ends with a separator, so it names a folder"),
        (tmp_path / "file" / "m.onnx", r"cannot be created: '.*file' is a file, not a folder"),
        (tmp_path / "file" / "sub" / "m.onnx", r"cannot be created: '.*file' is a file, not a folder"),
        (None, "path must be a str or os.PathLike .*, got NoneType"),
        (5, "path must be a str or os.PathLike .*, got int"),
        (b"m.onnx", "path must be a str or os.PathLike .*, got bytes"),
        ("", "path is empty"),
        (str(tmp_path / "a\0b.onnx"), "path contains a NUL character"),
        (tmp_path / "model.txt", r"must end in .onnx \(an ONNX file is written\), e.g. '.*model.onnx'"),
    ]
    if Path("/dev/null").exists():
        cases.append(("/dev/null", "exists and is not a regular file"))
    for path, message in cases:
        with pytest.raises(ValueError, match=f"^export_onnx: .*{message}"):
            E.export_onnx(model, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_other_bad_export_arguments(tmp_path, no_tracing):
    model, _ = tiny_classifier()
    for verify in ("yes", None, 0):
        with pytest.raises(ValueError, match="verify must be True or False, got"):
            E.export_onnx(model, tmp_path / "m.onnx", verify=verify)
    for atol in (float("nan"), True, -1.0, "1e-4"):
        with pytest.raises(ValueError, match="atol must be a positive finite number"):
            E.export_onnx(model, tmp_path / "m.onnx", atol=atol)
    for name, value in (("num_points", True), ("batch_size", -1), ("seed", -1), ("seed", 1.5)):
        with pytest.raises(ValueError, match=f"{name} must be a"):
            E.export_onnx(model, tmp_path / "m.onnx", **{name: value})
    with pytest.raises(
        ValueError,
        match=r"num_points=1000000000, batch_size=3 \(a \[B, R\^3, N\].* would need .* "
        r"more than the allocation limit",
    ):
        E.export_onnx(model, tmp_path / "m.onnx", num_points=10**9)
    assert not list(tmp_path.iterdir())


def test_mrconv_placeholder_kernels_are_an_export_error(tmp_path, monkeypatch, no_tracing):
    """An MRConv layer folded before it saw any input has a placeholder kernel: ExportError saying
    what to do, not the layer's RuntimeError from inside the example run."""
    from gridify.nn import MRConv3d

    torch.manual_seed(0)
    fresh = GridifiedClassifier(
        3, 4, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3, backbone="mrconv"
    ).eval()
    layers = [m for m in fresh.modules() if isinstance(m, MRConv3d)]
    assert layers and all(m.resolution is None for m in layers)

    def fold_without_resolution(net):  # what folding a never-run layer without a resolution gives
        for m in net.modules():
            if isinstance(m, MRConv3d):
                m.reparameterize()

    monkeypatch.setattr(X, "reparameterize_model", fold_without_resolution)
    with pytest.raises(
        E.ExportError,
        match=r"MRConv layers \(.*\) have never seen an input, so folding them .* "
        r"placeholder kernels .* run the model once on a cloud before exporting",
    ):
        E.export_onnx(fresh, tmp_path / "m.onnx")
    fold_without_resolution(fresh)  # the model itself folded too early
    with pytest.raises(E.ExportError, match=r"were folded \(reparameterize\(\)\) before they saw any input"):
        E.export_onnx(fresh, tmp_path / "m.onnx")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # exports twice: about 10 s
@needs_onnx
def test_onnxruntime_and_write_failures_are_export_errors(tmp_path, monkeypatch):
    import errno

    import onnxruntime as ort

    model, _ = tiny_classifier()

    def broken_session(*args, **kwargs):
        raise RuntimeError("[ONNXRuntimeError] : 10 : INVALID_GRAPH : no op")

    with monkeypatch.context() as m:
        m.setattr(ort, "InferenceSession", broken_session)
        with pytest.raises(
            E.ExportError,
            match=r"onnxruntime .* could not run the exported file \(RuntimeError: "
            r"\[ONNXRuntimeError\].*\); nothing was written",
        ):
            E.export_onnx(model, tmp_path / "m.onnx", num_points=20, batch_size=1)

    def full_disk(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(X, "atomic_write_bytes", full_disk)
    with pytest.raises(E.ExportError, match=r"could not write path='.*m.onnx' \(No space left on device\)"):
        E.export_onnx(model, tmp_path / "m.onnx", num_points=20, batch_size=1, verify=False)
    assert not list(tmp_path.iterdir())


def test_onnx_classifier_checks_its_inputs():
    model, _ = tiny_classifier()  # k = 6
    wrapper = E.OnnxClassifier(model)
    pts = torch.rand(2, 20, 3)
    nan = pts.clone()
    nan[1, 4, 2] = float("nan")
    where = "OnnxClassifier.forward: "
    cases = [
        ((torch.rand(1, 2, 3),), "every cloud needs at least k=6 points, got N=2"),
        ((torch.rand(20, 3),), r"points must have shape \[B, N, 3\] with B >= 1, got \(20, 3\)"),
        ((torch.rand(0, 20, 3),), r"points must have shape \[B, N, 3\] with B >= 1"),
        ((pts.double(),), "points must be float32 .*, got torch.float64"),
        ((pts.long(),), "points must be a floating-point tensor, got dtype torch.int64"),
        ((pts.tolist(),), "points must be a torch.Tensor, got list"),
        ((nan,), "points contains NaN values .* cloud 1 at row 24"),
        ((pts, pts), r"the model takes no normals \(in_channels=3\)"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=where + message):
            wrapper(*args)
    with pytest.raises(ValueError, match="OnnxClassifier.reference: every cloud needs at least k=6 points"):
        wrapper.reference(torch.rand(1, 2, 3))
    six = E.OnnxClassifier(tiny_classifier(6)[0])
    with pytest.raises(ValueError, match=where + r"normals are required: the model takes xyz \+ normals"):
        six(pts)
    with pytest.raises(
        ValueError,
        match=where + r"normals must have the shape of points \(2, 20, 3\), "
        r"got \(2, 19, 3\)",
    ):
        six(pts, pts[:, :19])
    inf = pts.clone()
    inf[0, 3, 1] = float("inf")
    with pytest.raises(ValueError, match=where + "normals contains Inf values .* cloud 0 at row 3"):
        six(pts, inf)
    with pytest.raises(ValueError, match="OnnxClassifier: normalize must be True or False, got 'no'"):
        E.OnnxClassifier(model, normalize="no")


def test_the_checks_stay_out_of_the_traced_graph(monkeypatch):
    """Under tracing_mode (what export_onnx traces in) forward runs the unchecked graph only."""
    model, _ = tiny_classifier()
    wrapper = E.OnnxClassifier(model)
    pts = torch.rand(2, 20, 3)
    with torch.no_grad():
        want = wrapper(pts)

    def no_checks(*args, **kwargs):
        raise AssertionError("a check ran while tracing")

    monkeypatch.setattr(E.OnnxClassifier, "check_inputs", no_checks)
    monkeypatch.setattr(D, "check_dense_clouds", no_checks)
    monkeypatch.setattr(W, "check_dense_clouds", no_checks)
    monkeypatch.setattr(KD, "check_dense_clouds", no_checks)
    monkeypatch.setattr(G, "check_dense_clouds", no_checks)
    monkeypatch.setattr(G, "_check_gridify_dense", no_checks)
    with E.tracing_mode(wrapper), torch.no_grad():
        assert torch.equal(wrapper(pts), want)


def test_public_helpers_check_their_inputs():
    cases = [
        (lambda: E.normalize_points([[1.0, 2.0, 3.0]]), "normalize_points: points must be a torch.Tensor"),
        (lambda: E.normalize_points(torch.rand(10, 3)), r"normalize_points: points must have shape \[B, N, 3\]"),
        (lambda: E.normalize_points(torch.ones(1, 10, 3, dtype=torch.long)), "must be a floating-point tensor"),
        (lambda: E.normalize_points(torch.ones(1, 0, 3)), "every cloud needs at least one point, got N=0"),
        (lambda: E.normalize_points(torch.full((1, 4, 3), float("inf"))), "points contains Inf values"),
    ]
    cases += [
        (
            lambda: E.depthwise_conv3d_as_2d(torch.rand(2, 3), torch.rand(3)),
            r"depthwise_conv3d_as_2d: x must have shape \[B, C, D, H, W\]",
        ),
        (
            lambda: E.depthwise_conv3d_as_2d(torch.rand(1, 4, 5, 5, 5), torch.rand(4, 1, 2, 2, 2)),
            r"weight must have shape \[C, 1, K, K, K\] with C=4 .* and K odd",
        ),
        (
            lambda: E.depthwise_conv3d_as_2d(torch.rand(1, 4, 5, 5, 5), torch.rand(4, 1, 3, 3, 3), torch.rand(3)),
            r"bias must be None or a tensor \[C\] = \[4\]",
        ),
        (lambda: E.eval_mode(None).__enter__(), "eval_mode: model must be a torch.nn.Module"),
        (lambda: E.tracing_mode(None).__enter__(), "tracing_mode: model must be a torch.nn.Module"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


# --------------------------------------------------------------------------------------
# degenerate clouds (issue 23, 8(c)): the shipped model's file is finite and equal to PyTorch
# --------------------------------------------------------------------------------------
def degenerate_clouds(n, seed=0):
    """Name -> one raw cloud [1, n, 3] (the file normalizes): identical, two points repeated,
    collinear, coplanar, random."""
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n, 1, generator=g) * 4 - 2
    uv = torch.rand(n, 2, generator=g) * 4 - 2
    e0, e1 = F.normalize(torch.tensor([1.0, 2.0, -0.5]), dim=0), F.normalize(torch.tensor([-2.0, 1.0, 0.0]), dim=0)
    origin = torch.tensor([0.7, -1.3, 2.1])
    two = torch.where(torch.arange(n)[:, None] % 2 == 0, origin, -origin)
    clouds = {
        "identical": origin.expand(n, 3),
        "two points": two,
        "collinear": origin + t * e0,
        "coplanar": origin + uv[:, :1] * e0 + uv[:, 1:] * e1,
        "random": torch.randn(n, 3, generator=g) * torch.tensor([3.0, 1.0, 0.5]) + 4.0,
    }
    return {name: c[None].contiguous() for name, c in clouds.items()}


@pytest.fixture(scope="module")
def shipped_export(tmp_path_factory):
    if not HAVE_ONNX:
        pytest.skip("needs the export extra: pip install 'gridify[export]'")
    import onnxruntime as ort

    predictor = gridify.load("modelnet10")
    report = E.export_onnx(predictor, tmp_path_factory.mktemp("export_shipped") / "modelnet10.onnx")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(report.path), options, providers=["CPUExecutionProvider"])
    return {"report": report, "session": session, "predictor": predictor}


@needs_onnx
def test_shipped_model_file_is_finite_and_equals_pytorch_on_degenerate_clouds(shipped_export):
    """A cloud of identical points gave NaN logits in the file (a clamp_min(1e-300) became 0.0 in
    the graph, 0 / 0) while PyTorch's were finite; collinear, coplanar, N = k clouds too."""
    predictor, session = shipped_export["predictor"], shipped_export["session"]
    k = predictor.model.gridify.k
    for n in (k, 64, 1000):
        for name, pts in degenerate_clouds(n, seed=n).items():
            got, want = run_onnx(session, pts), reference(predictor, pts)
            assert got.isfinite().all() and want.isfinite().all(), (name, n, got, want)
            assert (got - want).abs().max() <= 1e-4, (name, n)


def old_normalize_points(points, mode="sphere"):
    """Export's normalization as it was: clamp_min(1e-300), which the exported graph holds as 0.0."""
    q = points.to(torch.float64)
    q = q - q.mean(1, keepdim=True)
    s = q.pow(2).sum(-1).amax(1).sqrt().clamp_min(1e-300)
    return (q / s.view(-1, 1, 1)).to(points.dtype)


@needs_onnx
@pytest.mark.parametrize("num_points", [None, pytest.param(12, marks=pytest.mark.slow)])  # each exports: 10 s
def test_the_export_parity_check_covers_degenerate_clouds(tmp_path, monkeypatch, num_points):
    """The check before writing runs degenerate clouds too (and counts a NaN on one side as a
    difference): a graph that is NaN only on identical points is refused, naming those clouds."""
    model, _ = tiny_classifier()
    monkeypatch.setattr(W, "_normalize_points", old_normalize_points)
    with pytest.raises(
        E.ExportError,
        match=r"differ from PyTorch's by inf > atol=0.0001 on the check clouds "
        r"'identical points \(N=\d+\)'.*nothing was written",
    ):
        E.export_onnx(model, tmp_path / "m.onnx", num_points=num_points)
    assert not list(tmp_path.iterdir())
    model, _ = tiny_classifier()
    wrapper = E.OnnxClassifier(model)
    example = wrapper.example_inputs(2, 40, 0)
    labels = [name for name, _ in X._check_inputs(wrapper, example, None, None, 40, 0)]
    for kind in ("identical points", "two points repeated", "collinear points", "coplanar points"):
        assert f"{kind} (N=40)" in labels and f"{kind} (N=6)" in labels  # the traced N and N = k
    assert "random clouds (N=k=6)" in labels


def test_no_constant_in_the_traced_code_underflows_float32():
    """The exporter writes Python scalars through float32 even in float64 arithmetic: a literal
    below float32's smallest normal (1e-300 became 0.0) must not appear in the code it traces."""
    import ast

    tiny = torch.finfo(torch.float32).tiny
    files = [ROOT / "gridify" / "models" / "gridified.py", ROOT / "gridify" / "models" / "scene.py"]
    for package in ("export", "nn", "backbones", "ops"):
        files += sorted((ROOT / "gridify" / package).glob("*.py"))
    bad = [
        f"{f.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
        for f in files
        for node in ast.walk(ast.parse(f.read_text()))
        if isinstance(node, ast.Constant) and type(node.value) is float and 0 < abs(node.value) < tiny
    ]
    assert not bad, bad


def test_node_ties_of_degenerate_clouds_are_told_apart_from_real_differences():
    """Identical points normalize onto the centre node of an odd lattice: nodes tie at a point's
    k'-th place, the file takes the lower node index and grid_knn its own candidate order (both
    correct). The parity check then compares over the file's graph; not for untied clouds."""
    model, _ = tiny_classifier(6, pos_embedding="siren", aggr="max", message="concat", pool="meanmax")  # R = 5
    wrapper = E.OnnxClassifier(model, normalize=True)
    checks = dict(X._check_inputs(wrapper, wrapper.example_inputs(2, 70, 0), 2, 70, 70, 0))
    assert X._node_ties_only(wrapper, checks["identical points (N=70)"])
    for name in ("random clouds (N=70)", "collinear points (N=70)", "coplanar points (N=70)"):
        assert not X._node_ties_only(wrapper, checks[name]), name
    pos = E.normalize_points(checks["identical points (N=70)"][0])
    _, point_nodes, _ = E.dense_bilateral_knn(pos, model.gridify.grid, model.gridify.k)
    # the centre node 62, then five of its six face neighbours (at h^2), the lowest indices first
    assert point_nodes[0, 0].tolist() == [62, 37, 57, 61, 63, 67]


@pytest.mark.slow  # exports a model: about 13 s
@needs_onnx
def test_export_up_axis_rotates_inside_the_file(tmp_path):
    """--up-axis y: the file given a y-up cloud answers as the model does on that cloud rotated to z up."""
    import onnx
    import onnxruntime as ort

    from gridify.transforms import up_axis_rotation

    model, kwargs = tiny_classifier(6)
    ckpt = write_checkpoint(tmp_path / "model.pt", model, kwargs)
    out = tmp_path / "y.onnx"
    assert cli.main(["export", str(ckpt), "--out", str(out), "--up-axis", "y"]) == 0
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert meta["up_axis"] == "y"
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    g = torch.Generator().manual_seed(1)
    pts = torch.randn(2, 70, 3, generator=g)
    nrm = torch.nn.functional.normalize(torch.randn(2, 70, 3, generator=g), dim=-1)
    r = torch.as_tensor(up_axis_rotation("y"), dtype=torch.float32)
    want = E.OnnxClassifier(gridify.load(ckpt).model, normalize=True).reference(pts @ r.T, nrm @ r.T)
    assert (run_onnx(session, pts, nrm) - want).abs().max() <= 1e-4
