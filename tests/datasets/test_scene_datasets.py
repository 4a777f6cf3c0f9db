"""Scene data in the field's layouts: readers, official label maps and splits, datasets, converters.

Small trees are generated here in every official layout (S3DIS Annotations text, ScanNet PLY pairs,
SemanticKITTI .bin/.label, Pointcept npy folders, mmdetection3d's processed files); the real files
in ../shared/data (30 SemanticKITTI scans, the forest plot in the S3DIS layout, mmdetection3d's
ScanNet/S3DIS/SemanticKITTI test data) are read when present and skipped otherwise.
"""

import struct
import warnings
from pathlib import Path


import numpy as np
import pytest
import torch

from gridify.cli import main as gridify_main
from gridify.datasets import DatasetError, ProceduralScenes, SceneDataset, collate_points, convert_to_pointcept
from gridify.datasets.scene_layouts import (
    IGNORE_INDEX,
    S3DIS_CLASSES,
    SCANNET20_CLASSES,
    SCANNET20_NYU40_IDS,
    SEMANTICKITTI_CLASSES,
    SEMANTICKITTI_LEARNING_MAP,
    find_scenes,
    map_nyu40_to_scannet20,
    map_semantickitti_labels,
    read_ply_vertices,
    read_s3dis_room,
    read_scene,
    read_semantickitti_scan,
)
from gridify.datasets.scenes import S3DIS, ScanNet, SemanticKITTI, write_pointcept_scene
from gridify.datasets.scene_base import build_scene_features, scene_height
from gridify.io import write_ply
from gridify.registry import DATASETS

RNG = np.random.default_rng(0)


# --------------------------------------------------------------------------------------
# generated trees
# --------------------------------------------------------------------------------------
def _rows(n, offset=0.0):
    xyz = RNG.uniform(-2, 2, (n, 3)).round(3) + offset
    rgb = RNG.integers(0, 256, (n, 3))
    return np.concatenate([xyz, rgb], 1)


def make_s3dis(root: Path):
    """Area_1/office_1 (ceiling, chair, stairs), Area_2/hall_1 (wall), Area_5/conf_1 (floor, clutter)."""
    rooms = {
        ("Area_1", "office_1"): {"ceiling_1": 5, "chair_1": 4, "chair_2": 3, "stairs_1": 2},
        ("Area_2", "hall_1"): {"wall_1": 6},
        ("Area_5", "conf_1"): {"floor_1": 4, "clutter_1": 2},
    }
    truth = {}
    for (area, room), objs in rooms.items():
        ann = root / area / room / "Annotations"
        ann.mkdir(parents=True)
        rows, labels = [], []
        for name, n in objs.items():
            r = _rows(n)
            np.savetxt(ann / f"{name}.txt", r, fmt="%.3f %.3f %.3f %d %d %d")
            cls = name.rsplit("_", 1)[0]
            rows.append(r)
            labels.append(np.full(n, S3DIS_CLASSES.index(cls) if cls in S3DIS_CLASSES else -1))
        (root / area / room / f"{room}.txt").write_text("whole room file, not read\n")
        order = sorted(objs)  # files are read in sorted order
        idx = [list(objs).index(o) for o in order]
        truth[f"{area}_{room}"] = (np.concatenate([rows[i] for i in idx]), np.concatenate([labels[i] for i in idx]))
    return truth


def _scannet_mesh_bytes(xyz, rgb, faces):
    """A ScanNet-like binary PLY: x y z float, red green blue alpha uchar, then a face list."""
    head = (
        f"ply\nformat binary_little_endian 1.0\ncomment handwritten\nelement vertex {len(xyz)}\n"
        "property float x\nproperty float y\nproperty float z\nproperty uchar red\nproperty uchar green\n"
        f"property uchar blue\nproperty uchar alpha\nelement face {len(faces)}\n"
        "property list uchar int vertex_indices\nend_header\n"
    ).encode()
    body = b"".join(struct.pack("<fffBBBB", *p, *c, 255) for p, c in zip(xyz.tolist(), rgb.tolist()))
    body += b"".join(struct.pack("<Biii", 3, *f) for f in faces)
    return head + body


def make_scannet(root: Path):
    """scans/scene0000_00 (mesh PLY by hand, labels via write_ply), scans/scene0001_00, scans_test/scene0707_00."""
    nyu = np.array([1, 2, 13, 39, 40, 0, 5, 36, 24, 3])
    truth = {}
    for name, folder, labelled in (
        ("scene0000_00", "scans", True),
        ("scene0001_00", "scans", True),
        ("scene0707_00", "scans_test", False),
    ):
        d = root / folder / name
        d.mkdir(parents=True)
        xyz = RNG.uniform(0, 3, (len(nyu), 3)).astype(np.float32)
        rgb = RNG.integers(0, 256, (len(nyu), 3))
        (d / f"{name}_vh_clean_2.ply").write_bytes(_scannet_mesh_bytes(xyz, rgb, [(0, 1, 2), (2, 3, 4)]))
        if labelled:  # one binary, one ascii
            write_ply(d / f"{name}_vh_clean_2.labels.ply", xyz, labels=nyu, binary=name.startswith("scene0000"))
        truth[name] = (xyz, rgb, map_nyu40_to_scannet20(nyu) if labelled else np.full(len(nyu), -1))
    (root / "scannetv2_train.txt").write_text("scene0000_00\n")
    (root / "scannetv2_val.txt").write_text("scene0001_00\n")
    return truth


def make_kitti(root: Path, sequences=("00", "03", "08", "11"), frames=2):
    raw_ids = np.array([0, 1, 10, 252, 40, 60, 52, 99, 81, 259, 70, 999, 44, 30, 254], np.uint32)
    truth = {}
    for seq in sequences:
        for f in range(frames):
            scan = RNG.normal(size=(len(raw_ids), 4)).astype(np.float32)
            stem = f"{f:06d}"
            (root / "sequences" / seq / "velodyne").mkdir(parents=True, exist_ok=True)
            scan.tofile(root / "sequences" / seq / "velodyne" / f"{stem}.bin")
            if int(seq) <= 10:
                (root / "sequences" / seq / "labels").mkdir(parents=True, exist_ok=True)
                inst = RNG.integers(0, 50, len(raw_ids)).astype(np.uint32)
                (raw_ids | (inst << 16)).tofile(root / "sequences" / seq / "labels" / f"{stem}.label")
            truth[f"{seq}_{stem}"] = scan
    return truth, raw_ids


# --------------------------------------------------------------------------------------
# label maps
# --------------------------------------------------------------------------------------
def test_label_maps_follow_the_official_definitions():
    assert len(S3DIS_CLASSES) == 13 and len(SCANNET20_CLASSES) == 20 == len(SCANNET20_NYU40_IDS)
    assert len(SEMANTICKITTI_CLASSES) == 19
    assert sorted(set(SEMANTICKITTI_LEARNING_MAP.values()) - {-1}) == list(range(19))
    raw = np.array([0, 1, 10, 13, 16, 60, 52, 99, 252, 253, 254, 255, 256, 257, 258, 259, 81, 1234], np.uint32)
    got = map_semantickitti_labels(raw | (7 << 16))  # instance ids in the high bits are dropped
    name = {i: c for i, c in enumerate(SEMANTICKITTI_CLASSES)}
    assert [name.get(int(g), "ignore") for g in got] == [
        "ignore",
        "ignore",
        "car",
        "other-vehicle",
        "other-vehicle",
        "road",
        "ignore",
        "ignore",
        "car",
        "bicyclist",
        "person",
        "motorcyclist",
        "other-vehicle",
        "other-vehicle",
        "truck",
        "other-vehicle",
        "traffic-sign",
        "ignore",
    ]
    got = map_nyu40_to_scannet20(np.array([1, 2, 14, 16, 24, 28, 33, 34, 36, 39, 13, 15, 40, 0, -3, 1000]))
    assert got.tolist() == [0, 1, 12, 13, 14, 15, 16, 17, 18, 19, -1, -1, -1, -1, -1, -1]
    assert SCANNET20_CLASSES[got[9]] == "otherfurniture" and IGNORE_INDEX == -1


