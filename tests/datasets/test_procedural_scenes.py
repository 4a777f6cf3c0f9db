"""The procedural scene generator: seeded indoor rooms and outdoor LiDAR scans from a simulated spinning sensor.

Determinism per seed and split, the label sets, exact point counts, density that falls with range,
real occlusion (no return behind a solid from the sensor), speed, and the registered dataset.
"""

import time

import numpy as np
import pytest
import torch

from gridify.datasets import ProceduralScenes, collate_points
from gridify.datasets.procedural_scenes import (
    INDOOR_CLASSES,
    OUTDOOR_CLASSES,
    Primitives,
    cast_rays,
    make_indoor_scene,
    make_outdoor_scan,
    scan_layout,
    sensor_directions,
    street_layout,
)
from gridify.registry import DATASETS

H = 1.73  # sensor height


def _rng(seed):
    return np.random.default_rng(seed)


def test_indoor_scene_deterministic_labels_counts_and_openings():
    a, b = make_indoor_scene(_rng(3), 20_000), make_indoor_scene(_rng(3), 20_000)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["coord"], make_indoor_scene(_rng(4), 20_000)["coord"])
    assert a["coord"].shape == (20_000, 3) and a["coord"].dtype == np.float32 and a["segment"].dtype == np.int64
    assert a["color"].min() >= 0 and a["color"].max() <= 255
    np.testing.assert_allclose(np.linalg.norm(a["normal"], axis=1), 1.0, atol=1e-5)
    seen = set()
    for seed in range(6):
        s = make_indoor_scene(_rng(seed), 5_000)
        assert len(s["segment"]) == 5_000 and s["segment"].min() >= 0 and s["segment"].max() < len(INDOOR_CLASSES)
        seen |= {INDOOR_CLASSES[i] for i in np.unique(s["segment"])}
        floor = s["coord"][s["segment"] == INDOOR_CLASSES.index("floor")]
        ceiling = s["coord"][s["segment"] == INDOOR_CLASSES.index("ceiling")]
        assert abs(floor[:, 2].mean()) < 0.01 and 2.5 < ceiling[:, 2].mean() < 3.4
    assert {"floor", "ceiling", "wall", "door", "window", "table", "chair", "shelf"} <= seen


def test_outdoor_scan_deterministic_exact_counts_and_labels():
    a, b = make_outdoor_scan(_rng(1), 30_000), make_outdoor_scan(_rng(1), 30_000)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert a["coord"].shape == (30_000, 3) and a["strength"].shape == (30_000, 1)
    assert 0 <= a["strength"].min() and a["strength"].max() <= 1
    seen = set()
    for seed in range(4):
        s = make_outdoor_scan(_rng(seed), 8_000, beams=32)
        assert len(s["segment"]) == 8_000 and s["segment"].min() >= 0 and s["segment"].max() < len(OUTDOOR_CLASSES)
        assert np.linalg.norm(s["coord"] - [0, 0, H], axis=1).max() < 80.0 * 1.01
        seen |= {OUTDOOR_CLASSES[i] for i in np.unique(s["segment"])}
    assert {"road", "sidewalk", "terrain", "building", "vegetation", "trunk", "car", "pole"} <= seen


def test_outdoor_density_falls_with_range():
    s = make_outdoor_scan(_rng(7), None, beams=64)  # one full turn, every return
    ground = np.isin(s["segment"], [OUTDOOR_CLASSES.index(c) for c in ("road", "sidewalk", "terrain")])
    r = np.hypot(s["coord"][ground, 0], s["coord"][ground, 1])

    def density(lo, hi):
        return ((r >= lo) & (r < hi)).sum() / (np.pi * (hi * hi - lo * lo))

    d = [density(5, 10), density(10, 20), density(20, 40)]
    assert d[0] > 2 * d[1] > 0 and d[1] > 2 * d[2]
    # the beams hit the ground on rings: one ring per downward elevation
    z = s["coord"][ground, 2]
    assert np.abs(z).max() < 0.5


def test_occlusion_nothing_behind_a_wall():
    wall = Primitives(
        boxes=np.array([[12.0, 0.0, 5.0, 0.5, 6.0, 5.0, 0.0]]),
        box_labels=np.array([3]),
        cylinders=np.zeros((0, 5)),
        cylinder_labels=np.zeros(0, np.int64),
        ellipsoids=np.zeros((0, 6)),
        ellipsoid_labels=np.zeros(0, np.int64),
    )
    s = scan_layout(wall, _rng(0), beams=64, azimuth_steps=1024, sensor_height=H)
    x, y = s["coord"][:, 0], s["coord"][:, 1]
    shadow = (x > 0) & (np.abs(y / np.maximum(x, 1e-6)) < 5.5 / 12.5)  # inside the wall's azimuth span
    assert (s["segment"][shadow] == 3).sum() > 500
    assert x[shadow].max() < 11.5 + 0.2  # no return beyond the wall's face (range noise: 3.4 cm here)
    assert (x[~shadow] > 13).any()  # elsewhere the ground goes on


