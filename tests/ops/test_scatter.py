"""gridify.ops.scatter against its loop reference; argument checks, precision."""

import pytest
import torch

from gridify import _optional
from gridify.ops import scatter, scatter_reference


NAN = float("nan")


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_scatter_matches_reference_with_empty_buckets(reduce):
    src = torch.randn(50, 4, dtype=torch.float64, requires_grad=True)
    index = torch.randint(0, 8, (50,))
    index[index == 3] = 4  # bucket 3 stays empty -> 0
    out = scatter(src, index, dim_size=10, reduce=reduce, backend="torch")
    ref = scatter_reference(src.detach(), index, 10, reduce)
    torch.testing.assert_close(out.detach(), ref)
    assert torch.all(out[3] == 0) and torch.all(out[9] == 0)
    if reduce in ("sum", "mean", "max"):
        assert torch.autograd.gradcheck(lambda s: scatter(s, index, 10, reduce, "torch"), (src,))
    if _optional.WITH_TORCH_SCATTER:
        torch.testing.assert_close(scatter(src, index, 10, reduce, "torch_scatter").detach(), ref)


def test_scatter_errors():
    with pytest.raises(ValueError, match="unknown reduce"):
        scatter(torch.rand(3, 2), torch.zeros(3, dtype=torch.long), reduce="median")
    with pytest.raises(ValueError, match="src has 3 rows but index has 2"):
        scatter(torch.rand(3, 2), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"index values must lie in \[0, 2\)"):
        scatter(torch.rand(3, 2), torch.tensor([0, 1, 5]), dim_size=2)
    with pytest.raises(ValueError, match="1-D integer"):
        scatter(torch.rand(3, 2), torch.zeros(3))


def test_scatter_validates_src():
    with pytest.raises(ValueError, match=r"scatter: src contains NaN values \(1 entry affected\); first at row 1"):
        scatter(torch.tensor([[0.0], [NAN]]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="src must be a floating-point or integer tensor, got dtype torch.bool"):
        scatter(torch.ones(2, dtype=torch.bool), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="reduce='mean' needs a floating-point src"):
        scatter(torch.ones(2, dtype=torch.long), torch.tensor([0, 1]), reduce="mean")
    with pytest.raises(ValueError, match="index is on meta but src is on cpu"):
        scatter(torch.ones(2, 1), torch.tensor([0, 1], device="meta"))
    assert torch.equal(scatter(torch.tensor([3, 4, 5]), torch.tensor([1, 1, 0]), 3), torch.tensor([5, 7, 0]))


def test_scatter_accumulates_half_precision_in_float32():
    idx = torch.zeros(2000, dtype=torch.long)
    assert scatter(torch.full((2000, 1), 40.0, dtype=torch.float16), idx, reduce="mean").item() == 40.0
    ones = torch.ones(1001, 1, dtype=torch.bfloat16)
    assert scatter(ones * 3, idx[:1001], reduce="mean").item() == 3.0
    assert scatter(ones, idx[:1001], reduce="sum").item() == 1000.0  # 1001 rounds to 1000 in bfloat16 once


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(index=torch.tensor([0, -1, 1])),
            "index values must be non-negative bucket numbers, got -1 at position 1",
        ),
        (dict(index=torch.zeros(0, dtype=torch.long), dim_size=-3), "dim_size must be a non-negative integer, got -3"),
        (dict(dim_size=2.5), "dim_size must be a non-negative integer, got 2.5"),
        (dict(dim_size=True), "dim_size must be a non-negative integer, got True"),
        (
            dict(dim_size=10**13),
            r"dim_size=10000000000000 \(an output of \[10000000000000, 2\] torch.float32\) would "
            r"need .* more than the allocation limit",
        ),
    ],
)
def test_scatter_index_and_size_arguments(kwargs, match):
    args = dict(src=torch.ones(3, 2), index=torch.tensor([0, 1, 1]))
    if "index" in kwargs:
        args["src"] = torch.ones(kwargs["index"].numel(), 2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        scatter(**args)


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("order", ["sorted", "shuffled"])
def test_max_min_with_gradient_row_path_matches_reference_and_scatter_reduce(reduce, order):
    # ScatterExtreme (a gradient is needed) against the loop reference and scatter_reduce's autograd,
    # with ties (equal rows in one bucket share the gradient), signed upstream gradients, empty buckets
    from gridify.ops.scatter import ScatterExtreme, _scatter_native, use_row_extreme

    g = torch.Generator().manual_seed(0)
    index = torch.tensor([0, 0, 0, 2, 2, 3, 5, 5, 5, 5])
    src = torch.randn(10, 4, 2, generator=g, dtype=torch.float64)
    src[1] = src[0]  # a tie in bucket 0
    src[7, 2] = src[6, 2]
    if order == "shuffled":
        perm = torch.randperm(10, generator=g)
        index, src = index[perm], src[perm]
    a = src.clone().requires_grad_()
    assert use_row_extreme(a, reduce)
    out = _scatter_native(a, index, 7, reduce)
    assert isinstance(out.grad_fn, torch.autograd.function.BackwardCFunction)
    assert out.grad_fn._forward_cls is ScatterExtreme
    torch.testing.assert_close(out, scatter_reference(src, index, 7, reduce))
    w = torch.randn(7, 4, 2, generator=g, dtype=torch.float64)
    (out * w).sum().backward()
    b = src.clone().requires_grad_()
    ref = b.new_zeros(7, 4, 2).scatter_reduce(
        0, index[:, None, None].expand(-1, 4, 2), b, "amax" if reduce == "max" else "amin", include_self=False
    )
    (ref * w).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)
    first = (index == 0).nonzero().flatten()[:2]
    if reduce == "max" and bool((src[first[0]] >= src[index == 0]).all()):
        assert torch.equal(a.grad[first[0]], a.grad[first[1]])  # the tied rows share it
    # not taken: no gradient, sum, under an exporter's trace
    assert not use_row_extreme(src, reduce)
    assert not use_row_extreme(a, "sum")
    with torch.no_grad():
        assert not use_row_extreme(a, reduce)


