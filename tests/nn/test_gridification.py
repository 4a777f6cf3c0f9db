import importlib
import warnings

import pytest
import torch

from gridify.nn import BipartiteGraph, Degridification, Gridification, RegularGrid, bilateral_knn
from gridify.ops import grid_knn, grid_positions, knn, knn_reference

from tests.helpers import ragged_batch


def _reference_edges(pos, batch, R, k):
    """Bilateral kNN from the loop-based reference search, as a set of (point, node)."""
    B = int(batch.max()) + 1
    nodes = grid_positions(R).repeat(B, 1)
    nb = torch.arange(B).repeat_interleave(R**3)
    g2p = knn_reference(pos, nodes, k, batch, nb)  # (node, point)
    p2g = knn_reference(nodes, pos, k, nb, batch)  # (point, node)
    return {(int(p), int(n)) for n, p in g2p.t()} | {(int(p), int(n)) for p, n in p2g.t()}


def _clouds(b=2, n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, n, 3, generator=g) * 1.6 - 0.8


@pytest.mark.parametrize("R, k", [(3, 4), (5, 9)])
def test_bilateral_knn_equals_reference_union(R, k):
    pos, batch = ragged_batch([60, 6, 33], seed=R)
    with (
        pytest.warns(UserWarning, match="cloud 1 has 6 points, fewer than k=9") if k > 6 else warnings.catch_warnings()
    ):
        g = bilateral_knn(pos, RegularGrid(R), k, batch)
    got = {(int(p), int(n)) for p, n in g.edge_index.t()}
    assert got == _reference_edges(pos, batch, R, k)
    assert g.edge_index.size(1) == len(got)  # deduplicated


