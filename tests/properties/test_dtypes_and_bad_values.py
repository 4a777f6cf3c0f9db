"""Property tests (hypothesis) of three input contracts: precision in every dtype, NaN/Inf, size arguments.

* Precision: every public op and module in float16, bfloat16, float32 and float64 agrees with
  a float64 computation on the same (rounded) inputs, for clouds with the spreads each dtype can
  hold (float16 up to hundreds of units, float32 at 1e-20 and 1e20, float64 at 1e-160 and 1e160).
* NaN/Inf: a NaN or Inf injected into any floating tensor argument of a public entry raises a
  ``ValueError`` that names that argument.
* Sizes: every index/size argument drawn from negative, zero, boundary and huge values (and
  floats, bools) gives a result or a ``ValueError`` (``CheckpointError`` for checkpoint
  arguments) - never another exception, and never a huge allocation (the process's peak memory
  stays bounded under ``GRIDIFY_MAX_ALLOC_BYTES``).
"""

import os
import resource
import warnings

import numpy as np
import pytest
import torch

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gridify.api import Predictor  # noqa: E402
from gridify.backbones import CCNN, MRConvNet, ResNet3d, UNet3d  # noqa: E402
from gridify.baselines import PointCKConvClassifier, PointNet2Classifier, knn_interpolate  # noqa: E402
from gridify.checkpoint import CheckpointError, build_model_from_checkpoint  # noqa: E402
from gridify.metrics import MeanClassAccuracy, OverallAccuracy  # noqa: E402
from gridify.models import GridifiedClassifier, GridifiedSegmenter, TemporalGridifiedClassifier  # noqa: E402
from gridify.nn import (
    CfC,
    ChannelLayerNorm,
    Degridification,
    Gridification,
    MAGNet,
    MRConv3d,  # noqa: E402
    RandomFourierField,
    RegularGrid,
    SepFlexConv3d,
    SIRENField,
    bilateral_knn,
)
from gridify.ops import fps, grid_knn, grid_positions, knn, knn_reference, radius, scatter  # noqa: E402
from gridify.ops import scatter_reference  # noqa: E402
from gridify.transforms import FixedPoints, RandomJitter  # noqa: E402

PROPS = settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
#: spreads of coordinates each dtype holds without overflowing its own range
SPREADS = {
    torch.float16: (1e-2, 1.0, 300.0),
    torch.bfloat16: (1e-20, 1.0, 300.0, 1e20),
    torch.float32: (1e-20, 1.0, 1e20),
    torch.float64: (1e-160, 1.0, 1e160),
}


@st.composite
def clouds(draw, max_n=24):
    """``(points [N, 3] rounded to dtype, dtype, spread)``: random or lattice clouds."""
    dtype = draw(st.sampled_from(DTYPES))
    spread = draw(st.sampled_from(SPREADS[dtype]))
    n = draw(st.integers(1, max_n))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    pts = rng.uniform(-1, 1, (n, 3)) if draw(st.booleans()) else rng.integers(-3, 4, (n, 3)) / 3.0
    return torch.as_tensor(pts * spread, dtype=torch.float64).to(dtype), dtype, spread


def _d64(x, y, rows, cols, spread=1.0):
    """Squared distances in float64, in units of ``spread`` (no overflow at 1e160)."""
    x, y = x.double() / spread, y.double() / spread
    return (y[rows] - x[cols]).pow(2).sum(-1)


# ------------------------------------------------------------------------------------------
# precision: ops in four dtypes against float64
# ------------------------------------------------------------------------------------------
@PROPS
@given(c=clouds(), k=st.integers(1, 6), backend=st.sampled_from(["torch", "kdtree"]))
def test_knn_in_any_dtype_finds_the_float64_neighbours(c, k, backend):
    x, dtype, spread = c
    out = knn(x, x, k, backend=backend)
    ref = knn_reference(x, x, k)
    assert torch.equal(out[0], ref[0])
    got, want = _d64(x, x, *out, spread), _d64(x, x, *ref, spread)
    for i in range(x.size(0)):
        g, w = got[out[0] == i].sort().values, want[ref[0] == i].sort().values
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


@PROPS
@given(c=clouds(max_n=30), ratio=st.sampled_from([0.25, 0.5, 1.0]))
def test_fps_in_any_dtype_is_greedy_in_float64(c, ratio):
    x, dtype, spread = c
    idx = fps(x, ratio=ratio, random_start=False)
    p = x.double() / spread
    mind = torch.full((x.size(0),), float("inf"), dtype=torch.float64)
    for t in range(1, idx.numel()):  # each pick is (up to one rounding) the farthest from the picks before it
        mind = torch.minimum(mind, (p - p[idx[t - 1]]).pow(2).sum(-1))
        assert float(mind[idx[t]]) >= float(mind.max()) * (1 - 1e-5) - 1e-12


