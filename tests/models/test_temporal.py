"""The temporal classifier (gridify.models.temporal): shapes, padding and batch invariance, time, readouts, errors."""

import pytest
import torch

from gridify.datasets import DynamicShapes, collate_sequences
from gridify.models import TemporalGridifiedClassifier, build_model
from gridify.models.temporal import timespans_from_times
from gridify.registry import MODELS


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


NAN = float("nan")


def test_timespans_from_times_with_holes():
    times = torch.tensor([[0.0, 1.0, 5.0, 6.5], [2.0, 9.0, 3.0, 4.0]])
    mask = torch.tensor([[True, True, True, True], [True, False, True, True]])
    ts = timespans_from_times(times, mask, first=0.7)
    torch.testing.assert_close(ts, torch.tensor([[0.7, 1.0, 4.0, 1.5], [0.7, 0.0, 1.0, 1.0]]))


def test_model_registered_and_shapes():
    assert "temporal_cfc" in MODELS
    m = build_model(
        "temporal_cfc", in_channels=3, num_classes=5, rnn="gru", resolution=3, hidden_channels=8, depth=1, rnn_hidden=10
    )
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


def test_tiny_end_to_end_fit():
    """The full model fits a handful of sequences (loss drops, training accuracy rises)."""
    torch.manual_seed(0)
    ds = DynamicShapes(
        "train",
        num_samples_per_class=3,
        num_points=48,
        num_frames=4,
        classes=["rot_z_fast", "sway_fast", "pulsate"],
        sampling="irregular",
        min_frames=2,
    )
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
    out = m(
        pos, torch.cat([torch.arange(4.0)[None], torch.tensor([[0.0, 0.7, 2.9, 0.0]])]), lengths=torch.tensor([4, 3])
    )
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


def test_temporal_errors_name_sequence_frame_and_point():
    torch.manual_seed(0)
    m = TemporalGridifiedClassifier(in_channels=3, num_classes=3).eval()
    pos = torch.rand(2, 3, 40, 3) * 1.6 - 0.8
    bad = pos.clone()
    bad[1, 1, 7] = torch.tensor([5.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"outside the grid box .* first at sequence 1, frame 1, point 7"):
        m(bad)
    mask = torch.ones(2, 3, dtype=torch.bool)
    mask[1, 1] = False
    assert m(bad, mask=mask).logits.shape == (2, 3)  # a padded frame may hold anything
    with pytest.raises(ValueError, match="pos has the unsupported dtype torch.float8_e4m3fn"):
        m(pos.to(torch.float8_e4m3fn))


def test_temporal_model_names_the_sequence_and_frame_of_bad_values():
    m = TemporalGridifiedClassifier(3, 2, resolution=4, k=4, hidden_channels=8, depth=1).eval()
    pos = torch.rand(2, 3, 16, 3) * 1.6 - 0.8
    mask = torch.tensor([[True, True, True], [True, True, False]])
    x = pos.clone()
    x[1, 2, 5, 0] = NAN  # a padded frame: ignored
    out = m(pos, mask=mask, x=x)
    assert torch.isfinite(out.logits).all()
    x[1, 1, 7, 2] = NAN
    with pytest.raises(ValueError, match="x contains NaN values at valid frames .* sequence 1, frame 1, point 7"):
        m(pos, mask=mask, x=x)
    with pytest.raises(ValueError, match=r"mask must be a boolean \(or 0/1 integer\) tensor"):
        m(pos, mask=torch.full((2, 3), 2))
    with pytest.raises(ValueError, match="times must hold real numbers"):
        m(pos, times=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="lengths is on meta"):
        m(pos, lengths=torch.tensor([1, 2], device="meta"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_temporal_times_are_differenced_in_float64(dtype):
    torch.manual_seed(0)
    m = TemporalGridifiedClassifier(3, 2, resolution=4, k=4, hidden_channels=8, depth=1).to(dtype).eval()
    pos = (torch.rand(1, 4, 20, 3) * 1.6 - 0.8).to(dtype)
    t = torch.tensor([[0.0, 0.5, 1.1, 2.0]], dtype=torch.float64)
    ref = m(pos, t).logits
    torch.testing.assert_close(m(pos, t + 1.7e9).logits, ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        m(
            pos,
            (t * 1000).long() + 1_700_000_000_000,
        ).logits.shape,
        ref.shape,
    )
    spans = timespans_from_times(t + 1.7e9, torch.ones(1, 4, dtype=torch.bool), first=0.0)
    torch.testing.assert_close(spans, torch.tensor([[0.0, 0.5, 0.6, 0.9]], dtype=torch.float64))
