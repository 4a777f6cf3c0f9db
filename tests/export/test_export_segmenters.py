"""ONNX export of the part and scene segmenters (gridify.export.OnnxSegmenter): the wrapper (the model's own
forward on its fixed-shape path) against the model's reference forward, the file against PyTorch (random,
degenerate and real clouds), whole scenes through the file's crops (OnnxSceneModel), input errors, and
``gridify export`` by name and on segmenter checkpoints. (The fixed-shape graph is tested in
tests/nn/test_dense.py, its searches in tests/ops/test_knn_dense.py.)"""

import importlib.util

import numpy as np
import pytest
import torch

from gridify import cli
from gridify import export as E
from gridify.checkpoint import export_model
from gridify.io import PointCloud
from gridify.models import GridifiedSceneSegmenter, GridifiedSegmenter
from gridify.scene_inference import predict_scene
from tests.helpers import shared_path

HAVE_ONNX = all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxscript", "onnxruntime"))
needs_onnx = pytest.mark.skipif(not HAVE_ONNX, reason="needs the export extra: pip install 'gridify[export]'")

SCENE = dict(
    in_channels=2,
    num_classes=4,
    resolution=(6, 5, 3),
    extent=(20.0, 20.0, 4.0),
    k=4,
    hidden_channels=8,
    depth=1,
    kernel_size=3,
    point_channels=8,
    message_channels=8,
    pos_hidden_channels=8,
)
PART = dict(
    in_channels=6,
    num_classes=5,
    num_categories=3,
    resolution=4,
    k=4,
    hidden_channels=8,
    depth=1,
    kernel_size=3,
    point_channels=8,
)


def scene_model(**overrides):
    torch.manual_seed(0)
    model = GridifiedSceneSegmenter(**dict(SCENE, **overrides)).eval()
    wrapper = E.OnnxSegmenter(model)
    with torch.no_grad():
        wrapper.reference(*wrapper.example_inputs(1, 50, 0))  # lazy initialization on a first input
    return model, wrapper


def part_model(**overrides):
    torch.manual_seed(0)
    model = GridifiedSegmenter(**dict(PART, **overrides)).eval()
    wrapper = E.OnnxSegmenter(model)
    with torch.no_grad():
        wrapper.reference(*wrapper.example_inputs(1, 50, 0))
    return model, wrapper


# --------------------------------------------------------------------------------------
# the wrapper against the model's own forward
# --------------------------------------------------------------------------------------
def test_segmenter_search_is_checked():
    model, _ = scene_model()
    assert E.OnnxSegmenter(model).search == "bucketed" and part_model()[1].search == "brute"
    with pytest.raises(ValueError, match="search must be one of brute, bucketed"):
        E.OnnxSegmenter(model, search="kdtree")


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        dict(aggr="mean", message="product"),
        dict(aggr="sum", extent=None),
        dict(in_channels=0),
        dict(backbone="ccnn", kernel_size=3),
        dict(extent=None, box_trim=0.01),
        dict(extent=None, scale_input=True),
        dict(extent=None, box_trim=0.01, scale_input=True, in_channels=0),
    ],
)
def test_scene_wrapper_equals_the_model(overrides):
    model, wrapper = scene_model(**overrides)
    inputs = wrapper.example_inputs(2, 300, 3)
    with torch.no_grad():
        got, want = wrapper(*inputs), wrapper.reference(*inputs)
    assert got.shape == (2, 300, 4)
    assert (got - want).abs().max() < 1e-4
    perm = torch.randperm(300)  # per-point logits follow their points
    with torch.no_grad():
        moved = wrapper(*(t[:, perm] for t in inputs))
    assert (moved - got[:, perm]).abs().max() < 1e-4


