"""The colours of :mod:`gridify.vis`: the label palette, the edge colours, the grid nodes' ramp.

Every label has one fixed colour of :func:`palette` (12 distinct saturated colours, then
golden-ratio hues); the edges of a chosen grid node have its :func:`edge_palette` colour, the
palette at ``EDGE_SHADE`` brightness, so an edge colour is never a label colour; ``EDGE_COLOR``
is the grey of ``edge_nodes="all"``, ``POINT_GREY`` the points drawn without labels or colours
beside a grid or edges. Grid nodes are coloured from their features by :func:`grid_node_colors`:
their norm on a viridis-like ramp (:func:`ramp`), or their first three principal components as RGB.

Shapes:
    :func:`palette` / :func:`edge_palette` ``n -> [n, 3]``; :func:`label_colors` ``[N] -> [N, 3]``;
    :func:`ramp` ``[M] -> [M, 3]``; :func:`grid_node_colors` ``[C, R, R, R] -> [R^3, 3]`` (or
    ``[M, C] -> [M, 3]``); every colour RGB in ``[0, 1]``.
"""

from __future__ import annotations

import colorsys
from typing import Any, Optional, Tuple

import numpy as np

from .checks import to_numpy

#: distinct, saturated colours (no greys, none close to the white background or the edge grey)
_BASE = np.array(
    [
        [0.894, 0.102, 0.110],
        [0.216, 0.494, 0.722],
        [0.302, 0.686, 0.290],
        [0.596, 0.306, 0.639],
        [1.000, 0.498, 0.000],
        [0.651, 0.337, 0.157],
        [0.969, 0.506, 0.749],
        [0.000, 0.620, 0.620],
        [0.737, 0.741, 0.133],
        [0.090, 0.745, 0.812],
        [0.400, 0.000, 0.800],
        [0.600, 0.000, 0.200],
    ]
)
EDGE_COLOR = (0.55, 0.55, 0.55)
#: points without labels or colours beside a grid or edges (light, so nodes and edges stand out)
POINT_GREY = (0.72, 0.72, 0.72)
#: brightness of the edge colours relative to the label colours
EDGE_SHADE = 0.6
#: the five stops of the viridis-like ramp of :func:`ramp`, dark violet to yellow
VIRIDIS = np.array(
    [[0.267, 0.005, 0.329], [0.229, 0.322, 0.546], [0.128, 0.567, 0.551], [0.369, 0.789, 0.383], [0.993, 0.906, 0.144]]
)
#: a legend entry: text, RGB colour in [0, 1], and the 3D point a window label is attached to
Entry = Tuple[str, Tuple[float, float, float], np.ndarray]


def palette(n: int) -> np.ndarray:
    """``n`` distinct RGB colours in ``[0, 1]`` (12 fixed ones, then golden-ratio hues). [n, 3]"""
    if n <= len(_BASE):
        return _BASE[:n].copy()
    extra = [
        colorsys.hsv_to_rgb((0.13 + i * 0.618034) % 1.0, 0.75 if i % 2 else 0.95, 0.85 if i % 3 else 0.65)
        for i in range(n - len(_BASE))
    ]
    return np.concatenate([_BASE, np.asarray(extra)], 0)


def edge_palette(n: int) -> np.ndarray:
    """Colours of the edges of ``n`` chosen nodes: :func:`palette` at ``EDGE_SHADE`` brightness,
    dark enough to stand out on the points and never equal to a label colour. [n, 3]"""
    return palette(n) * EDGE_SHADE


def label_colors(labels: Any, num_classes: Optional[int] = None) -> np.ndarray:
    """The :func:`palette` colour of every label. ``[N] -> [N, 3]``"""
    lab = np.asarray(labels).reshape(-1).astype(np.int64)
    if len(lab) and lab.min() < 0:
        raise ValueError(f"label_colors: labels must be non-negative, got {int(lab.min())}")
    n = int(num_classes if num_classes is not None else (lab.max() + 1 if len(lab) else 0))
    if len(lab) and lab.max() >= n:
        raise ValueError(f"label_colors: label {int(lab.max())} out of range for {n} classes")
    return palette(max(n, 1))[lab]


def ramp(t: np.ndarray) -> np.ndarray:
    """Viridis-like colours of values in [0, 1]. [M] -> [M, 3]"""
    t = np.clip(np.asarray(t, dtype=np.float64), 0.0, 1.0) * (len(VIRIDIS) - 1)
    i = np.minimum(t.astype(np.int64), len(VIRIDIS) - 2)
    f = (t - i)[:, None]
    return VIRIDIS[i] * (1 - f) + VIRIDIS[i + 1] * f


def grid_node_colors(features: Any, mode: str = "norm") -> np.ndarray:
    """Colours of grid nodes from their features ``[C, R, R, R]`` (or ``[M, C]``). -> ``[R^3 or M, 3]``

    ``"norm"``: ``ramp((|f_i| - min) / (max - min))``; ``"pca"``: the centred features projected
    on their top three principal directions, each min-max scaled to ``[0, 1]`` as R, G, B.
    Nodes are in the flattened order ``a * R^2 + b * R + c`` of :class:`gridify.nn.RegularGrid`.
    """
    f = to_numpy(features).astype(np.float64)
    if f.ndim == 4:
        f = f.reshape(f.shape[0], -1).T
    if f.ndim != 2:
        raise ValueError(f"grid_node_colors: features must be [C, R, R, R] or [R^3, C], got {f.shape}")
    if mode == "norm":
        v = np.linalg.norm(f, axis=1)
        span = v.max() - v.min()
        return ramp((v - v.min()) / span if span > 0 else np.zeros_like(v))
    if mode == "pca":
        q = f - f.mean(0)
        _, _, vt = np.linalg.svd(q, full_matrices=False)
        proj = q @ vt[:3].T
        if proj.shape[1] < 3:
            proj = np.concatenate([proj, np.zeros((len(proj), 3 - proj.shape[1]))], 1)
        lo, hi = proj.min(0), proj.max(0)
        return np.where(hi > lo, (proj - lo) / np.where(hi > lo, hi - lo, 1.0), 0.5)
    raise ValueError(f"grid_node_colors: mode must be 'norm' or 'pca', got {mode!r}")