# --------------------------------------------------------------------------------------
# S3DIS
# --------------------------------------------------------------------------------------
def test_s3dis_generated_rooms_labels_and_area5_split(tmp_path):
    truth = make_s3dis(tmp_path)
    assert [r.name for r in find_scenes(tmp_path, "s3dis", "train")] == ["Area_1_office_1", "Area_2_hall_1"]
    assert [r.name for r in find_scenes(tmp_path, "s3dis", "val")] == ["Area_5_conf_1"]
    assert [r.name for r in find_scenes(tmp_path, "s3dis", "test", test_area=2)] == ["Area_2_hall_1"]
    ds = S3DIS(tmp_path, "train")
    assert len(ds) == 2 and ds.num_classes == 13 and ds.features == ("color",)
    for i in range(len(ds)):
        item = ds[i]
        rows, labels = truth[item["scene"]]
        np.testing.assert_allclose(item["pos"].numpy(), rows[:, :3], atol=1e-5)
        np.testing.assert_allclose(item["x"].numpy(), rows[:, 3:] / 255.0, atol=1e-6)
        assert item["y"].dtype == torch.int64 and item["y"].tolist() == labels.tolist()
    assert -1 in ds[0]["y"].tolist()  # stairs: not an S3DIS class -> ignored
    room = read_s3dis_room(tmp_path / "Area_1" / "office_1", unknown="clutter")
    assert (room["segment"] == S3DIS_CLASSES.index("clutter")).sum() == 2
    with pytest.raises(DatasetError, match="stairs"):
        read_s3dis_room(tmp_path / "Area_1" / "office_1", unknown="error")


def test_s3dis_malformed_line_is_named_by_file_and_line(tmp_path):
    make_s3dis(tmp_path)
    bad = tmp_path / "Area_2" / "hall_1" / "Annotations" / "wall_1.txt"
    lines = bad.read_text().splitlines()
    lines[2] = "1.0 2.0 3.0 10\x1000 20 30"  # the raw release's stray control character
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"wall_1\.txt:3: .*not a number"):
        read_s3dis_room(tmp_path / "Area_2" / "hall_1")
    lines[2] = "1.0 2.0 3.0 10 20"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"scene 'Area_2_hall_1'.*wall_1\.txt:3: expected 6 numbers"):
        S3DIS(tmp_path, "train")[1]


# --------------------------------------------------------------------------------------
# ScanNet
# --------------------------------------------------------------------------------------
def test_scannet_generated_ply_pairs_nyu40_to_20_classes_and_splits(tmp_path):
    truth = make_scannet(tmp_path)
    ds = ScanNet(tmp_path, "train")
    assert [r.name for r in ds.refs] == ["scene0000_00"] and ds.num_classes == 20
    assert [r.name for r in ScanNet(tmp_path, "val").refs] == ["scene0001_00"]
    for split, name in (("train", "scene0000_00"), ("test", "scene0707_00")):
        item = ScanNet(tmp_path, split)[0]
        xyz, rgb, seg = truth[name]
        np.testing.assert_allclose(item["pos"].numpy(), xyz, atol=1e-6)
        np.testing.assert_allclose(item["color"].numpy(), rgb, atol=1e-6)
        assert item["y"].tolist() == seg.tolist()
    assert ScanNet(tmp_path, "train")[0]["y"].tolist()[:6] == [0, 1, -1, 19, -1, -1]
    verts = read_ply_vertices(tmp_path / "scans" / "scene0000_00" / "scene0000_00_vh_clean_2.ply")
    assert set(verts) == {"x", "y", "z", "red", "green", "blue", "alpha"} and len(verts["x"]) == 10
    ascii_labels = read_ply_vertices(tmp_path / "scans" / "scene0001_00" / "scene0001_00_vh_clean_2.labels.ply")
    assert ascii_labels["label"].dtype == np.int32 and ascii_labels["label"][:3].tolist() == [1, 2, 13]


def test_scannet_errors_name_the_files(tmp_path):
    make_scannet(tmp_path)
    d = tmp_path / "scans" / "scene0000_00"
    write_ply(d / "scene0000_00_vh_clean_2.labels.ply", np.zeros((4, 3)), labels=np.ones(4))
    with pytest.raises(DatasetError, match=r"labels\.ply.*4 labelled vertices.*vh_clean_2\.ply has 10"):
        ScanNet(tmp_path, "train")[0]
    mesh = d / "scene0000_00_vh_clean_2.ply"
    mesh.write_bytes(mesh.read_bytes()[:300])  # truncated
    with pytest.raises(DatasetError, match="truncated PLY"):
        read_ply_vertices(mesh)
    (tmp_path / "scannetv2_val.txt").unlink()
    with pytest.raises(DatasetError, match="scannetv2_val.txt"):
        ScanNet(tmp_path, "val")


# --------------------------------------------------------------------------------------
# SemanticKITTI
# --------------------------------------------------------------------------------------
def test_semantickitti_generated_learning_map_and_sequence_splits(tmp_path):
    truth, raw_ids = make_kitti(tmp_path)
    ds = SemanticKITTI(tmp_path, "train")
    assert [r.name for r in ds.refs] == ["00_000000", "00_000001", "03_000000", "03_000001"]
    assert [r.name for r in SemanticKITTI(tmp_path, "val").refs] == ["08_000000", "08_000001"]
    assert [r.name for r in SemanticKITTI(tmp_path, "train", sequences=[3]).refs] == ["03_000000", "03_000001"]
    item = ds[0]
    scan = truth["00_000000"]
    np.testing.assert_array_equal(item["pos"].numpy(), scan[:, :3])
    np.testing.assert_array_equal(item["x"].numpy(), scan[:, 3:])  # remission
    assert item["y"].tolist() == map_semantickitti_labels(raw_ids).tolist()
    assert item["y"].tolist()[:8] == [-1, -1, 0, 0, 8, 8, -1, -1]
    test = SemanticKITTI(tmp_path, "test")  # sequence 11: no labels -> all ignored
    assert [r.name for r in test.refs] == ["11_000000", "11_000001"] and set(test[0]["y"].tolist()) == {-1}


def test_semantickitti_size_mismatch_names_both_files(tmp_path):
    make_kitti(tmp_path, sequences=("00",), frames=1)
    lab = tmp_path / "sequences" / "00" / "labels" / "000000.label"
    lab.write_bytes(lab.read_bytes()[:-8])
    with pytest.raises(DatasetError, match=r"000000\.label: 13 labels but .*000000\.bin holds 15 points"):
        read_semantickitti_scan(tmp_path / "sequences/00/velodyne/000000.bin", lab)
    (tmp_path / "sequences/00/velodyne/000000.bin").write_bytes(b"\0" * 10)
    with pytest.raises(DatasetError, match=r"000000\.bin: 10 bytes is not a whole number"):
        SemanticKITTI(tmp_path, "train")[0]


