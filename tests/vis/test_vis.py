"""Tests of gridify.vis: colours, the touched grid nodes, the edge subset, the camera, headless PNGs.

Rendering tests skip (with the reason) where Open3D's offscreen renderer cannot start, e.g.
without a Vulkan driver (apt-get install mesa-vulkan-drivers). They render small images.
"""

import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import gridify
from gridify import cli, vis
from gridify.ops import fps_reference


def u8(colors):
    return np.floor(np.asarray(colors) * 255 + 0.5).astype(np.uint8)


def pixels_of(img, color):
    return int((img.reshape(-1, 3) == u8(color)).all(1).sum())


@pytest.fixture(scope="module")
def renderer_ok():
    try:
        vis.render({"points": {"pos": np.zeros((1, 3)), "colors": np.zeros((1, 3))}}, width=16, height=16)
    except vis.RenderError as exc:
        pytest.skip(f"no offscreen rendering here: {exc}")


def three_labels(n=3000, seed=0):
    pts = np.random.default_rng(seed).uniform(-1, 1, (n, 3))
    return pts, (pts[:, 0] > -0.3).astype(int) + (pts[:, 0] > 0.3)


def lumpy_cloud(n=600, seed=0):
    """Points on a squashed sphere inside the unit ball: a shape that touches only part of a grid."""
    p = np.random.default_rng(seed).normal(size=(n, 3))
    return p / np.linalg.norm(p, axis=1, keepdims=True) * [0.9, 0.7, 0.4]


def lattice(R):
    ax = np.linspace(-1, 1, R)
    return np.stack(np.meshgrid(ax, ax, ax, indexing="ij"), -1).reshape(-1, 3)


