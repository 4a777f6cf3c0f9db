"""Every code block of the README and the docs either runs here or says why not (issue: a newcomer's first hour).

* ``python`` blocks run, each in a fresh namespace, in a folder holding the files they name (``scan.ply``,
  ``chair.ply``, ``model.onnx``, ``kitti.onnx``, ``000000.bin``, ``scans/``), made from tiny models; ``scan.xyz`` too.
* ``bash`` blocks: every ``gridify ...`` line is parsed by the command's own parser (flags, choices, numbers)
  and a ``--config`` is resolved with its overrides (a shipped name must exist, every key must be valid);
  nothing trains. A block with other lines (``make``, ``pip``, ``python scripts/...``) must say why it is
  not checked.
* A block preceded by ``<!-- docs-test: skip: <reason> -->`` is not run; the reason is required.
"""

import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DOCS = [p for p in DOCS if "_build" not in p.parts]
FENCE = re.compile(
    r"(?:<!-- docs-test: (?P<marker>[^>]*?) -->\s*\n)?```(?P<lang>python|bash)\n(?P<code>.*?)\n```", re.S
)


def _blocks():
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text[: m.start("code")].count("\n") + 1
            yield pytest.param(path, m["lang"], m["code"], m["marker"], id=f"{path.relative_to(ROOT)}:{line}")


BLOCKS = list(_blocks())


@pytest.fixture(scope="module")
def doc_files(tmp_path_factory):
    """A folder with every file the python blocks open, from tiny models (seconds)."""
    import torch

    from gridify.checkpoint import export_model
    from gridify.export import export_onnx
    from gridify.io import write_ply
    from gridify.models import GridifiedClassifier
    from tests.helpers import export_scene_model, write_scan

    d = tmp_path_factory.mktemp("docs")
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(1500, 3)).astype(np.float32)
    for name in ("scan.ply", "chair.ply"):
        write_ply(d / name, pts)
    np.savetxt(d / "scan.xyz", pts)
    torch.manual_seed(0)
    clf = GridifiedClassifier(3, 4, resolution=4, k=4, hidden_channels=16, depth=1, kernel_size=3).eval()
    export_model(
        d / "clf.pt",
        clf,
        {
            "model_name": "gridified_classifier",
            "model_kwargs": dict(
                in_channels=3, num_classes=4, resolution=4, k=4, hidden_channels=16, depth=1, kernel_size=3
            ),
            "task": "classification",
            "info": {"class_names": ["a", "b", "c", "d"], "num_points": 256, "in_channels": 3},
        },
    )
    export_onnx(d / "clf.pt", d / "model.onnx", verify=False)
    scene, _ = export_scene_model(d)
    export_onnx(scene, d / "kitti.onnx", verify=False)
    write_scan(d / "000000.bin")
    (d / "scans").mkdir()
    for i in range(3):
        np.savetxt(d / "scans" / f"{i:02d}.xyz", rng.normal(size=(300, 3)) + i * 0.1)
    (d / "scans" / "timestamps.txt").write_text("0.0\n0.1\n0.35\n")
    return d


def test_every_block_is_found_and_skips_give_a_reason():
    assert len(BLOCKS) > 20
    for p in BLOCKS:
        path, lang, code, marker = p.values
        if marker is not None:
            assert re.fullmatch(r"skip: \S.{4,}", marker), f"{p.id}: write <!-- docs-test: skip: <reason> -->"


@pytest.mark.parametrize("path,lang,code,marker", [b for b in BLOCKS if b.values[1] == "python"])
def test_python_blocks_run(path, lang, code, marker, doc_files, monkeypatch):
    if marker is not None:
        pytest.skip(marker)
    monkeypatch.chdir(doc_files)
    exec(compile(code, f"{path.name} block", "exec"), {"__name__": "__docs__"})


