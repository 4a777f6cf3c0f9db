"""Every code block of the README and the docs either runs here or says why not (issue: a newcomer's first hour).

* ``python`` blocks run, each in a fresh namespace, in a folder holding the files they name (``scan.ply``,
  ``chair.ply``, ``model.onnx``, ``kitti.onnx``, ``000000.bin``, ``scans/``), made from tiny models; ``scan.xyz`` too.
* ``bash`` blocks: every command line RUNS for real, ``gridify`` as a user's shell finds it, in a copy of a folder
  that holds what a fresh clone and the page give a user (their files: ``scan.ply``, ``000000.bin``, a ``model.pt``
  of theirs, a raw ``RAW_ROOT``; what a step the page names first leaves: ``outputs/<run>/checkpoints/model.pt``,
  tiny stand-ins of the same task), and must exit 0 and write the ``--out`` / ``--output`` it names, without a
  traceback. The rules of ``tests/docs/doc_commands.py`` say which commands are only PARSED by their own parser
  (flags, choices, numbers; a ``--config`` resolved with its overrides): those that train, download, benchmark,
  evaluate a dataset split, open a window or read data a user fetches first (``../shared/data``, ``/data``).
  The other runs take a few seconds each; the exports (a trace and an onnxruntime check: 15 s to minutes) are
  marked slow. The terminal summary (``tests/docs/conftest.py``) tallies what ran and what was only parsed.
* The README runs in order in a folder without the ``.onnx`` files (slow: its exports trace shipped models; its
  slow commands run only there): its export block writes the ``model.onnx`` its onnxruntime block then reads.
* A block preceded by ``<!-- docs-test: skip: <reason> -->`` is not run; the reason is required; a block with
  other lines than ``gridify`` commands and their scripts (``make``, ``pip``, ``cp``) must carry one.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.docs.doc_commands import classify, command_lines, outputs
from tests.helpers import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DOCS = [p for p in DOCS if "_build" not in p.parts]
FENCE = re.compile(
    r"(?:<!-- docs-test: (?P<marker>[^>]*?) -->\s*\n)?```(?P<lang>python|bash)\n(?P<code>.*?)\n```", re.S
)
#: pages whose bash commands expect a file under another meaning than the common folder's: page -> {name: variant}
PAGE_FILES = {"docs/guides/scenes.md": {"model.pt": "scene_height.pt"}}  # there `model.pt` is a scene segmenter


def _blocks():
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text[: m.start("code")].count("\n") + 1
            yield pytest.param(path, m["lang"], m["code"], m["marker"], id=f"{path.relative_to(ROOT)}:{line}")


BLOCKS = list(_blocks())


def _commands():
    for p in BLOCKS:
        path, lang, code, marker = p.values
        if lang != "bash" or marker is not None:
            continue
        first = int(p.id.rsplit(":", 1)[1])
        for line, text in command_lines(code, first):
            yield classify(str(path.relative_to(ROOT)), line, text)


COMMANDS = list(_commands())
#: the README's slow commands run once, in order (test_readme_runs_in_order_on_a_fresh_clone), not twice
IN_ORDER = "README.md"
RUN = [
    pytest.param(c, id=c.id, marks=[pytest.mark.slow] if c.slow else [])
    for c in COMMANDS
    if c.mode == "run" and not (c.slow and c.doc == IN_ORDER)
]
PARSE = [pytest.param(c, id=c.id) for c in COMMANDS if c.mode == "parse"]


# --------------------------------------------------------------------------------------
# the folder: a user's files, the tiny stand-ins of the runs a page trains first, the repository's links
# --------------------------------------------------------------------------------------
def _export(path, model, name, task, kwargs, info):
    from gridify.checkpoint import export_model

    path.parent.mkdir(parents=True, exist_ok=True)
    export_model(path, model, {"model_name": name, "model_kwargs": kwargs, "task": task, "info": info})
    return path


def _classifier(path):
    """A 4-class classifier (xyz), like the procedural demo's ``model.pt``."""
    import torch

    from gridify.models import GridifiedClassifier

    kw = dict(in_channels=3, num_classes=4, resolution=4, k=4, hidden_channels=16, depth=1, kernel_size=3)
    torch.manual_seed(0)
    info = {"class_names": ["a", "b", "c", "d"], "num_points": 256, "in_channels": 3}
    return _export(path, GridifiedClassifier(**kw).eval(), "gridified_classifier", "classification", kw, info)