@pytest.mark.parametrize("aggr", ["max", "mean"])
def test_scene_wrapper_counts_duplicate_edges_once(aggr):
    """Duplicated points make point -> node edges that the node's own list already holds: the mean masks
    them, the max takes them unmasked (the same message twice); both equal the model's deduplicated graph."""
    model, wrapper = scene_model(aggr=aggr)
    points, features = wrapper.example_inputs(2, 200, 4)
    points[:, 100:], features[:, 100:] = points[:, :100], features[:, :100]  # every point twice
    graph = E.dense_grid_knn_unchecked(points, model.gridify.k, wrapper.nodes, wrapper.axes, 64, wrapper.search)
    assert not graph[2].all()  # there are duplicate edges to mask
    with torch.no_grad():
        got, want = wrapper(points, features), wrapper.reference(points, features)
    assert (got - want).abs().max() < 1e-4
    assert torch.equal(got[:, 100:], got[:, :100])  # a point and its copy get the same logits


def test_part_wrapper_equals_the_model():
    model, wrapper = part_model()
    inputs = wrapper.example_inputs(2, 120, 5)
    assert wrapper.input_names == ["points", "normals", "category"]
    with torch.no_grad():
        assert (wrapper(*inputs) - wrapper.reference(*inputs)).abs().max() < 1e-4
    _, plain = part_model(in_channels=3, num_categories=0, aggr="mean", message="product")
    inputs = plain.example_inputs(1, 80, 6)
    assert plain.input_names == ["points"]
    with torch.no_grad():
        assert (plain(*inputs) - plain.reference(*inputs)).abs().max() < 1e-4


def test_segmenter_inputs_are_checked_by_name():
    _, wrapper = scene_model()
    points, features = wrapper.example_inputs(1, 30, 0)
    with pytest.raises(ValueError, match=r"features must have shape \[B, N, 2\] = \[1, 30, 2\]"):
        wrapper(points, features[..., :1])
    bad = features.clone()
    bad[0, 7, 1] = float("nan")
    with pytest.raises(ValueError, match="features.*row 7"):
        wrapper(points, bad)
    with pytest.raises(ValueError, match=r"expected the inputs points, features \(2\), got 1"):
        wrapper(points)
    with pytest.raises(ValueError, match="every cloud needs at least k=4 points"):
        wrapper(points[:, :3], features[:, :3])
    _, part = part_model()
    p, n, c = part.example_inputs(2, 30, 0)
    with pytest.raises(ValueError, match=r"category must hold integers in \[0, 3\), got 3 for cloud 1"):
        part(p, n, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="category must be an int64 tensor"):
        part(p, n, c.float())


# --------------------------------------------------------------------------------------
# the file
# --------------------------------------------------------------------------------------
def _run(path, feeds):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return torch.from_numpy(
        session.run(["logits"], {k: v.numpy() for k, v in feeds.items()})[0]
    ), session.get_modelmeta().custom_metadata_map


@needs_onnx
@pytest.mark.slow  # a trace and onnxruntime runs: about a minute each
def test_scene_segmenter_file_labels_every_point_like_pytorch(tmp_path):
    model, wrapper = scene_model()
    report = E.export_onnx(model, tmp_path / "scene.onnx")
    assert report.model == "scene_segmenter" and report.max_abs_diff <= 1e-4
    assert report.outputs["logits"] == ["batch", "num_points", 4]
    assert "maps every crop" in report.summary()
    import onnx

    ops = {n.op_type for n in onnx.load(str(tmp_path / "scene.onnx")).graph.node}
    assert "ScatterND" in ops and "ScatterElements" not in ops  # the max aggregation scatters whole rows
    for n in (4, 37, 900):  # any N >= k
        points, features = wrapper.example_inputs(2, n, n)
        got, meta = _run(tmp_path / "scene.onnx", {"points": points, "features": features})
        with torch.no_grad():
            want = wrapper.reference(points, features)
        assert (got - want).abs().max() < 1e-4 and torch.equal(got.argmax(-1), want.argmax(-1))
    assert meta["model"] == "scene_segmenter" and meta["extent"] == "[20.0, 20.0, 4.0]"
    assert meta["inputs"] == '["points", "features"]'


