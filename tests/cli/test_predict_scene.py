"""``gridify predict scan.bin --ckpt model.pt --out labeled.ply`` (with progress) and the classes
``gridify show`` hides on scenes."""

import numpy as np
import pytest

from gridify.cli import main as gridify_main
from gridify.io import read_points
from tests.helpers import SCENE_CLASSES, SCENE_SMALL, export_scene_model, write_scan

CLASSES, SMALL = SCENE_CLASSES, SCENE_SMALL
_scan, _export = write_scan, export_scene_model


def test_cli_predict_bin_writes_a_labelled_ply_with_progress(tmp_path, capsys):
    rows = _scan(tmp_path / "scan.bin")
    path, _ = _export(tmp_path)
    out = tmp_path / "labeled.ply"
    assert gridify_main(["predict", str(tmp_path / "scan.bin"), "--ckpt", str(path), "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert "crops (100 %)" in cap.err and "700 points" in cap.out
    back = read_points(out)
    np.testing.assert_allclose(back.points, rows[:, :3], atol=1e-6)
    assert back.labels is not None and back.labels.shape == (700,) and set(back.labels.tolist()) <= {0, 1, 2}
    assert gridify_main(["predict", str(tmp_path / "scan.bin"), "--ckpt", str(path), "--no-progress"]) == 0
    assert "crops" not in capsys.readouterr().err


def test_show_hides_the_ceiling_of_a_room_by_default_and_named_classes_on_request():
    import argparse

    from gridify.cli import _hide_classes

    names = ["floor", "wall", "ceiling", "chair"]
    pos = np.arange(18, dtype=np.float32).reshape(6, 3)
    labels = np.array([0, 2, 1, 2, 3, 0])
    p, lab = _hide_classes(argparse.Namespace(hide=None), pos, labels, names)
    assert lab.tolist() == [0, 1, 3, 0] and np.array_equal(p, pos[[0, 2, 4, 5]])
    p, lab = _hide_classes(argparse.Namespace(hide="none"), pos, labels, names)
    assert lab.tolist() == labels.tolist()
    p, lab = _hide_classes(argparse.Namespace(hide="Floor, chair"), pos, labels, names)
    assert lab.tolist() == [2, 1, 2]
    assert _hide_classes(argparse.Namespace(hide=None), pos, labels, ["road", "car"])[1].tolist() == labels.tolist()
    with pytest.raises(SystemExit, match=r"--hide: unknown class\(es\) \['sky'\]; the model's classes: floor, "):
        _hide_classes(argparse.Namespace(hide="sky"), pos, labels, names)
    with pytest.raises(SystemExit, match="leaves no point to draw"):
        _hide_classes(argparse.Namespace(hide="floor,wall,ceiling,chair"), pos, labels, names)
