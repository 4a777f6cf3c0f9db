"""Scene layouts are a registry (issue 74): a layout registered in one module (this test file, as a plugin would)
is found by name everywhere scenes are read (find_scenes, read_scene, SceneDataset, the converter to the common
layout, the ground truth of a single scan), with nothing else changed; the built-in layouts answer the same
questions from their own modules."""

from pathlib import Path

import numpy as np
import pytest

from gridify.datasets import DatasetError, SceneDataset, convert_to_pointcept
from gridify.datasets.layouts import LAYOUTS, SceneLayout, SceneRef, get_layout, registered_layouts
from gridify.datasets.layouts.base import IGNORE_INDEX, coord_array, read_with
from gridify.datasets.scene_layouts import (
    check_layout_classes,
    find_scenes,
    folder_scan,
    listed_layouts,
    read_scan_labels,
    read_scene,
    scan_folder_note,
    scan_label_path,
    scan_name,
)
from gridify.io.text import read_text_rows
from gridify.registry import UnknownNameError

TOY_CLASSES = ("ground", "tree")


class ToyLayout(SceneLayout):
    """``<root>/<split>/<scene>.xyzl``: text rows ``x y z label``; its ground truth alone in ``<scene>.txt``."""

    classes = TOY_CLASSES
    splits = "train/ and val/ folders"
    features = ("height",)

    def find(self, root, split, *, test_area, sequences, skip_missing):
        folders = sorted(d for d in root.iterdir() if d.is_dir()) if split == "all" else [root / split]
        return [SceneRef(f.stem, self.name, f, split=d.name) for d in folders for f in sorted(d.glob("*.xyzl"))]

    def read(self, ref, *, classes=None, unknown="ignore"):
        rows = read_with(read_text_rows, ref.path, 4, "x y z label")
        return {"coord": coord_array(rows[:, :3]), "segment": rows[:, 3].astype(np.int64)}

    def scan_label_path(self, scan):
        found = Path(scan).with_suffix(".txt")
        return found if found.is_file() else None


@pytest.fixture
def toy():
    LAYOUTS.register("toy", ToyLayout)
    try:
        yield get_layout("toy")
    finally:
        LAYOUTS.unregister("toy")


def _toy_root(root: Path) -> Path:
    rng = np.random.default_rng(0)
    for split, count in (("train", 2), ("val", 1)):
        (root / split).mkdir(parents=True)
        for i in range(count):
            xyz = rng.uniform(0, 5, (12, 3))
            np.savetxt(root / split / f"s{i}.xyzl", np.c_[xyz, np.arange(12) % 2], fmt="%.5f")
    return root


def test_a_layout_registered_in_one_module_is_found_everywhere(toy, tmp_path):
    root = _toy_root(tmp_path / "toy")
    assert "toy" in LAYOUTS and toy.name == "toy" and registered_layouts()[-1].name == "toy"
    refs = find_scenes(root, "toy", "train")
    assert [r.name for r in refs] == ["s0", "s1"] and all(r.layout == "toy" for r in refs)
    assert read_scene(refs[0])["segment"].tolist() == [0, 1] * 6
    ds = SceneDataset(root, layout="toy", split="val")
    item = ds[0]
    assert ds.class_names == list(TOY_CLASSES) and ds.features == ("height",)
    assert item["x"].shape == (12, 1) and item["y"].tolist() == [0, 1] * 6
    with pytest.raises(DatasetError, match=r"classes names 3 classes, but toy's labels are the 2 ids 0..1"):
        check_layout_classes("t", "toy", ["a", "b", "c"])
    # the converter writes it in the common layout, which reads it back with the same labels
    out = tmp_path / "common"
    convert_to_pointcept(root, "toy", out, splits=("train", "val"))
    back = SceneDataset(out, layout="pointcept", split="train", features=["height"])
    assert back.class_names == list(TOY_CLASSES) and back[0]["y"].tolist() == [0, 1] * 6
    # a single scan's ground truth is asked of it too
    scan = root / "val" / "s0.xyzl"
    np.savetxt(scan.with_suffix(".txt"), np.arange(12) % 2, fmt="%d")
    assert scan_label_path(scan) == scan.with_suffix(".txt")
    assert read_scan_labels(scan.with_suffix(".txt"), 12, TOY_CLASSES).tolist() == [0, 1] * 6


