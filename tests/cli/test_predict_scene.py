"""``gridify predict scan.bin --ckpt model.pt --out labeled.ply`` (with progress) and the classes
``gridify show`` hides on scenes."""

import re

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

    from gridify.cli.show import _hide_classes

    names = ["floor", "wall", "ceiling", "chair"]
    pos = np.arange(18, dtype=np.float32).reshape(6, 3)
    labels = np.array([0, 2, 1, 2, 3, 0])
    p, lab, _ = _hide_classes(argparse.Namespace(hide=None), pos, labels, names)
    assert lab.tolist() == [0, 1, 3, 0] and np.array_equal(p, pos[[0, 2, 4, 5]])
    p, lab, _ = _hide_classes(argparse.Namespace(hide="none"), pos, labels, names)
    assert lab.tolist() == labels.tolist()
    p, lab, _ = _hide_classes(argparse.Namespace(hide="Floor, chair"), pos, labels, names)
    assert lab.tolist() == [2, 1, 2]
    assert _hide_classes(argparse.Namespace(hide=None), pos, labels, ["road", "car"])[1].tolist() == labels.tolist()
    # ground truth drawn beside loses the same points (those predicted as a hidden class)
    truth = np.array([0, 0, 1, 2, 3, -1])
    p, lab, t = _hide_classes(argparse.Namespace(hide="chair,floor"), pos, labels, names, truth)
    assert lab.tolist() == [2, 1, 2] and t.tolist() == [0, 1, 2] and len(p) == 3
    with pytest.raises(SystemExit, match=r"--hide: unknown class\(es\) \['sky'\]; the model's classes: floor, "):
        _hide_classes(argparse.Namespace(hide="sky"), pos, labels, names)
    with pytest.raises(SystemExit, match="leaves no point to draw"):
        _hide_classes(argparse.Namespace(hide="floor,wall,ceiling,chair"), pos, labels, names)


def test_show_checks_hide_before_labelling_the_scan_and_applies_it_beside_the_ground_truth(tmp_path, capsys):
    """--hide with --labels was ignored (an unknown class too); now checked first and applied to both panels."""
    pytest.importorskip("open3d")
    _scan(tmp_path / "scan.bin")
    np.save(tmp_path / "truth.npy", np.random.default_rng(0).integers(0, 3, 700))
    path, _ = _export(tmp_path)
    base = ["show", str(tmp_path / "scan.bin"), "--ckpt", str(path), "--labels", str(tmp_path / "truth.npy")]
    with pytest.raises(SystemExit, match=r"--hide: unknown class\(es\) \['sky'\]"):
        gridify_main([*base, "--hide", "sky", "--out", str(tmp_path / "a.png")])
    assert "points:" not in capsys.readouterr().out  # refused before the scan was labelled
    with pytest.raises(
        SystemExit, match=r"--hide is only read with a scene segmenter .*\(here: no model"
    ):  # without a model it was ignored
        gridify_main(["show", str(tmp_path / "scan.bin"), "--hide", "car", "--out", str(tmp_path / "c.png")])
    first = CLASSES[1]  # the tiny model labels most points as the first class
    assert gridify_main([*base, "--hide", first, "--out", str(tmp_path / "b.png")]) == 0
    out = capsys.readouterr().out
    assert f"points predicted as {first.lower()}" in out and "ground truth | prediction" in out


