"""``gridify --help``, ``--version`` and argument errors answer without importing PyTorch (issue: a newcomer's
first hour; measured 8-13 s before, 0.1 s after), and the literals the parsers show equal the library's values."""

import subprocess
from pathlib import Path
import sys

import pytest

#: runs ``{run}`` (a command line or a script), then prints the heavy modules it imported
_PROBE = """
import runpy, sys
try:
    {run}
except SystemExit:
    pass
heavy = sorted(m for m in ("torch", "numpy", "lightning", "gridify.api", "gridify.training.config") if m in sys.modules)
print("HEAVY", heavy)
"""
PROBE = _PROBE.replace("{run}", "__import__('gridify.cli').cli.main({argv!r})")


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        [],
        ["predict", "--help"],
        ["predict", "x.ply", "--votes", "0"],
        ["show", "--help"],
        ["export", "--help"],
        ["convert", "--help"],
        ["download", "--help"],
        ["train", "--help"],
        ["train", "--confg", "x"],
        ["evaluate", "--help"],
        ["evaluate", "--ckpt", "m.pt", "--votes", "0"],
        ["predict", "x.ply", "--model", "modelnet10", "--up-axis", "w"],
        ["bench", "--help"],
        ["bench", "--threads", "0"],
        ["bench", "--recipe", "procedural", "--help"],
        ["bench", "--recipe", "procedural", "--steps", "0"],
        ["bench", "--scenes", "--help"],
        ["bench", "--scenes", "--repeats", "0"],
    ],
)
def test_help_version_and_argument_errors_import_no_torch(argv):
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, check=False)
    assert "HEAVY []" in out.stdout, (out.stdout[-500:], out.stderr[-500:])
    text = out.stdout + out.stderr
    assert "usage: gridify" in text or "gridify 0." in text


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["evaluate", "--model", "semantickitti"], "--model takes a shipped model to --scan files; give --scan PATH"),
        (["evaluate", "--ckpt", "m.pt", "--labels", "a.label"], "--labels goes with --scan"),
        (
            ["evaluate", "--model", "semantickitti", "--scan", "a.bin", "b.bin", "--labels", "a.label"],
            "--labels goes with a single --scan file",
        ),
    ],
)
def test_evaluate_flags_that_go_together_are_refused_before_torch_loads(argv, shown):
    probe = PROBE.replace(
        "except SystemExit:\n    pass", "except SystemExit as exc:\n    print(exc.code, file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", probe.format(argv=argv)], capture_output=True, text=True, check=False)
    assert "HEAVY []" in out.stdout, (out.stdout[-500:], out.stderr[-500:])
    assert f"gridify evaluate: error: {shown}" in out.stderr


SCRIPT_PROBE = _PROBE.replace("{run}", "sys.argv = {argv!r}; runpy.run_path(sys.argv[0], run_name='__main__')")


@pytest.mark.parametrize(
    "script, args, shown",
    [
        ("train.py", ["--help"], "usage: train.py"),
        ("train.py", ["--confg", "x"], "train.py: error: unrecognized arguments: --confg; did you mean --config?"),
        ("evaluate.py", ["--help"], "usage: evaluate.py"),
        ("evaluate.py", ["--ckpt", "m.pt", "--votes", "0"], "evaluate.py: error: argument --votes"),
        ("time_to_accuracy.py", ["--help"], "usage: time_to_accuracy.py"),
        ("ship_pretrained.py", ["--help"], "usage: ship_pretrained.py"),
        ("reconstruct.py", ["--help"], "usage: reconstruct.py"),
        ("reconstruct.py", ["--epochs", "0"], "reconstruct.py: error: argument --epochs: must be an integer >= 1"),
        ("bench_backbones.py", ["--help"], "usage: bench_backbones.py"),
        ("bench_graph_ties.py", ["--help"], "usage: bench_graph_ties.py"),
        ("bench_onnx_search.py", ["--help"], "usage: bench_onnx_search.py"),
        (
            "bench_onnx_search.py",
            ["--scan", "no_such.bin"],
            "bench_onnx_search.py: error: argument --scan: no_such.bin",
        ),
        ("bench_onnx_search.py", ["--model", "semantickiti"], "did you mean 'semantickitti'?"),
        ("prune_edge_widths.py", ["--help"], "usage: prune_edge_widths.py"),
        (
            "prune_edge_widths.py",
            ["--model", "semantickitti", "--out", "o.pt", "--width", "3"],
            "argument --width: must be an even",
        ),
        ("ship_pretrained.py", ["m.pt", "--name", ""], "ship_pretrained.py: error: argument --name"),
        ("time_to_accuracy.py", ["r", "--votes", "0"], "time_to_accuracy.py: error: argument --votes"),
        ("convert_scenes.py", ["--help"], "usage: gridify convert"),  # the command itself
        ("fuzz.py", ["--help"], "usage: fuzz.py"),
    ],
)
def test_the_scripts_help_and_argument_errors_import_no_torch(script, args, shown):
    """The documented scripts answer ``--help`` (and argument errors) as fast as the ``gridify`` command (about
    0.1 s; 5-12 s before, when they imported PyTorch first), under their own program name."""
    from pathlib import Path

    path = str(Path(__file__).resolve().parents[2] / "scripts" / script)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT_PROBE.format(argv=[path, *args])], capture_output=True, text=True, check=False
    )
    assert "HEAVY []" in out.stdout, (out.stdout[-500:], out.stderr[-500:])
    assert shown in out.stdout + out.stderr, (out.stdout[-800:], out.stderr[-800:])


