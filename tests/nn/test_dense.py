"""The layers' fixed-shape path (gridify.nn.dense): the switch, the fixed-shape bilateral kNN graph against
gridify.nn.bilateral_knn's edge set (random clouds, several batch / grid sizes, duplicate points, real
ModelNet10 shapes, cubic and per-axis grids, brute force and bucketed search), and the (de-)gridification
and the models' own forward on that path against their sparse path; argument checks."""

import pytest
import torch

import gridify
from gridify import export as E
from gridify.models import GridifiedClassifier, GridifiedSceneSegmenter, GridifiedSegmenter
from gridify.nn import Degridification, Gridification, RegularGrid, bilateral_knn
from gridify.nn import dense as D
from gridify.ops import grid_knn, knn
from tests.helpers import modelnet_clouds


def edge_set(pos, grid, k, backend="torch"):
    """bilateral_knn's edge_index of equally sized clouds [B, N, 3]."""
    B, N = pos.shape[:2]
    batch = torch.arange(B).repeat_interleave(N)
    return bilateral_knn(pos.reshape(-1, 3), grid, k, batch, knn_backend=backend).edge_index


# --------------------------------------------------------------------------------------
# the graph
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("B, N, R, k", [(1, 100, 5, 4), (3, 200, 6, 8), (2, 1024, 9, 9), (1, 30, 4, 9), (2, 9, 3, 9)])
@pytest.mark.parametrize("backend", ["torch", "kdtree"])
def test_dense_graph_equals_bilateral_knn(B, N, R, k, backend):
    g = torch.Generator().manual_seed(B * N + R)
    pos = torch.rand(B, N, 3, generator=g) * 2 - 1
    grid = RegularGrid(R)
    node_points, point_nodes, keep = D.dense_bilateral_knn(pos, grid, k)
    assert node_points.shape == (B, R**3, k) and point_nodes.shape == keep.shape == (B, N, min(k, R**3))
    ei = D.dense_edge_index(node_points, point_nodes, keep)
    assert torch.equal(ei, edge_set(pos, grid, k, backend))
    # every kept point -> node edge is new, every dropped one is already in the node's own list
    own = (
        node_points.gather(1, point_nodes.reshape(B, -1, 1).expand(-1, -1, k)).view(*keep.shape, k)
        == torch.arange(N).view(1, N, 1, 1)
    ).any(-1)
    assert torch.equal(keep, ~own)


def test_dense_graph_with_duplicate_points_and_a_box():
    """Exact ties between points (every point twice) are broken by the lower index, as knn's torch
    backend and the KD-tree do; a non-default grid box works the same."""
    g = torch.Generator().manual_seed(1)
    pos = torch.rand(2, 100, 3, generator=g) * 2 - 1
    pos = torch.cat([pos, pos], 1)
    for grid in (RegularGrid(5), RegularGrid(5, (-1.0, -2.0, -1.0), (1.0, 2.0, 1.5))):
        ei = D.dense_edge_index(*D.dense_bilateral_knn(pos, grid, 8))
        for backend in ("torch", "kdtree"):
            assert torch.equal(ei, edge_set(pos, grid, 8, backend))


def test_node_ties_choose_equally_near_nodes():
    """Points exactly on the lattice's symmetry planes have several equally near grid nodes at the
    k-th place; grid_knn and the brute force may keep different ones, but always nodes at the
    same distances, and the node -> points half is identical."""
    a = torch.linspace(-1, 1, 9)
    pos = torch.stack(torch.meshgrid(a, a, a, indexing="ij"), -1).reshape(1, -1, 3)
    grid = RegularGrid(5)
    nodes = grid.positions()
    node_points, point_nodes, _ = D.dense_bilateral_knn(pos, grid, 9)
    ref = grid_knn(pos[0], 9, 5)[1].view(-1, 9)

    def dist(idx):
        return ((nodes[idx] - pos[0][:, None]) ** 2).sum(-1).sort(1).values

    assert torch.equal(dist(point_nodes[0]), dist(ref))
    ref_nodes = gridify.ops.knn(pos[0], nodes, 9, backend="torch")[1].view(-1, 9)
    assert torch.equal(node_points[0], ref_nodes)


