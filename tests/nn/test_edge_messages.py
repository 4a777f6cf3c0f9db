"""The fused, recomputing message-passing path agrees with plain autograd (values and gradients)."""

import pytest
import torch

from gridify.nn import Gridification
from gridify.nn import edge_messages as EM
from gridify.nn.gridification import BipartiteConv


def _graph(num_src=40, num_dst=30, edges=400, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_src, (edges,), generator=g)
    dst = torch.sort(torch.randint(0, num_dst, (edges,), generator=g)).values
    dst[:num_dst] = torch.arange(num_dst)  # every target has an edge
    dst = torch.sort(dst).values
    offset = torch.rand(edges, 3, generator=g, dtype=dtype) * 2 - 1
    x = torch.randn(num_src, 5, generator=g, dtype=dtype)
    return x, src, dst, offset, num_dst


def _run(conv, fused, x, src, dst, offset, num_dst):
    conv.fused_messages = fused
    conv.zero_grad()
    xg = x.clone().requires_grad_(True)
    out = conv(xg, src, dst, offset, num_dst)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    (out * w).sum().backward()
    grads = {n: p.grad.clone() for n, p in conv.named_parameters()}
    return out.detach(), xg.grad, grads


@pytest.mark.parametrize("message", ["product", "concat"])
@pytest.mark.parametrize("aggr", ["mean", "sum", "max"])
def test_fused_path_matches_autograd_in_float64(message, aggr, monkeypatch):
    monkeypatch.setattr(EM, "EDGE_CHUNK_ELEMENTS", 16 * 50)  # several chunks of 50 edges
    torch.manual_seed(0)
    conv = BipartiteConv(5, 6, 16, message=message, aggr=aggr, omega0=0.7).double()
    data = _graph()
    ref = _run(conv, False, *data)
    got = _run(conv, True, *data)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[1], ref[1], rtol=1e-10, atol=1e-12)
    assert set(got[2]) == set(ref[2])
    for name in ref[2]:
        torch.testing.assert_close(got[2][name], ref[2][name], rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("message, aggr", [("product", "mean"), ("concat", "max")])
def test_fused_function_passes_gradcheck(message, aggr):
    torch.manual_seed(1)
    conv = BipartiteConv(3, 4, 6, message=message, aggr=aggr).double()
    x, src, dst, offset, nd = _graph(num_src=8, num_dst=5, edges=30, dtype=torch.float64)
    h = torch.randn(8, 6, dtype=torch.float64, requires_grad=True)
    f, concat = conv.phi_pos, message == "concat"
    weights = [f.freqs.weight, f.lin1.weight, f.lin1.bias, f.lin2.weight, f.lin2.bias]
    weights += [conv.msg_out.weight] if concat else []
    params = [p.detach().clone().requires_grad_(True) for p in weights]
    bo = conv.msg_out.bias.detach() if concat else None
    scale = 1.0 / torch.bincount(dst, minlength=nd).clamp(min=1).double() if aggr == "mean" else None

    def fn(h, *w):
        Wo = w[5] if concat else None
        return EM.FusedEdgeMessages.apply(h, offset, src, dst, scale, nd, concat, *w[:5], Wo, bo, aggr == "max")

    assert torch.autograd.gradcheck(fn, (h, *params))


def test_fused_max_gives_tied_edges_one_share():
    torch.manual_seed(2)
    conv = BipartiteConv(5, 4, 6, message="concat", aggr="max").double()
    x, src, dst, offset, nd = _graph(num_src=8, num_dst=5, edges=30, dtype=torch.float64)
    # an edge repeated (a duplicated point): both copies tie for every channel of their target;
    # the maximum and the weights' gradients are the plain path's, the gradient of h is the same in total
    src2, dst2, off2 = torch.cat([src, src[:1]]), torch.cat([dst, dst[:1]]), torch.cat([offset, offset[:1]])
    order = torch.argsort(dst2, stable=True)
    data = (x, src2[order], dst2[order], off2[order], nd)
    ref, got = _run(conv, False, *data), _run(conv, True, *data)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[1], ref[1], rtol=1e-10, atol=1e-12)
    for name in ref[2]:
        torch.testing.assert_close(got[2][name], ref[2][name], rtol=1e-10, atol=1e-12, msg=name)


