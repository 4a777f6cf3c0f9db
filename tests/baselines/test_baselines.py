import math

import pytest
import torch

from gridify.baselines import (
    PointCKConvBlock,
    PointCKConvClassifier,
    PointCKConvNet,
    PointCKConvSegmenter,
    PointNet2Classifier,
    PointNet2Segmenter,
    PointSepCKConv,
    knn_interpolate,
    knn_neighbourhoods,
)
from gridify.models import build_model
from gridify.registry import MODELS

from tests.helpers import ragged_batch

CK = dict(hidden_channels=8, depth=2, k=8, kernel_hidden=8)


def _sphere_batch(sizes, seed=0):
    pos, batch = ragged_batch(sizes, seed=seed)
    pos = 0.9 * pos / pos.norm(dim=1, keepdim=True)
    return pos, batch


def _classifiers():
    return [lambda: PointCKConvClassifier(3, 5, **CK), lambda: PointNet2Classifier(3, 5)]


def _segmenters(num_categories):
    return [
        lambda: PointCKConvSegmenter(3, 6, num_categories=num_categories, **CK),
        lambda: PointNet2Segmenter(3, 6, num_categories=num_categories),
    ]


def _wide(n=200, spread=300.0, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(n, 3, generator=g) * 2 - 1) * spread).to(dtype)


def _assert_same(a, b):
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------- registry and shapes
def test_models_are_registered():
    for name in ("point_ckconv_classifier", "point_ckconv_segmenter", "pointnet2_classifier", "pointnet2_segmenter"):
        assert name in MODELS
    assert isinstance(build_model("point_ckconv_classifier", in_channels=6, num_classes=3, **CK), PointCKConvClassifier)
    assert PointCKConvNet is PointCKConvClassifier


@pytest.mark.parametrize("make", _classifiers())
def test_classifier_shapes_with_and_without_features(make):
    model = make()
    pos, batch = _sphere_batch([40, 64, 25])
    assert model(pos, None, batch).shape == (3, 5)
    assert model(pos.view(1, 129, 3)).shape == (1, 5)  # dense input


@pytest.mark.parametrize("num_categories", [0, 4])
@pytest.mark.parametrize("which", [0, 1])
def test_segmenter_shapes(num_categories, which):
    model = _segmenters(num_categories)[which]()
    pos, batch = _sphere_batch([40, 64])
    cat = torch.tensor([1, 3]) if num_categories else None
    out = model(pos, torch.cat([pos, pos], 1)[:, :3], batch, category=cat)
    assert out.shape == (104, 6)
    dense = model(pos[:80].view(2, 40, 3), category=cat)
    assert dense.shape == (2, 40, 6)


# ----------------------------------------------------------------------------- invariances
@pytest.mark.parametrize("make", _classifiers())
def test_classifier_point_order_invariance(make):
    model = make()
    pos, batch = _sphere_batch([50, 70], seed=1)
    model(pos, None, batch)  # CCNN init on the first pass
    model.eval()
    perm = torch.cat([torch.randperm(50), 50 + torch.randperm(70)])
    with torch.no_grad():
        a = model(pos, None, batch)
        b = model(pos[perm], None, batch)
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("make", _classifiers())
def test_classifier_batch_composition_invariance(make):
    model = make()
    pos, batch = _sphere_batch([50, 70, 33], seed=2)
    model(pos, None, batch)
    model.eval()
    with torch.no_grad():
        joint = model(pos, None, batch)
        alone = model(pos[50:120], None, None)
    torch.testing.assert_close(joint[1:2], alone, atol=1e-4, rtol=1e-4)


def test_segmenter_batch_composition_invariance():
    for model in (PointCKConvSegmenter(3, 4, **CK), PointNet2Segmenter(3, 4)):
        pos, batch = _sphere_batch([50, 70], seed=3)
        model(pos, None, batch)
        model.eval()
        with torch.no_grad():
            joint = model(pos, None, batch)
            alone = model(pos[50:], None, None)
        torch.testing.assert_close(joint[50:], alone, atol=1e-4, rtol=1e-4)


# ----------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("make", _classifiers())
def test_gradients_reach_every_trainable_layer(make):
    model = make()
    pos, batch = _sphere_batch([30, 40], seed=4)
    model(pos, None, batch).square().sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
    assert sum(float(p.grad.abs().sum()) for p in model.parameters()) > 0


