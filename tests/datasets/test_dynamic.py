"""Sequences of clouds (gridify.datasets.dynamic): the dynamic-shapes dataset, collation, reading sequences."""

import numpy as np
import pytest
import torch

from gridify.datasets import DYNAMIC_CLASSES, DynamicShapes, collate_sequences, read_sequence
from gridify.models import TemporalGridifiedClassifier


# ------------------------------------------------------------------------------------------------
# the model
# ------------------------------------------------------------------------------------------------
def _tiny(rnn="cfc", classes=3, **kw):
    return TemporalGridifiedClassifier(
        3,
        classes,
        rnn=rnn,
        rnn_hidden=12,
        cfc_backbone_units=12,
        resolution=3,
        k=4,
        hidden_channels=8,
        depth=1,
        kernel_size=3,
        dropout=0.0,
        **kw,
    )


def _write_frames(folder, n_frames, rng):
    paths = []
    for i in range(n_frames):
        p = folder / f"sweep_{i}.xyz"
        np.savetxt(p, rng.uniform(-2, 2, size=(20 + i, 3)))
        paths.append(p)
    return paths


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------
def test_dynamic_shapes_deterministic_and_bounded():
    a = DynamicShapes("train", num_samples_per_class=2, num_points=64, sampling="irregular", seed=3)
    b = DynamicShapes("train", num_samples_per_class=2, num_points=64, sampling="irregular", seed=3)
    c = DynamicShapes("train", num_samples_per_class=2, num_points=64, sampling="irregular", seed=4)
    assert len(a) == 2 * len(DYNAMIC_CLASSES)
    for i in (0, 5, 11):
        torch.testing.assert_close(a[i]["pos"], b[i]["pos"])
        torch.testing.assert_close(a[i]["times"], b[i]["times"])
    assert not torch.equal(a[0]["times"], c[0]["times"])
    assert int(a[5]["y"]) == 5 % len(DYNAMIC_CLASSES)
    # access order does not matter
    torch.testing.assert_close(
        DynamicShapes("train", num_samples_per_class=2, num_points=64, sampling="irregular", seed=3)[11]["pos"],
        a[11]["pos"],
    )
    for i in range(len(a)):
        assert a[i]["pos"].abs().max() < 1.0


def test_dynamic_shapes_timestamps():
    reg = DynamicShapes("test", num_samples_per_class=3, num_frames=6, sampling="regular")
    irr = DynamicShapes(
        "test", num_samples_per_class=3, num_frames=6, sampling="irregular", drop_prob=0.4, min_frames=2
    )
    lengths = set()
    for i in range(len(irr)):
        t = irr[i]["times"]
        assert bool((t[1:] > t[:-1]).all()), "irregular times must increase strictly"
        assert 2 <= len(t) <= 6 and irr[i]["pos"].shape == (len(t), 256, 3)
        lengths.add(len(t))
        torch.testing.assert_close(reg[i]["times"], torch.arange(6.0))
    assert len(lengths) > 1  # variable length
    dts = torch.cat([irr[i]["times"].diff() for i in range(len(irr))])
    assert dts.std() > 0.2  # genuinely irregular
    mixed = DynamicShapes("test", num_samples_per_class=6, sampling="mixed")
    assert {mixed.regime(i) for i in range(len(mixed))} == {"regular", "irregular"}


def test_dynamic_shapes_errors():
    with pytest.raises(ValueError, match="sampling must be one of"):
        DynamicShapes(sampling="random")
    with pytest.raises(ValueError, match=r"jitter must be in \[0, 0.5\)"):
        DynamicShapes(jitter=0.5)
    with pytest.raises(ValueError, match="classes must be a non-empty list"):
        DynamicShapes(classes=["spin"])
    with pytest.raises(ValueError, match="min_frames"):
        DynamicShapes(num_frames=3, min_frames=4)
    with pytest.raises(IndexError, match="out of range"):
        DynamicShapes(num_samples_per_class=1)[100]


