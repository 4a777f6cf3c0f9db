"""Datasets of gridify.datasets on real sample data (skipped when absent) and generated layouts."""

import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from gridify.datasets import (
    MODELNET10_CLASSES,
    PROCEDURAL_CATEGORY_TO_PARTS,
    SHAPENET_CATEGORIES,
    SHAPENET_CATEGORY_TO_PARTS,
    SHAPENET_PART_NAMES,
    SHAPENET_PARTS,
    SHAPENET_SYNSETS,
    DatasetNotFoundError,
    ModelNet,
    ProceduralShapes,
    ShapeNetPart,
    collate_points,
    stratified_split,
    stratified_subset,
)
from gridify.datasets.dynamic import read_sequence
from gridify.io import write_ply
from gridify.transforms import RandomRotateZ
from tests.helpers import make_fake_shapenet


# --------------------------------------------------------------------------------------
# generated layouts
# --------------------------------------------------------------------------------------
def _box_off(lo, hi, counts_on_header_line=False):
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    unit = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], float)
    v = lo + unit * (hi - lo)
    f = [
        [0, 2, 1],
        [0, 3, 2],
        [4, 5, 6],
        [4, 6, 7],
        [0, 1, 5],
        [0, 5, 4],
        [1, 2, 6],
        [1, 6, 5],
        [2, 3, 7],
        [2, 7, 6],
        [3, 0, 4],
        [3, 4, 7],
    ]
    head = "OFF8 12 0\n" if counts_on_header_line else "OFF\n8 12 0\n"
    return head + "".join("%g %g %g\n" % tuple(p) for p in v) + "".join("3 %d %d %d\n" % tuple(t) for t in f)


def make_fake_modelnet_off(root: Path, n_train=6, n_test=2):
    r = np.random.default_rng(0)
    for ci, cls in enumerate(["bathtub", "bed"]):
        k = 1
        for split, n in (("train", n_train), ("test", n_test)):
            d = root / "ModelNet10" / cls / split
            d.mkdir(parents=True, exist_ok=True)
            for _ in range(n):
                size = r.uniform(1, 3, size=3) * (1 + 3 * ci)
                (d / f"{cls}_{k:04d}.off").write_text(_box_off(-size, size, counts_on_header_line=(k % 2 == 0)))
                k += 1
    return root


def make_fake_normal_resampled(root: Path):
    d = root / "modelnet40_normal_resampled"
    r = np.random.default_rng(1)
    shapes = {"train": [], "test": []}
    for cls in ["chair", "sofa", "toilet"]:
        (d / cls).mkdir(parents=True)
        for k in range(1, 6):
            name = f"{cls}_{k:04d}"
            pts = r.normal(size=(50, 3))
            nrm = pts / np.linalg.norm(pts, axis=1, keepdims=True)
            nrm[7] = 1.0  # the release's placeholder normal
            np.savetxt(d / cls / f"{name}.txt", np.hstack([pts, nrm]), delimiter=",", fmt="%.6f")
            shapes["train" if k <= 4 else "test"].append(name)
    for split, names in shapes.items():
        (d / f"modelnet10_{split}.txt").write_text("\n".join(names) + "\n")
    (d / "modelnet10_shape_names.txt").write_text("\n".join(MODELNET10_CLASSES) + "\n")
    return root


def make_fake_h5(path: Path, n, points, labels, extra):
    h5py = pytest.importorskip("h5py")
    r = np.random.default_rng(len(str(path)))
    with h5py.File(path, "w") as h:
        data = r.normal(size=(n, points, 3)).astype(np.float32)
        h["data"] = data
        h["label"] = np.asarray(labels, dtype=np.uint8).reshape(n, 1)
        h["normal"] = (data / np.linalg.norm(data, axis=2, keepdims=True)).astype(np.float32)
        for k, v in extra.items():
            h[k] = v