def test_the_parsers_literals_equal_the_library_values():
    """The literals of ``gridify._clinames`` and the values it reads from the sources (``LAYOUTS``, the extension
    tuples: ``tests/cli/test_clinames_sources.py``) equal the registries' once the library is imported."""
    from gridify import _clinames as N
    from gridify.io.registry import formats, mesh_reader_extensions
    from gridify.registry import DATASETS, MODELS
    from gridify.training.schema import DATASET_ALIASES
    from gridify.vis import LAYERS

    assert N.MODEL_NAMES == tuple(MODELS.names()) and N.VIS_LAYERS == LAYERS
    assert N.DATASET_NAMES == tuple(sorted(set(DATASETS.names()) | set(DATASET_ALIASES)))
    assert N.COLUMN_EXTENSIONS == tuple(e for f in formats() if "columns" in f.options for e in f.extensions)
    assert N.SAMPLED_EXTENSIONS == tuple(e for f in formats() if "num_samples" in f.options for e in f.extensions)
    assert set(N.SAMPLED_EXTENSIONS) == set(mesh_reader_extensions())
    from gridify import _commands as C
    from gridify._pretrained import PRETRAINED
    from gridify.api import PRETRAINED as API_PRETRAINED
    from gridify.datasets.scene_layouts import LAYOUTS, S3DIS_TEST_AREA
    from gridify.export import EXPORT_FORMATS, INSTALL_HINT
    from gridify.io import supported_extensions
    from gridify.precision import PRECISIONS
    from gridify.training.config import SECTIONS
    from gridify.vis import DEFAULT_EDGE_NODES, DEFAULT_MAX_EDGES, GRID_NODES

    assert N.SUPPORTED_EXTENSIONS == tuple(supported_extensions())
    assert (N.EXPORT_FORMATS, N.EXPORT_HINT) == (tuple(EXPORT_FORMATS), INSTALL_HINT)
    assert (N.DEFAULT_EDGE_NODES, N.DEFAULT_MAX_EDGES, N.GRID_NODES) == (
        DEFAULT_EDGE_NODES,
        DEFAULT_MAX_EDGES,
        GRID_NODES,
    )
    assert N.LAYOUTS == tuple(LAYOUTS) and N.S3DIS_TEST_AREA == S3DIS_TEST_AREA
    from gridify.datasets.download import ARCHIVE_ALIASES, ARCHIVES

    assert N.ARCHIVE_NAMES == tuple(ARCHIVES) and N.ARCHIVE_ALIASES == tuple(ARCHIVE_ALIASES)
    assert C.CONFIG_SECTIONS == tuple(SECTIONS) and C.EVAL_PRECISIONS == tuple(PRECISIONS)
    assert PRETRAINED is API_PRETRAINED
    from gridify.bench import recipe, scenes, synthetic

    assert C.BENCH_MODELS == tuple(synthetic.DEFAULT_MODELS) == tuple(recipe.DEFAULT_MODELS)
    assert C.BENCH_DESCRIPTION == synthetic.__doc__.split("\n\n")[0]
    assert C.BENCH_RECIPE_DESCRIPTION == recipe.__doc__.split("\n\n")[0]
    assert C.BENCH_SCENES_DESCRIPTION == scenes.__doc__.split("\n\n")[0]
    assert (C.BENCH_SCENES_MODELS, C.BENCH_SCENES_NUM_POINTS, C.BENCH_SCENES_QUICK_NUM_POINTS) == (
        tuple(scenes.DEFAULT_MODELS),
        tuple(scenes.DEFAULT_NUM_POINTS),
        tuple(scenes.QUICK_NUM_POINTS),
    )