def _part_segmenter(path, categories):
    """A part segmenter (xyz) of three categories with two, two and one parts."""
    import torch

    from gridify.models import GridifiedSegmenter

    kw = dict(in_channels=3, num_classes=5, num_categories=3, resolution=4, k=4, hidden_channels=8, depth=1)
    kw.update(kernel_size=3, point_channels=8)
    torch.manual_seed(0)
    parts = [f"{categories[0]}/a", f"{categories[0]}/b", f"{categories[1]}/a", f"{categories[1]}/b", categories[2]]
    info = {
        "class_names": parts,
        "category_names": list(categories),
        "category_to_parts": [[0, 1], [2, 3], [4]],
        "num_points": 256,
        "in_channels": 3,
    }
    return _export(path, GridifiedSegmenter(**kw).eval(), "gridified_segmenter", "segmentation", kw, info)


def _s3dis_raw(root):
    """Two rooms of two areas in the raw S3DIS layout (``x y z r g b`` rows per object file)."""
    rng = np.random.default_rng(0)
    for area, room in (("Area_1", "office_1"), ("Area_5", "hallway_1")):
        ann = root / area / room / "Annotations"
        ann.mkdir(parents=True)
        for name in ("floor_1", "wall_1", "chair_1"):
            rows = np.hstack([rng.uniform(0, 3, (20, 3)), rng.integers(0, 256, (20, 3))])
            np.savetxt(ann / f"{name}.txt", rows, fmt="%.4f %.4f %.4f %d %d %d")


def _user_files(d):
    """What a user brings: clouds and scans in the formats the pages name, a model of theirs, a raw release."""
    from gridify.io import write_ply
    from tests.helpers import SCENE_CLASSES, write_scan

    rng = np.random.default_rng(0)
    pts = rng.normal(size=(1500, 3)).astype(np.float32)
    for name in ("scan.ply", "chair.ply"):
        write_ply(d / name, pts)
    np.savetxt(d / "scan.xyz", pts)
    np.save(d / "scan_labels.npy", rng.integers(0, len(SCENE_CLASSES), len(pts)))
    rows = write_scan(d / "000000.bin")
    np.save(d / "scan.npy", rows)  # a table of x y z intensity
    normals = pts / np.linalg.norm(pts, axis=1, keepdims=True)
    np.savetxt(d / "airplane_0126.txt", np.hstack([pts[:300], normals[:300]]), fmt="%.6f", delimiter=",")
    velodyne = d / "sequences" / "05" / "velodyne"
    velodyne.mkdir(parents=True)
    for i in range(2):
        n = len(write_scan(velodyne / f"{i:06d}.bin", n=400, seed=i))
        (d / "sequences" / "05" / "labels").mkdir(exist_ok=True)
        rng.integers(0, len(SCENE_CLASSES), n).astype("<u4").tofile(
            d / "sequences" / "05" / "labels" / f"{i:06d}.label"
        )
        (d / "preds").mkdir(exist_ok=True)  # what `gridify predict ... --out preds/<scan>.npy` left (scenes.md)
        np.save(d / "preds" / f"{i:06d}.npy", rng.integers(0, len(SCENE_CLASSES), n))
    (d / "scans").mkdir()
    for i in range(3):
        np.savetxt(d / "scans" / f"{i:02d}.xyz", rng.normal(size=(300, 3)) + i * 0.1)
    (d / "scans" / "timestamps.txt").write_text("0.0\n0.1\n0.35\n")
    (d / "my_experiment.yaml").write_text("_base_: procedural\n")  # the user's own config the training guide names
    _s3dis_raw(d / "RAW_ROOT")
    _part_segmenter(d / "model.pt", ("chair", "lamp", "box"))  # `--ckpt model.pt --category chair`


def _runs(d):
    """Tiny stand-ins of the runs the pages train before they use them (same task, same path)."""
    from tests.helpers import export_scene_model

    ckpt = "checkpoints/model.pt"
    _classifier(d / "outputs" / "procedural" / ckpt)  # make demo's
    _part_segmenter(d / "outputs" / "shapenet_ccnn" / ckpt, ("Airplane", "Chair", "Mug"))
    kitti = d / "outputs" / "semantickitti_mini" / "checkpoints"
    kitti.mkdir(parents=True)
    export_scene_model(kitti)[0].rename(kitti / "model.pt")  # features strength, height: a LiDAR scan's


def _links(d):
    """The repository as a clone has it (``configs/``, ``scripts/``), and ``gridify`` / ``python`` / ``.venv/bin``
    running this checkout's code with this interpreter."""
    (d / "configs").symlink_to(ROOT / "configs")
    (d / "scripts").symlink_to(ROOT / "scripts")
    bin_dir = d / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    gridify = bin_dir / "gridify"
    gridify.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -c '
        '\'import sys; from gridify.cli import main; sys.argv[0] = "gridify"; sys.exit(main())\' "$@"\n'
    )
    gridify.chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)


