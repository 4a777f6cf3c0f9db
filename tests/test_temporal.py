import numpy as np
import pytest
import torch

from gridify.datasets import DYNAMIC_CLASSES, DynamicShapes, collate_sequences, read_sequence
from gridify.models import TemporalGridifiedClassifier, build_model
from gridify.models.temporal import timespans_from_times
from gridify.nn import CfC, CfCCell, DeltaTGRU
from gridify.registry import MODELS


def reference_cfc(cell: CfCCell, inp, hx, ts):
    """Direct re-implementation of paper eq. 10 from the cell's parameters."""
    z = torch.cat([inp, hx], -1)
    for m in cell.backbone:
        z = m(z)
    f = z @ cell.f.weight.T + cell.f.bias
    g = torch.tanh(z @ cell.g.weight.T + cell.g.bias)
    h = torch.tanh(z @ cell.h.weight.T + cell.h.bias)
    gate = 1.0 / (1.0 + torch.exp(f * ts[:, None]))  # sigma(-f t)
    if cell.mode == "no_gate":
        return gate * g + h, f, g, h
    return gate * g + (1 - gate) * h, f, g, h


@pytest.mark.parametrize("mode", ["default", "no_gate"])
@pytest.mark.parametrize("layers", [0, 1, 2])
def test_cfc_cell_matches_reference(mode, layers):
    cell = CfCCell(5, 7, backbone_units=11, backbone_layers=layers, mode=mode).double()
    inp, hx = torch.randn(4, 5, dtype=torch.double), torch.randn(4, 7, dtype=torch.double)
    ts = torch.rand(4, dtype=torch.double) * 3
    ref, *_ = reference_cfc(cell, inp, hx, ts)
    torch.testing.assert_close(cell(inp, hx, ts), ref)
    torch.testing.assert_close(cell(inp, hx, ts[:, None]), ref)


def test_cfc_time_limits():
    cell = CfCCell(3, 6, mode="default").double()
    inp, hx = torch.randn(5, 3, dtype=torch.double), torch.randn(5, 6, dtype=torch.double)
    _, f, g, h = reference_cfc(cell, inp, hx, torch.zeros(5, dtype=torch.double))
    # dt = 0: sigma(0) = 1/2, the state is the midpoint of g and h
    torch.testing.assert_close(cell(inp, hx, 0.0), (g + h) / 2)
    # dt -> inf: h where f > 0, g where f < 0
    far = cell(inp, hx, 1e6)
    torch.testing.assert_close(far, torch.where(f > 0, h, g))
    nogate = CfCCell(3, 6, mode="no_gate").double()
    nogate.load_state_dict(cell.state_dict())
    torch.testing.assert_close(nogate(inp, hx, 0.0), g / 2 + h)
    assert not torch.allclose(nogate(inp, hx, 0.0), cell(inp, hx, 0.0))


def test_cfc_layer_matches_cell_unroll_and_returns_last_valid():
    torch.manual_seed(1)
    layer = CfC(4, 6, backbone_units=8).double()
    x = torch.randn(3, 5, 4, dtype=torch.double)
    ts = torch.rand(3, 5, dtype=torch.double) + 0.1
    lengths = torch.tensor([5, 2, 3])
    states, last = layer(x, ts, lengths=lengths)
    assert states.shape == (3, 5, 6) and last.shape == (3, 6)
    for b in range(3):
        h = torch.zeros(1, 6, dtype=torch.double)
        for t in range(int(lengths[b])):
            h = layer.cell(x[b:b + 1, t], h, ts[b:b + 1, t])
            torch.testing.assert_close(states[b, t], h[0])
        torch.testing.assert_close(last[b], h[0])
        # padded steps carry the state unchanged
        for t in range(int(lengths[b]), 5):
            torch.testing.assert_close(states[b, t], h[0])