# --------------------------------------------------------------------------------------
# split carving
# --------------------------------------------------------------------------------------
def test_stratified_split_is_deterministic_and_per_class():
    labels = np.repeat([0, 1, 2], [20, 10, 3])
    keep, held = stratified_split(labels, 0.1, seed=0)
    assert np.bincount(labels[held]).tolist() == [2, 1, 1]
    assert len(np.intersect1d(keep, held)) == 0 and len(keep) + len(held) == len(labels)
    k2, h2 = stratified_split(labels, 0.1, seed=0)
    np.testing.assert_array_equal(held, h2)
    assert not np.array_equal(held, stratified_split(labels, 0.1, seed=1)[1])
    with pytest.raises(ValueError, match="val_fraction"):
        stratified_split(labels, 1.0, 0)


# --------------------------------------------------------------------------------------
# ModelNet, generated
# --------------------------------------------------------------------------------------
def test_stratified_subset_is_proportional_seeded_and_covers_every_class():
    labels = np.repeat(np.arange(5), [40, 20, 20, 10, 10])  # 100 samples sorted by class
    sub = stratified_subset(labels, 20, seed=0)
    assert len(sub) == 20 and np.all(np.diff(sub) > 0)
    assert np.bincount(labels[sub], minlength=5).tolist() == [8, 4, 4, 2, 2]  # in proportion
    assert np.array_equal(sub, stratified_subset(labels, 20, seed=0))
    assert not np.array_equal(sub, stratified_subset(labels, 20, seed=1))
    assert sorted(labels[stratified_subset(labels, 5, seed=2)].tolist()) == [0, 1, 2, 3, 4]  # one per class
    assert stratified_subset(labels, 100, seed=0).tolist() == list(range(100))


def test_modelnet_off_generated_with_cache(tmp_path):
    root = make_fake_modelnet_off(tmp_path / "data")
    cache = tmp_path / "cache"
    kw = dict(name="10", source="off", num_points=256, mesh_samples=600, cache_dir=cache, val_fraction=0.34)
    with pytest.warns(UserWarning, match="only 2 of 10 class folders"):
        train = ModelNet(root, split="train", **kw)
    with pytest.warns(UserWarning):
        val = ModelNet(root, split="val", **kw)
    with pytest.warns(UserWarning):
        test = ModelNet(root, split="test", **kw)
    assert (len(train), len(val), len(test)) == (8, 4, 4)
    assert not set(train.files) & set(val.files)
    assert all("/train/" in f for f in train.files + val.files) and all("/test/" in f for f in test.files)
    assert train.source_format == "off" and train.num_classes == 10
    item = train[0]
    assert item["pos"].shape == (256, 3) and item["x"].shape == (256, 6) and item["y"].dim() == 0
    torch.testing.assert_close(item["x"][:, :3], item["pos"])
    assert float(item["pos"].norm(dim=1).max()) <= 1.0 + 1e-5
    assert len(list(cache.rglob("*.npz"))) == 1
    assert not list(root.rglob(".cache"))  # nothing written next to the data when cache_dir is given
    e1, e2 = test[1], test[1]  # evaluation is deterministic
    torch.testing.assert_close(e1["pos"], e2["pos"])
    with pytest.warns(UserWarning):
        again = ModelNet(root, split="test", **kw)
    torch.testing.assert_close(again[1]["pos"], e1["pos"])  # same seed -> same sampling (from cache)
    cached = sorted(cache.rglob("*.npz"))
    assert len(cached) == 2 and all(not p.name.endswith(".tmp") for p in cached)


