"""Tests of gridify.vis: colours, layers, headless PNG rendering (Open3D OffscreenRenderer).

Rendering tests skip (with the reason) where Open3D's offscreen renderer cannot start, e.g.
without a Vulkan driver (apt-get install mesa-vulkan-drivers).
"""
import subprocess
import sys

import numpy as np
import pytest

import gridify
from gridify import vis


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


def test_import_stays_light():
    code = ("import sys, gridify, gridify.vis, gridify.api, gridify.cli; "
            "bad = [m for m in ('open3d', 'lightning', 'matplotlib', 'yaml', 'PIL') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_palette_and_grid_colors():
    pal = u8(vis.palette(40))
    assert len({tuple(c) for c in pal}) == 40 and tuple(u8(vis.EDGE_COLOR)) not in {tuple(c) for c in pal}
    assert (pal.min(1) < 230).all()  # none vanishes into the white background
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
    np.testing.assert_allclose(c[norm.argmin()], vis._VIRIDIS[0]) and np.testing.assert_allclose(
        c[norm.argmax()], vis._VIRIDIS[-1])
    with pytest.raises(ValueError, match="mode must be 'norm' or 'pca'"):
        vis.grid_node_colors(feats, "rgb")


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
    # with the legend: the swatches and text land in the top-left corner only
    leg = vis.show(pts, lab, ["left", "middle", "right"], out=tmp_path / "l.png", width=320, height=240)
    diff = (leg != img).any(-1)
    assert diff.any() and not diff[:, 160:].any() and not diff[80:].any()
    assert pixels_of(leg, pal[0]) > counts[0]


def test_render_grid_and_edge_layers(renderer_ok, tmp_path):
    pts, lab = three_labels(400)
    grid, graph = gridify.gridify(pts, resolution=4, k=3, return_graph=True)
    p = graph.pos.numpy()
    full = vis.show(p, lab, grid=grid, edges=graph, out=tmp_path / "g.png", width=320, height=240, legend=False)
    assert pixels_of(full, vis.EDGE_COLOR) > 100
    node_cols = u8(vis.grid_node_colors(grid, "norm"))
    assert sum(pixels_of(full, c / 255) for c in np.unique(node_cols, axis=0)) > 50
    only_points = vis.show(p, lab, grid=grid, edges=graph, layers=["points"], out=tmp_path / "p.png", width=320,
                           height=240, legend=False)
    assert pixels_of(only_points, vis.EDGE_COLOR) == 0
    with pytest.raises(ValueError, match=r"unknown layer\(s\) \['nodes'\]"):
        vis.show(p, lab, layers=["nodes"], out=tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"layer\(s\) \['grid'\] requested but not given"):
        vis.show(p, lab, layers=["points", "grid"], out=tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"labels must have shape \[400\]"):
        vis.show(p, lab[:10], out=tmp_path / "x.png")
    with pytest.raises(ValueError, match="grid_color must be 'norm' or 'pca'"):
        vis.show(p, grid_color="hsv", out=tmp_path / "x.png")


def test_window_without_display_says_what_to_do(monkeypatch):
    if not sys.platform.startswith("linux"):
        pytest.skip("the DISPLAY check is Linux-only")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(vis.RenderError, match="no display .* pass out='view.png'"):
        vis.show(np.random.rand(10, 3))


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
    img = vis.show(cloud.points, lab, out=tmp_path / "scan_lab.png", width=320, height=240, legend=False,
                   point_size=2)
    counts = [pixels_of(img, c) for c in vis.palette(12)]
    assert all(c > 50 for c in counts[:4]) and sum(counts[4:]) == 0, counts