def test_a_labelled_split_warns_of_a_scene_without_a_labelled_point(tmp_path):
    make_kitti(tmp_path, sequences=("00",), frames=2)
    (tmp_path / "sequences/00/labels/000001.label").unlink()  # a label file lost
    labels = tmp_path / "sequences/00/labels/000000.label"
    np.full(15, 77777, np.uint32).tofile(labels)  # codes outside the learning map (e.g. ids of another map)
    ds = SemanticKITTI(tmp_path, "train")
    for i, name in enumerate(["00_000000", "00_000001"]):
        with pytest.warns(UserWarning, match=rf"scene '{name}'.*none of its 15 points is labelled.*train loss"):
            assert set(ds.scene(i)["segment"].tolist()) == {-1}
    make_kitti(tmp_path, sequences=("11",), frames=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the test split has no labels by design: no warning
        assert set(SemanticKITTI(tmp_path, "test").scene(0)["segment"].tolist()) == {-1}


# --------------------------------------------------------------------------------------
# Pointcept (the common layout) and mmdetection3d's layout
# --------------------------------------------------------------------------------------
def test_pointcept_generated_folders_missing_labels_and_bad_files(tmp_path):
    coord = RNG.normal(size=(20, 3)).astype(np.float32)
    write_pointcept_scene(
        tmp_path / "train" / "a",
        {
            "coord": coord,
            "color": np.full((20, 3), 255.0),
            "normal": np.tile([0, 0, 1.0], (20, 1)),
            "segment": np.arange(20) % 4,
        },
    )
    write_pointcept_scene(tmp_path / "train" / "b", {"coord": coord[:7]})
    (tmp_path / "classes.txt").write_text("a\nb\nc\nd\n")
    ds = SceneDataset(tmp_path, "pointcept", "train", features=("xyz", "color", "normal", "height"))
    assert ds.class_names == ["a", "b", "c", "d"] and ds.in_channels == 10
    with pytest.warns(UserWarning, match=r"scene 'b' .*none of its 7 points is labelled"):
        a, b = ds[0], SceneDataset(tmp_path, "pointcept", "train", features=("xyz", "height"))[1]
    assert a["x"].shape == (20, 10) and torch.allclose(a["x"][:, 3:6], torch.ones(20, 3))
    z7 = b["pos"][:, 2].numpy()
    assert b["x"].shape == (7, 4)
    torch.testing.assert_close(b["x"][:, 3], torch.from_numpy(z7 - np.float32(np.percentile(z7, 1.0))))
    assert a["y"].tolist() == (np.arange(20) % 4).tolist() and b["y"].tolist() == [-1] * 7
    # an xyz-only scene under a recipe with colours: the fix is the config key and the colourless recipe
    with pytest.raises(
        DatasetError,
        match=r"scene 'b' \(.*train/b\): feature 'color' .* has no color .*set "
        r"data\.features without it \(e\.g\. \[height\]: the scene_pointcept recipe\)",
    ):
        SceneDataset(tmp_path, "pointcept", "train", features=("color",))[1]
    batch = collate_points(
        [a, SceneDataset(tmp_path, "pointcept", "train", features=("xyz", "color", "normal", "height"))[0]]
    )
    assert batch["pos"].shape == (40, 3) and batch["scene"] == ["a", "a"] and batch["y"].shape == (40,)
    bad = tmp_path / "train" / "b" / "normal.npy"
    np.save(bad, np.zeros((1000, 3), np.float32))
    bad.write_bytes(bad.read_bytes()[:200])  # the header promises 1000 rows
    with pytest.raises(DatasetError, match=r"b/normal\.npy: not a readable \.npy array"):
        SceneDataset(tmp_path, "pointcept", "train", features=())[1]
    bad.unlink()
    np.save(tmp_path / "train" / "b" / "segment20.npy", np.full(7, 3, np.int16))  # Pointcept's ScanNet name
    assert SceneDataset(tmp_path, "pointcept", "train", features=())[1]["y"].tolist() == [3] * 7
    np.save(tmp_path / "train" / "b" / "segment.npy", np.zeros(6, np.int64))
    with pytest.raises(DatasetError, match=r"b/segment\.npy: expected \[7\] integers"):
        SceneDataset(tmp_path, "pointcept", "train", features=())[1]
    sub = SceneDataset(tmp_path, "pointcept", "train", num_points=5, scenes=["a"])
    assert len(sub) == 1 and sub[0]["pos"].shape == (5, 3) and sub[0]["x"].shape == (5, 3)
    with pytest.raises(DatasetError, match="not found"):
        SceneDataset(tmp_path, "pointcept", "train", scenes=["zzz"])


def test_mmdet3d_generated_layouts(tmp_path):
    for sub, name, labels in (
        ("scannet", "scene0000_00", np.array([1, 40, 39, 0])),
        ("s3dis", "Area_1_office_2", np.array([0, 12, 5, 13])),
    ):
        (tmp_path / sub / "points").mkdir(parents=True)
        (tmp_path / sub / "semantic_mask").mkdir()
        _rows(4).astype(np.float32).tofile(tmp_path / sub / "points" / f"{name}.bin")
        labels.astype(np.int64).tofile(tmp_path / sub / "semantic_mask" / f"{name}.bin")
    assert SceneDataset(tmp_path / "scannet", "mmdet3d_scannet", "all")[0]["y"].tolist() == [0, -1, 19, -1]
    assert SceneDataset(tmp_path / "s3dis", "mmdet3d_s3dis", "train")[0]["y"].tolist() == [0, 12, 5, -1]
    inst = tmp_path / "scannet" / "scannet_train_instance_data"
    inst.mkdir()
    np.save(inst / "scene0000_00_vert.npy", _rows(3).astype(np.float32))
    np.save(inst / "scene0000_00_sem_label.npy", np.array([2, 9, 11], np.uint32))
    item = SceneDataset(tmp_path / "scannet", "mmdet3d_scannet_instance", "all")[0]
    assert item["y"].tolist() == [1, 8, 10] and item["x"].shape == (3, 3)
    written = convert_to_pointcept(tmp_path / "s3dis", "mmdet3d_s3dis", tmp_path / "pc")
    assert [p.relative_to(tmp_path / "pc").as_posix() for p in written] == ["Area_1/office_2"]
    _same_scenes(SceneDataset(tmp_path / "s3dis", "mmdet3d_s3dis", "train"), tmp_path / "pc", "train")
    convert_to_pointcept(tmp_path / "scannet", "mmdet3d_scannet_instance", tmp_path / "pc_inst")
    _same_scenes(SceneDataset(tmp_path / "scannet", "mmdet3d_scannet_instance", "all"), tmp_path / "pc_inst", "all")
    (tmp_path / "s3dis" / "semantic_mask" / "Area_1_office_2.bin").write_bytes(b"\0" * 24)
    with pytest.raises(DatasetError, match=r"semantic_mask/Area_1_office_2\.bin: 24 bytes, but .*4 points"):
        SceneDataset(tmp_path / "s3dis", "mmdet3d_s3dis", "all")[0]


# --------------------------------------------------------------------------------------
# converters: raw -> common layout -> the same points and labels
# --------------------------------------------------------------------------------------
def _same_scenes(raw: SceneDataset, converted_root: Path, split):
    conv = SceneDataset(converted_root, "pointcept", split, features=raw.features)
    assert len(conv) == len(raw)
    for i in range(len(raw)):
        a, b = raw[i], conv[i]
        assert a["scene"].endswith(b["scene"].split("/")[-1])
        for k in ("pos", "x", "y"):
            torch.testing.assert_close(a[k], b[k])
    return conv


def test_convert_s3dis_scannet_kitti_round_trip(tmp_path):
    make_s3dis(tmp_path / "s3dis")
    out = tmp_path / "pc_s3dis"
    written = convert_to_pointcept(tmp_path / "s3dis", "s3dis", out)
    assert [p.relative_to(out).as_posix() for p in written] == ["Area_1/office_1", "Area_2/hall_1", "Area_5/conf_1"]
    assert (out / "classes.txt").read_text().split("\n")[:2] == ["ceiling", "floor"]
    assert np.load(out / "Area_1" / "office_1" / "color.npy").dtype == np.uint8
    conv = _same_scenes(S3DIS(tmp_path / "s3dis", "train"), out, "train")  # Area_N folders, Area 5 held out
    assert conv.class_names == list(S3DIS_CLASSES)
    _same_scenes(S3DIS(tmp_path / "s3dis", "val"), out, "val")
    make_scannet(tmp_path / "scannet")
    convert_to_pointcept(tmp_path / "scannet", "scannet", tmp_path / "pc_scannet", splits=("train", "val", "test"))
    for split in ("train", "val", "test"):
        _same_scenes(ScanNet(tmp_path / "scannet", split), tmp_path / "pc_scannet", split)
    make_kitti(tmp_path / "kitti")
    calls = []
    convert_to_pointcept(
        tmp_path / "kitti", "semantickitti", tmp_path / "pc_kitti", progress=lambda *a: calls.append(a)
    )
    assert sorted(p.name for p in (tmp_path / "pc_kitti").iterdir()) == [
        "classes.txt",
        "conversion.json",
        "test",
        "train",
        "val",
    ]
    assert len(calls) == 8 and calls[-1][:2] == (8, 8)
    for split in ("train", "val", "test"):
        _same_scenes(SemanticKITTI(tmp_path / "kitti", split), tmp_path / "pc_kitti", split)
    first = (tmp_path / "pc_kitti" / "train" / "00_000000" / "coord.npy").stat().st_mtime_ns
    convert_to_pointcept(tmp_path / "kitti", "semantickitti", tmp_path / "pc_kitti")  # resumes: nothing rewritten
    assert (tmp_path / "pc_kitti" / "train" / "00_000000" / "coord.npy").stat().st_mtime_ns == first
    assert (
        gridify_main(
            [
                "convert",
                str(tmp_path / "kitti"),
                "--layout",
                "semantickitti",
                "--out",
                str(tmp_path / "pc2"),
                "--sequences",
                "08",
                "--quiet",
            ]
        )
        == 0
    )
    assert sorted(p.name for p in (tmp_path / "pc2" / "val").iterdir()) == ["08_000000", "08_000001"]
    with pytest.raises(SystemExit, match="does not exist"):
        gridify_main(["convert", str(tmp_path / "nothing"), "--layout", "s3dis", "--out", str(tmp_path / "pc3")])


def test_registry_names_and_errors(tmp_path):
    for name in ("scene", "s3dis", "scannet", "semantickitti", "scene_procedural"):
        assert DATASETS.get(name) is not None
    with pytest.raises(ValueError, match="layout"):
        SceneDataset(tmp_path, "nope")
    with pytest.raises(DatasetError, match="no such folder"):
        SceneDataset(tmp_path / "missing", "s3dis")
    with pytest.raises(DatasetError, match="no s3dis scenes"):
        SceneDataset(tmp_path, "s3dis")
    with pytest.raises(ValueError, match="features"):
        SceneDataset(tmp_path, "s3dis", features=("rgb",))


# --------------------------------------------------------------------------------------
# the real files in ../shared/data (skipped when absent)
# --------------------------------------------------------------------------------------
def test_semantickitti_mini_real_30_scans(shared_data):
    root = shared_data / "semantickitti_mini" / "dataset"
    if not root.is_dir():
        pytest.skip("semantickitti_mini not in the shared data")
    ds = SceneDataset(root, "semantickitti", "all")
    assert len(ds) == 30 and len({r.name.split("_")[0] for r in ds.refs}) == 10
    seen = set()
    for i in range(len(ds)):
        scene = ds.scene(i)
        seg = scene["segment"]
        assert 120_000 <= len(seg) <= 130_000 and scene["coord"].dtype == np.float32
        assert seg.min() >= -1 and seg.max() <= 18
        seen |= set(np.unique(seg).tolist())
    assert {-1, 0, 8, 10, 12, 14} <= seen  # unlabelled, car, road, sidewalk, building, vegetation
    train = SemanticKITTI(root, "train", sequences=["00", "01", "02", "03", "04", "05", "06", "07", "09"])
    val = SemanticKITTI(root, "val", sequences=["10"])
    assert len(train) == 27 and len(val) == 3 and not {r.name for r in train.refs} & {r.name for r in val.refs}
    # 00-07, 09, 10 are the official training sequences
    assert [r.name for r in SemanticKITTI(root, "train").refs] == [r.name for r in ds.refs]
    with pytest.raises(DatasetError, match="no semantickitti scenes"):
        SemanticKITTI(root, "val")  # sequence 08 is not in the mini set


def test_forest_plot_real_in_s3dis_layout(shared_data, tmp_path):
    root = shared_data / "forest_s3dis_layout" / "Stanford3dDataset_v1.2_Aligned_Version"
    if not root.is_dir():
        pytest.skip("forest_s3dis_layout not in the shared data")
    ds = SceneDataset(root, "s3dis", "all", classes=("tree", "ground", "clutter"))
    assert [r.name for r in ds.refs] == ["Area_1_Park_2"]
    scene = ds.scene(0)
    assert len(scene["coord"]) == 387_109 and np.unique(scene["instance"]).size == 28
    assert np.unique(scene["segment"]).tolist() == [0, 1, 2]
    assert scene["color"].min() >= 0 and scene["color"].max() <= 255
    default = S3DIS(root, "train").scene(0)  # the 13 S3DIS classes: only clutter is one of them
    assert set(np.unique(default["segment"]).tolist()) == {-1, S3DIS_CLASSES.index("clutter")}


def test_mmdet3d_real_scans(shared_data):
    data = shared_data / "scans" / "mmdet3d_real_scans" / "tests" / "data"
    if not data.is_dir():
        pytest.skip("mmdet3d_real_scans not in the shared data")
    ds = SceneDataset(data / "scannet", "mmdet3d_scannet_instance", "all")
    assert [r.name for r in ds.refs] == ["scene0000_00", "scene0000_01", "scene0000_02"]
    sizes = []
    for i in range(3):
        scene = ds.scene(i)
        seg = scene["segment"]
        sizes.append(len(seg))
        raw = np.load(ds.refs[i].label_path)
        assert seg.tolist() == map_nyu40_to_scannet20(raw).tolist() and seg.max() <= 19
        assert (seg >= 0).mean() > 0.6 and scene["color"].max() > 1  # the rest: unannotated or not a benchmark class
    assert sizes == [81_369, 80_583, 86_001]
    pts = SceneDataset(data / "scannet", "mmdet3d_scannet", "all")[0]
    assert pts["pos"].shape == (100, 3) and pts["y"].max() <= 19
    s3 = SceneDataset(data / "s3dis", "mmdet3d_s3dis", "train")[0]
    assert s3["scene"] == "Area_1_office_2" and s3["y"].min() >= 0 and s3["y"].max() <= 12
    kitti = SceneDataset(data / "semantickitti", "semantickitti", "all")
    item = kitti[0]
    raw = np.fromfile(kitti.refs[0].label_path, np.uint32)
    assert item["pos"].shape == (124_668, 3) and item["y"].tolist() == map_semantickitti_labels(raw).tolist()
    assert read_scene(kitti.refs[0])["strength"].shape == (124_668, 1)


def test_height_feature_is_scene_relative_in_training_crops():
    kw = dict(num_scenes=1, num_points=6000, kind="indoor", seed=1, features=("height",))
    train = ProceduralScenes("train", voxel_size=0.1, max_points=600, **kw)
    full = train.scene(0)
    floor = float(np.percentile(full["coord"][:, 2].astype(np.float32), 1.0))
    item = train[0]
    # the crop's own lowest point need not be the floor's lowest: height is z - the whole scene's floor
    torch.testing.assert_close(item["x"][:, 0], item["pos"][:, 2] - floor)
    assert "height" not in item
    whole = ProceduralScenes("val", voxel_size=0.1, max_points=600, **kw)[0]
    z = whole["pos"][:, 2].numpy()
    torch.testing.assert_close(whole["x"][:, 0], torch.from_numpy(z - np.float32(np.percentile(z, 1.0))))


def test_height_ignores_stray_returns_below_the_ground():
    # a LiDAR scan's multipath returns lie metres under the road: they must not shift the heights
    rng = np.random.default_rng(0)
    ground = np.c_[rng.uniform(-20, 20, (2000, 2)), rng.normal(-1.7, 0.02, 2000)]
    pole = np.c_[np.zeros((200, 2)), np.linspace(-1.7, 3.0, 200)]
    clean = np.concatenate([ground, pole]).astype(np.float32)
    noisy = np.concatenate([clean, [[5.0, 5.0, -28.0], [6.0, 1.0, -12.0]]]).astype(np.float32)
    h_clean = scene_height(clean[:, 2])
    h_noisy = scene_height(noisy[:, 2])[: len(clean)]
    assert abs(float(np.median(h_clean[:2000]))) < 0.1  # the ground sits near height 0
    np.testing.assert_allclose(h_noisy, h_clean, atol=0.02)  # two stray points move nothing
    assert h_clean.max() == pytest.approx(4.7, abs=0.1)  # the pole's top above the ground
    x = build_scene_features(["height"], noisy)
    np.testing.assert_array_equal(x[:, 0], scene_height(noisy[:, 2]))
    assert scene_height(np.zeros(0, np.float32)).shape == (0,)


def test_scene_dataset_train_crops_val_whole_scenes():
    kw = dict(num_scenes=2, num_points=6000, kind="indoor", seed=1)
    train = ProceduralScenes("train", voxel_size=0.1, max_points=1500, **kw)
    full = train.scene(0)
    item = train[0]
    assert len(item["pos"]) <= 1500 and item["x"].shape == (len(item["pos"]), 3)
    # labels follow their points: every kept point is a point of the scene with its label
    key = {tuple(p): int(y) for p, y in zip(full["coord"].tolist(), full["segment"].tolist())}
    assert all(key[tuple(p)] == int(y) for p, y in zip(item["pos"].tolist(), item["y"].tolist()))
    cells = np.floor(item["pos"].numpy().astype(np.float64) / 0.1)
    assert len(np.unique(cells, axis=0)) == len(cells)  # at most one point per voxel
    again = ProceduralScenes("train", voxel_size=0.1, max_points=1500, **kw)[0]
    torch.testing.assert_close(item["pos"], again["pos"])  # seeded
    val = ProceduralScenes("val", voxel_size=0.1, max_points=1500, **kw)
    whole = val[1]
    np.testing.assert_array_equal(whole["pos"].numpy(), val.scene(1)["coord"])
    np.testing.assert_array_equal(whole["y"].numpy(), val.scene(1)["segment"])
    counts = val.label_counts()
    expect = sum(np.bincount(val.scene(i)["segment"], minlength=val.num_classes) for i in range(2))
    np.testing.assert_array_equal(counts, expect)
    assert counts.dtype == np.int64 and counts.shape == (val.num_classes,)
    with pytest.raises(ValueError, match="voxel_size must be a positive finite number or None"):
        ProceduralScenes("train", voxel_size=-1.0, **kw)
    with pytest.raises(ValueError, match="max_points must be a positive integer or None"):
        ProceduralScenes("train", max_points=0, **kw)


@pytest.mark.parametrize("layout", ["pointcept", "semantickitti"])
def test_scene_readers_drop_nan_rows_with_a_count_naming_the_scene(tmp_path, layout):
    rng = np.random.default_rng(0)
    coord = rng.uniform(-5, 5, (50, 3)).astype(np.float32)
    coord[[3, 7]] = np.nan
    strength = rng.uniform(0, 1, (50, 1)).astype(np.float32)
    strength[11] = np.inf
    if layout == "pointcept":
        (tmp_path / "classes.txt").write_text("a\nb\n")
        write_pointcept_scene(
            tmp_path / "train" / "s", {"coord": coord, "strength": strength, "segment": rng.integers(0, 2, 50)}
        )
        ds = SceneDataset(tmp_path, "pointcept", "train", features=["strength"])
    else:
        seq = tmp_path / "sequences" / "00"
        (seq / "velodyne").mkdir(parents=True)
        (seq / "labels").mkdir()
        np.concatenate([coord, strength], 1).astype("<f4").tofile(seq / "velodyne" / "000000.bin")
        np.full(50, 40, np.uint32).tofile(seq / "labels" / "000000.label")
        ds = SemanticKITTI(tmp_path, "train", sequences=["00"], features=["strength"])
    with pytest.warns(
        UserWarning, match=r"dropped 3 of 50 points with NaN/Inf coordinates or features \(first: row 3\)"
    ) as rec:
        item = ds[0]
    assert item["pos"].shape == (47, 3) and item["y"].shape == (47,) and torch.isfinite(item["x"]).all()
    assert [w.filename for w in rec if "dropped 3" in str(w.message)] == [__file__]  # the user's line


def test_scene_lists_decode_boms_and_missing_things_are_named_as_such(tmp_path):
    coord = np.random.default_rng(1).normal(size=(20, 3)).astype(np.float32)
    write_pointcept_scene(tmp_path / "train" / "a", {"coord": coord, "segment": np.arange(20) % 2})
    with pytest.raises(DatasetError, match=r"no class list for .*classes.txt \(gridify convert does\), or pass them"):
        SceneDataset(tmp_path, "pointcept", "train")
    (tmp_path / "classes.txt").write_bytes("\ufeffceiling\nfloor\n".encode("utf-8"))
    assert SceneDataset(tmp_path, "pointcept", "train").class_names == ["ceiling", "floor"]
    (tmp_path / "classes.txt").write_bytes("ceiling\r\nfloor\r\n".encode("utf-16"))
    assert SceneDataset(tmp_path, "pointcept", "train").class_names == ["ceiling", "floor"]
    seq = tmp_path / "k" / "sequences" / "00" / "velodyne"
    seq.mkdir(parents=True)
    np.zeros((5, 4), "<f4").tofile(seq / "000000.bin")
    with pytest.raises(DatasetError, match=r"sequence\(s\) \['07'\] not found .*this root has \['00'\]"):
        SemanticKITTI(tmp_path / "k", "train", sequences=["7"])


# --------------------------------------------------------------------------------------
# counts and dtypes that lie: a PLY count below its data, float labels (one check for every layout)
# --------------------------------------------------------------------------------------
def test_ply_vertex_count_below_the_data_is_refused_naming_both_counts(tmp_path):
    head = "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
    f = tmp_path / "short.ply"
    f.write_text(head + "end_header\n" + "".join(f"{i} 0 0\n" for i in range(5)))
    with pytest.raises(
        DatasetError,
        match=r"short\.ply: PLY header declares 3 vertices but the data holds 5 data "
        r"lines",
    ):
        read_ply_vertices(f)
    faces = tmp_path / "mesh.ply"  # the lines of a later element (faces) are not vertices
    faces.write_text(
        head
        + "element face 1\nproperty list uchar int vertex_indices\nend_header\n"
        + "".join(f"{i} 0 0\n" for i in range(3))
        + "3 0 1 2\n"
    )
    assert read_ply_vertices(faces)["x"].tolist() == [0, 1, 2]
    faces.write_text(faces.read_text() + "7 7 7\n")
    with pytest.raises(DatasetError, match=r"declares 3 vertices but the data holds 4 data lines besides 1"):
        read_ply_vertices(faces)
    binary = tmp_path / "short_bin.ply"
    binary.write_bytes(
        b"ply\nformat binary_little_endian 1.0\nelement vertex 2\nproperty float x\nproperty float y\n"
        b"property float z\nend_header\n" + np.arange(12, dtype="<f4").tobytes()
    )
    with pytest.raises(DatasetError, match=r"declares 2 vertices but the data holds 4 records of 12 bytes"):
        read_ply_vertices(binary)


def _float_label_scene(tmp_path: Path, layout: str, labels: np.ndarray):
    """A one-scene tree of ``layout`` whose label file holds ``labels`` as float32; its dataset's first item."""
    xyz = RNG.uniform(0, 3, (len(labels), 3)).astype(np.float32)
    if layout == "pointcept":
        (tmp_path / "train" / "s").mkdir(parents=True)
        (tmp_path / "classes.txt").write_text("\n".join(f"c{i}" for i in range(20)) + "\n")
        np.save(tmp_path / "train" / "s" / "segment.npy", labels)
        np.save(tmp_path / "train" / "s" / "coord.npy", xyz)
        return SceneDataset(tmp_path, "pointcept", "train", features=())[0]
    if layout == "mmdet3d_scannet_instance":
        d = tmp_path / "scannet_train_instance_data"
        d.mkdir(parents=True)
        np.save(d / "scene0000_00_vert.npy", np.hstack([xyz, np.zeros_like(xyz)]))
        np.save(d / "scene0000_00_sem_label.npy", labels)
        return SceneDataset(tmp_path, layout, "all", features=())[0]
    d = tmp_path / "scans" / "scene0000_00"  # scannet: a float 'label' property in the labels PLY
    d.mkdir(parents=True)
    (d / "scene0000_00_vh_clean_2.ply").write_bytes(_scannet_mesh_bytes(xyz, np.zeros((len(xyz), 3), int), []))
    head = (
        f"ply\nformat ascii 1.0\nelement vertex {len(xyz)}\nproperty float x\nproperty float y\n"
        f"property float z\nproperty float label\nend_header\n"
    )
    rows = "".join(f"{a} {b} {c} {lab}\n" for (a, b, c), lab in zip(xyz.tolist(), labels.tolist()))
    (d / "scene0000_00_vh_clean_2.labels.ply").write_text(head + rows)
    return ScanNet(tmp_path, "all", features=())[0]


@pytest.mark.parametrize("layout", ["pointcept", "mmdet3d_scannet_instance", "scannet"])
def test_float_labels_are_refused_alike_in_every_layout(tmp_path, layout):
    """A fractional label is refused naming the file and the row (it was truncated to an id in two layouts while
    Pointcept refused every float file); whole numbers stored as floats read as their ids everywhere."""
    item = _float_label_scene(tmp_path / "ok", layout, np.array([1, 2, 5, 1], np.float32))
    assert item["y"].tolist() == ([1, 2, 5, 1] if layout == "pointcept" else [0, 1, 4, 0])
    with pytest.raises(
        DatasetError,
        match=r"(segment\.npy|sem_label\.npy|labels\.ply): labels must be integers, "
        r"row 2 holds 2\.5",
    ):
        _float_label_scene(tmp_path / "bad", layout, np.array([1, 2, 2.5, 1], np.float32))


def test_scan_labels_use_the_same_check(tmp_path):
    from gridify.datasets.scene_layouts import read_scan_labels

    np.save(tmp_path / "t.npy", np.array([0.0, 1.0, np.nan]))
    with pytest.raises(DatasetError, match=r"t\.npy: labels must be integers, row 2 holds nan"):
        read_scan_labels(tmp_path / "t.npy", 3, ["a", "b"])
    np.save(tmp_path / "t.npy", np.array([True, False, True]))
    with pytest.raises(DatasetError, match=r"t\.npy: labels must be integers, got dtype bool"):
        read_scan_labels(tmp_path / "t.npy", 3, ["a", "b"])


# --------------------------------------------------------------------------------------
# float64 coordinates with a large offset (UTM metres) keep their millimetres on every scene path
# --------------------------------------------------------------------------------------
def _utm_rows(n=300, seed=5):
    rng = np.random.default_rng(seed)
    xyz = np.stack([5e5 + rng.uniform(0, 50, n), 4.2e6 + rng.uniform(0, 50, n), 100 + rng.uniform(0, 5, n)], 1)
    return np.hstack([xyz.round(4), rng.integers(0, 256, (n, 3))])


def _shape_error(pos, truth) -> float:
    """Largest error (metres) of the positions relative to the first point: what a translation keeps."""
    p = np.asarray(pos, np.float64)
    return float(np.abs((p - p[0]) - (truth - truth[0])).max())


def test_utm_coordinates_keep_their_millimetres_through_reading_converting_and_items(tmp_path):
    """float32 holds 4.2e6 to 0.5 m: every scene path keeps float64 until the scene is centred (read_s3dis_room,
    the S3DIS dataset's items, gridify convert's coord.npy and its read-back), as the own-data guide promises."""
    rows = _utm_rows()
    ann = tmp_path / "raw" / "Area_1" / "plot_1" / "Annotations"
    ann.mkdir(parents=True)
    np.savetxt(ann / "floor_1.txt", rows[:150], fmt="%.4f %.4f %.4f %d %d %d")
    np.savetxt(ann / "wall_1.txt", rows[150:], fmt="%.4f %.4f %.4f %d %d %d")
    scene = read_s3dis_room(tmp_path / "raw" / "Area_1" / "plot_1")
    assert scene["coord"].dtype == np.float64 and _shape_error(scene["coord"], rows[:, :3]) < 1e-9
    assert _shape_error(rows[:, :3].astype(np.float32), rows[:, :3]) > 0.1  # what a cast before centring loses
    item = S3DIS(tmp_path / "raw", "train", features=("xyz", "height"))[0]
    assert item["pos"].dtype == torch.float32 and _shape_error(item["pos"], rows[:, :3]) < 1e-3
    assert float(item["pos"].abs().max()) < 60 and _shape_error(item["x"][:, :3], rows[:, :3]) < 1e-3
    z = item["pos"][:, 2].numpy()
    torch.testing.assert_close(item["x"][:, 3], torch.from_numpy(z - np.float32(np.percentile(z, 1.0))))
    convert_to_pointcept(tmp_path / "raw", "s3dis", tmp_path / "pc", classes=["floor", "wall"])
    coord = np.load(tmp_path / "pc" / "Area_1" / "plot_1" / "coord.npy")
    assert coord.dtype == np.float64 and _shape_error(coord, rows[:, :3]) < 1e-9
    back = SceneDataset(tmp_path / "pc", "pointcept", "Area_1", features=())[0]
    assert _shape_error(back["pos"], rows[:, :3]) < 1e-3
    small = _rows(20)  # coordinates float32 holds well stay float32, where they are
    write_pointcept_scene(tmp_path / "pc2" / "train" / "s", {"coord": small[:, :3], "segment": np.zeros(20)})
    assert np.load(tmp_path / "pc2" / "train" / "s" / "coord.npy").dtype == np.float32


def test_label_values_of_one_column_only():
    """Every layout's labels go through one check: ``[N]`` or ``[N, 1]``; a table of two columns is named by its
    shape (it used to be flattened into twice as many labels)."""
    from gridify.datasets.scene_layouts import integer_labels

    assert integer_labels("a.npy", np.arange(4).reshape(4, 1)).tolist() == [0, 1, 2, 3]
    with pytest.raises(DatasetError, match=r"segment\.npy.*one value per point.*\(5, 2\)"):
        integer_labels("segment.npy", np.zeros((5, 2), np.int64))


def test_scene_selection_labels_and_files_are_checked_by_name(tmp_path):
    """A string of sequences or scenes is not read character by character, a test_area that is not an Area
    integer never moves the held-out Area into training, labels outside the classes never reach the items,
    16-bit colours land on the 0-255 scale, an empty coord.npy and a folder named .bin are named as such."""
    make_kitti(tmp_path / "kitti", sequences=("00", "05"), frames=1)
    for bad in ("05", 5):
        with pytest.raises(DatasetError, match=rf"SemanticKITTI: sequences must be a list of names.*got {bad!r}"):
            SemanticKITTI(tmp_path / "kitti", sequences=bad)
    with pytest.raises(DatasetError, match=r"scenes must be a list of names.*got '05_000000'"):
        SemanticKITTI(tmp_path / "kitti", split="all", scenes="05_000000")
    assert [r.name for r in SemanticKITTI(tmp_path / "kitti", sequences=["05"]).refs] == ["05_000000"]
    make_s3dis(tmp_path / "s3dis")
    for bad in ("5", None, 7, True):
        with pytest.raises(DatasetError, match=rf"S3DIS: test_area must be an integer Area 1\.\.6.*got {bad!r}"):
            S3DIS(tmp_path / "s3dis", "train", test_area=bad)
    root = tmp_path / "pc"
    (root / "classes.txt").parent.mkdir()
    (root / "classes.txt").write_text("a\nb\nc\n")
    coord = RNG.normal(size=(10, 3)).astype(np.float32)
    for name, seg in (("s7", np.full(10, 7)), ("s255", np.where(np.arange(10) > 3, 255, 1))):
        write_pointcept_scene(root / "train" / name, {"coord": coord, "segment": seg})
    with pytest.raises(DatasetError, match=r"scene 's255' .*label 255 \(row 4\) outside 0\.\.2 \(3 classes\).*6 such"):
        SceneDataset(root, "pointcept", "train", features=(), scenes=["s255"])[0]
    with pytest.raises(DatasetError, match=r"scene 's7' .*label 7 \(row 0\)"):
        SceneDataset(root, "pointcept", "train", features=(), scenes=["s7"]).label_counts()
    write_pointcept_scene(root / "val" / "c16", {"coord": coord, "segment": np.zeros(10, np.int64)})
    np.save(root / "val" / "c16" / "color.npy", np.tile(np.array([[0, 32768, 65535]], np.uint16), (10, 1)))
    x = SceneDataset(root, "pointcept", "val", features=("color",))[0]["x"]
    torch.testing.assert_close(x[0], torch.tensor([0.0, 32768 / 65535, 1.0]))  # not 128.5 and 257
    np.save(root / "val" / "c16" / "coord.npy", np.zeros((0, 3), np.float32))
    with pytest.raises(DatasetError, match=r"c16/coord\.npy: holds no point"):
        SceneDataset(root, "pointcept", "val", features=())[0]
    scan = tmp_path / "kitti" / "sequences" / "00" / "velodyne" / "000000.bin"
    scan.unlink()
    scan.mkdir()
    with pytest.raises(DatasetError, match=r"000000\.bin: not a regular file \(it is a (directory|folder)\)"):
        SemanticKITTI(tmp_path / "kitti", sequences=["00"])[0]


def test_a_root_one_level_too_high_a_file_root_repeated_features_and_a_text_index_are_named(tmp_path):
    """The root above the layout (``semantickitti_mini`` for ``semantickitti_mini/dataset``) is named with the
    subfolder to give; a file given as the root, a feature listed twice (or with its alias) and an index that is
    not an integer are refused by name, not read as an empty root, a doubled column or an index out of range."""
    make_kitti(tmp_path / "kitti" / "dataset", sequences=("00", "05"), frames=1)
    hint = r"its subfolder 'dataset' holds them: give root='.*kitti/dataset'$"
    with pytest.raises(DatasetError, match=rf"SemanticKITTI: no semantickitti scenes for split 'all' .*; {hint}"):
        SemanticKITTI(tmp_path / "kitti", split="all")
    with pytest.raises(DatasetError, match=rf"sequence\(s\) \['05'\] not found .*; {hint}"):
        SemanticKITTI(tmp_path / "kitti", sequences=["05"])
    with pytest.raises(DatasetError, match=r"no semantickitti scenes for split 'all' under .*README\.md\)$"):
        SemanticKITTI(tmp_path / "kitti" / "dataset" / "sequences" / "00", split="all")  # no hint without scenes below
    (tmp_path / "file").write_text("x")
    with pytest.raises(DatasetError, match=r"file: is a file, not a folder \(the semantickitti root\)"):
        SemanticKITTI(tmp_path / "file")
    root = tmp_path / "kitti" / "dataset"
    with pytest.raises(ValueError, match=r"SemanticKITTI: features=\['strength', 'strength'\]: 'strength' is listed"):
        SemanticKITTI(root, sequences=["00"], features=["strength", "strength"])
    with pytest.raises(ValueError, match=r"'intensity' and 'strength' are the same feature"):
        SemanticKITTI(root, sequences=["00"], features=("strength", "intensity"))
    with pytest.raises(ValueError, match=r"features must be a list of names from .*, got set"):
        SemanticKITTI(root, sequences=["00"], features={"strength"})
    ds = SemanticKITTI(root, sequences=["00"], features=["strength", "height"])
    assert ds[0]["x"].shape == (15, 2)
    with pytest.raises(TypeError, match=r"SemanticKITTI: index must be an integer, got str '0'"):
        ds["0"]
    with pytest.raises(IndexError, match=r"index 1 out of range for 1 items"):
        ds[1]


def test_semantickitti_ids_the_learning_map_does_not_define_are_warned_not_silently_ignored(tmp_path):
    """Training ids 0-18 written to a .label file map mostly to -1 (2-9, 12, 14, 17 are not SemanticKITTI ids):
    the reader warns naming the file, the count, the first row and value; defined ids read silently."""
    import warnings

    from gridify.datasets.scene_layouts import SEMANTICKITTI_CLASSES, read_scan_labels

    train_ids = np.arange(19, dtype=np.uint32)
    train_ids.tofile(tmp_path / "train_ids.label")
    with pytest.warns(
        UserWarning,
        match=r"train_ids\.label: 11 of 19 labels hold semantic ids that SemanticKITTI "
        r"does not define \(first: 2 at row 2;.*save them as \.npy",
    ):
        ids = read_scan_labels(tmp_path / "train_ids.label", 19, SEMANTICKITTI_CLASSES)
    assert (ids == -1).sum() == 11 + 2  # the 11 undefined, and 0 / 1 (unlabeled, outlier) as the map says
    raw = np.array([0, 1, 10, 40, 252, 259, 10 | (7 << 16)], np.uint32)  # instance ids in the high bits
    raw.tofile(tmp_path / "ok.label")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids = read_scan_labels(tmp_path / "ok.label", 7, SEMANTICKITTI_CLASSES)
    assert ids.tolist()[2] == ids.tolist()[6] == 0 and ids.tolist()[:2] == [-1, -1]


# --------------------------------------------------------------------------------------
# hardening, round five: phantom classes, 16-bit colours, UTM rooms, float ids, split lists, integer intensities
# --------------------------------------------------------------------------------------
def test_a_class_list_other_than_the_layouts_ids_is_refused_naming_it(tmp_path):
    """A layout whose labels are fixed ids (ScanNet's 20, SemanticKITTI's 19, mmdetection3d's S3DIS 13) given a
    longer class list got a class no point can have (a zero in every count, a NaN IoU); so did a converted Pointcept
    root whose classes.txt (or classes=) outgrew its conversion's record, and a name given twice."""
    make_scannet(tmp_path / "sn")
    names = list(SCANNET20_CLASSES)
    with pytest.raises(
        DatasetError,
        match=r"SceneDataset: classes names 21 classes, but scannet's labels are the 20 ids "
        r"0\.\.19 .*phantom class.*give 20 names",
    ):
        SceneDataset(tmp_path / "sn", "scannet", "train", classes=names + ["extra"])
    with pytest.raises(DatasetError, match=r"classes names 20 classes, but semantickitti's labels are the 19 ids"):
        SceneDataset(tmp_path / "nowhere", "semantickitti", "train", classes=[f"c{i}" for i in range(20)])
    with pytest.raises(DatasetError, match=r"classes names 14 classes, but mmdet3d_s3dis's labels are the 13 ids"):
        SceneDataset(tmp_path / "nowhere", "mmdet3d_s3dis", "train", classes=list(S3DIS_CLASSES) + ["stairs"])
    with pytest.raises(DatasetError, match=r"classes names 'chair' twice \(positions 0 and 2\)"):
        S3DIS(tmp_path / "nowhere", "train", classes=["chair", "table", "chair"])
    renamed = SceneDataset(tmp_path / "sn", "scannet", "train", classes=[n.upper() for n in names])
    assert renamed.class_names[0] == "WALL"  # the same number of ids: a renaming
    convert_to_pointcept(tmp_path / "sn", "scannet", tmp_path / "pc", ["train"])
    with pytest.raises(
        DatasetError,
        match=r"SceneDataset: classes names 21 classes, but .*conversion\.json declares "
        r"20 \(the ids 0\.\.19",
    ):
        SceneDataset(tmp_path / "pc", "pointcept", "train", classes=names + ["extra"])
    (tmp_path / "pc" / "classes.txt").write_text("\n".join(names + ["extra"]) + "\n")
    with pytest.raises(
        DatasetError,
        match=r"pc/classes\.txt names 21 classes, but .*conversion\.json declares 20.*"
        r"write its 20 class names there",
    ):
        SceneDataset(tmp_path / "pc", "pointcept", "train")
    with pytest.raises(DatasetError, match=r"convert_to_pointcept: classes names 'a' twice"):
        convert_to_pointcept(tmp_path / "nowhere", "s3dis", tmp_path / "o", classes=["a", "b", "a"])


def _s3dis_room(root: Path, files: dict, area: str = "Area_1", room: str = "office_1") -> Path:
    ann = root / area / room / "Annotations"
    ann.mkdir(parents=True)
    for name, rows in files.items():
        np.savetxt(ann / f"{name}.txt", rows, fmt="%.4f %.4f %.4f %d %d %d")
    return ann.parent


def test_16_bit_colours_are_scaled_per_scene_in_every_layout(tmp_path):
    """S3DIS text, ScanNet PLY (ushort) and mmdetection3d binaries with 16-bit colours reached colour features of
    up to 257; the scene's values decide the scale (one rule, layout_colors), and what is no colour is refused."""
    rng = np.random.default_rng(7)
    xyz = rng.uniform(0, 4, (30, 3))
    dark = rng.integers(0, 200, (10, 3))  # a dark object of a 16-bit room: still 16-bit, the room decides
    bright = rng.integers(0, 65536, (20, 3))
    room = _s3dis_room(tmp_path / "s3", {"chair_1": np.c_[xyz[:10], dark], "table_1": np.c_[xyz[10:], bright]})
    item = S3DIS(tmp_path / "s3", "all", features=("color",))[0]
    want = np.vstack([dark, bright]) / 65535.0  # files in sorted order: chair, table
    np.testing.assert_allclose(item["x"].numpy(), want, atol=1e-6)
    assert float(item["x"].max()) <= 1.0 and read_s3dis_room(room)["color"].max() <= 255.0
    rgb8 = rng.integers(0, 256, (30, 3))  # 8-bit rooms as before
    _s3dis_room(tmp_path / "s8", {"chair_1": np.c_[xyz, rgb8]})
    np.testing.assert_allclose(
        S3DIS(tmp_path / "s8", "all", features=("color",))[0]["x"].numpy(), rgb8 / 255.0, atol=1e-6
    )
    _s3dis_room(tmp_path / "bad", {"chair_1": np.c_[xyz[:3], [[1, 2, 3], [4, 5, 6], [7, 70000, 9]]]})
    with pytest.raises(
        DatasetError,
        match=r"Annotations/chair_1\.txt: colour 70000\.0 \(row 2\) is neither 8-bit "
        r"\(0-255\) nor a 16-bit whole number",
    ):
        S3DIS(tmp_path / "bad", "all")[0]
    d = tmp_path / "sn" / "scans" / "scene0000_00"  # ScanNet: a mesh with ushort colours
    d.mkdir(parents=True)
    head = (
        "ply\nformat binary_little_endian 1.0\nelement vertex 20\nproperty float x\nproperty float y\n"
        "property float z\nproperty ushort red\nproperty ushort green\nproperty ushort blue\nend_header\n"
    )
    body = b"".join(struct.pack("<fffHHH", *p, *c) for p, c in zip(xyz[:20].tolist(), bright.tolist()))
    (d / "scene0000_00_vh_clean_2.ply").write_bytes(head.encode() + body)
    x = SceneDataset(tmp_path / "sn", "scannet", "all", features=("color",)).scene(0)["color"] / 255.0
    np.testing.assert_allclose(x, bright / 65535.0, atol=1e-6)
    (tmp_path / "mm" / "points").mkdir(parents=True)  # mmdetection3d: float32 x y z r g b
    np.c_[xyz[:20], bright].astype("<f4").tofile(tmp_path / "mm" / "points" / "Area_1_office_1.bin")
    x = SceneDataset(tmp_path / "mm", "mmdet3d_s3dis", "all", features=("color",))[0]["x"].numpy()
    np.testing.assert_allclose(x, bright / 65535.0, atol=1e-6)


def test_s3dis_rooms_at_utm_scale_keep_their_precision_with_a_stray_row(tmp_path):
    """A room at 5e6 m whose annotation holds one (0, 0, 0) row: float32 before centring collapsed its points
    (0.5 m apart at 5e6); the bulk decides the large offset and the room is centred on it, in float64."""
    rng = np.random.default_rng(11)
    xyz = np.c_[5e6 + np.arange(400) * 0.01, 4.9e6 + rng.uniform(0, 6, 400), rng.uniform(0, 3, 400)].round(4)
    stray = np.vstack([[0.0, 0.0, 0.0], xyz])
    rgb = rng.integers(0, 256, (401, 3))
    room = _s3dis_room(
        tmp_path / "raw", {"floor_1": np.c_[stray[:200], rgb[:200]], "wall_1": np.c_[stray[200:], rgb[200:]]}
    )
    assert read_s3dis_room(room)["coord"].dtype == np.float64
    pos = S3DIS(tmp_path / "raw", "all", features=("xyz",))[0]["pos"].numpy()
    assert len(np.unique(pos[1:, 0])) == 400  # every one of the 400 x values stays distinct
    assert _shape_error(pos[1:], xyz) < 1e-3
    convert_to_pointcept(tmp_path / "raw", "s3dis", tmp_path / "pc")
    back = SceneDataset(tmp_path / "pc", "pointcept", "Area_1", features=())[0]["pos"].numpy()
    assert len(np.unique(back[1:, 0])) == 400 and _shape_error(back[1:], xyz) < 1e-3


def test_float_ids_are_refused_on_every_path_into_the_common_layout(tmp_path):
    """write_pointcept_scene truncated a float segment / instance (1.5 -> 1) without a word, and a scene dataset's
    own scenes (a subclass's load_scene) reached the items truncated: both go through integer_labels."""
    from gridify.datasets.scene_base import SceneDatasetBase
    from gridify.datasets.scene_layouts import check_scan_labels

    coord = RNG.normal(size=(4, 3))
    for key in ("segment", "instance"):
        with pytest.raises(
            DatasetError,
            match=rf"write_pointcept_scene\(.*\): {key}: labels must be integers, row 2 "
            r"holds 1\.5",
        ):
            write_pointcept_scene(
                tmp_path / key, {"coord": coord, "color": np.zeros((4, 3)), key: np.array([0, 1, 1.5, 2])}
            )
        assert not (tmp_path / key).exists()  # nothing written, not even color.npy
    write_pointcept_scene(tmp_path / "ok", {"coord": coord, "segment": np.array([0.0, 1.0, 1.0, 2.0])})
    assert np.load(tmp_path / "ok" / "segment.npy").tolist() == [0, 1, 1, 2]

    class Own(SceneDatasetBase):
        def __init__(self):
            super().__init__(
                split="val",
                class_names=["a", "b", "c"],
                features=(),
                num_points=None,
                transform=None,
                seed=0,
                normalize=False,
                cache=False,
            )

        def scene_count(self):
            return 1

        def scene_name(self, index):
            return "own"

        def load_scene(self, index):
            return {"coord": coord, "segment": np.array([0, 1, 2.5, 2])}

    with pytest.raises(DatasetError, match=r"scene 'own': labels must be integers, row 2 holds 2\.5 \(a float64 array"):
        Own()[0]
    with pytest.raises(DatasetError, match=r"gt\.npy: labels must be integers, row 1 holds 0\.5"):
        check_scan_labels("gt.npy", np.array([0.0, 0.5]), ["a", "b"])


def test_an_official_split_list_naming_a_scene_not_on_disk_is_refused(tmp_path):
    """scannetv2_val.txt naming a scene the root lacks gave a split with fewer scenes without a word; it is refused
    naming the list, the scenes and what the root holds, in every layout with split lists, unless skip_missing."""
    make_scannet(tmp_path / "sn")
    (tmp_path / "sn" / "scannetv2_val.txt").write_text("scene0001_00\nscene0002_00\nscene0003_00\n")
    with pytest.raises(
        DatasetError,
        match=r"sn/scannetv2_val\.txt: 2 of the 3 scenes it lists for split 'val' are "
        r"not under .*scans \(first: scene0002_00, scene0003_00\); that folder "
        r"holds 2 scene\(s\): scene0000_00, scene0001_00: .*skip_missing=True "
        r"\(data\.skip_missing: true\)",
    ):
        ScanNet(tmp_path / "sn", "val")
    with pytest.warns(UserWarning, match=r"2 of the 3 scenes .*the split holds the 1 others \(skip_missing\)"):
        assert [r.name for r in ScanNet(tmp_path / "sn", "val", skip_missing=True).refs] == ["scene0001_00"]
    assert len(ScanNet(tmp_path / "sn", "train")) == 1  # a list whose scenes are there reads as before
    with pytest.raises(DatasetError, match=r"scannetv2_val\.txt: 2 of the 3 scenes"):
        convert_to_pointcept(tmp_path / "sn", "scannet", tmp_path / "pc", ["val"])
    assert not (tmp_path / "pc").exists()
    with pytest.raises(
        DatasetError,
        match=r"skip_missing \(data\.skip_missing\) is only read for the layouts with "
        r"official split lists .*not s3dis",
    ):
        SceneDataset(tmp_path / "sn", "s3dis", "train", skip_missing=True)
    mm = tmp_path / "mm"  # mmdetection3d's ScanNet layouts: the same lists
    (mm / "points").mkdir(parents=True)
    _rows(4).astype(np.float32).tofile(mm / "points" / "scene0000_00.bin")
    (mm / "scannetv2_train.txt").write_text("scene0000_00\nscene0009_00\n")
    with pytest.raises(
        DatasetError,
        match=r"scannetv2_train\.txt: 1 of the 2 scenes .*\(first: scene0009_00\); "
        r"that folder holds 1 scene\(s\): scene0000_00",
    ):
        SceneDataset(mm, "mmdet3d_scannet", "train")
    inst = mm / "scannet_train_instance_data"
    inst.mkdir()
    np.save(inst / "scene0000_00_vert.npy", _rows(3).astype(np.float32))
    with pytest.raises(DatasetError, match=r"scannetv2_train\.txt: 1 of the 2 scenes .*scannet_train_instance_data"):
        SceneDataset(mm, "mmdet3d_scannet_instance", "train")


def test_integer_intensities_go_to_the_unit_scale_by_one_rule(tmp_path):
    """A PLY intensity of 0-255 stored as ``int`` / ``uint`` was divided by 2^31 / 2^32 (features near 0): an 8- or
    16-bit type is divided by its maximum (every scan of a sensor alike), a wider one by its values (whole numbers
    in 0..255 are 8-bit, in 0..65535 16-bit)."""
    from gridify.datasets.scene_base import cloud_scene_features
    from gridify.io import read_points

    values = [0, 51, 200, 255]
    for typ, divisor in (("uchar", 255.0), ("ushort", 65535.0), ("int", 255.0), ("uint", 255.0)):
        head = (
            f"ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\n"
            f"property {typ} intensity\nend_header\n"
        )
        (tmp_path / f"{typ}.ply").write_text(head + "".join(f"{i} {i % 2} 0 {v}\n" for i, v in enumerate(values)))
        x = cloud_scene_features(["intensity"], read_points(tmp_path / f"{typ}.ply", fields="all"))
        np.testing.assert_allclose(x[:, 0], np.array(values) / divisor, rtol=1e-6, err_msg=typ)
    x16 = build_scene_features(["strength"], np.zeros((3, 3)), strength=np.array([0, 300, 65535], np.int32))
    np.testing.assert_allclose(x16[:, 0], [0, 300 / 65535, 1], rtol=1e-6)
    wide = build_scene_features(["strength"], np.zeros((2, 3)), strength=np.array([0, 2**31 - 1], np.int32))
    assert float(wide.max()) == 1.0  # beyond 16 bits: the type's maximum, still on the unit scale
    write_pointcept_scene(tmp_path / "pc" / "train" / "s", {"coord": RNG.normal(size=(4, 3)), "segment": np.zeros(4)})
    np.save(tmp_path / "pc" / "train" / "s" / "strength.npy", np.array(values, np.uint8))  # Pointcept: the same
    (tmp_path / "pc" / "classes.txt").write_text("a\n")
    x = SceneDataset(tmp_path / "pc", "pointcept", "train", features=("strength",))[0]["x"]
    np.testing.assert_allclose(x[:, 0].numpy(), np.array(values) / 255.0, rtol=1e-6)