def test_import_stays_light():
    code = (
        "import sys, gridify, gridify.vis, gridify.api, gridify.cli; "
        "bad = [m for m in ('open3d', 'lightning', 'matplotlib', 'yaml', 'PIL') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_palette_and_grid_colors():
    pal = u8(vis.palette(40))
    assert len({tuple(c) for c in pal}) == 40 and tuple(u8(vis.EDGE_COLOR)) not in {tuple(c) for c in pal}
    assert (pal.min(1) < 230).all()  # none vanishes into the white background
    edge = {tuple(c) for c in u8(vis.edge_palette(40))}
    assert len(edge) == 40 and not edge & {tuple(c) for c in pal}  # edge colours are never label colours
    assert tuple(u8(vis.POINT_GREY)) not in edge | {tuple(c) for c in pal} | {tuple(u8(vis.EDGE_COLOR))}
    np.testing.assert_array_equal(vis.label_colors([2, 0, 2], 3), vis.palette(3)[[2, 0, 2]])
    with pytest.raises(ValueError, match="label 5 out of range for 3 classes"):
        vis.label_colors([5], 3)
    feats = np.random.default_rng(0).normal(size=(6, 3, 3, 3))
    for mode in ("norm", "pca"):
        c = vis.grid_node_colors(feats, mode)
        assert c.shape == (27, 3) and c.min() >= 0 and c.max() <= 1
    pca = vis.grid_node_colors(feats, "pca")
    assert np.allclose(pca.min(0), 0) and np.allclose(pca.max(0), 1)  # each component spans [0, 1]
    norm = np.linalg.norm(feats.reshape(6, -1).T, axis=1)
    c = vis.grid_node_colors(feats, "norm")
    np.testing.assert_allclose(c[norm.argmin()], vis._VIRIDIS[0])
    np.testing.assert_allclose(c[norm.argmax()], vis._VIRIDIS[-1])
    with pytest.raises(ValueError, match="mode must be 'norm' or 'pca'"):
        vis.grid_node_colors(feats, "rgb")


# --------------------------------------------------------------------------------------
# the touched grid nodes
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("R", [2, 5, 9])
def test_touched_nodes_are_the_nearest_node_of_some_point(R):
    pts = lumpy_cloud()
    nodes = lattice(R)
    nearest = ((pts[:, None] - nodes[None]) ** 2).sum(-1).argmin(1)  # brute-force reference
    touched = vis.touched_nodes(pts, R)
    np.testing.assert_array_equal(touched, np.unique(nearest))
    if R > 2:
        assert len(touched) < R**3  # the shape touches only part of the lattice
    # outside the box, the nearest node is still found (the clipped index)
    far = np.array([[3.0, -5.0, 0.1]])
    np.testing.assert_array_equal(vis.touched_nodes(far, R), [((far - nodes) ** 2).sum(1).argmin()])
    # other bounds: the same arithmetic on the scaled lattice
    np.testing.assert_array_equal(vis.touched_nodes(pts * 2 + 1, R, (-1.0, 3.0)), touched)


def test_touched_grid_holds_exactly_the_nodes_that_points_send_to_first():
    """Every node of the bilateral kNN graph has edges (each takes its k nearest points); the touched
    ones are those joined to a point that has it as its *nearest* node, and the grid layer holds
    exactly them, coloured over themselves only."""
    pts = lumpy_cloud(400).astype(np.float32)
    grid, graph = gridify.gridify(pts, resolution=6, k=4, return_graph=True, normalize=False)
    point, node = graph.edge_index.numpy()
    assert len(np.unique(node)) == 6**3  # the full lattice has edges: nothing to restrict by degree
    nearest = ((pts[:, None].astype(np.float64) - lattice(6)[None]) ** 2).sum(-1).argmin(1)
    edges = set(zip(point.tolist(), node.tolist()))
    assert all((j, int(i)) in edges for j, i in enumerate(nearest))  # (point, its nearest node) is an edge
    layer = vis._grid_layer(grid.numpy(), pts.astype(np.float64), "pca", "touched", (-1.0, 1.0))
    np.testing.assert_array_equal(layer["ids"], np.unique(nearest))
    np.testing.assert_allclose(layer["pos"], lattice(6)[np.unique(nearest)])
    feats = grid.numpy().reshape(grid.shape[0], -1).T[np.unique(nearest)]
    np.testing.assert_allclose(layer["colors"], vis.grid_node_colors(feats, "pca"))
    full = vis._grid_layer(grid.numpy(), pts.astype(np.float64), "norm", "all", (-1.0, 1.0))
    np.testing.assert_array_equal(full["ids"], np.arange(6**3))
    np.testing.assert_allclose(full["pos"], lattice(6))


# --------------------------------------------------------------------------------------
# the edge subset
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cloud_graph():
    pts = lumpy_cloud(500, seed=1).astype(np.float32)
    grid, graph = gridify.gridify(pts, resolution=7, k=5, return_graph=True, normalize=False)
    return pts, grid, graph


def test_edge_subset_is_every_edge_of_the_chosen_nodes_only(cloud_graph):
    pts, _, graph = cloud_graph
    point, node = graph.edge_index.numpy()
    ids, chosen = vis.edge_subset(graph, 6, max_edges=10_000)
    assert len(chosen) == 6 == len(set(chosen.tolist()))
    assert np.all(np.diff(ids) > 0) and ids.min() >= 0 and ids.max() < len(node)  # distinct edges of the graph
    np.testing.assert_array_equal(ids, np.flatnonzero(np.isin(node, chosen)))  # all of theirs, nothing else
    # the chosen nodes: the nearest nodes of the farthest-point samples (reference FPS), in order
    order = fps_reference(torch.from_numpy(pts), ratio=1.0).numpy()
    nearest = ((pts[order][:, None].astype(np.float64) - lattice(7)[None]) ** 2).sum(-1).argmin(1)
    _, first = np.unique(nearest, return_index=True)
    np.testing.assert_array_equal(chosen, nearest[np.sort(first)][:6])
    assert set(chosen.tolist()) <= set(vis.touched_nodes(pts, 7).tolist())  # the chosen nodes are touched ones
    # max_edges: a seeded random subset of those edges
    few, again = vis.edge_subset(graph, 6, max_edges=25, seed=3)
    assert len(few) == 25 and set(few.tolist()) <= set(ids.tolist()) and np.array_equal(again, chosen)
    np.testing.assert_array_equal(few, vis.edge_subset(graph, 6, max_edges=25, seed=3)[0])
    assert not np.array_equal(few, vis.edge_subset(graph, 6, max_edges=25, seed=4)[0])


def test_edge_subset_explicit_nodes_all_edges_and_other_edge_forms(cloud_graph):
    pts, grid, graph = cloud_graph
    point, node = graph.edge_index.numpy()
    ids, chosen = vis.edge_subset(graph, [200, 17, 200], max_edges=10_000)
    np.testing.assert_array_equal(chosen, [200, 17])  # repeats dropped, order kept
    np.testing.assert_array_equal(ids, np.flatnonzero((node == 200) | (node == 17)))
    ids, chosen = vis.edge_subset(graph, "all", max_edges=10_000)
    assert chosen is None and np.array_equal(ids, np.arange(len(node)))
    assert len(vis.edge_subset(graph, "all", max_edges=100)[0]) == 100
    # a [2, E] index and [E, 2, 3] segments choose the same edges
    ids, chosen = vis.edge_subset(graph, 4, max_edges=10_000)
    same = vis.edge_subset(np.stack([point, node]), 4, 10_000, points=pts, grid_pos=lattice(7))
    np.testing.assert_array_equal(same[0], ids)
    np.testing.assert_array_equal(same[1], chosen)
    seg = np.stack([pts[point].astype(np.float64), lattice(7)[node]], 1)
    seg_ids, seg_nodes = vis.edge_subset(seg, 4, 10_000)  # nodes: the distinct segment ends, sorted
    chosen_pos = np.unique(seg[:, 1], axis=0)[seg_nodes]
    assert len(seg_nodes) == 4 and len(np.unique(chosen_pos, axis=0)) == 4
    ends_at_chosen = (seg[:, 1][:, None] == chosen_pos[None]).all(-1).any(1)
    np.testing.assert_array_equal(seg_ids, np.flatnonzero(ends_at_chosen))


def test_fewer_nodes_than_asked_when_the_cloud_runs_out():
    pts = np.array([[0.0, 0.0, 0.0], [0.05, 0.0, 0.0], [0.9, 0.9, 0.9]], dtype=np.float32)
    _, graph = gridify.gridify(pts, resolution=3, k=1, return_graph=True, normalize=False)
    ids, chosen = vis.edge_subset(graph, 5)
    np.testing.assert_array_equal(chosen, [13, 26])  # two points share node 13 (the centre)
    assert set(graph.edge_index[1, ids].tolist()) == {13, 26}


# --------------------------------------------------------------------------------------
# the camera
# --------------------------------------------------------------------------------------
def flat_cloud(normal, n=2000, seed=0):
    """A 2 x 1 rectangle with a thin (0.01) third dimension along ``normal``."""
    rng = np.random.default_rng(seed)
    normal = np.asarray(normal, float) / np.linalg.norm(normal)
    a = np.cross(normal, [0.3, 0.5, 0.8])
    a /= np.linalg.norm(a)
    b = np.cross(normal, a)
    uv = rng.uniform(-1, 1, (n, 2)) * [1.0, 0.5]
    return uv[:, :1] * a + uv[:, 1:] * b + rng.normal(0, 0.01, (n, 1)) * normal, a, b, normal


@pytest.mark.parametrize("normal", [(1, 2, 3), (0, 0, 1), (1, 0, 0), (-2, 1, 0.5)])
def test_pca_camera_looks_along_the_smallest_principal_axis(normal):
    pts, _, _, n = flat_cloud(normal)
    d, up = vis.view_direction(pts)
    assert abs(d @ n) > 0.999  # along the normal of the plane
    iso = np.array(vis.ISO_DIRECTION) / np.linalg.norm(vis.ISO_DIRECTION)
    assert d @ iso >= 0  # from the side of the iso view
    assert abs(np.linalg.norm(d) - 1) < 1e-12 and abs(np.linalg.norm(up) - 1) < 1e-12 and abs(d @ up) < 1e-12
    world_up = np.array([0.0, 0.0, 1.0]) if abs(d[2]) < 0.9 else np.array([0.0, 1.0, 0.0])
    expected = world_up - (world_up @ d) * d
    np.testing.assert_allclose(up, expected / np.linalg.norm(expected), atol=1e-12)
    if normal == (0, 0, 1):  # a top view: +z eye, +y up
        np.testing.assert_allclose(d, [0, 0, 1], atol=1e-3)
        np.testing.assert_allclose(up, [0, 1, 0], atol=1e-3)


def test_camera_overrides_and_fit():
    pts, a, b, n = flat_cloud((0, 0, 1))
    d, up = vis.view_direction(pts, view="iso")
    np.testing.assert_allclose(d, np.array(vis.ISO_DIRECTION) / np.linalg.norm(vis.ISO_DIRECTION))
    d, up = vis.view_direction(pts, view=(0, -2, 0), up=(0, 1, 1))
    np.testing.assert_allclose(d, [0, -1, 0], atol=1e-12)
    np.testing.assert_allclose(up, [0, 0, 1], atol=1e-12)  # the given up, projected on the image plane
    d0, up0 = vis.view_direction(pts)
    d1, up1 = vis.view_direction(pts, azimuth=90)
    np.testing.assert_allclose(d1, np.cross(up0, d0), atol=1e-12)  # the eye moved to the image's right
    np.testing.assert_allclose(up1, up0, atol=1e-12)
    d2, up2 = vis.view_direction(pts, elevation=30)
    np.testing.assert_allclose(d2, np.cos(np.pi / 6) * d0 + 0.5 * up0, atol=1e-12)
    assert abs(d2 @ up2) < 1e-12
    # the fitted camera keeps every point in view, tight on one axis (6 % margin)
    for d, up in [(d0, up0), (d1, up1), (d2, up2)]:
        centre, eye = vis._fit_camera(pts, d, up, 40.0, 4 / 3)
        q = pts - eye
        depth, x, y = q @ -d, q @ np.cross(up, d), q @ up
        tan = np.tan(np.radians(20))
        fx, fy = np.abs(x / depth) / (tan * 4 / 3), np.abs(y / depth) / tan
        assert (depth > 0).all() and fx.max() <= 1 and fy.max() <= 1
        assert max(fx.max(), fy.max()) > 0.9
        assert np.linalg.norm(np.cross(centre - eye, d)) < 1e-9  # the eye looks along -d at the centre


# --------------------------------------------------------------------------------------
# rendering
# --------------------------------------------------------------------------------------
def test_render_shows_exactly_the_label_colours(renderer_ok, tmp_path):
    pts, lab = three_labels()
    img = vis.show(pts, lab, ["left", "middle", "right"], out=tmp_path / "v.png", width=320, height=240, legend=False)
    assert img.shape == (240, 320, 3) and img.dtype == np.uint8 and (tmp_path / "v.png").stat().st_size > 1000
    assert (img != 255).any(-1).mean() > 0.05  # not blank
    pal = vis.palette(12)
    counts = [pixels_of(img, c) for c in pal]
    assert all(c > 200 for c in counts[:3]) and sum(counts[3:]) == 0, counts  # exactly the 3 label colours
    from PIL import Image

    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "v.png").convert("RGB")), img)
    # with the legend: the box, swatches and text land in the top-left corner only
    leg = vis.show(pts, lab, ["left", "middle", "right"], out=tmp_path / "l.png", width=320, height=240)
    diff = (leg != img).any(-1)
    assert diff.any() and not diff[:, 160:].any() and not diff[80:].any()
    assert pixels_of(leg, pal[0]) > counts[0]


