"""The command line's error contract, for every sub-command: a bad path, number or file ends the
command with a non-zero exit status and ONE short line (no traceback) naming the flag or the file.

A table runs ``train``, ``evaluate``, ``predict``, ``show``, ``export``, ``bench``, ``download`` and
``convert`` through bad output paths (a file where a folder goes, a folder where a file goes, a path below a
file), bad numbers (threads, workers, counts), unknown devices and names, and bad files to read
(a folder, a FIFO, an exported model or another architecture given to ``--resume``); the scene
subcommands with a scene model (predict / show / evaluate --scan / export of the shipped
``semantickitti``, convert) through bad scans, label files, layers, config values the run cannot use
and a second conversion with other classes; a second table runs the scripts of ``scripts/`` (in a
subprocess each). Every case fails before the command works (no training, rendering or measuring).
Also here: the shared mechanisms themselves (:mod:`gridify._paths`, :mod:`gridify._cliargs`), an
OS error while writing (``ulimit -f``) as one line, and the lock of a run's output folder.
"""

import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from gridify import _cliargs, _paths, cli
from gridify.api import pretrained_path
from gridify.datasets import convert_to_pointcept

pytest.importorskip("lightning")
pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--config",
    "procedural",
    "data.num_points=64",
    "data.num_samples_per_class=1",
    "data.val={num_samples_per_class: 1}",
    "data.test={num_samples_per_class: 1}",
    "data.batch_size=2",
    "model.resolution=3",
    "model.k=3",
    "model.hidden_channels=4",
    "model.depth=1",
    "model.kernel_size=3",
    "trainer.max_epochs=1",
    "trainer.num_threads=1",
    "trainer.progress_bar=false",
    "trainer.plots=false",
]


@pytest.fixture(scope="module")
def t(tmp_path_factory):
    """A folder with: afile (a regular file of junk), adir (a folder), fifo, cloud.npy, model.pt (the
    shipped model), other.ckpt (a Lightning checkpoint of another architecture than TINY's)."""
    d = tmp_path_factory.mktemp("contract")
    (d / "afile").write_bytes(b"not a checkpoint, not a folder")
    (d / "adir").mkdir()
    os.mkfifo(d / "fifo")
    np.save(d / "cloud.npy", np.random.default_rng(0).normal(size=(600, 3)).astype(np.float32))
    model_pt = Path(pretrained_path("modelnet10"))
    (d / "model.pt").write_bytes(model_pt.read_bytes())
    raw = torch.load(model_pt, map_location="cpu", weights_only=True)
    hp = {k: raw[k] for k in ("model_name", "model_kwargs", "task", "info", "config")}
    torch.save(
        {
            "state_dict": {f"model.{k}": v for k, v in raw["state_dict"].items()},
            "hyper_parameters": hp,
            "epoch": 0,
            "global_step": 1,
            "pytorch-lightning_version": "2.4.0",
        },
        d / "other.ckpt",
    )
    (d / "run_with_file").mkdir()
    (d / "run_with_file" / "checkpoints").write_text("a file where the run writes a folder")
    _scene_files(d)
    return d


def _scene_files(d: Path) -> None:
    """The scene layer's files: scan.bin (a KITTI scan of 600 points), bad.bin (7 bytes), short.label (10 labels),
    unlabelled.label (600 points, all unlabeled), two_columns.npy (600 x 2 labels),
    kitti.pt (the shipped scene model), raw/ (an S3DIS room) and pc/ (its conversion, the 13 S3DIS classes)."""
    rng = np.random.default_rng(0)
    np.concatenate([rng.uniform(-20, 20, (600, 3)), rng.uniform(0, 1, (600, 1))], 1).astype("<f4").tofile(
        d / "scan.bin"
    )
    (d / "bad.bin").write_bytes(b"\0" * 7)
    np.arange(10, dtype="<u4").tofile(d / "short.label")
    np.zeros(600, dtype="<u4").tofile(d / "unlabelled.label")  # SemanticKITTI 0 = unlabeled: every point ignored
    np.save(d / "two_columns.npy", np.zeros((600, 2), dtype=np.int64))
    (d / "kitti.pt").write_bytes(Path(pretrained_path("semantickitti")).read_bytes())
    ann = d / "raw" / "Area_1" / "office_1" / "Annotations"
    ann.mkdir(parents=True)
    for name in ("floor_1", "chair_1"):
        np.savetxt(ann / f"{name}.txt", np.hstack([rng.uniform(0, 3, (20, 3)), rng.integers(0, 256, (20, 3))]))
    convert_to_pointcept(d / "raw", "s3dis", d / "pc")


