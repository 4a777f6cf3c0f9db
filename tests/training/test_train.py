"""Tests of the training/evaluation scripts (gridify.training / gridify.evaluation, wrapped by scripts/train.py and scripts/evaluate.py) and configs/.

The end-to-end runs use a tiny procedural data set and a tiny model so the whole file stays
well under a minute on one core (the two-process ddp and ddp_spawn runs take about 25 s of it).
"""

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("yaml")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"

from gridify import evaluation as E  # noqa: E402
from gridify import training as T  # noqa: E402
from tests.helpers import TINY_SEG_RUN  # noqa: E402

#: four classes x 2 shapes of 96 points, batch 4: two optimizer steps per epoch
TINY = [
    "task=classification",
    "data.name=procedural",
    "data.num_points=96",
    "data.num_samples_per_class=2",
    "data.classes=[box, sphere, cylinder, torus]",
    "data.val={num_samples_per_class: 1}",
    "data.test={num_samples_per_class: 2}",
    "data.batch_size=4",
    "data.augmentations=[rotate_z, {name: scale, low: 0.9, high: 1.2}, jitter]",
    "model.name=gridified_classifier",
    "model.resolution=4",
    "model.k=4",
    "model.hidden_channels=8",
    "model.depth=1",
    "model.kernel_size=3",
    "model.dropout=0.2",
    "optim.lr=5e-3",
    "optim.warmup_epochs=1",
    "optim.kernel_l2=1e-4",
    "trainer.max_epochs=2",
    "trainer.num_threads=1",
    "trainer.progress_bar=false",
    "trainer.log_every_n_steps=1",
]


def tiny(out_dir, *extra):
    return ["--config", str(ROOT / "configs" / "procedural.yaml"), *TINY, f"output_dir={out_dir}", *extra]


# --------------------------------------------------------------------------------------
# config and overrides
# --------------------------------------------------------------------------------------
def test_override_values_are_yaml():
    assert T.parse_override("model.resolution=13") == (["model", "resolution"], 13)
    assert T.parse_override("optim.lr=1e-3") == (["optim", "lr"], 1e-3)  # YAML 1.1 would give a string
    assert T.parse_override("trainer.devices=[0, 1]") == (["trainer", "devices"], [0, 1])
    assert T.parse_override("trainer.progress_bar=false") == (["trainer", "progress_bar"], False)
    assert T.parse_override("data.root=") == (["data", "root"], None)
    assert T.parse_override("data.root=a=b") == (["data", "root"], "a=b")
    cfg = T.resolve_config(
        str(ROOT / "configs" / "procedural.yaml"),
        [
            "model.resolution=7",
            "trainer.max_epochs=2",
            "data.batch_size=8",
            "model.backbone_kwargs.fft=false",
            "seed=3",
        ],
    )
    assert cfg["model"]["resolution"] == 7 and cfg["trainer"]["max_epochs"] == 2
    assert cfg["data"]["batch_size"] == 8 and cfg["model"]["backbone_kwargs"] == {"fft": False}
    assert cfg["seed"] == 3
    assert cfg["trainer"]["precision"] == T.DEFAULTS["trainer"]["precision"]  # defaults fill the rest


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.resolution", "malformed override 'model.resolution': expected section.key=value"),
        ("=3", "malformed override"),
        ("model..k=3", "must be dot-separated names"),
        ("model.k=[1, 2", "not valid YAML"),
        (
            "bogus.x=1",
            "unknown section 'bogus'; known sections: seed, task, output_dir, init_weights, data, model, optim, trainer",
        ),
        ("seed.x=1", "seed is a int"),
        ("trainer.max_epoch=3", "unknown key trainer.max_epoch"),
        ("trainer.checkpoint.every=3", "unknown key trainer.checkpoint.every"),
        ("optim.lr=-1", "optim.lr must be a finite number > 0, got -1"),
        ("data.batch_size=0", "data.batch_size must be a positive integer"),
        ("task=detection", "task must be one of"),
        ("data.name=kitti", "data.name must be one of"),
        ("data.augmentations=[spin]", "unknown augmentation 'spin'"),
    ],
)
def test_bad_overrides_give_clear_errors(override, message):
    with pytest.raises(T.ConfigError) as exc:
        T.resolve_config(None, [override])
    assert message in str(exc.value)