def test_pca_view_faces_a_flat_cloud(renderer_ok, tmp_path):
    """Seen face-on, a flat labelled rectangle fills the frame; edge-on it would be a line."""
    pts, a, b, n = flat_cloud((1, 2, 3))
    lab = (pts @ a > 0).astype(int) + 2 * (pts @ b > 0)
    img = vis.show(pts, lab, out=tmp_path / "f.png", width=200, height=150, legend=False, point_size=4)
    covered = (img != 255).any(-1)
    rows, cols = np.flatnonzero(covered.any(1)), np.flatnonzero(covered.any(0))
    assert covered.mean() > 0.2  # face-on (up is z projected, so the rectangle is tilted in the image)
    assert np.ptp(rows) > 0.85 * 150 or np.ptp(cols) > 0.85 * 200  # the camera fits it to the frame
    counts = [pixels_of(img, c) for c in vis.palette(4)]
    assert min(counts) > 0.2 * max(counts), counts  # four quadrants of similar size
    side = vis.show(pts, lab, out=tmp_path / "s.png", width=200, height=150, legend=False, point_size=4, view=tuple(a))
    assert (side != 255).any(-1).mean() < 0.5 * covered.mean()


def test_render_grid_and_edge_layers(renderer_ok, tmp_path):
    pts, lab = three_labels(400)
    grid, graph = gridify.gridify(pts, resolution=4, k=3, return_graph=True)
    p = graph.pos.numpy()
    small = dict(out=tmp_path / "g.png", width=320, height=240, legend=False)
    full = vis.show(p, lab, grid=grid, edges=graph, edge_nodes=3, **small)
    edge_cols = vis.edge_palette(3)
    assert all(pixels_of(full, c) > 30 for c in edge_cols), [pixels_of(full, c) for c in edge_cols]
    assert pixels_of(full, vis.EDGE_COLOR) == 0 and pixels_of(full, vis.edge_palette(4)[3]) == 0
    assert all(pixels_of(full, c) > 50 for c in vis.palette(3))  # the labels stay
    touched = vis.touched_nodes(p, 4)
    node_cols = u8(vis.grid_node_colors(grid.numpy().reshape(grid.shape[0], -1).T[touched], "norm"))
    assert sum(pixels_of(full, c / 255) for c in np.unique(node_cols, axis=0)) > 50
    every = vis.show(p, lab, grid=grid, edges=graph, edge_nodes="all", **small)
    assert pixels_of(every, vis.EDGE_COLOR) > 100 and pixels_of(every, edge_cols[0]) == 0
    only_points = vis.show(p, lab, grid=grid, edges=graph, layers=["points"], **small)
    assert pixels_of(only_points, vis.EDGE_COLOR) == 0 and all(pixels_of(only_points, c) == 0 for c in edge_cols)
    # the legend names the chosen nodes with their edge counts, in their colours
    leg = vis.show(
        p, lab, ["a", "b", "c"], grid=grid, edges=graph, edge_nodes=3, out=tmp_path / "l.png", width=320, height=240
    )
    assert all(pixels_of(leg[:120, :30], c) >= 12 for c in edge_cols)  # the line swatches


