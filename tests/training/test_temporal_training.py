"""The temporal (CfC) model trains through ``gridify train`` and the package's config system: the
``sequence_classification`` task, the ``dynamic_shapes`` dataset, the ``temporal/*`` configs, the
one-cycle schedule, BatchNorm recalibration, checkpoints, resume and the config errors."""

import csv
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("yaml")

from gridify import cli  # noqa: E402
from gridify.datasets import DynamicShapes  # noqa: E402
from gridify.tasks import get_task, task_of_dataset, task_names  # noqa: E402
from gridify.training import config as C  # noqa: E402
from gridify.training import schema as S  # noqa: E402
from gridify.training.schedule import OneCycle, one_cycle  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

#: a small sequence run: 2 classes x 4 sequences of 4 frames x 32 points, batch 4 (2 steps per epoch)
TINY = [
    "data.num_samples_per_class=4",
    "data.num_points=32",
    "data.num_frames=4",
    "data.min_frames=2",
    "data.classes=[rot_z_slow, sway_fast]",
    "data.batch_size=4",
    "data.val={num_samples_per_class: 2}",
    "data.test={num_samples_per_class: 2, sampling: irregular}",
    "model.resolution=3",
    "model.k=4",
    "model.hidden_channels=8",
    "model.depth=1",
    "model.rnn_hidden=8",
    "model.cfc_backbone_units=8",
    "model.readout_channels=2",
    "model.frame_features=16",
    "optim.lr=1e-2",
    "optim.warmup_epochs=1",
    "trainer.max_epochs=6",
    "trainer.num_threads=1",
    "trainer.progress_bar=false",
    "trainer.log_every_n_steps=1",
    "trainer.plots=false",
]


def _train(out, *extra):
    return cli.main(["train", "--config", "temporal/dynamic_shapes", "--output-dir", str(out), *TINY, *extra])


def _epoch_losses(out):
    rows = list(csv.DictReader(open(next(Path(out, "csv").glob("version_*/metrics.csv")))))
    return [float(r["train_loss_epoch"]) for r in rows if r.get("train_loss_epoch")]


# ------------------------------------------------------------------------------------------------
# the configs, the task and the dataset in the registries
# ------------------------------------------------------------------------------------------------
def test_temporal_configs_are_normal_configs_of_the_package():
    assert {"temporal/dynamic_shapes", "temporal/dynamic_shapes_gru"} <= set(C.shipped_configs())
    cfc, gru = C.resolve_config("temporal/dynamic_shapes"), C.resolve_config("temporal/dynamic_shapes_gru")
    assert cfc["task"] == "sequence_classification" and cfc["data"]["name"] == "dynamic_shapes"
    # the hyper-parameters of the former scripts/train_temporal.py defaults
    assert cfc["model"] == dict(
        name="temporal_cfc",
        rnn="cfc",
        resolution=5,
        k=6,
        hidden_channels=32,
        backbone="ccnn",
        depth=2,
        kernel_size=3,
        omega0=0.5,
        dropout=0.1,
        pool="mean",
        frame_readout="flatten",
        readout_channels=8,
        frame_features=64,
        frame_delta=True,
        rnn_hidden=64,
        cfc_mode="default",
        cfc_backbone_units=64,
        cfc_backbone_layers=1,
        time_scale=1.0,
        first_timespan=1.0,
    )
    assert {k: cfc["optim"][k] for k in ("lr", "weight_decay", "schedule", "warmup_epochs", "betas")} == dict(
        lr=3e-3, weight_decay=1e-4, schedule="one_cycle", warmup_epochs=3.75, betas=[0.9, 0.999]
    )
    tr = cfc["trainer"]
    assert (tr["max_epochs"], tr["gradient_clip_val"], tr["recalibrate_bn"], tr["num_threads"]) == (25, 1.0, True, 1)
    d = cfc["data"]
    assert (
        d["batch_size"],
        d["num_samples_per_class"],
        d["num_points"],
        d["num_frames"],
        d["sampling"],
        d["resample"],
    ) == (16, 150, 128, 8, "mixed", False)
    assert d["test"] == {"num_samples_per_class": 50, "sampling": "irregular"}
    assert gru["model"] == dict(cfc["model"], rnn="gru") and gru["optim"] == cfc["optim"] and gru["data"] == d
    assert gru["output_dir"] != cfc["output_dir"]