@pytest.mark.parametrize("backend", ["torch", "kdtree"])
def test_bilateral_knn_with_duplicated_points_is_the_reference_alone_and_batched(backend):
    """Clouds with 30 % duplicated points (RandomPointDropout's refill): the graph equals the
    reference union, and a cloud's edges are the same alone and batched behind another cloud."""
    g = torch.Generator().manual_seed(7)
    clouds = []
    for n in (90, 120):
        c = torch.rand(n, 3, generator=g) * 2 - 1
        src = torch.randint(0, n, (n // 3,), generator=g)
        c[torch.randperm(n, generator=g)[: n // 3]] = c[src].clone()
        clouds.append(c)
    pos, batch = torch.cat(clouds), torch.tensor([0] * 90 + [1] * 120)
    R, k = 4, 6
    both = bilateral_knn(pos, RegularGrid(R), k, batch, knn_backend=backend)
    assert {(int(p), int(n)) for p, n in both.edge_index.t()} == _reference_edges(pos, batch, R, k)
    alone = bilateral_knn(clouds[1], RegularGrid(R), k, knn_backend=backend)
    second = both.edge_index[:, both.edge_index[0] >= 90] - torch.tensor([[90], [R**3]])
    assert torch.equal(second, alone.edge_index)


def test_bilateral_knn_coverage_and_no_cross_cloud():
    pos, batch = ragged_batch([200, 50, 120], seed=3)
    R, k = 5, 9
    g = bilateral_knn(pos, RegularGrid(R), k, batch)
    point, node = g.edge_index
    assert torch.equal(batch[point], node // R**3), "an edge crosses clouds"
    pdeg, ndeg = g.degree()
    assert int(pdeg.min()) >= k  # every point keeps its k nearest nodes
    assert int(ndeg.min()) >= k  # every node keeps its k nearest points
    assert ndeg.numel() == 3 * R**3


@pytest.mark.parametrize("shape", ["cube", "sphere", "cluster"])
def test_max_in_degree_caps_nodes_and_keeps_every_point(shape):
    g = torch.Generator().manual_seed(0)
    if shape == "cube":
        pos = torch.rand(1000, 3, generator=g) * 2 - 1
    elif shape == "sphere":
        pos = torch.randn(1000, 3, generator=g)
        pos = 0.95 * pos / pos.norm(dim=1, keepdim=True)
    else:  # everything within a few cells: the cap cannot hold without dropping points
        pos = torch.randn(1000, 3, generator=g) * 0.05
    k = 9
    plain = bilateral_knn(pos, RegularGrid(9), k)
    capped = bilateral_knn(pos, RegularGrid(9), k, max_in_degree=2 * k)
    pdeg, ndeg = capped.degree()
    assert int(pdeg.min()) >= 1 and int(ndeg.min()) >= k
    assert int(plain.degree()[1].max()) > 2 * k  # the plain union exceeds 2k here
    if shape != "cluster":
        assert int(ndeg.max()) <= 2 * k
    else:
        assert int(ndeg.max()) > 2 * k  # coverage wins: points keep their nearest node
    # the capped edge set is a subset of the plain union
    key = lambda e: set((e[0] * 10**6 + e[1]).tolist())
    assert key(capped.edge_index) <= key(plain.edge_index)


def _model(message="product", aggr="mean", pos_embedding="rff", C=8):
    return Gridification(
        4, C, 5, k=6, hidden_channels=16, message=message, aggr=aggr, pos_embedding=pos_embedding, omega0=1.0
    )


@pytest.mark.parametrize("message, aggr", [("product", "mean"), ("concat", "max"), ("product", "sum")])
def test_permutation_invariance(message, aggr):
    pos, batch = ragged_batch([80, 50], seed=5)
    x = torch.randn(pos.size(0), 4)
    net = _model(message, aggr)
    out = net(pos, x, batch)
    perm = torch.cat([torch.randperm(80), 80 + torch.randperm(50)])
    out_p = net(pos[perm], x[perm], batch)
    torch.testing.assert_close(out, out_p, atol=1e-5, rtol=1e-5)


def test_batch_composition_invariance_and_dense_input():
    pos, batch = ragged_batch([70, 40, 90], seed=6)
    x = torch.randn(pos.size(0), 4)
    net = _model("concat", "max")
    together = net(pos, x, batch)
    alone = net(pos[batch == 1], x[batch == 1])
    assert together.shape == (3, 8, 5, 5, 5)
    torch.testing.assert_close(together[1:2], alone, atol=1e-5, rtol=1e-5)
    # dense [B, N, 3] input gives the same grids as the flat form
    dpos, dx = torch.rand(2, 30, 3) * 2 - 1, torch.randn(2, 30, 4)
    dense = net(dpos, dx)
    flat = net(dpos.reshape(-1, 3), dx.reshape(-1, 4), torch.arange(2).repeat_interleave(30))
    torch.testing.assert_close(dense, flat)


@pytest.mark.parametrize("message, aggr", [("product", "mean"), ("concat", "max"), ("product", "sum")])
def test_chunked_inference_path_equals_single_pass(message, aggr, monkeypatch):
    pos, batch = ragged_batch([90, 60], seed=12)
    x = torch.randn(150, 4)
    net = _model(message, aggr)
    degrid = Degridification(8, 3, hidden_channels=16, message=message, aggr=aggr)
    grid, graph = net(pos, x, batch, return_graph=True)  # grad enabled: single pass
    ref = degrid(grid, graph)
    monkeypatch.setattr(type(net.conv), "edge_chunk_size", 37)  # many small chunks
    with torch.no_grad():
        grid_c, graph_c = net(pos, x, batch, return_graph=True)
        out_c = degrid(grid_c, graph_c)
    torch.testing.assert_close(grid_c, grid.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out_c, ref.detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("aggr", ["mean", "sum"])
def test_chunked_inference_path_accumulates_low_precision_in_float32(aggr, monkeypatch):
    """Under bf16 autocast the chunked path sums in float32 like the one-pass scatter and rounds once:
    2,001 edges, most into one node, stay as close to the float32 result as the one-pass path (a bf16
    running sum was about twice as far off for "sum")."""
    from gridify.nn import BipartiteConv

    torch.manual_seed(0)
    conv = BipartiteConv(4, 8, hidden_channels=16, aggr=aggr).eval()
    E = 2001
    x = torch.randn(40, 4) * 3
    edge_src = torch.randint(0, 40, (E,))
    edge_dst = torch.zeros(E, dtype=torch.long)
    edge_dst[::50] = 1
    offset = torch.rand(E, 3) * 0.2 - 0.1
    with torch.no_grad():
        ref = conv(x, edge_src, edge_dst, offset, 3)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            one = conv(x, edge_src, edge_dst, offset, 3)  # E below the chunk size: one scatter pass
            monkeypatch.setattr(type(conv), "edge_chunk_size", 37)
            chunked = conv(x, edge_src, edge_dst, offset, 3)
    assert chunked.dtype == one.dtype == torch.bfloat16
    err_one = (one.float() - ref).abs().max()
    err_chunked = (chunked.float() - ref).abs().max()
    assert err_chunked <= 1.25 * err_one + 1e-3 * ref.abs().max()


def test_pyg_batch_object_input():
    from torch_geometric.data import Batch, Data

    pos, batch = ragged_batch([30, 20], seed=11)
    x = torch.randn(50, 4)
    data = Batch.from_data_list([Data(pos=pos[batch == i], x=x[batch == i]) for i in range(2)])
    net = _model()
    torch.testing.assert_close(net(data), net(pos, x, batch))
    with pytest.raises(ValueError, match="not both"):
        net(data, x)


@pytest.mark.parametrize("message, aggr, field", [("product", "mean", "rff"), ("concat", "max", "siren")])
def test_gradients_reach_every_parameter(message, aggr, field):
    pos, batch = ragged_batch([40, 30], seed=7)
    x = torch.randn(pos.size(0), 4)
    grid_net = _model(message, aggr, field)
    degrid = Degridification(8, 3, hidden_channels=16, message=message, aggr=aggr, pos_embedding=field)
    grid, graph = grid_net(pos, x, batch, return_graph=True)
    out = degrid(grid, graph)
    assert out.shape == (70, 3)
    out.square().sum().backward()
    for name, p in list(grid_net.named_parameters()) + list(degrid.named_parameters()):
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reaches {name}"


def test_degridification_dense_shapes_and_transposed_edges():
    net = _model()
    degrid = Degridification(8, 2, hidden_channels=16)
    pos, x = torch.rand(3, 25, 3) * 2 - 1, torch.randn(3, 25, 4)
    grid, graph = net(pos, x, return_graph=True)
    assert isinstance(graph, BipartiteGraph) and graph.dense_shape == (3, 25)
    assert degrid(grid, graph).shape == (3, 25, 2)
    # flat node features are accepted too and give the same answer
    flat = graph.grid.from_dense(grid)
    torch.testing.assert_close(degrid(flat, graph), degrid(grid, graph))
    # a point's output depends only on grid nodes it is connected to
    grid2 = grid.clone().detach()
    point, node = graph.edge_index
    unconnected = torch.ones(graph.num_nodes, dtype=torch.bool)
    unconnected[node[point == 0]] = False
    flat2 = graph.grid.from_dense(grid2)
    flat2[unconnected] += 100.0
    torch.testing.assert_close(degrid(flat2, graph)[0, 0], degrid(grid, graph)[0, 0])


def test_identical_points_and_fewer_points_than_k():
    net = _model()
    pos = torch.full((3, 3), 0.25)
    with pytest.warns(UserWarning, match="fewer than k=6") as caught:
        grid, graph = net(pos, torch.randn(3, 4), return_graph=True)
    assert [w.filename for w in caught] == [__file__]  # the user's line, not torch's module call
    assert torch.isfinite(grid).all()
    pdeg, ndeg = graph.degree()
    assert torch.all(ndeg >= 3) and torch.all(pdeg >= 6)


def test_outside_points_error_or_allow():
    pos, batch = ragged_batch([10, 10], seed=8)
    pos[15] = torch.tensor([0.0, 1.5, 0.0])
    x = torch.randn(20, 4)
    with pytest.raises(ValueError, match=r"cloud 1 has points outside the grid box.*row 15"):
        _model()(pos, x, batch)
    allow = Gridification(4, 8, 5, k=6, hidden_channels=16, outside="allow")
    assert torch.isfinite(allow(pos, x, batch)).all()
    # a bigger box accepts them
    big = Gridification(4, 8, 5, k=6, hidden_channels=16, bounds=(-2.0, 2.0))
    assert big(pos, x, batch).shape == (2, 8, 5, 5, 5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda n: n(torch.rand(10, 2), torch.rand(10, 4)), r"pos must have shape \[N, 3\] or \[B, N, 3\]"),
        (lambda n: n(torch.randint(0, 2, (10, 3)), torch.rand(10, 4)), "pos must be a floating-point"),
        (lambda n: n(torch.rand(10, 3), torch.rand(9, 4)), r"x must have shape \[10, F\]"),
        (
            lambda n: n(torch.rand(10, 3), torch.rand(10, 5)),
            "5 features per point but the module was built with in_channels=4",
        ),
        (lambda n: n(torch.rand(10, 3)), r"in_channels=4 \(x=None uses the 3 coordinates\)"),
        (lambda n: n(torch.rand(0, 3), torch.rand(0, 4)), "holds no points"),
        (lambda n: n(torch.rand(2, 0, 3), torch.rand(2, 0, 4)), "holds no points"),
        (lambda n: n(torch.rand(10, 3), torch.rand(10, 4), torch.tensor([0] * 5 + [2] * 5)), "cloud 1 is empty"),
        (
            lambda n: n(torch.rand(10, 3), torch.rand(10, 4), torch.tensor([0] * 5 + [1] * 5), num_clouds=3),
            "cloud 2 is empty",
        ),
        (lambda n: n(torch.rand(10, 3), torch.rand(10, 4), torch.tensor([1] * 5 + [0] * 5)), "must be sorted"),
        (
            lambda n: n(torch.rand(2, 5, 3), torch.rand(2, 5, 4), torch.zeros(10, dtype=torch.long)),
            "batch must be None",
        ),
        (lambda n: n("points"), "pos must be a torch.Tensor"),
    ],
)
def test_gridification_input_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call(_model())


def test_nan_and_inf_name_the_cloud():
    pos, batch = ragged_batch([10, 10, 10], seed=9)
    x = torch.randn(30, 4)
    bad = pos.clone()
    bad[25, 0] = float("nan")
    with pytest.raises(ValueError, match="pos contains NaN.*cloud 2 at row 25"):
        _model()(bad, x, batch)
    badx = x.clone()
    badx[4, 3] = float("inf")
    with pytest.raises(ValueError, match="x contains Inf.*cloud 0 at row 4"):
        _model()(pos, badx, batch)


def test_constructor_and_degrid_errors():
    with pytest.raises(ValueError, match="k must be a positive integer"):
        Gridification(3, 8, 5, k=0)
    with pytest.raises(ValueError, match="resolution must be an integer >= 2"):
        Gridification(3, 8, 1)
    with pytest.raises(ValueError, match="message must be one of"):
        Gridification(3, 8, 5, message="sum")
    with pytest.raises(ValueError, match="aggr must be one of"):
        Gridification(3, 8, 5, aggr="median")
    with pytest.raises(ValueError, match="omega0 must be a positive"):
        Gridification(3, 8, 5, omega0=-1.0)
    with pytest.raises(KeyError, match="unknown positional embedding 'mlp'"):
        Gridification(3, 8, 5, pos_embedding="mlp")
    with pytest.raises(ValueError, match="upper must exceed lower"):
        RegularGrid(5, 1.0, 1.0)
    net = _model()
    grid, graph = net(torch.rand(20, 3) * 2 - 1, torch.randn(20, 4), return_graph=True)
    with pytest.raises(ValueError, match=r"grid must have shape \[1, 8, 5, 5, 5\]"):
        Degridification(8, 2)(grid[:, :4], graph)
    with pytest.raises(ValueError, match="graph must be the BipartiteGraph"):
        Degridification(8, 2)(grid, None)


def test_float64_module_and_input_casting():
    net = _model().double()
    out = net(torch.rand(20, 3) * 2 - 1, torch.randn(20, 4, dtype=torch.float32))
    assert out.dtype == torch.float64


def test_tiny_reconstruction_fit():
    """gridify -> degridify learns to reproduce point features (loss falls a lot)."""
    torch.manual_seed(0)
    pos = torch.rand(4, 64, 3) * 2 - 1
    feat = torch.rand(4, 64, 1) * 2 - 1
    g = Gridification(1, 16, 5, k=4, hidden_channels=32, omega0=1.0, message="concat")
    d = Degridification(16, 1, hidden_channels=32, omega0=1.0, message="concat")
    opt = torch.optim.Adam(list(g.parameters()) + list(d.parameters()), lr=3e-3)
    grid, graph = g(pos, feat, return_graph=True)
    first = None
    for _ in range(300):
        grid = g(pos, feat)
        loss = (d(grid, graph) - feat).square().mean()
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.2 * first, (first, loss.item())


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_rff_inference_fn_equals_forward(dtype, tol):
    from gridify.nn.fields import RandomFourierField

    torch.manual_seed(3)
    field = RandomFourierField(3, 16, omega0=1.0).to(dtype)
    offset = (torch.rand(500, 3, dtype=dtype) - 0.5) * 4
    ref = field(offset)
    with torch.no_grad():
        got = field.inference_fn()(offset)
    torch.testing.assert_close(got, ref.detach(), atol=tol, rtol=tol)


@pytest.mark.parametrize("field", ["rff", "siren"])
def test_unchunked_no_grad_path_equals_autograd_path(field):
    pos, batch = ragged_batch([40, 25], seed=4)
    x = torch.randn(65, 4)
    net = Gridification(4, 8, resolution=4, k=3, hidden_channels=16, pos_embedding=field)
    ref = net(pos, x, batch)
    with torch.inference_mode():
        got = net(pos, x, batch)
    torch.testing.assert_close(got, ref.detach(), atol=1e-5, rtol=1e-5)


def _small_classifier():
    from gridify.models import build_model

    torch.manual_seed(0)
    return build_model(
        "gridified_classifier",
        in_channels=3,
        num_classes=4,
        k=5,
        resolution=5,
        hidden_channels=16,
        depth=1,
        kernel_size=3,
    ).eval()


def test_prebuilt_graph_gives_the_same_logits_and_gradients():
    """A graph built ahead by graph_builder() (pickled, as a DataLoader worker would) is the graph
    the model builds itself: same logits, same parameter gradients."""
    import pickle

    model = _small_classifier()
    g = torch.Generator().manual_seed(1)
    pos = torch.rand(3 * 60, 3, generator=g) * 2 - 1
    pos[:20] = pos[20:40]  # duplicated points tie in the kNN search
    batch = torch.arange(3).repeat_interleave(60)
    builder = pickle.loads(pickle.dumps(model.gridify.graph_builder()))
    graph = builder(pos, batch, 3)
    own = model.gridify.build_graph(pos, batch)
    assert torch.equal(graph.edge_index, own.edge_index)
    model.train()
    torch.manual_seed(3)  # the same dropout masks for both passes
    out_a = model(pos, None, batch)
    grads_a = torch.autograd.grad(out_a.square().sum(), list(model.parameters()), allow_unused=True)
    torch.manual_seed(3)
    out_b = model(pos, None, batch, graph=graph)
    grads_b = torch.autograd.grad(out_b.square().sum(), list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(out_a, out_b, rtol=0, atol=0)
    for a, b in zip(grads_a, grads_b):
        assert (a is None and b is None) or torch.equal(a, b)


def test_prebuilt_graph_that_does_not_fit_is_refused():
    from gridify.nn import BipartiteGraph, GraphBuilder, RegularGrid

    model = _small_classifier()
    pos = torch.rand(80, 3) * 2 - 1
    batch = torch.zeros(80, dtype=torch.long)
    graph = model.gridify.graph_builder()(pos, batch)
    with pytest.raises(ValueError, match="built for other points"):
        model(pos * 0.5, None, batch, graph=graph)
    with pytest.raises(ValueError, match="resolution 7"):
        model(pos, None, batch, graph=GraphBuilder(RegularGrid(7), 5)(pos, batch))
    with pytest.raises(ValueError, match="built for 80 points in 1 clouds, got 40 points"):
        model(pos[:40], None, batch[:40], graph=graph)
    with pytest.raises(ValueError, match="must be a BipartiteGraph"):
        model(pos, None, batch, graph=graph.edge_index)
    flipped = BipartiteGraph(graph.edge_index.flip(1), graph.pos, graph.batch, graph.num_clouds, graph.grid)
    with pytest.raises(ValueError, match="sorted by grid node"):
        model(pos, None, batch, graph=flipped)


def test_graph_collate_in_worker_processes_matches_the_plain_forward():
    """Training batches whose graphs a DataLoader worker built (GraphCollate) give the logits of
    the plain forward; test-time views (vote_logits) drop the prebuilt graph."""
    from torch.utils.data import DataLoader

    from gridify.datasets import collate_points
    from gridify.training.data import GraphCollate, graph_builder_of
    from gridify.training.metrics import forward_batch, vote_logits

    model = _small_classifier()
    g = torch.Generator().manual_seed(2)
    items = [{"pos": torch.rand(50, 3, generator=g) * 1.8 - 0.9, "y": torch.tensor(i % 4)} for i in range(6)]
    cfg = {"data": {"num_workers": 1, "prefetch_graph": True}, "trainer": {"accelerator": "cpu"}}
    assert graph_builder_of(model, dict(cfg, data={"num_workers": 0, "prefetch_graph": True})) is None
    assert graph_builder_of(model, dict(cfg, data={"num_workers": 1, "prefetch_graph": "auto"})) is None  # CPU
    assert graph_builder_of(model, dict(cfg, data={"num_workers": 1, "prefetch_graph": False})) is None
    loader = DataLoader(
        items, batch_size=3, num_workers=1, collate_fn=GraphCollate(collate_points, graph_builder_of(model, cfg))
    )
    for b in loader:
        assert b["graph"].edge_index.size(1) > 0
        plain = model(b["pos"], None, b["batch"])
        torch.testing.assert_close(forward_batch(model, b, "classification"), plain, rtol=0, atol=0)
        votes = vote_logits(model, b, "classification", votes=2)
        assert votes.shape == plain.shape and torch.isfinite(votes).all()


def test_bilateral_knn_per_axis_covers_points_and_nodes():
    grid = RegularGrid((8, 6, 3))
    pos = torch.rand(400, 3) * 2 - 1
    pos[:, 2] *= 0.1  # a flat cloud
    batch = torch.arange(2).repeat_interleave(200)
    graph = bilateral_knn(pos, grid, 4, batch)
    point_deg, node_deg = graph.degree()
    assert bool((point_deg > 0).all()) and bool((node_deg > 0).all())
    assert graph.num_nodes == 2 * 144
    # every point's 4 nearest grid nodes are among its edges
    p2g = grid_knn(pos, 4, grid.shape, grid.lower, grid.upper, batch)
    keys = set((graph.edge_index[0] * graph.num_nodes + graph.edge_index[1]).tolist())
    assert set((p2g[0] * graph.num_nodes + p2g[1]).tolist()) <= keys
    # nodes of cloud b only connect to points of cloud b
    assert torch.equal(graph.edge_index[1] // 144, batch[graph.edge_index[0]])


def test_gridification_per_axis_shape_point_order_and_degridification():
    torch.manual_seed(0)
    grid_mod = Gridification(3, 6, (8, 6, 3), k=4, aggr="max", message="concat").eval()
    degrid = Degridification(6, 5, aggr="max", message="concat").eval()
    pos = torch.rand(300, 3) * 2 - 1
    batch = torch.arange(2).repeat_interleave(150)
    x = torch.randn(300, 3)
    g, graph = grid_mod(pos, x, batch, return_graph=True)
    assert g.shape == (2, 6, 8, 6, 3)
    out = degrid(g, graph)
    assert out.shape == (300, 5)
    perm = torch.cat([torch.randperm(150), 150 + torch.randperm(150)])
    g2, graph2 = grid_mod(pos[perm], x[perm], batch, return_graph=True)
    torch.testing.assert_close(g2, g, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(degrid(g2, graph2), out[perm], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"grid must have shape \[2, 6, 8, 6, 3\]"):
        degrid(torch.randn(2, 6, 8, 8, 8), graph)
    with pytest.raises(ValueError, match=r"\[B, C, Rx, Ry, Rz\] or \[B \* Rx Ry Rz, C\]"):
        degrid(torch.randn(2, 6, 8), graph)


def test_set_resolution_to_a_per_axis_grid():
    mod = Gridification(3, 4, 5, k=3)
    mod.set_resolution((6, 6, 2))
    assert mod.resolution == (6, 6, 2)
    assert mod(torch.rand(50, 3) * 2 - 1).shape == (1, 4, 6, 6, 2)


def test_degridification_validates_a_graph_given_from_outside():
    torch.manual_seed(0)
    grid, graph = Gridification(3, 4, 3, k=3)(_clouds()[0], return_graph=True)
    graph.edge_index = graph.edge_index.clone()
    graph.edge_index[1, 5] = 27  # beyond the 27 nodes of the one cloud
    with pytest.raises(ValueError, match=r"graph.edge_index\[1\] \(grid nodes\) values must lie in \[0, 27\)"):
        Degridification(4, 2)(grid.detach(), graph)


def test_batch_and_cloud_counts_are_checked_before_allocating():
    pos = torch.rand(4, 3) * 0.5
    with pytest.raises(
        ValueError, match="num_clouds=1000000000000 asks for 1000000000000 clouds but there are only 4 points"
    ):
        Gridification(3, 4, 3, k=2)(pos, num_clouds=10**12)
    with pytest.raises(ValueError, match="num_clouds must be a non-negative integer"):
        Gridification(3, 4, 3, k=2)(pos, num_clouds=2.5)
    with pytest.raises(ValueError, match=r"batch \(it refers to cloud 999999999999\) asks for"):
        Gridification(3, 4, 3, k=2)(pos, batch=torch.tensor([0, 0, 0, 10**12 - 1]))
    with pytest.raises(ValueError, match=r"batch_y with 1000000000001 clouds .* would need"):
        knn(torch.rand(2, 3), torch.rand(2, 3), 1, batch_y=torch.tensor([0, 10**12]))


def test_fused_max_training_equals_the_plain_path_with_duplicated_points():
    # the fused path (the default in training) against the plain one, float64, in both directions;
    # duplicated points tie: the fused path gives a tied channel's gradient to one copy, the plain
    # path shares it, so x's gradient agrees summed over the copies, everything else exactly
    def run(fused):
        torch.manual_seed(0)
        grid_net = Gridification(4, 8, resolution=4, k=3, hidden_channels=16, aggr="max", message="concat").double()
        degrid = Degridification(8, 3, hidden_channels=16, aggr="max", message="concat").double()
        grid_net.conv.fused_messages = degrid.conv.fused_messages = fused
        g = torch.Generator().manual_seed(1)
        pos = torch.rand(2, 40, 3, generator=g, dtype=torch.float64) * 2 - 1
        pos[:, 1] = pos[:, 0]
        x = torch.randn(2, 40, 4, generator=g, dtype=torch.float64)
        x[:, 1] = x[:, 0]
        x.requires_grad_()
        out = degrid(*grid_net(pos, x, return_graph=True))
        (out * torch.randn(out.shape, generator=g, dtype=torch.float64)).sum().backward()
        grads = [p.grad.clone() for p in list(grid_net.parameters()) + list(degrid.parameters())]
        gx = x.grad.clone()
        gx[:, 0] += gx[:, 1]
        return out.detach(), gx[:, [0] + list(range(2, 40))], grads

    out_a, gx_a, grads_a = run(True)
    out_b, gx_b, grads_b = run(False)
    torch.testing.assert_close(out_a, out_b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gx_a, gx_b, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_max_aggregation_row_path_equals_scatter_reduce_in_both_directions(monkeypatch):
    # training with max aggregation runs ops.scatter's ScatterExtreme in gridification and
    # de-gridification: values and every gradient equal scatter_reduce's autograd (float64)
    S = importlib.import_module("gridify.ops.scatter")
    used = []
    real = S.ScatterExtreme.apply
    monkeypatch.setattr(S.ScatterExtreme, "apply", lambda *a: used.append(1) or real(*a))

    def run(fast):
        if not fast:
            monkeypatch.setattr(S, "use_row_extreme", lambda *a: False)
        torch.manual_seed(0)
        grid_net = Gridification(4, 8, resolution=4, k=3, hidden_channels=16, aggr="max").double()
        degrid = Degridification(8, 3, hidden_channels=16, aggr="max").double()
        grid_net.conv.fused_messages = degrid.conv.fused_messages = False  # the plain (autograd) path
        g = torch.Generator().manual_seed(1)
        pos = torch.rand(2, 40, 3, generator=g, dtype=torch.float64) * 2 - 1
        pos[:, 1] = pos[:, 0]  # duplicated points: tied messages
        x = torch.randn(2, 40, 4, generator=g, dtype=torch.float64)
        x[:, 1] = x[:, 0]
        x.requires_grad_()
        grid, graph = grid_net(pos, x, return_graph=True)
        out = degrid(grid, graph)
        (out * torch.randn(out.shape, generator=g, dtype=torch.float64)).sum().backward()
        grads = [p.grad.clone() for p in list(grid_net.parameters()) + list(degrid.parameters())]
        return out.detach(), x.grad.clone(), grads

    out_a, gx_a, grads_a = run(True)
    assert len(used) == 2  # gridification and de-gridification
    out_b, gx_b, grads_b = run(False)
    assert len(used) == 2
    torch.testing.assert_close(out_a, out_b)
    torch.testing.assert_close(gx_a, gx_b)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b)
    monkeypatch.undo()
    used.clear()
    monkeypatch.setattr(S.ScatterExtreme, "apply", lambda *a: used.append(1) or real(*a))
    net = Gridification(4, 8, resolution=4, k=3, hidden_channels=16, aggr="max")
    with torch.no_grad():  # inference keeps the plain scatter_reduce
        Degridification(8, 3, hidden_channels=16, aggr="max")(
            *net(torch.rand(1, 30, 3), torch.randn(1, 30, 4), return_graph=True)
        )
    assert used == []