def test_evaluate_scan_prints_per_class_iou_against_the_labels_beside_it(tmp_path, capsys):
    import json

    from gridify import load
    from gridify.metrics import SegmentationIoU

    (tmp_path / "velodyne").mkdir()
    (tmp_path / "labels").mkdir()
    _scan(tmp_path / "velodyne" / "000000.bin")
    _scan(tmp_path / "velodyne" / "000001.bin", seed=1)
    truth = np.random.default_rng(0).integers(-1, 3, 700)
    np.save(tmp_path / "truth.npy", truth)
    for name in ("000000", "000001"):  # low 16 bits: the model's ids (classes other than SemanticKITTI's)
        np.roll(np.where(truth < 0, 0, truth), int(name)).astype(np.uint32).tofile(
            tmp_path / "labels" / f"{name}.label"
        )
    path, _ = _export(tmp_path)
    out = tmp_path / "m.json"
    assert (
        gridify_main(["evaluate", "--ckpt", str(path), "--scan", str(tmp_path / "velodyne"), "--output", str(out)]) == 0
    )
    cap = capsys.readouterr()
    text = cap.out
    assert "2 scan(s): mIoU" in text and all(c in text for c in CLASSES)
    assert "crops (100 %)" in cap.err  # each scan's crops show progress, as predict's do (--no-progress: none)
    assert gridify_main(["evaluate", "--ckpt", str(path), "--scan", str(tmp_path / "velodyne"), "--no-progress"]) == 0
    assert "crops" not in capsys.readouterr().err
    report = json.loads(out.read_text())
    # the same numbers as the metric over both scans' predictions
    model, metric = load(path), SegmentationIoU(3)
    for name in ("000000", "000001"):
        pred = model.predict(tmp_path / "velodyne" / f"{name}.bin")
        raw = np.fromfile(tmp_path / "labels" / f"{name}.label", np.uint32).astype(np.int64)
        metric.update(__import__("torch").from_numpy(pred.labels), __import__("torch").from_numpy(raw & 0xFFFF))
    assert report["metrics"]["miou"] == pytest.approx(float(metric.compute()["miou"]))
    assert [r["points"] for r in report["scans"]] == [700, 700]

    # one scan with an explicit label file; errors name the file
    def one_scan(labels):
        scan = str(tmp_path / "velodyne" / "000000.bin")
        return gridify_main(["evaluate", "--ckpt", str(path), "--scan", scan, "--labels", str(tmp_path / labels)])

    assert one_scan("truth.npy") == 0
    np.save(tmp_path / "short.npy", truth[:10])
    with pytest.raises(SystemExit, match=r"short.npy: 10 labels for a scan of 700 points"):
        one_scan("short.npy")
    np.save(tmp_path / "big.npy", np.full(700, 7))
    with pytest.raises(SystemExit, match=r"big.npy: label 7 \(row 0\) outside -1..2"):
        one_scan("big.npy")
    (tmp_path / "alone").mkdir()
    _scan(tmp_path / "alone" / "x.bin")
    with pytest.raises(SystemExit, match="no ground truth found"):
        gridify_main(["evaluate", "--ckpt", str(path), "--scan", str(tmp_path / "alone" / "x.bin")])
    # a bad later scan is refused before any scan is predicted
    np.arange(10, dtype=np.uint32).tofile(tmp_path / "labels" / "000001.label")
    capsys.readouterr()
    with pytest.raises(SystemExit, match=r"000001.label: 10 labels for a scan of 700 points"):
        gridify_main(["evaluate", "--ckpt", str(path), "--scan", str(tmp_path / "velodyne")])
    assert "mIoU" not in capsys.readouterr().out


def test_show_draws_the_ground_truth_beside_the_prediction(tmp_path, capsys):
    from PIL import Image

    (tmp_path / "velodyne").mkdir()
    (tmp_path / "labels").mkdir()
    _scan(tmp_path / "velodyne" / "000000.bin")
    np.arange(700, dtype=np.uint32).__mod__(3).tofile(tmp_path / "labels" / "000000.label")
    path, _ = _export(tmp_path)
    png = tmp_path / "side.png"
    args = [
        "show",
        str(tmp_path / "velodyne" / "000000.bin"),
        "--ckpt",
        str(path),
        "--out",
        str(png),
        "--width",
        "200",
        "--height",
        "150",
    ]
    try:
        assert gridify_main(args) == 0
    except SystemExit as exc:
        if "offscreen renderer could not start" in str(exc):
            pytest.skip(str(exc))
        raise
    cap = capsys.readouterr()
    assert "ground truth | prediction" in cap.out
    assert re.search(r"\[show\] (\d+)/\1 crops \(100 %\)", cap.err)  # labelling a scan is long work: a bar
    assert Image.open(png).size == (400, 150)
    # --labels none: the prediction alone, as before; --no-progress: no bar
    assert gridify_main(args[:-4] + ["--labels", "none", "--width", "200", "--height", "150", "--no-progress"]) == 0
    assert Image.open(png).size == (200, 150)
    assert "crops" not in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no such file"):
        gridify_main(args + ["--labels", str(tmp_path / "missing.label")])
    # a label file of the wrong length is refused before the model labels the scan
    np.arange(10, dtype=np.uint32).tofile(tmp_path / "short.label")
    capsys.readouterr()
    with pytest.raises(SystemExit, match=r"short.label: 10 labels for a scan of 700 points"):
        gridify_main(args + ["--labels", str(tmp_path / "short.label")])
    assert "700 points" not in capsys.readouterr().out  # no prediction summary was printed


