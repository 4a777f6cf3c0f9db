r"""The functional form of the gridification layer for custom clouds: :func:`gridify` (no training needed).

One cloud, a dense batch ``[B, N, 3]``, a list of clouds of any sizes or ``[M, 3]`` with a PyG-style
``batch`` vector; every form is checked (a NaN / Inf named by its cloud and row) before anything runs.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor, nn

from .._checks import check_batch, check_int, check_positive_int
from ..io import PointCloud, read_points
from .inputs import as_float32, normalize_cloud, read_cloud, to_numpy

__all__ = ["gridify"]


@contextlib.contextmanager
def _seeded(seed: Optional[int]):
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def gridify(
    points: Any,
    features: Any = None,
    resolution: Optional[int] = None,
    k: Optional[int] = None,
    *,
    batch: Any = None,
    channels: int = 16,
    module: Optional[nn.Module] = None,
    seed: Optional[int] = 0,
    normalize: bool = True,
    return_graph: bool = False,
    **kwargs: Any,
):
    r"""Gridify a custom cloud onto a dense ``R^3`` grid (no training needed).

    Computes one :class:`gridify.nn.Gridification` layer,

        x_i^G = phi_upd( AGG_{j -> i} phi_msg( phi_node(f_j), phi_pos(c_i^G - p_j) ) ),

    over the bilateral kNN edges between the points ``p_j`` and the ``R^3`` nodes ``c_i^G`` of
    the grid over ``[-1, 1]^3`` (each node takes its ``k`` nearest points and each point
    sends to its ``k`` nearest nodes). ``f_j`` are ``features`` (the coordinates when None).

    * ``module=None``: the networks are a *freshly initialised* Gridification with
      ``channels`` outputs, created under ``torch.manual_seed(seed)`` (the global RNG is left
      untouched), so the result is a deterministic random-feature gridification of the
      cloud: useful to inspect the connectivity and as untrained grid features.
    * ``module=``: a given (e.g. trained) Gridification, such as ``predictor.model.gridify``;
      its ``resolution`` and ``k`` are used (passing different ones raises ValueError).

    With ``normalize`` (default) each cloud is first centred and scaled into the unit sphere
    (as the datasets do), so any cloud fits in the grid box; otherwise it must already lie in
    the module's box. Runs without gradients. A NaN / Inf in a batch is named by its cloud and
    its row within that cloud, whatever the form of the batch.

    Args:
        points: one cloud ``[N, 3]`` (array/tensor/nested list), a PointCloud or a file path;
            or a batch: dense ``[B, N, 3]``, a list of clouds (any of the one-cloud forms, of
            any sizes ``N_b``), or ``[M, 3]`` with ``batch``.
        features: ``[N, F]`` / ``[B, N, F]`` point features (a list of ``[N_b, F]`` for a list
            of clouds, ``[M, F]`` with ``batch``), or None.
        resolution: grid nodes per axis ``R`` (default 9). k: neighbours (default 9).
        batch: a PyG-style batch vector ``[M]`` (sorted cloud ids ``0..B-1``, every cloud
            non-empty) for ``points [M, 3]``.
        channels: output channels ``C`` of a fresh module. seed: its initialisation seed.
        kwargs: further :class:`Gridification` arguments for a fresh module (``omega0``,
            ``aggr``, ``message``, ``pos_embedding``, ...).
        return_graph: also return the :class:`gridify.nn.connectivity.BipartiteGraph`.

    Returns:
        ``[C, R, R, R]`` for one cloud, ``[B, C, R, R, R]`` for a batch (float32, CPU unless
        the module lives elsewhere); with ``return_graph`` a ``(grid, graph)`` pair.
    """
    where = "gridify.gridify"
    for name, flag in (("normalize", normalize), ("return_graph", return_graph)):
        if not isinstance(flag, bool):
            raise ValueError(f"{where}: {name} must be a bool, got {flag!r}")
    check_int(where, "seed", seed, 0, allow_none=True)
    if seed is not None and seed >= 1 << 64:
        raise ValueError(f"{where}: seed must be below 2**64 (torch.manual_seed's range), got {seed!r}")
    clouds, form, counts = _points_batch(points, batch, where)
    feats = _features_batch(features, [len(c) for c in clouds], form, counts is not None, where)
    pos_list = _cloud_positions(clouds, form, normalize, where)
    in_channels = 3 if feats is None else feats[0].shape[-1]
    module = _gridification_module(module, in_channels, feats is None, resolution, k, channels, seed, kwargs, where)
    grid, graph = _run_gridification(module, pos_list, feats, form)
    return (grid, graph) if return_graph else grid


def _cloud_positions(clouds: List[np.ndarray], form: str, normalize: bool, where: str) -> List[np.ndarray]:
    """The clouds' float32 coordinates, each normalized (``normalize``) or only cast (range checked)."""
    pos_list = []
    for i, p in enumerate(clouds):  # in float64, before the cast to float32: large offsets keep small steps
        at = f"{where}: " if form == "single" else f"{where}: cloud {i}: "
        if normalize:
            try:
                pos_list.append(normalize_cloud(p)[0])
            except ValueError as exc:
                raise ValueError(f"{at}{exc}") from None
        else:
            pos_list.append(as_float32(p, "points", at[:-2]))
    return pos_list


