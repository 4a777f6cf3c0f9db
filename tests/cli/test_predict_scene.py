"""``gridify predict scan.bin --ckpt model.pt --out labeled.ply`` (with progress) and the classes
``gridify show`` hides on scenes."""

import numpy as np
import pytest
import torch

from gridify.checkpoint import export_model
from gridify.cli import main as gridify_main
from gridify.io import read_points
from gridify.models import GridifiedSceneSegmenter

SMALL = dict(
    resolution=(6, 6, 3), k=3, hidden_channels=8, depth=1, point_channels=4, message_channels=8, pos_hidden_channels=8
)
CLASSES = ["ground", "car", "pole"]


def _scan(path, n=700, seed=0):
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.uniform(-20, 20, (n, 2)), rng.uniform(-2, 1, (n, 1)), rng.uniform(0, 1, (n, 1))], 1)
    rows.astype("<f4").tofile(path)
    return rows.astype(np.float32)


def _export(tmp_path, features=("strength", "height"), voxel_size=0.5, max_points=200):
    torch.manual_seed(0)
    model = GridifiedSceneSegmenter(len(features), len(CLASSES), **SMALL).eval()
    kwargs = dict(in_channels=len(features), num_classes=len(CLASSES), **SMALL)
    info = {
        "class_names": CLASSES,
        "features": list(features),
        "voxel_size": voxel_size,
        "max_points": max_points,
        "num_points": max_points,
        "normalization": None,
        "in_channels": len(features),
    }
    path = tmp_path / "scene.pt"
    export_model(
        path,
        model,
        {"model_name": "scene_segmenter", "model_kwargs": kwargs, "task": "scene_segmentation", "info": info},
    )
    return path, model


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
