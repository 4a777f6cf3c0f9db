"""Tests of the ``gridify`` command line (gridify.cli): help texts, a train -> predict -> show
round trip on a tiny segmentation model, and error messages."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gridify import cli
from gridify.datasets import ProceduralShapes
from gridify.io import read_points, write_ply
from tests.helpers import TINY_SEG_RUN

pytest.importorskip("lightning")
pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
SEG = [*TINY_SEG_RUN, "trainer.log_every_n_steps=1"]


@pytest.fixture(scope="module")
def model_pt(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli_run")
    assert cli.main(["train", *SEG, f"output_dir={out}"]) == 0
    return out / "checkpoints" / "model.pt"


@pytest.fixture(scope="module")
def chair_ply(tmp_path_factory):
    s = ProceduralShapes(
        split="test",
        task="segmentation",
        num_points=150,
        num_samples_per_class=1,
        classes=["chair", "lamp", "box"],
        normalize=False,
    )[0]
    return write_ply(tmp_path_factory.mktemp("cli_data") / "chair.ply", s["pos"] * 2, normals=s["normal"])


def test_console_script_help():
    exe = shutil.which("gridify") or str(Path(sys.executable).with_name("gridify"))
    if not Path(exe).is_file():
        pytest.skip("the gridify console script is not installed (pip install -e .)")
    res = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    for cmd in ("train", "evaluate", "predict", "show", "bench", "download"):
        assert cmd in res.stdout


@pytest.mark.parametrize(
    "cmd, text",
    [
        ("train", "--config"),
        ("evaluate", "--ckpt"),
        ("predict", "--ckpt"),
        ("show", "--layers"),
        ("download", "--list"),
        ("bench", "usage: "),
    ],
)
def test_every_command_has_help(cmd, text, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([cmd, "--help"])
    if exc.value.code not in (0, None):
        assert cmd == "bench" and "not available" in str(exc.value.code)  # benchmarking not installed
        return
    out = capsys.readouterr().out
    assert text in out and (cmd == "bench" or f"usage: gridify {cmd}" in out)  # bench names its own prog


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2 and "predict" in capsys.readouterr().out


def test_predict_round_trip(model_pt, chair_ply, tmp_path, capsys):
    assert (
        cli.main(
            [
                "predict",
                str(chair_ply),
                "--ckpt",
                str(model_pt),
                "--category",
                "chair",
                "--out",
                str(tmp_path / "lab.ply"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "150 points [chair]" in out and "labels written to" in out
    back = read_points(tmp_path / "lab.ply")
    assert len(back) == 150 and set(back.labels.tolist()) <= {11, 12, 13} and back.colors is not None
    np.testing.assert_allclose(back.points, read_points(chair_ply).points)
    for ext in (".npy", ".txt", ".json"):
        cli.main(
            [
                "predict",
                str(chair_ply),
                "--ckpt",
                str(model_pt),
                "--category",
                "0",
                "--out",
                str(tmp_path / f"lab{ext}"),
            ]
        )
    a = np.load(tmp_path / "lab.npy")
    b = np.loadtxt(tmp_path / "lab.txt", dtype=np.int64)
    c = json.loads((tmp_path / "lab.json").read_text())
    assert a.shape == (150,) and np.array_equal(a, b) and np.array_equal(a, c["labels"])
    assert np.allclose(np.sum(c["probabilities"], 1), 1.0, atol=1e-4) and c["category"] == "box"


def test_predict_errors(model_pt, chair_ply, tmp_path, capsys):
    with pytest.raises(SystemExit, match="needs the object category"):
        cli.main(["predict", str(chair_ply), "--ckpt", str(model_pt)])
    with pytest.raises(SystemExit, match="no such file|not found|does not exist"):
        cli.main(["predict", str(tmp_path / "missing.ply"), "--ckpt", str(model_pt)])
    with pytest.raises(SystemExit, match="checkpoint not found"):
        cli.main(["predict", str(chair_ply), "--ckpt", str(tmp_path / "none.pt")])
    with pytest.raises(SystemExit):  # an argparse error (status 2) before the model loads
        cli.main(["predict", str(chair_ply), "--ckpt", str(model_pt), "--out", str(tmp_path / "labels.csv")])
    assert "unsupported extension '.csv'; use one of ['.txt', '.npy', '.ply', '.json']" in capsys.readouterr().err
    empty = tmp_path / "empty.ply"
    empty.write_bytes(b"")
    with pytest.raises(SystemExit, match="empty.ply"):
        cli.main(["predict", str(empty), "--ckpt", str(model_pt), "--category", "chair"])


def test_show_writes_a_png(model_pt, chair_ply, tmp_path, capsys):
    from gridify import vis

    png = tmp_path / "view.png"
    try:
        cli.main(
            [
                "show",
                str(chair_ply),
                "--ckpt",
                str(model_pt),
                "--category",
                "chair",
                "--out",
                str(png),
                "--width",
                "320",
                "--height",
                "240",
                "--layers",
                "points,grid,edges",
            ]
        )
    except SystemExit as exc:
        if "offscreen renderer could not start" in str(exc):
            pytest.skip(str(exc))
        raise
    assert "wrote" in capsys.readouterr().out
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB"))
    assert img.shape == (240, 320, 3) and (img != 255).any(-1).mean() > 0.02
    assert (img.reshape(-1, 3) == np.floor(np.asarray(vis.EDGE_COLOR) * 255 + 0.5).astype(np.uint8)).all(1).any()
    # without a model: the random-feature grid of a freshly initialised Gridification
    cli.main(
        [
            "show",
            str(chair_ply),
            "--out",
            str(tmp_path / "plain.png"),
            "--width",
            "200",
            "--height",
            "150",
            "--layers",
            "points,grid",
            "--resolution",
            "5",
            "--k",
            "3",
        ]
    )
    assert (tmp_path / "plain.png").stat().st_size > 500
    with pytest.raises(SystemExit, match=r"unknown layer\(s\) \['voxels'\]"):
        cli.main(["show", str(chair_ply), "--layers", "voxels", "--out", str(png)])


def test_download_commands(tmp_path, capsys):
    assert cli.main(["download", "--list"]) == 0
    assert "ModelNet40" in capsys.readouterr().out
    assert cli.main(["download", "ModelNet40", "--root", str(tmp_path), "--instructions"]) == 0
    assert "ModelNet40.zip" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="unknown archive 'ModelNet99'"):
        cli.main(["download", "ModelNet99"])