def _run_gridification(
    module: nn.Module, pos_list: List[np.ndarray], feats: Optional[List[np.ndarray]], form: str
) -> Tuple[Tensor, Any]:
    """``(grid, graph)`` of ``module`` over the clouds, on its device, without gradients (one cloud unbatched)."""
    dev = next(module.parameters()).device
    join = np.concatenate if form == "ragged" else np.stack
    pos_t = torch.from_numpy(np.ascontiguousarray(join(pos_list))).to(dev)
    x_t = None if feats is None else torch.from_numpy(np.ascontiguousarray(join(feats))).to(dev)
    ids = (
        None
        if form != "ragged"
        else torch.arange(len(pos_list)).repeat_interleave(torch.tensor([len(c) for c in pos_list])).to(dev)
    )
    with torch.no_grad():
        grid, graph = module(pos_t, x_t, ids, return_graph=True)
    if form == "single":
        grid = grid[0]
    return grid, graph


def _is_cloud_list(points: Any) -> bool:
    """Whether ``points`` is a list of clouds (not one cloud given as a list of rows): a list or
    tuple whose items are 2-D arrays or tensors, PointClouds, paths, or lists of rows."""
    if not isinstance(points, (list, tuple)) or not points:
        return False
    first = points[0]
    if isinstance(first, (np.ndarray, Tensor)):
        return first.ndim >= 2  # a list of 1-D arrays is one cloud's rows
    return isinstance(first, (PointCloud, str, os.PathLike)) or (
        isinstance(first, (list, tuple)) and bool(first) and isinstance(first[0], (list, tuple, np.ndarray, Tensor))
    )


def _points_batch(points: Any, batch: Any, where: str) -> Tuple[List[np.ndarray], str, Optional[List[int]]]:
    """``(clouds, form, counts)``: the clouds as float64 ``[N_b, 3]`` arrays (finite, checked),
    ``form`` ``"single"`` (one cloud), ``"dense"`` (equally sized clouds, run as ``[B, N, 3]``) or
    ``"ragged"`` (run as ``[M, 3]`` with a batch vector), and ``counts`` the points per cloud of a
    ``batch`` vector (None without one)."""
    if batch is not None:
        return _points_with_batch(points, batch, where)
    if _is_cloud_list(points):
        clouds = []
        for i, item in enumerate(points):
            if isinstance(item, (list, tuple)):
                item = to_numpy(item, f"cloud {i}", where)
            clouds.append(_cloud_array(item, f"{where}: cloud {i}"))
        _check_rows_finite(where, "points", clouds)
        return clouds, ("dense" if len({len(c) for c in clouds}) == 1 else "ragged"), None
    if isinstance(points, (str, os.PathLike, PointCloud)):
        pos, _, _ = read_cloud(points, None, where)
        return [pos], "single", None
    arr = to_numpy(points, "points", where)
    if arr.ndim == 2:
        pos, _, _ = read_cloud(arr, None, where)
        return [pos], "single", None
    if arr.ndim != 3 or arr.shape[-1] != 3:
        raise ValueError(
            f"{where}: points must have shape [N, 3] or [B, N, 3] (or [M, 3] with batch=, or a list "
            f"of clouds), got {tuple(arr.shape)}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{where}: the batch holds no points (shape {tuple(arr.shape)})")
    clouds = list(arr.astype(np.float64))
    _check_rows_finite(where, "points", clouds)
    return clouds, "dense", None


def _points_with_batch(points: Any, batch: Any, where: str) -> Tuple[List[np.ndarray], str, List[int]]:
    """``points [M, 3]`` split into clouds by the PyG-style ``batch`` vector ``[M]`` (checked)."""
    if isinstance(points, (str, os.PathLike, PointCloud)) or _is_cloud_list(points):
        raise ValueError(
            f"{where}: batch= goes with points [M, 3] (an array or tensor), got "
            f"{type(points).__name__}; a list of clouds needs no batch vector"
        )
    arr = to_numpy(points, "points", where)
    if arr.ndim != 2 or arr.shape[-1] != 3 or arr.shape[0] == 0:
        raise ValueError(f"{where}: with batch=, points must have shape [M, 3] with M >= 1, got {tuple(arr.shape)}")
    vec = batch if isinstance(batch, Tensor) else torch.as_tensor(to_numpy(batch, "batch", where))
    _, _, counts = check_batch(where, "batch", vec, arr.shape[0])
    sizes = [int(c) for c in counts.tolist()]
    clouds = np.split(arr.astype(np.float64), np.cumsum(sizes)[:-1])
    _check_rows_finite(where, "points", clouds)
    return clouds, "ragged", sizes