@PROPS
@given(c=clouds(), rel=st.sampled_from([0.1, 0.5, 1.5]), backend=st.sampled_from(["torch", "kdtree"]))
def test_radius_in_any_dtype_agrees_with_float64(c, rel, backend):
    x, dtype, spread = c
    r = rel * spread
    out = radius(x, x, r, max_num_neighbors=64, backend=backend)
    d = _d64(x, x, *out, spread)
    assert bool((d <= rel**2 * (1 + 1e-5)).all())
    full = torch.cdist(x.double() / spread, x.double() / spread).pow(2)
    inside = int((full <= rel**2 * (1 - 1e-5)).sum())
    assert out.size(1) >= inside  # no pair clearly inside the ball is lost


@PROPS
@given(c=clouds(), R=st.integers(2, 5), k=st.integers(1, 8))
def test_grid_knn_in_any_dtype_is_exact(c, R, k):
    x, dtype, spread = c
    k = min(k, R**3)
    out = grid_knn(x, k, R, -spread, spread)
    nodes = grid_positions(R, -1.0, 1.0, dtype=torch.float64)
    d = (x.double()[:, None] / spread - nodes[None]).pow(2).sum(-1)
    torch.testing.assert_close(
        d.gather(1, out[1].view(-1, k)).sort(1).values, d.sort(1).values[:, :k], rtol=1e-5, atol=1e-6
    )


@PROPS
@given(
    n=st.integers(0, 300),
    dim_size=st.integers(1, 6),
    dtype=st.sampled_from(DTYPES),
    reduce=st.sampled_from(["sum", "mean", "max", "min"]),
    seed=st.integers(0, 999),
)
def test_scatter_in_any_dtype_agrees_with_float64(n, dim_size, dtype, reduce, seed):
    g = torch.Generator().manual_seed(seed)
    src = (torch.rand(n, 2, generator=g) * 100).to(dtype)
    index = torch.randint(0, dim_size, (n,), generator=g)
    out = scatter(src, index, dim_size, reduce)
    ref = scatter_reference(src.double(), index, dim_size, reduce)
    eps = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-6, torch.float64: 1e-12}[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), ref, rtol=eps, atol=eps * 100)  # one rounding of the result


# ------------------------------------------------------------------------------------------
# precision: modules in four dtypes against their float64 copy
# ------------------------------------------------------------------------------------------
def _grid_input(seed, c=4, r=5):
    return torch.randn(2, c, r, r, r, generator=torch.Generator().manual_seed(seed))


def _points(seed, b=2, n=40):
    return torch.rand(b, n, 3, generator=torch.Generator().manual_seed(seed)) * 1.6 - 0.8


MODULES = {  # name: (factory, input maker, tolerance factor)
    "RandomFourierField": (lambda: RandomFourierField(3, 8, omega0=0.5), lambda s: (_points(s)[0] * 0.5,), 1),
    "SIRENField": (lambda: SIRENField(3, 8), lambda s: (_points(s)[0],), 1),
    "MAGNet": (lambda: MAGNet(4), lambda s: (_points(s)[0],), 1),
    "ChannelLayerNorm": (lambda: ChannelLayerNorm(4), lambda s: (_grid_input(s),), 1),
    "SepFlexConv3d": (lambda: SepFlexConv3d(4, 4, kernel_size=3, base_resolution=5), lambda s: (_grid_input(s),), 2),
    "MRConv3d": (lambda: MRConv3d(4).eval(), lambda s: (_grid_input(s),), 2),
    "CCNN": (lambda: CCNN(4, 4, hidden_channels=8, depth=1, kernel_size=3).eval(), lambda s: (_grid_input(s),), 4),
    "ResNet3d": (
        lambda: ResNet3d(4, 4, hidden_channels=8, depth=1, kernel_size=3).eval(),
        lambda s: (_grid_input(s),),
        4,
    ),
    "UNet3d": (lambda: UNet3d(4, 4, hidden_channels=8, depth=2, kernel_size=3).eval(), lambda s: (_grid_input(s),), 4),
    "MRConvNet": (lambda: MRConvNet(4, 4, hidden_channels=8, depth=1).eval(), lambda s: (_grid_input(s),), 4),
    "Gridification": (lambda: Gridification(3, 8, 4, k=4).eval(), lambda s: (_points(s),), 2),
    "CfC": (lambda: CfC(3, 8), lambda s: (_points(s),), 2),
    "GridifiedClassifier": (
        lambda: GridifiedClassifier(3, 4, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3).eval(),
        lambda s: (_points(s),),
        8,
    ),
    "GridifiedSegmenter": (
        lambda: GridifiedSegmenter(
            3, 4, resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3, point_channels=4
        ).eval(),
        lambda s: (_points(s),),
        8,
    ),
    "TemporalGridifiedClassifier": (
        lambda: TemporalGridifiedClassifier(3, 2, resolution=4, k=4, hidden_channels=8, depth=1).eval(),
        lambda s: (_points(s, n=20).reshape(1, 2, 20, 3), torch.tensor([[1.7e9, 1.7e9 + 0.25]], dtype=torch.float64)),
        8,
    ),
    "PointNet2Classifier": (lambda: PointNet2Classifier(3, 4).eval(), lambda s: (_points(s),), 8),
    "PointCKConvClassifier": (
        lambda: PointCKConvClassifier(3, 4, hidden_channels=8, depth=1, k=8).eval(),
        lambda s: (_points(s),),
        8,
    ),
}
#: relative error of one float rounding, times the tolerance factor of each module
REL = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 1e-5, torch.float64: 1e-12}


