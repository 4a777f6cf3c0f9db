"""Tests of the gridify.training package itself: its layout, imports, names and the files it writes.

The end-to-end runs are in test_train.py.
"""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("yaml")

from gridify.training import report as R  # noqa: E402
from gridify.training.config import resolve_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
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
    record = R.RunRecord(cfg, info, "linear", {}, 6, run_info={"started": "now"})
    R.write_run_files(record)
    logs = tmp_path / "run" / "csv" / "version_0"
    logs.mkdir(parents=True)
    (logs / "metrics.csv").write_text("epoch,step,train_loss,val_loss,val_oa\n0,0,1.5,,\n0,1,1.2,1.3,0.5\n")
    results = {"metrics": {"loss": 0.5, "oa": 1.0, "macc": 1.0}, "num_scored": 2, "confusion_matrix": [[1, 0], [0, 1]]}
    report = R.test_report(record, results, num_samples=2, checkpoint=None, epoch=1, global_step=2, train_seconds=3.0)
    R.write_test_outputs(record, report, torch.nn.Linear(2, 2), 3.0)
    assert written == ["config.yaml", "run_info.json", "test_metrics.json", "model.pt", "run_info.json",
                       "loss.png", "metrics.png", "confusion_matrix.png"]
    out = tmp_path / "run"
    assert json.loads((out / "test_metrics.json").read_text())["checkpoint"] == "final weights"
    assert json.loads((out / "run_info.json").read_text())["test_metrics"] == results["metrics"]
    for name in ("config.yaml", "run_info.json", "test_metrics.json", "checkpoints/model.pt"):
        assert (out / name).stat().st_mode & 0o777 == _umask_mode(), name  # not mkstemp's 0600
    assert not list(out.rglob(".*.tmp"))


# --------------------------------------------------------------------------------------
# program names in usage lines and error messages
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv0, env, train, evaluate", [
    ("/venv/bin/gridify", "gridify train", "gridify train", "gridify train"),  # the console script names it
    ("/venv/bin/gridify", "gridify evaluate", "gridify evaluate", "gridify evaluate"),
    ("/repo/scripts/train.py", None, "train.py", "evaluate.py"),
    ("/repo/scripts/evaluate.py", None, "train.py", "evaluate.py"),
    ("/venv/lib/python3.11/site-packages/pytest/__main__.py", None, "train.py", "evaluate.py"),  # from Python
    ("", None, "train.py", "evaluate.py"),
])
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
    monkeypatch.setattr("gridify.training.main", lambda argv: seen.update(argv0=__import__("sys").argv[0],
                                                                                prog=__import__("os").environ.get("GRIDIFY_PROG")))
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

    cfg = resolve_config(None, ["data.num_points=32", "data.num_samples_per_class=1", "data.classes=[box, sphere]",
                                "model.resolution=4", "model.k=4", "model.hidden_channels=8", "model.depth=1",
                                "model.kernel_size=3"])
    train_set = T.build_dataset(cfg, "train")
    info = T.dataset_info(train_set, "classification")
    name, kwargs = T.fill_model_kwargs(cfg, info)
    task = T.PointCloudTask(model_name=name, model_kwargs=kwargs, task="classification", optim=cfg["optim"],
                            info=info, config=cfg, seed=0, steps_per_epoch=1)
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
    """gridify.training is the top layer: only gridify.evaluation builds on it (gridify.cli runs it by name)."""
    offenders = []
    for path in sorted((ROOT / "gridify").rglob("*.py")):
        rel = path.relative_to(ROOT / "gridify")
        if rel.parts[0] == "training" or rel.name == "evaluation.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [f"{'.' * node.level}{node.module or ''}"] + [a.name for a in node.names]
                     if isinstance(node, ast.ImportFrom) else [])
            if any("training" in n.split(".") for n in names):
                offenders.append(f"{rel}:{node.lineno}")
    assert not offenders


def test_importing_the_package_does_not_import_lightning():
    code = ("import sys\n"
            "import gridify.training as T, gridify.evaluation\n"
            "import gridify.training.config, gridify.training.data, gridify.training.metrics, gridify.training.plots\n"
            "import gridify.training.report, gridify.training.schedule, gridify.training.cli\n"
            "T.resolve_config(None, ['trainer.max_epochs=2']); T.ShardSampler(4, shuffle=True); T.main\n"
            "light = lambda: sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning'))\n"
            "assert not light(), light()\n"
            "assert T.PointCloudTask.__module__ == 'gridify.training.module' and 'lightning' in sys.modules\n"
            "print('ok')\n")
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
    monkeypatch.setattr("sys.argv", [str(PACKAGE / "__main__.py"), "--config", config, "--print-config",
                                      "trainer.max_epochs=3"])
    runpy.run_module("gridify.training", run_name="__main__")
    assert "max_epochs: 3" in capsys.readouterr().out
