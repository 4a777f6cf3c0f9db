"""GridifiedSceneSegmenter: metric scene crops on a per-axis grid."""

import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F

from gridify.models import GridifiedSceneSegmenter, build_model
from gridify.models.scene import scene_box, scene_box_coordinates, scene_box_dense, scene_box_dense_scaled
from gridify.registry import MODELS

SMALL = dict(
    resolution=(8, 8, 4),
    hidden_channels=16,
    point_channels=8,
    depth=2,
    k=4,
    dropout=0.0,
    message_channels=16,
    pos_hidden_channels=16,
)


def _model(in_channels=2, num_classes=5, **kwargs):
    args = dict(SMALL)
    args.update(kwargs)
    torch.manual_seed(0)
    return GridifiedSceneSegmenter(in_channels, num_classes, **args)


def _room(n=400, seed=0, size=(6.0, 4.0, 2.5), offset=(10.0, -3.0, 0.5)):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 3, generator=g) * torch.tensor(size) + torch.tensor(offset)
    x = torch.randn(n, 2, generator=g)
    return pos, x


def test_registered_and_exported():
    assert MODELS.get("scene_segmenter") is GridifiedSceneSegmenter
    m = build_model("scene_segmenter", in_channels=3, num_classes=4)
    assert m.resolution == (32, 32, 8)


@pytest.mark.parametrize("backbone", ["unet", "resnet"])
def test_shapes_and_gradients(backbone):
    m = _model(backbone=backbone, kernel_size=3)
    pos, x = _room()
    batch = torch.zeros(len(pos), dtype=torch.long)
    out = m(pos, x, batch)
    assert out.shape == (400, 5) and bool(torch.isfinite(out).all())
    out.square().mean().backward()
    grads = [p.grad for p in m.parameters() if p.requires_grad]
    assert all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    # dense input
    dense = m(pos.view(2, 200, 3), x.view(2, 200, 2))
    assert dense.shape == (2, 200, 5)


def test_point_order_invariance():
    m = _model().eval()
    pos, x = _room()
    batch = torch.zeros(400, dtype=torch.long)
    perm = torch.randperm(400)
    with torch.no_grad():
        a, b = m(pos, x, batch), m(pos[perm], x[perm], batch)
    torch.testing.assert_close(b, a[perm], rtol=1e-4, atol=1e-5)