def test_checkpointed_chunks_give_the_same_output_and_gradients():
    pos, batch = _sphere_batch([60, 50], seed=5)
    torch.manual_seed(0)
    a = PointCKConvClassifier(3, 4, chunk_size=16, checkpoint=True, dropout=0.0, **CK)
    torch.manual_seed(0)
    b = PointCKConvClassifier(3, 4, chunk_size=10**6, checkpoint=False, dropout=0.0, **CK)
    ya, yb = a(pos, None, batch), b(pos, None, batch)
    torch.testing.assert_close(ya, yb, atol=1e-5, rtol=1e-5)
    ya.sum().backward()
    yb.sum().backward()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, atol=1e-5, rtol=1e-4, msg=name)


# ----------------------------------------------------------------------------- point CCNN specifics
def test_residual_block_is_x_plus_f_x():
    block = PointCKConvBlock(8)
    pos, batch = _sphere_batch([40], seed=6)
    nbr, valid = knn_neighbourhoods(pos, batch, 8)
    x = torch.randn(40, 8)
    y = block(x, pos, nbr, valid)
    torch.testing.assert_close(y, x + block.residual(x, pos, nbr, valid))
    assert not torch.allclose(y, 2 * block.residual(x, pos, nbr, valid))
    with torch.no_grad():
        block.out.weight.zero_()
        block.out.bias.zero_()
    torch.testing.assert_close(block(x, pos, nbr, valid), x)  # F's last layer zero -> identity


def test_ccnn_init_keeps_activations_order_one():
    torch.manual_seed(1)
    pos, batch = _sphere_batch([300, 300], seed=7)
    for k in (8, 64):
        nbr, valid = knn_neighbourhoods(pos, batch, k)
        conv = PointSepCKConv(16, 16)
        with torch.no_grad():
            conv.pointwise.weight.copy_(torch.eye(16))  # look at the depthwise sum itself
            z = conv(torch.randn(600, 16), pos, nbr, valid)
        assert bool(conv.initialized)
        assert 0.7 < float(z.std()) < 1.4, (k, float(z.std()))
        raw = PointSepCKConv(16, 16, kernel_init="none")
        with torch.no_grad():
            raw.pointwise.weight.copy_(torch.eye(16))
            zr = raw(torch.randn(600, 16), pos, nbr, valid)
        if k == 64:  # without the CCNN rescaling the sum grows with K
            assert float(zr.std()) > 2 * float(z.std())
    model = PointCKConvClassifier(3, 10, k=32)
    pos, batch = _sphere_batch([256] * 4, seed=8)
    with torch.no_grad():
        logits = model(pos, None, batch)
    assert float(logits.abs().max()) < 10


def test_neighbour_table_pads_small_clouds():
    pos, batch = _sphere_batch([3, 10], seed=9)
    nbr, valid = knn_neighbourhoods(pos, batch, 5)
    assert nbr.shape == (13, 5) and valid is not None
    assert valid[:3].sum(1).tolist() == [3, 3, 3]
    assert bool(valid[3:].all())
    assert torch.equal(batch[nbr[valid]], batch.unsqueeze(1).expand(-1, 5)[valid])


def test_large_cloud_runs_in_chunks_without_quadratic_memory():
    g = torch.Generator().manual_seed(0)
    pos = torch.rand(20000, 3, generator=g) * 1.8 - 0.9
    model = PointCKConvClassifier(3, 4, hidden_channels=8, depth=1, k=8, kernel_hidden=8, chunk_size=2048)
    model.eval()
    with torch.no_grad():
        out = model(pos, None, None)  # a 20k x 20k table would be 1.6 GB
    assert out.shape == (1, 4) and torch.isfinite(out).all()


def test_knn_interpolate_matches_manual_weights():
    src = torch.tensor([[0.0, 0, 0], [1.0, 0, 0], [5.0, 0, 0]])
    val = torch.tensor([[1.0], [3.0], [100.0]])
    tgt = torch.tensor([[0.25, 0, 0]])
    out = knn_interpolate(val, src, tgt, torch.zeros(3, dtype=torch.long), torch.zeros(1, dtype=torch.long), k=2)
    w0, w1 = 1 / 0.25**2, 1 / 0.75**2
    assert math.isclose(float(out), (w0 * 1 + w1 * 3) / (w0 + w1), rel_tol=1e-5)