def test_print_config_shows_the_temporal_run(capsys):
    from gridify.training import cli as train_cli

    train_cli.main(["--config", "temporal/dynamic_shapes", "--print-config", "model.rnn=gru"])
    text = capsys.readouterr().out
    assert "task: sequence_classification" in text and "name: dynamic_shapes" in text
    assert "rnn: gru  # one of ['cfc', 'gru']" in text and "schedule: one_cycle" in text
    assert "sampling: mixed  # one of ['regular', 'irregular', 'mixed']" in text


def test_task_and_dataset_are_registered():
    assert "sequence_classification" in task_names()
    assert task_of_dataset("dynamic_shapes", DynamicShapes) == "sequence_classification"
    task = get_task("sequence_classification")
    assert task.primary_metric == "oa" and not task.exportable and not task.predictor
    for key in ("num_frames", "sampling", "jitter", "drop_prob", "min_frames", "noise", "resample", "frame_interval"):
        assert key in S.dataset_keys("dynamic_shapes") and key in S.DATASET_KEYS, key


def test_sequence_task_batches_forward_and_votes():
    from gridify.models import build_model

    ds = DynamicShapes(
        "train",
        num_samples_per_class=2,
        num_frames=4,
        num_points=32,
        sampling="irregular",
        classes=["rot_z_slow", "sway_fast"],
        min_frames=2,
    )
    task = get_task("sequence_classification")
    batch = task.collate([ds[i] for i in range(4)])
    assert batch["pos"].shape[:1] == (4,) and batch["mask"].shape == batch["times"].shape
    assert task.num_items(batch) == 4 and task.dataset_info(ds)["class_names"] == ["rot_z_slow", "sway_fast"]
    assert list(ds.sample_groups()) == [0, 1, 0, 1]
    torch.manual_seed(0)
    model = build_model(
        "temporal_cfc",
        in_channels=3,
        num_classes=2,
        resolution=3,
        k=4,
        hidden_channels=8,
        depth=1,
        rnn_hidden=8,
        cfc_backbone_units=8,
    ).eval()
    with torch.no_grad():
        logits = task.forward_batch(model, batch)
        assert logits.shape == (4, 2)
        torch.testing.assert_close(task.eval_logits(model, batch, votes=1), logits)
        voted = task.eval_logits(model, batch, votes=3, seed=1)
        assert voted.shape == (4, 2) and torch.isfinite(voted).all()
        torch.testing.assert_close(voted.exp().sum(-1), torch.ones(4))


# ------------------------------------------------------------------------------------------------
# the one-cycle schedule
# ------------------------------------------------------------------------------------------------
def test_one_cycle_is_torchs_onecycle_lr_with_its_momentum():
    p = torch.nn.Parameter(torch.zeros(2))
    ref_opt, opt = torch.optim.AdamW([p], lr=3e-3), torch.optim.AdamW([p], lr=3e-3)
    ref = torch.optim.lr_scheduler.OneCycleLR(ref_opt, max_lr=3e-3, total_steps=190, pct_start=0.15)
    ours = OneCycle(opt, warmup=0.15 * 190, total=190)
    for _ in range(190):
        a, b = ref_opt.param_groups[0], opt.param_groups[0]
        assert b["lr"] == pytest.approx(a["lr"], rel=1e-12) and b["betas"] == pytest.approx(a["betas"], rel=1e-12)
        ref_opt.step(), opt.step(), ref.step(), ours.step()
    assert "cycle" not in ours.state_dict()  # the config's schedule on resume, not the checkpoint's
    for _ in range(5):  # past the end: stays at the end (OneCycleLR raises)
        ours.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(3e-3 / 25e4)
    assert one_cycle(0, warmup=10, total=100) == pytest.approx((1 / 25, 0.95))