def test_auto_uses_the_fused_path_only_where_it_applies():
    offset = torch.zeros(3, 3)
    rff = BipartiteConv(3, 4, 8).phi_pos
    siren = BipartiteConv(3, 4, 8, pos_embedding="siren").phi_pos
    assert EM.use_fused_messages("auto", field=rff, aggr="mean", needs_grad=True, offset=offset)
    assert not EM.use_fused_messages("auto", field=rff, aggr="mean", needs_grad=False, offset=offset)
    assert EM.use_fused_messages("auto", field=rff, aggr="max", needs_grad=True, offset=offset)
    assert not EM.use_fused_messages("auto", field=siren, aggr="mean", needs_grad=True, offset=offset)
    # off the CPU (a GPU; "meta" stands in for it here) auto keeps the plain path, True still forces the fused one
    meta = torch.zeros(3, 3, device="meta")
    assert not EM.use_fused_messages("auto", field=rff, aggr="max", needs_grad=True, offset=meta)
    assert EM.use_fused_messages(True, field=rff, aggr="max", needs_grad=True, offset=meta)
    with pytest.raises(ValueError, match="fused_messages=True cannot be used: the positional field is a SIRENField"):
        EM.use_fused_messages(True, field=siren, aggr="max", needs_grad=True, offset=offset)
    with pytest.raises(ValueError, match="fused_messages must be one of"):
        BipartiteConv(3, 4, 8, fused_messages="yes")


def _running_max_reference(m, dst, num_dst):
    out = torch.zeros(num_dst, m.size(1), dtype=m.dtype)
    winner = torch.full((num_dst, m.size(1)), -1)
    for e in range(m.size(0)):
        for c in range(m.size(1)):
            d = int(dst[e])
            if winner[d, c] < 0 or m[e, c] >= out[d, c]:
                out[d, c], winner[d, c] = m[e, c], e
    return out, winner


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_running_max_keeps_each_maximum_and_the_last_edge_holding_it(dtype):
    # against a loop, with negative values, ties inside and across chunks, huge and tiny magnitudes,
    # and targets without edges
    g = torch.Generator().manual_seed(0)
    E, H, num_dst = 300, 5, 40
    m = (
        torch.randn(E, H, generator=g, dtype=dtype)
        * torch.logspace(-30, 30, E, dtype=dtype)[torch.randperm(E, generator=g)][:, None]
    )
    m[::7] = m[3::7][: m[::7].size(0)]  # ties
    m[20:30, 1] = -1.5
    dst = torch.randint(0, num_dst - 3, (E,), generator=g)  # the last three targets get no edge
    running = EM._RunningMax(num_dst, H, dtype, torch.device("cpu"))
    for s in range(0, E, 64):
        running.fold(m[s : s + 64], dst[s : s + 64], s)
    out, winner, empty = running.result()
    ref_out, ref_winner = _running_max_reference(m, dst, num_dst)
    assert torch.equal(out, ref_out) and out.dtype == dtype
    assert torch.equal(winner, ref_winner)
    assert (winner[-3:] == -1).all() and (out[-3:] == 0).all()
    assert torch.equal(empty, winner < 0) and empty[-3:].all()