def test_config_file_errors(tmp_path):
    with pytest.raises(
        T.ConfigError,
        match=r"config '.*missing.yaml' not found: no such file, and no shipped config "
        r"of that name \(shipped: folder_classification, ",
    ):
        T.resolve_config(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {resolution: 9}\nschedule: {epochs: 3}\n")
    with pytest.raises(T.ConfigError, match=r"bad.yaml: unknown config section\(s\) \['schedule'\]"):
        T.resolve_config(str(bad))
    bad.write_text("- a\n- b\n")
    with pytest.raises(T.ConfigError, match="top level must be a mapping"):
        T.resolve_config(str(bad))
    bad.write_text("model: [unclosed\n")
    with pytest.raises(
        T.ConfigError,
        match=r"bad.yaml: not valid YAML \(line 2, column 1: expected ',' or ']', but "
        r"got '<stream end>'\)$",
    ):
        T.resolve_config(str(bad))


def test_cli_reports_config_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        T.main(["--config", str(ROOT / "configs" / "procedural.yaml"), "modle.resolution=3"])
    assert "config error" in str(exc.value) and "unknown section 'modle'" in str(exc.value)
    T.main(["--config", str(ROOT / "configs" / "procedural.yaml"), "--print-config", "--devices", "2"])
    assert "devices: 2" in capsys.readouterr().out


def test_shipped_configs_resolve_and_follow_the_thesis():
    for f in sorted((ROOT / "configs").glob("*.yaml")):
        T.resolve_config(str(f))
    m40 = T.resolve_config(str(ROOT / "configs" / "modelnet40.yaml"))
    assert {
        k: m40["model"][k]
        for k in ("resolution", "k", "hidden_channels", "depth", "dropout", "omega0", "aggr", "message", "kernel_size")
    } == dict(
        resolution=9,
        k=9,
        hidden_channels=128,
        depth=3,
        dropout=0.1,
        omega0=0.1,
        aggr="mean",
        message="product",
        kernel_size=9,
    )
    assert (m40["optim"]["lr"], m40["optim"]["weight_decay"], m40["optim"]["warmup_epochs"]) == (5e-3, 0.0, 10)
    assert (m40["trainer"]["max_epochs"], m40["data"]["batch_size"]) == (60, 32)
    m10 = T.resolve_config(str(ROOT / "configs" / "modelnet10.yaml"))
    assert (
        m10["data"]["source"] == "auto" and m10["data"]["use_normals"] is False and m10["data"]["name"] == "modelnet10"
    )
    assert m10["data"]["num_points"] == 1024 and "root" not in m10["data"]  # --data-root / $GRIDIFY_DATA / datasets/
    for name, backbone in (("shapenet_ccnn", "ccnn"), ("shapenet_unet", "unet")):
        c = T.resolve_config(str(ROOT / "configs" / f"{name}.yaml"))
        assert c["task"] == "segmentation" and c["model"]["backbone"] == backbone
        assert {k: c["model"][k] for k in ("resolution", "k", "omega0", "aggr", "message", "dropout", "depth")} == dict(
            resolution=13, k=9, omega0=1.0, aggr="max", message="concat", dropout=0.3, depth=4
        )
        assert (c["optim"]["lr"], c["optim"]["weight_decay"], c["data"]["batch_size"]) == (1e-3, 1e-3, 16)


def test_warmup_cosine_schedule():
    f = lambda s: T.warmup_cosine(s, warmup=10, total=110, floor=0.0)  # noqa: E731
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0) and f(60) == pytest.approx(0.5) and f(110) == pytest.approx(0.0)
    assert all(f(s) >= f(s + 1) for s in range(10, 110))
    assert T.warmup_cosine(500, warmup=0, total=100, floor=0.1) == pytest.approx(0.1)


def test_shard_sampler_orders_depend_on_seed_and_epoch_only():
    s = T.ShardSampler(10, shuffle=True, seed=1)
    first = list(s)
    s.set_epoch(1)
    assert list(s) != first and sorted(s) == list(range(10))
    s.set_epoch(0)
    assert list(s) == first
    shards = [list(T.ShardSampler(10, shuffle=True, seed=1, rank=r, world_size=3, pad=True)) for r in range(3)]
    assert all(len(x) == 4 for x in shards) and set(sum(shards, [])) == set(range(10))
    evals = [list(T.ShardSampler(10, shuffle=False, rank=r, world_size=3)) for r in range(3)]
    assert sorted(sum(evals, [])) == list(range(10))  # evaluation: every sample exactly once


# --------------------------------------------------------------------------------------
# end to end
# --------------------------------------------------------------------------------------
PRINTED = {}  # output dir -> what its run printed


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("procedural_run")
    old = os.umask(0o022)  # every file of the run must get 0644 (not mkstemp's 0600)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            summary = T.main(tiny(out))
    finally:
        os.umask(old)
    PRINTED[out] = printed.getvalue()
    return out, summary


def test_train_writes_everything(trained):
    out, summary = trained
    # the last line says where the metrics and the usable model went
    last = [line for line in PRINTED[out].splitlines() if line.startswith("[train] test")][-1]
    assert str(out / "test_metrics.json") in last and f"model: {out / 'checkpoints' / 'model.pt'}" in last
    ck = out / "checkpoints"
    assert (ck / "last.ckpt").is_file() and list(ck.glob("best-epoch*.ckpt")) and (ck / "model.pt").is_file()
    report = json.loads((out / "test_metrics.json").read_text())
    assert set(report["metrics"]) >= {"oa", "macc"} and 0.0 <= report["metrics"]["oa"] <= 1.0
    assert report["num_samples"] == report["num_scored"] == 8 and report["global_step"] == 4
    assert len(report["confusion_matrix"]) == 4 and sum(map(sum, report["confusion_matrix"])) == 8
    info = json.loads((out / "run_info.json").read_text())
    assert info["source_format"] == "procedural" and info["num_parameters"] > 0
    import gridify

    assert info["gridify_version"] == gridify.__version__ and report["gridify_version"] == gridify.__version__
    cfg = T.load_yaml(out / "config.yaml")
    assert cfg["model"]["in_channels"] == 6 and cfg["model"]["num_classes"] == 4  # filled from the data
    for png in ("loss.png", "metrics.png", "confusion_matrix.png"):
        assert (out / "plots" / png).stat().st_size > 1000
    assert (out / "csv" / "version_0" / "metrics.csv").is_file() and list((out / "tensorboard").rglob("events.*"))
    files = [f for f in out.rglob("*") if f.is_file()]
    assert (
        len(files) > 10
        and {
            f.relative_to(out).as_posix(): oct(f.stat().st_mode & 0o777)
            for f in files
            if f.stat().st_mode & 0o777 != 0o644
        }
        == {}
    )
    exported = torch.load(ck / "model.pt", map_location="cpu", weights_only=True)
    assert exported["model_name"] == "gridified_classifier" and exported["class_names"] == [
        "box",
        "sphere",
        "cylinder",
        "torus",
    ]
    assert exported["gridify_version"] == gridify.__version__ and exported["model_kwargs"]["resolution"] == 4
    torch.load(ck / "last.ckpt", map_location="cpu", weights_only=True)  # Lightning ckpts load safely too


