"""PointFolder: your own labelled folders as a dataset (classification and per-point segmentation).

Generated folders (PLY, XYZ, NPY, PCD, OFF files written here) and files converted from ../shared/data
(a few ModelNet10 PCDs in a class folder layout, ShapeNet-Part .pts/.seg samples as a segmentation
folder), the latter skipped when the data is absent.
"""

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from gridify.datasets import (
    SHAPENET_CATEGORY_TO_PARTS,
    SHAPENET_SYNSETS,
    DatasetError,
    DatasetNotFoundError,
    PointFolder,
    ProceduralShapes,
    collate_points,
)
from gridify.io import write_ply
from gridify.transforms import RandomScale

RNG = np.random.default_rng(0)


def _cloud(n=60, scale=1.0):
    return (RNG.normal(size=(n, 3)) * scale).astype(np.float32)


def make_class_folder(root: Path, classes=("box", "ball", "cone"), n_train=4, n_test=2, fmt="ply"):
    """root/<class>/<split>/<class><i>.<fmt> with the class's index as the cloud's scale."""
    for c, cls in enumerate(classes):
        for split, n in (("train", n_train), ("test", n_test)):
            for i in range(n):
                path = root / cls / split / f"{cls}{i}.{fmt}"
                pts = _cloud(scale=1.0 + c)
                if fmt == "ply":
                    write_ply(path, pts)
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    np.savetxt(path, pts, fmt="%.6f")
    return root


def make_seg_folder(root: Path, n_train=4, n_test=2, parts=3):
    """root/<split>/s<i>.xyz with a 4th label column: the part is the octant's x/y signs."""
    for split, n in (("train", n_train), ("test", n_test)):
        (root / split).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            pts = _cloud(80)
            lab = np.minimum((pts[:, 0] > 0).astype(int) + (pts[:, 1] > 0), parts - 1)
            np.savetxt(root / split / f"s{i}.xyz", np.c_[pts, lab], fmt="%.6f")
    return root


# --------------------------------------------------------------------------------------
# classification layouts
# --------------------------------------------------------------------------------------
def test_class_split_folders_with_a_carved_stratified_val(tmp_path):
    root = make_class_folder(tmp_path, n_train=10)
    train = PointFolder(root, "train", num_points=32, val_fraction=0.2, seed=3)
    val = PointFolder(root, "val", num_points=32, val_fraction=0.2, seed=3)
    test = PointFolder(root, "test", num_points=32)
    assert train.class_names == ["ball", "box", "cone"] and train.num_classes == 3  # folder names, sorted
    assert (len(train), len(val), len(test)) == (24, 6, 6)
    assert np.bincount(val.labels).tolist() == [2, 2, 2] and np.bincount(test.labels).tolist() == [2, 2, 2]
    assert not set(train.files) & set(val.files) and all("/train/" in str(f) for f in val.files)
    assert PointFolder(root, "val", val_fraction=0.2, seed=3).files == val.files  # seeded
    assert PointFolder(root, "val", val_fraction=0.2, seed=4).files != val.files
    assert sorted(PointFolder(root, "trainval").files) == sorted(train.files + val.files)
    item = train[0]
    assert item["pos"].shape == (32, 3) and item["x"].shape == (32, 3) and item["y"].dim() == 0
    assert int(item["y"]) == train.labels[0] and train.sample_groups().tolist() == train.labels.tolist()
    batch = collate_points([train[i] for i in range(4)])
    assert batch["pos"].shape == (128, 3) and batch["y"].shape == (4,)


def test_split_first_layout_and_classes_txt_order(tmp_path):
    for split in ("train", "test"):
        for cls in ("cat", "dog"):
            for i in range(2):
                write_ply(tmp_path / split / cls / f"{i}.ply", _cloud())
    (tmp_path / "classes.txt").write_text("# label order\ndog\ncat\n")
    ds = PointFolder(tmp_path, "test", num_points=None)
    assert ds.class_names == ["dog", "cat"] and len(ds) == 4
    assert [(f.parent.name, int(y)) for f, y in zip(ds.files, ds.labels)] == [
        ("cat", 1),
        ("cat", 1),
        ("dog", 0),
        ("dog", 0),
    ]