def _first(out):
    return out.logits if hasattr(out, "logits") else out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("name", sorted(MODULES))
@settings(PROPS, max_examples=3)
@given(dtype=st.sampled_from(DTYPES), seed=st.integers(0, 99))
def test_module_in_any_dtype_agrees_with_float64(name, dtype, seed):
    make, inputs, factor = MODULES[name]
    torch.manual_seed(seed)
    module = make()
    args = inputs(seed)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = _first(module.double()(*(a.double() if a.dtype != torch.float64 else a for a in args)))
        out = _first(module.to(dtype)(*(a.to(dtype) if a.dtype == torch.float32 else a for a in args)))
    assert out.dtype == dtype and torch.isfinite(out).all()
    err = float((out.double() - ref).norm() / ref.norm().clamp_min(1e-30))
    assert err <= REL[dtype] * factor * 10, f"{name} in {dtype}: relative error {err:.3g}"


# ------------------------------------------------------------------------------------------
# NaN/Inf injected into each floating tensor argument in turn
# ------------------------------------------------------------------------------------------
def _pos(n=24, seed=0):
    return torch.rand(n, 3, generator=torch.Generator().manual_seed(seed)) * 1.6 - 0.8


def _degrid_args():
    torch.manual_seed(0)
    grid, graph = Gridification(3, 4, 3, k=3)(_pos(), return_graph=True)
    return {"grid": grid.detach(), "graph": graph}