# ------------------------------------------------------------------------------------------------
# config errors: the same one-line errors as the other tasks
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "override, message",
    [
        ("model.rnn_hiden=8", "unknown key model.rnn_hiden for model temporal_cfc; its keys: "),
        ("data.num_frame=3", "unknown key data.num_frame for dataset dynamic_shapes; its keys: "),
        ("data.sampling=sometimes", "data.sampling must be one of ['regular', 'irregular', 'mixed'], got 'sometimes'"),
        ("data.jitter=0.5", "data.jitter must be a number in [0, 0.5), got 0.5"),
        ("model.rnn=lstm", "model.rnn must be one of ['cfc', 'gru'], got 'lstm'"),
        ("optim.schedule=linear", "optim.schedule must be one of ['warmup_cosine', 'one_cycle'], got 'linear'"),
        ("trainer.recalibrate_bn=1", "trainer.recalibrate_bn must be true or false, got 1"),
    ],
)
def test_a_bad_key_or_value_is_a_one_line_config_error(override, message):
    from gridify.training import cli as train_cli

    with pytest.raises(SystemExit) as exc:
        train_cli.main(["--config", "temporal/dynamic_shapes", "--print-config", override])  # never a run
    text = str(exc.value)
    assert "\n" not in text and "config error: " + message in text, text


def test_a_bad_key_in_a_temporal_config_file_is_the_error_of_any_task(tmp_path):
    from gridify.training import cli as train_cli

    messages = []
    for base, model in (("temporal/dynamic_shapes", "temporal_cfc"), ("procedural", "gridified_classifier")):
        path = tmp_path / f"{model}.yaml"
        path.write_text(f"_base_: {base}\nmodel:\n  rnn_hiden: 8\n")
        with pytest.raises(SystemExit) as exc:
            train_cli.main(["--config", str(path), "--print-config"])
        messages.append(str(exc.value))
        assert f"config error: unknown key model.rnn_hiden for model {model}; its keys: " in messages[-1]
    assert messages[0].split(" for model ")[0] == messages[1].split(" for model ")[0]


def test_augmentations_are_refused_for_sequences(tmp_path):
    with pytest.raises(SystemExit, match=r"data\.augmentations: the dataset dynamic_shapes takes no augmentations"):
        _train(tmp_path / "run", "data.augmentations=[rotate_z]")
    assert not (tmp_path / "run").exists()  # a run that failed before writing leaves nothing


# ------------------------------------------------------------------------------------------------
# end to end: gridify train, checkpoints, resume, evaluate
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("temporal_run")
    assert _train(out) == 0
    return out


def test_gridify_train_fits_the_temporal_model(trained):
    out = trained
    losses = _epoch_losses(out)
    assert len(losses) == 6 and losses[-1] < losses[0], losses
    for name in ("config.yaml", "run_info.json", "test_metrics.json", "checkpoints/last.ckpt", "checkpoints/model.pt"):
        assert (out / name).is_file(), name
    info = json.loads((out / "run_info.json").read_text())
    assert info["task"] == "sequence_classification" and info["model"] == "temporal_cfc"
    report = json.loads((out / "test_metrics.json").read_text())
    assert report["num_scored"] == 4 and 0.0 <= report["metrics"]["oa"] <= 1.0
    assert len(report["confusion_matrix"]) == 2

    import gridify
    from gridify.checkpoint import CheckpointError, build_model_from_checkpoint, load_checkpoint

    payload = load_checkpoint(out / "checkpoints" / "model.pt")
    assert payload["task"] == "sequence_classification" and payload["model_name"] == "temporal_cfc"
    model = build_model_from_checkpoint(payload)
    assert model.rnn_type == "cfc" and payload["class_names"] == ["rot_z_slow", "sway_fast"]
    with pytest.raises(CheckpointError, match="gridify.load serves the models of the tasks"):
        gridify.load(out / "checkpoints" / "model.pt")