def test_modelnet_normal_resampled_generated(tmp_path):
    root = make_fake_normal_resampled(tmp_path)
    ds = ModelNet(root, name="10", split="trainval", source="normal_resampled", num_points=None, normalize=False)
    assert len(ds) == 12 and ds.source_format == "normal_resampled"
    raw = np.loadtxt(ds.files[0], delimiter=",")
    item = ds[0]
    np.testing.assert_allclose(item["pos"].numpy(), raw[:, [0, 2, 1]], atol=1e-5)  # y/z swapped back to z-up
    np.testing.assert_allclose(item["normal"].norm(dim=1).numpy(), 1.0, atol=1e-5)  # (1,1,1) repaired
    assert int(item["y"]) == MODELNET10_CLASSES.index("chair")
    assert len(ModelNet(root, name="10", split="test", source="normal_resampled")) == 3
    keep = ModelNet(
        root, name="10", split="train", source="normal_resampled", align_up_axis=False, normalize=False, num_points=None
    )
    np.testing.assert_allclose(keep[0]["pos"].numpy(), np.loadtxt(keep.files[0], delimiter=",")[:, :3], atol=1e-5)


def test_modelnet_hdf5_generated(tmp_path):
    d = tmp_path / "modelnet40_ply_hdf5_2048"
    d.mkdir()
    make_fake_h5(d / "ply_data_train0.h5", 12, 64, np.arange(12) % 3, {})
    make_fake_h5(d / "ply_data_train1.h5", 8, 64, np.arange(8) % 3, {})
    make_fake_h5(d / "ply_data_test0.h5", 5, 64, [0, 1, 2, 0, 1], {})
    tr = ModelNet(tmp_path, split="train", source="hdf5", num_points=32, val_fraction=0.25)
    va = ModelNet(tmp_path, split="val", source="hdf5", num_points=32, val_fraction=0.25)
    te = ModelNet(tmp_path, split="test", source="hdf5", num_points=32)
    assert (len(tr), len(va), len(te)) == (14, 6, 5)  # classes of 7, 7, 6 shapes -> 2 + 2 + 2 held out
    assert not set(tr.files) & set(va.files)
    batch = collate_points([tr[i] for i in range(3)])
    assert batch["x"].shape == (96, 6) and batch["y"].shape == (3,)
    loader = DataLoader(te, batch_size=2, collate_fn=collate_points, num_workers=0)
    sizes = [int(b["y"].numel()) for b in loader]
    assert sizes == [2, 2, 1]  # partial last batch kept
    with pytest.raises(ValueError, match="only exists for ModelNet40"):
        ModelNet(tmp_path, name="10", source="hdf5")


def test_modelnet_errors(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"(?s)ModelNet40 \(off\) not found.*ModelNet40\.zip.*put it at"):
        ModelNet(tmp_path, name="40", source="off")
    with pytest.raises(ValueError, match=r"has no normals; set use_normals=False"):
        ModelNet(tmp_path, name="10", source="pcd")
    with pytest.raises(ValueError, match="source must be one of"):
        ModelNet(tmp_path, source="ply")
    root = make_fake_normal_resampled(tmp_path / "nr")
    with pytest.raises(ValueError, match="split 'val' is empty"):
        ModelNet(root, name="10", split="val", source="normal_resampled", val_fraction=0.0)
    (root / "modelnet40_normal_resampled" / "sofa" / "sofa_0002.txt").unlink()
    with pytest.raises(ValueError, match=r"1 of 12 listed shapes are missing.*skip_missing=True"):
        ModelNet(root, name="10", split="train", source="normal_resampled")
    with pytest.warns(UserWarning, match="skipped"):
        assert len(ModelNet(root, name="10", split="trainval", source="normal_resampled", skip_missing=True)) == 11


