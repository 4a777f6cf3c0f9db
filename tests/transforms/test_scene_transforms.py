"""Scene transforms of gridify.transforms: :class:`~gridify.transforms.GridSample`,
:class:`~gridify.transforms.SceneCrop`, :func:`~gridify.transforms.crop_xy` and
:class:`~gridify.transforms.SceneSampler` (budget, labels follow their points, seeded)."""

import numpy as np
import pytest
import torch

from gridify.transforms import GridSample, SceneCrop, SceneSampler, crop_centre, crop_xy, mix_scenes, voxel_ids


# --------------------------------------------------------------------------------------
# grid sampling and crops
# --------------------------------------------------------------------------------------
def _cloud(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    pos = (rng.random((n, 3)) * [12.0, 8.0, 3.0]).astype(np.float32)
    return {"pos": pos, "y": np.arange(n), "color": rng.random((n, 3)).astype(np.float32)}


def test_grid_sample_one_point_per_voxel_labels_follow_and_seeded():
    s = _cloud()
    inverse, v = voxel_ids(s["pos"], 0.5)
    out = GridSample(0.5, seed=3)(s)
    assert len(out["pos"]) == v and len(np.unique(inverse[out["y"]])) == v
    np.testing.assert_array_equal(out["pos"], s["pos"][out["y"]])  # every per-point entry alike
    np.testing.assert_array_equal(out["color"], s["color"][out["y"]])
    assert np.all(np.diff(out["y"]) > 0)  # original order kept
    again = GridSample(0.5, seed=3)(s)
    np.testing.assert_array_equal(out["y"], again["y"])
    assert not np.array_equal(GridSample(0.5, seed=4)(s)["y"], out["y"])
    first = GridSample(0.5, "first")(s)["y"]
    expect = np.array(sorted({int(inverse[j]): j for j in range(len(inverse) - 1, -1, -1)}.values()))
    np.testing.assert_array_equal(first, expect)  # the lowest index of every voxel
    det = GridSample(0.5, deterministic=True, seed=1)
    det(_cloud(seed=9))
    np.testing.assert_array_equal(det(s)["y"], GridSample(0.5, deterministic=True, seed=1)(s)["y"])
    t = GridSample(0.5, seed=3)({k: torch.as_tensor(a) for k, a in s.items()})
    np.testing.assert_array_equal(t["y"].numpy(), out["y"])
    with pytest.raises(ValueError, match="GridSample: voxel_size must be a positive finite number"):
        GridSample(0.0)
    with pytest.raises(ValueError, match="mode"):
        GridSample(0.1, "mean")


def test_scene_crop_budget_nearest_in_xy_and_whole_under_budget():
    s = _cloud()
    out = SceneCrop(500, seed=2)(s)
    idx = out["y"]
    assert len(idx) == 500 and np.all(np.diff(idx) > 0)
    np.testing.assert_array_equal(out["color"], s["color"][idx])
    # the kept points are the nearest in xy to some point: a disc around it holds exactly them
    p = s["pos"][:, :2].astype(np.float64)
    kept = np.zeros(len(p), bool)
    kept[idx] = True
    found = False
    for c in idx:
        d = ((p - p[c]) ** 2).sum(1)
        if d[kept].max() <= d[~kept].min():
            found = True
            break
    assert found
    np.testing.assert_array_equal(SceneCrop(500, seed=2)(s)["y"], idx)
    whole = SceneCrop(4000)(s)
    np.testing.assert_array_equal(whole["y"], s["y"])
    with pytest.raises(ValueError, match="SceneCrop: max_points must be a positive integer"):
        SceneCrop(0)


def test_crop_xy_partition_equals_the_stable_sort_reference_with_ties():
    rng = np.random.default_rng(3)
    for n, m in ((50, 7), (400, 100), (1000, 999), (30, 30), (30, 40)):
        p = rng.integers(0, 4, (n, 3)).astype(np.float64)  # many equal distances: ties at the cut
        for c in (0, n // 2, n - 1):
            d = ((p[:, :2] - p[c, :2]) ** 2).sum(1)
            ref = np.sort(np.argsort(d, kind="stable")[:m])
            np.testing.assert_array_equal(crop_xy(p, c, m), ref)
            np.testing.assert_array_equal(crop_xy(torch.as_tensor(p, dtype=torch.float32), c, m), ref)


def test_scene_sampler_deterministic_mode_and_reseed():
    s = _cloud()
    a = SceneSampler(0.3, 700, seed=5, deterministic=True)
    a(_cloud(seed=1))  # earlier draws do not matter in deterministic mode
    b = SceneSampler(0.3, 700, seed=5, deterministic=True)
    np.testing.assert_array_equal(a(s)["y"], b(s)["y"])
    b.reseed(6)
    assert not np.array_equal(a(s)["y"], b(s)["y"])
    assert len(SceneSampler(None, 700, 256)(s)["y"]) == 256


def test_class_balanced_crop_centre_draws_each_present_class_equally_often():
    # 1,000 points: class 0 holds 970, class 1 holds 25, class 2 holds 5, the rest ignored (-1)
    y = np.zeros(1000, np.int64)
    y[:25], y[25:30], y[30:40] = 1, 2, -1
    rng = np.random.default_rng(0)
    centres = np.array([crop_centre(y, len(y), "class_balanced", rng) for _ in range(3000)])
    share = np.bincount(y[centres] + 1, minlength=4)[1:] / len(centres)
    np.testing.assert_allclose(share, [1 / 3] * 3, atol=0.04)  # uniform over classes, not over points
    assert (y[centres] >= 0).all()  # never an ignored point
    picked = np.array([crop_centre(y, len(y), "random", rng) for _ in range(3000)])
    assert (y[picked] == 0).mean() > 0.9  # random: as the points fall
    # no labels, or none kept: a random point
    assert 0 <= crop_centre(None, 50, "class_balanced", rng) < 50
    assert 0 <= crop_centre(np.full(50, -1), 50, "class_balanced", rng) < 50
    with pytest.raises(ValueError, match=r"labels must hold one id per point \(50\), got 49"):
        crop_centre(np.zeros(49), 50, "class_balanced", rng)


def test_scene_crop_class_balanced_centres_its_crops_on_rare_classes():
    s = _cloud()
    s["y"] = np.where(s["pos"][:, 0] > 11.5, 1, 0)  # a thin strip of class 1 along one edge (about 4 %)
    rare = s["y"] == 1

    def strip_share(centre):
        crop = SceneCrop(300, centre=centre, seed=1)
        return np.mean([rare[np.isin(np.arange(len(rare)), crop.indices(s))].mean() for _ in range(200)])

    assert strip_share("class_balanced") > 3 * strip_share("random")
    out = SceneSampler(0.2, 300, crop_centre="class_balanced", seed=1)(s)
    assert len(out["pos"]) == 300 and set(np.unique(out["y"])) <= {0, 1}
    assert "class_balanced" in repr(SceneSampler(None, 300, crop_centre="class_balanced"))
    with pytest.raises(ValueError, match="SceneCrop: centre must be one of"):
        SceneCrop(300, centre="balanced")
    with pytest.raises(ValueError, match="SceneSampler: crop_centre must be one of"):
        SceneSampler(None, 300, crop_centre="uniform")


# --------------------------------------------------------------------------------------
# scan mixing (LaserMix / PolarMix)
# --------------------------------------------------------------------------------------
def _scan(n, seed, label):
    rng = np.random.default_rng(seed)
    azimuth, incl = rng.uniform(-np.pi, np.pi, n), rng.uniform(-0.4, 0.05, n)
    r = rng.uniform(3, 40, n)
    pos = np.stack([r * np.cos(azimuth), r * np.sin(azimuth), r * np.tan(incl)], 1).astype(np.float32)
    return {"pos": pos, "y": np.full(n, label), "strength": rng.random((n, 1)).astype(np.float32), "name": f"s{label}"}


def test_lasermix_keeps_alternate_inclination_bands_of_each_scan():
    a, b = _scan(3000, 0, 1), _scan(2500, 1, 2)
    out = mix_scenes(a, b, "lasermix", np.random.default_rng(3))
    from_a = out["y"] == 1
    assert set(np.unique(out["y"])) == {1, 2} and out["name"] == "s1" and out["strength"].shape == (len(out["y"]), 1)
    # every point is one of its scan's own rows, a's first, with its own entries
    n_a = int(from_a.sum())
    assert from_a[:n_a].all() and not from_a[n_a:].any()
    rows_a = {tuple(p) for p in a["pos"]}
    assert all(tuple(p) in rows_a for p in out["pos"][:n_a])
    # the bands: sorted by inclination, the source changes only a few times (3-6 bands), and both scans are used
    phi = np.arctan2(out["pos"][:, 2], np.hypot(out["pos"][:, 0], out["pos"][:, 1]))
    changes = np.count_nonzero(np.diff(out["y"][np.argsort(phi, kind="stable")]))
    assert 2 <= changes <= 5 + 2  # the 0.5 / 99.5 % tails are clipped into the outer bands
    # within a band no scan is dropped wholesale: about half of the points of both scans remain
    assert 0.15 < n_a / 3000 < 0.85 and 0.15 < (len(out["y"]) - n_a) / 2500 < 0.85
    # seeded: the same generator state gives the same mix
    again = mix_scenes(a, b, "lasermix", np.random.default_rng(3))
    np.testing.assert_array_equal(again["pos"], out["pos"])


def test_polarmix_swaps_a_half_turn_of_azimuth():
    a, b = _scan(3000, 0, 1), _scan(3000, 1, 2)
    out = mix_scenes(a, b, "polarmix", np.random.default_rng(0))
    theta = np.arctan2(out["pos"][:, 1], out["pos"][:, 0])
    # the points of b fill one half-turn, a's the other: their azimuths never interleave on the circle
    start = np.random.default_rng(0).uniform(-np.pi, np.pi)
    inside = np.mod(theta - start, 2 * np.pi) < np.pi
    np.testing.assert_array_equal(inside, out["y"] == 2)
    assert 0.4 < inside.mean() < 0.6


def test_paste_adds_two_rotated_copies_of_the_chosen_classes():
    a = _scan(2000, 0, 1)
    b = _scan(1500, 1, 2)
    b["y"] = np.random.default_rng(5).integers(0, 4, 1500)  # classes 0..3; paste 2 and 3
    out = mix_scenes(a, b, "paste", np.random.default_rng(7), paste_labels=[2, 3])
    chosen = np.isin(b["y"], [2, 3])
    p = int(chosen.sum())
    assert len(out["pos"]) == 2000 + 2 * p and out["strength"].shape == (2000 + 2 * p, 1) and out["name"] == "s1"
    # a is kept whole and first, unchanged
    np.testing.assert_array_equal(out["pos"][:2000], a["pos"])
    np.testing.assert_array_equal(out["y"][:2000], a["y"])
    # each copy: b's chosen rows with their labels and entries, rotated about z through the sensor (0, 0, 0)
    rng = np.random.default_rng(7)
    angles = (rng.uniform(0, 2 * np.pi / 3), rng.uniform(2 * np.pi / 3, 4 * np.pi / 3))
    for i, angle in enumerate(angles):
        part = slice(2000 + i * p, 2000 + (i + 1) * p)
        np.testing.assert_array_equal(out["y"][part], b["y"][chosen])
        np.testing.assert_array_equal(out["strength"][part], b["strength"][chosen])
        c, s = np.cos(angle), np.sin(angle)
        src = b["pos"][chosen].astype(np.float64)
        want = np.stack([c * src[:, 0] - s * src[:, 1], s * src[:, 0] + c * src[:, 1], src[:, 2]], 1)
        np.testing.assert_allclose(out["pos"][part], want, rtol=0, atol=1e-4)
        assert out["pos"].dtype == np.float32
    # a b without any chosen class adds nothing
    none = mix_scenes(a, b, "paste", np.random.default_rng(7), paste_labels=[9])
    np.testing.assert_array_equal(none["pos"], a["pos"])


def test_paste_refuses_missing_labels_or_classes_naming_them():
    a, b = _scan(100, 0, 1), _scan(100, 1, 2)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"mode 'paste' needs paste_labels, a non-empty sequence .* got \[\]"):
        mix_scenes(a, b, "paste", rng)
    with pytest.raises(ValueError, match=r"paste_labels must be a sequence of class indices, got str"):
        mix_scenes(a, b, "paste", rng, paste_labels="car")
    with pytest.raises(ValueError, match=r"mode 'paste' needs b\['segment'\], one label per point of b"):
        mix_scenes(a, b, "paste", rng, label_key="segment", paste_labels=[2])


def test_mix_scenes_refuses_bad_input_naming_it():
    a, b = _scan(100, 0, 1), _scan(100, 1, 2)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"mix_scenes: mode must be one of .*'lasermix'.*got 'cutmix'"):
        mix_scenes(a, b, "cutmix", rng)
    with pytest.raises(ValueError, match=r"a has the per-point entry 'strength' .* but b has none"):
        mix_scenes(a, {k: v for k, v in b.items() if k != "strength"}, "lasermix", rng)
    bad = dict(b, pos=b["pos"].copy())
    bad["pos"][5, 0] = np.nan
    with pytest.raises(ValueError, match=r"b\['pos'\] contains NaN/Inf"):
        mix_scenes(a, bad, "polarmix", rng)
    with pytest.raises(ValueError, match=r"a\['pos'\] must be a float numpy array \[N, 3\]"):
        mix_scenes(dict(a, pos=a["pos"][:, :2]), b, "polarmix", rng)
    with pytest.raises(ValueError, match="rng must be a numpy.random.Generator"):
        mix_scenes(a, b, "polarmix", 0)
