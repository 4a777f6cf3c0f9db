"""Tests of the gridify.training package itself: its layout, imports, names and the files it writes.

The end-to-end runs are in tests/training/test_train.py.
"""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gridify.models import build_model

pytest.importorskip("yaml")

from gridify.training import report as R  # noqa: E402
from gridify.training.config import resolve_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gridify" / "training"


def _umask_mode():
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def test_run_files_are_written_atomically(tmp_path, monkeypatch):
    """config.yaml, run_info.json, test_metrics.json and the plots go through the atomic writer."""
    pytest.importorskip("matplotlib")
    import gridify._files

    written = []
    real_write = gridify._files.atomic_write

    def spy(path, write):
        written.append(Path(path).name)
        return real_write(path, write)

    monkeypatch.setattr(gridify._files, "atomic_write", spy)
    monkeypatch.setattr("gridify.checkpoint.atomic_write", spy)
    monkeypatch.setattr("gridify.training.plots.atomic_write", spy)
    cfg = resolve_config(None, [f"output_dir={tmp_path / 'run'}"])
    info = {"source_format": "procedural", "class_names": ["a", "b"]}
    kwargs = dict(in_channels=3, num_classes=2, resolution=3, k=2, hidden_channels=4, depth=1, kernel_size=3)
    model = build_model("gridified_classifier", **kwargs)
    record = R.RunRecord(cfg, info, "gridified_classifier", kwargs, model.num_parameters(), run_info={"started": "now"})
    R.write_run_files(record)
    logs = tmp_path / "run" / "csv" / "version_0"
    logs.mkdir(parents=True)
    (logs / "metrics.csv").write_text("epoch,step,train_loss,val_loss,val_oa\n0,0,1.5,,\n0,1,1.2,1.3,0.5\n")
    results = {"metrics": {"loss": 0.5, "oa": 1.0, "macc": 1.0}, "num_scored": 2, "confusion_matrix": [[1, 0], [0, 1]]}
    report = R.test_report(record, results, num_samples=2, checkpoint=None, epoch=1, global_step=2, train_seconds=3.0)
    R.write_test_outputs(record, report, model, 3.0)
    assert written == [
        "config.yaml",
        "run_info.json",
        "test_metrics.json",
        "model.pt",
        "run_info.json",
        "loss.png",
        "metrics.png",
        "confusion_matrix.png",
    ]
    out = tmp_path / "run"
    assert json.loads((out / "test_metrics.json").read_text())["checkpoint"] == "final weights"
    assert json.loads((out / "run_info.json").read_text())["test_metrics"] == results["metrics"]
    for name in ("config.yaml", "run_info.json", "test_metrics.json", "checkpoints/model.pt"):
        assert (out / name).stat().st_mode & 0o777 == _umask_mode(), name  # not mkstemp's 0600
    assert not list(out.rglob(".*.tmp"))


# --------------------------------------------------------------------------------------
# program names in usage lines and error messages
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv0, env, train, evaluate",
    [
        ("/venv/bin/gridify", "gridify train", "gridify train", "gridify train"),  # the console script names it
        ("/venv/bin/gridify", "gridify evaluate", "gridify evaluate", "gridify evaluate"),
        ("/repo/scripts/train.py", None, "train.py", "evaluate.py"),
        ("/repo/scripts/evaluate.py", None, "train.py", "evaluate.py"),
        ("/venv/lib/python3.11/site-packages/pytest/__main__.py", None, "train.py", "evaluate.py"),  # from Python
        ("", None, "train.py", "evaluate.py"),
    ],
)
def test_program_name(monkeypatch, argv0, env, train, evaluate):
    from gridify.training.cli import program_name

    monkeypatch.setattr("sys.argv", [argv0])
    if env is None:
        monkeypatch.delenv("GRIDIFY_PROG", raising=False)
    else:
        monkeypatch.setenv("GRIDIFY_PROG", env)
    assert (program_name("train.py"), program_name("evaluate.py")) == (train, evaluate)


def test_the_console_script_leaves_sys_argv_runnable(monkeypatch):
    """Launchers such as Lightning's DDP re-execute sys.argv: the CLI must not rewrite argv[0]."""
    from gridify import cli

    seen = {}
    monkeypatch.setattr("sys.argv", ["/venv/bin/gridify", "train", "--print-config"])
    monkeypatch.setattr(
        "gridify.training.main",
        lambda argv: seen.update(argv0=__import__("sys").argv[0], prog=__import__("os").environ.get("GRIDIFY_PROG")),
    )
    cli.main(["train", "--print-config"])
    assert seen == {"argv0": "/venv/bin/gridify", "prog": "gridify train"}