# --------------------------------------------------------------------------------------
# ModelNet, real samples
# --------------------------------------------------------------------------------------
def test_modelnet10_pcd_real_official_split(shared_data):
    root = shared_data / "modelnet10_pcd"
    kw = dict(name="10", source="pcd", use_normals=False, num_points=512)
    train, val, test = (ModelNet(root, split=s, **kw) for s in ("train", "val", "test"))
    assert len(train) + len(val) == 3991 and len(test) == 908
    assert not set(train.files) & set(val.files)
    assert all("/train/" in f for f in val.files)  # val comes from the official train split only
    counts = np.bincount(np.concatenate([train.labels, val.labels]), minlength=10)
    np.testing.assert_array_equal(np.bincount(val.labels, minlength=10), np.round(counts * 0.1).astype(int))
    assert ModelNet(root, split="val", **kw).files == val.files  # deterministic carving
    assert ModelNet(root, split="val", seed=1, **kw).files != val.files
    item = test[0]
    assert item["pos"].shape == (512, 3) and item["x"].shape == (512, 3) and "normal" not in item
    assert abs(float(item["pos"].norm(dim=1).max()) - 1.0) < 1e-5  # normalized by the dataset
    torch.testing.assert_close(test[5]["pos"], test[5]["pos"])


def test_modelnet40_normal_resampled_real(shared_data):
    root = shared_data / "modelnet40_normal_resampled_sample" / "data"
    ds = ModelNet(
        root, name="40", split="trainval", source="normal_resampled", num_points=1024, transform=RandomRotateZ(seed=0)
    )
    assert len(ds) == 113 and ds.source_format == "normal_resampled"
    item = ds[ds.files.index(next(f for f in ds.files if f.endswith("sofa_0469.txt")))]
    assert item["x"].shape == (1024, 6)
    torch.testing.assert_close(item["x"][:, 3:], item["normal"])
    np.testing.assert_allclose(item["normal"].norm(dim=1).numpy(), 1.0, atol=1e-5)  # placeholders repaired
    assert ds.class_names[int(item["y"])] == "sofa"
    # the sample ships a truncated test list naming a shape it does not include
    with pytest.raises(ValueError, match="listed shapes are missing"):
        ModelNet(root, name="40", split="test", source="normal_resampled")


def test_modelnet_off_real_sample(shared_data, tmp_path):
    root = shared_data / "modelnet_off_sample"
    with pytest.warns(UserWarning, match="only 1 of 10"):
        ds = ModelNet(
            root, name="10", split="trainval", source="off", num_points=256, mesh_samples=2000, cache_dir=tmp_path
        )
    assert len(ds) == 5
    item = ds[0]
    assert item["x"].shape == (256, 6) and int(item["y"]) == 0
    assert len(list(tmp_path.rglob("*.npz"))) == 1


# --------------------------------------------------------------------------------------
# ShapeNet-Part
# --------------------------------------------------------------------------------------
def test_shapenet_generated_normal_txt_and_v0(tmp_path):
    root = make_fake_shapenet(tmp_path)
    tr = ShapeNetPart(root, split="train", num_points=32)
    assert len(tr) == 4 and tr.source_format == "normal_txt"
    for i in range(len(tr)):
        it = tr[i]
        parts = SHAPENET_CATEGORY_TO_PARTS[int(it["category"])]
        assert it["pos"].shape == (32, 3) and it["x"].shape == (32, 6) and it["y"].shape == (32,)
        assert set(it["y"].tolist()) <= set(parts)
    assert len(ShapeNetPart(root, split="trainval")) == 8
    assert len(ShapeNetPart(root, split="test", categories=["mug"])) == 2
    full = ShapeNetPart(root, split="test", num_points=None)
    batch = collate_points([full[i] for i in range(len(full))])
    assert batch["y"].shape == batch["batch"].shape and batch["category"].shape == (4,)
    # v0: local ids 1.. mapped to global ids
    v0 = ShapeNetPart(root, split="val", source="v0_points", use_normals=False, num_points=None, normalize=False)
    txt = ShapeNetPart(root, split="val", num_points=None, normalize=False)
    for i in range(len(v0)):
        torch.testing.assert_close(v0[i]["y"], txt[i]["y"])
        torch.testing.assert_close(v0[i]["pos"], txt[i]["pos"], atol=1e-5, rtol=0)


