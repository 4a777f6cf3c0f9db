"""The scene-level features (gridify.datasets.scene_geometry: strength_scan, ground_height, verticality, planarity),
has_strength and the drop_strength augmentation: their values on small synthetic scenes, and that a dataset's
training crops, its whole-scene items and a scan given whole agree."""

import numpy as np
import pytest
import torch

from gridify.datasets import DatasetError, ProceduralScenes
from gridify.datasets.scene_base import SCENE_FEATURES, build_scene_features, scene_height
from gridify.datasets.scene_geometry import (
    GROUND_CELL,
    STRENGTH_CLIP,
    ground_height,
    local_geometry,
    scene_level_features,
    strength_scan,
)
from gridify.training import config as C
from gridify.training.data import EpochAugment
from gridify.transforms import RandomDropStrength

NEW = ["strength_scan", "ground_height", "verticality", "planarity", "has_strength"]


def _tilted_ground(rng, n=12000, half=20.0, slope=(0.1, 0.05)):
    xy = rng.uniform(-half, half, (n, 2))
    return np.c_[xy, slope[0] * xy[:, 0] + slope[1] * xy[:, 1] + 2.0]


def test_ground_height_follows_a_tilted_ground_where_the_global_height_does_not():
    rng = np.random.default_rng(0)
    ground = _tilted_ground(rng)
    gh = ground_height(ground)
    assert gh.dtype == np.float32 and gh.shape == (len(ground),)
    assert np.abs(gh).max() < 0.1  # the ground itself, on a ~6 degree slope
    assert np.ptp(scene_height(ground[:, 2])) > 4.0  # the global 1st percentile: metres off across the scan
    # a 4 x 4 m block 3 m tall (its top seen only: no ground return under it), a pole, a stray return below
    top = np.c_[rng.uniform(2, 6, (800, 2)), np.zeros(800)]
    top[:, 2] = 0.1 * top[:, 0] + 0.05 * top[:, 1] + 2.0 + 3.0
    pole = np.c_[np.full((100, 2), -8.0), np.zeros(100)]
    pole[:, 2] = 0.1 * -8 + 0.05 * -8 + 2.0 + np.linspace(0, 4, 100)
    stray = np.array([[10.2, -10.2, -25.0]])
    seen = ~((ground[:, 0] > 2) & (ground[:, 0] < 6) & (ground[:, 1] > 2) & (ground[:, 1] < 6))  # under the block
    ground, gh = ground[seen], gh[seen]
    scene = np.concatenate([ground, top, pole, stray])
    g = ground_height(scene)
    n = len(ground)
    np.testing.assert_allclose(g[:n], gh, atol=0.1)  # the objects and the stray move the ground's values little
    assert np.abs(g[n : n + 800] - 3.0).max() < 0.15  # the block's top: 3 m above the ground under it
    np.testing.assert_allclose(g[n + 800 : n + 900], np.linspace(0, 4, 100), atol=0.15)  # the pole from its foot
    assert ground_height(np.zeros((0, 3))).shape == (0,)
    # shifting the scan in xy (another grid alignment) or in z changes little
    shifted = scene + np.array([0.37 * GROUND_CELL, -0.61 * GROUND_CELL, 100.0])
    np.testing.assert_allclose(ground_height(shifted)[:n], gh, atol=0.1)


def test_verticality_and_planarity_of_a_wall_a_floor_and_a_pole():
    rng = np.random.default_rng(1)
    floor = np.c_[rng.uniform(0, 6, (6000, 2)), rng.normal(0, 0.003, 6000)]
    wall = np.c_[rng.normal(0, 0.003, 4000), rng.uniform(0, 6, 4000), rng.uniform(0.5, 3, 4000)]
    wall[:, 0] -= 2.0  # away from the floor
    pole = np.c_[np.full((300, 2), 3.0) + rng.normal(0, 0.003, (300, 2)), np.linspace(0.5, 3.5, 300)]
    pole[:, 0] += 10.0
    scene = np.concatenate([floor, wall, pole]).astype(np.float32)
    vert, plan = local_geometry(scene)
    f, w, p = slice(0, 6000), slice(6000, 10000), slice(10000, None)
    assert vert.dtype == np.float32 and vert.shape == plan.shape == (len(scene),)
    assert np.median(vert[f]) < 0.02 and np.median(vert[w]) > 0.98
    assert np.median(plan[f]) > 0.5 and np.median(plan[w]) > 0.5 and np.median(plan[p]) < 0.1
    assert ((vert >= 0) & (vert <= 1) & (plan >= 0) & (plan <= 1)).all()
    # the same scene turned about z, and its points in another order: the same values
    turn = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], np.float32)
    np.testing.assert_allclose(local_geometry(scene @ turn.T)[0][w], vert[w], atol=0.02)
    order = rng.permutation(len(scene))
    np.testing.assert_allclose(local_geometry(scene[order])[0], vert[order], atol=1e-5)