@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_gridification_training_step_is_the_same_on_both_paths(aggr):
    torch.manual_seed(0)
    pos = torch.rand(2, 200, 3) * 1.8 - 0.9
    layer = Gridification(3, 16, resolution=5, k=6, aggr=aggr)
    outs = []
    for fused in (False, True):
        layer.conv.fused_messages = fused
        layer.zero_grad()
        y = layer(pos)
        y.square().mean().backward()
        outs.append((y.detach(), [p.grad.clone() for p in layer.parameters()]))
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(outs[1][1], outs[0][1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("message", ["product", "concat"])
def test_fused_path_under_bfloat16_autocast_tracks_float32(message):
    torch.manual_seed(0)
    conv = BipartiteConv(5, 6, 16, message=message, aggr="mean", omega0=0.7)
    x, src, dst, offset, nd = _graph(dtype=torch.float32)
    ref = _run(conv, False, x, src, dst, offset, nd)
    conv.fused_messages = True
    conv.zero_grad()
    xg = x.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv(xg, src, dst, offset, nd)
    w = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    (out.float() * w).sum().backward()
    assert xg.grad.dtype == torch.float32 and all(p.grad.dtype == torch.float32 for p in conv.parameters())
    scale = ref[0].abs().max()
    assert (out.float() - ref[0]).abs().max() < 0.05 * scale
    for name, p in conv.named_parameters():
        g_ref = ref[2][name]
        assert (p.grad - g_ref).abs().max() <= 0.08 * g_ref.abs().max() + 1e-6, name


def _packed_max_reference(m, dst, num_dst):
    # _PackedMax's rule for tied edges: the last one for a non-negative maximum (+0 above -0), the first for a
    # negative one
    out = torch.zeros(num_dst, m.size(1), dtype=m.dtype)
    winner = torch.full((num_dst, m.size(1)), -1)
    for d in range(num_dst):
        edges = (dst == d).nonzero().flatten().tolist()
        for c in range(m.size(1)):
            if not edges:
                continue
            top = max(float(m[e, c]) for e in edges)
            tied = [e for e in edges if float(m[e, c]) == top]
            positive = [e for e in tied if not str(float(m[e, c])).startswith("-")]  # +0 above -0
            w = positive[-1] if positive else tied[0]
            out[d, c], winner[d, c] = m[w, c], w
    return out, winner


def test_packed_max_keeps_each_maximum_and_one_edge_holding_it():
    # against a loop: negative values, ties inside and across chunks, +0 and -0, huge and tiny magnitudes,
    # and targets without edges
    g = torch.Generator().manual_seed(0)
    E, H, num_dst = 300, 5, 40
    m = torch.randn(E, H, generator=g) * torch.logspace(-30, 30, E)[torch.randperm(E, generator=g)][:, None]
    m[::7] = m[3::7][: m[::7].size(0)]  # ties
    m[20:30, 1] = -1.5
    m[40:50, 2], m[45:55, 3], m[60:70, 4] = 0.0, -0.0, -0.0
    m[65, 4] = 0.0
    dst = torch.randint(0, num_dst - 3, (E,), generator=g)  # the last three targets get no edge
    running = EM._PackedMax(num_dst, H, torch.device("cpu"))
    for s in range(0, E, 64):
        running.fold(m[s : s + 64], dst[s : s + 64], s)
    out, winner, empty = running.result()
    ref_out, ref_winner = _packed_max_reference(m, dst, num_dst)
    assert out.dtype == torch.float32 and winner.dtype == torch.int64
    assert torch.equal(out, ref_out)
    assert torch.equal(torch.signbit(out), torch.signbit(ref_out))
    assert torch.equal(winner, ref_winner)
    assert (winner[-3:] == -1).all() and (out[-3:] == 0).all()
    assert torch.equal(empty, winner < 0) and empty[-3:].all()


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_packed_max_reports_a_non_finite_message(bad):
    running = EM._PackedMax(3, 2, torch.device("cpu"))
    running.fold(torch.tensor([[1.0, 2.0], [bad, 0.5]]), torch.tensor([0, 0]), 0)
    assert running.result() is None


def test_fused_max_with_a_non_finite_message_gives_the_plain_values():
    # an infinite bias on one message channel, NaN on another: the packed fold gives up and the general one
    # gives what scatter() gives
    torch.manual_seed(3)
    conv = BipartiteConv(5, 6, 8, message="concat", aggr="max")
    x, src, dst, offset, nd = _graph(dtype=torch.float32)
    with torch.no_grad():
        conv.msg_out.bias[2], conv.msg_out.bias[5] = float("inf"), float("nan")
    agg = []
    for fused in (False, True):
        conv.fused_messages = fused
        h = conv.node_embedding(x.requires_grad_(True))
        if fused:
            out = EM.fused_edge_messages(h, offset, src, dst, nd, field=conv.phi_pos, aggr="max", msg_out=conv.msg_out)
        else:
            out = torch.zeros(nd, 8).scatter_reduce_(
                0, dst[:, None].expand(-1, 8), conv.edge_message(h[src], offset), "amax", include_self=False
            )
        agg.append(out.detach())
    assert torch.isinf(agg[1][:, 2]).all() and torch.isnan(agg[1][:, 5]).all()
    torch.testing.assert_close(agg[1], agg[0], equal_nan=True, rtol=1e-5, atol=1e-6)


def test_fused_max_in_float32_packed_and_general_folds_agree(monkeypatch):
    # the packed float32 fold against the general one on the same messages: the same maxima, and with a duplicated
    # edge (tied for every channel) the same weight gradients and the same gradient of h in total
    monkeypatch.setattr(EM, "EDGE_CHUNK_ELEMENTS", 16 * 50)  # several chunks of 50 edges
    torch.manual_seed(4)
    conv = BipartiteConv(5, 6, 16, message="concat", aggr="max", omega0=0.7)
    x, src, dst, offset, nd = _graph(dtype=torch.float32)
    src2, dst2, off2 = torch.cat([src, src[:1]]), torch.cat([dst, dst[:1]]), torch.cat([offset, offset[:1]])
    order = torch.argsort(dst2, stable=True)
    data = (x, src2[order], dst2[order], off2[order], nd)
    packed = _run(conv, True, *data)
    monkeypatch.setattr(EM, "_new_running_max", lambda n, w, dtype, device, e: EM._RunningMax(n, w, dtype, device))
    general = _run(conv, True, *data)
    assert torch.equal(packed[0], general[0])
    torch.testing.assert_close(packed[1].sum(0), general[1].sum(0), rtol=1e-5, atol=1e-6)
    for name in general[2]:
        torch.testing.assert_close(packed[2][name], general[2][name], rtol=1e-5, atol=1e-6, msg=name)
    # and both against plain autograd in float32
    plain = _run(conv, False, *data)
    torch.testing.assert_close(packed[0], plain[0], rtol=1e-5, atol=1e-6)


def test_winning_edges_lists_each_edge_holding_a_maximum_once():
    winner = torch.tensor([[4, 4, 0], [-1, -1, -1], [7, 2, 4]])
    assert EM._winning_edges(winner, 9).tolist() == [0, 2, 4, 7]
    assert EM._winning_edges(torch.full((2, 3), -1), 5).numel() == 0