def test_an_unregistered_layout_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"find_scenes: unknown layout 'toy'; known: \['mmdet3d_s3dis', "):
        find_scenes(tmp_path, "toy", "train")
    with pytest.raises(UnknownNameError, match=r"unknown scene layout 'toy'; known scene layouts: mmdet3d_s3dis"):
        get_layout("toy")
    with pytest.raises(ValueError, match=r"layout must be one of"):
        SceneDataset(tmp_path, layout="toy")
    with pytest.raises(TypeError, match=r"'odd' must be a subclass of gridify.datasets.layouts.base.SceneLayout"):
        LAYOUTS.register("odd", dict)


def test_the_built_in_layouts_answer_for_themselves(tmp_path):
    """Each built-in layout says what was an if-chain before: its splits, lists, class ids and single scans."""
    assert listed_layouts() == ["scannet", "mmdet3d_scannet", "mmdet3d_scannet_instance"]
    assert [lay.name for lay in registered_layouts() if lay.named_splits] == ["pointcept"]
    assert [lay.name for lay in registered_layouts() if lay.ids_from_class_list] == ["s3dis"]
    assert [lay.name for lay in registered_layouts() if not lay.convertible] == ["pointcept"]
    assert get_layout("semantickitti").folder == "semantickitti/dataset"
    ref = SceneRef("Area_2_office_1", "mmdet3d_s3dis", tmp_path)
    assert get_layout("mmdet3d_s3dis").converted_place(ref, "all") == ("Area_2", "office_1")
    assert get_layout("semantickitti").converted_place(SceneRef("08_000000", "semantickitti", tmp_path), "all") == (
        "val",
        "08_000000",
    )
    # single scans: a Pointcept scene folder is one scan named by its folder; a KITTI sequence holds scans
    scene = tmp_path / "scene7"
    scene.mkdir()
    np.save(scene / "coord.npy", np.zeros((3, 3), np.float32))
    np.save(scene / "segment.npy", np.array([0, 1, IGNORE_INDEX]))
    assert folder_scan(scene) == scene / "coord.npy" and scan_name(scene / "coord.npy") == "scene7"
    assert scan_label_path(scene) == scan_label_path(scene / "coord.npy") == scene / "segment.npy"
    seq = tmp_path / "08"
    (seq / "velodyne").mkdir(parents=True)
    (seq / "labels").mkdir()
    (seq / "velodyne" / "000000.bin").write_bytes(b"\0" * 32)
    (seq / "labels" / "000000.label").write_bytes(b"\0" * 8)
    note, scans = scan_folder_note(seq)
    assert scans == seq / "velodyne" and note.startswith("a SemanticKITTI sequence folder; its scans are the .bin")
    assert folder_scan(seq) is None and scan_name(seq / "velodyne" / "000000.bin") == "000000"
    assert scan_label_path(seq / "velodyne" / "000000.bin") == seq / "labels" / "000000.label"


def test_the_single_scan_questions_are_asked_in_scan_order_not_import_order(tmp_path):
    """The built-in layouts are imported by module name; ``scan_order`` decides who answers a scan first
    (SemanticKITTI's ``labels/`` before Pointcept's ``segment.npy``), and a plugin's layout comes after them unless
    it says otherwise, ties kept in registration order."""
    names = [lay.name for lay in registered_layouts()]
    assert names[:2] == ["semantickitti", "pointcept"] and set(names) == set(LAYOUTS.names())

    class First(ToyLayout):
        scan_order = 0

    class Late(ToyLayout):
        scan_order = 100

    scan = tmp_path / "velodyne" / "000000.bin"
    scan.parent.mkdir()
    scan.write_bytes(b"\0" * 16)
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "000000.label").write_bytes(b"\0" * 4)
    scan.with_suffix(".txt").write_text("0\n")
    assert scan_label_path(scan) == tmp_path / "labels" / "000000.label"  # semantickitti answers
    LAYOUTS.register("toy_late", Late)
    LAYOUTS.register("toy_default", ToyLayout)
    LAYOUTS.register("toy_first", First)
    try:
        assert [lay.name for lay in registered_layouts()] == ["toy_first", *names, "toy_late", "toy_default"]
        assert scan_label_path(scan) == scan.with_suffix(".txt")  # toy_first answers before semantickitti
        First.scan_order = "0"
        with pytest.raises(TypeError, match=r"scene layout 'toy_first' \(.*First\): scan_order must be an integer"):
            registered_layouts()
    finally:
        for name in ("toy_late", "toy_default", "toy_first"):
            LAYOUTS.unregister(name)
    assert [lay.name for lay in registered_layouts()] == names
