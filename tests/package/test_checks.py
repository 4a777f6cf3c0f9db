"""The shared checks of gridify._checks: every tensor argument of every public entry is validated (type,
dtype, shape, device, NaN/Inf, index ranges) with a message naming the entry and the argument; the
allocation limit comes from the memory granted (physical, cgroup, ``ulimit -v``) or ``$GRIDIFY_MAX_ALLOC_BYTES``."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from gridify import _checks
from gridify.api import estimate_normals
from gridify.backbones import CCNN, ResNet3d, UNet3d
from gridify.baselines import PointSepCKConv, knn_interpolate
from gridify.metrics import OverallAccuracy
from gridify.models import GridifiedClassifier
from gridify.nn import (
    BipartiteConv,
    CfC,
    CfCCell,
    ChannelLayerNorm,
    DeltaTGRU,
    MAGNet,
    MRConv3d,
    RandomFourierField,
    SepFlexConv3d,
    SIRENField,
    reparameterize_model,
)
from gridify.ops import fps, grid_knn, grid_positions, knn, scatter
from gridify.transforms import RandomJitter, RandomRotateZ, rotation_matrix

NAN = float("nan")


def _grid(b=2, c=3, r=4, seed=0):
    return torch.randn(b, c, r, r, r, generator=torch.Generator().manual_seed(seed))


def _with(t, index, value=NAN):
    t = t.clone()
    t[index] = value
    return t


def _tiny_classifier(**kw):
    args = dict(resolution=4, k=4, hidden_channels=8, depth=1, kernel_size=3)
    args.update(kw)
    return GridifiedClassifier(3, 3, **args)


def _bipartite_call(**bad):
    torch.manual_seed(0)
    conv = BipartiteConv(2, 4, 8)
    args = dict(
        x_src=torch.randn(5, 2),
        edge_src=torch.tensor([0, 1, 4]),
        edge_dst=torch.tensor([0, 2, 1]),
        offset=torch.randn(3, 3),
        num_dst=3,
    )
    args.update(bad)
    return conv(**args)


NESTED_INPUTS = [
    (
        lambda: RandomFourierField(3, 8)(_with(torch.randn(6, 3), (2, 1)) * 0.1),
        r"RandomFourierField: offset contains NaN values \(1 entry affected\); first at row 2",
    ),
    (lambda: SIRENField(3, 8)(_with(torch.randn(6, 3), (4, 0), float("inf"))), "SIRENField: offset contains Inf"),
    (lambda: SIRENField(3, 8)(offset=_with(torch.randn(6, 3), (1, 0))), "SIRENField: offset contains NaN"),
    (lambda: MAGNet(4)(coords=torch.rand(5, 2)), r"MAGNet: coords must have shape \[\.\.\., 3\]"),
    (lambda: MAGNet(4)(_with(torch.rand(5, 3), (1, 2))), "MAGNet: coords contains NaN"),
    (lambda: MAGNet(4)(torch.rand(5, 3).double()), "coords has dtype torch.float64, which does not match"),
    (
        lambda: SepFlexConv3d(3, 3, kernel_size=3)(_with(_grid(), (1, 2, 0, 1, 3))),
        "SepFlexConv3d: x contains NaN values .* first at cloud 1, channel 2, x 0, y 1, z 3",
    ),
    (lambda: MRConv3d(3)(_with(_grid(), (0, 1, 1, 1, 1))), "MRConv3d: x contains NaN"),
    (lambda: ChannelLayerNorm(3)(_with(_grid(), (0, 0, 0, 0, 0), -float("inf"))), "ChannelLayerNorm: x contains Inf"),
    (lambda: ChannelLayerNorm(3)(_grid(c=4)), r"ChannelLayerNorm: x must have shape \[B, 3, \.\.\.\]"),
    (
        lambda: CCNN(3, 3, hidden_channels=4, depth=1, kernel_size=3)(_with(_grid(), (1, 0, 3, 3, 3))),
        "CCNN: x contains NaN values .* cloud 1",
    ),
    (
        lambda: ResNet3d(3, 3, hidden_channels=4, depth=1, kernel_size=3)(_with(_grid(), (0, 0, 0, 0, 0))),
        "ResNet3d: x contains NaN",
    ),
    (
        lambda: UNet3d(3, 3, hidden_channels=4, depth=2, kernel_size=3)(_grid().double()),
        "UNet3d: x has dtype torch.float64, which does not match the layer's dtype torch.float32",
    ),
    (
        lambda: CCNN(3, 3, hidden_channels=4, depth=1, kernel_size=3)(_grid().to("meta")),
        "CCNN: x is on meta but the module's parameters are on cpu",
    ),
    (lambda: _bipartite_call(x_src=_with(torch.randn(5, 2), (3, 1))), "BipartiteConv: x_src contains NaN .* row 3"),
    (lambda: _bipartite_call(offset=_with(torch.randn(3, 3), (2, 2))), "BipartiteConv: offset contains NaN .* edge 2"),
    (lambda: _bipartite_call(edge_src=torch.tensor([0, 1, 5])), r"edge_src values must lie in \[0, 5\), got 5"),
    (lambda: _bipartite_call(edge_dst=torch.tensor([0, -1, 1])), r"edge_dst values must lie in \[0, 3\), got -1"),
    (lambda: _bipartite_call(edge_dst=torch.tensor([0.0, 1.0, 1.0])), "edge_dst must be an integer tensor"),
    (lambda: _bipartite_call(num_dst=-1), "num_dst must be a non-negative integer"),
    (lambda: CfC(3, 4)(_with(torch.randn(2, 5, 3), (1, 0, 2))), "CfC: input contains NaN .* sequence 1, step 0"),
    (lambda: CfC(3, 4)(torch.randn(2, 5, 3), hx=_with(torch.zeros(2, 4), (0, 3))), "CfC: hx contains NaN"),
    (lambda: CfC(3, 4)(torch.randn(2, 5, 3), torch.ones(2, 5, dtype=torch.bool)), "timespans must hold real"),
    (lambda: CfCCell(3, 4)(torch.randn(2, 3), timespans=torch.tensor([1.0, NAN])), "timespans contains NaN/Inf"),
    (lambda: CfCCell(3, 4)(torch.randn(2, 3), timespans=torch.tensor([1.0, -2.0])), "must be non-negative"),
    (lambda: CfCCell(3, 4)(_with(torch.randn(2, 3), (1, 1))), "CfCCell: input contains NaN"),
    (lambda: DeltaTGRU(3, 4)(torch.randn(2, 5, 3), mask=torch.ones(2, 5)), "mask must be a boolean"),
    (lambda: DeltaTGRU(3, 4)(torch.randn(2, 5, 3), lengths=torch.tensor([2.0, 3.0])), "lengths must be an integer"),
    (
        lambda: CfC(3, 4).half()(torch.randn(2, 5, 3, dtype=torch.float16), torch.full((2, 5), 1e5)),
        "timespans up to 1e\\+05 overflow torch.float16",
    ),
    (
        lambda: knn_interpolate(_with(torch.randn(6, 2), (5, 0)), torch.rand(6, 3), torch.rand(2, 3)),
        "knn_interpolate: x contains NaN .* at row 5",
    ),
    (
        lambda: PointSepCKConv(2, 2)(torch.randn(4, 2), torch.rand(4, 3), torch.tensor([[0, 1]] * 3 + [[3, 4]])),
        r"nbr values must lie in \[0, 4\), got 4",
    ),
    (
        lambda: OverallAccuracy().update(_with(torch.randn(3, 4), (1, 1)), torch.tensor([0, 1, 2])),
        "OverallAccuracy: preds contains NaN .* sample 1, class 1",
    ),
    (
        lambda: OverallAccuracy().update(torch.tensor([0, 1]), torch.tensor([True, False])),
        "target must hold integer class ids, got dtype torch.bool",
    ),
    (
        lambda: fps(torch.rand(6, 3), torch.tensor([0, 0, 0, 1, 1, 1]), start=torch.tensor([True, False])),
        "start must be an integer tensor, got dtype torch.bool",
    ),
    (lambda: fps(torch.rand(6, 3), random_start="yes"), "random_start must be a bool"),
    (lambda: knn(torch.rand(4, 3), torch.rand(4, 3).to("meta"), 2), "x is on cpu but y is on meta"),
    (
        lambda: knn(torch.rand(4, 3).to(torch.float8_e4m3fn), torch.rand(4, 3), 2),
        "x has the unsupported dtype torch.float8_e4m3fn; use float16, bfloat16, float32 or float64",
    ),
    (lambda: grid_knn(torch.rand(4, 3), 2, 3, lower=NAN), r"grid_knn: lower must be finite"),
    (lambda: grid_knn(torch.rand(4, 3), 2, 3, lower=[-1.0, -1.0]), "lower must be a number or one number per axis"),
    (lambda: grid_knn(torch.rand(4, 3), 2, 3, lower="left"), "lower must be a number or one number per axis"),
    (lambda: grid_knn(torch.rand(4, 3), 2, 3, lower=-1e308, upper=1e308), "extent upper - lower overflows"),
    (lambda: RandomRotateZ()({"pos": _with(torch.rand(5, 3), (2, 2))}), "RandomRotateZ: 'pos' contains NaN/Inf"),
    (
        lambda: RandomRotateZ()({"pos": torch.rand(5, 3), "normal": torch.rand(4, 3)}),
        r"'normal' must have shape \[5, 3\]",
    ),
    (lambda: RandomJitter(sigma=NAN), "sigma must be a non-negative finite number"),
    (lambda: RandomJitter()({"pos": np.arange(15).reshape(5, 3)}), "'pos' must hold floating-point coordinates"),
    (lambda: rotation_matrix(3, 0.5), "rotation_matrix: axis must be 0, 1 or 2, got 3"),
    (lambda: rotation_matrix(2, NAN), "rotation_matrix: angle must be a finite number"),
    (lambda: _tiny_classifier().pool_grid(torch.rand(2, 8, 4)), r"pool_grid: z must be backbone features \[B, 8"),
    (lambda: MRConv3d(2, num_branches=2).branch_kernel(2, 5), r"index must be a branch in \[0, 2\), got 2"),
    (lambda: MRConv3d(2).branch_kernel(0, 4), "support must be odd"),
    (lambda: reparameterize_model("model"), "reparameterize_model: model must be a torch.nn.Module, got str"),
    (lambda: estimate_normals(np.zeros((4, 2))), r"estimate_normals: pos must be a finite, non-empty \[N, 3\]"),
    (lambda: estimate_normals(np.random.rand(9, 3), k=0), "k must be a positive integer, got 0"),
]


@pytest.mark.parametrize("call, match", NESTED_INPUTS)
def test_every_tensor_argument_is_validated(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ulimit -v and /proc/self/status: Linux")
def test_allocation_limit_is_the_memory_granted_under_ulimit_v():
    """A scan larger than the memory granted ended in torch's allocation error: the limit is the address space
    ``ulimit -v`` leaves (less what the process maps already) where that is below the physical memory."""
    code = textwrap.dedent("""
        import resource
        from gridify import _checks
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY))
        limit, source = _checks.max_alloc_bytes()
        assert 0 < limit < 6 << 30, limit
        assert source.startswith("the address-space limit (ulimit -v) of 6.0 GiB less the "), source
        try:
            _checks.check_alloc("t", "x", 7 << 30)
        except ValueError as exc:
            assert "more than the allocation limit of" in str(exc) and "ulimit -v" in str(exc), exc
        else:
            raise AssertionError("not refused")
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_allocation_limit_comes_from_the_environment(monkeypatch):
    limit, source = _checks.max_alloc_bytes()
    assert (limit, source) == _checks.granted_memory() and 0 < limit <= _checks.physical_memory()
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", "1e6")
    assert _checks.max_alloc_bytes() == (1_000_000, "GRIDIFY_MAX_ALLOC_BYTES")
    with pytest.raises(ValueError, match=r"more than the allocation limit of 976.6 KiB \(GRIDIFY_MAX_ALLOC_BYTES"):
        scatter(torch.ones(3, 2), torch.tensor([0, 1, 1]), dim_size=200_000)
    with pytest.raises(ValueError, match=r"grid_positions: resolution=64 .* would need 6.0 MiB"):
        grid_positions(64)
    with pytest.raises(ValueError, match=r"fps: batch \(padded to 100 clouds x 2001 points"):
        fps(torch.rand(2100, 3), torch.cat([torch.zeros(2001, dtype=torch.long), torch.arange(1, 100)]))
    with pytest.raises(ValueError, match=r"knn: k=2000 for 2000 queries among 2000 points"):
        knn(torch.rand(2000, 3), torch.rand(2000, 3), 2000)
    monkeypatch.setenv("GRIDIFY_MAX_ALLOC_BYTES", "lots")
    with pytest.raises(ValueError, match="GRIDIFY_MAX_ALLOC_BYTES must be a positive number of bytes, got 'lots'"):
        scatter(torch.ones(3, 2), torch.tensor([0, 1, 1]))