def run_cli(argv, capsys):
    """``(exit status, stderr)`` of ``gridify argv`` run in this process; any other exception fails the test."""
    try:
        status, message = cli.main(argv), ""
    except SystemExit as exc:
        status, message = (1, exc.code) if isinstance(exc.code, str) else (exc.code, "")
    captured = capsys.readouterr()
    return status, captured.err + message


P = "{t}"  # replaced by the fixture folder
CASES = [
    # --- output paths: a file where a folder goes, a folder where a file goes, below a file
    (["train", *TINY, f"output_dir={P}/afile"], ["afile", "is a file, not a folder"]),
    (["train", *TINY, f"output_dir={P}/afile/run"], ["afile/run", "below", "is a file"]),
    (["train", *TINY, "--output-dir", f"{P}/afile"], ["--output-dir", "afile"]),
    (["train", *TINY, f"output_dir={P}/run_with_file"], ["checkpoints", "is a file where a folder is written"]),
    (["evaluate", "--ckpt", f"{P}/model.pt", "--output", f"{P}/adir"], ["--output", "adir", "folder"]),
    (["evaluate", "--ckpt", f"{P}/model.pt", "--output", f"{P}/afile/m.json"], ["--output", "afile", "not a folder"]),
    (["predict", f"{P}/cloud.npy", "--model", "modelnet10", "--out", f"{P}/adir"], ["--out", "adir", "folder"]),
    (["predict", f"{P}/cloud.npy", "--model", "modelnet10", "--out", f"{P}/afile/x/l.txt"], ["--out", "below"]),
    (["predict", f"{P}/cloud.npy", "--model", "modelnet10", "--out", f"{P}/fifo"], ["--out", "FIFO"]),
    (
        ["predict", f"{P}/cloud.npy", "--model", "modelnet10", "--out", f"{P}/l.csv"],
        ["--out", "l.csv", "unsupported extension '.csv'", ".txt", ".npy", ".ply", ".json"],
    ),
    (["show", f"{P}/cloud.npy", "--out", f"{P}/afile/v.png"], ["--out", "afile", "not a folder"]),
    (["show", f"{P}/cloud.npy", "--out", f"{P}/v.txt"], ["--out", "v.txt", "unsupported extension '.txt'", ".png"]),
    (["show", f"{P}/cloud.npy", "--out", f"{P}/adir"], ["--out", "adir", "folder"]),
    (["export", f"{P}/model.pt", "--out", f"{P}/afile/m.onnx"], ["afile"]),
    (["bench", "--out", f"{P}/afile"], ["--out", "afile", "is a file"]),
    (["bench", "--out", f"{P}/afile/sub"], ["--out", "below"]),
    (["download", "modelnet10", "--root", f"{P}/afile"], ["--root", "afile", "is a file"]),
    (["download", "modelnet10", "--root", f"{P}/afile/data"], ["--root", "below"]),
    (["bench", "--out", f"{P}/{'x' * 5000}"], ["--out", "file name too long"]),
    # --- numbers and names handed to torch
    (["predict", f"{P}/cloud.npy", "--model", "modelnet10", "--threads", "0"], ["--threads", "'0'"]),
    (["predict", f"{P}/cloud.npy", "--model", "modelnet10", "--threads", "-1"], ["--threads", "'-1'"]),
    (["predict", f"{P}/cloud.npy", "--model", "modelnet10", "--device", "gpu7"], ["--device", "gpu7"]),
    (["predict", f"{P}/cloud.npy", "--model", "modelnet10", "--device", "cuda:99"], ["--device", "cuda:99"]),
    (["predict", f"{P}/cloud.npy", "--model", "modelnet10", "--votes", "0"], ["--votes"]),
    (["predict", f"{P}/cloud.npy", "--model", "modelnet10", "--num-samples", "-5"], ["--num-samples"]),
    (["show", f"{P}/cloud.npy", "--threads", "-1", "--out", f"{P}/v.png"], ["--threads"]),
    (["show", f"{P}/cloud.npy", "--width", "0", "--out", f"{P}/v.png"], ["--width"]),
    (["show", f"{P}/cloud.npy", "--device", "tpu", "--out", f"{P}/v.png"], ["--device", "tpu"]),
    (["evaluate", "--ckpt", f"{P}/model.pt", "--num-workers", "-2"], ["--num-workers", "'-2'"]),
    (["evaluate", "--ckpt", f"{P}/model.pt", "--threads", "0"], ["--threads"]),
    (["evaluate", "--ckpt", f"{P}/model.pt", "--device", "gpu7"], ["--device", "gpu7"]),
    (["evaluate", "--ckpt", f"{P}/model.pt", "--batch-size", "0"], ["--batch-size"]),
    (["evaluate", "--ckpt", f"{P}/model.pt", "--votes", "-3"], ["--votes"]),
    (["export", f"{P}/model.pt", "--out", f"{P}/m.onnx", "--threads", "-1"], ["--threads"]),
    (["export", f"{P}/model.pt", "--out", f"{P}/m.onnx", "--num-points", "0"], ["--num-points"]),
    (["bench", "--models", "bogusnet", "--out", f"{P}/bench"], ["--models", "bogusnet"]),
    (["bench", "--threads", "0", "--out", f"{P}/bench"], ["--threads"]),
    (["bench", "--device", "gpu7", "--out", f"{P}/bench"], ["--device", "gpu7"]),
    (["train", *TINY, "--max-epochs", "two"], ["--max-epochs"]),
    # --- files to read that are something else
    (["train", *TINY, "--resume", f"{P}/model.pt", f"output_dir={P}/r1"], ["--resume", "model.pt", "exported model"]),
    (["train", *TINY, "--resume", f"{P}/adir", f"output_dir={P}/r2"], ["--resume", "adir", "is a folder"]),
    (["train", *TINY, "--resume", f"{P}/fifo", f"output_dir={P}/r3"], ["--resume", "fifo", "FIFO"]),
    (["train", *TINY, "--resume", f"{P}/afile", f"output_dir={P}/r4"], ["afile", "not a PyTorch checkpoint"]),
    (
        ["train", *TINY, "--resume", f"{P}/other.ckpt", f"output_dir={P}/r5"],
        ["--resume", "other.ckpt", "another model", "shape"],
    ),
    (["evaluate", "--ckpt", f"{P}/adir"], ["--ckpt", "adir", "folder"]),
    (["evaluate", "--ckpt", f"{P}/fifo"], ["--ckpt", "fifo", "FIFO"]),
    (["evaluate", "--ckpt", f"{P}/afile"], ["afile"]),
    (["predict", f"{P}/cloud.npy", "--ckpt", f"{P}/fifo"], ["--ckpt", "fifo", "FIFO"]),
    (["predict", f"{P}/cloud.npy", "--ckpt", f"{P}/gone.pt"], ["--ckpt: checkpoint not found", "gone.pt"]),
    (["show", f"{P}/cloud.npy", "--ckpt", f"{P}/gone.pt", "--out", f"{P}/v.png"], ["--ckpt: checkpoint not found"]),
    (["export", "--ckpt", f"{P}/gone.pt", "--out", f"{P}/m.onnx"], ["--ckpt: checkpoint not found", "gone.pt"]),
    (["export", "--ckpt", f"{P}/adir", "--out", f"{P}/m.onnx"], ["--ckpt", "adir", "folder"]),
    (["evaluate", "--ckpt", f"{P}/gone.pt", "--scan", f"{P}/cloud.npy"], ["--ckpt: checkpoint not found"]),
    (["show", f"{P}/cloud.npy", "--ckpt", f"{P}/adir", "--out", f"{P}/v.png"], ["--ckpt", "adir", "folder"]),
    (["predict", f"{P}/adir", "--model", "modelnet10"], ["adir"]),
    (["show", f"{P}/fifo", "--out", f"{P}/v.png"], ["fifo"]),
    (["export", f"{P}/adir", "--out", f"{P}/m.onnx"], ["adir", "is a folder"]),
    (["export", f"{P}/fifo", "--out", f"{P}/m.onnx"], ["fifo", "FIFO"]),
    (["download", "--config", f"{P}/adir"], ["adir"]),
    (["download", "no_such_archive"], ["no_such_archive"]),
    # --- the scene subcommands: a scene model (the shipped semantickitti) on bad scans, labels, layers, configs
    (["predict", f"{P}/bad.bin", "--model", "semantickitti"], ["bad.bin", "7 bytes"]),
    (["predict", f"{P}/scan.bin", "--model", "semantickitti", "--category", "car"], ["--category", "scene"]),
    (["predict", f"{P}/cloud.npy", "--model", "semantickitti"], ["cloud.npy", "no intensity field"]),
    (["predict", f"{P}/scan.bin", "--model", "semantickitti", "--out", f"{P}/adir"], ["--out", "adir", "folder"]),
    (["predict", f"{P}/scan.bin", "--ckpt", f"{P}/kitti.pt", "--votes", "0"], ["--votes"]),
    (["show", f"{P}/scan.bin", "--model", "semantickitti", "--layers", "grid", "--out", f"{P}/v.png"], ["--layers"]),
    (["show", f"{P}/bad.bin", "--ckpt", f"{P}/kitti.pt", "--out", f"{P}/v.png"], ["bad.bin"]),
    (["evaluate", "--model", "semantickitti", "--scan", f"{P}/nope.bin"], ["--scan", "nope.bin", "no such file"]),
    (["evaluate", "--model", "semantickitti", "--scan", f"{P}/adir"], ["--scan", "no point-cloud files"]),
    (
        ["evaluate", "--model", "semantickitti", "--scan", f"{P}/scan.bin", "--labels", f"{P}/short.label"],
        ["short.label", "10 labels for a scan of 600 points"],
    ),
    (
        ["evaluate", "--ckpt", f"{P}/kitti.pt", "data.features=[height]"],
        ["config error", "data.features", "in_channels"],
    ),
    (["evaluate", "--ckpt", f"{P}/kitti.pt", "data.voxel_size=1e-300"], ["data.voxel_size", "1e-300"]),
    (["evaluate", "--ckpt", f"{P}/kitti.pt", "--voxel-size", "1e-300"], ["--voxel-size", "at least 1e-06"]),
    (["evaluate", "--ckpt", f"{P}/kitti.pt", "--scan", f"{P}/bad.bin"], ["bad.bin"]),
    (  # a scan format without named fields is read (not refused for fields=), then its labels are checked
        ["evaluate", "--model", "semantickitti", "--scan", f"{P}/cloud.npy", "--labels", f"{P}/short.label"],
        ["short.label", "10 labels for a scan of 600 points"],
    ),
    (
        ["evaluate", "--model", "semantickitti", "--scan", f"{P}/scan.bin", "--labels", f"{P}/unlabelled.label"],
        ["unlabelled.label", "every point is unlabelled", "nothing to score"],
    ),
    (
        ["evaluate", "--model", "semantickitti", "--scan", f"{P}/scan.bin", "--labels", f"{P}/two_columns.npy"],
        ["two_columns.npy", "one value per point", "(600, 2)"],
    ),
    (["export", "semantickitti", "--out", f"{P}/afile/k.onnx"], ["afile"]),
    (["export", f"{P}/kitti.pt", "--out", f"{P}/k.onnx", "--num-points", "-4"], ["--num-points"]),
    (["export", "semantickitti", "--out", f"{P}/model.txt"], ["model.txt", "must end in .onnx"]),
    (["predict", f"{P}/scan.bin", "--ckpt", f"{P}/kitti.pt", "--out", "/proc/l.ply"], ["--out", "/proc pseudo file"]),
    (
        ["evaluate", "--ckpt", f"{P}/kitti.pt", "--scan", f"{P}/scan.bin", "--output", "/proc/m.json"],
        ["--output", "/proc pseudo file"],
    ),
    (["convert", f"{P}/nope", "--layout", "s3dis", "--out", f"{P}/o"], ["nope", "does not exist"]),
    (["convert", f"{P}/raw", "--layout", "s3dis", "--out", f"{P}/afile"], ["--out", "afile", "is a file"]),
    (["convert", f"{P}/raw", "--layout", "s3dis", "--out", f"{P}/o", "--test-area", "9"], ["--test-area"]),
    (["convert", f"{P}/raw", "--layout", "s3dis", "--out", f"{P}/o", "--unknown", "sofa2"], ["--unknown", "sofa2"]),
    (["convert", f"{P}/raw", "--layout", "s3dis", "--out", f"{P}/pc", "--classes", "chair"], ["pc", "--overwrite"]),
    (["convert", f"{P}/raw", "--layout", "kitti", "--out", f"{P}/o"], ["--layout", "'kitti'"]),
    (["bench", "--recipe", "no_such_recipe", "--out", f"{P}/b"], ["--recipe", "no_such_recipe"]),
    (["train", "--config", "scene_procedural", "data.voxel_size=1e-300"], ["data.voxel_size"]),
    (["train", "--config", "temporal/dynamic_shapes", "model.time_scale=1e300"], ["model.time_scale"]),
]