def test_learning_rate_curve_and_tensorboard(trained):
    """lr_epoch is logged every epoch, so the LR panel has a curve even with no per-step LR rows; TensorBoard gets
    the test confusion matrix and the hyper-parameters with the final metrics."""
    out, _ = trained
    rows = T.read_metric_logs(out / "csv")
    assert [r["step"] for r in rows if "lr_epoch" in r] == [1.0, 3.0]  # the last step of each epoch
    epoch_only = [r for r in rows if not any(k.startswith("lr-") for k in r)]  # as if log_every_n_steps > an epoch
    for subset in (rows, epoch_only):
        fig = T.metrics_figure(subset, "classification")
        assert fig.axes[1].lines and len(fig.axes[1].lines[-1].get_xdata()) == 2
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = EventAccumulator(str(out / "tensorboard" / "version_0")).Reload()
    image = run.Images("test/confusion_matrix")[-1]
    assert image.step == 4 and image.width > 200 and image.height > 200
    hp = EventAccumulator(str(out / "tensorboard" / "version_0" / "hparams")).Reload()
    assert {"hparams/test_oa", "hparams/test_macc", "hparams/test_loss"} <= set(hp.Tags()["scalars"])
    report = json.loads((out / "test_metrics.json").read_text())
    assert hp.Scalars("hparams/test_oa")[-1].value == pytest.approx(report["metrics"]["oa"])
    assert "hparams" in hp.PluginTagToContent("hparams") or hp.PluginTagToContent("hparams")


def test_training_time_is_logged_every_epoch(trained):
    """train_seconds (training without validation) is logged at the end of each epoch, grows, and is kept in the
    checkpoints, so a resumed run goes on counting (test_exact_resume)."""
    out, _ = trained
    logged = [(r["epoch"], r["train_seconds"]) for r in T.read_metric_logs(out / "csv") if "train_seconds" in r]
    assert [e for e, _ in logged] == [1.0, 2.0] and 0 < logged[0][1] < logged[1][1]  # epochs counted from 1
    state = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]["TrainingClock"]
    assert state["total"] == pytest.approx(logged[1][1], rel=1e-5)


def test_evaluate_reproduces_the_test_metrics(trained, tmp_path):
    out, _ = trained
    report = json.loads((out / "test_metrics.json").read_text())
    for ckpt in (report["checkpoint"], str(out / "checkpoints" / "model.pt")):
        res = E.main(["--ckpt", ckpt, "--threads", "1", "--no-progress", "--output", str(tmp_path / "m.json")])
        for key in ("oa", "macc", "loss"):
            assert res["metrics"][key] == pytest.approx(report["metrics"][key], abs=1e-6), (ckpt, key)
        assert res["confusion_matrix"] == report["confusion_matrix"]
        assert json.loads((tmp_path / "m.json").read_text())["metrics"] == res["metrics"]


def test_evaluate_in_bf16_or_with_a_named_fallback(trained, tmp_path, monkeypatch):
    """--precision bf16 runs under bf16 autocast where the CPU has native bf16, else warns and
    runs fp32; the report says which. Without native bf16 the result equals fp32's."""
    from gridify import precision as P

    out, _ = trained
    ckpt = str(out / "checkpoints" / "model.pt")
    base = ["--ckpt", ckpt, "--threads", "1", "--no-progress", "--output", str(tmp_path / "m.json")]
    fp32 = E.main(base)
    monkeypatch.setattr(P, "cpu_has_native_bf16", lambda: False)
    with pytest.warns(UserWarning, match="no native bfloat16.*running in fp32"):
        fallback = E.main(base + ["--precision", "bf16"])
    assert fallback["precision"] == "fp32" and fallback["metrics"] == fp32["metrics"]
    monkeypatch.setattr(P, "cpu_has_native_bf16", lambda: True)
    low = E.main(base + ["--precision", "bf16"])
    assert low["precision"] == "bf16" and low["metrics"]["loss"] == pytest.approx(fp32["metrics"]["loss"], abs=0.05)
    with pytest.raises(SystemExit):
        E.main(base + ["--precision", "int8"])


def test_evaluate_writes_its_report_atomically(trained, tmp_path, monkeypatch):
    import gridify._files

    written = []
    real_write = gridify._files.atomic_write
    monkeypatch.setattr(
        gridify._files, "atomic_write", lambda path, write: written.append(path) or real_write(path, write)
    )
    out, _ = trained
    E.main(
        [
            "--ckpt",
            str(out / "checkpoints" / "model.pt"),
            "--threads",
            "1",
            "--no-progress",
            "--output",
            str(tmp_path / "sub" / "m.json"),
        ]
    )
    assert written == [tmp_path / "sub" / "m.json"] and json.loads(written[0].read_text())["split"] == "test"


