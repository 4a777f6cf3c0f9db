""":func:`show` and :func:`show_comparison`: a cloud read and checked, its scene built, shown or rendered to a PNG.

:func:`show` checks every argument first (the output path before anything is rendered), reads the
cloud (an array, a :class:`gridify.io.PointCloud` or a file), aims the camera, builds the layers
(:func:`gridify.vis.layers.layer_data`) and either opens a window on the layers asked for or
renders them with the legend to ``out``. :func:`show_comparison` draws ground truth and
prediction with one palette: two panels side by side in a PNG, or two copies of the cloud in one
window.

Shapes:
    points ``[N, 3]``, labels ``[N]``, colors ``[N, 3]``; grid features ``[C, R, R, R]``; images
    ``[H, W, 3]`` uint8 (:func:`show`) and ``[H, 2W, 3]`` uint8 (:func:`show_comparison`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._checks import fail
from .._paths import check_output_file
from .camera import check_camera, view_unchecked
from .checks import check_cloud, to_numpy
from .colors import Entry
from .layers import (
    DEFAULT_EDGE_NODES,
    DEFAULT_MAX_EDGES,
    LAYERS,
    LayerOptions,
    check_layer_options,
    layer_data,
)
from .rendering import Style, check_style, draw_legend, render_unchecked, show_window, write_png


def _read_cloud(points: Any, labels: Any, colors: Any) -> Tuple[Any, Any, Any]:
    """Points, labels and colours from a file path or a PointCloud (its own labels/colours when
    neither is given), or as given."""
    if isinstance(points, (str, os.PathLike)):
        from ..io import read_points

        points = read_points(points)
    if hasattr(points, "points") and hasattr(points, "normals"):  # gridify.io.PointCloud
        if colors is None and labels is None:
            colors, labels = points.colors, points.labels
        points = points.points
    return points, labels, colors


def show(
    points: Any,
    labels: Any = None,
    class_names: Optional[Sequence[str]] = None,
    *,
    colors: Any = None,
    grid: Any = None,
    grid_color: str = "norm",
    grid_bounds: Tuple[float, float] = (-1.0, 1.0),
    grid_nodes: str = "touched",
    edges: Any = None,
    edge_nodes: Any = DEFAULT_EDGE_NODES,
    max_edges: int = DEFAULT_MAX_EDGES,
    layers: Optional[Sequence[str]] = None,
    view: Any = "pca",
    up: Any = None,
    azimuth: float = 0.0,
    elevation: float = 0.0,
    out: Union[str, os.PathLike, None] = None,
    width: int = 800,
    height: int = 600,
    point_size: float = 3.0,
    grid_point_size: float = 6.0,
    line_width: float = 1.0,
    legend: bool = True,
    title: Optional[str] = None,
    seed: int = 0,
    num_classes: Optional[int] = None,
) -> Optional[np.ndarray]:
    """Show a cloud with its labels, grid and edges; or render it to a PNG when ``out`` is given.

    Args:
        points: ``[N, 3]`` (array/tensor), a :class:`gridify.io.PointCloud` or a file path
            (then the file's colours/labels are used when ``labels``/``colors`` are None).
        labels: ``[N]`` integer labels (a single class id colours the whole cloud).
        class_names: names for the legend (``class_names[label]``).
        colors: ``[N, 3]`` RGB in ``[0, 1]`` (or 0-255), used when ``labels`` is None.
        grid: grid features ``[C, R, R, R]`` (e.g. ``gridify.gridify(...)`` or
            ``Predictor.inspect(...)["grid"]``), drawn as nodes over ``grid_bounds``.
        grid_color: ``"norm"`` or ``"pca"`` (see :func:`grid_node_colors`).
        grid_nodes: ``"touched"`` (the nodes nearest to a point; default) or ``"all"`` ``R^3``.
        edges: a :class:`BipartiteGraph`, ``[E, 2, 3]`` segments or a ``[2, E]`` (point, node) index (needs ``grid``).
        edge_nodes: the nodes whose edges are drawn: how many, spread over the cloud (default
            8), a list of node indices ``a * R^2 + b * R + c``, or ``"all"`` (every edge, grey).
        max_edges: edges drawn at most (a seeded random subset beyond that).
        layers: the layers to show (default: every layer given); interactive windows still get
            the others, hidden, so they can be toggled.
        view, up, azimuth, elevation: the camera: ``"pca"`` (along the cloud's axis of least
            variance), ``"iso"`` or a direction vector from the centre to the eye; ``up`` an up
            vector (default: z, or y for top views); then turned by ``azimuth`` about the up
            vector and raised by ``elevation`` (degrees). See :func:`view_direction`.
        out: PNG path for headless rendering; None opens a window.
        width, height, point_size, grid_point_size, line_width: image size, point sizes and edge width in pixels
            (chosen nodes are drawn ``grid_point_size + 6`` wide).
        legend, title: the legend (labels present, chosen edge nodes) and an optional title.
        seed: seed of the ``max_edges`` subset.
        num_classes: size of the palette (default ``len(class_names)`` or ``max(labels) + 1``).

    Returns:
        The rendered RGB image ``[H, W, 3]`` uint8 (legend included) when ``out`` is given.

    Raises:
        ValueError: bad shapes, layer names or options, an ``out`` that cannot be written (checked before
            rendering; :class:`gridify._paths.PathError`). RenderError: no display / no render driver.
    """
    where = "show"
    if out is not None:  # before the scene is built and rendered
        check_output_file(out, f"{where}: out", suffixes=[".png"])
    style = check_style(where, width, height, point_size, grid_point_size, line_width)
    camera = check_camera(where, view, up, azimuth, elevation)
    opts = check_layer_options(where, grid_color, grid_nodes, edge_nodes, max_edges, seed, grid_bounds)
    scene = _build_scene(where, points, labels, colors, class_names, num_classes, grid, edges, opts, camera)
    return _present(where, scene, layers, legend, title, out, style)


def show_comparison(
    points: Any,
    truth: Any,
    prediction: Any,
    class_names: Optional[Sequence[str]] = None,
    *,
    out: Union[str, os.PathLike, None] = None,
    title: Optional[str] = None,
    view: Any = "pca",
    up: Any = None,
    azimuth: float = 0.0,
    elevation: float = 0.0,
    width: int = 800,
    height: int = 600,
    point_size: float = 3.0,
) -> Optional[np.ndarray]:
    """Ground truth and prediction of one labelled cloud, side by side, with one palette and legend.

    With ``out`` (a PNG): two renders from the same camera, ground truth on the left and prediction on
    the right (``2 * width x height``), each titled, the legend listing the classes of each panel.
    Without: one window with the prediction's copy of the cloud shifted along its longest axis by 1.1
    times that extent (the title says which copy is which). Points whose ground truth is ``-1``
    (ignored) are drawn grey as ``unlabelled``.

    Shapes:
        points ``[N, 3]``, truth ``[N]`` (ids ``-1..K-1``), prediction ``[N]`` -> ``[H, 2W, 3]`` uint8 (``out``)
    """
    where = "show_comparison"
    if out is not None:
        check_output_file(out, f"{where}: out", suffixes=[".png"])
    pos = check_cloud(where, to_numpy(points))
    truth = np.asarray(to_numpy(truth)).reshape(-1)
    pred = np.asarray(to_numpy(prediction)).reshape(-1)
    for name, lab in (("truth", truth), ("prediction", pred)):
        if len(lab) != len(pos) or not np.issubdtype(lab.dtype, np.integer):
            fail(where, f"{name} must hold one integer label per point ({len(pos)}), got {lab.dtype} {lab.shape}")
    k = int(
        max(len(class_names) if class_names is not None else 0, truth.max(initial=-1) + 1, pred.max(initial=-1) + 1)
    )
    names = list(class_names) if class_names is not None else [str(i) for i in range(k)]
    names = names + [f"class {i}" for i in range(len(names), k)] + ["unlabelled"]
    if (truth < -1).any() or (pred < 0).any():
        fail(where, "labels must be class ids >= 0 (the truth also -1: unlabelled)")
    truth = np.where(truth < 0, k, truth)
    common = dict(
        class_names=names,
        num_classes=k + 1,
        view=view,
        up=up,
        azimuth=azimuth,
        elevation=elevation,
        width=width,
        height=height,
        point_size=point_size,
    )
    if out is None:
        ext = pos.max(0) - pos.min(0)
        axis = int(np.argmax(ext))
        shift = np.zeros(3)
        shift[axis] = 1.1 * float(ext[axis]) or 1.0
        both = np.concatenate([pos, pos + shift])
        caption = f"ground truth | prediction (shifted {shift[axis]:.3g} along {'xyz'[axis]})"
        return show(both, np.concatenate([truth, pred]), **common, title=f"{title}: {caption}" if title else caption)
    style = check_style(where, width, height, point_size, 6.0, 1.0)
    camera = check_camera(where, view, up, azimuth, elevation)
    opts = check_layer_options(where, "norm", "touched", DEFAULT_EDGE_NODES, DEFAULT_MAX_EDGES, 0, (-1.0, 1.0))
    panels = []
    for lab, caption in ((truth, "ground truth"), (pred, "prediction")):
        scene = _build_scene(where, pos, lab, None, names, k + 1, None, None, opts, camera)
        img = render_unchecked(scene.data, style, scene.direction, scene.up)
        panels.append(draw_legend(img, scene.label_entries, [], f"{title}: {caption}" if title else caption))
    img = np.concatenate(panels, axis=1)
    write_png(Path(os.fspath(out)), img)
    return img


@dataclass
class _Scene:
    """What :func:`show` draws: the layers' arrays, the legend entries and the camera direction."""

    data: Dict[str, Dict[str, np.ndarray]]
    label_entries: List[Entry]
    edge_entries: List[Entry]
    direction: np.ndarray
    up: np.ndarray


def _build_scene(
    where: str,
    points: Any,
    labels: Any,
    colors: Any,
    class_names: Optional[Sequence[str]],
    num_classes: Optional[int],
    grid: Any,
    edges: Any,
    opts: LayerOptions,
    camera: Tuple[Any, ...],
) -> _Scene:
    """Read and check the cloud, aim the camera (``(view, up, azimuth, elevation)``, checked) and build the layers."""
    if num_classes is None and class_names is not None:
        num_classes = len(class_names)
    points, labels, colors = _read_cloud(points, labels, colors)
    pos = check_cloud(where, points)
    d, up = view_unchecked(where, pos, *camera)
    data, label_entries, edge_entries = layer_data(
        where, pos, labels, colors, class_names, num_classes, grid, edges, opts, up
    )
    return _Scene(data, label_entries, edge_entries, d, up)


def _present(
    where: str,
    scene: _Scene,
    layers: Optional[Sequence[str]],
    legend: bool,
    title: Optional[str],
    out: Union[str, os.PathLike, None],
    style: Style,
) -> Optional[np.ndarray]:
    """Open a window on the scene's visible layers, or render them (with the legend) to the PNG ``out``."""
    data, d, up = scene.data, scene.direction, scene.up
    visible = _visible_layers(where, layers, data)
    edge_entries = scene.edge_entries if "edges" in visible else []
    label_entries, edge_entries = (scene.label_entries, edge_entries) if legend else ([], [])
    if out is None:
        show_window(data, visible, label_entries + edge_entries, title or "gridify", style, d, up)
        return None
    img = render_unchecked({k: v for k, v in data.items() if k in visible}, style, d, up)
    if label_entries or edge_entries or title:
        img = draw_legend(img, label_entries, edge_entries, title)
    write_png(Path(os.fspath(out)), img)
    return img


def _visible_layers(where: str, layers: Optional[Sequence[str]], data: Dict[str, Any]) -> List[str]:
    """The layers to show: ``layers`` (all known and given) or every layer given."""
    bad = [name for name in (layers or ()) if name not in LAYERS]
    if bad:
        fail(where, f"unknown layer(s) {bad}; layers are {list(LAYERS)}")
    missing = [name for name in (layers or ()) if name not in data]
    if missing:
        fail(
            where,
            f"layer(s) {missing} requested but not given (pass grid= / edges=; gridify show: a model with a "
            f"grid, --layers points otherwise)",
        )
    return list(layers) if layers is not None else list(data)
