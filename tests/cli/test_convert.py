"""``gridify convert``: raw scene layouts -> the common (Pointcept) layout, from the command line."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from gridify.cli import main
from gridify.datasets import SceneDataset, convert_to_pointcept

KITTI = Path(__file__).resolve().parents[3] / "shared" / "data" / "semantickitti_mini" / "dataset"


def _s3dis_tree(root: Path) -> Path:
    """Two rooms of two areas in the raw S3DIS layout: ``x y z r g b`` rows per instance file."""
    rng = np.random.default_rng(0)
    for area, room in (("Area_1", "office_1"), ("Area_5", "hallway_1")):
        ann = root / area / room / "Annotations"
        ann.mkdir(parents=True)
        for name in ("floor_1", "wall_1", "chair_1"):
            rows = np.hstack([rng.uniform(0, 3, (20, 3)), rng.integers(0, 256, (20, 3))])
            np.savetxt(ann / f"{name}.txt", rows, fmt="%.4f %.4f %.4f %d %d %d")
    return root


def test_convert_s3dis_tree_reads_back(tmp_path, capsys):
    raw = _s3dis_tree(tmp_path / "raw")
    assert main(["convert", str(raw), "--layout", "s3dis", "--out", str(tmp_path / "pc"), "--quiet"]) == 0
    assert "2 scenes" in capsys.readouterr().out
    ds = SceneDataset(tmp_path / "pc", layout="pointcept", split="Area_1")
    item = ds[0]
    assert item["pos"].shape == (60, 3)
    names = ds.class_names
    assert sorted({names[i] for i in item["y"].tolist()}) == ["chair", "floor", "wall"]
    # a second run keeps the scenes already written (resume) and says so in the same words
    assert main(["convert", str(raw), "--layout", "s3dis", "--out", str(tmp_path / "pc"), "--quiet"]) == 0


@pytest.mark.skipif(not KITTI.is_dir(), reason="../shared/data/semantickitti_mini not present")
def test_convert_real_semantickitti_sequence(tmp_path):
    out = tmp_path / "kitti"
    assert (
        main(["convert", str(KITTI), "--layout", "semantickitti", "--sequences", "10", "--out", str(out), "--quiet"])
        == 0
    )
    scenes = sorted(p.name for p in (out / "train").iterdir())
    assert scenes == ["10_000000", "10_000004", "10_000008"]
    coord = np.load(out / "train" / "10_000000" / "coord.npy")
    seg = np.load(out / "train" / "10_000000" / "segment.npy")
    assert coord.shape[0] == seg.shape[0] > 100_000
    assert seg.min() >= -1 and seg.max() < 19


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "does not exist"),
        ("file", "is not a folder"),
        ("same", "is the source folder"),
    ],
)
def test_convert_bad_paths_name_the_problem(tmp_path, capsys, case, message):
    raw = _s3dis_tree(tmp_path / "raw")
    root = {
        "missing": tmp_path / "nope",
        "file": raw / "Area_1" / "office_1" / "Annotations" / "floor_1.txt",
        "same": raw,
    }[case]
    with pytest.raises(SystemExit) as exc:
        main(["convert", str(root), "--layout", "s3dis", "--out", str(raw if case == "same" else tmp_path / "o")])
    assert message in str(exc.value)


def test_convert_empty_tree_and_bad_layout(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["convert", str(tmp_path / "empty"), "--layout", "s3dis", "--out", str(tmp_path / "o")])
    assert "no s3dis scenes" in str(exc.value)
    with pytest.raises(SystemExit):
        main(["convert", str(tmp_path / "empty"), "--layout", "nope", "--out", str(tmp_path / "o")])
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def _convert(raw, out, *extra):
    return main(["convert", str(raw), "--layout", "s3dis", "--out", str(out), "--quiet", *extra])


def _labels_of(out, area="Area_1"):
    ds = SceneDataset(out, layout="pointcept", split=area)
    return sorted({ds.class_names[i] for i in ds[0]["y"].tolist() if i >= 0})


@pytest.mark.filterwarnings("ignore:convert_to_pointcept")
def test_a_second_conversion_with_other_classes_is_refused_or_rewritten_never_mixed(tmp_path, capsys):
    """Re-running convert with another class list kept the old scenes (ids of the old list read with the new
    names: chair points read back as ceiling); now it is refused, --overwrite rewrites every scene, and an
    --overwrite that would leave scenes of the old conversion behind is refused too."""
    raw, out = _s3dis_tree(tmp_path / "raw"), tmp_path / "pc"
    assert _convert(raw, out) == 0 and _labels_of(out) == ["chair", "floor", "wall"]
    with pytest.raises(SystemExit) as exc:
        _convert(raw, out, "--classes", "chair", "floor")
    msg = str(exc.value)
    assert msg.startswith("gridify convert: error: ") and "\n" not in msg, msg
    assert "holds 2 scene(s) of a conversion with other settings" in msg and "--overwrite" in msg, msg
    assert "'chair', 'floor']" in msg and _labels_of(out) == ["chair", "floor", "wall"]  # nothing rewritten
    with pytest.raises(SystemExit) as exc:  # rewrites the train areas only: Area_5 would keep the old ids
        _convert(raw, out, "--classes", "chair", "floor", "--overwrite", "--splits", "train")
    assert "does not cover (Area_5/hallway_1)" in str(exc.value) and "--splits all" in str(exc.value)
    assert _convert(raw, out, "--classes", "chair", "floor", "--overwrite") == 0
    assert _labels_of(out) == ["chair", "floor"] and _labels_of(out, "Area_5") == ["chair", "floor"]
    assert _convert(raw, out, "--classes", "chair", "floor") == 0  # the same settings: a resume
    record = json.loads((out / "conversion.json").read_text())
    assert record == {"layout": "s3dis", "classes": ["chair", "floor"], "unknown": "ignore", "rewriting": False}
    (out / "conversion.json").write_text(json.dumps({**record, "rewriting": True}))  # an interrupted overwrite
    with pytest.raises(SystemExit, match="was interrupted; its scenes mix two conversions"):
        _convert(raw, out, "--classes", "chair", "floor")


def test_a_conversion_that_ignores_most_points_says_so_in_one_warning(tmp_path):
    """The default S3DIS classes set the forest plot's tree and ground (92 % of its points) to ignore without a
    word; a conversion that ignores a large share warns once, naming the share, the classes and --classes."""
    raw = tmp_path / "raw" / "Area_1" / "Park_2" / "Annotations"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for name, n in (("tree_1", 50), ("ground_1", 40), ("clutter_1", 10)):
        np.savetxt(raw / f"{name}.txt", np.hstack([rng.uniform(0, 9, (n, 3)), rng.integers(0, 256, (n, 3))]))
    with pytest.warns(UserWarning) as record:
        convert_to_pointcept(tmp_path / "raw", "s3dis", tmp_path / "pc")
    (w,) = [w for w in record if "set to ignore" in str(w.message)]
    text = str(w.message)
    assert "90 % of the 100 points converted (90) were set to ignore" in text and "['ground', 'tree']" in text
    assert "--classes clutter ground tree" in text and "\n" not in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the scenes' own classes: nothing to say
        convert_to_pointcept(tmp_path / "raw", "s3dis", tmp_path / "own", classes=["tree", "ground", "clutter"])


FOREST = KITTI.parents[1] / "forest_s3dis_layout" / "Stanford3dDataset_v1.2_Aligned_Version"


@pytest.mark.skipif(not FOREST.is_dir(), reason="../shared/data/forest_s3dis_layout not present")
def test_real_forest_plot_with_the_default_classes_warns(tmp_path):
    with pytest.warns(UserWarning, match=r"92 % of the 387109 points converted .*\['ground', 'tree'\]"):
        convert_to_pointcept(FOREST, "s3dis", tmp_path / "forest")


@pytest.mark.parametrize(
    "layout, flags, message",
    [
        (
            "semantickitti",
            ["--classes", "a", "b"],
            r"--classes is only read for --layout s3dis .*\(here: --layout semantickitti\)",
        ),
        ("semantickitti", ["--test-area", "3"], r"--test-area is only read for --layout s3dis / mmdet3d_s3dis \(here"),
        (
            "semantickitti",
            ["--unknown", "error"],
            r"--unknown is only read for --layout s3dis \(here: --layout semantickitti",
        ),
        (
            "s3dis",
            ["--sequences", "00"],
            r"--sequences is only read for --layout semantickitti \(here: --layout s3dis\)",
        ),
        (
            "scannet",
            ["--test-area", "2"],
            r"--test-area is only read for --layout s3dis / mmdet3d_s3dis \(here: --layout scannet",
        ),
    ],
)
def test_convert_refuses_a_flag_the_layout_does_not_read(tmp_path, layout, flags, message):
    """``--classes a b`` with SemanticKITTI wrote a two-class classes.txt over 19-class labels; the others were
    ignored. Each is refused before anything is written."""
    raw = _s3dis_tree(tmp_path / "raw")
    with pytest.raises(SystemExit, match=message):
        main(["convert", str(raw), "--layout", layout, "--out", str(tmp_path / "o"), "--quiet", *flags])
    assert not (tmp_path / "o").exists()
    if layout == "s3dis":  # the flags the layout reads still work
        assert (
            _convert(
                raw, tmp_path / "ok", "--test-area", "1", "--unknown", "error", "--classes", "floor", "wall", "chair"
            )
            == 0
        )


def test_convert_in_python_refuses_a_class_list_that_does_not_fit_the_layout_labels(tmp_path):
    with pytest.raises(ValueError, match=r"classes names 2 classes, but scannet's labels are the 20 ids"):
        convert_to_pointcept(tmp_path, "scannet", tmp_path / "o", classes=["a", "b"])


def test_convert_names_a_root_one_folder_too_high_in_its_own_words(tmp_path):
    from tests.datasets.test_scene_datasets import make_kitti

    make_kitti(tmp_path / "kitti" / "dataset", sequences=("00",), frames=1)
    argv = ["convert", str(tmp_path / "kitti"), "--layout", "semantickitti", "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--sequences", "0", "--quiet"])
    text = str(exc.value)
    assert "(--sequences); its subfolder 'dataset' holds them: give '" in text, text
    assert text.endswith("kitti/dataset' as the root") and "root=" not in text and "sequences=" not in text, text


def test_a_failed_conversion_leaves_out_as_it_was_and_a_rerun_resumes(tmp_path):
    """A failed ``gridify convert`` left ``classes.txt`` and ``conversion.json`` (and the scenes converted so far)
    in ``--out``; now the files are staged beside it and moved in only when every scene is converted."""
    raw, out = _s3dis_tree(tmp_path / "raw"), tmp_path / "pc"
    bad = raw / "Area_5" / "hallway_1" / "Annotations" / "wall_1.txt"
    good = bad.read_text()
    bad.write_text("1 2 3 4 5 6\nnot a number\n")  # the second scene fails, after the first was converted
    with pytest.raises(SystemExit) as exc:
        _convert(raw, out)
    text = str(exc.value)
    assert "wall_1.txt" in text and "\n" not in text, text
    assert not out.exists(), sorted(out.rglob("*"))  # no classes.txt, no conversion.json, no scene
    stage = tmp_path / ".pc.partial"
    assert f"the 1 scene(s) converted so far wait in {stage}" in text, text
    assert (stage / "Area_1" / "office_1" / "coord.npy").is_file()
    bad.write_text(good)
    assert _convert(raw, out) == 0  # resumes from the staged scene, then moves everything in
    assert not stage.exists() and _labels_of(out) == ["chair", "floor", "wall"]
    assert (out / "classes.txt").is_file() and (out / "Area_5" / "hallway_1" / "coord.npy").is_file()
    assert json.loads((out / "conversion.json").read_text())["rewriting"] is False


def test_a_conversion_failing_on_its_first_scene_leaves_nothing(tmp_path):
    raw = _s3dis_tree(tmp_path / "raw")
    (raw / "Area_1" / "office_1" / "Annotations" / "floor_1.txt").write_text("x y z\n")
    with pytest.raises(SystemExit, match="floor_1.txt"):
        _convert(raw, tmp_path / "pc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]  # neither --out nor a staging folder
    (tmp_path / "pc").mkdir()
    (tmp_path / "pc" / "mine.txt").write_text("kept")  # an existing --out is left exactly as it was
    with pytest.raises(SystemExit):
        _convert(raw, tmp_path / "pc")
    assert sorted(p.name for p in (tmp_path / "pc").iterdir()) == ["mine.txt"]


def test_an_overwrite_replaces_each_scene_folder_whole(tmp_path):
    raw, out = _s3dis_tree(tmp_path / "raw"), tmp_path / "pc"
    assert _convert(raw, out) == 0
    stale = out / "Area_1" / "office_1" / "stale.npy"
    stale.write_bytes(b"")
    assert _convert(raw, out, "--overwrite") == 0
    assert not stale.exists() and (out / "Area_1" / "office_1" / "coord.npy").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pc", "raw"]