def test_errors_name_the_gridify_command(tmp_path, capsys):
    from gridify import cli

    with pytest.raises(SystemExit, match=r"^gridify train: config error: override 'modle.resolution=3': unknown"):
        cli.main(["train", "modle.resolution=3"])
    with pytest.raises(SystemExit, match=rf"^gridify evaluate: error: .*checkpoint not found: {tmp_path}"):
        cli.main(["evaluate", "--ckpt", str(tmp_path / "missing.pt")])
    with pytest.raises(SystemExit):
        cli.main(["train", "--bogus-flag"])
    assert "usage: gridify train" in capsys.readouterr().err


def test_errors_name_the_script_when_called_from_python(tmp_path):
    from gridify import evaluation as E
    from gridify import training as T

    with pytest.raises(SystemExit, match=r"^train.py: config error: override 'modle.resolution=3'"):
        T.main(["modle.resolution=3"])
    with pytest.raises(SystemExit, match=r"^evaluate.py: error: .*checkpoint not found"):
        E.main(["--ckpt", str(tmp_path / "missing.pt")])


# --------------------------------------------------------------------------------------
# the Lightning classes are defined at module level: they pickle (ddp_spawn, multiprocessing)
# --------------------------------------------------------------------------------------
def test_lightning_classes_pickle():
    pytest.importorskip("lightning")
    import pickle

    from gridify import training as T

    cfg = resolve_config(
        None,
        [
            "data.num_points=32",
            "data.num_samples_per_class=1",
            "data.classes=[box, sphere]",
            "model.resolution=4",
            "model.k=4",
            "model.hidden_channels=8",
            "model.depth=1",
            "model.kernel_size=3",
        ],
    )
    train_set = T.build_dataset(cfg, "train")
    info = T.dataset_info(train_set, "classification")
    name, kwargs = T.fill_model_kwargs(cfg, info)
    task = T.PointCloudTask(
        model_name=name,
        model_kwargs=kwargs,
        task="classification",
        optim=cfg["optim"],
        info=info,
        config=cfg,
        seed=0,
        steps_per_epoch=1,
    )
    back = pickle.loads(pickle.dumps(task))
    assert type(back) is T.PointCloudTask and back.hparams == task.hparams
    for key, value in task.state_dict().items():
        torch.testing.assert_close(back.state_dict()[key], value, msg=key)
    data = T.PointCloudData(cfg, train_set, train_set, T.EpochAugment([("rotate_z", {})], seed=0))
    for obj in (data, T.StopAfterEpochs(2), T.atomic_checkpoint_io()):
        assert type(pickle.loads(pickle.dumps(obj))) is type(obj)
    assert T.lightning_classes()[1:] == (T.PointCloudTask, T.PointCloudData, T.StopAfterEpochs)


