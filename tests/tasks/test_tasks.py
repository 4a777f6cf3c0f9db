"""Tasks as objects (gridify/tasks.py): the registry, each task's loss / metrics / summary, class
weights (against their loop reference), the scene task in the config schema and in a tiny training run."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gridify import tasks as TK
from gridify.registry import TASKS, UnknownNameError


def _has_scene_metric():
    import gridify.metrics as M

    return hasattr(M, "SegmentationIoU")


needs_scene_metric = pytest.mark.skipif(not _has_scene_metric(), reason="gridify.metrics.SegmentationIoU missing")


# --------------------------------------------------------------------------- registry
def test_the_registry_holds_the_three_tasks_with_their_attributes():
    assert {"classification", "segmentation", "scene_segmentation"} <= set(TASKS.names())
    c, s, sc = (TK.get_task(n) for n in ("classification", "segmentation", "scene_segmentation"))
    assert (c.dense, s.dense, sc.dense) == (False, True, True)
    assert (c.primary_metric, s.primary_metric, sc.primary_metric) == ("oa", "instance_miou", "miou")
    assert sc.plot_metrics == ("val_miou", "val_oa")
    assert c.exportable and s.exportable and sc.exportable
    assert c.normalized and s.normalized and not sc.normalized
    assert TK.get_task("Scene_Segmentation") is sc and TK.get_task(sc) is sc


def test_an_unknown_task_names_the_choices():
    with pytest.raises(
        UnknownNameError,
        match=r"unknown task 'detection'; known tasks: classification, "
        r"scene_segmentation, segmentation",
    ):
        TK.get_task("detection")
    with pytest.raises(TypeError, match="task name must be a string"):
        TK.get_task(3)


def test_datasets_of_one_task():
    assert TK.task_of_dataset("shapenet") == "segmentation"
    assert TK.task_of_dataset("modelnet") == "classification"
    for name in ("scene", "s3dis", "scannet", "semantickitti", "scene_procedural"):
        assert TK.task_of_dataset(name) == "scene_segmentation"
    assert TK.task_of_dataset("procedural") is None and TK.task_of_dataset("folder") is None

    class Declared:
        task = "segmentation"

    assert TK.task_of_dataset("anything", Declared) == "segmentation"


# --------------------------------------------------------------------------- classification / segmentation
def test_classification_metrics_loss_and_summary():
    t = TK.get_task("classification")
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]])
    y = torch.tensor([0, 1, 2, 2])
    loss = t.loss(logits, y)
    assert torch.allclose(loss, F.cross_entropy(logits, y))
    m = t.make_metrics({"num_outputs": 3}, confusion=True)
    t.update_metrics(m, logits, {"y": y, "batch": torch.arange(4)}, loss)
    values, extra = t.compute_metrics(m)
    assert values["oa"] == pytest.approx(0.75) and values["macc"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert values["loss"] == pytest.approx(float(loss))
    assert extra == {"num_scored": 4, "confusion_matrix": [[1, 0, 0], [0, 1, 0], [0, 1, 1]]}
    assert t.format_metrics(values) == "OA 75.00 %, mAcc 83.33 %"


def test_segmentation_metrics_name_the_categories():
    t = TK.get_task("segmentation")
    info = {"num_outputs": 3, "category_to_parts": [[0, 1], [2]], "category_names": ["mug", "cap"]}
    logits = torch.tensor([[3.0, 0, 0], [0, 3.0, 0], [0, 0, 3.0], [3.0, 0, 0]])  # cloud 1's argmax restricted to 2
    batch = {"y": torch.tensor([0, 1, 2, 2]), "batch": torch.tensor([0, 0, 1, 1]), "category": torch.tensor([0, 1])}
    m = t.make_metrics(info)
    t.update_metrics(m, logits, batch, t.loss(logits, batch["y"]))
    values, extra = t.compute_metrics(m, t.result_names(info))
    assert values["instance_miou"] == pytest.approx(1.0) and values["class_miou"] == pytest.approx(1.0)
    assert extra["per_category_iou"] == {"mug": 1.0, "cap": 1.0} and extra["num_scored"] == 2
    assert t.format_metrics(values) == "instance mIoU 100.00, class mIoU 100.00"
    assert t.model_kwargs({"num_categories": 2}) == {"num_categories": 2}


def test_the_training_functions_delegate_to_the_tasks():
    from gridify.training import metrics as TM

    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    batch = {"y": torch.tensor([0, 1, 2, 3, 0, 1]), "batch": torch.arange(6)}
    a = TM.make_metrics("classification", {"num_outputs": 4})
    TM.update_metrics(a, "classification", logits, batch, F.cross_entropy(logits, batch["y"]))
    t = TK.get_task("classification")
    b = t.make_metrics({"num_outputs": 4})
    t.update_metrics(b, logits, batch, t.loss(logits, batch["y"]))
    assert TM.compute_metrics(a, "classification") == t.compute_metrics(b)
    assert TM.format_metrics("segmentation", {"instance_miou": 0.5, "class_miou": 0.25}) == (
        "instance mIoU 50.00, class mIoU 25.00"
    )


# --------------------------------------------------------------------------- scene segmentation
def test_the_scene_loss_ignores_label_minus_one_and_weighs_classes():
    t = TK.get_task("scene_segmentation")
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(8, 3, generator=g, requires_grad=True)
    y = torch.tensor([0, 1, -1, 2, -1, 1, 0, 2])
    keep = y != -1
    assert torch.allclose(t.loss(logits, y), F.cross_entropy(logits[keep], y[keep]))
    w = torch.tensor([2.0, 0.5, 1.0])
    per = F.cross_entropy(logits[keep], y[keep], reduction="none")
    manual = (w[y[keep]] * per).sum() / w[y[keep]].sum()
    assert torch.allclose(t.loss(logits, y, weight=w), manual)
    none = t.loss(logits, torch.full((8,), -1))
    assert float(none.detach()) == 0.0
    none.backward()  # the graph is kept: a crop without labels does not break the step
    assert torch.equal(logits.grad, torch.zeros_like(logits))


def test_lovasz_softmax_matches_its_loop_reference_with_gradients():
    g = torch.Generator().manual_seed(3)
    for n, k in ((1, 2), (7, 3), (40, 5)):
        logits = torch.randn(n, k, generator=g, dtype=torch.float64, requires_grad=True)
        y = torch.randint(0, k, (n,), generator=g)
        fast = TK.lovasz_softmax(logits.softmax(-1), y)
        (gf,) = torch.autograd.grad(fast, logits)
        ref = TK.lovasz_softmax_reference(logits.softmax(-1), y)
        (gr,) = torch.autograd.grad(ref, logits)
        assert torch.allclose(fast, ref) and torch.allclose(gf, gr)
    # perfect one-hot predictions: zero loss; all mass on a wrong class: the loss is 1 (IoU 0 per class)
    y = torch.tensor([0, 1, 1, 2])
    assert float(TK.lovasz_softmax(F.one_hot(y, 3).double(), y)) == 0.0
    assert float(TK.lovasz_softmax(F.one_hot((y + 1) % 3, 3).double(), y)) == pytest.approx(1.0)


def test_the_scene_loss_adds_lovasz_on_the_labelled_points():
    t = TK.get_task("scene_segmentation")
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(9, 4, generator=g, requires_grad=True)
    y = torch.tensor([0, 1, -1, 2, -1, 1, 0, 3, 3])
    keep = y != -1
    expected = F.cross_entropy(logits[keep], y[keep]) + 0.5 * TK.lovasz_softmax(logits[keep].softmax(-1), y[keep])
    assert torch.allclose(t.loss(logits, y, lovasz=0.5), expected)
    assert float(t.loss(logits, torch.full((9,), -1), lovasz=1.0).detach()) == 0.0


def test_lovasz_weight_is_a_scene_key():
    pytest.importorskip("yaml")
    from gridify.training import config as C

    cfg = C.resolve_config(None, ["task=scene_segmentation", "data.name=scene_procedural", "optim.lovasz_weight=1"])
    assert cfg["optim"]["lovasz_weight"] == 1
    with pytest.raises(C.ConfigError, match="optim.lovasz_weight: the Lovász-softmax loss is for scene_segmentation"):
        C.resolve_config(None, ["optim.lovasz_weight=1"])
    with pytest.raises(C.ConfigError, match="optim.lovasz_weight must be"):
        C.resolve_config(None, ["task=scene_segmentation", "data.name=scene_procedural", "optim.lovasz_weight=-1"])


@needs_scene_metric
def test_scene_metrics_keys_per_class_iou_and_confusion():
    t = TK.get_task("scene_segmentation")
    info = {"num_outputs": 3, "class_names": ["floor", "wall", "chair"], "ignore_index": -1}
    pred = torch.tensor([0, 0, 1, 1, 2, 0])
    y = torch.tensor([0, 0, 1, -1, 1, -1])
    logits = F.one_hot(pred, 3).float() * 5
    m = t.make_metrics(info)
    loss = t.loss(logits, y)
    t.update_metrics(m, logits, {"y": y, "batch": torch.zeros(6, dtype=torch.long)}, loss)
    values, extra = t.compute_metrics(m, t.result_names(info))
    assert set(values) == {"loss", "miou", "oa", "macc"}
    # floor: TP 2, FP 0, FN 0 -> 1; wall: TP 1, FN 1 (predicted chair) -> 0.5; chair absent from the target
    assert values["oa"] == pytest.approx(3 / 4)
    assert values["miou"] == pytest.approx((1.0 + 0.5) / 2)
    assert values["macc"] == pytest.approx((1.0 + 0.5) / 2)
    assert extra["per_class_iou"]["floor"] == pytest.approx(1.0) and extra["per_class_iou"]["wall"] == pytest.approx(
        0.5
    )
    assert extra["per_class_iou"]["chair"] is None
    assert extra["confusion_matrix"] == [[2, 0, 0], [0, 1, 1], [0, 0, 0]]
    assert extra["num_scored"] == 1
    assert values["loss"] == pytest.approx(float(loss))
    assert t.format_metrics(values).startswith("mIoU 75.00, OA 75.00 %")


def test_class_weights_match_their_loop_reference():
    rng = np.random.default_rng(0)
    for _ in range(20):
        counts = rng.integers(0, 1000, size=int(rng.integers(1, 12))).astype(float)
        counts[rng.random(len(counts)) < 0.3] = 0
        if not (counts > 0).any():
            counts[0] = 5
        for mode in ("inverse", "inverse_sqrt"):
            w = TK.class_weights(counts, mode)
            torch.testing.assert_close(w, TK.class_weights_reference(list(counts), mode))
            present = torch.from_numpy(counts > 0)
            assert float(w[present].mean()) == pytest.approx(1.0, rel=1e-5)
            assert torch.all(w[~present] == 0)
    assert TK.class_weights([1, 2], "none") is None
    w = TK.class_weights([100, 0, 25], "inverse")
    torch.testing.assert_close(w, torch.tensor([0.4, 0.0, 1.6]))
    w = TK.class_weights([100, 0, 25], "inverse_sqrt")
    torch.testing.assert_close(w, torch.tensor([2 / 3, 0.0, 4 / 3]))


@pytest.mark.parametrize(
    "counts, mode, message",
    [
        ([0, 0], "inverse", "no class has any labelled point"),
        ([1, -2], "inverse", "non-negative"),
        ([1, float("nan")], "inverse", "finite"),
        ([], "inverse", "non-empty"),
        ([1, 2], "balanced", "mode must be one of"),
    ],
)
def test_class_weights_refuse_bad_counts(counts, mode, message):
    with pytest.raises(ValueError, match=message):
        TK.class_weights(counts, mode)


# --------------------------------------------------------------------------- wiring
def test_a_scene_config_validates_and_mismatches_are_named():
    pytest.importorskip("yaml")
    from gridify.training import config as C

    cfg = C.resolve_config(
        None,
        [
            "task=scene_segmentation",
            "data.name=scene_procedural",
            "data.num_scenes=2",
            "data.num_points=2000",
            "data.max_points=1000",
            "data.voxel_size=0.05",
            "optim.class_weights=inverse_sqrt",
            "model.name=gridified_segmenter",
        ],
    )
    C.check_config(cfg)
    assert cfg["optim"]["class_weights"] == "inverse_sqrt"
    assert C.PRIMARY_METRIC["scene_segmentation"] == "miou"
    with pytest.raises(C.ConfigError, match="optim.class_weights must be one of"):
        C.resolve_config(None, ["optim.class_weights=balanced"])
    with pytest.raises(C.ConfigError, match="task must be one of"):
        C.resolve_config(None, ["task=detection"])
    with pytest.raises(C.ConfigError, match=r"data.voxel_size must be null or a finite number >= 1e-06"):
        C.resolve_config(None, ["task=scene_segmentation", "data.name=scene_procedural", "data.voxel_size=0"])
    with pytest.raises(C.ConfigError, match=r"model.resolution must be a list of 3 items"):
        C.resolve_config(None, ["model.resolution=[4, 4]"])
    C.resolve_config(None, ["model.resolution=[8, 8, 4]"])  # the model decides whether it takes per-axis sizes


def test_the_dataset_decides_its_task():
    pytest.importorskip("yaml")
    from gridify.training import config as C
    from gridify.training import data as D

    cfg = C.resolve_config(None, ["data.name=scene_procedural", "data.num_scenes=1", "data.num_points=500"])
    with pytest.raises(
        C.ConfigError, match="data.name=scene_procedural is a scene_segmentation dataset; set task: scene_segmentation"
    ):
        D.build_dataset(cfg, "train")


def test_scene_data_info_class_weights_and_metric_augmentations():
    pytest.importorskip("yaml")
    from gridify.training import config as C
    from gridify.training import data as D

    cfg = C.resolve_config(
        None,
        [
            "task=scene_segmentation",
            "data.name=scene_procedural",
            "data.num_scenes=2",
            "data.num_points=1500",
            "data.max_points=600",
        ],
    )
    aug = D.EpochAugment(
        C.parse_augmentations(["rotate_z", {"name": "scale", "low": 1.5, "high": 2.0}]),
        0,
        fit=TK.get_task("scene_segmentation").normalized,
    )
    ds = D.build_dataset(cfg, "train", aug)
    item = ds[0]
    assert item["pos"].abs().max() > 1.5  # metres, not shrunk into [-1, 1]^3
    info = D.dataset_info(ds, "scene_segmentation")
    assert info["num_outputs"] == len(ds.class_names) and info["class_names"] == list(ds.class_names)
    assert info["ignore_index"] == -1 and info["in_channels"] == ds.in_channels
    inference = D.inference_info(cfg)
    assert inference["normalization"] is None and inference["max_points"] == 600
    w = D.train_class_weights(ds, "inverse")
    counts = ds.label_counts()
    torch.testing.assert_close(torch.tensor(w), TK.class_weights_reference(list(counts), "inverse"))
    assert D.train_class_weights(ds, "none") is None
    fitted = D.EpochAugment(C.parse_augmentations(["rotate_z"]), 0)
    assert fitted.fit and fitted({"pos": torch.full((4, 3), 5.0)})["pos"].abs().max() <= 1.0


def test_checkpoint_and_export_follow_the_task():
    from gridify import checkpoint as CK
    from gridify import export as EX

    assert "scene_segmentation" in CK.TASKS and "sequence_classification" in CK.TASKS
    assert CK.task_served("scene_segmentation", "segmentation")
    assert not CK.task_served("segmentation", "classification")
    with pytest.raises(EX.ExportError, match=r"Net is not exportable: the temporal model \(temporal_cfc\) has no ONNX"):

        class Net(torch.nn.Module):
            pass

        EX.check_task_exportable("sequence_classification", Net())
    EX.check_task_exportable("scene_segmentation", torch.nn.Linear(1, 1))  # exportable: left to check_exportable
    EX.check_task_exportable("classification", torch.nn.Linear(1, 1))  # left to check_exportable


def test_predictor_says_whether_it_is_dense():
    from gridify.api import Prediction, Predictor
    from gridify.models import build_model

    model = build_model(
        "gridified_classifier",
        in_channels=3,
        num_classes=2,
        resolution=3,
        k=2,
        hidden_channels=4,
        depth=1,
        kernel_size=3,
    )
    pred = Predictor(model, task="classification", class_names=["a", "b"], num_points=32, in_channels=3)
    assert pred.dense is False
    seg = build_model(
        "gridified_segmenter",
        in_channels=3,
        num_classes=2,
        resolution=3,
        k=2,
        hidden_channels=4,
        depth=1,
        kernel_size=3,
    )
    assert Predictor(seg, task="scene_segmentation", class_names=["a", "b"], num_points=32, in_channels=3).dense
    with pytest.raises(ValueError, match=r"Predictor: task must be one of \['classification', "):
        Predictor(model, task="detection", class_names=["a", "b"], num_points=32, in_channels=3)
    p = Prediction(
        labels=np.array([0, 1, 1]),
        probabilities=np.zeros((3, 2)),
        class_names=["a", "b"],
        task="scene_segmentation",
        num_points=3,
    )
    assert p.dense and p.label == 1 and p.names == ["a", "b", "b"]


# --------------------------------------------------------------------------- end to end
@needs_scene_metric
def test_a_tiny_scene_run_logs_val_miou(tmp_path, capsys):
    pytest.importorskip("lightning")
    pytest.importorskip("yaml")
    from gridify import training as T
    from gridify.registry import MODELS

    model = (
        ["model.name=scene_segmenter", "model.resolution=[4, 4, 2]", "model.backbone=resnet"]
        if "scene_segmenter" in MODELS
        else ["model.name=gridified_segmenter", "model.resolution=4"]
    )
    out, config = tmp_path / "run", tmp_path / "scene.yaml"
    config.write_text("task: scene_segmentation\ndata: {name: scene_procedural}\n")
    T.main(
        [
            "--config",
            str(config),
            "data.num_scenes=2",
            "data.num_points=1200",
            "data.max_points=500",
            "data.voxel_size=0.1",
            "data.val={num_scenes: 1}",
            "data.test={num_scenes: 1}",
            "data.batch_size=2",
            "data.augmentations=[rotate_z, jitter]",
            "optim.class_weights=inverse",
            *model,
            "model.k=3",
            "model.hidden_channels=8",
            "model.depth=1",
            "model.kernel_size=3",
            "trainer.max_epochs=1",
            "trainer.num_threads=1",
            "trainer.progress_bar=false",
            "trainer.log_every_n_steps=1",
            "trainer.plots=false",
            f"output_dir={out}",
        ]
    )
    assert "[test] batch 1/1: " in capsys.readouterr().out  # the whole-scene test says what it scored
    rows = (out / "csv").rglob("metrics.csv")
    text = "".join(p.read_text() for p in rows)
    assert "val_miou" in text and "val_oa" in text
    report = json.loads((out / "test_metrics.json").read_text())
    assert report["task"] == "scene_segmentation" and set(report["metrics"]) >= {"miou", "oa", "macc", "loss"}
    assert "per_class_iou" in report and "confusion_matrix" in report
    assert not math.isnan(report["metrics"]["miou"])


def test_a_scene_model_builds_its_own_graphs_in_the_loader():
    pytest.importorskip("yaml")
    from gridify.registry import MODELS
    from gridify.training import data as D

    if "scene_segmenter" not in MODELS:
        pytest.skip("no scene_segmenter")
    from gridify.models import build_model

    model = build_model(
        "scene_segmenter",
        in_channels=1,
        num_classes=3,
        resolution=(4, 4, 2),
        k=3,
        hidden_channels=8,
        depth=1,
        kernel_size=3,
        backbone="resnet",
    ).eval()
    cfg = {"data": {"prefetch_graph": True, "num_workers": 1}, "trainer": {"accelerator": "cpu"}}
    builder = D.graph_builder_of(model, cfg)
    assert isinstance(builder, D.ModelGraphBuilder)
    g = torch.Generator().manual_seed(0)
    pos = torch.rand(60, 3, generator=g) * torch.tensor([6.0, 4.0, 3.0])
    x, batch = torch.rand(60, 1, generator=g), torch.arange(2).repeat_interleave(30)
    with torch.no_grad():
        torch.testing.assert_close(model(pos, x, batch, graph=builder(pos, batch, 2)), model(pos, x, batch))
    cfg["data"]["num_workers"] = 0
    assert D.graph_builder_of(model, cfg) is None


def test_a_scene_run_without_labels_fails_naming_the_split(tmp_path):
    pytest.importorskip("lightning")
    from gridify import training as T

    seq = tmp_path / "data" / "sequences"
    for s in ("00", "01"):
        (seq / s / "velodyne").mkdir(parents=True)
        rows = np.random.default_rng(int(s)).uniform(-5, 5, (300, 4)).astype("<f4")
        rows.tofile(seq / s / "velodyne" / "000000.bin")  # no labels/ folder
    with pytest.raises(
        SystemExit,
        match=r"the train split \(SemanticKITTI, 1 scenes\) has no labelled point: are its "
        r"label files there",
    ):
        T.main(
            [
                "--config",
                "semantickitti_mini",
                "--data-root",
                str(tmp_path / "data"),
                f"output_dir={tmp_path / 'o'}",
                "data.sequences=['00']",
                "data.val={sequences: ['01']}",
                "data.test={sequences: ['01']}",
            ]
        )