@needs_onnx
@pytest.mark.slow  # a trace and onnxruntime runs: about a minute each
def test_part_segmenter_file_with_categories(tmp_path):
    model, wrapper = part_model()
    report = E.export_onnx(model, tmp_path / "part.onnx", normalize=True)
    assert report.inputs["category"] == ["batch"] and report.max_abs_diff <= 1e-4
    points, normals, category = wrapper.example_inputs(3, 64, 9)
    got, meta = _run(tmp_path / "part.onnx", {"points": points, "normals": normals, "category": category})
    with torch.no_grad():
        want = wrapper.reference(points, normals, category)
    assert (got - want).abs().max() < 1e-4 and meta["model"] == "gridified_segmenter"


@needs_onnx
@pytest.mark.slow  # a trace and onnxruntime runs: about a minute each
def test_whole_scene_through_the_file_equals_predict_scene(tmp_path):
    model, _ = scene_model()
    export_model(
        tmp_path / "seg.pt",
        model,
        dict(
            model_name="scene_segmenter",
            model_kwargs=dict(SCENE),
            task="scene_segmentation",
            info={
                "class_names": list("abcd"),
                "features": ["strength", "height"],
                "voxel_size": 0.5,
                "max_points": 400,
            },
        ),
    )
    E.export_onnx(tmp_path / "seg.pt", tmp_path / "seg.onnx", verify=False)  # the scene below is the check
    runner = E.OnnxSceneModel(tmp_path / "seg.onnx", threads=1)
    assert (runner.features, runner.voxel_size, runner.max_points) == (["strength", "height"], 0.5, 400)
    g = torch.Generator().manual_seed(2)
    pos = torch.rand(3000, 3, generator=g) * torch.tensor([40.0, 30.0, 3.0])
    x = torch.rand(3000, 2, generator=g)
    for m in model.modules():  # the torch backend: the float arithmetic the file reproduces
        if hasattr(m, "knn_backend"):
            m.knn_backend = "torch"
    with torch.no_grad():
        want = predict_scene(model, pos, x, voxel_size=0.5, max_points=400)
    got = runner.predict(pos, x)
    assert torch.equal(got.argmax(1), want.argmax(1)) and (got - want).abs().max() < 1e-4
    for cap, given in ((1, 1), (None, "all")):  # the fragment cap, as predict_scene's
        with torch.no_grad():
            want = predict_scene(model, pos, x, voxel_size=0.5, max_points=400, max_fragments=cap)
        got = runner.predict(pos, x, max_fragments=given)
        assert torch.equal(got.argmax(1), want.argmax(1)) and (got - want).abs().max() < 1e-4, given
    with pytest.raises(ValueError, match=r"^OnnxSceneModel\.predict: max_fragments must be a positive integer"):
        runner.predict(pos, x, max_fragments=0)
    with pytest.raises(ValueError, match="is not a scene segmenter exported by gridify"):
        E.export_onnx(part_model()[0], tmp_path / "part.onnx", verify=False)
        E.OnnxSceneModel(tmp_path / "part.onnx")


@needs_onnx
@pytest.mark.slow  # a trace and onnxruntime runs: about a minute each
def test_real_scan_crop_labels_equal_pytorch(tmp_path, shared_data):
    scan = shared_path(
        shared_data, "scans/mmdet3d_real_scans/tests/data/semantickitti/sequences/00/velodyne/000000.bin"
    )
    raw = np.fromfile(scan, dtype=np.float32).reshape(-1, 4)
    crop = raw[np.argsort(np.linalg.norm(raw[:, :2] - raw[0, :2], axis=1), kind="stable")[:3000]]
    model, wrapper = scene_model(extent=(40.0, 40.0, 8.0))
    E.export_onnx(model, tmp_path / "kitti.onnx")
    points = torch.from_numpy(crop[None, :, :3].copy())
    features = torch.from_numpy(np.stack([crop[:, 3], crop[:, 2] - crop[:, 2].min()], 1)[None].astype(np.float32))
    got, _ = _run(tmp_path / "kitti.onnx", {"points": points, "features": features})
    for m in model.modules():
        if hasattr(m, "knn_backend"):
            m.knn_backend = "torch"
    with torch.no_grad():
        want = wrapper.reference(points, features)
    assert torch.equal(got.argmax(-1), want.argmax(-1)) and (got - want).abs().max() < 1e-4