def test_evaluate_rejects_missing_corrupt_and_unsafe_files(tmp_path):
    missing = tmp_path / "nope.ckpt"
    with pytest.raises(SystemExit, match=f"checkpoint not found: {missing}"):
        E.main(["--ckpt", str(missing)])
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"\x80\x04not a checkpoint at all")
    with pytest.raises(SystemExit, match=f"cannot read checkpoint {corrupt}: the file is corrupt"):
        E.main(["--ckpt", str(corrupt)])
    import argparse

    unsafe = tmp_path / "unsafe.pt"
    torch.save({"state_dict": {}, "payload": argparse.Namespace(x=1)}, unsafe)
    with pytest.raises(SystemExit, match=r"refusing to load .*unsafe.pt.*argparse.Namespace"):
        E.main(["--ckpt", str(unsafe)])
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(SystemExit, match="not a gridify checkpoint"):
        E.main(["--ckpt", str(foreign)])


def test_exact_resume(trained, tmp_path):
    """2 epochs in one go == 1 epoch, interrupted, + 1 resumed epoch (weights, optimizer, step)."""
    full_dir, _ = trained
    T.main(tiny(tmp_path, "trainer.stop_after_epochs=1", "trainer.plots=false"))
    first = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert first["global_step"] == 2
    with pytest.raises(SystemExit, match="already holds a run"):
        T.main(tiny(tmp_path, "trainer.plots=false"))
    first_started = json.loads((tmp_path / "run_info.json").read_text())["started"]
    first_clock = first["callbacks"]["TrainingClock"]["total"]
    T.main(tiny(tmp_path, "trainer.plots=false", "--resume", "auto"))
    sessions = json.loads((tmp_path / "run_info.json").read_text())["sessions"]  # both sessions on record
    assert [s["started"] for s in sessions][:1] == [first_started] and len(sessions) == 2
    assert sessions[0]["resumed_from"] is None and sessions[1]["resumed_from"].endswith("last.ckpt")
    a = torch.load(full_dir / "checkpoints" / "last.ckpt", weights_only=True)
    b = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert (a["global_step"], a["epoch"]) == (b["global_step"], b["epoch"]) == (4, 1)
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for k in a["state_dict"]:
        torch.testing.assert_close(a["state_dict"][k], b["state_dict"][k], rtol=1e-5, atol=1e-6, msg=k)
    for sa, sb in zip(a["optimizer_states"][0]["state"].values(), b["optimizer_states"][0]["state"].values()):
        torch.testing.assert_close(sa["exp_avg_sq"], sb["exp_avg_sq"], rtol=1e-5, atol=1e-9)
    assert a["lr_schedulers"][0]["last_epoch"] == b["lr_schedulers"][0]["last_epoch"] == 4
    logged = {r["epoch"]: r["train_seconds"] for r in T.read_metric_logs(tmp_path / "csv") if "train_seconds" in r}
    assert logged[1] == pytest.approx(first_clock, rel=1e-5) and logged[2] > first_clock  # counting went on
    # every step's loss and rate: kept in the checkpoints, so the resumed curve is the uninterrupted one
    ra, rb = a["callbacks"]["StepCurves"]["rows"], b["callbacks"]["StepCurves"]["rows"]
    assert ra[:, :2].tolist() == rb[:, :2].tolist() == [[0, 1], [1, 1], [2, 2], [3, 2]]
    torch.testing.assert_close(ra, rb, rtol=1e-5, atol=1e-6)


def test_segmentation_run_and_export(tmp_path):
    T.main([*TINY_SEG_RUN, f"output_dir={tmp_path}"])
    report = json.loads((tmp_path / "test_metrics.json").read_text())
    assert set(report["metrics"]) >= {"instance_miou", "class_miou"}
    assert 0.0 <= report["metrics"]["instance_miou"] <= 1.0 and list(report["per_category_iou"]) == [
        "box",
        "chair",
        "lamp",
    ]
    res = E.main(["--ckpt", str(tmp_path / "checkpoints" / "model.pt"), "--threads", "1", "--no-progress"])
    assert res["metrics"]["instance_miou"] == pytest.approx(report["metrics"]["instance_miou"], abs=1e-6)
    assert res["per_category_iou"] == pytest.approx(report["per_category_iou"], abs=1e-6)


def test_bf16_autocast_on_a_cpu_without_native_bf16_trains_in_fp32_with_a_warning(monkeypatch):
    """Emulated bf16 is slower than fp32: the run warns and trains in fp32, as inference's resolve_precision does."""
    from gridify.training.runner import cpu_precision

    tr = {"precision": "bf16-mixed", "accelerator": "cpu"}
    monkeypatch.setattr("gridify.precision.cpu_has_native_bf16", lambda: False)
    with pytest.warns(UserWarning, match=r"trainer\.precision=bf16-mixed: this CPU has no native bf16.*32-true"):
        assert cpu_precision(tr) == "32-true"
    assert cpu_precision({**tr, "precision": "bf16-true"}) == "bf16-true"  # bf16 weights: asked for, kept
    assert cpu_precision({**tr, "precision": "32-true"}) == "32-true"
    monkeypatch.setattr("gridify.precision.cpu_has_native_bf16", lambda: True)
    assert cpu_precision(tr) == "bf16-mixed"
    assert cpu_precision({**tr, "accelerator": "gpu"}) == "bf16-mixed"