def test_evaluate_scan_checks_the_files_own_label_field(tmp_path, capsys):
    """A PLY's own 'label' property is the ground truth when no label file is beside it: an id beyond the model's
    classes was an unexpected SegmentationIoU error, a fractional one was truncated to an id and scored."""
    rows = _scan(tmp_path / "scan.bin", n=120)
    path, _ = _export(tmp_path)

    def ply(name, labels, kind="int"):
        head = "ply\nformat ascii 1.0\nelement vertex 120\n" + "".join(
            f"property float {k}\n" for k in ("x", "y", "z", "intensity")
        )
        body = "".join(f"{a!r} {b!r} {c!r} {i!r} {v}\n" for (a, b, c, i), v in zip(rows.tolist(), labels))
        (tmp_path / name).write_text(head + f"property {kind} label\nend_header\n" + body)
        return ["evaluate", "--ckpt", str(path), "--no-progress", "--scan", str(tmp_path / name)]

    assert gridify_main(ply("ok.ply", np.arange(120) % 3)) == 0
    with pytest.raises(SystemExit, match=r"big\.ply: label 9 \(row 0\) outside -1..2 \(3 classes of the model\)"):
        gridify_main(ply("big.ply", [9] * 120))
    with pytest.raises(SystemExit, match=r"neg\.ply: label -5 \(row 0\) outside -1..2"):
        gridify_main(ply("neg.ply", [-5] * 120))
    with pytest.warns(UserWarning, match="property 'label' is not a label"):
        with pytest.raises(
            SystemExit,
            match=r"frac\.ply: no ground truth found .*its property 'label' is not a label: "
            r"labels must be integers, row 0 holds 1\.5",
        ):
            gridify_main(ply("frac.ply", [1.5] * 120, "float"))


def test_show_checks_the_files_own_label_field(tmp_path):
    """`show` draws a PLY's own 'label' property as the ground truth: an id beyond the model's classes is refused
    naming the file and the row, before the model labels the scan (as `evaluate --scan` does)."""
    rows = _scan(tmp_path / "scan.bin", n=120)
    path, _ = _export(tmp_path)
    head = "ply\nformat ascii 1.0\nelement vertex 120\n" + "".join(
        f"property float {k}\n" for k in ("x", "y", "z", "intensity")
    )
    body = "".join(f"{a!r} {b!r} {c!r} {i!r} 9\n" for (a, b, c, i) in rows.tolist())
    (tmp_path / "big.ply").write_text(head + "property int label\nend_header\n" + body)
    args = ["show", str(tmp_path / "big.ply"), "--ckpt", str(path), "--out", str(tmp_path / "x.png"), "--no-progress"]
    with pytest.raises(SystemExit, match=r"big\.ply: label 9 \(row 0\) outside -1..2 \(3 classes of the model\)"):
        gridify_main(args)
    assert not (tmp_path / "x.png").exists()


def _dense_scan(path, n=2000, seed=3):
    """A ``.bin`` scan with several points per 0.5 m voxel (the fragment cap changes the crops)."""
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.uniform(0, 8, (n, 2)), rng.uniform(0, 1, (n, 1)), rng.uniform(0, 1, (n, 1))], 1)
    rows.astype("<f4").tofile(path)
    return rows.astype(np.float32)