def test_split_lists_and_mixed_formats(tmp_path):
    (tmp_path / "chair").mkdir()
    (tmp_path / "table").mkdir()
    write_ply(tmp_path / "chair" / "a.ply", _cloud())
    np.savetxt(tmp_path / "chair" / "b.xyz", _cloud(), fmt="%.6f")
    np.save(tmp_path / "table" / "c.npy", _cloud())
    np.savetxt(tmp_path / "table" / "d.txt", _cloud(), fmt="%.6f")
    (tmp_path / "train.txt").write_text("chair/a.ply\ntable/c.npy\n\n# a comment\n")
    (tmp_path / "test.txt").write_text("chair/b.xyz\ntable/d.txt\n")
    train = PointFolder(tmp_path, "train", val_fraction=0.0, num_points=16)
    test = PointFolder(tmp_path, "test", num_points=16)
    assert [f.name for f in train.files] == ["a.ply", "c.npy"] and train.labels.tolist() == [0, 1]
    assert [f.name for f in test.files] == ["b.xyz", "d.txt"] and test.labels.tolist() == [0, 1]
    assert all(test[i]["pos"].shape == (16, 3) for i in range(2))


def test_flat_class_folders_carve_test_with_test_fraction(tmp_path):
    for cls in ("a", "b"):
        for i in range(5):
            write_ply(tmp_path / cls / f"{i}.ply", _cloud())
    with pytest.raises(
        DatasetError,
        match=r"no test files \(add test folders or a test.txt list, or set "
        r"test_fraction to carve one\)",
    ):
        PointFolder(tmp_path, "test")
    splits = {s: PointFolder(tmp_path, s, test_fraction=0.2, val_fraction=0.25) for s in ("train", "val", "test")}
    assert [len(splits[s]) for s in ("train", "val", "test")] == [6, 2, 2]
    assert np.bincount(splits["test"].labels).tolist() == [1, 1]
    assert len({f for ds in splits.values() for f in ds.files}) == 10  # disjoint, complete


def test_meshes_are_sampled_and_val_folders_are_used(tmp_path):
    box = (
        "OFF\n8 12 0\n"
        + "".join(f"{x} {y} {z}\n" for x in (0, 1) for y in (0, 1) for z in (0, 1))
        + (
            "3 0 1 3\n3 0 3 2\n3 4 6 7\n3 4 7 5\n3 0 4 5\n3 0 5 1\n3 2 3 7\n3 2 7 6\n3 0 2 6\n3 0 6 4\n3 1 5 7\n3 1 7 3\n"
        )
    )
    for split in ("train", "val", "test"):
        for cls in ("cube", "other"):
            (tmp_path / cls / split).mkdir(parents=True)
            (tmp_path / cls / split / "m.off").write_text(box)
    ds = PointFolder(tmp_path, "val", num_points=None, mesh_samples=300, use_normals=True)
    assert len(ds) == 2 and ds[0]["pos"].shape == (300, 3) and ds[0]["x"].shape == (300, 6)  # face normals
    again = PointFolder(tmp_path, "val", num_points=None, mesh_samples=300, use_normals=True)
    torch.testing.assert_close(ds[0]["pos"], again[0]["pos"])  # the mesh sampling is seeded per file