def test_bf16_mixed_precision_run(tmp_path, monkeypatch):
    """SepFlexConv3d handles autocast itself: a bf16-mixed CPU run trains and tests with the layers
    called inside the autocast region (nothing wraps them to turn it off)."""
    from gridify.nn.flexconv import SepFlexConv3d

    autocast_on = []
    forward = SepFlexConv3d.forward

    def spy(self, x):
        autocast_on.append(torch.is_autocast_enabled(x.device.type))
        return forward(self, x)

    monkeypatch.setattr(SepFlexConv3d, "forward", spy)
    monkeypatch.setattr("gridify.precision.cpu_has_native_bf16", lambda: True)  # whatever this CPU has
    summary = T.main(
        tiny(
            tmp_path, "trainer.max_epochs=1", "trainer.plots=false", "--accelerator", "cpu", "--precision", "bf16-mixed"
        )
    )
    assert summary["config"]["trainer"]["precision"] == "bf16-mixed"
    assert autocast_on and all(autocast_on)
    report = json.loads((tmp_path / "test_metrics.json").read_text())
    assert report["global_step"] == 2 and report["num_scored"] == 8
    assert all(torch.isfinite(torch.tensor(v)) for v in report["metrics"].values())
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 2
    assert all(torch.isfinite(v).all() for v in state["state_dict"].values() if v.is_floating_point())


def test_modelnet10_one_training_step(shared_data, tmp_path):
    root = shared_data / "modelnet10_pcd"
    if not (root / "ModelNet10" / "pcd").is_dir():
        pytest.skip(f"ModelNet10 pcd release not found under {root}")
    T.main(
        [
            "--config",
            "modelnet10",
            f"output_dir={tmp_path}",
            "--data-root",
            str(root),
            "data.batch_size=2",
            "data.num_workers=0",
            "model.resolution=4",
            "model.k=4",
            "model.hidden_channels=8",
            "model.depth=1",
            "model.kernel_size=3",
            "trainer.max_epochs=1",
            "trainer.max_steps=1",
            "trainer.limit_train_batches=1",
            "trainer.limit_val_batches=1",
            "trainer.limit_test_batches=1",
            "trainer.num_threads=1",
            "trainer.progress_bar=false",
            "trainer.plots=false",
        ]
    )
    report = json.loads((tmp_path / "test_metrics.json").read_text())
    assert report["global_step"] == 1 and report["source_format"] == "pcd" and report["num_samples"] == 908
    assert report["num_scored"] == 2 and report["subset"] == {  # limit_test_batches=1: 2 shapes of 2 classes
        "size": 2,
        "of": 908,
        "stratified": True,
        "limit": "trainer.limit_test_batches=1",
    }
    cfg = T.load_yaml(tmp_path / "config.yaml")
    assert cfg["model"]["in_channels"] == 3 and cfg["model"]["num_classes"] == 10


def test_ddp_two_cpu_processes(tmp_path):
    # the script imports the gridify of this source tree (not another installed copy)
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.pop("LOCAL_RANK", None)
    cmd = [
        sys.executable,
        str(SCRIPTS / "train.py"),
        *tiny(tmp_path, "data.batch_size=2", "trainer.max_epochs=1", "trainer.plots=false"),
        "--accelerator",
        "cpu",
        "--devices",
        "2",
        "--strategy",
        "ddp",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Starting with 2 processes" in proc.stdout + proc.stderr
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, weights_only=True)["global_step"] == 2  # 8 samples / 2 ranks / batch 2
    report = json.loads((tmp_path / "test_metrics.json").read_text())
    res = E.main(["--ckpt", report["checkpoint"], "--threads", "1", "--no-progress"])
    assert res["metrics"]["oa"] == pytest.approx(report["metrics"]["oa"], abs=1e-9)
    assert report["num_scored"] == res["num_scored"] == 8  # every test shape exactly once over 2 ranks


