r"""Surface normals estimated from the points alone (local principal component analysis).

For every point ``p_j`` of a cloud with the ``k`` nearest points ``N_k(j)`` (itself included):

    mu_j = 1/k sum_{l in N_k(j)} p_l
    C_j  = 1/k sum_{l in N_k(j)} (p_l - mu_j)(p_l - mu_j)^T
    n_j  = s_j v_min(C_j),   s_j = +1 if v_min(C_j) . (p_j - mean_l p_l) >= 0 else -1

``v_min`` is the unit eigenvector of the smallest eigenvalue (the direction the neighbourhood
varies least in), oriented away from the cloud's centroid: outward on closed, roughly
star-shaped objects (ModelNet-like shapes); an open scan may get some flipped normals. This is
what Open3D's ``estimate_normals`` with a kNN search computes, with the orientation rule fixed.
The covariances and the eigen-decomposition run in float64 (a plane seen far from the origin
keeps its normal), the result has the dtype of ``pos``. :func:`local_pca` gives the whole eigen-decomposition
of the same ``C_j`` (eigenvalues ascending, for shape descriptors such as planarity). The neighbours come from
:func:`gridify.ops.knn` (exact; the KD-tree for large clouds), so the cost is about linear in
``N`` for a fixed ``k``.

Shapes:
    pos ``[N, 3]`` -> normals ``[N, 3]`` (unit length); :func:`local_pca`: eigenvalues ``[N, 3]``,
    eigenvectors ``[N, 3, 3]`` (column ``i`` of ``[j]`` belongs to eigenvalue ``i``), float64.
"""

from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from .._checks import check_finite, check_int, check_points, fail
from .knn import check_knn_size, knn_unchecked

__all__ = [
    "DEFAULT_NORMAL_NEIGHBOURS",
    "estimate_normals",
    "estimate_normals_unchecked",
    "estimate_normals_reference",
    "local_pca",
    "local_pca_unchecked",
]

#: Neighbours of a point's covariance by default (Open3D's and gridify's ``estimate_normals=True``)
DEFAULT_NORMAL_NEIGHBOURS = 30


def _check_cloud(where: str, pos: Tensor, k: int) -> Tensor:
    """``pos`` a finite floating ``[N, 3]`` with ``N >= 1`` and ``k`` a positive integer whose search fits the
    allocation limit (a ``ValueError`` naming ``where`` otherwise)."""
    pos = check_points(where, "pos", pos)
    check_int(where, "k", k)
    if pos.size(0) == 0:
        fail(where, "pos must hold at least one point, got an empty cloud")
    check_finite(where, "pos", pos)
    check_knn_size(where, pos.size(0), pos.size(0), min(int(k), pos.size(0)), pos.device)
    return pos


def estimate_normals(pos: Tensor, k: int = DEFAULT_NORMAL_NEIGHBOURS) -> Tensor:
    """Unit normals of the cloud ``pos [N, 3]`` from its ``k`` nearest points (see the module docstring).

    Validates its arguments (a ``ValueError`` naming the problem: shape, dtype, NaN/Inf, ``k``),
    then runs :func:`estimate_normals_unchecked`. A cloud of fewer than ``k`` points uses all of them.
    """
    pos = _check_cloud("estimate_normals", pos, k)
    return estimate_normals_unchecked(pos, int(k))


def local_pca(pos: Tensor, k: int = DEFAULT_NORMAL_NEIGHBOURS) -> Tuple[Tensor, Tensor]:
    """``(eigenvalues, eigenvectors)`` of every point's neighbourhood covariance ``C_j`` (module docstring;
    the ``k`` nearest points, itself included), in float64, eigenvalues ascending: the smallest one's vector is
    the (unoriented) normal. Validated as :func:`estimate_normals`, then :func:`local_pca_unchecked`."""
    pos = _check_cloud("local_pca", pos, k)
    return local_pca_unchecked(pos, int(k))


def local_pca_unchecked(pos: Tensor, k: int) -> Tuple[Tensor, Tensor]:
    """:func:`local_pca` without validation (``pos`` a finite floating ``[N, 3]``, ``N >= 1``, ``k >= 1``)."""
    values, vectors, _ = _local_eigen(pos, k)
    return values, vectors


def _local_eigen(pos: Tensor, k: int) -> Tuple[Tensor, Tensor, Tensor]:
    """Eigenvalues ``[N, 3]`` and eigenvectors ``[N, 3, 3]`` (float64, ascending) of the neighbourhood
    covariances, and ``pos`` in float64 in its centroid frame (the normals' orientation)."""
    n = pos.size(0)
    k = min(k, n)
    batch = torch.zeros(n, dtype=torch.long, device=pos.device)
    counts = torch.tensor([n], device=pos.device)
    nbr = knn_unchecked(pos, pos, k, batch, batch, counts)[1].view(n, k)  # grouped by query, k per query
    p = pos.to(torch.float64)
    centred = p - p.mean(0)  # the centroid frame: the orientation and a well-conditioned covariance
    local = centred[nbr]  # [N, k, 3]
    local = local - local.mean(1, keepdim=True)
    cov = local.transpose(1, 2) @ local / k  # [N, 3, 3]
    values, vectors = torch.linalg.eigh(cov)  # eigenvalues ascending
    return values, vectors, centred


def estimate_normals_unchecked(pos: Tensor, k: int) -> Tensor:
    """:func:`estimate_normals` without validation (``pos`` a finite floating ``[N, 3]``, ``N >= 1``, ``k >= 1``)."""
    _, vectors, centred = _local_eigen(pos, k)
    normal = vectors[..., 0]
    flip = (normal * centred).sum(1) < 0
    normal = torch.where(flip[:, None], -normal, normal)
    return normal.to(pos.dtype)


def estimate_normals_reference(pos: Tensor, k: int = DEFAULT_NORMAL_NEIGHBOURS) -> Tensor:
    """A loop over the points (brute-force neighbours, one covariance and ``eigh`` per point), for the tests."""
    p = pos.to(torch.float64)
    k = min(k, p.size(0))
    mean = p.mean(0)
    out = torch.empty_like(p)
    for j in range(p.size(0)):
        d = ((p - p[j]) ** 2).sum(1)
        nb = p[torch.argsort(d, stable=True)[:k]]
        c = nb - nb.mean(0)
        v = torch.linalg.eigh(c.T @ c / k).eigenvectors[:, 0]
        out[j] = -v if float(v @ (p[j] - mean)) < 0 else v
    return out.to(pos.dtype)