@pytest.mark.parametrize("argv, named", CASES, ids=[f"{i}-{c[0][0]}" for i, c in enumerate(CASES)])
def test_every_subcommand_fails_with_one_line(argv, named, t, capsys):
    argv = [a.replace(P, str(t)) for a in argv]
    before = sorted(p.name for p in t.iterdir())
    status, err = run_cli(argv, capsys)
    assert status not in (0, None), err
    assert "Traceback" not in err and len(err) < 2000 + max(map(len, argv)), err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    error_lines = [ln for ln in lines if ": error: " in ln or ": config error: " in ln]
    assert len(error_lines) == 1 and lines[-1] == error_lines[0], err  # argparse's usage may come first
    assert error_lines[0].startswith(f"gridify {argv[0]}: "), err
    for text in named:
        assert text in error_lines[0], (text, err)
    assert sorted(p.name for p in t.iterdir()) == before  # nothing written, no empty run folder left


SCRIPT_CASES = [
    (["convert_scenes.py", f"{P}/raw", "--layout", "s3dis", "--out", f"{P}/pc", "--classes", "chair"], ["--overwrite"]),
    (["time_to_accuracy.py", f"{P}/adir", "--out", f"{P}/tta"], ["adir"]),
    (["evaluate.py", "--model", "semantickitti", "--scan", f"{P}/bad.bin"], ["bad.bin"]),
    (["train.py", "--config", "scene_procedural", "data.voxel_size=1e-300"], ["data.voxel_size"]),
]