def test_row_path_gradient_in_float32_matches_scatter_reduce_at_scale():
    from gridify.ops.scatter import _scatter_native

    g = torch.Generator().manual_seed(1)
    index = torch.randint(0, 500, (20000,), generator=g)
    src = torch.randn(20000, 16, generator=g)
    src[::7] = src[3::7].repeat(2, 1)[: src[::7].shape[0]]  # many duplicated rows (ties)
    index[::7] = index[3::7].repeat(2)[: index[::7].shape[0]]  # in the same buckets
    w = torch.randn(600, 16, generator=g)
    grads = []
    for fast in (True, False):
        x = src.clone().requires_grad_()
        if fast:
            out = _scatter_native(x, index, 600, "max")
        else:
            out = x.new_zeros(600, 16).scatter_reduce(0, index[:, None].expand(-1, 16), x, "amax", include_self=False)
        (out * w).sum().backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1])


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("masks", [(False, False), (True, False), (False, True), (True, True)])
def test_scatter_fixed_is_scatter_of_the_rows_it_keeps(reduce, masks):
    """scatter_fixed (a bucket's own rows [D, t, H] plus extra rows sent by index, masks dropping rows) equals
    scatter's loop reference of the kept rows, with a bucket whose rows are all dropped at 0."""
    from gridify.ops import scatter_fixed

    g = torch.Generator().manual_seed(len(reduce) + 2 * masks[0] + masks[1])
    D, t, E, H = 7, 3, 20, 4
    own = torch.randn(D, t, H, generator=g, dtype=torch.float64)
    extra = torch.randn(E, H, generator=g, dtype=torch.float64)
    index = torch.randint(0, D, (E,), generator=g)
    own_keep = torch.rand(D, t, generator=g) > 0.4 if masks[0] else None
    extra_keep = torch.rand(E, generator=g) > 0.4 if masks[1] else None
    if own_keep is not None:
        own_keep[2] = False  # bucket 2: no own row ...
        if extra_keep is None:
            index[index == 2] = 3  # ... and no extra row: 0
    rows = torch.cat([own.reshape(-1, H), extra])
    dst = torch.cat([torch.arange(D).repeat_interleave(t), index])
    kept = torch.cat(
        [
            torch.ones(D * t, dtype=torch.bool) if own_keep is None else own_keep.reshape(-1),
            torch.ones(E, dtype=torch.bool) if extra_keep is None else extra_keep,
        ]
    )
    want = scatter_reference(rows[kept], dst[kept], D, reduce)
    got = scatter_fixed(own, extra, index, reduce, own_keep, extra_keep)
    torch.testing.assert_close(got, want)


def test_scatter_fixed_checks_its_arguments():
    from gridify.ops import scatter_fixed

    own, extra, index = torch.rand(4, 2, 3), torch.rand(5, 3), torch.tensor([0, 1, 2, 3, 3])
    cases = [
        (lambda: scatter_fixed(own, extra, index, "min"), "unknown reduce 'min'"),
        (lambda: scatter_fixed(own[:, :0], extra, index), r"own must have shape \[D, t, H\] with t >= 1"),
        (lambda: scatter_fixed(own, extra[:, :2], index), r"extra must have shape \[E, H\] = \[E, 3\]"),
        (lambda: scatter_fixed(own, extra, index + 1), r"index values must lie in \[0, 4\)"),
        (lambda: scatter_fixed(own, extra.double(), index), "extra must have own's dtype and device"),
        (lambda: scatter_fixed(own, extra, index, own_keep=torch.ones(4, 3, dtype=torch.bool)), "own_keep must be"),
        (lambda: scatter_fixed(own, extra * NAN, index), "extra contains NaN"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