def test_cli_export_takes_a_shipped_name(tmp_path, monkeypatch):
    seen = {}

    def fake(model, out, **kwargs):
        seen["model"] = model
        raise E.ExportError("stop here")

    monkeypatch.setattr(E, "export_onnx", fake)
    with pytest.raises(SystemExit, match="stop here"):
        cli.main(["export", "modelnet10", "--out", str(tmp_path / "m.onnx")])
    assert seen["model"].endswith("modelnet10.pt")
    with pytest.raises(SystemExit, match="checkpoint not found: nosuchmodel .*shipped model: modelnet10"):
        cli.main(["export", "nosuchmodel", "--out", str(tmp_path / "m.onnx")])
    # as predict and show take it: --model NAME, --ckpt FILE; exactly one way
    with pytest.raises(SystemExit, match="stop here"):
        cli.main(["export", "--model", "semantickitti", "--out", str(tmp_path / "m.onnx")])
    assert seen["model"].endswith("semantickitti.pt")
    with pytest.raises(SystemExit, match="stop here"):
        cli.main(["export", "--ckpt", seen["model"], "--out", str(tmp_path / "m.onnx")])
    assert seen["model"].endswith("semantickitti.pt")
    for argv in (["--model", "modelnet10", "modelnet40"], [], ["--ckpt", seen["model"], "--model", "modelnet10"]):
        with pytest.raises(SystemExit, match="give the model once"):
            cli.main(["export", *argv, "--out", str(tmp_path / "m.onnx")])


@pytest.mark.slow  # three exports (about 30 s): the default suite stays under 10 minutes
@needs_onnx
def test_the_scene_runner_takes_clouds_below_k_and_below_a_fixed_size(tmp_path):
    from tests.helpers import SCENE_SMALL, export_scene_model

    path, model = export_scene_model(tmp_path)
    k = SCENE_SMALL.get("k", 6)
    E.export_onnx(path, tmp_path / "dyn.onnx", verify=False)
    E.export_onnx(path, tmp_path / "fixed.onnx", num_points=k, verify=False)
    for m in model.modules():
        if hasattr(m, "knn_backend"):
            m.knn_backend = "torch"
    g = torch.Generator().manual_seed(0)
    for name, n in (("dyn.onnx", k - 2), ("dyn.onnx", 1), ("fixed.onnx", k), ("fixed.onnx", k - 1)):
        runner = E.OnnxSceneModel(tmp_path / name, threads=1)
        pos = torch.rand(n, 3, generator=g) * 10
        x = torch.rand(n, 2, generator=g)
        with torch.no_grad():
            want = model(pos, x)
        got = runner(pos, x)
        assert got.shape == want.shape and (got - want).abs().max() < 1e-4, (name, n)
    runner = E.OnnxSceneModel(tmp_path / "fixed.onnx")
    with pytest.raises(ValueError, match=rf"a crop of {k + 4} points, but the file was exported for exactly {k} "):
        runner(torch.rand(k + 4, 3), torch.rand(k + 4, 2))