# --------------------------------------------------------------------------------------
# segmentation
# --------------------------------------------------------------------------------------
def test_segmentation_label_column_numbered_parts(tmp_path):
    root = make_seg_folder(tmp_path)
    train = PointFolder(root, "train", task="segmentation", num_points=40, val_fraction=0.25)
    assert train.class_names == ["part0", "part1", "part2"] and train.num_parts == 3
    assert train.category_to_parts == [[0, 1, 2]] and train.category_names == [root.name]
    item = train[0]
    assert item["y"].shape == (40,) and int(item["category"]) == 0 and set(item["y"].tolist()) <= {0, 1, 2}
    full = PointFolder(root, "test", task="segmentation", num_points=None, normalize=False)
    table = np.loadtxt(full.files[0])
    np.testing.assert_array_equal(full[0]["y"].numpy(), table[:, 3].astype(int))  # every point, in file order
    np.testing.assert_allclose(full[0]["pos"].numpy(), table[:, :3], atol=1e-5)


def test_segmentation_label_sources(tmp_path):
    """Sibling .labels / .npy files, a PLY label or scalar_label property, a named column, classes.txt."""
    pts = [_cloud(30) for _ in range(5)]
    labels = [RNG.integers(0, 4, size=30) for _ in range(5)]
    d = tmp_path / "train"
    write_ply(d / "a.ply", pts[0])
    (d / "a.labels").write_text("\n".join(map(str, labels[0])))
    write_ply(d / "b.ply", pts[1])
    np.save(d / "b.npy", labels[1])  # b.npy beside b.ply holds b's labels: not a sample
    write_ply(d / "c.ply", pts[2], labels=labels[2])
    header = "ply\nformat ascii 1.0\nelement vertex 30\nproperty float x\nproperty float y\nproperty float z\n"
    (d / "d.ply").write_text(
        header
        + "property int scalar_label\nend_header\n"
        + "".join(f"{x} {y} {z} {k}\n" for (x, y, z), k in zip(pts[3], labels[3]))
    )
    (tmp_path / "classes.txt").write_text("seat\nleg\nback\narm\n")
    ds = PointFolder(tmp_path, "train", task="segmentation", num_points=None, normalize=False, val_fraction=0.0)
    assert [f.name for f in ds.files] == ["a.ply", "b.ply", "c.ply", "d.ply"]
    assert ds.part_names == ["seat", "leg", "back", "arm"]
    for i in range(4):
        np.testing.assert_array_equal(ds[i]["y"].numpy(), labels[i], err_msg=ds.files[i].name)
    five = tmp_path / "five"
    (five / "test").mkdir(parents=True)
    np.savetxt(five / "test" / "e.txt", np.c_[pts[4], RNG.random(30), labels[4]], fmt="%.6f")
    named = PointFolder(
        five, "test", task="segmentation", num_points=None, num_classes=4, columns=["x", "y", "z", "_", "label"]
    )
    np.testing.assert_array_equal(named[0]["y"].numpy(), labels[4])
    assert named.class_names == ["part0", "part1", "part2", "part3"]


# --------------------------------------------------------------------------------------
# errors name the file or folder
# --------------------------------------------------------------------------------------
def test_layout_errors(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"PointFolder: data folder .*nowhere not found"):
        PointFolder(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"empty: no point-cloud files found \(expected <class>/<split>/<file>"):
        PointFolder(tmp_path / "empty")
    with pytest.raises(DatasetError, match=r"empty: no point-cloud files found \(expected <split>/<sample>"):
        PointFolder(tmp_path / "empty", task="segmentation")
    root = make_class_folder(tmp_path / "cls")
    (root / "sofa" / "train").mkdir(parents=True)
    (root / "sofa" / "train" / "notes.md").write_text("no clouds here")
    with pytest.raises(DatasetError, match=r"cls/sofa: empty class folder: no point-cloud files of class 'sofa'"):
        PointFolder(root)
    shutil.rmtree(root / "sofa")
    (root / "classes.txt").write_text("box\nball\n")
    with pytest.raises(DatasetError, match=r"cone0.ply: class 'cone' is not listed in .*classes.txt"):
        PointFolder(root)
    (root / "classes.txt").write_text("box\nball\nbox\ncone\n")
    with pytest.raises(DatasetError, match=r"classes.txt: 'box' is listed twice"):
        PointFolder(root)
    (root / "classes.txt").unlink()
    write_ply(root / "box" / "loose.ply", _cloud())
    with pytest.raises(DatasetError, match=r"box/loose.ply: outside the test/train folders of the other files"):
        PointFolder(root)
    (root / "box" / "loose.ply").unlink()
    with pytest.raises(DatasetError, match=r"test_fraction is set but the folder has its own test split"):
        PointFolder(root, test_fraction=0.2)
    (root / "train.txt").write_text("box/train/box0.ply\nbox/train/gone.ply\n")
    with pytest.raises(DatasetError, match=r"train.txt: listed file 'box/train/gone.ply' not found"):
        PointFolder(root)