@pytest.mark.parametrize("rnn_cls", [CfC, DeltaTGRU])
def test_padding_and_batch_composition_invariance(rnn_cls):
    torch.manual_seed(2)
    rnn = rnn_cls(4, 6).double()
    seq = torch.randn(1, 3, 4, dtype=torch.double)
    ts = torch.tensor([[1.0, 0.5, 2.0]], dtype=torch.double)
    states, last = rnn(seq, ts)
    # padded to T = 6 with garbage inputs and times
    padded = torch.cat([seq, torch.randn(1, 3, 4, dtype=torch.double) * 100], 1)
    pts = torch.cat([ts, torch.tensor([[7.0, -3.0, float("nan")]], dtype=torch.double)], 1)
    mask = torch.tensor([[True, True, True, False, False, False]])
    s2, l2 = rnn(padded, pts, mask=mask)
    torch.testing.assert_close(s2[:, :3], states)
    torch.testing.assert_close(l2, last)
    # inside a batch with other sequences, at another position
    others = torch.randn(2, 6, 4, dtype=torch.double)
    batch = torch.cat([others[:1], padded, others[1:]])
    bts = torch.cat([torch.rand(1, 6, dtype=torch.double), pts.nan_to_num(0).abs(),
                     torch.rand(1, 6, dtype=torch.double)])
    _, l3 = rnn(batch, bts, lengths=torch.tensor([6, 3, 4]))
    torch.testing.assert_close(l3[1:2], last)


def test_cfc_gradients_flow_to_all_parameters_and_inputs():
    layer = CfC(4, 6, backbone_units=8, backbone_layers=2)
    x = torch.randn(2, 4, 4, requires_grad=True)
    ts = (torch.rand(2, 4) + 0.1).requires_grad_()
    states, last = layer(x, ts, lengths=torch.tensor([4, 2]))
    (last.sum() + states.pow(2).sum()).backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert x.grad[0].abs().sum() > 0 and ts.grad[0].abs().sum() > 0
    assert x.grad[1, 2:].abs().sum() == 0  # padded steps get no gradient


def test_gru_baseline_receives_dt():
    torch.manual_seed(3)
    gru = DeltaTGRU(4, 6)
    x = torch.randn(2, 3, 4)
    a, _ = gru(x, torch.ones(2, 3))
    b, _ = gru(x, torch.full((2, 3), 2.5))
    assert not torch.allclose(a, b)
    assert gru.cell.input_size == 5


def test_cfc_input_errors():
    layer = CfC(4, 6)
    with pytest.raises(ValueError, match=r"input must have shape \[B, T, 4\]"):
        layer(torch.randn(2, 3, 5))
    with pytest.raises(ValueError, match="timespans must have shape"):
        layer(torch.randn(2, 3, 4), torch.ones(2, 4))
    with pytest.raises(ValueError, match="non-negative"):
        layer(torch.randn(2, 3, 4), -torch.ones(2, 3))
    with pytest.raises(ValueError, match="either mask or lengths"):
        layer(torch.randn(2, 3, 4), mask=torch.ones(2, 3, dtype=torch.bool), lengths=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):
        layer(torch.randn(2, 3, 4), lengths=torch.tensor([1, 4]))
    with pytest.raises(ValueError, match="hx must have shape"):
        layer(torch.randn(2, 3, 4), hx=torch.zeros(2, 5))
    with pytest.raises(ValueError, match="mode must be one of"):
        CfCCell(4, 6, mode="fancy")
    with pytest.raises(ValueError, match="backbone_activation must be one of"):
        CfCCell(4, 6, backbone_activation="swish2")
    with pytest.raises(ValueError, match="hidden_size must be a positive integer"):
        CfC(4, 0)


def test_timespans_from_times_with_holes():
    times = torch.tensor([[0.0, 1.0, 5.0, 6.5], [2.0, 9.0, 3.0, 4.0]])
    mask = torch.tensor([[True, True, True, True], [True, False, True, True]])
    ts = timespans_from_times(times, mask, first=0.7)
    torch.testing.assert_close(ts, torch.tensor([[0.7, 1.0, 4.0, 1.5], [0.7, 0.0, 1.0, 1.0]]))


# ------------------------------------------------------------------------------------------------
# the model
# ------------------------------------------------------------------------------------------------
def _tiny(rnn="cfc", classes=3, **kw):
    return TemporalGridifiedClassifier(3, classes, rnn=rnn, rnn_hidden=12, cfc_backbone_units=12, resolution=3,
                                       k=4, hidden_channels=8, depth=1, kernel_size=3, dropout=0.0, **kw)


def test_model_registered_and_shapes():
    assert "temporal_cfc" in MODELS
    m = build_model("temporal_cfc", in_channels=3, num_classes=5, rnn="gru", resolution=3, hidden_channels=8,
                    depth=1, rnn_hidden=10)
    assert isinstance(m, TemporalGridifiedClassifier)
    pos = torch.rand(2, 4, 50, 3) * 1.6 - 0.8
    out = m.eval()(pos, torch.arange(4.0).expand(2, 4), lengths=torch.tensor([4, 2]))
    assert out.logits.shape == (2, 5) and out.frame_logits.shape == (2, 4, 5) and out.states.shape == (2, 4, 10)
    torch.testing.assert_close(out.frame_logits[1, 1], out.logits[1])  # last valid frame
    with pytest.raises(ValueError, match="rnn must be one of"):
        _tiny(rnn="lstm")