@pytest.mark.parametrize("argv, named", SCRIPT_CASES, ids=[f"{i}-{c[0][0]}" for i, c in enumerate(SCRIPT_CASES)])
def test_every_script_fails_with_one_line(argv, named, t):
    """The scripts of scripts/ under the same contract: non-zero status, one line naming the file or key, no
    traceback, nothing written."""
    argv = [a.replace(P, str(t)) for a in argv]
    before = sorted(p.name for p in t.iterdir())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("GRIDIFY_TRACEBACK", None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    err = proc.stderr
    assert proc.returncode != 0 and "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and ": warning: " not in ln]
    assert len([ln for ln in lines if "error" in ln]) == 1 and "error" in lines[-1], err
    for text in named:
        assert text in lines[-1], (text, err)
    assert sorted(p.name for p in t.iterdir()) == before


def test_output_paths_are_checked_before_any_work(t, capsys, monkeypatch):
    """The output path fails before the model is loaded or the cloud read (a long job never starts)."""
    import gridify.api

    def never(*a, **k):
        raise AssertionError("the model was loaded before the output path was checked")

    monkeypatch.setattr(gridify.api, "load", never)
    for out in ("adir", "labels.csv"):  # a folder, an extension predict cannot write
        status, err = run_cli(["predict", str(t / "cloud.npy"), "--model", "modelnet10", "--out", str(t / out)], capsys)
        assert status == 2 and "--out" in err and out in err
    import gridify.evaluation as E

    monkeypatch.setattr(E, "load_checkpoint", never)
    status, err = run_cli(["evaluate", "--ckpt", str(t / "model.pt"), "--output", str(t / "afile" / "m.json")], capsys)
    assert status != 0 and "--output" in err


# ----------------------------------------------------------------------------- the shared mechanisms
def test_path_checks_name_the_path_and_the_cause(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "p")
    cases = [
        (lambda: _paths.check_output_dir(tmp_path / "f", "--out"), "--out .*/f: is a file, not a folder"),
        (lambda: _paths.check_output_dir(tmp_path / "f" / "a" / "b"), "lies below .*/f, which is a file"),
        (lambda: _paths.check_output_dir(tmp_path / "d", files=("x",), folders=("f",)), None),
        (lambda: _paths.check_output_file(tmp_path / "d", "--out"), "--out .*/d: is a folder"),
        (lambda: _paths.check_output_file(f"{tmp_path}/new/", "--out"), "is a folder"),
        (lambda: _paths.check_output_file(tmp_path / "p"), "is a FIFO"),
        (lambda: _paths.check_output_file(tmp_path / "f" / "x.txt"), "f is a file, not a folder"),
        (lambda: _paths.check_output_file(tmp_path / "x.csv", suffixes=(".txt",)), "unsupported extension '.csv'"),
        (lambda: _paths.check_input_file(tmp_path / "d", "--ckpt"), "--ckpt .*/d: is a folder, not a file"),
        (lambda: _paths.check_input_file(tmp_path / "p"), "is a FIFO"),
        (lambda: _paths.check_input_file(tmp_path / "nope"), "nope: not found"),
        (lambda: _paths.check_input_file(tmp_path / "f" / "x"), "not found .*/f is a file"),
        (lambda: _paths.check_input_file(""), "empty path"),
        (lambda: _paths.check_output_dir(tmp_path / "p", "output_dir"), "is a FIFO .*, not a folder"),
        (lambda: _paths.check_output_file(f"{tmp_path}/a\0b", "--out"), "--out: not a usable path"),
        (lambda: _paths.check_output_dir(5, "output_dir"), "output_dir: must be a path, got int"),
        (lambda: _paths.check_output_file(tmp_path / ("x" * 5000), "--out"), "file name too long"),
        (lambda: _paths.check_input_file(tmp_path / ("x" * 5000), "--ckpt"), "file name too long"),
    ]
    for call, message in cases:
        if message is None:
            call()
            continue
        with pytest.raises(_paths.PathError, match=message):
            call()
    assert not (tmp_path / "new").exists()  # checks only look
    # a folder that is not writable (simulated: the tests may run as root, who can write anywhere)
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode, **k: False if Path(p) == tmp_path / "d" else real_access(p, mode, **k)
    )
    with pytest.raises(_paths.PathError, match=r"d is not writable \(permission denied\)"):
        _paths.check_output_file(tmp_path / "d" / "out.png", "--out")
    with pytest.raises(_paths.PathError, match="cannot be created, .*d is not writable"):
        _paths.check_output_dir(tmp_path / "d" / "run" / "x", "output_dir")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder(tmp_path, capsys):  # pragma: no cover - CI runs unprivileged
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        status, err = run_cli(["bench", "--out", str(ro / "b")], capsys)
        assert status == 2 and "not writable" in err
    finally:
        ro.chmod(0o700)


