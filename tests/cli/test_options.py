"""Every argument of every sub-command is read by the route it is given on, or refused by name (issue: options
accepted and ignored: ``show --up-axis`` without a model, ``show --labels`` with a shape model, ``evaluate --scan``
with ``--voxel-size`` or overrides, ``download NAME --config``).

One table (:data:`gridify._commands.OPTION_USE`) says which route reads each argument; one check
(:func:`gridify._cliargs.check_options`) refuses the others. These tests walk every sub-command's parser against
the table, then run the instances that were ignored.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gridify import _cliargs, _commands, cli
from gridify._commands import OPTION_USE

#: the groups of the route facts the table may name (``group:fact``), and the plain facts
GROUPS = {"model", "pred", "file", "layers", "evaluate", "download", "layout", "train", "bench"}
LAYOUTS = {"s3dis", "mmdet3d_s3dis", "semantickitti"}


def _parsers():
    """``{command: parser}`` of every sub-command, the delegated ones by their light parsers."""
    top = cli.build_parser()
    out = {name: cli._command_parser(top, name) for name in OPTION_USE if name in ("predict", "show", "export")}
    out.update({name: cli._command_parser(top, name) for name in ("download", "convert", "list")})
    out["train"] = _commands.train_parser()
    out["evaluate"] = _commands.evaluate_parser()
    out["bench"] = _commands.bench_parser()
    out["bench --recipe"] = _commands.bench_recipe_parser()
    out["bench --scenes"] = _commands.bench_scenes_parser()
    return out


PARSERS = _parsers()


def _arguments(parser):
    return {
        a.dest: a
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._VersionAction)) and a.dest != argparse.SUPPRESS
    }


def test_the_table_names_every_argument_of_every_sub_command_and_nothing_else():
    """A new option without a row (a route that reads it) fails here: it would be accepted and maybe ignored."""
    top = cli.build_parser()
    commands = {c for a in top._actions if isinstance(a, argparse._SubParsersAction) for c in a.choices}
    assert commands | set(_commands.BENCH_MODES.values()) == set(OPTION_USE) == set(PARSERS)
    for command, parser in PARSERS.items():
        dests = set(_arguments(parser))
        assert dests == set(OPTION_USE[command]), (command, dests ^ set(OPTION_USE[command]))


@pytest.mark.parametrize("command", sorted(OPTION_USE))
def test_every_requirement_names_known_facts_and_says_when_it_is_read(command):
    for dest, (need, when) in OPTION_USE[command].items():
        if not need:
            assert when == "", (command, dest)
            continue
        assert when and not when.endswith("."), (command, dest)
        for alt in need.split("|"):
            for fact in alt.split("+"):
                group, _, name = fact.partition(":")
                assert group in GROUPS, (command, dest, fact)
                if group == "layout":
                    assert name in LAYOUTS, (command, dest, fact)


ROUTED = [
    (command, dest) for command, row in sorted(OPTION_USE.items()) for dest, (need, _) in sorted(row.items()) if need
]


@pytest.mark.parametrize("command, dest", ROUTED)
def test_every_routed_argument_is_refused_by_name_where_it_is_not_read_and_passes_where_it_is(command, dest, capsys):
    need, when = OPTION_USE[command][dest]
    label = _cliargs.option_label(_arguments(PARSERS[command])[dest])
    given = {dest: label}
    with pytest.raises(SystemExit) as exc:  # a route of no fact reads nothing that needs one
        _commands.check_route(f"gridify {command}", command, given, {"file": "a .bin file"})
    assert exc.value.code == 2
    text = str(exc.value)
    assert text == f"gridify {command}: error: {label} is only read {when}" + (
        " (here: a .bin file); leave it out" if "file:" in need else "; leave it out"
    )
    assert text in capsys.readouterr().err
    first = {fact: None for fact in need.split("|")[0].split("+")}
    _commands.check_route(f"gridify {command}", command, given, first)  # the route that reads it: no error
    # a fact not known yet (the model before it is loaded) that could make it read lets it pass until then
    _commands.check_route(f"gridify {command}", command, given, {}, maybe=list(first))


def test_the_given_arguments_are_what_was_typed_not_what_differs_from_a_default():
    top = cli.build_parser()
    show = cli._command_parser(top, "show")
    assert _cliargs.given_options(show, ["a.bin", "--up-axis", "z", "--labels", "auto"]) == {
        "file": "FILE",
        "up_axis": "--up-axis",
        "labels": "--labels",
    }
    assert _cliargs.given_options(cli._command_parser(top, "list"), []) == {}
    evaluate = _commands.evaluate_parser()
    argv = ["--ckpt", "m.pt", "data.x=1", "--split", "test", "--no-progress"]
    assert set(_cliargs.given_options(evaluate, argv, intermixed=True)) == {"ckpt", "overrides", "split", "no_progress"}
    assert evaluate.parse_args(["--ckpt", "m.pt"]).split == "test"  # the parser's defaults are left as they were


def _scan(path: Path, n: int = 200) -> Path:
    rng = np.random.default_rng(0)
    pts = np.hstack([rng.uniform(0, 10, (n, 3)), rng.uniform(0, 1, (n, 1))]).astype(np.float32)
    pts.tofile(path)
    return path


#: runs ``gridify.cli.main(argv)``; prints its exit status and the heavy modules it imported
PROBE = """
import sys
from gridify import cli
try:
    cli.main({argv!r})