ENTRIES = {  # name: (call, arguments, which of them are floating tensors)
    "knn": (lambda a: knn(a["x"], a["y"], 3), lambda: {"x": _pos(), "y": _pos(5, 1)}),
    "grid_knn": (lambda a: grid_knn(a["pos"], 3, 3), lambda: {"pos": _pos()}),
    "fps": (lambda a: fps(a["pos"]), lambda: {"pos": _pos()}),
    "radius": (lambda a: radius(a["x"], a["y"], 0.5), lambda: {"x": _pos(), "y": _pos(5, 1)}),
    "scatter": (lambda a: scatter(a["src"], torch.zeros(6, dtype=torch.long)), lambda: {"src": torch.rand(6, 2)}),
    "bilateral_knn": (lambda a: bilateral_knn(a["pos"], RegularGrid(3), 3), lambda: {"pos": _pos()}),
    "knn_interpolate": (
        lambda a: knn_interpolate(a["x"], a["pos_x"], a["pos_y"]),
        lambda: {"x": torch.rand(24, 2), "pos_x": _pos(), "pos_y": _pos(5, 1)},
    ),
    "Gridification": (
        lambda a: Gridification(3, 4, 3, k=3)(a["pos"], a["x"]),
        lambda: {"pos": _pos(), "x": torch.rand(24, 3)},
    ),
    "Degridification": (lambda a: Degridification(4, 2)(a["grid"], a["graph"]), _degrid_args),
    "RandomFourierField": (lambda a: RandomFourierField(3, 8)(a["offset"]), lambda: {"offset": _pos()}),
    "MAGNet": (lambda a: MAGNet(2)(a["coords"]), lambda: {"coords": _pos()}),
    "SepFlexConv3d": (lambda a: SepFlexConv3d(4, 4, kernel_size=3)(a["x"]), lambda: {"x": _grid_input(0)}),
    "MRConv3d": (lambda a: MRConv3d(4)(a["x"]), lambda: {"x": _grid_input(0)}),
    "ChannelLayerNorm": (lambda a: ChannelLayerNorm(4)(a["x"]), lambda: {"x": _grid_input(0)}),
    "CCNN": (lambda a: CCNN(4, 4, hidden_channels=4, depth=1, kernel_size=3)(a["x"]), lambda: {"x": _grid_input(0)}),
    "UNet3d": (
        lambda a: UNet3d(4, 4, hidden_channels=4, depth=2, kernel_size=3)(a["x"]),
        lambda: {"x": _grid_input(0)},
    ),
    "CfC": (
        lambda a: CfC(3, 4)(a["input"], a["timespans"], hx=a["hx"]),
        lambda: {"input": torch.rand(2, 4, 3), "timespans": torch.rand(2, 4), "hx": torch.rand(2, 4)},
    ),
    "GridifiedClassifier": (
        lambda a: GridifiedClassifier(3, 2, resolution=3, k=3, hidden_channels=4, depth=1, kernel_size=3)(
            a["pos"], a["x"]
        ),
        lambda: {"pos": _pos(), "x": torch.rand(24, 3)},
    ),
    "TemporalGridifiedClassifier": (
        lambda a: TemporalGridifiedClassifier(3, 2, resolution=3, k=3, hidden_channels=4, depth=1)(
            a["pos"], a["times"], x=a["x"]
        ),
        lambda: {
            "pos": _pos(32).reshape(1, 2, 16, 3),
            "times": torch.tensor([[0.0, 1.0]]),
            "x": torch.rand(1, 2, 16, 3),
        },
    ),
    "PointNet2Classifier": (
        lambda a: PointNet2Classifier(3, 2)(a["pos"], a["x"]),
        lambda: {"pos": _pos(), "x": torch.rand(24, 3)},
    ),
    "PointCKConvClassifier": (
        lambda a: PointCKConvClassifier(3, 2, hidden_channels=4, depth=1, k=4)(a["pos"], a["x"]),
        lambda: {"pos": _pos(), "x": torch.rand(24, 3)},
    ),
    "OverallAccuracy": (
        lambda a: OverallAccuracy().update(a["preds"], torch.zeros(4, dtype=torch.long)),
        lambda: {"preds": torch.rand(4, 3)},
    ),
    "Predictor.predict": (
        lambda a: Predictor(
            GridifiedClassifier(3, 2, resolution=3, k=3, hidden_channels=4, depth=1, kernel_size=3),
            task="classification",
            class_names=["a", "b"],
            num_points=24,
            in_channels=3,
        ).predict(a["points"].numpy()),
        lambda: {"points": _pos()},
    ),
}