def test_bad_options_say_what_is_wrong(tmp_path, cloud_graph):
    pts, grid, graph = cloud_graph
    out = tmp_path / "x.png"

    def bad(message, **kw):
        with pytest.raises(ValueError, match=re.escape(message)):
            vis.show(pts, **{"out": out, **kw})

    bad("show: unknown layer(s) ['nodes']; layers are ['points', 'grid', 'edges']", layers=["nodes"])
    # the image is a PNG: another extension is refused before anything is rendered, not written as PNG bytes
    bad(
        "show: out " + str(tmp_path / "x.jpg") + ": unsupported extension '.jpg'; use one of ['.png']",
        out=tmp_path / "x.jpg",
    )
    with pytest.raises(ValueError, match=r"show_comparison: out .*x\.txt: unsupported extension '\.txt'"):
        vis.show_comparison(pts, np.zeros(len(pts), int), np.zeros(len(pts), int), out=tmp_path / "x.txt")
    assert not (tmp_path / "x.jpg").exists() and not (tmp_path / "x.txt").exists()
    bad(
        "show: layer(s) ['grid'] requested but not given (pass grid= / edges=; gridify show: a model with a grid, "
        "--layers points otherwise)",
        layers=["points", "grid"],
    )
    bad("show: labels must have shape [500] (one per point), got (10,)", labels=np.zeros(10, int))
    bad("show: grid_color must be one of ('norm', 'pca'), got 'hsv'", grid_color="hsv")
    bad("show: grid_nodes must be one of ('touched', 'all'), got 'some'", grid_nodes="some")
    msg = (
        "show: edge_nodes must be a positive integer (how many nodes), 'all', or a non-empty list of node "
        "indices >= 0, got "
    )
    for value in (0, "some", [], [-1], 2.5, True):
        bad(msg + repr(value), edge_nodes=value)
    bad("show: edge_nodes: node 343 does not exist (the nodes are 0..342)", edges=graph, edge_nodes=[5, 343])
    index = graph.edge_index.numpy()[:, graph.edge_index[1].numpy() != 7]
    bad("show: edge_nodes: node 7 has no edges", grid=grid, edges=index, edge_nodes=[7])
    bad("show: an edge index [2, E] needs grid= to place the grid nodes", edges=index)
    bad(
        "show: edges must be a BipartiteGraph, an [E, 2, 3] array of segments or a [2, E] integer edge index "
        "with E >= 1, got shape (4, 3)",
        edges=np.zeros((4, 3)),
    )
    bad("show: max_edges must be a positive integer, got 0", edges=graph, max_edges=0)
    bad("show: view must be one of ('pca', 'iso'), got 'top'", view="top")
    bad("show: view must be three finite numbers, not all zero, got (0, 0, 0)", view=(0, 0, 0))
    bad("show: up must be three finite numbers, not all zero, got (1, 2)", up=(1, 2))
    bad("show: up [0.0, 0.0, 1.0] is parallel to the view direction [0.0, 0.0, -1.0]", view=(0, 0, -3), up=(0, 0, 2))
    bad("show: elevation must be a number of degrees in (-90, 90), got 90", elevation=90)
    bad("show: azimuth must be a number of degrees in (-360, 360), got nan", azimuth=float("nan"))
    bad(
        "show: grid_bounds must be (lower, upper) with finite lower < upper, got (1, -1)",
        grid=grid,
        grid_bounds=(1, -1),
    )
    bad("show: width must be a positive integer, got 0", width=0)
    bad("show: point_size must be a positive finite number, got -1", point_size=-1)
    nan = pts.copy()
    nan[3, 1] = np.nan
    with pytest.raises(
        ValueError, match=re.escape("show: points contain NaN/Inf values (1 rows affected); first at row 3")
    ):
        vis.show(nan, out=out)
    with pytest.raises(
        ValueError,
        match=re.escape("view_direction: points must be a numeric array of shape [N, 3] with N >= 1, got shape (0, 3)"),
    ):
        vis.view_direction(np.zeros((0, 3)))
    with pytest.raises(ValueError, match=re.escape("touched_nodes: resolution must be an integer >= 2, got 1")):
        vis.touched_nodes(pts, 1)
    with pytest.raises(ValueError, match=re.escape("edge_subset: max_edges must be a positive integer, got -5")):
        vis.edge_subset(graph, max_edges=-5)
    assert not out.exists()