# ----------------------------------------------------------------------------- errors
def test_bad_inputs_give_clear_errors():
    pos, batch = _sphere_batch([20, 20])
    ck = PointCKConvClassifier(6, 3, **CK)
    with pytest.raises(ValueError, match="in_channels=6 \\(x=None uses the 3 coordinates\\)"):
        ck(pos, None, batch)
    with pytest.raises(ValueError, match="x must have shape \\[40, F\\]"):
        ck(pos, torch.rand(39, 6), batch)
    with pytest.raises(ValueError, match="batch must be sorted"):
        PointNet2Classifier(3, 2)(pos, None, batch.flip(0))
    seg = PointCKConvSegmenter(3, 4, num_categories=2, **CK)
    with pytest.raises(ValueError, match="category .* is required"):
        seg(pos, None, batch)
    with pytest.raises(ValueError, match="category must hold integers in \\[0, 2\\)"):
        seg(pos, None, batch, category=torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="got category but the model was built with num_categories=0"):
        PointNet2Segmenter(3, 4)(pos, None, batch, category=torch.tensor([0, 1]))


@pytest.mark.parametrize(
    "ctor, kwargs, match",
    [
        (PointCKConvClassifier, dict(k=0), "k must be an integer >= 1"),
        (PointCKConvClassifier, dict(dropout=1.0), "dropout must be a probability"),
        (PointCKConvClassifier, dict(radius=-1.0), "radius must be a positive finite number"),
        (PointCKConvClassifier, dict(kernel_net="nope"), "unknown kernel network 'nope'"),
        (PointNet2Classifier, dict(ratios=(0.5,)), "ratios and radii must have two entries"),
        (PointNet2Classifier, dict(radii=(0.2, 0.0)), "r must be a positive finite number"),
        (PointNet2Segmenter, dict(num_categories=-1), "num_categories must be an integer >= 0"),
    ],
)
def test_bad_constructor_arguments(ctor, kwargs, match):
    with pytest.raises((ValueError, KeyError), match=match):
        ctor(3, 4, **kwargs)


# ----------------------------------------------------------------------------- tiny fits
def _two_shapes(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(2 * n, 3, generator=g)
    d = d / d.norm(dim=1, keepdim=True)
    sphere = 0.8 * d[:n]
    cube = 0.8 * d[n:] / d[n:].abs().amax(1, keepdim=True)
    flat = cube * torch.tensor([1.0, 1.0, 0.2])
    pos = torch.cat([sphere, flat])
    return pos, torch.arange(2).repeat_interleave(n), torch.tensor([0, 1])


@pytest.mark.parametrize(
    "make", [lambda: PointCKConvClassifier(3, 2, **CK), lambda: PointNet2Classifier(3, 2, dropout=0.0)]
)
def test_tiny_overfit(make):
    torch.manual_seed(0)
    model = make()
    pos, batch, y = _two_shapes()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    first = None
    for _ in range(40):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(pos, None, batch), y)
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
    assert loss.item() < 0.2 * first
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(pos, None, batch).argmax(1), y)


def test_knn_interpolate_of_a_wide_half_precision_cloud():
    p = _wide(n=80)
    x = torch.randn(80, 2).half()
    out = knn_interpolate(x, p, p[:10] + 1)
    ref = knn_interpolate(x.double(), p.double(), p[:10].double() + 1)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2)


def test_pointnet2_half_precision_start_point_on_an_unnormalized_cloud():
    torch.manual_seed(0)
    m = PointNet2Classifier(3, 2, radii=(20.0, 40.0)).eval()
    pos = (100 + torch.rand(2000, 3) * 30).half()  # a float16 centroid sum overflows (2000 x 115 > 65504)
    batch = torch.zeros(2000, dtype=torch.long)
    # the eval-mode start point is the point farthest from the centroid, in float16 as in float64
    _, ref, _ = m.double().sa1(pos.double(), pos.double(), batch, 1)
    _, out, _ = m.half().sa1(pos, pos, batch, 1)
    assert torch.equal(out.double(), ref)
    assert torch.isfinite(m(pos)).all()


def test_first_forward_of_point_sepckconv_is_all_or_nothing(monkeypatch):
    torch.manual_seed(0)
    conv = PointSepCKConv(2, 2)
    weights = {k: v.clone() for k, v in conv.state_dict().items()}
    nbr = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0]])
    monkeypatch.setattr(conv, "_chunk", lambda *a: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        conv(torch.randn(4, 2), torch.rand(4, 3), nbr)
    assert not bool(conv.initialized)
    _assert_same(weights, conv.state_dict())