def test_shapenet_v0_benchmark_folder_is_found(tmp_path):
    """The v0 benchmark archive unpacks to shapenetcore_partanno_segmentation_benchmark_v0/: found as is."""
    root = make_fake_shapenet(tmp_path)
    (root / "shapenetcore_partanno_v0").rename(root / "shapenetcore_partanno_segmentation_benchmark_v0")
    ds = ShapeNetPart(root, split="val", source="v0_points", use_normals=False)
    assert ds.data_dir == root / "shapenetcore_partanno_segmentation_benchmark_v0" and len(ds) == 4


def test_shapenet_hdf5_generated(tmp_path):
    d = tmp_path / "hdf5_data"
    d.mkdir()
    cats = [0, 15, 0]
    pid = np.stack(
        [np.random.default_rng(i).choice(SHAPENET_CATEGORY_TO_PARTS[c], size=64) for i, c in enumerate(cats)]
    )
    make_fake_h5(d / "ply_data_test0.h5", 3, 64, cats, {"pid": pid.astype(np.uint8)})
    ds = ShapeNetPart(tmp_path, split="test", source="hdf5", num_points=64)
    assert len(ds) == 3 and [int(ds[i]["category"]) for i in range(3)] == cats
    assert set(ds[1]["y"].tolist()) <= set(SHAPENET_CATEGORY_TO_PARTS[15])


def test_shapenet_errors(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"(?s)ShapeNetPart \(normal_txt\).*v0_normal\.zip"):
        ShapeNetPart(tmp_path)
    root = make_fake_shapenet(tmp_path / "s")
    with pytest.raises(ValueError, match=r"categories must be ShapeNet-Part categories .*; unknown: Spaceship$"):
        ShapeNetPart(root, categories=["Spaceship", "mug"])
    with pytest.raises(ValueError, match=r"the test split has no shapes of categories=\['Airplane'\]"):
        ShapeNetPart(root, split="test", categories=["airplane"])
    with pytest.raises(ValueError, match=r"source='v0_points' has no normals; set use_normals=False"):
        ShapeNetPart(root, source="v0_points")
    labels_dir = root / "shapenetcore_partanno_v0" / SHAPENET_SYNSETS["Chair"] / "points_label"
    (labels_dir / "chairtrain0.seg").write_text("1\n2\n")
    n = len(np.loadtxt(labels_dir / "chairtrain1.seg"))
    (labels_dir / "chairtrain1.seg").write_text("9\n" * n)
    ds = ShapeNetPart(root, split="train", source="v0_points", use_normals=False)
    assert ds.files[:2] == [str(labels_dir.parent / "points" / f"chairtrain{k}.pts") for k in (0, 1)]
    with pytest.raises(ValueError, match=r"chairtrain0\.seg: 2 labels for the \d+ points"):
        ds[0]
    with pytest.raises(ValueError, match=r"chairtrain1\.seg: local part ids must be 1\.\.4 for Chair, found \[9\]"):
        ds[1]
    (
        root
        / "shapenetcore_partanno_segmentation_benchmark_v0_normal"
        / "train_test_split"
        / "shuffled_val_file_list.json"
    ).write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ShapeNetPart(root, split="val")


def test_shapenet_part_names_follow_the_global_part_ids():
    """Real part names (not ``part45``): ``"<Category>/<part>"`` in the order of the global ids 0-49."""
    assert len(SHAPENET_PART_NAMES) == len(set(SHAPENET_PART_NAMES)) == 50
    assert list(SHAPENET_PARTS) == SHAPENET_CATEGORIES
    for cat, parts in zip(SHAPENET_CATEGORIES, SHAPENET_CATEGORY_TO_PARTS):
        assert [SHAPENET_PART_NAMES[i] for i in parts] == [f"{cat}/{p}" for p in SHAPENET_PARTS[cat]]
    assert SHAPENET_PART_NAMES[:4] == ["Airplane/body", "Airplane/wing", "Airplane/tail", "Airplane/engine"]
    assert SHAPENET_PART_NAMES[12:16] == ["Chair/back", "Chair/seat", "Chair/leg", "Chair/arm"]
    assert SHAPENET_PART_NAMES[47:] == ["Table/top", "Table/leg", "Table/drawer"]
    assert ShapeNetPart.part_names is SHAPENET_PART_NAMES