def test_window_without_display_says_what_to_do(monkeypatch):
    if not sys.platform.startswith("linux"):
        pytest.skip("the DISPLAY check is Linux-only")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(vis.RenderError, match="no display .* pass out='view.png'"):
        vis.show(np.random.rand(10, 3))


def test_cli_show_options(renderer_ok, tmp_path, capsys):
    f = tmp_path / "cloud.npy"
    np.save(f, lumpy_cloud(300).astype(np.float32))
    png = tmp_path / "v.png"
    base = ["show", str(f), "--out", str(png), "--width", "160", "--height", "120", "--resolution", "5", "--k", "3"]
    assert (
        cli.main(
            base
            + [
                "--layers",
                "points,grid,edges",
                "--edge-nodes",
                "2",
                "--grid-nodes",
                "all",
                "--view",
                "iso",
                "--elevation",
                "10",
            ]
        )
        == 0
    )
    assert "layers points, grid, edges" in capsys.readouterr().out
    from PIL import Image

    img = np.asarray(Image.open(png).convert("RGB"))
    assert all(pixels_of(img, c) > 5 for c in vis.edge_palette(2))
    assert cli.main(base + ["--layers", "edges", "--edge-node-ids", "62,0", "--up", "0,1,0"]) == 0
    img = np.asarray(Image.open(png).convert("RGB"))
    assert all(pixels_of(img, c) > 5 for c in vis.edge_palette(2))
    errors = {
        ("--edge-nodes", "many"): "--edge-nodes must be a positive integer or 'all', got 'many'",
        ("--edge-nodes", "0"): "show: edge_nodes must be a positive integer",
        ("--edge-node-ids", "1,x"): "--edge-node-ids must be comma-separated integers, got '1,x'",
        ("--edge-node-ids", "999"): "show: edge_nodes: node 999 does not exist (the nodes are 0..124)",
        ("--view", "1,2"): "--view must be three comma-separated numbers, got '1,2'",
        ("--up", "a,b,c"): "--up must be three comma-separated numbers, got 'a,b,c'",
        ("--elevation", "95"): "show: elevation must be a number of degrees in (-90, 90), got 95.0",
    }
    for (flag, value), message in errors.items():
        with pytest.raises(SystemExit, match=re.escape(f"gridify show: error: {message}")):
            cli.main(base + ["--layers", "points,edges", flag, value])