def test_collate_sequences():
    ds = DynamicShapes("val", num_samples_per_class=1, num_points=32, sampling="irregular")
    items = [ds[i] for i in range(4)]
    b = collate_sequences(items)
    t_max = max(len(it["times"]) for it in items)
    assert b["pos"].shape == (4, t_max, 32, 3) and b["mask"].shape == (4, t_max)
    assert b["lengths"].tolist() == [len(it["times"]) for it in items]
    assert b["y"].tolist() == [0, 1, 2, 3]
    for i, it in enumerate(items):
        n = len(it["times"])
        torch.testing.assert_close(b["pos"][i, :n], it["pos"])
        assert b["mask"][i].sum() == n
    bad = dict(items[1], pos=items[1]["pos"][:, :16])
    with pytest.raises(ValueError, match="points per frame"):
        collate_sequences([items[0], bad])


def test_read_sequence_folder_and_list(tmp_path):
    rng = np.random.default_rng(0)
    paths = _write_frames(tmp_path, 11, rng)  # natural order: sweep_2 before sweep_10
    (tmp_path / "timestamps.txt").write_text(
        "# sweep times\n" + "\n".join(f"{0.1 * i + 0.01 * (i % 2):.3f}" for i in range(11)) + "\n"
    )
    seq = read_sequence(tmp_path)
    assert len(seq) == 11 and seq.frames[10].points.shape == (30, 3)
    assert seq.times[1] == pytest.approx(0.11)
    item = seq.to_item(16)
    assert item["pos"].shape == (11, 16, 3) and item["pos"].abs().max() <= 1.0 + 1e-6
    assert item["times"][0] == 0
    seq2 = read_sequence(paths[:3], timestamps=[0.0, 0.5, 2.0])
    assert seq2.times.tolist() == [0.0, 0.5, 2.0]
    assert read_sequence(paths[:3], timestamps="index").times.tolist() == [0.0, 1.0, 2.0]
    # the dataset items and the model accept it
    m = _tiny()
    out = m.eval()(item["pos"][None], item["times"][None])
    assert out.logits.shape == (1, 3)


def test_read_sequence_errors(tmp_path):
    rng = np.random.default_rng(1)
    paths = _write_frames(tmp_path, 3, rng)
    with pytest.raises(ValueError, match="got 3 frames but 2 timestamps"):
        read_sequence(paths, timestamps=[0.0, 1.0])
    with pytest.raises(ValueError, match="strictly increasing; times\\[2\\]"):
        read_sequence(paths, timestamps=[0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="NaN/Inf"):
        read_sequence(paths, timestamps=[0.0, float("nan"), 1.0])
    with pytest.raises(FileNotFoundError, match="frame 1 .* does not exist"):
        read_sequence([paths[0], tmp_path / "missing.xyz", paths[2]], timestamps="index")
    with pytest.raises(FileNotFoundError, match="no timestamps given"):
        read_sequence(tmp_path)
    with pytest.raises(ValueError, match="timestamps is required"):
        read_sequence(paths)
    with pytest.raises(FileNotFoundError, match="frame folder .* does not exist"):
        read_sequence(tmp_path / "nope")
    (tmp_path / "times.txt").write_text("0\n1\nabc\n")
    with pytest.raises(ValueError, match="line 3: cannot parse"):
        read_sequence(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="holds no point files"):
        read_sequence(empty, timestamps="index")


def test_dynamic_shapes_resample_false_moves_fixed_surface_points():
    kw = dict(num_samples_per_class=1, num_frames=3, num_points=64, noise=0.0, classes=["sway_fast"])
    fixed = DynamicShapes("test", resample=False, **kw)[0]["pos"]
    shift = fixed[1] - fixed[0]  # pure translation: every point moves by the same vector
    torch.testing.assert_close(shift, shift[:1].expand_as(shift), atol=1e-5, rtol=0)
    assert float(shift[0].norm()) > 1e-3
    fresh = DynamicShapes("test", resample=True, **kw)[0]["pos"]
    assert not torch.allclose(fresh[1] - fresh[0], (fresh[1] - fresh[0])[:1].expand(64, 3), atol=1e-3)
    with pytest.raises(TypeError, match="resample must be a bool"):
        DynamicShapes("test", resample="no", **kw)