def _gridify_lines(code):
    """The commands of a bash block (continuations joined, comments dropped) as token lists."""
    text = code.replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        yield line, shlex.split(line, comments=True)


def _as_gridify(tokens):
    """``gridify ...`` tokens of a command line: ``gridify`` / ``.venv/bin/gridify``, and the scripts that are the
    same commands (``python scripts/train.py`` = ``gridify train``, ``torchrun ... scripts/train.py``,
    ``python scripts/benchmark.py`` = ``gridify bench``); None for anything else."""
    if Path(tokens[0]).name == "gridify":
        return ["gridify", *tokens[1:]]
    scripts = {"scripts/train.py": "train", "scripts/benchmark.py": "bench", "scripts/evaluate.py": "evaluate"}
    for i, tok in enumerate(tokens):
        if tok in scripts and (Path(tokens[0]).name.startswith("python") or tokens[0] == "torchrun"):
            return ["gridify", scripts[tok], *tokens[i + 1 :]]
    return None


@pytest.mark.parametrize("path,lang,code,marker", [b for b in BLOCKS if b.values[1] == "bash"])
def test_bash_blocks_parse(path, lang, code, marker, tmp_path, monkeypatch):
    if marker is not None:
        pytest.skip(marker)
    _check_commands(code, tmp_path, monkeypatch)


def _check_commands(code, tmp_path, monkeypatch):
    """Parse every command line of ``code`` with its own parser; resolve ``gridify train``'s config."""
    from gridify import _commands
    from gridify.cli import build_parser
    from gridify.training.config import resolve_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_experiment.yaml").write_text("_base_: procedural\n")  # the user's own config the guide names
    (tmp_path / "configs").symlink_to(ROOT / "configs")  # commands written for the repository root
    for line, tokens in _gridify_lines(code):
        tokens = _as_gridify(tokens)
        assert tokens, f"{line!r} is not a gridify command: mark the block <!-- docs-test: skip: <reason> -->"
        command, argv = tokens[1], tokens[2:]
        if command == "train":
            args = _commands.train_parser().parse_intermixed_args(argv)
            root = [] if args.data_root is None else [f"data.root={args.data_root!r}"]
            resolve_config(args.config, [*args.overrides, *root])
        elif command in ("evaluate",):  # its overrides as written: `[--votes 8]` was two malformed overrides
            args = _commands.evaluate_parser().parse_intermixed_args(argv)
            _commands.check_overrides(args.overrides, "gridify evaluate")
        elif command == "bench" and any(a == "--recipe" or a.startswith("--recipe=") for a in argv):
            _commands.bench_recipe_parser().parse_args(argv)
        elif command == "bench":
            _commands.bench_parser().parse_args(argv)
        else:
            build_parser().parse_args([command, *argv])


CONFIGS = sorted((ROOT / "gridify" / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_config_headers_commands_parse_and_their_pointers_exist(config, tmp_path, monkeypatch):
    """The ``#   gridify ...`` lines of a shipped config's header parse (as the bash blocks above), and every
    ``docs/....md "Section"`` / ``README "Section"`` it names exists."""
    text = config.read_text(encoding="utf-8")
    comments = "\n".join(line.lstrip("# ").rstrip() for line in text.splitlines() if line.lstrip().startswith("#"))
    commands = [line for line in comments.splitlines() if line.startswith("gridify ")]
    if commands:
        _check_commands("\n".join(commands), tmp_path, monkeypatch)
    for m in re.finditer(r'(README|docs/[\w/.-]+?\.md)(?: "([^"]+)")?', comments):
        target = ROOT / ("README.md" if m[1] == "README" else m[1])
        assert target.is_file(), f"{config.name}: {m[1]} does not exist"
        if m[2]:
            headings = [h.lstrip("# ") for h in target.read_text(encoding="utf-8").splitlines() if h.startswith("#")]
            assert any(m[2] in h for h in headings), f"{config.name}: no section {m[2]!r} in {m[1]}"