def test_strength_scan_is_invariant_to_the_intensity_scale():
    rng = np.random.default_rng(2)
    s = rng.gamma(2.0, 0.1, 5000).astype(np.float32)
    base = strength_scan(s)
    assert base.dtype == np.float32 and abs(float(np.median(base))) < 1e-6
    np.testing.assert_allclose(strength_scan(3.7 * s), base, atol=1e-5)  # another sensor's calibration
    np.testing.assert_allclose(strength_scan(s[:, None] * 255.0), base, atol=1e-5)
    assert np.percentile(base, 90) - np.percentile(base, 10) == pytest.approx(1.0, abs=1e-3)
    assert float(np.abs(strength_scan(np.r_[s, 1e6]))[-1]) == STRENGTH_CLIP  # a retro-reflector stays in range
    np.testing.assert_array_equal(strength_scan(np.full(10, 0.4)), np.zeros(10, np.float32))  # constant: 0
    with_nan = strength_scan(np.r_[s[:100], np.nan])
    assert np.isnan(with_nan[-1]) and np.isfinite(with_nan[:-1]).all()  # the NaN row stays the NaN row
    # through the builder: integer intensities on their unit scale give the same values
    pos = rng.normal(size=(256, 3)).astype(np.float32)
    raw = rng.integers(0, 65536, 256).astype(np.uint16)
    np.testing.assert_allclose(
        build_scene_features(["strength_scan"], pos, strength=raw)[:, 0], strength_scan(raw / 65535.0), atol=1e-6
    )


def test_has_strength_zeroes_the_strength_of_a_scene_without_one_and_its_absence_refuses():
    pos = np.random.default_rng(3).normal(size=(50, 3)).astype(np.float32)
    s = np.linspace(0, 1, 50, dtype=np.float32)
    x = build_scene_features(["strength", "strength_scan", "has_strength"], pos, strength=s)
    np.testing.assert_array_equal(x[:, 2], np.ones(50))
    np.testing.assert_allclose(x[:, 1], strength_scan(s))
    none = build_scene_features(["strength", "strength_scan", "has_strength"], pos)
    np.testing.assert_array_equal(none, np.zeros((50, 3)))
    for names in (["strength"], ["strength_scan", "height"]):
        with pytest.raises(DatasetError, match=r"scene: feature .* the scene has no strength .* add has_strength to"):
            build_scene_features(names, pos)
    assert {f: SCENE_FEATURES[f] for f in NEW} == dict.fromkeys(NEW, 1)


def _rows_of(scene_pos, crop_pos):
    """The row of the scene of every point of a crop (the crop's points are the scene's, not moved)."""
    index = {tuple(p): i for i, p in enumerate(scene_pos.tolist())}
    return np.array([index[tuple(p)] for p in crop_pos.tolist()])


@pytest.mark.parametrize("mix", [None, "polarmix"])
def test_training_crops_whole_scene_items_and_a_whole_scan_agree(mix):
    """Computed on the whole scene before the crop (and before a mix, each scan on its own): a crop's values are
    the whole scene's at its points, as predict computes them on the whole scan."""
    names = ["strength", "height"] + NEW
    kw = dict(num_scenes=2, num_points=6000, kind="outdoor", seed=4, features=names)
    train = ProceduralScenes("train", voxel_size=0.3, max_points=800, mix=mix, mix_prob=1.0, **kw)
    item = train[0]
    assert item["x"].shape == (len(item["pos"]), len(names)) and not set(NEW) & set(item)
    whole = []
    for i in range(2):
        scene = train.scene(i)
        whole.append((scene["coord"], build_scene_features(names, scene["coord"], strength=scene["strength"])))
    pos = item["pos"].numpy()
    cols = [names.index(f) for f in NEW]
    if mix is None:
        rows = _rows_of(whole[0][0], pos)
        np.testing.assert_array_equal(item["x"].numpy()[:, cols], whole[0][1][rows][:, cols])
    else:  # a point of either scan keeps its own scan's values
        found = 0
        for coord, x in whole:
            index = {tuple(p): i for i, p in enumerate(coord.tolist())}
            mine = [(j, index[tuple(p)]) for j, p in enumerate(pos.tolist()) if tuple(p) in index]
            if mine:
                j, r = map(np.array, zip(*mine))
                np.testing.assert_array_equal(item["x"].numpy()[j][:, cols], x[r][:, cols])
                found += len(mine)
        assert found == len(pos)
    val = ProceduralScenes("val", **kw)
    v = val[1]
    np.testing.assert_array_equal(
        v["x"].numpy(), build_scene_features(names, val.scene(1)["coord"], strength=val.scene(1)["strength"])
    )