def test_occlusion_in_random_streets_first_hit_wins():
    for seed in range(3):
        rng = _rng(seed)
        prims = street_layout(rng)
        d = sensor_directions(64, 512, rng=rng)
        origin = np.array([0.0, 0.0, H])
        t, lab = cast_rays(origin, d, prims, rng)
        solid_only = Primitives(
            prims.boxes,
            prims.box_labels,
            prims.cylinders,
            prims.cylinder_labels,
            np.zeros((0, 6)),
            np.zeros(0, np.int64),
            prims.road,
            prims.sidewalk,
        )
        t_solid, _ = cast_rays(origin, d, solid_only, rng)
        hit = np.isfinite(t)
        assert hit.mean() > 0.5
        assert np.all(t[hit] <= t_solid[hit] + 1e-4)  # nothing is seen through a box or cylinder
        behind = ~np.isfinite(t_solid) | (t_solid > t + 1e-4)  # foliage in front of a solid hides it
        assert np.all(behind[hit] | (t[hit] >= t_solid[hit] - 1e-4))


def test_outdoor_scan_is_fast():
    make_outdoor_scan(_rng(0), 10_000)  # warm-up
    start = time.perf_counter()
    s = make_outdoor_scan(_rng(11), 100_000)
    elapsed = time.perf_counter() - start
    assert len(s["coord"]) == 100_000
    assert elapsed < 2.0, f"a 100k-point scan took {elapsed:.2f} s"


def test_procedural_scenes_dataset_items_splits_and_registry():
    assert DATASETS.get("scene_procedural") is ProceduralScenes
    ds = ProceduralScenes("train", num_scenes=3, num_points=2_000, kind="indoor", seed=5)
    item = ds[1]
    assert item["pos"].shape == (2_000, 3) and item["x"].shape == (2_000, 3) and item["y"].dtype == torch.int64
    assert item["scene"] == "indoor_train_00001" and ds.num_classes == len(INDOOR_CLASSES) and ds.in_channels == 3
    again = ProceduralScenes("train", num_scenes=3, num_points=2_000, kind="indoor", seed=5)[1]
    torch.testing.assert_close(item["pos"], again["pos"])
    val = ProceduralScenes("val", num_scenes=3, num_points=2_000, kind="indoor", seed=5)[1]
    assert not torch.equal(item["pos"], val["pos"])
    out = ProceduralScenes(
        "val", num_scenes=2, num_points=3_000, kind="outdoor", beams=32, features=("xyz", "intensity", "height")
    )
    batch = collate_points([out[0], out[1]])
    assert batch["x"].shape == (6_000, 5) and batch["y"].shape == (6_000,) and batch["scene"][1] == "outdoor_val_00001"
    assert out.class_names == list(OUTDOOR_CLASSES) and out.ignore_index == -1
    with pytest.raises(ValueError, match="kind"):
        ProceduralScenes(kind="forest")
    with pytest.raises(ValueError, match="num_points"):
        ProceduralScenes(num_points=0)
    with pytest.raises(ValueError, match="num_points=10000000000000"):
        ProceduralScenes(num_points=10**13)


def test_crops_per_scene_gives_each_copy_its_own_crop_and_keeps_the_scene_count():
    from gridify.training.data import set_train_epoch

    ds = ProceduralScenes(
        "train", num_scenes=2, num_points=3_000, kind="outdoor", seed=1, max_points=500, crops_per_scene=3
    )
    assert len(ds) == 6 and ds.scene_count() == 2
    set_train_epoch(ds, None, seed=0, epoch=0)  # the deterministic per-(seed, epoch, scene) crops training uses
    items = [ds[i] for i in range(6)]
    assert [int(it["index"]) for it in items] == [0, 1, 0, 1, 0, 1]
    # copies of one scene are different crops; each copy is reproducible
    assert not torch.equal(items[0]["pos"], items[2]["pos"]) and not torch.equal(items[2]["pos"], items[4]["pos"])
    assert torch.equal(ds[2]["pos"], items[2]["pos"])
    # copy 0 is the crop a run without copies draws (crops_per_scene=1 unchanged)
    one = ProceduralScenes("train", num_scenes=2, num_points=3_000, kind="outdoor", seed=1, max_points=500)
    set_train_epoch(one, None, seed=0, epoch=0)
    assert len(one) == 2 and torch.equal(one[1]["pos"], items[1]["pos"])
    # the label counts are per scene, not per copy
    assert ds.label_counts().sum() == one.label_counts().sum()
    with pytest.raises(IndexError, match="out of range for 6 items"):
        ds[6]
    # other splits hold whole scenes, once each
    val = ProceduralScenes("val", num_scenes=2, num_points=3_000, kind="outdoor", seed=1, crops_per_scene=3)
    assert len(val) == 2
    with pytest.raises(ValueError, match="crops_per_scene"):
        ProceduralScenes("train", num_scenes=2, num_points=3_000, max_points=500, crops_per_scene=0)