# --------------------------------------------------------------------------------------
# layout and imports
# --------------------------------------------------------------------------------------
def test_no_function_longer_than_80_lines():
    long = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{path.name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long


def test_every_module_has_a_docstring():
    assert all(ast.get_docstring(ast.parse(p.read_text())) for p in PACKAGE.glob("*.py"))


def test_no_library_module_imports_the_training_package():
    """Only gridify.evaluation and gridify.bench.recipe (real training steps of a recipe) build on
    gridify.training; gridify.cli runs it by name and imports it only inside
    the commands that need it (download --list / --config read the shipped configs), never at import time."""
    offenders = []
    for path in sorted((ROOT / "gridify").rglob("*.py")):
        rel = path.relative_to(ROOT / "gridify")
        if rel.parts[0] == "training" or rel.as_posix() in ("evaluation.py", "bench/recipe.py"):
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body if rel.parts[0] == "cli" else ast.walk(tree):  # the cli package: at import time
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [f"{'.' * node.level}{node.module or ''}"] + [a.name for a in node.names]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any("training" in n.split(".") for n in names):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders


def test_importing_the_package_does_not_import_lightning():
    code = (
        "import sys\n"
        "import gridify.training as T, gridify.evaluation\n"
        "import gridify.training.config, gridify.training.data, gridify.training.metrics, gridify.training.plots\n"
        "import gridify.training.report, gridify.training.schedule, gridify.training.cli\n"
        "T.resolve_config(None, ['trainer.max_epochs=2']); T.ShardSampler(4, shuffle=True); T.main\n"
        "light = lambda: sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning'))\n"
        "assert not light(), light()\n"
        "assert T.PointCloudTask.__module__ == 'gridify.training.module' and 'lightning' in sys.modules\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


def test_the_former_module_names_are_still_there():
    pytest.importorskip("lightning")
    from gridify import training as T

    names = """ConfigError DEFAULTS SECTIONS TASKS DATASETS DATA_LOADER_KEYS CLOSED_SECTIONS PRIMARY_METRIC REPO_ROOT
        yaml_value load_yaml deep_merge parse_override apply_override check_config resolve_config AUGMENTATIONS
        parse_augmentations fit_box EpochAugment resolve_root dataset_kwargs build_dataset dataset_info
        fill_model_kwargs make_model ShardSampler EpochDataLoader set_train_epoch steps_per_epoch warmup_cosine
        forward_batch make_metrics update_metrics compute_metrics evaluate_model format_metrics read_metric_logs
        plot_curves plot_confusion lightning_classes atomic_checkpoint_io build_parser config_from_args main run
        CheckpointError atomic_torch_save export_model load_checkpoint plain DatasetNotFoundError DownloadError
        ModelNet ProceduralShapes ShapeNetPart collate_points MeanClassAccuracy OverallAccuracy ShapeNetPartIoU
        build_model FixedPoints RandomJitter RandomRotate RandomRotateZ RandomScale""".split()
    assert [n for n in names if not hasattr(T, n)] == []
    assert callable(T.run) and T.run.__module__ == "gridify.training.runner"  # the function, not a submodule
    assert set(T.__all__) <= set(dir(T))
    with pytest.raises(AttributeError, match="has no attribute 'full_precision_flexconvs'"):
        T.full_precision_flexconvs
    assert T.REPO_ROOT == ROOT and (T.REPO_ROOT / "configs" / "procedural.yaml").is_file()


def test_python_dash_m(monkeypatch, capsys):
    import runpy

    config = str(ROOT / "configs" / "procedural.yaml")
    monkeypatch.setattr(
        "sys.argv", [str(PACKAGE / "__main__.py"), "--config", config, "--print-config", "trainer.max_epochs=3"]
    )
    runpy.run_module("gridify.training", run_name="__main__")
    assert "max_epochs: 3" in capsys.readouterr().out


# --------------------------------------------------------------------------------------
# every error a user can fix ends the command with ONE line, never a traceback
# --------------------------------------------------------------------------------------
TINY_MODEL = [
    "model.resolution=4",
    "model.k=4",
    "model.hidden_channels=8",
    "model.depth=1",
    "model.kernel_size=3",
    "data.num_points=32",
    "data.batch_size=2",
    "trainer.max_epochs=1",
    "trainer.num_threads=1",
    "trainer.progress_bar=false",
    "trainer.plots=false",
]


@pytest.fixture
def broken(tmp_path):
    """Files for the error paths: a bad YAML, a corrupt checkpoint, an empty data root, broken folders."""
    from gridify.io import write_ply

    (tmp_path / "bad.yaml").write_text("model: [unclosed\n")
    (tmp_path / "corrupt.ckpt").write_bytes(b"\x80\x04not a checkpoint")
    (tmp_path / "empty").mkdir()
    rng = np.random.default_rng(0)
    for cls in ("a", "b"):
        for split in ("train", "test"):
            for i in range(3):
                write_ply(tmp_path / "folder" / cls / split / f"{i}.ply", rng.normal(size=(40, 3)))
    shutil.copytree(tmp_path / "folder", tmp_path / "unreadable")
    (tmp_path / "unreadable" / "b" / "train" / "2.ply").write_bytes(b"ply\nformat ascii 1.0\nelement vertex 5\n")
    shutil.copytree(tmp_path / "folder" / "a" / "train", tmp_path / "notest" / "a" / "x")
    shutil.copytree(tmp_path / "folder" / "b" / "train", tmp_path / "notest" / "a" / "y")
    shutil.copytree(tmp_path / "folder", tmp_path / "emptyclass")
    (tmp_path / "emptyclass" / "c" / "train").mkdir(parents=True)
    return tmp_path


ERROR_PATHS = [
    (  # answered before PyTorch loads (gridify._commands.check_config_name)
        ["train", "--config", "missing"],
        "gridify train: error: --config missing: no such file, and no shipped config of that name",
    ),
    (
        ["train", "--config", "{t}/bad.yaml"],
        "gridify train: config error: {t}/bad.yaml: not valid YAML (line 2, column 1: expected ',' or ']'",
    ),
    (
        ["train", "--config", "procedural", "data.name=kitti"],
        "gridify train: config error: data.name must be one of ['dynamic_shapes', 'folder', 'modelnet', 'modelnet10', 'modelnet40', ",
    ),
    (
        ["train", "--config", "procedural", "trainer.limit_val_batches=-1"],
        "gridify train: config error: trainer.limit_val_batches must be null, a number of batches",
    ),
    (
        ["train", "--config", "modelnet10", "--data-root", "{t}/empty"],
        "gridify train: error: ModelNet10 not found under {t}/empty: expected one of the releases normal_resampled, off, "
        "pcd (e.g. {t}/empty/ModelNet10 holding <class>/{{train,test}}/*.off, or {t}/empty/ModelNet10/pcd holding "
        "<class>/{{train,test}}/*.pcd) (get it with 'gridify download ModelNet10 --root {t}/empty' or point "
        "--data-root at it)",
    ),
    (
        ["train", "--config", "procedural", "--resume", "{t}/corrupt.ckpt"],
        "gridify train: error: cannot read checkpoint {t}/corrupt.ckpt: the file is corrupt",
    ),
    (
        ["train", "--config", "procedural", "--resume", "{t}/gone.ckpt"],
        "gridify train: error: --resume: checkpoint not found: {t}/gone.ckpt",
    ),
    (
        ["train", "--config", "procedural", "model.name=bogus"],
        "gridify train: config error: model.name: unknown model 'bogus'",
    ),
    (
        ["train", "--config", "folder_classification"],
        "gridify train: error: data.name=folder needs the folder: pass --data-root path/to/folder (or set data.root)",
    ),
    (
        ["train", "--config", "folder_classification", "--data-root", "{t}/emptyclass"],
        "gridify train: error: {t}/emptyclass/c: empty class folder: no point-cloud files of class 'c'",
    ),
    (
        ["train", "--config", "folder_classification", "--data-root", "{t}/unreadable"],  # read during the first epoch
        "gridify train: error: {t}/unreadable/b/train/2.ply: PLY header has no 'end_header' line (truncated or corrupt)",
        "[train] gridify",
    ),
    (
        ["train", "--config", "folder_classification", "--data-root", "{t}/notest/a"],  # before any training
        "gridify train: error: {t}/notest/a: no test files (add test folders or a test.txt list, or set test_fraction",
    ),
    (["evaluate", "--ckpt", "{t}/gone.pt"], "gridify evaluate: error: --ckpt: checkpoint not found: {t}/gone.pt"),
    (["evaluate", "--ckpt", "{t}/corrupt.ckpt"], "gridify evaluate: error: cannot read checkpoint {t}/corrupt.ckpt"),
    (
        ["download", "modelnet99"],
        "gridify download: error: unknown archive 'modelnet99'; did you mean modelnet40? Known: ModelNet40, ",
    ),
    (["download", "--config", "{t}/bad.yaml"], "gridify download: config error: {t}/bad.yaml: not valid YAML"),
]


@pytest.mark.parametrize(
    "argv, start, inside", [(*c, "")[:3] for c in ERROR_PATHS], ids=[" ".join(c[0][:4]) for c in ERROR_PATHS]
)
def test_every_error_path_is_one_line(broken, capfd, argv, start, inside):
    from gridify import cli

    argv = [a.format(t=broken) for a in argv]
    if argv[0] == "train":
        argv += ["--output-dir", str(broken / "out"), *TINY_MODEL]
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    msg, printed = str(exc.value), "".join(capfd.readouterr())
    assert "\n" not in msg and msg.startswith(start.format(t=broken)), msg
    # (Lightning's log handler may still hold the stream an earlier test captured: not the command's output)
    printed = re.sub(r"--- Logging error ---.*?Arguments: \(\)\n", "", printed, flags=re.S)
    assert inside in printed and "Traceback" not in printed, printed


def test_a_redirected_run_logs_lines_not_progress_bars(tmp_path):
    """Without a terminal: one line per N steps and per epoch, no carriage returns, a small log."""
    from gridify.io import write_ply

    rng = np.random.default_rng(0)
    for cls in ("a", "b", "c"):
        for split, n in (("train", 12), ("test", 3)):
            for i in range(n):
                write_ply(tmp_path / "data" / cls / split / f"{i}.ply", rng.normal(size=(40, 3)) * (1 + ord(cls) % 3))
    log = tmp_path / "train.log"
    argv = [
        sys.executable,
        "-m",
        "gridify.training",
        "--config",
        "folder_classification",
        "--data-root",
        str(tmp_path / "data"),
        "--output-dir",
        str(tmp_path / "out"),
        *TINY_MODEL,
        "trainer.max_epochs=2",
        "trainer.progress_bar=true",
        "trainer.log_every_n_steps=5",
        "data.batch_size=2",
    ]
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    with open(log, "w") as fh:
        proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=300)
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    lines = text.splitlines()
    steps = [ln for ln in lines if ln.startswith("[train] epoch") and " step " in ln]
    epochs = [ln for ln in lines if ln.startswith("[train] epoch") and " done in " in ln]
    # 33 training shapes (3 held out for val) in batches of 2: 17 steps, a line at the run's first step (at once),
    # then at 5, 10, 15 and 17
    assert [ln.split(" | ")[0] for ln in steps[:5]] == [f"[train] epoch 1/2 step {s}/17" for s in (1, 5, 10, 15, 17)]
    assert len(steps) == 9 and len(epochs) == 2 and "val_oa" in epochs[0] and "train_loss_epoch" in epochs[0]
    # before the first step: what is read, then the plan of the training
    said = [ln for ln in lines if ln.startswith("[train] ")]
    assert said[0].startswith("[train] reading the data: folder, the train and val splits from "), said
    assert "[train] training epochs 1-2, 17 steps each" in said, said
    assert "\r" not in text and "it/s" not in text and len(lines) < 30 and len(text) < 4500, text


def test_checkpoints_honour_the_umask(tmp_path):
    pytest.importorskip("lightning")
    from gridify.training import atomic_checkpoint_io

    old = os.umask(0o027)
    try:
        atomic_checkpoint_io().save_checkpoint({"state_dict": {"w": torch.zeros(2)}}, tmp_path / "last.ckpt")
    finally:
        os.umask(old)
    assert (tmp_path / "last.ckpt").stat().st_mode & 0o777 == 0o640
    assert atomic_checkpoint_io().load_checkpoint(tmp_path / "last.ckpt")["state_dict"]["w"].shape == (2,)


def test_error_line_reduces_a_data_loader_worker_error_to_its_message():
    from torch._utils import ExceptionWrapper

    from gridify.datasets import DatasetError
    from gridify.training import error_line

    try:
        raise DatasetError("/data/a.ply: truncated PLY")
    except DatasetError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(DatasetError) as exc:
        wrapped.reraise()
    assert "Original Traceback" in str(exc.value) and error_line(exc.value) == "/data/a.ply: truncated PLY"
    assert error_line(ValueError("first\n  second\n")) == "first; second"


def test_epoch_line_of_a_run_resumed_inside_an_epoch_times_the_resumed_part(capsys):
    """Lightning starts a run resumed mid-epoch without on_train_epoch_start: the epoch line times the
    part since the resume (it once printed the seconds since 1970) and says so."""
    pytest.importorskip("lightning")
    from types import SimpleNamespace

    from gridify.training.callbacks import LineProgress

    bar = LineProgress(every=5)
    trainer = SimpleNamespace(current_epoch=2, max_epochs=12, callback_metrics={})
    bar.on_train_start(trainer, None)
    bar.on_train_epoch_end(trainer, None)
    bar.on_train_epoch_start(trainer, None)
    bar.on_train_epoch_end(trainer, None)
    resumed, whole = capsys.readouterr().out.splitlines()
    assert resumed.startswith("[train] epoch 3/12 done in 0.") and resumed.endswith("s (since the resume)")
    assert whole.startswith("[train] epoch 3/12 done in 0.") and whole.endswith(" s")