def test_batch_composition_invariance():
    m = _model().eval()
    p1, x1 = _room(300, seed=1)
    p2, x2 = _room(200, seed=2, size=(3.0, 3.0, 1.0), offset=(-50.0, 4.0, 0.0))
    with torch.no_grad():
        alone = m(p1, x1, torch.zeros(300, dtype=torch.long))
        both = m(
            torch.cat([p2, p1]),
            torch.cat([x2, x1]),
            torch.cat([torch.zeros(200, dtype=torch.long), torch.ones(300, dtype=torch.long)]),
        )
    torch.testing.assert_close(both[200:], alone, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("extent", [None, (8.0, 8.0, 3.0)])
def test_translated_crop_gives_the_same_logits(extent):
    m = _model(extent=extent).eval()
    pos, x = _room()
    shift = torch.tensor([128.0, -64.0, 2.0])  # exact in float32 for these magnitudes
    with torch.no_grad():
        a, b = m(pos, x), m(pos + shift, x)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_fixed_extent_clamps_far_points_and_keeps_metric_scale():
    pos = torch.tensor([[0.0, 0.0, 0.0], [2.0, 1.0, 0.5], [100.0, 1.0, 0.5]])
    batch = torch.zeros(3, dtype=torch.long)
    u = scene_box_coordinates(pos, batch, 1, (4.0, 4.0, 2.0))
    assert float(u.abs().max()) <= 1.0
    # centre x = 50: the first two points lie beyond the 4 m box and are clamped onto it
    assert u[0, 0] == -1.0 and u[2, 0] == 1.0
    m = _model(extent=(4.0, 4.0, 2.0)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fewer points than k
        with torch.no_grad():
            assert bool(torch.isfinite(m(pos, torch.zeros(3, 2))).all())


def test_box_per_cloud_maps_onto_the_whole_grid():
    pos, _ = _room()
    u = scene_box_coordinates(pos, torch.zeros(400, dtype=torch.long), 1)
    torch.testing.assert_close(u.amin(0), -torch.ones(3))
    torch.testing.assert_close(u.amax(0), torch.ones(3))


def test_trimmed_box_leaves_stray_points_out_and_clamps_them():
    pos, _ = _room(1000)
    pos[7, 2] = -30.0  # a stray return far below the floor (LiDAR multipath)
    batch = torch.zeros(1000, dtype=torch.long)
    plain = scene_box_coordinates(pos, batch, 1)
    trimmed = scene_box_coordinates(pos, batch, 1, None, 0.005)
    # the bounding box spends the z axis on the stray point; the trimmed box on the room
    assert float(plain[:, 2].std()) < 0.1 < 0.4 < float(trimmed[:, 2].std())
    assert trimmed[7, 2] == -1.0 and float(trimmed.abs().max()) == 1.0
    # m = floor(0.005 * 1000) = 5 points beyond each end of every axis, clamped onto it; the 6th defines the face
    for a in range(3):
        assert int((trimmed[:, a] <= -1 + 1e-6).sum()) == 6 and int((trimmed[:, a] >= 1 - 1e-6).sum()) == 6


def test_trimmed_box_dense_equals_flat_and_ignores_point_order():
    g = torch.Generator().manual_seed(3)
    clouds = torch.randn(3, 700, 3, generator=g) * torch.tensor([10.0, 10.0, 1.0])
    clouds[1, 9, 2] = 25.0
    batch = torch.arange(3).repeat_interleave(700)
    for trim in (0.0, 0.002, 0.01):
        flat = scene_box_coordinates(clouds.reshape(-1, 3), batch, 3, None, trim)
        torch.testing.assert_close(scene_box_dense(clouds, None, trim).reshape(-1, 3), flat, rtol=0, atol=0)
        perm = torch.randperm(700, generator=g)
        shuffled = scene_box_coordinates(clouds[:, perm].reshape(-1, 3), batch, 3, None, trim)
        torch.testing.assert_close(shuffled.view(3, 700, 3)[:, torch.argsort(perm)], flat.view(3, 700, 3))
    # the model: the same logits whatever the order of the points
    m = _model(box_trim=0.01).eval()
    pos, x = _room(300)
    perm = torch.randperm(300, generator=g)
    with torch.no_grad():
        torch.testing.assert_close(m(pos[perm], x[perm]), m(pos, x)[perm], rtol=1e-5, atol=1e-5)
    assert m.graph_builder().trim == 0.01


def test_scale_input_tells_the_model_how_many_metres_its_box_spans():
    """Each crop's own box maps a 6 m room and the same room scaled 3x onto the same u: without
    ``scale_input`` the model cannot tell them apart, with it the logits differ, and they still
    follow the points (translation and point order do not change the box size)."""
    pos, x = _room(300)
    plain, scaled = _model(extent=None).eval(), _model(extent=None, scale_input=True).eval()
    assert scaled.point_mlp[0].in_features == plain.point_mlp[0].in_features + 3
    centre = pos.mean(0)
    big = (pos - centre) * 3 + centre
    with torch.no_grad():
        torch.testing.assert_close(plain(big, x), plain(pos, x), rtol=1e-5, atol=1e-5)
        assert (scaled(big, x) - scaled(pos, x)).abs().max() > 1e-3
        perm = torch.randperm(300, generator=torch.Generator().manual_seed(1))
        moved = pos[perm] + torch.tensor([100.0, -50.0, 3.0])
        torch.testing.assert_close(scaled(moved, x[perm]), scaled(pos, x)[perm], rtol=1e-4, atol=1e-4)
    # the half extents are the box's, per cloud; dense and flat agree
    clouds = torch.stack([pos, big])
    u, half = scene_box(clouds.reshape(-1, 3), torch.arange(2).repeat_interleave(300), 2)
    torch.testing.assert_close(half[1], 3 * half[0])
    torch.testing.assert_close(half[0], (pos.amax(0) - pos.amin(0)) / 2)
    ud, hd = scene_box_dense_scaled(clouds, None)
    torch.testing.assert_close(ud.reshape(-1, 3), u, rtol=0, atol=0)
    torch.testing.assert_close(hd[:, 0], half)
    with pytest.raises(ValueError, match="scale_input must be True or False"):
        _model(scale_input=1)


def test_scale_input_batches_like_single_clouds():
    m = _model(extent=None, scale_input=True).eval()
    a, xa = _room(200, seed=1)
    b, xb = _room(300, seed=2, size=(30.0, 20.0, 4.0))
    with torch.no_grad():
        both = m(torch.cat([a, b]), torch.cat([xa, xb]), torch.arange(2).repeat_interleave(torch.tensor([200, 300])))
        torch.testing.assert_close(both, torch.cat([m(a, xa), m(b, xb)]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "pos",
    [
        torch.cat([torch.rand(100, 2) * 5, torch.full((100, 1), 1.5)], 1),  # flat floor
        torch.tensor([[3.0, -2.0, 1.0]]).repeat(7, 1),  # one point, repeated
        torch.tensor([[1e5, 2e5, 10.0]]),  # a single point far out
    ],
)
@pytest.mark.parametrize("scale_input", [False, True])
def test_degenerate_clouds_are_finite(pos, scale_input):
    m = _model(extent=None, scale_input=scale_input).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fewer points than k
        with torch.no_grad():
            out = m(pos, torch.zeros(len(pos), 2))
    assert out.shape == (len(pos), 5) and bool(torch.isfinite(out).all())
    u = scene_box_coordinates(pos, torch.zeros(len(pos), dtype=torch.long), 1)
    assert bool(torch.isfinite(u).all())


def test_no_features_and_graph_builder():
    m = _model(in_channels=0).eval()
    pos, _ = _room()
    batch = torch.arange(2).repeat_interleave(200)
    builder = pickle.loads(pickle.dumps(m.graph_builder()))
    graph = builder(pos, batch)
    with torch.no_grad():
        torch.testing.assert_close(m(pos, None, batch, graph=graph), m(pos, None, batch))
    with pytest.raises(ValueError, match="graph was built for"):
        m(pos[:100], None, batch[:100], graph=graph)


def test_tiny_overfit_lowers_the_loss():
    m = _model(dropout=0.0)
    pos, x = _room()
    y = (pos[:, 2] > pos[:, 2].median()).long() + 2 * (pos[:, 0] > pos[:, 0].median()).long()
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss = F.cross_entropy(m(pos, x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(resolution=(32, 32)), r"resolution must be an integer >= 2 or one per axis"),
        (dict(resolution=(32, 32, 1)), r"resolution\[2\] \(z\)"),
        (dict(resolution=(8, 8, 4), backbone="mrconv"), r"resolution=\(8, 8, 4\) is not cubic; backbone='mrconv'"),
        (dict(extent=(1.0, 2.0)), r"extent must be None, a positive number of metres or one per axis"),
        (dict(extent=(1.0, -2.0, 3.0)), r"extent\[1\] \(y\) must be a positive"),
        (dict(extent=(1.0, 2.0, float("inf"))), r"extent\[2\] \(z\)"),
        (dict(extent="big"), r"extent"),
        (dict(in_channels=-1), r"in_channels must be a non-negative integer"),
        (dict(box_trim=0.5), r"box_trim must be in \[0, 0.5\)"),
        (dict(box_trim=-0.1), r"box_trim"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, match):
    args = dict(in_channels=2, num_classes=5)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        GridifiedSceneSegmenter(args.pop("in_channels"), args.pop("num_classes"), **args)


@pytest.mark.parametrize(
    "extent, axis",
    [
        (1e-300, "0] \\(x"),
        (1e300, "0] \\(x"),
        ((40.0, 40.0, 1e-9), "2] \\(z"),
        ((40.0, 1e7, 4.0), "1] \\(y"),
        (10**400, "0] \\(x"),
    ],
)
def test_an_extent_that_collapses_an_axis_in_float32_is_refused_naming_the_range(extent, axis):
    """1e-300 m is 0 in float32 (a division by zero), 1e300 m infinite (every point at the box centre): both were
    accepted and gave meaningless logits."""
    with pytest.raises(ValueError, match=rf"^GridifiedSceneSegmenter: extent\[{axis}\) must be a "):
        GridifiedSceneSegmenter(2, 5, extent=extent)
    if not isinstance(extent, int):
        with pytest.raises(ValueError, match=r"in \[1e-06, 1e\+06\] \(a crop's box in float32"):
            GridifiedSceneSegmenter(2, 5, extent=extent)
    assert GridifiedSceneSegmenter(2, 5, extent=(1e-6, 1e6, 4.0)).extent == (1e-6, 1e6, 4.0)


def test_bad_inputs_name_the_argument():
    m = _model()
    pos, x = _room()
    bad = pos.clone()
    bad[17, 1] = float("nan")
    with pytest.raises(ValueError, match="pos.*row 17"):
        m(bad, x)
    with pytest.raises(ValueError, match="in_channels=2"):
        m(pos, torch.zeros(400, 3))
    xb = x.clone()
    xb[3, 0] = float("inf")
    with pytest.raises(ValueError, match="x.*row 3"):
        m(pos, xb)


@pytest.mark.parametrize("resolution, kernel_size", [(5, 3), ((8, 8, 4), "global"), ((8, 8, 4), 5)])
def test_ccnn_backbone_cubic_and_per_axis(resolution, kernel_size):
    m = _model(resolution=resolution, backbone="ccnn", kernel_size=kernel_size)
    pos, x = _room(200)
    out = m(pos, x)
    assert out.shape == (200, 5) and bool(torch.isfinite(out).all())
    out.square().mean().backward()


def test_fine_tuning_into_scale_input_starts_from_the_same_function():
    """``init_weights`` from a scene segmenter without ``scale_input`` into one with it: the 3 new input columns
    start at zero (the same logits), the rest is copied; a checkpoint that differs otherwise is still refused."""
    from gridify.checkpoint import CheckpointError, load_weights

    kwargs = dict(SMALL, extent=None)
    plain = _model(**kwargs).eval()
    payload = {
        "model_name": "scene_segmenter",
        "model_kwargs": dict(kwargs, in_channels=2, num_classes=5),
        "state_dict": {k: v.clone() for k, v in plain.state_dict().items()},
    }
    torch.manual_seed(7)
    wide = GridifiedSceneSegmenter(2, 5, scale_input=True, **kwargs).eval()
    load_weights(wide, payload, "init_weights plain.pt")
    pos, x = _room(300)
    with torch.no_grad():
        torch.testing.assert_close(wide(pos, x), plain(pos, x), rtol=1e-5, atol=1e-5)
    assert float(wide.point_mlp[0].weight.detach()[:, -3:].abs().max()) == 0.0
    assert payload["state_dict"]["point_mlp.0.weight"].shape[1] == 5  # the caller's payload is left as it was
    # the new columns train: a gradient reaches them
    wide.train()
    wide(pos, x).sum().backward()
    assert float(wide.point_mlp[0].weight.grad[:, -3:].abs().max()) > 0
    # another width is still a mismatch, named
    other = GridifiedSceneSegmenter(2, 5, scale_input=True, **dict(kwargs, point_channels=12))
    with pytest.raises(CheckpointError, match=r"init_weights plain\.pt: .*point_mlp"):
        load_weights(other, payload, "init_weights plain.pt")