def _cloud_array(points: Any, where: str) -> np.ndarray:
    """One cloud of a list as float64 ``[N, 3]`` (values not checked here), ``where`` naming it."""
    if isinstance(points, (str, os.PathLike)):
        points = read_points(points)
    if isinstance(points, PointCloud):
        points = points.points
    pos = to_numpy(points, "points", where)
    if pos.ndim != 2 or pos.shape[-1] != 3:
        raise ValueError(f"{where}: points must have shape [N, 3], got {tuple(pos.shape)}")
    if pos.shape[0] == 0:
        raise ValueError(f"{where}: the cloud is empty (0 points)")
    return pos.astype(np.float64)


def _check_rows_finite(where: str, name: str, clouds: Sequence[np.ndarray], single: bool = False) -> None:
    """Refuse NaN / Inf in any of ``clouds`` (``[N_b, F]`` each), naming the first cloud that holds
    one (not for a ``single`` cloud), the row within that cloud and how many rows are affected in all."""
    bad = [~np.isfinite(c).all(1) for c in clouds]
    total = sum(int(b.sum()) for b in bad)
    if not total:
        return
    i = next(i for i, b in enumerate(bad) if b.any())
    row = int(np.flatnonzero(bad[i])[0])
    what = "NaN" if np.isnan(clouds[i][row]).any() else "Inf"
    raise ValueError(
        f"{where}: {name} contains {what} values ({total} {'row' if total == 1 else 'rows'} affected); "
        f"first {'' if single else f'in cloud {i} '}at row {row}"
    )


def _features_batch(features: Any, sizes: List[int], form: str, flat: bool, where: str) -> Optional[List[np.ndarray]]:
    """Point features per cloud, float32 ``[N_b, F]`` (None stays None), validated against the
    clouds' sizes: ``[N, F]`` for one cloud, ``[B, N, F]`` or a list of ``[N_b, F]`` for a
    batch, ``[M, F]`` with a batch vector (``flat``)."""
    if features is None:
        return None
    B, M = len(sizes), sum(sizes)
    if flat:
        want = f"have shape [{M}, F] (one row per point of points [M, 3])"
    elif form == "single":
        want = f"have shape [{sizes[0]}, F]"
    else:
        want = (
            f"have shape [{B}, {sizes[0]}, F] or be a list of {B} arrays [N_b, F]"
            if form == "dense"
            else f"be a list of {B} arrays [N_b, F] (N_b = {sizes})"
        )
    if isinstance(features, (list, tuple)) and form != "single" and not flat and _is_cloud_list(features):
        feats = [to_numpy(f, f"features[{i}]", where).astype(np.float64) for i, f in enumerate(features)]
    else:
        given = to_numpy(features, "features", where).astype(np.float64)
        if flat and given.ndim == 2 and len(given) == M:
            feats = np.split(given, np.cumsum(sizes)[:-1])
        elif form == "single" and (given.ndim == 2 or (given.ndim == 3 and len(given) == 1)):
            feats = [given if given.ndim == 2 else given[0]]
        elif form == "dense" and given.ndim == 3 and len(given) == B:
            feats = list(given)
        else:
            raise ValueError(f"{where}: features must {want} to match points, got {tuple(given.shape)}")
    if len(feats) != B or any(
        f.ndim != 2 or len(f) != n or f.shape[-1] != feats[0].shape[-1] for f, n in zip(feats, sizes)
    ):
        raise ValueError(
            f"{where}: features must {want} to match points, got "
            f"{[tuple(f.shape) for f in feats] if B > 1 else tuple(feats[0].shape)}"
        )
    if feats[0].shape[-1] == 0:
        raise ValueError(f"{where}: features have 0 channels; pass features=None to gridify the coordinates alone")
    _check_rows_finite(where, "features", feats, single=form == "single")
    return [as_float32(f, "features", where) for f in feats]


def _gridification_module(
    module: Optional[nn.Module],
    in_channels: int,
    coords_only: bool,
    resolution: Optional[int],
    k: Optional[int],
    channels: int,
    seed: Optional[int],
    kwargs: Dict[str, Any],
    where: str,
) -> nn.Module:
    """The given Gridification (checked against the arguments) or a fresh, seeded one in eval mode."""
    from ..nn.gridification import Gridification

    if module is None:
        check_positive_int(where, channels=channels)
        with _seeded(seed):
            module = Gridification(
                in_channels, channels, 9 if resolution is None else resolution, k=9 if k is None else k, **kwargs
            )
        return module.eval()
    if not isinstance(module, Gridification):
        raise TypeError(f"{where}: module must be a gridify.nn.Gridification, got {type(module).__name__}")
    if kwargs:
        raise ValueError(f"{where}: {sorted(kwargs)} only configure a fresh module; not with module=")
    for name, given, has in (("resolution", resolution, module.resolution), ("k", k, module.k)):
        if given is not None and given != has:
            raise ValueError(f"{where}: {name}={given} but the given module has {name}={has}")
    if module.in_channels != in_channels:
        raise ValueError(
            f"{where}: the module takes {module.in_channels} features per point but "
            f"{'the coordinates give 3' if coords_only else f'features has {in_channels}'}"
        )
    return module