def test_os_errors_become_one_line():
    import errno

    for err, cause in (
        (errno.EFBIG, "file too large"),
        (errno.ENOSPC, "no space left"),
        (errno.EACCES, "permission denied"),
        (errno.EROFS, "read-only"),
        (errno.ENOTDIR, "is a file, not a folder"),
        (errno.EISDIR, "is a folder"),
    ):
        line = _paths.describe_os_error(OSError(err, os.strerror(err), "/x/out.ply"))
        assert line.startswith("/x/out.ply: ") and cause in line and "\n" not in line
    with pytest.raises(SystemExit, match=r"^gridify predict: error: /x/y: file too large"):
        with _paths.one_line_errors("gridify predict"):
            raise OSError(errno.EFBIG, "File too large", "/x/y")


def test_a_folder_in_the_way_of_a_written_file_is_named(tmp_path):
    from gridify._files import atomic_write_text

    (tmp_path / "benchmark.json").mkdir()
    with pytest.raises(IsADirectoryError) as exc:
        atomic_write_text(tmp_path / "benchmark.json", "{}")
    assert _paths.describe_os_error(exc.value) == f"{tmp_path / 'benchmark.json'}: is a folder where a file is written"
    assert [p.name for p in tmp_path.iterdir()] == ["benchmark.json"]