@pytest.mark.slow  # about 8 s; test_ddp_two_cpu_processes stays in the default suite
def test_ddp_spawn_two_cpu_processes(tmp_path, capfd):
    """ddp_spawn from Python (no script to re-run): the whole run happens in two spawned DDP ranks."""
    args = ["data.batch_size=2", "trainer.max_epochs=1", "trainer.plots=false", "--accelerator", "cpu"]
    args += ["--devices", "2", "--strategy", "ddp_spawn"]
    for attempt in range(3):  # a rank may abort in gloo's teardown ("terminate called without an active
        try:  # exception"): seen once in ~10 CI runs, twice in a row once; the run itself is not at fault
            summary = T.main(tiny(tmp_path, *args))
            break
        except torch.multiprocessing.ProcessExitedException:
            if attempt == 2:
                raise
            tmp_path = tmp_path / "again"
            tmp_path.mkdir()
            capfd.readouterr()
    assert "Starting with 2 processes" in "".join(capfd.readouterr())
    report = json.loads((tmp_path / "test_metrics.json").read_text())
    assert summary["metrics"] == report["metrics"] and summary["config"]["trainer"]["strategy"] == "ddp_spawn"
    assert report["global_step"] == 2 and report["epoch"] == 1  # 8 samples / 2 ranks / batch 2
    assert report["num_samples"] == report["num_scored"] == 8 and sum(map(sum, report["confusion_matrix"])) == 8
    assert T.load_yaml(tmp_path / "config.yaml")["trainer"]["strategy"] == "ddp_spawn"
    # one log folder for the two ranks, and rank 0's record of every step
    assert sorted(p.name for p in (tmp_path / "csv").iterdir()) == ["train_steps.csv", "version_0"]
    res = E.main(["--ckpt", str(tmp_path / "checkpoints" / "model.pt"), "--threads", "1", "--no-progress"])
    assert res["metrics"]["oa"] == pytest.approx(report["metrics"]["oa"], abs=1e-9)  # model.pt = the tested weights
    with pytest.raises(
        SystemExit, match=r"^train.py: config error: unknown key model.bogus for model gridified_classifier"
    ):
        T.main(
            tiny(tmp_path / "bad", "model.bogus=1", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp_spawn")
        )


# --------------------------------------------------------------------------------------
# your own folders, quick runs
# --------------------------------------------------------------------------------------
FOLDER_TINY = [
    "model.resolution=4",
    "model.k=4",
    "model.hidden_channels=8",
    "model.depth=1",
    "model.kernel_size=3",
    "data.num_points=48",
    "trainer.max_epochs=1",
    "trainer.num_threads=1",
    "trainer.plots=false",
]


def test_folder_classification_quick_run(tmp_path, capsys):
    """`gridify train --config folder_classification --data-root <folder of .ply>` with limited validation and test:
    each scores a seeded, class-stratified subset (every class), as the log and test_metrics.json say; without a
    terminal the progress is plain lines."""
    from gridify import cli
    from gridify.io import write_ply

    rng = np.random.default_rng(0)
    for c, cls in enumerate(("a_small", "b_mid", "c_large")):
        for split, n in (("train", 6), ("test", 4)):
            for i in range(n):
                write_ply(tmp_path / "data" / cls / split / f"{i}.ply", rng.normal(size=(60, 3)) * (1 + 2 * c))
    cli.main(
        [
            "train",
            "--config",
            "folder_classification",
            "--data-root",
            str(tmp_path / "data"),
            "--output-dir",
            str(tmp_path / "out"),
            *FOLDER_TINY,
            "data.batch_size=3",
            "data.val_fraction=0.34",
            "trainer.limit_val_batches=1",
            "trainer.limit_test_batches=1",
            "trainer.progress_bar=true",
            "trainer.log_every_n_steps=2",
        ]
    )
    report = json.loads((tmp_path / "out" / "test_metrics.json").read_text())
    assert report["subset"] == {"size": 3, "of": 12, "stratified": True, "limit": "trainer.limit_test_batches=1"}
    assert report["num_samples"] == 12 and report["num_scored"] == 3
    assert [sum(row) for row in report["confusion_matrix"]] == [1, 1, 1]  # not the first batch of a sorted split
    printed = capsys.readouterr().out
    assert "[train] val: a seeded, class-stratified subset of 3 of 6 samples (trainer.limit_val_batches=1)" in printed
    assert (
        "[train] test: a seeded, class-stratified subset of 3 of 12 samples (trainer.limit_test_batches=1)" in printed
    )
    assert "(3 of 12 samples, a seeded class-stratified subset: trainer.limit_test_batches=1," in printed
    assert "[train] epoch 1/1 step 2/4 | train_loss " in printed and "[train] epoch 1/1 done in " in printed
    assert T.load_yaml(tmp_path / "out" / "config.yaml")["data"]["root"] == str(tmp_path / "data")


def test_eval_subset_sizes_and_fallback():
    class Unknown:  # a dataset that cannot tell its classes: a seeded random subset
        def __len__(self):
            return 50

    ds = T.build_dataset(T.resolve_config("procedural", ["data.test={num_samples_per_class: 5}"]), "test")  # 12 x 5
    sub = T.eval_subset(ds, 2, batch_size=6, world_size=1, seed=0)
    assert sub["size"] == 12 and sub["stratified"] and sorted(ds.sample_groups()[sub["indices"]]) == list(range(12))
    assert T.eval_subset(ds, 0.5, 6, 1, 0)["size"] == 30 and T.eval_subset(ds, 3, 6, 2, 0)["size"] == 36
    assert T.eval_subset(ds, None, 6, 1, 0) is None and T.eval_subset(ds, 10, 6, 1, 0) is None
    assert T.eval_subset(ds, 1.0, 6, 1, 0) is None and T.eval_subset(ds, 0, 6, 1, 0) is None
    rand = T.eval_subset(Unknown(), 1, 5, 1, seed=3)
    assert not rand["stratified"] and rand["indices"] != list(range(5)) and rand == T.eval_subset(Unknown(), 1, 5, 1, 3)


def test_folder_segmentation_run(tmp_path):
    from gridify import cli

    rng = np.random.default_rng(1)
    for split, n in (("train", 4), ("test", 2)):
        (tmp_path / "scans" / split).mkdir(parents=True)
        for i in range(n):
            pts = rng.normal(size=(70, 3))
            np.savetxt(tmp_path / "scans" / split / f"s{i}.xyz", np.c_[pts, (pts[:, 2] > 0).astype(int)], fmt="%.5f")
    (tmp_path / "scans" / "classes.txt").write_text("floor\nroof\n")
    cli.main(
        [
            "train",
            "--config",
            "folder_segmentation",
            "--data-root",
            str(tmp_path / "scans"),
            "--output-dir",
            str(tmp_path / "out"),
            *FOLDER_TINY,
            "model.point_channels=8",
            "data.batch_size=2",
            "trainer.progress_bar=false",
        ]
    )
    report = json.loads((tmp_path / "out" / "test_metrics.json").read_text())
    assert list(report["per_category_iou"]) == ["scans"] and report["num_scored"] == 2 and report["subset"] is None
    exported = torch.load(tmp_path / "out" / "checkpoints" / "model.pt", weights_only=True)
    assert exported["class_names"] == ["floor", "roof"] and exported["model_kwargs"]["num_categories"] == 1
    res = E.main(
        [
            "--ckpt",
            str(tmp_path / "out" / "checkpoints" / "model.pt"),
            "--threads",
            "1",
            "--no-progress",
            "--data-root",
            str(tmp_path / "scans"),
        ]
    )
    assert res["metrics"]["instance_miou"] == pytest.approx(report["metrics"]["instance_miou"], abs=1e-6)


def test_vote_logits_first_view_is_the_plain_forward_and_views_stay_in_the_box():
    from gridify.training.metrics import vote_logits

    seen = []

    class Spy(torch.nn.Module):
        def forward(self, pos, x, batch):
            seen.append(pos.clone())
            assert torch.equal(x[:, :3], pos)
            return torch.stack([pos[batch == b].sum(0) for b in range(int(batch.max()) + 1)])

    torch.manual_seed(0)
    pos = torch.rand(40, 3) * 2 - 1
    pos[0] = torch.tensor([1.0, 0.0, 0.0])
    batch = torch.arange(2).repeat_interleave(20)
    x = torch.cat([pos, torch.randn(40, 3)], 1)
    data = {"pos": pos, "x": x, "batch": batch}
    plain = vote_logits(Spy(), data, "classification", 1)
    assert torch.equal(plain, Spy()(pos, x, batch))
    seen.clear()
    out = vote_logits(Spy(), data, "classification", 4, seed=3)
    assert len(seen) == 4 and torch.equal(seen[0], pos)
    assert all(float(v.abs().max()) <= 1.0 + 1e-6 for v in seen)
    assert torch.allclose(out.exp().sum(-1), torch.ones(2))
    again = vote_logits(Spy(), data, "classification", 4, seed=3)
    assert torch.equal(out, again)


def test_label_smoothing_and_test_votes_are_validated():
    with pytest.raises(T.ConfigError, match=r"optim.label_smoothing must be a number in \[0, 1\), got 1.0"):
        T.resolve_config(None, ["optim.label_smoothing=1.0"])
    with pytest.raises(T.ConfigError, match="trainer.test_votes must be a positive integer"):
        T.resolve_config(None, ["trainer.test_votes=0"])
    cfg = T.resolve_config(
        None,
        [
            "optim.label_smoothing=0.1",
            "trainer.test_votes=3",
            "data.augmentations=[{name: point_dropout, max_ratio: 0.3}]",
        ],
    )
    assert cfg["optim"]["label_smoothing"] == 0.1 and cfg["trainer"]["test_votes"] == 3


def test_keep_all_keeps_one_checkpoint_per_epoch_beside_last_and_best(tmp_path):
    T.main(tiny(tmp_path, "trainer.checkpoint.keep_all=true", "trainer.plots=false"))
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.ckpt"))
    assert [n for n in names if n.startswith("epoch")] == ["epoch001-step0000002.ckpt", "epoch002-step0000004.ckpt"]
    assert "last.ckpt" in names and any(n.startswith("best-") for n in names)


def test_epochs_without_validation_still_write_their_checkpoints(tmp_path):
    """trainer.check_val_every_n_epoch=2: epoch 1 has no validation, and its last.ckpt / kept file are
    written anyway (Lightning's default waits for a validation: a crash lost those epochs)."""
    T.main(
        tiny(
            tmp_path,
            "trainer.check_val_every_n_epoch=2",
            "trainer.stop_after_epochs=1",
            "trainer.checkpoint.keep_all=true",
            "trainer.plots=false",
        )
    )
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.ckpt"))
    assert "last.ckpt" in names and "epoch001-step0000002.ckpt" in names, names
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2


def test_a_run_without_test_batches_ends_cleanly_with_its_model(tmp_path, capsys):
    """trainer.limit_test_batches=0 (a recipe without a test split, e.g. ModelNet40 carved from train): the run
    writes model.pt and says it was not tested, instead of failing on the empty metrics after training."""
    T.main(
        [
            "--config",
            "procedural",
            f"output_dir={tmp_path}",
            "data.num_samples_per_class=2",
            "data.val.num_samples_per_class=1",
            "data.test.num_samples_per_class=1",
            "data.num_points=64",
            "data.batch_size=4",
            "data.num_workers=0",
            "model.resolution=4",
            "model.k=4",
            "model.hidden_channels=8",
            "model.depth=1",
            "model.kernel_size=3",
            "trainer.max_epochs=1",
            "trainer.limit_test_batches=0",
            "trainer.num_threads=1",
            "trainer.progress_bar=false",
            "trainer.plots=false",
        ]
    )
    assert "not tested (trainer.limit_test_batches: 0)" in capsys.readouterr().out
    assert (tmp_path / "checkpoints" / "model.pt").is_file()
    assert json.loads((tmp_path / "test_metrics.json").read_text())["metrics"] == {}


def _lightning_log():
    """A handler recording what Lightning logs (its INFO lines go to its own handler, not to pytest's)."""
    import logging

    class Recorder(logging.Handler):
        def __init__(self):
            super().__init__(logging.INFO)
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    return logging.getLogger("lightning.pytorch"), Recorder()


def test_ctrl_c_writes_the_state_the_weights_and_the_plots_and_says_how_to_resume(tmp_path, monkeypatch):
    """A KeyboardInterrupt in the third step (mid-epoch 2): last.ckpt of the state reached, model.pt of the
    current weights, the plots of the steps taken, one message with --resume auto, and no weights_only note;
    the resumed run says nothing about the non-empty checkpoint folder it continues and ends where an
    uninterrupted one does, its per-step curves holding every step though the log holds none of them."""
    import signal
    import warnings

    from gridify import load
    from gridify.training.module import PointCloudTask
    from gridify.training.schedule import warmup_cosine

    real = PointCloudTask.training_step
    calls = {"n": 0}

    def step(self, batch, batch_idx):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, batch, batch_idx)

    monkeypatch.setattr(PointCloudTask, "training_step", step)
    before = signal.getsignal(signal.SIGINT)
    logger, recorder = _lightning_log()
    logger.addHandler(recorder)
    sparse = ["trainer.log_every_n_steps=50"]  # the CSV log holds no step's loss or rate
    try:
        with pytest.raises(
            SystemExit,
            match=r"interrupted at epoch 2, step 2 .*last.ckpt, .*model.pt and the plots in .*plots; continue "
            r"with the same command and --resume auto",
        ):
            T.main(tiny(tmp_path, *sparse))
        assert signal.getsignal(signal.SIGINT) is before  # Ctrl-C works again afterwards
        assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 2
        assert not [line for line in recorder.lines if "weights_only" in line], recorder.lines
        for png in ("loss.png", "metrics.png"):
            assert (tmp_path / "plots" / png).stat().st_size > 1000
        assert [r["step"] for r in T.read_steps(tmp_path / "csv" / "train_steps.csv")] == [0.0, 1.0]
        pts = np.random.default_rng(0).normal(size=(96, 3))
        model = load(tmp_path / "checkpoints" / "model.pt")
        assert model.predict(pts, pts / np.linalg.norm(pts, axis=1, keepdims=True)).dense is False
        monkeypatch.setattr(PointCloudTask, "training_step", real)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            T.main(tiny(tmp_path, *sparse, "--resume", "auto"))
    finally:
        logger.removeHandler(recorder)
    said = [str(w.message) for w in caught]
    assert not [m for m in said if "exists and is not empty" in m or "weights_only" in m], said
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
    steps = T.read_steps(tmp_path / "csv" / "train_steps.csv")
    assert [(r["step"], r["epoch"]) for r in steps] == [(0, 1), (1, 1), (2, 2), (3, 2)]
    # 2 steps an epoch, 2 epochs, 1 warm-up epoch: the rate each step used
    expected = [5e-3 * warmup_cosine(s, warmup=2, total=4, floor=0.0) for s in range(4)]
    assert [r["lr"] for r in steps] == pytest.approx(expected)
    rows = T.read_metric_logs(tmp_path / "csv")
    assert not [r for r in rows if "train_loss" in r or any(k.startswith("lr-") for k in r)]  # nothing per step
    fig = T.metrics_figure(rows, "classification", steps)
    assert list(fig.axes[1].lines[0].get_xdata()) == [0, 1, 2, 3]