def test_file_errors_name_the_file(tmp_path):
    root = make_seg_folder(tmp_path / "seg")
    bad = root / "train" / "s1.xyz"
    np.savetxt(bad, np.c_[_cloud(20), np.full(20, 7)], fmt="%.6f")
    ds = PointFolder(root, "train", task="segmentation", num_classes=3, val_fraction=0.0)
    with pytest.raises(DatasetError, match=r"s1.xyz: unknown label id 7: the 3 parts of .* are 0..2 \(numbered\)"):
        ds[1]
    (root / "train" / "s1.labels").write_text("0 1 2\n")  # a sibling file with the wrong length wins
    with pytest.raises(DatasetError, match=r"s1.labels: 3 labels for the 20 points of .*s1.xyz"):
        ds[1]
    (root / "train" / "s1.labels").unlink()
    np.savetxt(bad, np.c_[_cloud(20), np.ones((20, 3)) / np.sqrt(3), np.zeros(20)], fmt="%.6f")  # 7 columns
    with pytest.raises(
        DatasetError,
        match=r"s1.xyz: holds xyz \+ normals but .*s0.xyz \(the first file\) "
        r"holds xyz only; every file of a folder dataset must have the same "
        r"columns",
    ):
        ds[1]
    np.savetxt(bad, np.c_[_cloud(20), RNG.random(20), np.zeros(20)], fmt="%.6f")  # 5 columns: the label is lost
    with (
        pytest.raises(
            DatasetError,
            match=r"s1.xyz: no per-point labels: .*\(name text/npy columns with columns: "
            r"\[x, y, z, _, label\]\)",
        ),
        pytest.warns(UserWarning, match="5 columns"),
    ):
        ds[1]
    bad.write_bytes(b"1.0 2.0 3.0 0\nnot numbers at all\n")
    with pytest.raises(DatasetError, match=r"s1.xyz"):
        ds[1]
    cls = make_class_folder(tmp_path / "cls", n_train=2, n_test=1)
    (cls / "box" / "train" / "box1.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 9\n")
    with pytest.raises(DatasetError, match=r"PointFolder train\[\d\] \(.*box1.ply\)|box1.ply"):
        PointFolder(cls, "train", val_fraction=0.0)[3]
    nolabel = tmp_path / "nolabel"
    write_ply(nolabel / "test" / "x.ply", _cloud())
    with pytest.raises(DatasetError, match=r"x.ply: no per-point labels: no x.labels or x.npy beside it"):
        PointFolder(nolabel, "test", task="segmentation")


def test_errors_and_datasets_pickle(tmp_path):
    """DataLoader workers and spawned DDP ranks pickle datasets and errors."""
    ds = PointFolder(make_class_folder(tmp_path), "train", num_points=8)
    back = pickle.loads(pickle.dumps(ds))
    torch.testing.assert_close(back[2]["pos"], ds[2]["pos"])
    err = pickle.loads(pickle.dumps(DatasetNotFoundError("gone\nhint", archive="ModelNet10", root=tmp_path)))
    assert (err.archive, err.root, err.summary) == ("ModelNet10", tmp_path, "gone")
    assert isinstance(pickle.loads(pickle.dumps(DatasetError("x"))), ValueError)