def test_predict_and_evaluate_scan_take_max_fragments(tmp_path, capsys):
    import json

    from gridify import load

    _dense_scan(tmp_path / "scan.bin")
    path, _ = _export(tmp_path)
    model = load(path)
    for flag, cap in (("1", 1), ("all", None)):
        out = tmp_path / f"p{flag}.json"
        argv = ["predict", str(tmp_path / "scan.bin"), "--ckpt", str(path), "--max-fragments", flag, "--out", str(out)]
        assert gridify_main(argv + ["--no-progress"]) == 0
        want = model.predict(tmp_path / "scan.bin", max_fragments=cap)
        assert json.loads(out.read_text())["labels"] == want.labels.tolist()
    truth = np.random.default_rng(0).integers(0, 3, 2000)
    np.save(tmp_path / "truth.npy", truth)
    report = tmp_path / "m.json"
    scan, labels = str(tmp_path / "scan.bin"), str(tmp_path / "truth.npy")
    argv = ["evaluate", "--ckpt", str(path), "--scan", scan, "--labels", labels]
    assert gridify_main(argv + ["--max-fragments", "1", "--output", str(report), "--no-progress"]) == 0
    got = json.loads(report.read_text())
    assert got["max_fragments"] == 1
    one = model.predict(tmp_path / "scan.bin", max_fragments=1).labels
    assert got["metrics"]["oa"] == pytest.approx(float((one == truth).mean()))


@pytest.mark.parametrize("command", ["predict", "show"])
def test_max_fragments_flag_errors_name_the_flag(tmp_path, command):
    _scan(tmp_path / "scan.bin", n=100)
    for value in ("0", "-1", "1.5", "few"):
        with pytest.raises(SystemExit) as exc:
            gridify_main([command, str(tmp_path / "scan.bin"), "--model", "modelnet10", "--max-fragments", value])
        assert exc.value.code == 2  # an argparse error, before any model loads
    with pytest.raises(
        SystemExit,
        match=rf"gridify {command}: error: --max-fragments is only read by a scene segmenter .*\(here: a classification model\)",
    ):
        gridify_main([command, str(tmp_path / "scan.bin"), "--model", "modelnet10", "--max-fragments", "1"])


def test_evaluate_refuses_scene_flags_for_a_classifier_checkpoint():
    from gridify._pretrained import pretrained_file

    ckpt = str(pretrained_file("modelnet10"))
    with pytest.raises(
        SystemExit, match=r"--max-fragments is only read by a scene segmenter .*\(here: a classification checkpoint\)"
    ):
        gridify_main(["evaluate", "--ckpt", ckpt, "--max-fragments", "2"])
    with pytest.raises(
        SystemExit,
        match=r"--voxel-size and --max-points are only read for a scene segmenter on a dataset split .*\(here: a dataset split, a classification checkpoint\)",
    ):
        gridify_main(["evaluate", "--ckpt", ckpt, "--voxel-size", "0.1", "--max-points", "100"])


def test_show_refuses_ground_truth_with_every_point_unlabelled(tmp_path, capsys):
    """docs/bad-input.md says ``show`` refuses ground truth that is all unlabelled (as ``evaluate --scan``
    does); it drew an empty panel beside the prediction. Refused naming the file, before the scan is labelled."""
    scan = tmp_path / "scan.bin"
    _scan(scan)
    np.save(tmp_path / "none.npy", np.full(700, -1))
    (tmp_path / "none.txt").write_text("-1\n" * 700)
    path, _ = _export(tmp_path)
    base = ["show", str(scan), "--ckpt", str(path), "--out", str(tmp_path / "v.png"), "--no-progress"]
    for name in ("none.npy", "none.txt"):
        with pytest.raises(SystemExit) as exc:
            gridify_main(base + ["--labels", str(tmp_path / name)])
        text = str(exc.value)
        assert name in text and "every point is unlabelled" in text and "--labels none" in text, text
        assert "700 points" not in capsys.readouterr().out  # before the model labelled the scan
    assert not (tmp_path / "v.png").exists()