@pytest.mark.parametrize("name", sorted(ENTRIES))
@settings(PROPS, max_examples=6)
@given(data=st.data())
def test_nan_or_inf_in_any_tensor_argument_is_named(name, data):
    call, make = ENTRIES[name]
    args = make()
    floating = sorted(k for k, v in args.items() if isinstance(v, torch.Tensor) and v.is_floating_point())
    arg = data.draw(st.sampled_from(floating))
    t = args[arg].clone(memory_format=torch.contiguous_format)
    flat = t.view(-1)
    flat[data.draw(st.integers(0, flat.numel() - 1))] = data.draw(
        st.sampled_from([float("nan"), float("inf"), -float("inf")])
    )
    args[arg] = t
    with pytest.raises(ValueError, match=rf"\b{arg}s?\b.*(NaN|Inf)"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        call(args)


# ------------------------------------------------------------------------------------------
# index and size arguments: a result or a ValueError, never a torch error or a huge allocation
# ------------------------------------------------------------------------------------------
SIZES = [-(2**63), -(10**12), -1, 0, 1, 2, 3, 5, 23, 24, 25, 10**12, 2**62, 2**63, 2**100, 2.5, True]
SIZE_ENTRIES = {
    "scatter.dim_size": lambda v: scatter(torch.rand(6, 2), torch.arange(6) % 3, v),
    "scatter.index": lambda v: scatter(
        torch.rand(2, 2), torch.tensor([0, v]) if isinstance(v, int) and abs(v) < 2**63 else torch.tensor([0, 1]), None
    ),
    "knn.k": lambda v: knn(_pos(), _pos(5, 1), v),
    "grid_knn.k": lambda v: grid_knn(_pos(), v, 3),
    "grid_knn.resolution": lambda v: grid_knn(_pos(), 2, v),
    "radius.max_num_neighbors": lambda v: radius(_pos(), _pos(5, 1), 0.5, max_num_neighbors=v),
    "fps.start": lambda v: fps(_pos(), start=torch.tensor([v]) if isinstance(v, int) and abs(v) < 2**63 else None),
    "grid_positions.resolution": lambda v: grid_positions(v),
    "RegularGrid.positions": lambda v: RegularGrid(v).positions(),
    "Gridification.resolution": lambda v: Gridification(3, 4, v, k=2)(_pos()),
    "Gridification.k": lambda v: Gridification(3, 4, 3, k=v)(_pos()),
    "Gridification.hidden_channels": lambda v: Gridification(3, 4, 3, k=2, hidden_channels=v)(_pos()),
    "Gridification.num_clouds": lambda v: Gridification(3, 4, 3, k=2)(_pos(), num_clouds=v),
    "GridifiedClassifier.depth": lambda v: GridifiedClassifier(
        3, 2, resolution=3, k=2, hidden_channels=4, depth=v, kernel_size=3
    ),
    "GridifiedClassifier.kernel_size": lambda v: GridifiedClassifier(
        3, 2, resolution=3, k=2, hidden_channels=4, depth=1, kernel_size=v
    )(_pos()),
    "GridifiedSegmenter.category": lambda v: GridifiedSegmenter(
        3, 2, num_categories=4, resolution=3, k=2, hidden_channels=4, depth=1, kernel_size=3, point_channels=2
    )(_pos(), category=torch.tensor([v]) if isinstance(v, int) and abs(v) < 2**63 else v),
    "SepFlexConv3d.kernel": lambda v: SepFlexConv3d(2, 2, kernel_size=3, base_resolution=5).kernel(v),
    "MRConv3d.num_branches": lambda v: MRConv3d(2, num_branches=v)(_grid_input(0, c=2)),
    "UNet3d.channel_multiplier": lambda v: UNet3d(2, 2, hidden_channels=2, depth=3, channel_multiplier=v),
    "CfC.lengths": lambda v: CfC(3, 4)(
        torch.rand(1, 4, 3), lengths=torch.tensor([v]) if isinstance(v, int) and abs(v) < 2**63 else None
    ),
    "CfC.hidden_size": lambda v: CfC(3, v),
    "MeanClassAccuracy.num_classes": lambda v: MeanClassAccuracy(v),
    "FixedPoints.n": lambda v: FixedPoints(v)({"pos": np.random.rand(10, 3)}),
    "RandomJitter.seed": lambda v: RandomJitter(seed=v)({"pos": np.random.rand(10, 3)}),
    "Predictor.num_votes": lambda v: _predictor().predict(np.random.rand(30, 3), num_votes=v),
    "Predictor.batch_size": lambda v: _predictor().predict(np.random.rand(30, 3), batch_size=v),
    "checkpoint.resolution": lambda v: build_model_from_checkpoint(_ckpt(resolution=v)),
    "checkpoint.hidden_channels": lambda v: build_model_from_checkpoint(_ckpt(hidden_channels=v)),
}


def _predictor():
    torch.manual_seed(0)
    return Predictor(
        GridifiedClassifier(3, 2, resolution=3, k=2, hidden_channels=4, depth=1, kernel_size=3),
        task="classification",
        class_names=["a", "b"],
        num_points=24,
        in_channels=3,
    )


def _ckpt(**kw):
    kwargs = dict(in_channels=3, num_classes=2, resolution=3, k=2, hidden_channels=4, depth=1, kernel_size=3)
    kwargs.update(kw)
    return {
        "state_dict": {},
        "model_name": "gridified_classifier",
        "model_kwargs": kwargs,
        "task": "classification",
        "info": {},
        "config": {},
    }


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.parametrize("name", sorted(SIZE_ENTRIES))
@settings(PROPS, max_examples=len(SIZES))
@given(value=st.sampled_from(SIZES))
def test_size_arguments_give_a_result_or_a_clear_error(name, value):
    before = _peak_rss_bytes()
    old = os.environ.get("GRIDIFY_MAX_ALLOC_BYTES")
    os.environ["GRIDIFY_MAX_ALLOC_BYTES"] = str(2**30)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            SIZE_ENTRIES[name](value)
    except CheckpointError as exc:
        assert name.startswith("checkpoint."), exc
    except ValueError as exc:
        assert str(exc).split(":")[0], exc  # "<entry>: <problem>"
    finally:
        if old is None:
            del os.environ["GRIDIFY_MAX_ALLOC_BYTES"]
        else:
            os.environ["GRIDIFY_MAX_ALLOC_BYTES"] = old
    assert _peak_rss_bytes() - before < 2**30, f"{name}={value!r} allocated more than 1 GiB"