def test_samples_kept_in_memory_equal_the_files_and_cannot_be_changed_through_an_item(tmp_path, monkeypatch):
    """keep_in_memory: every epoch gives what reading the files gives (same seeds, same draws), the files are
    read once per sample, and an item changed in place does not change what later epochs get."""
    from gridify.transforms import Compose, RandomJitter, RandomPointDropout

    root = make_class_folder(tmp_path, n_train=3)

    def build(keep):
        aug = Compose(
            [
                RandomScale(0.8, 1.2, anisotropic=True, seed=1),
                RandomJitter(0.01, seed=2),
                RandomPointDropout(0.3, seed=3),
            ]
        )
        return PointFolder(root, "train", num_points=40, val_fraction=0.0, transform=aug, keep_in_memory=keep)

    plain, kept = build(False), build(True)
    reads = []
    original = PointFolder.raw
    monkeypatch.setattr(PointFolder, "raw", lambda self, i: reads.append(i) or original(self, i))
    for _epoch in range(3):
        for i in range(len(kept)):
            a, b = plain[i], kept[i]
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
            b["pos"].add_(100.0)  # a caller writing into its item
            b["x"].mul_(0.0)
    assert sorted(reads.count(i) for i in range(len(kept))) == [4] * len(kept)  # plain: 3 reads, kept: 1
    unchanged = PointFolder(root, "train", num_points=None, val_fraction=0.0, keep_in_memory=True)
    first = unchanged[0]["pos"].clone()
    unchanged[0]["pos"].add_(5.0)
    unchanged[0]["x"].add_(5.0)
    assert torch.equal(unchanged[0]["pos"], first) and torch.equal(unchanged[0]["x"], first)
    with pytest.raises(ValueError, match="PointFolder: keep_in_memory must be True or False, got 'yes'"):
        PointFolder(root, "train", keep_in_memory="yes")


# --------------------------------------------------------------------------------------
# augmentations never push points out of the grid box
# --------------------------------------------------------------------------------------
def test_transforms_after_normalize_stay_in_the_grid_box(tmp_path):
    scale_up = RandomScale(2.0, 2.5, generator=np.random.default_rng(0))
    folder = PointFolder(make_class_folder(tmp_path), "train", num_points=32, transform=scale_up)
    procedural = ProceduralShapes("train", num_points=64, num_samples_per_class=1, transform=scale_up)
    for ds in (folder, procedural):
        extents = [float(ds[i]["pos"].abs().max()) for i in range(len(ds))]
        assert max(extents) <= 1.0 + 1e-6 and min(extents) == pytest.approx(1.0, abs=1e-5)  # shrunk to the box
    plain = ProceduralShapes("train", num_points=64, num_samples_per_class=1)
    assert float(plain[0]["pos"].abs().max()) < 1.0  # untouched when it fits


# --------------------------------------------------------------------------------------
# files converted from ../shared/data
# --------------------------------------------------------------------------------------
def test_modelnet10_pcds_in_a_class_folder(shared_data, tmp_path):
    src = shared_data / "modelnet10_pcd" / "ModelNet10" / "pcd"
    if not src.is_dir():
        pytest.skip(f"{src} not found")
    for cls in ("chair", "sofa", "toilet"):
        for split, n in (("train", 3), ("test", 2)):
            (tmp_path / cls / split).mkdir(parents=True)
            for f in sorted((src / cls / split).glob("*.pcd"))[:n]:
                shutil.copy(f, tmp_path / cls / split / f.name)
    ds = PointFolder(tmp_path, "test", num_points=512)
    assert ds.class_names == ["chair", "sofa", "toilet"] and len(ds) == 6 and ds.labels.tolist() == [0, 0, 1, 1, 2, 2]
    item = ds[5]
    assert item["pos"].shape == (512, 3) and float(item["pos"].abs().max()) <= 1.0 and int(item["y"]) == 2