def test_import_gridify_is_lazy_and_the_registries_fill_on_first_read():
    probe = (
        "import sys, gridify; assert 'torch' not in sys.modules, 'torch imported by import gridify';"
        "from gridify.models import build_model;"  # no baselines import: the registry loads them when read
        "m = build_model('pointnet2_classifier', in_channels=3, num_classes=2);"
        "print(type(m).__name__, callable(gridify.load), gridify.gridify.__module__, 'pointnet2_segmenter' in gridify.MODELS)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert out.stdout.split() == ["PointNet2Classifier", "True", "gridify.api", "True"], out.stderr[-800:]


def test_gridify_list_names_every_shipped_config_model_and_dataset(capsys):
    from gridify.cli import main
    from gridify._pretrained import PRETRAINED
    from gridify.registry import DATASETS, MODELS
    from gridify.training.config import shipped_configs

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in [*shipped_configs(), *PRETRAINED, *MODELS.names(), *DATASETS.names()]:
        assert name in out
    assert "modelnet40_fast" in out and "semantickitti_mini" in out and "temporal/dynamic_shapes" in out
    assert main(["list", "models"]) == 0
    assert "configs" not in capsys.readouterr().out

    from gridify.training.schema import declared_keys

    assert main(["list", "keys"]) == 0  # every config key with its rule (the rows of docs/config_keys.md)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [k for k, _ in declared_keys()]
    assert any(line.startswith("optim.lr ") and "[default" in line for line in lines)
    assert not any(line.startswith("optim.lr ") for line in out.splitlines())  # not in the default listing


def test_warnings_of_a_command_are_one_line_without_source_lines():
    probe = (
        "import warnings, sys\n"
        "from gridify import cli\n"
        "cli._one_line_warnings('gridify predict')\n"
        "warnings.warn('a cloud has 2 points,\\n fewer than k=3')\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert out.stderr.strip() == "gridify predict: warning: a cloud has 2 points, fewer than k=3 (UserWarning)"


def test_an_unexpected_error_at_any_stage_ends_in_one_line(monkeypatch, capsys):
    from gridify import cli

    def boom(args):
        raise RuntimeError("shape '[-1, 3]' is invalid for input of size 1e300\nsecond line")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "cmd_list", boom)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["list"].set_defaults(func=boom)
    with pytest.raises(
        SystemExit,
        match=r"^gridify list: error: RuntimeError: shape .*; second line \(an unexpected "
        r"error: set GRIDIFY_TRACEBACK=1",
    ):
        cli.main(["list"])
    monkeypatch.setenv("GRIDIFY_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        cli.main(["list"])


def test_predicting_a_scene_imports_no_metrics_or_plotting():
    # gridify.metrics pulls torchmetrics, which imports scipy.signal and matplotlib (about 3 s on 2 cores): only
    # evaluation needs it, not predict
    code = (
        "import sys, numpy as np, gridify\n"
        "from gridify.io import PointCloud\n"
        "rng = np.random.default_rng(0)\n"
        "pts = (rng.random((2000, 3)) * [20, 20, 2]).astype(np.float32)\n"
        "cloud = PointCloud(points=pts, fields={'intensity': rng.random(2000).astype(np.float32)})\n"
        "assert gridify.load('semantickitti').predict(cloud).labels.shape == (2000,)\n"
        "print('LOADED', sorted(m for m in ('torchmetrics', 'matplotlib', 'lightning') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "LOADED []" in out.stdout, (out.stdout[-500:], out.stderr[-800:])


def test_listing_config_keys_imports_no_metrics_or_lightning():
    # the key listing reads the schema only; the training package's metric classes load on first access
    code = (
        "import sys, contextlib, io\n"
        "from gridify import cli\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    cli.main(['list', 'keys'])\n"
        "assert 'model.resolution' in buf.getvalue()\n"
        "print('LOADED', sorted(m for m in ('torchmetrics', 'scipy', 'matplotlib', 'lightning') if m in sys.modules))\n"
        "import gridify.training as t\n"
        "assert t.OverallAccuracy.__module__ == 'gridify.metrics'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "LOADED []" in out.stdout and out.returncode == 0, (out.stdout[-500:], out.stderr[-800:])


#: the probe above, printing the exit status and the message too (a command that ends with SystemExit("..."))
EXIT_PROBE = PROBE.replace(
    "except SystemExit:\n    pass", "except SystemExit as exc:\n    print('EXIT', exc.code, file=sys.stderr)"
)


@pytest.mark.parametrize(
    "argv, shown",
    [
        (
            ["train", "--config", "procedurl"],
            "gridify train: error: --config procedurl: no such file, and no "
            "shipped config of that name; did you mean procedural?",
        ),
        (["train", "--config", "nosuch_config_at_all"], "no shipped config of that name (gridify list configs"),
        (
            ["train", "--config", "procedural", "max_epochs"],
            "malformed override 'max_epochs': expected section.key=value",
        ),
        (["train", "--config", "procedural", "[--votes"], "malformed override '[--votes'"),
        (["train", "--config", "procedural", "model..k=3"], "the key 'model..k' must be dot-separated names"),
        (["train", "--max-epochs", "0"], "argument --max-epochs: must be an integer >= 1, got '0'"),
        (
            ["evaluate", "--ckpt", "no_such_dir/m.pt"],
            "gridify evaluate: error: --ckpt: checkpoint not found: no_such_dir/m.pt",
        ),
        (["evaluate", "--ckpt", "no_such_dir/m.pt", "[--votes", "8]"], "--ckpt: checkpoint not found"),
        (["bench", "--batch-size", "0"], "gridify bench: error: argument --batch-size: must be an integer >= 1"),
        (["bench", "--num-points", "4"], "argument --num-points: must be an integer >= 8, got '4'"),
        (["bench", "--time-budget", "-1"], "argument --time-budget: must be a finite number > 0"),
        (
            ["bench", "--recipe", "procedurall"],
            "gridify bench: error: --recipe procedurall: no such file, and no "
            "shipped config of that name; did you mean procedural?",
        ),
        (["bench", "--recipe", "procedural", "--override", "steps"], "malformed override 'steps'"),
        (
            ["predict", "no_such_cloud.ply", "--model", "modelnet10"],
            "gridify predict: error: no_such_cloud.ply: not found",
        ),
        (
            ["predict", "no_such_cloud.ply", "--ckpt", "gone.pt"],
            "gridify predict: error: --ckpt: checkpoint not found: gone.pt",
        ),
        (["show", "no_such_cloud.ply", "--out", "v.png"], "gridify show: error: no_such_cloud.ply: not found"),
        (["export", "gone.pt", "--out", "m.onnx"], "gridify export: error: checkpoint not found: gone.pt"),
        (["export", "modelnet11", "--out", "m.onnx"], "did you mean modelnet10?"),
        (["download", "modelnet11"], "gridify download: error: unknown archive 'modelnet11'; did you mean modelnet10?"),
        (["download", "nosuch"], "unknown archive 'nosuch'. Known: ModelNet40, ModelNet10"),
        (
            ["predict", "x.ply", "--model", "modelnet10", "--out", "labels.csv"],
            "labels.csv: unsupported extension '.csv'; use one of ['.txt', '.npy', '.ply', '.json']",
        ),
    ],
)
def test_missing_files_and_configs_and_malformed_overrides_are_named_before_torch_loads(argv, shown, tmp_path):
    """A misspelt config, a missing cloud or checkpoint and a malformed override answered in 0.2 s: they took
    10-20 s (PyTorch imported first) before the same line (issue: a newcomer's first hour); ``bench`` named its
    bad numbers as ``benchmark: ...`` after PyTorch had loaded, without ``gridify bench: error``."""
    out = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE.format(argv=argv)], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert "HEAVY []" in out.stdout, (out.stdout[-500:], out.stderr[-500:])
    assert shown in out.stderr, out.stderr[-800:]
    assert "Traceback" not in out.stderr


def test_list_configs_reads_the_files_alone_and_names_what_training_finds():
    """``gridify list configs`` took 20 s (it imported gridify.training, hence PyTorch) to print file headers."""
    from gridify import _commands
    from gridify.training import config

    assert _commands.CONFIG_DIR == config.CONFIG_DIR
    assert _commands.shipped_config_names() == config.shipped_configs()
    probe = _PROBE.replace("{run}", "__import__('gridify.cli').cli.main(['list', 'configs'])")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert "HEAVY []" in out.stdout and "procedural" in out.stdout, (out.stdout[-500:], out.stderr[-500:])
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("  ")]
    assert lines and all(len(ln) <= 118 for ln in lines)
    # descriptions are wrapped under themselves, never cut with "...": each config's first sentence, whole
    text = " ".join(ln.strip() for ln in out.stdout.splitlines())
    assert "with the thesis' ModelNet settings (table C.1) otherwise: R=9, k=9, C=128" in " ".join(text.split())
    assert not any(ln.rstrip().endswith(("...", "...)")) and "..." not in ln for ln in lines if "ply" not in ln)


def test_a_closed_stdout_ends_the_command_quietly():
    """``gridify list | head -1``: the reader went away; the command printed ``gridify list: error: Broken pipe
    (BrokenPipeError)`` on stderr."""
    import os

    read, write = os.pipe()
    os.close(read)  # the first write fails with EPIPE
    try:
        out = subprocess.run(
            [sys.executable, "-m", "gridify.cli", "list", "configs"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write)
    assert out.returncode == 1 and out.stderr == "", out.stderr[-500:]


CLINAMES = Path(__file__).resolve().parents[2] / "gridify" / "_clinames.py"


def _key_rows_block(rows) -> str:
    """The ``KEY_ROWS = (...)`` literal of ``gridify/_clinames.py`` for ``rows``, one row per line."""
    return "KEY_ROWS = (\n" + "".join(f"    {tuple(row)!r},\n" for row in rows) + ")\n"


def regenerate_key_rows() -> None:
    """Rewrite ``KEY_ROWS`` in ``gridify/_clinames.py`` from the schema (``python tests/cli/test_startup.py``)."""
    import re

    from gridify.training.schema import key_rows

    text = CLINAMES.read_text(encoding="utf-8")
    new = re.sub(r"KEY_ROWS = \(\n.*?^\)\n", lambda m: _key_rows_block(key_rows()), text, flags=re.S | re.M)
    CLINAMES.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    regenerate_key_rows()


def test_the_key_listing_equals_the_schema_s():
    """``gridify list keys`` prints the schema's rows from a snapshot (the schema imports PyTorch for the
    registries' names: 3 s); the snapshot must be the schema's, row for row, as ``print_keys`` prints them."""
    import contextlib
    import io

    from gridify import _clinames
    from gridify.cli import main
    from gridify.training.schema import key_rows, print_keys

    assert _clinames.KEY_ROWS == tuple(tuple(r) for r in key_rows()), (
        "gridify/_clinames.py KEY_ROWS is stale: regenerate it with python tests/cli/test_startup.py"
    )
    want, got = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(want):
        print_keys()
    with contextlib.redirect_stdout(got):
        assert main(["list", "keys"]) == 0
    assert got.getvalue() == want.getvalue()


@pytest.mark.parametrize("what", [[], ["all"], ["configs"], ["models"], ["datasets"], ["keys"]])
def test_every_form_of_list_answers_without_torch(what):
    """``gridify list`` took about 3 s (``--help`` 0.08 s): it imported the registries, hence PyTorch, to print
    names; every form reads the files and the parser's literals alone now (well under a second)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=["list", *what])], capture_output=True, text=True, check=False
    )
    assert "HEAVY []" in out.stdout, (out.stdout[-500:], out.stderr[-500:])
    assert out.returncode == 0 and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "env",
    [{"PYTHONIOENCODING": "ascii"}, {"PYTHONIOENCODING": "latin-1"}, {"LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"}],
)
def test_every_command_s_output_survives_a_terminal_that_is_not_utf8(env):
    """``gridify list keys`` to an ASCII-only terminal ended in the last-resort ``UnicodeEncodeError`` (the
    Lovász loss): what the output cannot encode is folded to ASCII."""
    import os

    out = subprocess.run(
        [sys.executable, "-m", "gridify.cli", "list", "keys"],
        capture_output=True,
        check=False,
        env={**os.environ, **env, "PYTHONCOERCECLOCALE": "0"},
    )
    assert out.returncode == 0, out.stderr[-500:]
    assert b"Lovasz-softmax" in out.stdout or "Lovász".encode("latin-1") in out.stdout
    assert b"UnicodeEncodeError" not in out.stderr


def test_an_ascii_stdout_gets_the_names_spelt_in_ascii(capsys, monkeypatch):
    import io

    from gridify.cli import main

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    monkeypatch.setattr(sys, "stdout", stream)
    assert main(["list", "keys"]) == 0
    stream.flush()
    text = raw.getvalue().decode("ascii")
    assert "Lovasz-softmax" in text
    assert stream.errors == "strict"  # the stream is left as it was