def test_atomic_write_names_the_file_of_a_failed_write(tmp_path):
    from gridify._files import atomic_write

    def fail(fh):
        try:
            raise OSError(errno_efbig(), "File too large")  # what write() raises: no file name
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos")  # torch.save's wrapper

    with pytest.raises(OSError, match="File too large") as exc:
        atomic_write(tmp_path / "m.pt", fail)
    assert exc.value.filename == str(tmp_path / "m.pt") and list(tmp_path.iterdir()) == []
    if Path("/proc/self").is_dir():  # no temporary file can be made there: the target is named, not the temp
        with pytest.raises(OSError) as exc:
            atomic_write(Path("/proc/m.json"), lambda fh: fh.write(b"{}"))
        assert exc.value.filename == "/proc/m.json"


def errno_efbig():
    import errno

    return errno.EFBIG


def test_file_size_limit_while_writing_is_one_line(t, tmp_path):
    """A write that hits ``ulimit -f`` (RLIMIT_FSIZE) after the work: one line naming the file."""
    out = tmp_path / "labels.ply"

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))

    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "gridify.cli",
            "predict",
            str(t / "cloud.npy"),
            "--model",
            "modelnet10",
            "--threads",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"gridify predict: error: {out}: file too large: the file size limit (ulimit -f) was reached while writing"
    ], res.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []  # no partial file, no temporary left