@pytest.mark.parametrize("rnn", ["cfc", "gru"])
def test_model_padding_and_batch_invariance(rnn):
    m = _tiny(rnn).eval()
    g = torch.Generator().manual_seed(0)
    a = torch.rand(1, 3, 40, 3, generator=g) * 1.6 - 0.8
    ta = torch.tensor([[0.0, 0.7, 2.9]])
    ref = m(a, ta)
    other = torch.rand(1, 5, 40, 3, generator=g) * 1.6 - 0.8
    pos = torch.cat([other, torch.cat([a, torch.zeros(1, 2, 40, 3)], 1)])
    times = torch.cat([torch.arange(5.0)[None], torch.tensor([[0.0, 0.7, 2.9, 0.0, 0.0]])])
    out = m(pos, times, lengths=torch.tensor([5, 3]))
    torch.testing.assert_close(out.logits[1:], ref.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.frame_logits[1:, :3], ref.frame_logits, atol=1e-5, rtol=1e-5)


def test_model_encodes_all_frames_in_one_batched_call(monkeypatch):
    m = _tiny().eval()
    seen = []
    orig = m.encoder.embed
    monkeypatch.setattr(m.encoder, "embed", lambda pos, x=None, batch=None: seen.append(pos.shape) or orig(pos, x))
    m(torch.rand(3, 4, 30, 3) - 0.5, torch.arange(4.0).expand(3, 4), lengths=torch.tensor([4, 1, 2]))
    assert seen == [torch.Size([7, 30, 3])]  # 4 + 1 + 2 valid frames, padded frames skipped


def test_model_time_matters():
    torch.manual_seed(0)
    pos = torch.rand(2, 3, 40, 3) * 1.6 - 0.8
    for rnn in ("cfc", "gru"):
        m = _tiny(rnn).eval()
        a = m(pos, torch.tensor([[0.0, 1.0, 2.0]] * 2)).logits
        b = m(pos, torch.tensor([[0.0, 3.0, 3.5]] * 2)).logits
        assert not torch.allclose(a, b), rnn
        # a shift of all times changes nothing (only elapsed times enter)
        torch.testing.assert_close(m(pos, torch.tensor([[5.0, 6.0, 7.0]] * 2)).logits, a)


def test_model_input_errors():
    m = _tiny()
    pos = torch.rand(2, 3, 20, 3) - 0.5
    with pytest.raises(ValueError, match=r"pos must be a tensor of shape \[B, T, N, 3\]"):
        m(pos[0])
    with pytest.raises(ValueError, match="times must increase strictly"):
        m(pos, torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"times must have shape \[B, T\]"):
        m(pos, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="has no valid frame"):
        m(pos, mask=torch.tensor([[True, False, False], [False, False, False]]))
    with pytest.raises(ValueError, match=r"lengths must lie in \[1, T=3\]"):
        m(pos, lengths=torch.tensor([0, 3]))


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
    torch.testing.assert_close(DynamicShapes("train", num_samples_per_class=2, num_points=64,
                                             sampling="irregular", seed=3)[11]["pos"], a[11]["pos"])
    for i in range(len(a)):
        assert a[i]["pos"].abs().max() < 1.0


def test_dynamic_shapes_timestamps():
    reg = DynamicShapes("test", num_samples_per_class=3, num_frames=6, sampling="regular")
    irr = DynamicShapes("test", num_samples_per_class=3, num_frames=6, sampling="irregular", drop_prob=0.4,
                        min_frames=2)
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


def _write_frames(folder, n_frames, rng):
    paths = []
    for i in range(n_frames):
        p = folder / f"sweep_{i}.xyz"
        np.savetxt(p, rng.uniform(-2, 2, size=(20 + i, 3)))
        paths.append(p)
    return paths


def test_read_sequence_folder_and_list(tmp_path):
    rng = np.random.default_rng(0)
    paths = _write_frames(tmp_path, 11, rng)  # natural order: sweep_2 before sweep_10
    (tmp_path / "timestamps.txt").write_text("# sweep times\n" + "\n".join(f"{0.1 * i + 0.01 * (i % 2):.3f}"
                                                                         for i in range(11)) + "\n")
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