@pytest.fixture(scope="module")
def doc_files(tmp_path_factory):
    """A folder with every file the blocks open, from tiny models (seconds), but the ``.onnx`` ones."""
    d = tmp_path_factory.mktemp("docs")
    _user_files(d)
    _runs(d)
    _links(d)
    return d


@pytest.fixture(scope="module")
def python_files(doc_files):
    """The common folder with the ``.onnx`` files the python blocks read (``EXPORTED``; tracing: tens of seconds)."""
    from gridify.export import export_onnx

    _classifier(doc_files / "clf.pt")
    export_onnx(doc_files / "clf.pt", doc_files / "model.onnx", verify=False)
    kitti = doc_files / "outputs" / "semantickitti_mini" / "checkpoints" / "model.pt"
    export_onnx(kitti, doc_files / "kitti.onnx", verify=False)
    return doc_files


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    """The files of ``PAGE_FILES``."""
    from tests.helpers import export_scene_model

    d = tmp_path_factory.mktemp("variants")
    export_scene_model(d, features=("height",))[0].rename(d / "scene_height.pt")  # labels any xyz cloud
    return d


def _shell_env(folder):
    """The environment of a user's shell in ``folder``: ``gridify`` / ``python`` on the PATH run this checkout;
    one thread each (2 shared cores); no network (any download would fail at once, not hang)."""
    env = dict(os.environ)
    env["PATH"] = f"{folder / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env[proxy] = "http://127.0.0.1:9"
    env.pop("no_proxy", None), env.pop("NO_PROXY", None)
    return env


#: the common folder's files that only its python blocks read: a shell user writes them with the commands shown
EXPORTED = ("model.onnx", "kitti.onnx", "clf.pt")


def _page_folder(doc_files, variants, tmp_path, doc):
    """A copy of the common folder as ``doc``'s commands expect it (its ``PAGE_FILES``), without ``EXPORTED``."""
    folder = tmp_path / "run"
    shutil.copytree(doc_files, folder, symlinks=True, ignore=lambda d, names: EXPORTED if Path(d) == doc_files else ())
    for name, variant in PAGE_FILES.get(doc, {}).items():
        shutil.copy(variants / variant, folder / name)
    return folder


def _run(cmd, folder):
    """Run ``cmd`` as a user's shell would in ``folder``: exit 0, its outputs written, no traceback."""
    timeout = 1800 if cmd.slow else 300  # a shipped scene segmenter's export: 7 minutes on 2 busy cores
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if not p.is_symlink()}
    done = subprocess.run(
        ["bash", "-c", cmd.text], cwd=folder, env=_shell_env(folder), capture_output=True, text=True, timeout=timeout
    )
    said = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, f"{cmd.id}: exit {done.returncode}\n{said}"
    assert "Traceback" not in done.stderr, f"{cmd.id}: a traceback\n{said}"
    for out in outputs(cmd):
        target = folder / out
        written = target.exists() and before.get(target) != target.stat().st_mtime_ns
        assert written, f"{cmd.id}: wrote no {out}\n{said}"
        assert target.is_dir() or target.stat().st_size > 0, f"{cmd.id}: {out} is empty"
    return done


# --------------------------------------------------------------------------------------
# the tests
# --------------------------------------------------------------------------------------
def test_every_block_is_found_and_skips_give_a_reason():
    assert len(BLOCKS) > 20
    for p in BLOCKS:
        path, lang, code, marker = p.values
        if marker is not None:
            assert re.fullmatch(r"skip: \S.{4,}", marker), f"{p.id}: write <!-- docs-test: skip: <reason> -->"


def test_the_commands_that_run_are_the_documented_quick_ones():
    """The rules leave enough to run, and never run what trains, downloads or reads large data."""
    run = [c for c in COMMANDS if c.mode == "run"]
    assert len(run) >= 20 and sum(not c.slow for c in run) >= 12
    for c in run:
        sub, args = c.argv[1], c.argv[2:]
        assert sub not in ("train", "bench"), c.id
        assert sub != "download" or {"--list", "--instructions"} & set(args), c.id
        assert not any(a.startswith(("../shared", "/data")) for a in args), c.id
    readme = [c.text.split("#")[0].strip() for c in run if c.doc == "README.md"]
    assert "gridify export modelnet10 --out model.onnx" in readme  # the file the README's onnxruntime block reads


@pytest.mark.parametrize("path,lang,code,marker", [b for b in BLOCKS if b.values[1] == "python"])
def test_python_blocks_run(path, lang, code, marker, python_files, monkeypatch):
    if marker is not None:
        pytest.skip(marker)
    monkeypatch.chdir(python_files)
    exec(compile(code, f"{path.name} block", "exec"), {"__name__": "__docs__"})