def test_dense_graph_on_modelnet_shapes(shared_data):
    from gridify.api import normalize_cloud

    clouds = [torch.from_numpy(normalize_cloud(c.numpy())[0]) for c in modelnet_clouds(shared_data)]
    assert len(clouds) == 10 and all(c.shape == (1024, 3) for c in clouds)
    grid = RegularGrid(9)
    full = torch.stack(clouds)
    for pos in (full[:1], full[1:3], full[3:, :512], full[:4, ::3]):  # N = 1024, 512, 342; B = 1..7
        ei = D.dense_edge_index(*D.dense_bilateral_knn(pos, grid, 9))
        assert torch.equal(ei, edge_set(pos, grid, 9, "auto"))  # KD-tree or brute force by size


@pytest.mark.parametrize("shape", [(5, 5, 5), (6, 4, 3), (2, 7, 3)])
@pytest.mark.parametrize("cloud", ["random", "duplicates"])
def test_dense_grid_knn_is_the_bilateral_knn(shape, cloud):
    g = torch.Generator().manual_seed(1)
    pos = torch.rand(2, 60, 3, generator=g) * 2 - 1
    if cloud == "duplicates":
        pos[:, 30:] = pos[:, :30]
    grid = RegularGrid(shape)
    k = 5
    nodes = grid.positions()
    node_points, point_nodes, keep = D.dense_grid_knn_unchecked(pos, k, nodes, D.grid_axes(grid), node_chunk=7)
    B, N = pos.shape[:2]
    flat, batch = pos.reshape(-1, 3), torch.arange(B).repeat_interleave(N)
    node_batch = torch.arange(B).repeat_interleave(grid.num_nodes)
    # A: node i <- its k nearest points (the torch knn backend, ties to the lower index)
    a = knn(flat, nodes.repeat(B, 1), k, batch, node_batch, backend="torch")[1].view(B, grid.num_nodes, k)
    assert torch.equal(node_points.sort(-1).values, (a - (torch.arange(B) * N).view(B, 1, 1)).sort(-1).values)
    # P: point j -> its k nearest nodes, as grid_knn (same squared distances where a tie picks another node)
    theirs = grid_knn(flat, k, shape, batch=batch)[1].view(B, N, k) - (torch.arange(B) * grid.num_nodes).view(B, 1, 1)
    d = lambda idx: (nodes.double()[idx] - pos.double().unsqueeze(2)).pow(2).sum(-1).sort(-1).values  # noqa: E731
    assert torch.allclose(d(point_nodes), d(theirs), rtol=0, atol=1e-12)
    # keep drops exactly the point -> node edges the node's own list holds
    held = torch.gather(node_points, 1, point_nodes.reshape(B, -1, 1).expand(-1, -1, k)).view(B, N, k, k)
    assert torch.equal(keep, ~(held == torch.arange(N).view(1, N, 1, 1)).any(-1))


def test_dense_grid_knn_agrees_with_the_cubic_export_graph():
    pos = torch.rand(3, 40, 3) * 2 - 1
    grid = RegularGrid(5)
    ours = D.dense_grid_knn_unchecked(pos, 6, grid.positions(), D.grid_axes(grid), node_chunk=16)
    cubic = D.dense_bilateral_knn_unchecked(pos, 6, *D.grid_tables(grid))
    for a, b in zip(ours, cubic):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind", ["random", "duplicates", "plane"])