def test_tiny_end_to_end_fit():
    """The full model fits a handful of sequences (loss drops, training accuracy rises)."""
    torch.manual_seed(0)
    ds = DynamicShapes("train", num_samples_per_class=3, num_points=48, num_frames=4,
                       classes=["rot_z_fast", "sway_fast", "pulsate"], sampling="irregular", min_frames=2)
    batch = collate_sequences([ds[i] for i in range(len(ds))])
    m = _tiny("cfc")
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        out = m(batch["pos"], batch["times"], mask=batch["mask"])
        loss = torch.nn.functional.cross_entropy(out.logits, batch["y"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0]
    # training-mode predictions (the encoder's BatchNorm running statistics lag after 30 fast steps)
    with torch.no_grad():
        acc = (m(batch["pos"], batch["times"], mask=batch["mask"]).logits.argmax(-1) == batch["y"]).float().mean()
    assert acc >= 0.75


def test_train_temporal_script_smoke_and_checkpoint(tmp_path):
    import importlib.util
    from pathlib import Path

    from gridify.checkpoint import build_model_from_checkpoint, load_checkpoint

    path = Path(__file__).resolve().parents[1] / "scripts" / "train_temporal.py"
    spec = importlib.util.spec_from_file_location("train_temporal", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.main(["--output-dir", str(tmp_path), "train.epochs=1", "data.train_per_class=1",
                    "data.test_per_class=1", "data.num_points=24", "data.num_frames=3",
                    "data.classes=[rot_z_slow, rot_z_fast]", "model.resolution=3", "model.hidden_channels=8",
                    "model.depth=1", "model.rnn_hidden=8", "model.cfc_backbone_units=8"])
    assert set(res["models"]) == {"cfc", "gru"}
    assert res["config"]["data"]["train_sampling"] == "mixed"
    for rnn in ("cfc", "gru"):
        r = res["models"][rnn]
        for name in ("regular", "irregular", "sparse", "train_eval", "regular_stale_bn"):
            assert 0.0 <= r[name]["acc"] <= 1.0, name
        assert r["bn_batches"] == 1  # 2 training sequences, one batch
        assert r["train_eval"]["n"] == 2 and r["sparse"]["n"] == 2
        payload = load_checkpoint(tmp_path / f"model_{rnn}.pt")
        model = build_model_from_checkpoint(payload)
        assert model.rnn_type == rnn and payload["class_names"] == ["rot_z_slow", "rot_z_fast"]
    assert (tmp_path / "results.csv").read_text().startswith("model,")
    torch.set_num_threads(1)


# ------------------------------------------------------------------------------------------------
# flatten readout (keeps the grid layout, so the frame embedding follows the pose)
# ------------------------------------------------------------------------------------------------
def test_flatten_readout_shapes_padding_invariance_and_errors():
    m = _tiny("cfc", frame_readout="flatten", readout_channels=2, frame_features=10).eval()
    assert m.feat_channels == 10 and m.readout is not None
    g = torch.Generator().manual_seed(3)
    a = torch.rand(1, 3, 40, 3, generator=g) * 1.6 - 0.8
    ta = torch.tensor([[0.0, 0.7, 2.9]])
    ref = m(a, ta)
    assert m.embed_frames(a[0]).shape == (3, 10)
    pos = torch.cat([torch.rand(1, 4, 40, 3, generator=g) * 1.6 - 0.8, torch.cat([a, torch.zeros(1, 1, 40, 3)], 1)])
    out = m(pos, torch.cat([torch.arange(4.0)[None], torch.tensor([[0.0, 0.7, 2.9, 0.0]])]),
            lengths=torch.tensor([4, 3]))
    torch.testing.assert_close(out.logits[1:], ref.logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="frame_readout must be one of"):
        _tiny(frame_readout="avg")
    with pytest.raises(ValueError, match="readout_channels"):
        _tiny(frame_readout="flatten", readout_channels=0)


def test_flatten_readout_sees_translation_that_mean_pool_barely_sees():
    torch.manual_seed(0)
    pool = _tiny(frame_readout="pool").eval()
    flat = _tiny(frame_readout="flatten").eval()
    flat.encoder.load_state_dict(pool.encoder.state_dict())
    cloud = torch.rand(1, 200, 3) * 0.8 - 0.6
    shifted = cloud + torch.tensor([0.25, 0.0, 0.0])
    rel = {}
    with torch.no_grad():
        for name, m in (("pool", pool), ("flatten", flat)):
            e = m.frame_norm(m.embed_frames(torch.cat([cloud, shifted])))
            rel[name] = float((e[0] - e[1]).norm() / e[0].norm())
    assert rel["flatten"] > 3 * rel["pool"], rel


def test_frame_delta_is_change_since_previous_valid_frame():
    from gridify.models.temporal import _delta_to_previous

    seq = torch.arange(8.0).reshape(1, 4, 2) ** 2
    mask = torch.tensor([[False, True, False, True]])
    d = _delta_to_previous(seq, mask)
    torch.testing.assert_close(d[0, 1], torch.zeros(2))  # first valid frame
    torch.testing.assert_close(d[0, 3], seq[0, 3] - seq[0, 1])  # skips the invalid frame 2
    torch.testing.assert_close(d[0, [0, 2]], torch.zeros(2, 2))
    m = _tiny("gru", frame_delta=True).eval()
    assert m.rnn.input_size == 2 * m.feat_channels
    pos = torch.rand(2, 3, 40, 3) * 1.6 - 0.8
    out = m(pos, torch.tensor([[0.0, 1.0, 2.0]] * 2), lengths=torch.tensor([3, 2]))
    assert out.logits.shape == (2, 3)
    with pytest.raises(TypeError, match="frame_delta must be a bool"):
        _tiny(frame_delta=1)


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


# ------------------------------------------------------------------------------------------------
# padding is not data (issue 23, class 9): mask first, then check the real steps only
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rnn_cls", [CfC, DeltaTGRU])
@pytest.mark.parametrize("how", ["mask", "lengths"])
def test_nan_in_padded_steps_is_ignored_and_never_reaches_a_gradient(rnn_cls, how):
    """NaN/Inf in the inputs (and times) of padded steps: the same states as zero padding, finite
    gradients for every parameter and input; NaN at a real step is still refused, by sequence and step."""
    torch.manual_seed(4)
    rnn = rnn_cls(4, 6)
    seq, ts = torch.randn(2, 5, 4), torch.rand(2, 5) + 0.1
    padding = {"mask": dict(mask=torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)),
               "lengths": dict(lengths=torch.tensor([3, 5]))}[how]
    clean_states, clean_last = rnn(seq, ts, **padding)
    dirty, dirty_ts = seq.clone(), ts.clone()
    dirty[0, 3] = float("nan")
    dirty[0, 4, 1] = float("inf")
    dirty_ts[0, 4] = float("nan")
    dirty.requires_grad_()
    states, last = rnn(dirty, dirty_ts, **padding)
    torch.testing.assert_close(last, clean_last)
    torch.testing.assert_close(states, clean_states)
    (last.sum() + states.pow(2).sum()).backward()
    for name, p in rnn.named_parameters():
        assert p.grad is not None and bool(p.grad.isfinite().all()), name
    assert bool(dirty.grad.isfinite().all()) and dirty.grad[0, 3:].abs().sum() == 0
    real = seq.clone()
    real[1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match=rf"{rnn_cls.__name__}: input contains NaN values .*sequence 1, step 2"):
        rnn(real, ts, **padding)


def test_model_ignores_nan_in_padded_frames():
    """The temporal model: NaN in pos, x and times at padded frames changes nothing (and stays out of
    the gradients); at a valid frame it is refused naming the sequence, frame and point."""
    m = _tiny().eval()
    g = torch.Generator().manual_seed(1)
    pos = torch.rand(2, 3, 30, 3, generator=g) * 1.6 - 0.8
    x = pos.clone()
    times = torch.tensor([[0.0, 1.0, 2.0], [0.0, 0.5, 3.0]])
    lengths = torch.tensor([2, 3])
    ref = m(pos, times, lengths=lengths, x=x)
    dpos, dx, dtimes = pos.clone(), x.clone(), times.clone()
    dpos[0, 2, 5] = float("nan")
    dx[0, 2] = float("inf")
    dtimes[0, 2] = float("nan")
    out = m(dpos, dtimes, lengths=lengths, x=dx)
    torch.testing.assert_close(out.logits, ref.logits)
    out.logits.sum().backward()
    assert all(p.grad is None or bool(p.grad.isfinite().all()) for p in m.parameters())
    dpos[1, 1, 7, 0] = float("nan")
    with pytest.raises(ValueError, match="pos contains NaN values at valid frames .* sequence 1, frame 1, point 7"):
        m(dpos, dtimes, lengths=lengths, x=dx)