@pytest.mark.parametrize("cmd", RUN)
def test_documented_command_runs(cmd, doc_files, variants, tmp_path, record_property):
    record_property("docs_command", "ran")
    _run(cmd, _page_folder(doc_files, variants, tmp_path, cmd.doc))


@pytest.mark.parametrize("cmd", PARSE)
def test_documented_command_parses(cmd, tmp_path, monkeypatch, record_property):
    record_property("docs_command", f"parsed: {cmd.reason}")
    assert cmd.argv, f"{cmd.id}: not a gridify command: mark the block <!-- docs-test: skip: <reason> -->"
    for token in shlex.split(cmd.text, comments=True):  # a script it names is the repository's
        assert not token.startswith("scripts/") or (ROOT / token).is_file(), f"{cmd.id}: no {token}"
    _check_commands([cmd.argv], tmp_path, monkeypatch)


@pytest.mark.slow  # the README's exports trace two shipped models and check them in onnxruntime (minutes)
def test_readme_runs_in_order_on_a_fresh_clone(doc_files, variants, tmp_path, monkeypatch, record_property):
    """The README top to bottom, as a newcomer copies it after ``make demo``: no ``.onnx`` file beforehand, so
    the onnxruntime block reads the ``model.onnx`` the export block wrote. Every README command ``classify`` runs
    runs here, the slow ones only here."""
    folder = _page_folder(doc_files, variants, tmp_path, IN_ORDER)
    monkeypatch.chdir(folder)
    ran = []
    for p in BLOCKS:
        path, lang, code, marker = p.values
        if path != ROOT / IN_ORDER or marker is not None:
            continue
        if lang == "python":
            exec(compile(code, f"{p.id} block", "exec"), {"__name__": "__docs__"})
            continue
        for line, text in command_lines(code, int(p.id.rsplit(":", 1)[1])):
            cmd = classify(IN_ORDER, line, text)
            if cmd.mode == "run":
                _run(cmd, folder)
                ran.append(cmd)
    record_property("docs_command", f"ran in order: {len(ran)}")
    assert any("export modelnet10 --out model.onnx" in c.text for c in ran) and (folder / "model.onnx").is_file()


def _check_commands(commands, tmp_path, monkeypatch):
    """Parse every command of ``commands`` (``("gridify", sub-command, ...)``) with its own parser; resolve
    ``gridify train``'s config."""
    from gridify import _commands
    from gridify.cli import build_parser
    from gridify.training.config import resolve_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_experiment.yaml").write_text("_base_: procedural\n")  # the user's own config the guide names
    (tmp_path / "configs").symlink_to(ROOT / "configs")  # commands written for the repository root
    for tokens in commands:
        command, argv = tokens[1], list(tokens[2:])
        if command == "train":
            args = _commands.train_parser().parse_intermixed_args(argv)
            root = [] if args.data_root is None else [f"data.root={args.data_root!r}"]
            resolve_config(args.config, [*args.overrides, *root])
        elif command in ("evaluate",):  # its overrides as written: `[--votes 8]` was two malformed overrides
            args = _commands.evaluate_parser().parse_intermixed_args(argv)
            _commands.check_overrides(args.overrides, "gridify evaluate")
        elif command == "bench":  # the parser of the mode it names (--recipe, --scenes, else the sweep)
            _commands.bench_command_parser(_commands.bench_command(argv)).parse_args(argv)
        else:
            build_parser().parse_args([command, *argv])


CONFIGS = sorted((ROOT / "gridify" / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_config_headers_commands_parse_and_their_pointers_exist(config, tmp_path, monkeypatch):
    """The ``#   gridify ...`` lines of a shipped config's header parse (as the bash blocks above), and every
    ``docs/....md "Section"`` / ``README "Section"`` it names exists."""
    from tests.docs.doc_commands import as_gridify

    text = config.read_text(encoding="utf-8")
    comments = "\n".join(line.lstrip("# ").rstrip() for line in text.splitlines() if line.lstrip().startswith("#"))
    commands = [line for line in comments.splitlines() if line.startswith("gridify ")]
    if commands:
        _check_commands([as_gridify(shlex.split(c, comments=True)) for c in commands], tmp_path, monkeypatch)
    for m in re.finditer(r'(README|docs/[\w/.-]+?\.md)(?: "([^"]+)")?', comments):
        target = ROOT / ("README.md" if m[1] == "README" else m[1])
        assert target.is_file(), f"{config.name}: {m[1]} does not exist"
        if m[2]:
            headings = [h.lstrip("# ") for h in target.read_text(encoding="utf-8").splitlines() if h.startswith("#")]
            assert any(m[2] in h for h in headings), f"{config.name}: no section {m[2]!r} in {m[1]}"