except SystemExit as exc:
    print("EXIT", exc.code)
print("HEAVY", sorted(m for m in ("torch", "numpy") if m in sys.modules))
"""


@pytest.mark.parametrize(
    "argv, shown",
    [
        (
            ["show", "SCAN", "--up-axis", "y", "--out", "v.png"],
            "--up-axis is only read with a model (--ckpt / --model), which is fed the cloud z up (here: no model",
        ),
        (["show", "SCAN", "--resolution", "5"], "--resolution is only read without a model, for the grid and edges"),
        (["show", "SCAN", "--grid-color", "norm", "--layers", "edges"], "--grid-color is only read for the grid"),
        (["show", "SCAN", "--hide", "car"], "--hide is only read with a scene segmenter"),
        (["show", "SCAN", "--category", "chair"], "--category is only read by a part segmenter"),
        (
            ["predict", "SCAN", "--model", "semantickitti", "--columns", "x", "y", "z", "intensity"],
            "--columns is only "
            "read for text and .npy files (.npy .xyz .txt .pts .csv .xyzn .xyzrgb) (here: a .bin file)",
        ),  # fmt: skip
        (
            ["predict", "SCAN", "--model", "semantickitti", "--num-samples", "500"],
            "--num-samples is only read for a file that holds a mesh",
        ),  # fmt: skip
        (
            ["evaluate", "--model", "semantickitti", "--scan", "SCAN", "--voxel-size", "0.2"],
            "--voxel-size is only read for a scene segmenter on a dataset split (with --scan the model's own "
            "settings are used) (here: --scan)",
        ),
        (
            ["evaluate", "--model", "semantickitti", "data.voxel_size=0.2", "--scan", "SCAN", "--config", "x"],
            "--config and section.key=value are only read on a dataset split (without --scan) (here: --scan); leave "
            "them out",
        ),
        (["evaluate", "--model", "semantickitti", "--scan", "SCAN", "--precision", "bf16"], "--precision is only"),
        (
            ["evaluate", "--model", "semantickitti", "--scan", "SCAN", "data.voxel_size=0.2"],
            "--scan data.voxel_size=0.2: no such file; a section.key=value override is only read on a dataset split",
        ),
        (
            ["download", "modelnet10", "--config", "modelnet40"],
            "NAME is only read to fetch one archive (not with --config or --list) (here: --config)",
        ),  # fmt: skip
        (["download", "--list", "--root", "r"], "--root is only read to fetch or explain an archive"),
        (["download", "modelnet10", "--instructions", "--no-progress"], "--no-progress is only read while an archive"),
        (
            ["train", "--config", "procedural", "--print-config", "--resume", "auto"],
            "--resume is only read when a run trains (not with --print-config) (here: --print-config)",
        ),  # fmt: skip
        (["bench", "--k", "--k-num-points", "64"], "--k-num-points is only read for the k sweep"),
        (
            ["convert", ".", "--layout", "scannet", "--out", "o", "--sequences", "00"],
            "--sequences is only read for --layout semantickitti (here: --layout scannet)",
        ),  # fmt: skip
    ],
)
def test_an_argument_the_route_does_not_read_is_refused_before_anything_loads(argv, shown, tmp_path):
    """Each was accepted and ignored (exit 0, as if it had done something); each is refused by name with exit
    status 2, before PyTorch loads, and nothing is written."""
    scan = str(_scan(tmp_path / "scan.bin"))
    argv = [scan if a == "SCAN" else a for a in argv]
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert "EXIT 2" in out.stdout, (out.stdout[-500:], out.stderr[-800:])
    line = out.stderr.strip()
    assert shown in line and "\n" not in line and line.endswith("out"), line
    assert "HEAVY []" in out.stdout, (out.stdout[-500:], out.stderr[-500:])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan.bin"]


def test_arguments_a_loaded_model_does_not_read_are_refused_before_the_file_is_read(tmp_path, capsys):
    """The model's kind decides the rest (a classifier has no fragments, no bar, no ground truth to draw)."""
    cloud = tmp_path / "c.xyz"
    np.savetxt(cloud, np.random.default_rng(0).uniform(-1, 1, (300, 3)))
    with pytest.raises(SystemExit) as exc:
        cli.main(["predict", str(cloud), "--model", "modelnet10", "--max-fragments", "2", "--no-progress"])
    assert exc.value.code == 2
    assert str(exc.value) == (
        "gridify predict: error: --no-progress is only read with a scene segmenter (the only model with a progress "
        "bar), and --max-fragments is only read by a scene segmenter (which covers a scan with fragments) (here: a "
        "classification model); leave them out"
    )
    with pytest.raises(SystemExit) as exc:  # even a --labels file that does not exist: the argument is the fault
        cli.main(
            ["show", str(cloud), "--model", "modelnet10", "--labels", "gone.label", "--out", str(tmp_path / "v.png")]
        )
    assert "--labels is only read with a segmentation model" in str(exc.value) and exc.value.code == 2
    assert "a classification model" in str(exc.value)
    assert not (tmp_path / "v.png").exists()
    with pytest.raises(SystemExit) as exc:
        cli.main(["predict", str(cloud), "--model", "modelnet10", "--category", "chair"])
    assert "--category is only read by a part segmenter" in str(exc.value)
