"""estimate_normals: local-PCA normals from the points alone (the one estimator of training and prediction);
local_pca: the eigen-decomposition of the same neighbourhood covariances."""

import numpy as np
import pytest
import torch

from gridify.ops import estimate_normals, estimate_normals_reference, local_pca


def _sphere(n=400, seed=0):
    p = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return p / p.norm(dim=1, keepdim=True)


def test_matches_the_loop_reference():
    pos = torch.rand(150, 3, generator=torch.Generator().manual_seed(1))
    for k in (3, 10, 200):  # 200 > N: every point
        assert torch.allclose(estimate_normals(pos, k), estimate_normals_reference(pos, k), atol=1e-6)


def test_sphere_normals_point_outward_and_are_unit():
    pos = _sphere()
    n = estimate_normals(pos.float(), 20).double()
    assert torch.allclose(n.norm(dim=1), torch.ones(len(n), dtype=torch.float64), atol=1e-6)
    assert (n * pos).sum(1).min() > 0.98  # the radial direction, outward


def test_plane_far_from_the_origin_keeps_its_normal():
    g = torch.Generator().manual_seed(2)
    xy = torch.rand(300, 2, generator=g, dtype=torch.float64)
    pos = torch.cat([xy, torch.zeros(300, 1, dtype=torch.float64)], 1) + torch.tensor([5e5, -3e5, 1e3])
    n = estimate_normals(pos, 12)
    assert torch.allclose(n[:, 2].abs(), torch.ones(300, dtype=torch.float64), atol=1e-9)


def test_invariant_to_point_order_rotation_and_scale():
    pos = _sphere(300, 3).float() * torch.tensor([1.0, 0.6, 0.3])
    n = estimate_normals(pos, 16)
    perm = torch.randperm(300, generator=torch.Generator().manual_seed(4))
    assert torch.allclose(estimate_normals(pos[perm], 16), n[perm], atol=1e-5)
    assert torch.allclose(estimate_normals(pos * 7.5, 16), n, atol=1e-5)
    c, s = np.cos(0.7), np.sin(0.7)
    rot = torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float32)
    assert torch.allclose(estimate_normals(pos @ rot.T, 16), n @ rot.T, atol=1e-4)


def test_dtype_kept_and_the_api_returns_the_same_normals():
    from gridify.api import estimate_normals as api_estimate

    pos = _sphere(200, 5)
    assert estimate_normals(pos, 8).dtype == torch.float64
    assert estimate_normals(pos.half(), 8).dtype == torch.float16
    out = api_estimate(pos.numpy(), k=8)
    assert out.dtype == np.float32 and np.allclose(out, estimate_normals(pos, 8).numpy(), atol=1e-6)


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.zeros(5, 2),), r"estimate_normals: pos must have shape \[N, 3\]"),
        ((torch.zeros(0, 3),), "at least one point"),
        ((torch.tensor([[0.0, 0.0, float("nan")]] * 4),), "NaN"),
        ((torch.zeros(5, 3, dtype=torch.long),), "floating"),
        ((torch.rand(5, 3), 0), "k must be a positive integer, got 0"),
        ((torch.rand(5, 3), 2.5), "k must be"),
    ],
)
def test_bad_input_is_refused_by_name(args, match):
    with pytest.raises(ValueError, match=match):
        estimate_normals(*args)


def test_local_pca_is_the_eigen_decomposition_of_the_neighbourhood_covariance():
    pos = torch.rand(120, 3, generator=torch.Generator().manual_seed(6), dtype=torch.float64) * torch.tensor(
        [1.0, 1.0, 0.05], dtype=torch.float64
    )
    values, vectors = local_pca(pos, 10)
    assert values.shape == (120, 3) and vectors.shape == (120, 3, 3) and values.dtype == torch.float64
    p = pos.numpy()
    for j in (0, 57, 119):  # brute force: the 10 nearest (itself included), their covariance
        nb = p[np.argsort(((p - p[j]) ** 2).sum(1), kind="stable")[:10]]
        c = nb - nb.mean(0)
        np.testing.assert_allclose(values[j].numpy(), np.linalg.eigvalsh(c.T @ c / 10), atol=1e-12)
    assert (values[:, 0] <= values[:, 1]).all() and (values[:, 1] <= values[:, 2]).all()  # ascending
    # the smallest eigenvalue's vector is estimate_normals' normal, up to its orientation
    normal = estimate_normals(pos, 10)
    assert torch.allclose((vectors[..., 0] * normal).sum(1).abs(), torch.ones(120, dtype=torch.float64), atol=1e-9)
    with pytest.raises(ValueError, match=r"^local_pca: k must be a positive integer, got 0"):
        local_pca(pos, 0)