def test_shapenet_part_samples_as_a_segmentation_folder(shared_data, tmp_path):
    src = shared_data / "shapenetpart_sample" / "v0_points"
    if not src.is_dir():
        pytest.skip(f"{src} not found")
    converted = []
    for cat in ("Airplane", "Chair", "Lamp"):
        syn = SHAPENET_SYNSETS[cat]
        pts = next((src / syn / "points").glob("*.pts"))
        seg = src / syn / "points_label" / f"{pts.stem}.seg"
        (tmp_path / "test").mkdir(exist_ok=True)
        shutil.copy(pts, tmp_path / "test" / pts.name)
        local = np.loadtxt(seg, dtype=np.int64)
        global_ids = local - 1 + SHAPENET_CATEGORY_TO_PARTS[list(SHAPENET_SYNSETS).index(cat)][0]
        (tmp_path / "test" / f"{pts.stem}.labels").write_text("\n".join(map(str, global_ids)))
        converted.append((pts, global_ids))
    ds = PointFolder(tmp_path, "test", task="segmentation", num_points=None, num_classes=50)
    assert len(ds) == 3 and ds.num_parts == 50
    by_name = {f.name: i for i, f in enumerate(ds.files)}
    for pts, global_ids in converted:
        item = ds[by_name[pts.name]]
        np.testing.assert_array_equal(item["y"].numpy(), global_ids)
        assert item["pos"].shape == (len(global_ids), 3)


# --------------------------------------------------------------------------------------
# messages that name the real cause, sizes bounded by the data, splits that never overlap
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_classes_txt_with_a_byte_order_mark(tmp_path, encoding):
    root = make_class_folder(tmp_path, classes=("box", "ball"), n_train=2, n_test=1)
    (root / "classes.txt").write_bytes("ball\nbox\n".encode(encoding))
    ds = PointFolder(root, "test", num_points=16)
    assert ds.class_names == ["ball", "box"]


def test_list_files_with_a_byte_order_mark(tmp_path):
    root = make_class_folder(tmp_path, classes=("box", "ball"), n_train=2, n_test=1)
    (root / "train.txt").write_bytes("box/train/box0.ply\nball/train/ball0.ply\n".encode("utf-8-sig"))
    assert len(PointFolder(root, "train", num_points=16, val_fraction=0.0)) == 2


def test_labels_of_rows_the_reader_dropped_are_dropped_too(tmp_path):
    pts = _cloud(50).astype(np.float64)
    pts[17] = np.nan
    (tmp_path / "train").mkdir()
    np.savetxt(tmp_path / "train" / "s0.xyz", pts, fmt="%.6f")
    labels = np.arange(50) % 3
    np.savetxt(tmp_path / "train" / "s0.labels", labels, fmt="%d")
    ds = PointFolder(tmp_path, "train", task="segmentation", num_points=None, val_fraction=0.0, normalize=False)
    with pytest.warns(UserWarning, match=r"dropped 1 of 50 points"):
        item = ds[0]
    assert item["y"].tolist() == np.delete(labels, 17).tolist()
    np.savetxt(tmp_path / "train" / "s0.labels", labels[:48], fmt="%d")  # a count that fits neither
    with (
        pytest.warns(UserWarning),
        pytest.raises(
            DatasetError,
            match=r"s0.labels: 48 labels for the 49 points of "
            r".*s0.xyz \(read_points dropped 1 of its 50 rows .*row 17",
        ),
    ):
        ds[0]


def test_a_non_integer_label_column_is_named_as_such(tmp_path):
    (tmp_path / "train").mkdir()
    table = np.c_[_cloud(20), np.linspace(0, 1, 20)]
    np.savetxt(tmp_path / "train" / "s0.xyz", table, fmt="%.6f")
    with pytest.raises(
        DatasetError,
        match=r"s0.xyz: no per-point labels: .* the file's column 4 holds "
        r"non-integer values \(data row 1: ",
    ):
        PointFolder(tmp_path, "train", task="segmentation", val_fraction=0.0)