def test_a_disk_that_fills_up_during_training_is_one_line(tmp_path, capsys, monkeypatch):
    """Lightning saving a checkpoint into a full disk ends ``gridify train`` with one line naming the file."""
    import errno

    import gridify.checkpoint

    def full(path, write):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(gridify.checkpoint, "atomic_write", full)  # what atomic_torch_save writes through
    status, err = run_cli(["train", *TINY, f"output_dir={tmp_path / 'run'}"], capsys)
    assert status == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"gridify train: error: {tmp_path / 'run' / 'checkpoints'}")
    assert err.strip().endswith(".ckpt: no space left on the device")


def test_argument_types():
    import argparse

    assert _cliargs.threads("4") == 4 and _cliargs.workers("0") == 0 and _cliargs.positive_int("+3") == 3
    assert _cliargs.device("cpu") == "cpu" and _cliargs.device_or_auto("AUTO") == "auto"
    for parse, text in (
        (_cliargs.threads, "0"),
        (_cliargs.threads, "-1"),
        (_cliargs.threads, "10**9"),
        (_cliargs.threads, "１"),
        (_cliargs.workers, "-2"),
        (_cliargs.positive_float, "nan"),
        (_cliargs.positive_float, "inf"),
        (_cliargs.device, "gpu7"),
        (_cliargs.device, "xpu"),
        (_cliargs.device, "meta"),
        (_cliargs.device_or_auto, ""),
    ):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
    if not torch.cuda.is_available():
        with pytest.raises(argparse.ArgumentTypeError, match="CUDA is not available"):
            _cliargs.device("cuda")
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="no CUDA device 99"):
            _cliargs.device("cuda:99")


@pytest.mark.parametrize(
    "argv",
    [
        ["list", "--no-such-flag"],
        ["predict", "x.ply", "--model", "modelnet40", "--no-such-flag"],
        ["show", "x.ply", "--no-such-flag"],
        ["show", "x.ply", "--hide", "car", "bogus"],  # one --hide value is a comma-separated list
        ["export", "--model", "modelnet40", "--out", "m.onnx", "--no-such-flag"],
        ["download", "modelnet10", "--no-such-flag"],
        ["convert", "in", "--layout", "s3dis", "--out", "o", "--no-such-flag"],
        ["train", "--config", "modelnet10_fast", "--no-such-flag"],
        ["evaluate", "--ckpt", "m.pt", "--no-such-flag"],
    ],
    ids=lambda a: a[0] if a[-1] != "bogus" else "show-hide",
)
def test_an_unknown_argument_is_named_by_its_subcommand(argv, capsys):
    """``gridify show x.ply --no-such-flag`` answers with show's usage and ``gridify show: error: ...``, not the
    top-level ``usage: gridify ... command`` (a newcomer sees which command's flags to read)."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"usage: gridify {argv[0]} " in err and "usage: gridify [-h]" not in err
    assert f"gridify {argv[0]}: error: unrecognized arguments: {argv[-1]}" in err


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["predit", "x.ply"], "did you mean predict?"),
        (["train", "--confg", "modelnet10_fast"], "unrecognized arguments: --confg; did you mean --config?"),
        (["predict", "x.ply", "--model", "modelnet4"], "did you mean modelnet40?"),
        (["convert", "in", "--layout", "s3di", "--out", "o"], "did you mean s3dis?"),
        (["show", "x.ply", "--heigth=3"], "unrecognized arguments: --heigth=3; did you mean --height?"),
    ],
)
def test_a_misspelt_command_flag_or_choice_names_the_closest_spelling(argv, hint, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2 and hint in capsys.readouterr().err
    assert _cliargs.did_you_mean("unrecognized arguments: --zzzz", ["--config"]) == "unrecognized arguments: --zzzz"


def test_a_bare_name_that_is_no_file_names_the_shipped_models(capsys):
    """``gridify.load("modelnet4")`` / ``--ckpt modelnet40``: a name, not a path, said with the shipped names."""
    import gridify
    from gridify.checkpoint import CheckpointError

    with pytest.raises(
        CheckpointError,
        match=r"modelnet4; it is not the name of a shipped model either \(modelnet10, "
        r"modelnet40, semantickitti\); did you mean 'modelnet40'\?",
    ):
        gridify.load("modelnet4")
    with pytest.raises(CheckpointError, match=r"checkpoint not found: runs/model\.pt$"):
        gridify.load("runs/model.pt")
    for argv, said in (
        (["predict", "x.ply", "--ckpt", "modelnet40"], "(a shipped model is given by name: --model modelnet40)"),
        (["predict", "x.ply", "--ckpt", "SemanticKITTI"], "did you mean --model semantickitti?"),
    ):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert said in str(exc.value) + capsys.readouterr().err


# ----------------------------------------------------------------------------- the run folder's lock
HOLDER = textwrap.dedent("""
    import sys, time
    from gridify._paths import folder_lock
    with folder_lock(sys.argv[1], "output_dir", owner="gridify train --config first"):
        print("locked", flush=True)
        time.sleep(120)