def test_drop_strength_zeroes_the_whole_crop_with_probability_p():
    rng = np.random.default_rng(5)
    sample = {
        "pos": rng.normal(size=(40, 3)).astype(np.float32),
        "strength": rng.uniform(0.1, 1, (40, 1)).astype(np.float32),
        "strength_scan": rng.normal(size=40).astype(np.float32),
        "has_strength": np.ones(40, np.float32),
        "y": np.zeros(40, np.int64),
    }
    drop = RandomDropStrength(0.3, seed=0)
    dropped = 0
    for _ in range(2000):
        out = drop(sample)
        gone = not out["has_strength"].any()
        for key in ("strength", "strength_scan"):
            assert (not out[key].any()) if gone else np.array_equal(out[key], sample[key])  # all rows, or none
        assert out["has_strength"].all() or gone
        dropped += gone
    assert 0.27 < dropped / 2000 < 0.33  # p = 0.3 (binomial sd 0.01)
    assert sample["strength"].all() and sample["has_strength"].all()  # the input is never changed
    again = RandomDropStrength(0.3, seed=0)
    assert [bool(again(sample)["has_strength"].any()) for _ in range(50)] == [
        bool(d(sample)["has_strength"].any()) for d in [RandomDropStrength(0.3, seed=0)] for _ in range(50)
    ]
    assert not RandomDropStrength(1.0)(sample)["strength"].any()
    assert RandomDropStrength(0.0)(sample)["strength"].all()
    tensors = {k: torch.as_tensor(v) for k, v in sample.items()}
    out = RandomDropStrength(1.0)(tensors)
    assert isinstance(out["has_strength"], torch.Tensor) and not out["strength"].any()
    with pytest.raises(ValueError, match=r"RandomDropStrength: p must be a probability in \[0, 1\], got 1.5"):
        RandomDropStrength(1.5)
    with pytest.raises(C.ConfigError, match=r"data.augmentations: drop_strength: .*p must be a probability"):
        C.parse_augmentations([{"name": "drop_strength", "p": -1}])


def test_drop_strength_in_a_run_zeroes_strength_and_has_strength_together():
    names = ["strength", "strength_scan", "has_strength"]
    specs = C.parse_augmentations(["rotate_z", {"name": "drop_strength", "p": 0.5}])
    aug = EpochAugment(specs, seed=0, fit=False)
    ds = ProceduralScenes(
        "train",
        num_scenes=3,
        num_points=3000,
        kind="outdoor",
        seed=6,
        features=names,
        voxel_size=0.3,
        max_points=600,
        crops_per_scene=6,
        transform=aug,
    )
    flags = []
    for i in range(len(ds)):
        item = ds[i]
        x = item["x"]
        flag = float(x[0, 2])
        assert (x[:, 2] == flag).all()  # the whole crop, or none of it
        if flag == 0:
            assert not x[:, :2].any() and not item["strength"].any()
        else:
            assert x[:, 0].any()
        flags.append(flag)
    assert 0 < sum(flags) < len(flags)  # some crops kept their intensity, some lost it
    # the indoor scenes have no intensity: with has_strength they train with strength 0, without it they are refused
    indoor = ProceduralScenes(
        "val", num_scenes=1, num_points=2000, kind="indoor", seed=1, features=["strength", "has_strength"]
    )[0]
    assert not indoor["x"].any()
    with pytest.raises(DatasetError, match=r"feature 'strength' requested but the scene has no strength"):
        ProceduralScenes("val", num_scenes=1, num_points=2000, kind="indoor", seed=1, features=["strength"])[0]


def test_a_config_takes_every_new_feature_and_the_augmentation():
    cfg = C.resolve_config(
        "semantickitti_mini",
        [
            "data.features=[strength, strength_scan, height, ground_height, verticality, planarity, has_strength]",
            "data.augmentations=[rotate_z, {name: drop_strength, p: 0.3}]",
        ],
    )
    assert C.feature_width(cfg["data"]["features"]) == 7
    assert cfg["data"]["augmentations"][1] == {"name": "drop_strength", "p": 0.3}
    with pytest.raises(C.ConfigError, match=r"data.features"):
        C.resolve_config("semantickitti_mini", ["data.features=[ground_heights]"])


def test_scene_level_features_computes_only_what_is_asked():
    pos = _tilted_ground(np.random.default_rng(7), n=500)
    assert scene_level_features(["height", "strength"], pos) == {}
    out = scene_level_features(["planarity", "strength_scan"], pos)  # no strength given: no strength_scan
    assert list(out) == ["planarity"] and out["planarity"].shape == (500,)