@pytest.mark.slow  # about 23 s: the default suite stays under 10 minutes
@needs_onnx
def test_the_scene_runner_refuses_bad_input_by_name_and_takes_numpy(tmp_path):
    from tests.helpers import export_scene_model

    path, _ = export_scene_model(tmp_path)
    E.export_onnx(path, tmp_path / "dyn.onnx", verify=False)
    runner = E.OnnxSceneModel(tmp_path / "dyn.onnx", threads=1)
    g = torch.Generator().manual_seed(1)
    pos, x = torch.rand(40, 3, generator=g) * 10, torch.rand(40, 2, generator=g)
    want = runner.predict(pos, x)
    assert torch.equal(runner.predict(pos.numpy(), x.numpy()), want)  # arrays as tensors
    bad_pos = pos.clone()
    bad_pos[7, 1] = float("nan")
    cases = [
        (lambda: runner.predict(pos), r"OnnxSceneModel\.predict: x must hold the 2 features"),
        (lambda: runner.predict(pos, x[:, :1]), r"OnnxSceneModel\.predict: x must hold the 2 features.*got 1 columns"),
        (lambda: runner.predict(pos, x[:5]), r"OnnxSceneModel\.predict: x must have shape \[N, F\] with N=40"),
        (lambda: runner.predict(torch.cat([pos, x[:, :1]], 1), x), r"OnnxSceneModel\.predict: pos must have shape"),
        (lambda: runner.predict(bad_pos, x), r"OnnxSceneModel\.predict: pos contains NaN.*row 7"),
        (lambda: runner.predict(pos[:0], x[:0]), r"OnnxSceneModel\.predict: pos has no points"),
        (lambda: runner.predict(pos, x, votes=0), r"OnnxSceneModel\.predict: votes must be a positive integer"),
        (lambda: runner(pos[:, 0], x), r"OnnxSceneModel: pos must have shape \[N, 3\]"),
        (lambda: runner(pos, x[:5]), r"OnnxSceneModel: x must hold .* shape \[40, 2\], got shape \(5, 2\)"),
        (lambda: runner(pos, x, torch.tensor([1, 0] * 20)), r"OnnxSceneModel: batch must be sorted"),
        (lambda: runner(pos, x, torch.zeros(5, dtype=torch.long)), r"OnnxSceneModel: batch must be a 1-D tensor"),
        (
            lambda: runner.features_of(pos.numpy()),
            r"features_of: cloud must be a file path or a gridify\.io\.PointCloud",
        ),
        # the flat call checks values too (NaN logits, a list, no point came back as torch errors or silently)
        (lambda: runner(bad_pos, x), r"OnnxSceneModel: pos contains NaN values .* at row 7"),
        (lambda: runner(pos, x.masked_fill(torch.arange(40)[:, None] == 3, float("inf"))), r"x contains Inf.*row 3"),
        (lambda: runner(pos, x.tolist()), r"OnnxSceneModel: x must be a torch\.Tensor, got list"),
        (lambda: runner(pos[:0], x[:0]), r"OnnxSceneModel: pos holds no point"),
        (
            lambda: runner.features_of(PointCloud(points=pos.numpy())),
            r"features_of: the model was trained with LiDAR intensity \(features \['strength', 'height'\]\) but the "
            r"cloud has no intensity field \(fields: none\); read a file that has one .*columns=.* or give "
            r"predict\(coordinates, x\) the features yourself, or use a model trained with has_strength among its "
            r"features \(data.features, with the drop_strength augmentation\), which labels scans without intensity too$",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.slow  # about 23 s: the default suite stays under 10 minutes
def test_the_scene_runner_predicts_a_scan_file_or_cloud_as_its_features_and_coordinates(tmp_path):
    from tests.helpers import export_scene_model

    path, _ = export_scene_model(tmp_path)
    E.export_onnx(path, tmp_path / "dyn.onnx", verify=False)
    runner = E.OnnxSceneModel(tmp_path / "dyn.onnx", threads=1)
    rng = np.random.default_rng(3)
    scan = np.c_[rng.random((300, 3)) * 20, rng.random(300)].astype(np.float32)
    scan.tofile(tmp_path / "scan.bin")
    want = runner.predict(torch.from_numpy(scan[:, :3].copy()), runner.features_of(tmp_path / "scan.bin"))
    assert want.shape == (300, len(runner.class_names))
    torch.testing.assert_close(runner.predict(tmp_path / "scan.bin"), want, rtol=0, atol=1e-6)
    torch.testing.assert_close(runner.predict(str(tmp_path / "scan.bin")), want, rtol=0, atol=1e-6)
    cloud = PointCloud(points=scan[:, :3], fields={"intensity": scan[:, 3]})
    torch.testing.assert_close(runner.predict(cloud), want, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match=r"OnnxSceneModel\.predict: x is built from the scan when pos is a file"):
        runner.predict(tmp_path / "scan.bin", torch.zeros(300, 2))
    with pytest.raises(ValueError, match=r"features \['strength', 'height'\]\) but the cloud has no intensity field"):
        runner.predict(PointCloud(points=scan[:, :3]))


@pytest.mark.slow  # an export and two whole-scan predictions (about 20 s)
def test_the_scene_runner_and_the_predictor_read_a_scan_the_same_way(tmp_path):
    """One reader of a scan's features (cloud_scene_features): equal inputs, and the same missing-feature message."""
    from gridify import load
    from gridify.api.task_predictors import ScenePredictor
    from tests.helpers import export_scene_model

    path, _ = export_scene_model(tmp_path)
    E.export_onnx(path, tmp_path / "dyn.onnx", verify=False)
    runner = E.OnnxSceneModel(tmp_path / "dyn.onnx", threads=1)
    rng = np.random.default_rng(4)
    cloud = PointCloud(points=(rng.random((64, 3)) * 20).astype(np.float32), fields={"Remission": rng.random(64)})
    want = ScenePredictor().built_features(list(runner.features), cloud, cloud.points, False, "t")
    np.testing.assert_array_equal(runner.features_of(cloud).numpy(), want)
    bare = PointCloud(points=cloud.points)
    with pytest.raises(ValueError) as onnx_error:
        runner.features_of(bare)
    with pytest.raises(ValueError) as predictor_error:
        load(path).predict(bare)
    core = "but the cloud has no intensity field (fields: none); read a file that has one"
    assert core in str(onnx_error.value) and core in str(predictor_error.value)


# --------------------------------------------------------------------------------------
# wrappers of the wrong task; the scene runner's metadata and up axis (a hand-built file: no trace)
# --------------------------------------------------------------------------------------
def test_a_wrapper_given_a_model_of_the_other_task_names_the_task_and_the_wrapper():
    """``OnnxClassifier(scene model)`` ended in a TypeError about a tuple (the per-axis grid)."""
    from gridify.models import GridifiedClassifier

    scene, _ = scene_model()
    with pytest.raises(
        E.ExportError,
        match=r"^OnnxClassifier: the model is a GridifiedSceneSegmenter, a "
        r"scene_segmentation model, but OnnxClassifier wraps a classifier .*use OnnxSegmenter\(model\)",
    ):
        E.OnnxClassifier(scene)
    part, _ = part_model()
    with pytest.raises(E.ExportError, match=r"a segmentation model, but OnnxClassifier .*use OnnxSegmenter"):
        E.OnnxClassifier(part)
    classifier = GridifiedClassifier(3, 4, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    with pytest.raises(
        E.ExportError,
        match=r"^OnnxSegmenter: the model is a GridifiedClassifier, a classification "
        r"model, but OnnxSegmenter wraps a part or scene segmenter: use OnnxClassifier\(model\)",
    ):
        E.OnnxSegmenter(classifier)


def _tiny_scene_file(path, up="z", **meta):
    """A hand-built scene segmenter file as the runner reads one: ``logits = [R p - mean_crop(R p), features] W``
    (``R`` turns the file's up axis to z, as an export with ``up_axis`` does inside its graph; the crop's mean makes
    the logits depend on the crop), with the metadata an export writes (``meta`` overrides or drops, None, entries)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from gridify.transforms import up_axis_rotation

    rotation = up_axis_rotation(up).T.astype(np.float32)
    weights = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["points", "rotation"], ["turned"]),
        helper.make_node("ReduceMean", ["turned", "axis"], ["centre"], keepdims=1),
        helper.make_node("Sub", ["turned", "centre"], ["local"]),
        helper.make_node("Concat", ["local", "features"], ["joined"], axis=2),
        helper.make_node("MatMul", ["joined", "weights"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_scene",
        [
            helper.make_tensor_value_info("points", TensorProto.FLOAT, ["batch", "num_points", 3]),
            helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", "num_points", 2]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "num_points", 3])],
        [
            numpy_helper.from_array(rotation, "rotation"),
            numpy_helper.from_array(np.array([1], np.int64), "axis"),
            numpy_helper.from_array(weights, "weights"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    props = {
        "model": "scene_segmenter",
        "class_names": '["a", "b", "c"]',
        "inputs": '["points", "features"]',
        "in_channels": "2",
        "k": "1",
        "features": '["strength", "height"]',
        "voxel_size": "0.5",
        "max_points": "60",
        "up_axis": up,
    }
    props.update(meta)
    helper.set_model_props(model, {k: v for k, v in props.items() if v is not None})
    onnx.save(model, str(path))
    return path


@needs_onnx
def test_the_scene_runner_applies_the_up_axis_the_file_was_exported_with(tmp_path):
    """A file exported with ``--up-axis y`` covers a y-up scan as ``Predictor.predict(up_axis="y")`` does: height
    along y, crops and views of the scan turned to z up (it measured height along z and cropped the y-up frame)."""
    from gridify.transforms import to_z_up

    rng = np.random.default_rng(6)
    z_up = (rng.random((500, 3)) * np.array([20.0, 20.0, 3.0])).astype(np.float32)
    y_up = np.c_[z_up[:, 0], z_up[:, 2], -z_up[:, 1]].astype(np.float32)  # the same scan with y up
    assert np.array_equal(to_z_up(y_up, "y")[0], z_up)
    intensity = rng.random(500).astype(np.float32)
    y_file = E.OnnxSceneModel(_tiny_scene_file(tmp_path / "y.onnx", "y"), threads=1)
    z_file = E.OnnxSceneModel(_tiny_scene_file(tmp_path / "z.onnx", "z"), threads=1)
    assert (y_file.up_axis, z_file.up_axis) == ("y", "z")
    y_scan = PointCloud(points=y_up, fields={"intensity": intensity})
    z_scan = PointCloud(points=z_up, fields={"intensity": intensity})
    height = y_file.features_of(y_scan)[:, 1].numpy()
    np.testing.assert_array_equal(height, z_file.features_of(z_scan)[:, 1].numpy())  # along y, not along z
    want = z_file.predict(z_scan, votes=2, max_fragments=2)
    torch.testing.assert_close(y_file.predict(y_scan, votes=2, max_fragments=2), want, rtol=0, atol=1e-6)
    torch.testing.assert_close(y_file.predict(torch.from_numpy(y_up), z_file.features_of(z_scan)), z_file.predict(
        torch.from_numpy(z_up), z_file.features_of(z_scan)), rtol=0, atol=1e-6)  # fmt: skip
    older = E.OnnxSceneModel(_tiny_scene_file(tmp_path / "old.onnx", "z", up_axis=None), threads=1)
    assert older.up_axis == "z"  # a file without the entry: as before
    torch.testing.assert_close(older.predict(z_scan), z_file.predict(z_scan), rtol=0, atol=0)


@needs_onnx
@pytest.mark.parametrize(
    "key, value, match",
    [
        ("class_names", "[a, b]", r"metadata 'class_names' is not JSON \(Expecting value at character 1: '\[a, b\]'\)"),
        ("inputs", None, r"the metadata has no 'inputs' entry \(a JSON list of input names\)"),
        ("features", '{"height": 1}', r"metadata 'features' must hold null or a JSON list of feature names"),
        ("voxel_size", "-1", r"metadata 'voxel_size' must hold null or a positive number"),
        ("in_channels", "two", r"metadata 'in_channels' is not JSON"),
        ("up_axis", "w", r"metadata 'up_axis' must hold one of z, y, x, -z, -y, -x, got 'w'"),
        ("votes", "0", r"metadata 'votes' must hold null or a positive integer"),
    ],
)
def test_the_scene_runner_names_the_file_and_the_key_of_bad_metadata(tmp_path, key, value, match):
    """Metadata that is not JSON was a raw JSONDecodeError (a missing key a KeyError)."""
    path = _tiny_scene_file(tmp_path / "bad.onnx", **{key: value})
    with pytest.raises(ValueError, match=rf"^OnnxSceneModel: '{path}': {match}"):
        E.OnnxSceneModel(path)