def test_a_run_that_fails_after_some_steps_still_writes_its_plots(tmp_path, monkeypatch):
    from gridify.training.module import PointCloudTask

    real = PointCloudTask.training_step
    calls = {"n": 0}

    def step(self, batch, batch_idx):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("the disk vanished")
        return real(self, batch, batch_idx)

    monkeypatch.setattr(PointCloudTask, "training_step", step)
    with pytest.raises(RuntimeError, match="the disk vanished"):
        T.main(tiny(tmp_path))
    assert (tmp_path / "plots" / "loss.png").stat().st_size > 1000 and (tmp_path / "plots" / "metrics.png").is_file()
    assert [r["step"] for r in T.read_steps(tmp_path / "csv" / "train_steps.csv")] == [0.0, 1.0, 2.0]
    assert not (tmp_path / "test_metrics.json").exists()


def test_a_run_whose_test_measured_nothing_fails_and_keeps_its_weights(tmp_path, monkeypatch, capsys):
    """A test that scored no sample (every row dropped, every label ignored) reported 0.00 or NaN with exit status 0:
    the run fails naming why, writes no test_metrics.json, and keeps the trained weights in model.pt."""
    from gridify.tasks import ClassificationTask

    real = ClassificationTask.compute_metrics

    def scored_none(self, metrics, *args, **kwargs):
        values, extra = real(self, metrics, *args, **kwargs)
        return {k: float("nan") for k in values}, {**extra, "num_scored": 0}

    monkeypatch.setattr(ClassificationTask, "compute_metrics", scored_none)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        T.main(tiny(out, "trainer.max_epochs=1", "trainer.limit_val_batches=0"))
    assert exc.value.code not in (0, None)
    message = str(exc.value) + capsys.readouterr().err
    assert "no sample was scored" in message and "nothing was measured" in message
    assert not (out / "test_metrics.json").exists()
    assert (out / "checkpoints" / "model.pt").is_file()
