"""The closed-form continuous-time RNN (gridify.nn.cfc: CfCCell, CfC) and the dt-aware GRU baseline."""

import pytest
import torch

from gridify.nn import CfC, CfCCell, DeltaTGRU


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
            h = layer.cell(x[b : b + 1, t], h, ts[b : b + 1, t])
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
    bts = torch.cat(
        [torch.rand(1, 6, dtype=torch.double), pts.nan_to_num(0).abs(), torch.rand(1, 6, dtype=torch.double)]
    )
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
    padding = {
        "mask": dict(mask=torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)),
        "lengths": dict(lengths=torch.tensor([3, 5])),
    }[how]
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