def test_class_balanced_crops_carry_less_of_the_most_frequent_class_and_stay_reproducible():
    from gridify.training.data import set_train_epoch

    shares = {}
    for mode in ("random", "class_balanced"):
        ds = ProceduralScenes(
            "train",
            num_scenes=2,
            num_points=6_000,
            kind="outdoor",
            seed=1,
            max_points=600,
            crops_per_scene=20,
            crop_centre=mode,
        )
        set_train_epoch(ds, None, seed=0, epoch=0)
        counts = np.zeros(ds.num_classes)
        for i in range(len(ds)):
            y = ds[i]["y"].numpy()
            counts += np.bincount(y[y >= 0], minlength=ds.num_classes)
        top = int(np.argmax(ds.label_counts()))  # the ground of an outdoor scan
        shares[mode] = counts[top] / counts.sum()
        assert torch.equal(ds[5]["y"], ds[5]["y"])  # a copy's crop is a function of (seed, epoch, scene)
    assert shares["class_balanced"] < shares["random"] - 0.1
    assert (
        ProceduralScenes("val", num_scenes=1, num_points=3_000, crop_centre="class_balanced")[0]["y"].numel() == 3_000
    )
    with pytest.raises(ValueError, match="ProceduralScenes: crop_centre must be one of"):
        ProceduralScenes("train", num_scenes=1, num_points=3_000, max_points=500, crop_centre="rare")


def test_mix_draws_training_items_from_two_scans_and_leaves_other_splits_whole():
    from gridify.training.data import set_train_epoch

    kw = dict(
        num_scenes=3, num_points=3_000, kind="outdoor", seed=1, voxel_size=0.05, beams=32
    )  # no crop: the whole mix
    ds = ProceduralScenes("train", mix="lasermix", mix_prob=1.0, **kw)
    set_train_epoch(ds, None, seed=0, epoch=0)
    scans = [ds.scene(i)["coord"] for i in range(3)]
    rows = [{tuple(p) for p in s} for s in scans]
    item = ds[0]
    src = np.array([[tuple(p) in r for r in rows] for p in item["pos"].numpy()])
    assert src.any(1).all()  # every point is a point of one of the scans (no crop offset: metres)
    assert src[:, 0].any() and src[:, 1:].any()  # and both scan 0 and another scan contribute
    assert torch.equal(ds[0]["pos"], item["pos"])  # the same epoch draws the same mix
    set_train_epoch(ds, None, seed=0, epoch=1)
    assert not torch.equal(ds[0]["pos"], item["pos"])  # another epoch another
    # mix_prob 0 is no mix: the crops of a dataset without one
    plain = ProceduralScenes("train", **kw)
    off = ProceduralScenes("train", mix="polarmix", mix_prob=0.0, **kw)
    for d in (plain, off):
        set_train_epoch(d, None, seed=0, epoch=0)
    assert torch.equal(plain[1]["pos"], off[1]["pos"])
    # other splits score the scenes as they are
    val = ProceduralScenes("val", mix="lasermix", mix_prob=1.0, **kw)
    assert val.mix is None and len(val[0]["pos"]) == 3_000
    # paste: the scan whole plus two rotated copies of another scan's cars and people
    paste = ProceduralScenes("train", mix="paste", mix_prob=1.0, **kw)
    assert [paste.class_names[i] for i in paste.paste_labels] == ["car", "person"]
    set_train_epoch(paste, None, seed=0, epoch=0)
    item, whole = paste[0], paste.scene(0)
    n = len(whole["coord"])
    np.testing.assert_array_equal(item["pos"][:n].numpy(), whole["coord"])
    added = item["y"][n:].numpy()
    assert len(added) > 0 and len(added) % 2 == 0 and np.isin(added, list(paste.paste_labels)).all()
    with pytest.raises(ValueError, match=r"mix='paste' copies the classes car, .* this dataset has none of them"):
        ProceduralScenes("train", mix="paste", num_scenes=2, num_points=3_000, kind="indoor", voxel_size=0.05)
    with pytest.raises(ValueError, match=r"ProceduralScenes: mix must be one of .*got 'cutmix'"):
        ProceduralScenes("train", mix="cutmix", **kw)
    with pytest.raises(ValueError, match=r"mix_prob must be a probability in \[0, 1\], got 1.5"):
        ProceduralScenes("train", mix="lasermix", mix_prob=1.5, **kw)