""")


def test_second_run_on_one_output_dir_fails_at_once_and_a_killed_run_leaves_no_lock(t, tmp_path, capsys):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        start = time.time()
        status, err = run_cli(["train", *TINY, f"output_dir={out}"], capsys)
        assert status == 1 and time.time() - start < 60
        assert f"output_dir {out}: in use by another run (pid {holder.pid}: gridify train --config first)" in err
        assert sorted(p.name for p in out.iterdir()) == [_paths.LOCK_NAME]  # the first run's folder is untouched
    finally:
        holder.kill()
        holder.wait()
    with _paths.folder_lock(out, "output_dir"):  # the kernel dropped the killed holder's lock
        with pytest.raises(_paths.FolderInUseError, match=f"pid {os.getpid()}"):
            with _paths.folder_lock(out, "output_dir"):
                pass


def test_evaluate_scan_drops_the_labels_of_dropped_rows_and_takes_a_pointcept_scene_folder(tmp_path, capsys):
    """A scan row with a NaN coordinate is dropped by the reader, and its label with it (the label file has one
    per row of the file); a Pointcept scene folder given to --scan is one scan (coord.npy, segment.npy beside)."""
    import json

    from tests.helpers import export_scene_model

    ckpt, _ = export_scene_model(tmp_path, features=("height",))
    rng = np.random.default_rng(0)
    rows = np.concatenate([rng.uniform(-5, 5, (300, 3)), rng.uniform(0, 1, (300, 1))], 1).astype("<f4")
    rows[5, 0] = np.nan
    (tmp_path / "seq" / "velodyne").mkdir(parents=True)
    (tmp_path / "seq" / "labels").mkdir()
    rows.tofile(tmp_path / "seq" / "velodyne" / "000000.bin")
    rng.integers(0, 3, 300).astype("<u4").tofile(tmp_path / "seq" / "labels" / "000000.label")
    out = tmp_path / "m.json"
    argv = ["evaluate", "--ckpt", str(ckpt), "--no-progress", "--output", str(out), "--scan"]
    with pytest.warns(UserWarning, match="dropped 1"):
        status, err = run_cli([*argv, str(tmp_path / "seq" / "velodyne")], capsys)
    assert status in (0, None), err
    assert sum(map(sum, json.loads(out.read_text())["confusion"])) == 299
    scene = tmp_path / "pc" / "train" / "s1"
    scene.mkdir(parents=True)
    np.save(scene / "coord.npy", rows[6:, :3])
    np.save(scene / "segment.npy", rng.integers(0, 3, 294))
    status, err = run_cli([*argv, str(scene)], capsys)
    assert status in (0, None), err
    report = json.loads(out.read_text())
    assert sum(map(sum, report["confusion"])) == 294


def test_train_on_a_scene_root_one_folder_too_high_names_the_data_root_to_give(tmp_path, capsys):
    """``--data-root semantickitti_mini`` for ``semantickitti_mini/dataset``: one line naming the folder to give."""
    from tests.datasets.test_scene_datasets import make_kitti

    make_kitti(tmp_path / "kitti" / "dataset", sequences=("00", "05"), frames=1)
    argv = ["train", "--config", "semantickitti_mini", "--data-root", str(tmp_path / "kitti"), "data.sequences=[0]"]
    status, err = run_cli([*argv, f"output_dir={tmp_path / 'out'}"], capsys)
    assert status == 1 and "Traceback" not in err and err.count("\n") <= 1, err
    assert f"its subfolder 'dataset' holds them: give --data-root={tmp_path / 'kitti' / 'dataset'}" in err, err
    assert not (tmp_path / "out" / "checkpoints").exists()