def test_shapenet_v0_points_real(shared_data):
    root = shared_data / "shapenetpart_sample" / "v0_points"
    ds = ShapeNetPart(root, split="train", source="v0_points", use_normals=False, num_points=None, normalize=False)
    assert len(ds) == 16
    assert sorted(int(c) for c in ds.category_ids) == list(range(16))
    for i in range(len(ds)):
        it = ds[i]
        cat = int(it["category"])
        local = np.loadtxt(ds.entries[i][1], dtype=np.int64)
        np.testing.assert_array_equal(it["y"].numpy(), local - 1 + SHAPENET_CATEGORY_TO_PARTS[cat][0])
        assert set(it["y"].tolist()) <= set(SHAPENET_CATEGORY_TO_PARTS[cat])


def test_shapenet_part_names_match_the_real_shapes(shared_data):
    """The names sit where the sample's labelled points are (y up): a lamp's base under its tube under its
    shade, a chair's legs under its seat under its back, a guitar's body under its neck under its head, an
    airplane's wings wider than its body."""
    ds = ShapeNetPart(
        shared_data / "shapenetpart_sample" / "v0_points",
        split="train",
        source="v0_points",
        use_normals=False,
        num_points=None,
        normalize=False,
    )
    shapes = {SHAPENET_CATEGORIES[int(ds[i]["category"])]: ds[i] for i in range(len(ds))}

    def part(cat, name):
        it = shapes[cat]
        return it["pos"][it["y"] == SHAPENET_PART_NAMES.index(f"{cat}/{name}")]

    for cat, low_to_high in (
        ("Lamp", ["base", "tube", "shade"]),
        ("Chair", ["leg", "seat", "back"]),
        ("Guitar", ["body", "neck", "head"]),
        ("Table", ["leg", "top"]),
    ):
        heights = [float(part(cat, name)[:, 1].mean()) for name in low_to_high]
        assert heights == sorted(heights), (cat, low_to_high, heights)
    span = {name: float(np.ptp(part("Airplane", name)[:, 2].numpy())) for name in ("body", "wing")}
    assert span["wing"] > 3 * span["body"]


def test_shapenet_normal_txt_real(shared_data):
    root = shared_data / "shapenetpart_sample" / "v0_normal" / "data"
    with pytest.warns(UserWarning, match="1 duplicate entries"), pytest.raises(ValueError, match="missing"):
        ShapeNetPart(root, split="train")  # the sample's lists name a shape it does not ship
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = ShapeNetPart(root, split="trainval", skip_missing=True, num_points=2048)
    cats = sorted(int(c) for c in ds.category_ids)
    assert cats == [14, 15]  # Skateboard and Table
    for i in range(len(ds)):
        it = ds[i]
        assert it["x"].shape == (2048, 6)
        assert set(it["y"].tolist()) <= set(SHAPENET_CATEGORY_TO_PARTS[int(it["category"])])


# --------------------------------------------------------------------------------------
# procedural
# --------------------------------------------------------------------------------------
def test_procedural_deterministic_and_fast():
    t0 = time.perf_counter()
    a = ProceduralShapes("train", num_points=1024, num_samples_per_class=20, seed=0)
    items = [a[i] for i in range(len(a))]
    elapsed = time.perf_counter() - t0
    assert len(a) == 240 and a.num_classes >= 10
    assert elapsed < 20, f"240 shapes took {elapsed:.1f}s"
    b = ProceduralShapes("train", num_points=1024, num_samples_per_class=20, seed=0)
    for i in (0, 57, 239):
        torch.testing.assert_close(items[i]["pos"], b[i]["pos"])
    c = ProceduralShapes("test", num_points=1024, num_samples_per_class=20, seed=0)
    assert not torch.allclose(items[0]["pos"], c[0]["pos"])
    assert [int(it["y"]) for it in items[::20]] == list(range(12))
    np.testing.assert_allclose(items[5]["normal"].norm(dim=1).numpy(), 1.0, atol=1e-5)
    assert float(items[5]["pos"].norm(dim=1).max()) <= 1 + 1e-5


