"""Every script of ``scripts/`` under the command line's error contract, through one argument layer
(:mod:`gridify._cliargs`: its types, :func:`~gridify._cliargs.script_errors` around each ``main(argv)`` and
:func:`~gridify._cliargs.run_script` with the last resort under ``__main__``).

A table runs each script's ``main(argv)`` with bad output paths (a file where a folder goes, a folder where a
file goes, a path below a file, ``/proc``), corrupt or oddly shaped JSON / CSV / ``.npy`` inputs, misspelt model
names, a scan without the intensity its model takes, a pruning width between two of the model's widths, empty
names and runs given twice. Each must end with ONE line ``<script>: error: ...`` naming the flag or the file,
exit status 2 (an argument or input refused) and no traceback, before any work (the functions that do the work
fail the test when called) and with nothing written. A second table runs each script in a subprocess (the
``__main__`` path), and the layer itself is tested at the end.
"""

import errno
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from gridify import _cliargs, cli
from gridify._paths import PathError
from tests.helpers import ROOT

SCRIPTS = ROOT / "scripts"
KITTI = ROOT / "gridify" / "pretrained" / "semantickitti.pt"
P = "@T"  # replaced by the test's folder


def _script(name):
    spec = importlib.util.spec_from_file_location(f"script_{name[:-3]}", SCRIPTS / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def t(tmp_path):
    """Bad inputs of every kind, in one folder."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    # a run of gridify train with per-epoch checkpoints and logs, and broken copies of its files
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "epoch000-step0000010.ckpt").write_bytes(b"")
    (run / "run_info.json").write_text(json.dumps({"started": "2026-11-27 10:00:00"}))
    (run / "csv" / "version_0").mkdir(parents=True)
    (run / "csv" / "version_0" / "metrics.csv").write_text("epoch,step,val_oa,train_seconds\n0,3,0.5,60\n")
    for name, info, log in (
        ("corrupt_info", "{not json", None),
        ("list_info", "[1, 2]", None),
        ("bad_time", json.dumps({"started": "yesterday"}), None),
        ("bad_log", None, "epoch,step,val_oa,train_seconds\n0,3,high,60\n"),
        ("ragged_log", None, "epoch,step,val_oa,train_seconds\n0,3,0.5,60,7\n"),
        ("nan_time", None, "epoch,step,val_oa,train_seconds\n0,3,0.5,nan\n"),
    ):
        shutil.copytree(run, tmp_path / name)
        if info is not None:
            (tmp_path / name / "run_info.json").write_text(info)
        if log is not None:
            (tmp_path / name / "csv" / "version_0" / "metrics.csv").write_text(log)
    shutil.copytree(run, tmp_path / "ro_scores")
    (tmp_path / "ro_scores" / "time_to_accuracy").write_text("a file where the scores' folder goes")
    (tmp_path / "out_csv_dir" / "time_to_accuracy.csv").mkdir(parents=True)
    (tmp_path / "out_json_dir" / "results.json").mkdir(parents=True)
    # an exported model of a training run beside broken test metrics and logs (ship_pretrained.py)
    for name, metrics, log in (
        ("ship_corrupt", "{oops", None),
        ("ship_list", "[0.5]", None),
        ("ship_words", json.dumps({"metrics": {"test_oa": "high"}}), None),
        ("ship_samples", json.dumps({"metrics": {"test_oa": 0.5}, "num_samples": -3}), None),
        ("ship_log", None, "epoch,val_oa\n17,abc\n"),  # the shipped modelnet10 is best-epoch017
    ):
        (tmp_path / name / "checkpoints").mkdir(parents=True)
        shutil.copy(ROOT / "gridify" / "pretrained" / "modelnet10.pt", tmp_path / name / "checkpoints" / "model.pt")
        if metrics is not None:
            (tmp_path / name / "test_metrics.json").write_text(metrics)
        if log is not None:
            (tmp_path / name / "csv" / "version_0").mkdir(parents=True)
            (tmp_path / name / "csv" / "version_0" / "metrics.csv").write_text(log)
    # scans and clouds
    rng = np.random.default_rng(0)
    scan = np.concatenate([rng.random((5000, 3)) * [40, 40, 3], rng.random((5000, 1))], 1).astype(np.float32)
    scan.tofile(tmp_path / "scan.bin")
    scan[:100].tofile(tmp_path / "small.bin")
    (tmp_path / "bad.bin").write_bytes(b"12345")
    np.savetxt(tmp_path / "xyz.txt", scan[:, :3])  # no intensity
    for name, array in (
        ("flat", np.zeros((5, 2))),
        ("words", np.array([["a", "b", "c"]])),
        ("nan", np.full((4, 3), np.nan)),
    ):
        (tmp_path / f"npy_{name}").mkdir()
        np.save(tmp_path / f"npy_{name}" / "c.npy", array)
    (tmp_path / "npy_text").mkdir()
    (tmp_path / "npy_text" / "c.npy").write_text("1 2 3\n")
    return tmp_path


#: (script, argv, texts the error line names); every case exits with status 2
CASES = [
    # prune_edge_widths.py
    ("prune_edge_widths.py", ["--model", "semantickitti", "--out", P], ["--out", "is a folder"]),
    ("prune_edge_widths.py", ["--model", "semantickitti", "--out", f"{P}/afile/p.pt"], ["--out", "afile"]),
    ("prune_edge_widths.py", ["--model", "semantickitti", "--out", "/proc/p.pt"], ["--out", "/proc"]),
    ("prune_edge_widths.py", ["--model", "semantickiti", "--out", f"{P}/p.pt"], ["did you mean 'semantickitti'?"]),
    ("prune_edge_widths.py", ["--model", "", "--out", f"{P}/p.pt"], ["--model", "empty"]),
    ("prune_edge_widths.py", ["--model", f"{P}/adir", "--out", f"{P}/p.pt"], ["--model", "is a folder"]),
    ("prune_edge_widths.py", ["--model", "semantickitti", "--width", "7", "--out", f"{P}/p.pt"], ["--width", "even"]),
    (
        "prune_edge_widths.py",
        ["--model", "semantickitti", "--width", "40", "--out", f"{P}/p.pt"],
        ["--width 40", "allowed: even widths 2 to 32"],
    ),
    ("prune_edge_widths.py", ["--model", "modelnet10", "--out", f"{P}/p.pt"], ["modelnet10.pt", "scene segmenters"]),
    # ship_pretrained.py
    ("ship_pretrained.py", [f"{P}/ship_list/checkpoints/model.pt", "--name", ""], ["--name", "got ''"]),
    ("ship_pretrained.py", [f"{P}/ship_list/checkpoints/model.pt", "--name", " "], ["--name", "got ' '"]),
    ("ship_pretrained.py", [f"{P}/ship_list/checkpoints/model.pt", "--name", "../evil"], ["--name", "'../evil'"]),
    ("ship_pretrained.py", [f"{P}/ship_list/checkpoints/model.pt", "--name", "m.pt"], ["--name", "'m.pt'"]),
    ("ship_pretrained.py", [f"{P}/ship_list/checkpoints/model.pt", "--name", "m", "--out", P], ["--out", "folder"]),
    (
        "ship_pretrained.py",
        [f"{P}/ship_list/checkpoints/model.pt", "--name", "m", "--out", f"{P}/afile/m.pt"],
        ["--out", "afile"],
    ),
    (
        "ship_pretrained.py",
        [f"{P}/ship_corrupt/checkpoints/model.pt", "--name", "m", "--out", f"{P}/m.pt"],
        ["test_metrics.json", "not a JSON file", "--no-test-metrics"],
    ),
    (
        "ship_pretrained.py",
        [f"{P}/ship_list/checkpoints/model.pt", "--name", "m", "--out", f"{P}/m.pt"],
        ["test_metrics.json", "JSON object", "list"],
    ),
    (
        "ship_pretrained.py",
        [f"{P}/ship_words/checkpoints/model.pt", "--name", "m", "--out", f"{P}/m.pt"],
        ["test_metrics.json", "'metrics' must map metric names to finite numbers"],
    ),
    (
        "ship_pretrained.py",
        [f"{P}/ship_samples/checkpoints/model.pt", "--name", "m", "--out", f"{P}/m.pt"],
        ["test_metrics.json", "'num_samples'", "-3"],
    ),
    (
        "ship_pretrained.py",
        [f"{P}/ship_log/checkpoints/model.pt", "--name", "m", "--out", f"{P}/m.pt", "--no-test-metrics"],
        ["metrics.csv", "line 2", "val_oa", "'abc'"],
    ),
    ("ship_pretrained.py", [f"{P}/nothing.pt", "--name", "m", "--out", f"{P}/m.pt"], ["nothing.pt", "not found"]),
    # time_to_accuracy.py
    ("time_to_accuracy.py", [f"{P}/run", "--out", f"{P}/afile"], ["--out", "afile"]),
    ("time_to_accuracy.py", [f"{P}/run", "--out", f"{P}/afile/o"], ["--out", "afile"]),
    ("time_to_accuracy.py", [f"{P}/run", "--out", "/proc/tta"], ["--out", "/proc"]),
    ("time_to_accuracy.py", [f"{P}/run", "--out", f"{P}/out_csv_dir"], ["time_to_accuracy.csv", "is a folder"]),
    ("time_to_accuracy.py", [f"{P}/corrupt_info", "--out", f"{P}/o"], ["run_info.json", "not a JSON file"]),
    ("time_to_accuracy.py", [f"{P}/list_info", "--out", f"{P}/o"], ["run_info.json", "JSON object", "list"]),
    ("time_to_accuracy.py", [f"{P}/bad_time", "--out", f"{P}/o"], ["run_info.json", "'started'", "'yesterday'"]),
    (
        "time_to_accuracy.py",
        [f"{P}/bad_log", "--logged", "--out", f"{P}/o"],
        ["metrics.csv", "line 2, column val_oa", "'high' is not a number"],
    ),
    ("time_to_accuracy.py", [f"{P}/ragged_log", "--logged", "--out", f"{P}/o"], ["metrics.csv", "line 2"]),
    ("time_to_accuracy.py", [f"{P}/nan_time", "--logged", "--out", f"{P}/o"], ["train_seconds", "nan"]),
    ("time_to_accuracy.py", [f"{P}/run", f"{P}/run", "--out", f"{P}/o"], ["run", "given twice"]),
    ("time_to_accuracy.py", [f"{P}/run", f"{P}/adir/../run", "--out", f"{P}/o"], ["given twice"]),
    ("time_to_accuracy.py", [f"{P}/ro_scores", "--out", f"{P}/o"], ["ro_scores", "time_to_accuracy", "not a folder"]),
    ("time_to_accuracy.py", [f"{P}/run", "--votes", "0", "--out", f"{P}/o"], ["--votes"]),
    ("time_to_accuracy.py", [f"{P}/run", "--every", "-1", "--out", f"{P}/o"], ["--every"]),
    ("time_to_accuracy.py", [f"{P}/run", "--data-root", f"{P}/nope", "--out", f"{P}/o"], ["--data-root", "nope"]),
    # bench_onnx_search.py
    ("bench_onnx_search.py", ["--model", "semantickiti", "--scan", f"{P}/scan.bin"], ["did you mean 'semantickitti'?"]),
    ("bench_onnx_search.py", ["--model", "modelnet10", "--scan", f"{P}/scan.bin"], ["--model", "scene segmenters"]),
    ("bench_onnx_search.py", ["--scan", f"{P}/xyz.txt"], ["xyz.txt", "no intensity", "--columns x y z intensity"]),
    ("bench_onnx_search.py", ["--scan", f"{P}/small.bin"], ["--scan", "100 points", "4096"]),
    ("bench_onnx_search.py", ["--scan", f"{P}/bad.bin"], ["bad.bin", "16-byte rows"]),
    ("bench_onnx_search.py", ["--scan", f"{P}/nope.bin"], ["--scan", "nope.bin", "not found"]),
    ("bench_onnx_search.py", ["--scan", f"{P}/scan.bin", "--out", P], ["--out", "is a folder"]),
    ("bench_onnx_search.py", ["--scan", f"{P}/scan.bin", "--out", f"{P}/afile/r.json"], ["--out", "afile"]),
    ("bench_onnx_search.py", ["--scan", f"{P}/scan.bin", "--repeats", "0"], ["--repeats"]),
    # bench_backbones.py
    ("bench_backbones.py", ["--out", f"{P}/afile"], ["--out", "afile", "not a folder"]),
    ("bench_backbones.py", ["--out", f"{P}/out_json_dir"], ["results.json", "is a folder"]),
    ("bench_backbones.py", ["--kernel-size", "4", "--out", f"{P}/b"], ["ccnn", "kernel_size", "odd"]),
    ("bench_backbones.py", ["--threads", "0", "--out", f"{P}/b"], ["--threads"]),
    # bench_graph_ties.py
    ("bench_graph_ties.py", ["--data", f"{P}/nope", "--out", f"{P}/g"], ["--data", "no such folder"]),
    ("bench_graph_ties.py", ["--data", f"{P}/adir", "--out", f"{P}/g"], ["--data", "no .npy cloud"]),
    ("bench_graph_ties.py", ["--data", f"{P}/npy_flat", "--out", f"{P}/g"], ["c.npy", "[N, >= 3]", "(5, 2)"]),
    ("bench_graph_ties.py", ["--data", f"{P}/npy_words", "--out", f"{P}/g"], ["c.npy", "numbers"]),
    ("bench_graph_ties.py", ["--data", f"{P}/npy_nan", "--out", f"{P}/g"], ["c.npy", "NaN/Inf", "row 0"]),
    ("bench_graph_ties.py", ["--data", f"{P}/npy_text", "--out", f"{P}/g"], ["c.npy", "not a .npy file"]),
    ("bench_graph_ties.py", ["--backends", "fastest", "--out", f"{P}/g"], ["--backends", "fastest", "kdtree"]),
    ("bench_graph_ties.py", ["--out", f"{P}/afile"], ["--out", "afile"]),
    # bench_guard.py (revisions of this repository, or checkouts' folders; gridify bench arguments after --)
    ("bench_guard.py", ["no_such_revision_x", "HEAD"], ["A 'no_such_revision_x'", "neither a folder nor a revision"]),
    ("bench_guard.py", [str(ROOT), f"{P}/adir"], ["B", "adir", "not a gridify checkout"]),
    ("bench_guard.py", [f"{P}/afile", str(ROOT)], ["A", "afile", "a file, not a checkout"]),
    ("bench_guard.py", ["", str(ROOT)], ["A: empty"]),
    ("bench_guard.py", [str(ROOT), str(ROOT), "--rounds", "1"], ["--rounds", ">= 2"]),
    ("bench_guard.py", [str(ROOT), str(ROOT), "--out", f"{P}/afile"], ["--out", "afile"]),
    ("bench_guard.py", [str(ROOT), str(ROOT), "--", "--out", f"{P}/o"], ["after --: --out is not read"]),
    ("bench_guard.py", [str(ROOT), str(ROOT), "--", "--k", "4", "--plots"], ["--k, --plots are not read"]),
    ("bench_guard.py", [str(ROOT), str(ROOT), "--", "--models", "resnet50"], ["--models", "unknown model 'resnet50'"]),
    ("bench_guard.py", [str(ROOT), str(ROOT), "--", "--threads", "0"], ["--threads", "got '0'"]),
    # fuzz.py
    ("fuzz.py", ["--replay", ".ply", "%%%"], ["--replay", "not base64"]),
    ("fuzz.py", ["--replay", ".foo", "AAAA"], ["--replay", "'.foo'", ".ply"]),
    ("fuzz.py", ["--crash-dir", f"{P}/afile"], ["--crash-dir", "afile"]),
    ("fuzz.py", ["--seconds", "-1"], ["--seconds"]),
    ("fuzz.py", ["--format", ".foo", "--crash-dir", f"{P}/c"], [".foo"]),
    # reconstruct.py
    ("reconstruct.py", ["--out", f"{P}/afile"], ["--out", "afile"]),
    ("reconstruct.py", ["--out", "/proc/rec"], ["--out", "/proc"]),
    ("reconstruct.py", ["--resolutions", "1", "--out", f"{P}/r"], ["--resolutions"]),
    ("reconstruct.py", ["--lr", "inf", "--out", f"{P}/r"], ["--lr"]),
    # cross_validate.py
    (
        "cross_validate.py",
        ["--config", "c", "--data-root", f"{P}/nope", "--out", f"{P}/o", "--folds", "00", "01"],
        ["--data-root", "no such folder"],
    ),
    (
        "cross_validate.py",
        ["--config", "c", "--data-root", f"{P}/adir", "--out", f"{P}/afile", "--folds", "00", "01"],
        ["--out", "afile"],
    ),
    (
        "cross_validate.py",
        ["--config", "c", "--data-root", f"{P}/adir", "--out", f"{P}/o", "--folds", "00"],
        ["--folds"],
    ),
    (
        "cross_validate.py",
        ["--config", "c", "--data-root", f"{P}/adir", "--out", f"{P}/o", "--votes", "0", "--folds", "00", "01"],
        ["--votes"],
    ),
    (
        "cross_validate.py",
        ["--config", "c", "--data-root", f"{P}/adir", "--out", f"{P}/o", "--max-fragments", "x", "--folds", "00", "01"],
        ["--max-fragments"],
    ),
    (
        "cross_validate.py",
        ["--config", "c", "--data-root", f"{P}/adir", "--out", f"{P}/o", "--folds", "00", "01"],
        ["no sequences/<NN>/velodyne for 00, 01"],
    ),
]

#: what each script does once its arguments are good: called before a refusal, it fails the test
WORK = {
    "prune_edge_widths.py": ["prune_conv"],
    "ship_pretrained.py": ["atomic_write_bytes"],
    "time_to_accuracy.py": ["evaluate", "atomic_write_text", "atomic_write_bytes"],
    "bench_onnx_search.py": ["export", "time_repeats"],
    "bench_backbones.py": ["time_repeats"],
    "bench_graph_ties.py": ["time_graph"],
    "bench_guard.py": ["add_worktree", "run_schedule"],
    "fuzz.py": ["fuzz_one"],
    "reconstruct.py": ["run_one", "make_data"],
    "cross_validate.py": ["run", "atomic_write_text"],
}


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _refused(capsys, call, where, status=2):
    """Run ``call``; the one error line it printed, after checking the contract (``status`` None: any non-zero
    exit, the line printed or carried by the ``SystemExit`` as the ``gridify`` commands end)."""
    with pytest.raises(SystemExit) as exc:
        call()
    captured = capsys.readouterr()
    err = captured.err
    if status is None and isinstance(exc.value.code, str):
        err += exc.value.code + "\n"  # what Python prints when the command ends
    assert exc.value.code == status if status else exc.value.code not in (0, None), (where, exc.value.code, err)
    assert "Traceback" not in err + captured.out, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ": error: " in ln]
    assert len(errors) == 1 and lines[-1] == errors[0], err  # argparse's usage may come first
    assert str(exc.value) == errors[0]  # a caller of main(argv) reads the line from the SystemExit
    return errors[0]


@pytest.mark.parametrize("name, argv, named", CASES, ids=[f"{i}-{c[0][:-3]}" for i, c in enumerate(CASES)])
def test_every_script_refuses_bad_input_with_one_line_before_any_work(name, argv, named, t, capsys, monkeypatch):
    if name == "bench_onnx_search.py" and importlib.util.find_spec("onnxruntime") is None:
        pytest.skip("the ONNX export is not installed (it is refused first, naming the pip install line)")
    argv = [a.replace(P, str(t)) for a in argv]
    mod = _script(name)
    for fn in WORK[name]:
        monkeypatch.setattr(mod, fn, lambda *a, _fn=fn, **k: pytest.fail(f"{name}: {_fn} ran before the refusal"))
    before = _listing(t)
    line = _refused(capsys, lambda: mod.main(argv), name)
    assert line.startswith(f"{name}: error: "), line
    for text in named:
        assert text.replace(P, str(t)) in line, (text, line)
    assert _listing(t) == before  # nothing written, no folder made


#: the scripts that are ``gridify`` commands under the script's name (``gridify._cliargs`` via ``gridify.cli``)
COMMAND_CASES = [
    (
        "evaluate.py",
        "evaluate",
        ["--model", "semantickiti", "--scan", f"{P}/scan.bin"],
        ["semantickiti", "semantickitti"],
    ),
    ("train.py", "train", ["--config", "procedurl"], ["procedurl", "procedural"]),
]


@pytest.mark.parametrize("name, command, argv, named", COMMAND_CASES, ids=[c[0] for c in COMMAND_CASES])
def test_the_command_scripts_refuse_bad_input_with_one_line(name, command, argv, named, t, capsys):
    argv = [a.replace(P, str(t)) for a in argv]
    before = _listing(t)
    line = _refused(capsys, lambda: cli.script_main(command, name, argv), name, status=None)
    assert line.startswith(f"{name}: error: "), line
    for text in named:
        assert text in line, (text, line)
    assert _listing(t) == before


def test_every_script_is_in_a_table():
    """A new script of scripts/ joins the tables above (or is a shell script)."""
    tabled = {c[0] for c in CASES} | {c[0] for c in COMMAND_CASES} | {"convert_scenes.py"}  # test_errors.py
    assert {p.name for p in SCRIPTS.glob("*.py")} == tabled


#: one refusal per script through ``python scripts/<name>`` (the ``__main__`` path: ``run_script``)
SUBPROCESS_CASES = [
    ("prune_edge_widths.py", ["--model", "semantickitti", "--out", P], ["--out"]),
    ("ship_pretrained.py", [f"{P}/ship_list/checkpoints/model.pt", "--name", ""], ["--name"]),
    ("time_to_accuracy.py", [f"{P}/run", f"{P}/run", "--out", f"{P}/o"], ["given twice"]),
    ("bench_onnx_search.py", ["--model", "semantickiti"], ["did you mean"]),
    ("bench_backbones.py", ["--out", f"{P}/afile"], ["--out"]),
    ("bench_graph_ties.py", ["--clouds", "0", "--out", f"{P}/g"], ["--clouds"]),
    ("bench_guard.py", [f"{P}/adir", f"{P}/adir"], ["not a gridify checkout"]),
    ("fuzz.py", ["--crash-dir", f"{P}/afile"], ["--crash-dir"]),
    ("reconstruct.py", ["--out", f"{P}/afile"], ["--out"]),
]


@pytest.mark.parametrize("name, argv, named", SUBPROCESS_CASES, ids=[c[0] for c in SUBPROCESS_CASES])
def test_every_script_run_as_a_program_ends_in_one_line(name, argv, named, t):
    argv = [a.replace(P, str(t)) for a in argv]
    before = _listing(t)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop(_cliargs.TRACEBACK_ENV, None)
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / name), *argv], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{name}: error: ") and all(text in last for text in named), proc.stderr
    assert _listing(t) == before


def test_time_to_accuracy_keeps_two_runs_of_one_name_apart(tmp_path, monkeypatch):
    """Two runs called ``run`` in different folders are two curves (labelled by their paths), not one."""
    tta = _script("time_to_accuracy.py")
    monkeypatch.setattr(tta, "evaluate", lambda argv: pytest.fail("--logged must not evaluate"))
    runs = []
    for folder, score in (("a", 0.5), ("b", 0.7)):
        run = tmp_path / folder / "run"
        (run / "csv" / "version_0").mkdir(parents=True)
        (run / "run_info.json").write_text(json.dumps({"started": "2026-11-27 10:00:00"}))
        (run / "csv" / "version_0" / "metrics.csv").write_text(
            f"epoch,step,val_oa,train_seconds\n0,3,{score},60\n1,7,{score + 0.1},120\n"
        )
        runs.append(str(run))
    out = tmp_path / "out"
    tta.main([*runs, "--logged", "--target", "none", "--out", str(out)])
    points = json.loads((out / "time_to_accuracy.json").read_text())
    assert [(p["run"], p["epoch"], p["value"]) for p in points] == [
        ("a/run", 1, 0.5),
        ("a/run", 2, 0.6),
        ("b/run", 1, 0.7),
        ("b/run", 2, pytest.approx(0.8)),
    ]
    summary = json.loads((out / "time_to_accuracy_summary.json").read_text())
    assert {(s["run"], s["of"]) for s in summary} == {("a/run", "b/run"), ("b/run", "a/run")}
    assert "a/run" in (out / "time_to_accuracy.csv").read_text()
    # a run of another task logs other metrics: the table holds the union of the columns
    other = tmp_path / "c" / "run"
    shutil.copytree(tmp_path / "a" / "run", other)
    (other / "csv" / "version_0" / "metrics.csv").write_text(
        "epoch,step,val_oa,val_miou,train_seconds\n0,3,0.4,0.2,60\n"
    )
    tta.main([*runs, str(other), "--logged", "--metric", "oa", "--target", "none", "--out", str(out)])
    header = (out / "time_to_accuracy.csv").read_text().splitlines()[0].split(",")
    assert "val_miou" in header and "val_oa" in header


def test_ship_pretrained_shipped_name_is_checked_before_its_default_path(tmp_path, monkeypatch, capsys):
    """Without --out the file is gridify/pretrained/<name>.pt: that path is checked before anything is read."""
    ship = _script("ship_pretrained.py")
    monkeypatch.setattr(ship, "ROOT", tmp_path)
    (tmp_path / "gridify" / "pretrained" / "mine.pt").mkdir(parents=True)  # a folder where the file goes
    line = _refused(
        capsys, lambda: ship.main([str(ROOT / "gridify" / "pretrained" / "modelnet10.pt"), "--name", "mine"]), ""
    )
    assert "--out (default)" in line and "mine.pt" in line and "is a folder" in line


# -- the layer itself ------------------------------------------------------------------------------------------


def test_script_errors_end_with_one_line_and_the_status_of_the_cause(capsys):
    def failing(exc):
        @_cliargs.script_errors("x.py")
        def main(argv=None):
            raise exc

        return main

    cases = [
        (_cliargs.ScriptError("bad input\nsecond line"), 2, "x.py: error: bad input; second line"),
        (_cliargs.ScriptError("failed while working", status=1), 1, "x.py: error: failed while working"),
        (PathError("--out o: is a file, not a folder"), 2, "x.py: error: --out o: is a file, not a folder"),
        (OSError(errno.ENOSPC, "No space left on device", "/d/r.json"), 1, "x.py: error: /d/r.json: no space left"),
    ]
    for exc, status, line in cases:
        with pytest.raises(SystemExit) as info:
            failing(exc)()
        err = capsys.readouterr().err
        assert info.value.code == status and err.startswith(line) and len(err.strip().splitlines()) == 1, err
        assert str(info.value).startswith(line)
    with pytest.raises(KeyError):  # anything else passes on to run_script's last resort (or a test)
        failing(KeyError("k"))()


def test_run_script_ends_an_unexpected_error_in_one_line(monkeypatch):
    monkeypatch.delenv(_cliargs.TRACEBACK_ENV, raising=False)

    def main(argv=None):
        return {"a": 1}[argv[0]]

    with pytest.raises(SystemExit) as info:
        _cliargs.run_script(main, "x.py", ["b"])
    assert str(info.value.code).startswith("x.py: error: KeyError: 'b' (an unexpected error: set GRIDIFY_TRACEBACK=1")
    assert _cliargs.run_script(main, "x.py", ["a"]) == 1  # an int returned is the exit status
    assert _cliargs.run_script(lambda argv: {"results": 1}, "x.py", []) == 0
    monkeypatch.setenv(_cliargs.TRACEBACK_ENV, "1")
    with pytest.raises(KeyError):
        _cliargs.run_script(main, "x.py", ["b"])
    assert cli._last_resort is _cliargs.last_resort  # one last resort for the commands and the scripts


def test_model_and_folder_types(tmp_path):
    assert _cliargs.shipped_or_file("modelnet40") == "modelnet40"
    ckpt = tmp_path / "m.pt"
    torch.save({}, ckpt)
    assert _cliargs.shipped_or_file(str(ckpt)) == str(ckpt)
    for text, message in (
        ("ModelNet4", "did you mean 'modelnet40'?"),
        ("", "empty"),
        (str(tmp_path), "is a folder"),
        (str(tmp_path / "x.pt"), "checkpoint not found"),
    ):
        with pytest.raises(_cliargs.argparse.ArgumentTypeError, match=message):
            _cliargs.shipped_or_file(text)
    assert _cliargs.input_dir(str(tmp_path)) == str(tmp_path)
    with pytest.raises(_cliargs.argparse.ArgumentTypeError, match="is a file, not a folder"):
        _cliargs.input_dir(str(ckpt))
    (tmp_path / "o" / "r.json").mkdir(parents=True)
    with pytest.raises(_cliargs.argparse.ArgumentTypeError, match="r.json is a folder where a file is written"):
        _cliargs.output_dir_of(files=("r.json",))(str(tmp_path / "o"))
    assert not (tmp_path / "new").exists() and _cliargs.output_dir_of(files=("r.json",))(str(tmp_path / "new"))