@pytest.mark.parametrize("shape,N", [((6, 4, 3), 9), ((16, 16, 4), 2500)])
def test_the_bucketed_graph_is_the_brute_force_graph(kind, shape, N):
    """The whole graph (A, P, keep) is the same whichever node -> points search builds A."""
    g = torch.Generator().manual_seed(N)
    pos = torch.rand(2, N, 3, generator=g) * 2 - 1
    if kind == "duplicates":
        pos[:, N - N // 2 :] = pos[:, : N // 2]
    elif kind == "plane":
        pos[..., 2] = -0.9
    grid = RegularGrid(shape)
    args = (pos, 6, grid.positions(), D.grid_axes(grid), 97)
    for a, b in zip(D.dense_grid_knn_unchecked(*args, search="brute"), D.dense_grid_knn_unchecked(*args, "bucketed")):
        assert torch.equal(a, b)


def test_dense_graph_argument_errors():
    grid = RegularGrid(4)
    with pytest.raises(ValueError, match=r"dense_bilateral_knn: pos must have shape \[B, N, 3\]"):
        D.dense_bilateral_knn(torch.rand(10, 3), grid, 4)
    with pytest.raises(ValueError, match="every cloud needs at least k=8 points, got N=5"):
        D.dense_bilateral_knn(torch.rand(1, 5, 3), grid, 8)
    bad = torch.rand(2, 10, 3)
    bad[1, 3, 0] = float("nan")
    with pytest.raises(ValueError, match="pos contains NaN values .* cloud 1 at row 13"):
        D.dense_bilateral_knn(bad, grid, 4)
    with pytest.raises(ValueError, match="grid must be a RegularGrid"):
        D.dense_bilateral_knn(torch.rand(1, 10, 3), 4, 4)


# --------------------------------------------------------------------------------------
# the switch, and the layers and models on the fixed-shape path
# --------------------------------------------------------------------------------------
def test_the_switch_holds_its_settings_inside_only():
    assert D.fixed_shape_settings() is None
    with D.fixed_shapes(search="bucketed", node_chunk=16) as settings:
        assert D.fixed_shape_settings() == settings == D.FixedShapes("bucketed", 16)
        with D.fixed_shapes():
            assert D.fixed_shape_settings() == D.FixedShapes(None, D.NODE_CHUNK)
        assert D.fixed_shape_settings() == settings
    assert D.fixed_shape_settings() is None
    with pytest.raises(ValueError, match="fixed_shapes: search must be one of"):
        with D.fixed_shapes(search="kdtree"):
            pass
    with pytest.raises(ValueError, match="fixed_shapes: node_chunk must be a positive integer"):
        with D.fixed_shapes(node_chunk=0):
            pass
    assert D.fixed_shape_settings() is None


@pytest.mark.parametrize(
    "aggr, message, field", [("mean", "product", "rff"), ("max", "concat", "rff"), ("sum", "product", "siren")]
)
def test_gridify_dense_equals_gridification(aggr, message, field):
    torch.manual_seed(0)
    module = Gridification(6, 16, 5, k=7, aggr=aggr, message=message, pos_embedding=field).eval()
    pos = torch.rand(3, 90, 3) * 2 - 1
    x = torch.randn(3, 90, 6)
    with torch.no_grad():
        want = module(pos, x)
        got = E.gridify_dense(module, pos, x)
    assert got.shape == want.shape == (3, 16, 5, 5, 5)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("aggr, message", [("mean", "product"), ("max", "concat"), ("sum", "concat")])
@pytest.mark.parametrize("search", ["brute", "bucketed"])
def test_the_layers_fixed_shape_path_equals_their_sparse_path(aggr, message, search):
    """Gridification and Degridification inside the switch (one forward, the layout [B, N, ...] kept) give the
    sparse path's grid and per-point features, duplicated points included (their edges counted once)."""
    torch.manual_seed(1)
    grid_layer = Gridification(4, 8, (6, 5, 3), k=5, aggr=aggr, message=message).eval()
    back = Degridification(8, 6, aggr=aggr, message=message).eval()
    pos = torch.rand(2, 70, 3) * 2 - 1
    pos[:, 50:] = pos[:, :20]
    x = torch.randn(2, 70, 4)
    with torch.no_grad():
        want_grid, graph = grid_layer(pos, x, return_graph=True)
        want = back(want_grid, graph)
        with D.fixed_shapes(search=search, node_chunk=11):
            got_grid, fixed = grid_layer(pos, x, return_graph=True)
            got = back.propagate(got_grid, fixed)
    assert isinstance(fixed, D.FixedShapeGraph) and fixed.num_clouds == 2
    assert got_grid.shape == want_grid.shape == (2, 8, 6, 5, 3) and got.shape == want.shape == (2, 70, 6)
    assert torch.allclose(got_grid, want_grid, atol=1e-5) and torch.allclose(got, want, atol=1e-5)


SMALL = dict(k=4, hidden_channels=8, depth=1, kernel_size=3)
MODELS = {  # name -> (model, per-point features)
    "classifier": (lambda: GridifiedClassifier(6, 3, resolution=4, **SMALL), 6),
    "segmenter": (lambda: GridifiedSegmenter(3, 4, resolution=4, num_categories=2, point_channels=8, **SMALL), 3),
    "scene": (
        lambda: GridifiedSceneSegmenter(
            2, 3, resolution=(5, 4, 3), extent=None, box_trim=0.01, scale_input=True, point_channels=8, **SMALL
        ),
        2,
    ),
    "scene without features": (
        lambda: GridifiedSceneSegmenter(0, 3, resolution=(5, 4, 3), point_channels=8, **SMALL),
        0,
    ),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_the_models_own_forward_on_the_fixed_shape_path(name):
    """Each gridified model's own forward, inside the switch, gives the logits of its sparse path on the same
    equally sized clouds (what the exported file runs is the model's forward)."""
    torch.manual_seed(0)
    make, channels = MODELS[name]
    model = make().eval()
    g = torch.Generator().manual_seed(3)
    scale = 10.0 if "scene" in name else 0.9
    pos = (torch.rand(2, 60, 3, generator=g) * 2 - 1) * scale
    x = torch.rand(2, 60, channels, generator=g) if channels else None
    kwargs = {"category": torch.tensor([1, 0])} if name == "segmenter" else {}
    with torch.no_grad():
        want = model(pos, x, **kwargs)
        with D.fixed_shapes():
            got = model(pos, x, **kwargs)
    assert got.shape == want.shape and (got - want).abs().max() < 1e-4
    assert model.point_inputs() is not None


def test_dense_helpers_check_their_inputs():
    torch.manual_seed(0)
    module = Gridification(3, 8, 4, k=5).eval()
    pos, x = torch.rand(2, 30, 3), torch.rand(2, 30, 3)
    cases = [
        (
            lambda: E.gridify_dense(module, pos[:, :3], x[:, :3]),
            "gridify_dense: every cloud needs at least k=5 points, got N=3",
        ),
        (lambda: E.gridify_dense(None, pos, x), "gridify_dense: module must be a gridify.nn.Gridification"),
        (lambda: E.gridify_dense(module, pos.double(), x.double()), "pos must be float32 .*, got torch.float64"),
        (lambda: E.gridify_dense(module, pos, x[..., :2]), r"x must have shape \[B, N, F\] = \[2, 30, 3\]"),
        (lambda: E.gridify_dense(module, pos, x[:, :29]), r"x must have shape \[B, N, F\]"),
        (lambda: E.gridify_dense(module, pos, x.double()), "x must have pos' dtype and device"),
        (lambda: E.gridify_dense(module, pos, x, (1, 2)), "tables must be None or the grid's grid_tables"),
        (lambda: E.dense_edge_index(None, None, None), "dense_edge_index: node_points must be a torch.Tensor"),
        (
            lambda: E.dense_edge_index(
                *[t.float() if t.dtype != torch.bool else t for t in E.dense_bilateral_knn(pos, RegularGrid(4), 5)]
            ),
            "node_points must be an integer tensor",
        ),
        (lambda: E.grid_tables(4), "grid_tables: grid must be a RegularGrid, got int"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    with torch.no_grad():  # valid input still gives the module's result
        assert torch.allclose(E.gridify_dense(module, pos, x), module(pos, x), atol=1e-5)
        assert torch.allclose(E.gridify_dense(module, pos, x, E.grid_tables(module.grid)), module(pos, x), atol=1e-5)