def test_procedural_segmentation_parts():
    ds = ProceduralShapes("val", num_points=512, num_samples_per_class=1, task="segmentation", seed=3)
    assert ds.category_to_parts == PROCEDURAL_CATEGORY_TO_PARTS
    for i in range(len(ds)):
        it = ds[i]
        parts = ds.category_to_parts[int(it["category"])]
        assert it["y"].shape == (512,)
        assert set(it["y"].tolist()) == set(parts)  # every part is sampled, no foreign part
    table = ds[ds.class_names.index("table")]
    top, leg = PROCEDURAL_CATEGORY_TO_PARTS[ds.class_names.index("table")]
    assert float(table["pos"][table["y"] == top, 2].mean()) > float(table["pos"][table["y"] == leg, 2].mean())
    loader = DataLoader(ds, batch_size=5, collate_fn=collate_points)
    batch = next(iter(loader))
    assert batch["pos"].shape == (2560, 3) and batch["y"].shape == (2560,) and batch["category"].shape == (5,)
    assert batch["ptr"].tolist() == [0, 512, 1024, 1536, 2048, 2560]
    with pytest.raises(ValueError, match="task must be"):
        ProceduralShapes(task="detection")


def test_procedural_subset_of_classes_and_ply_export(tmp_path):
    ds = ProceduralShapes("train", num_points=128, num_samples_per_class=2, classes=["mug", "chair"], use_normals=False)
    assert ds.class_names == ["chair", "mug"] and len(ds) == 4
    it = ds[3]
    assert int(it["y"]) == 1 and it["x"].shape == (128, 3)
    write_ply(tmp_path / "mug.ply", it["pos"])  # tensors are accepted by the writer
    assert (tmp_path / "mug.ply").stat().st_size > 128 * 12


def test_collate_rejects_mismatched_items():
    with pytest.raises(ValueError, match="empty list"):
        collate_points([])
    a = {"pos": torch.zeros(3, 3), "y": torch.tensor(1)}
    b = {"pos": torch.zeros(2, 3)}
    with pytest.raises(ValueError, match="has keys"):
        collate_points([a, b])