def test_recalibrated_batchnorm_statistics_are_saved(trained):
    """trainer.recalibrate_bn: the tested (and exported) statistics are those of the final weights on the training
    split, re-estimated in order with dropout seeded from (seed, step)."""
    import numpy as np

    from gridify.checkpoint import build_model_from_checkpoint, load_checkpoint
    from gridify.nn import recalibrate_batchnorm
    from gridify.training.data import build_dataset

    payload = load_checkpoint(trained / "checkpoints" / "model.pt")
    model = build_model_from_checkpoint(payload)
    saved = {k: v.clone() for k, v in model.state_dict().items() if "running_" in k}
    assert saved
    last = torch.load(trained / "checkpoints" / "last.ckpt", weights_only=True)
    task, cfg = get_task("sequence_classification"), C.resolve_config(str(trained / "config.yaml"))
    ds = build_dataset(cfg, "train")
    batches = [task.collate([ds[i] for i in range(s, min(s + 4, len(ds)))]) for s in range(0, len(ds), 4)]
    s = np.random.SeedSequence([0, last["global_step"], 11]).generate_state(2)
    torch.manual_seed(int(s[0]) << 31 ^ int(s[1]))
    with torch.no_grad():
        recalibrate_batchnorm(model, batches, forward=task.forward_batch)
    for k, v in model.state_dict().items():
        if k in saved:  # (the statistics left by training alone, a momentum average over the steps, differ)
            torch.testing.assert_close(v, saved[k], rtol=1e-5, atol=1e-6, msg=k)
            torch.testing.assert_close(last["state_dict"][f"model.{k}"], saved[k], msg=k)  # last.ckpt: validated


def test_resume_continues_to_the_uninterrupted_result(trained, tmp_path):
    assert _train(tmp_path, "trainer.stop_after_epochs=3") == 0
    first = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert first["global_step"] == 6
    with pytest.raises(SystemExit, match="already holds a run"):
        _train(tmp_path)
    assert _train(tmp_path, "--resume", "auto") == 0
    a = torch.load(trained / "checkpoints" / "last.ckpt", weights_only=True)
    b = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert (a["global_step"], a["epoch"]) == (b["global_step"], b["epoch"]) == (12, 5)
    for k in a["state_dict"]:
        torch.testing.assert_close(a["state_dict"][k], b["state_dict"][k], rtol=1e-5, atol=1e-6, msg=k)
    ta = json.loads((trained / "test_metrics.json").read_text())["metrics"]
    tb = json.loads((tmp_path / "test_metrics.json").read_text())["metrics"]
    assert ta == pytest.approx(tb, rel=1e-5)


def test_a_resume_with_another_rnn_is_refused(trained, tmp_path):
    import shutil

    shutil.copytree(trained / "checkpoints", tmp_path / "checkpoints")
    with pytest.raises(SystemExit, match="is a checkpoint of another model"):
        _train(tmp_path, "model.rnn=gru", "--resume", "auto")


def test_gridify_evaluate_scores_other_observation_times(trained, tmp_path):
    ckpt = str(trained / "checkpoints" / "model.pt")
    for i, extra in enumerate(([], ["data.test.sampling=regular"], ["data.test.drop_prob=0.6"])):
        out = tmp_path / f"eval{i}.json"
        assert cli.main(["evaluate", "--ckpt", ckpt, "--output", str(out), "--no-progress", *extra]) == 0
        report = json.loads(out.read_text())
        assert report["task"] == "sequence_classification" and report["num_scored"] == 4
        if not extra:  # the test split of the run, scored again
            test = json.loads((trained / "test_metrics.json").read_text())["metrics"]
            assert report["metrics"] == pytest.approx(test, rel=1e-4, abs=1e-6)