def test_one_file_per_class_and_a_val_fraction_says_why_val_is_empty(tmp_path):
    root = make_class_folder(tmp_path, n_train=1, n_test=1)
    with pytest.raises(
        DatasetError,
        match=r"no val files \(val_fraction=0.1 holds out files of a class only when "
        r"it has at least 2 .* each of the 3 class\(es\) has 1 file",
    ) as err:
        PointFolder(root, "val", val_fraction=0.1)
    assert "set val_fraction > 0" not in str(err.value)


@pytest.mark.parametrize("second", ["test", "val"])
def test_a_file_listed_in_two_splits_is_refused(tmp_path, second):
    root = make_class_folder(tmp_path, classes=("box", "ball"), n_train=2, n_test=1)
    (root / "train.txt").write_text("box/train/box0.ply\nball/train/ball0.ply\n")
    (root / f"{second}.txt").write_text("box/test/box0.ply\n./ball/train/ball0.ply\n")
    with pytest.raises(
        DatasetError,
        match=rf"ball0.ply: listed in both .*train.txt \('ball/train/ball0.ply'\) and "
        rf".*{second}.txt \('./ball/train/ball0.ply'\); the split lists must not "
        r"overlap",
    ):
        PointFolder(root, "train", num_points=16)
    (root / f"{second}.txt").write_text("box/test/box0.ply\nbox/test/box0.ply\n")
    with pytest.raises(DatasetError, match=rf"box0.ply: listed twice in .*{second}.txt"):
        PointFolder(root, "train", num_points=16)


def test_a_huge_segmentation_label_id_is_refused_not_allocated(tmp_path):
    (tmp_path / "train").mkdir()
    np.savetxt(tmp_path / "train" / "s0.xyz", _cloud(10), fmt="%.6f")
    np.savetxt(tmp_path / "train" / "s0.labels", [0] * 9 + [2**40], fmt="%d")
    with pytest.raises(
        DatasetError,
        match=r"s0.labels: label id 1099511627776 would number 1099511627777 parts "
        r".* for the 10 labelled points",
    ):
        PointFolder(tmp_path, "train", task="segmentation", val_fraction=0.0)
    with pytest.raises(ValueError, match=r"num_classes=1000000000000 .* would need"):
        PointFolder(tmp_path, "train", task="segmentation", val_fraction=0.0, num_classes=10**12)


def test_num_points_beyond_memory_is_refused_at_construction(tmp_path, monkeypatch):
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", str(8 << 30))
    root = make_class_folder(tmp_path, n_train=2, n_test=1)
    with pytest.raises(ValueError, match=r"PointFolder: num_points=1000000000 .* would need"):
        PointFolder(root, "test", num_points=10**9)


def test_estimate_normals_replaces_the_files_normals_and_reaches_x(tmp_path):
    from gridify.ops import estimate_normals

    root = make_class_folder(tmp_path, n_train=2, n_test=1)
    ds = PointFolder(root, "test", num_points=None, use_normals=True, estimate_normals=8)
    item = ds[0]
    pts = ds._read(ds.files[0]).points
    expected = estimate_normals(torch.as_tensor(pts, dtype=torch.float64), 8).float()
    assert item["x"].shape == (60, 6) and torch.allclose(item["x"][:, 3:], expected, atol=1e-5)
    assert torch.equal(ds[0]["x"], item["x"])  # computed once, the same every read
    scaled = PointFolder(
        root, "test", num_points=None, use_normals=True, estimate_normals=8, transform=RandomScale(0.5, 0.5)
    )  # uniform scale: normals unchanged
    assert torch.allclose(scaled[0]["x"][:, 3:], expected, atol=1e-5)
    with pytest.raises(ValueError, match=r"estimate_normals=8 \(data.estimate_normals\) but use_normals=False"):
        PointFolder(root, "test", estimate_normals=8)
    with pytest.raises(ValueError, match="estimate_normals must be a positive integer"):
        PointFolder(root, "test", use_normals=True, estimate_normals=0)