def test_render_a_real_scan(renderer_ok, shared_data, tmp_path):
    f = shared_data / "scans/mmdet3d_real_scans/tests/data/scannet/scannet_train_instance_data/scene0000_00_vert.npy"
    if not f.is_file():
        pytest.skip(f"ScanNet sample not found: {f}")
    from gridify.io import read_points

    cloud = read_points(f)
    assert len(cloud) == 50000 and cloud.colors is not None
    img = vis.show(f, out=tmp_path / "scan.png", width=320, height=240, legend=False)  # the scan's own colours
    assert (img != 255).any(-1).mean() > 0.1 and len(np.unique(img.reshape(-1, 3), axis=0)) > 500
    # labelled by height bands: exactly those 4 colours (plus the white background)
    z = cloud.points[:, 2]
    lab = np.digitize(z, np.quantile(z, [0.25, 0.5, 0.75]))
    img = vis.show(cloud.points, lab, out=tmp_path / "scan_lab.png", width=320, height=240, legend=False, point_size=2)
    counts = [pixels_of(img, c) for c in vis.palette(12)]
    assert all(c > 50 for c in counts[:4]) and sum(counts[4:]) == 0, counts
    # with its grid and the edges of 8 nodes: at most max_edges edges, each node's colour present
    pos = gridify.api.normalize_cloud(cloud.points)[0]
    grid, graph = gridify.gridify(pos, resolution=9, k=9, return_graph=True, normalize=False)
    ids, chosen = vis.edge_subset(graph)
    assert len(chosen) == 8 and len(ids) == vis.DEFAULT_MAX_EDGES
    img = vis.show(
        pos, grid=grid, edges=graph, out=tmp_path / "scan_edges.png", width=320, height=240, legend=False, point_size=1
    )
    assert all(pixels_of(img, c) > 10 for c in vis.edge_palette(8))