def _forged_h5(path: Path, label_shape, extra_pid=False):
    """3 real shapes of 16 points, and a 'label' dataset declaring ``label_shape`` with no data behind it."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as h:
        h["data"] = np.random.default_rng(0).normal(size=(3, 16, 3)).astype(np.float32)
        h.create_dataset(
            "label", shape=label_shape, dtype="u1", chunks=(min(label_shape[0], 1 << 20), 1), compression="gzip"
        )
        if extra_pid:
            h["pid"] = np.zeros((3, 16), np.uint8)


@pytest.mark.parametrize("dataset", ["modelnet", "shapenet"])
def test_hdf5_label_declaring_1e8_entries_is_refused_before_reading(tmp_path, dataset):
    d = tmp_path / ("modelnet40_ply_hdf5_2048" if dataset == "modelnet" else "hdf5_data")
    d.mkdir()
    f = d / ("ply_data_train0.h5" if dataset == "modelnet" else "ply_data_test0.h5")
    _forged_h5(f, (10**8, 1), extra_pid=dataset == "shapenet")
    assert f.stat().st_size < 100_000
    cls, split = (ModelNet, "train") if dataset == "modelnet" else (ShapeNetPart, "test")
    build = lambda: cls(tmp_path, split=split, source="hdf5", use_normals=False)  # noqa: E731
    with pytest.raises(
        ValueError,
        match=r"ply_data_\w+0.h5: HDF5 dataset 'label' declares shape \(100000000, 1\) "
        r"uint8 \(100000000 bytes\) but the file stores 0 bytes for it",
    ):
        build()
    f.unlink()
    make_fake_h5(f, 3, 16, [0, 1, 2], {"pid": np.zeros((3, 16), np.uint8)} if dataset == "shapenet" else {})
    h5py = pytest.importorskip("h5py")
    with h5py.File(f, "a") as h:  # a real label table, longer than the shapes
        del h["label"]
        h["label"] = np.zeros((5, 1), np.uint8)
    with pytest.raises(ValueError, match=r"ply_data_\w+0.h5: (.*'label' \(5, 1\)|5 labels for 3 shapes)"):
        build()


def test_read_sequence_to_item_refuses_num_points_beyond_memory(tmp_path, monkeypatch):
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", str(8 << 30))
    for t in range(3):
        np.savetxt(tmp_path / f"f{t}.xyz", np.random.default_rng(t).normal(size=(20, 3)), fmt="%.5f")
    seq = read_sequence(tmp_path, timestamps="index")
    assert seq.to_item(32)["pos"].shape == (3, 32, 3)
    with pytest.raises(
        ValueError,
        match=r"PointCloudSequence.to_item: num_points=1000000000 \(3 x 1000000000 "
        r"points .*\) would need",
    ):
        seq.to_item(10**9)


def test_truncated_file_inside_a_dataset_names_the_file(tmp_path):
    """A ModelNet folder with one cut-off OFF mesh: reading that sample raises naming the file."""
    from gridify.datasets import ModelNet

    root = tmp_path / "ModelNet10"
    tetra = "OFF\n4 4 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 1 2\n3 0 1 3\n3 0 2 3\n3 1 2 3\n"
    for cls in ("chair", "table"):
        for split in ("train", "test"):
            d = root / cls / split
            d.mkdir(parents=True)
            for i in range(2):
                (d / f"{cls}_{i:04d}.off").write_text(tetra)
    bad = root / "chair" / "train" / "chair_0001.off"
    bad.write_text(tetra[:-30])  # the last faces are missing
    with pytest.warns(UserWarning, match="class folders found"):
        ds = ModelNet(root=str(root), name="10", split="trainval", num_points=32, use_normals=False, cache=False)
    assert len(ds) == 4
    ds[0]  # the intact files read fine
    with pytest.raises(ValueError, match=r"chair_0001\.off.*truncated OFF file"):
        for i in range(len(ds)):
            ds[i]


def test_an_index_that_is_not_an_integer_is_refused_by_name_for_every_kind_of_dataset():
    """A string or a float index was int()-ed (``ds["3"]`` read item 3, ``ds[2.7]`` item 2) or failed inside
    int(); numpy and 0-d tensor integers still index, negative ones from the end."""
    from gridify.datasets import DynamicShapes, ProceduralScenes

    datasets = [
        ProceduralShapes("train", num_points=64, num_samples_per_class=1, seed=0),
        ProceduralScenes("train", num_scenes=2, num_points=500, seed=0),
        DynamicShapes("train", num_points=32, num_samples_per_class=1, num_frames=3, seed=0),
    ]
    for ds in datasets:
        name = type(ds).__name__
        for bad in ("1", 1.0, 2.7, True, None):
            with pytest.raises(TypeError, match=rf"^{name}: index must be an integer, got {type(bad).__name__}"):
                ds[bad]
        with pytest.raises(IndexError, match=rf"^{name}: index {len(ds)} out of range for {len(ds)} "):
            ds[len(ds)]
        want = ds[1]["pos"]
        for same in (np.int64(1), torch.tensor(1), 1 - len(ds)):
            assert torch.equal(ds[same]["pos"], want)
