"""Visual inspection with Open3D: labelled clouds, grid nodes and bilateral kNN edges.

:func:`show` draws up to three layers, each one named geometry:

``points``  the cloud, coloured by ``labels`` (predicted class or part; one fixed colour per id
            from :func:`palette`), by explicit ``colors``, or by height when neither is given;
``grid``    the ``R^3`` grid nodes over ``grid_bounds``, coloured by the norm of their features
            (``grid_color="norm"``, a viridis-like ramp from min to max) or by the first three
            principal components of the features mapped to RGB (``grid_color="pca"``);
``edges``   the bilateral kNN edges between points and grid nodes, as a line set.

With ``out=None`` an interactive Open3D window opens (the layers not in ``layers`` start hidden
and every layer can be toggled in the window's scene panel; the legend is printed and drawn as
3D labels). With ``out="view.png"`` the scene is rendered headless with Open3D's
``OffscreenRenderer`` (unlit shaders and no post-processing, so every point has exactly its
colour) and the legend is composited onto the image with Pillow (a colour swatch and the name
of every label present; skipped with a warning if Pillow is missing). Headless rendering
needs a Vulkan or EGL driver; on Debian/Ubuntu ``apt-get install mesa-vulkan-drivers`` gives a
software (llvmpipe) one that works on machines without a GPU or display.

Open3D is imported lazily: importing this module costs nothing.
"""
from __future__ import annotations

import colorsys
import contextlib
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._files import atomic_write

__all__ = ["show", "palette", "label_colors", "grid_node_colors", "render", "LAYERS", "RenderError"]

LAYERS = ("points", "grid", "edges")

#: distinct, saturated colours (no greys, none close to the white background or the edge grey)
_BASE = np.array([
    [0.894, 0.102, 0.110], [0.216, 0.494, 0.722], [0.302, 0.686, 0.290], [0.596, 0.306, 0.639],
    [1.000, 0.498, 0.000], [0.651, 0.337, 0.157], [0.969, 0.506, 0.749], [0.000, 0.620, 0.620],
    [0.737, 0.741, 0.133], [0.090, 0.745, 0.812], [0.400, 0.000, 0.800], [0.600, 0.000, 0.200],
])
EDGE_COLOR = (0.55, 0.55, 0.55)
_VIRIDIS = np.array([[0.267, 0.005, 0.329], [0.229, 0.322, 0.546], [0.128, 0.567, 0.551],
                     [0.369, 0.789, 0.383], [0.993, 0.906, 0.144]])


class RenderError(RuntimeError):
    """Open3D could not render (no display for a window, or no driver for offscreen rendering)."""


def palette(n: int) -> np.ndarray:
    """``n`` distinct RGB colours in ``[0, 1]`` (12 fixed ones, then golden-ratio hues). [n, 3]"""
    if n <= len(_BASE):
        return _BASE[:n].copy()
    extra = [colorsys.hsv_to_rgb((0.13 + i * 0.618034) % 1.0, 0.75 if i % 2 else 0.95, 0.85 if i % 3 else 0.65)
             for i in range(n - len(_BASE))]
    return np.concatenate([_BASE, np.asarray(extra)], 0)


def label_colors(labels: Any, num_classes: Optional[int] = None) -> np.ndarray:
    """The :func:`palette` colour of every label. ``[N] -> [N, 3]``"""
    lab = np.asarray(labels).reshape(-1).astype(np.int64)
    if len(lab) and lab.min() < 0:
        raise ValueError(f"label_colors: labels must be non-negative, got {int(lab.min())}")
    n = int(num_classes if num_classes is not None else (lab.max() + 1 if len(lab) else 0))
    if len(lab) and lab.max() >= n:
        raise ValueError(f"label_colors: label {int(lab.max())} out of range for {n} classes")
    return palette(max(n, 1))[lab]


def _ramp(t: np.ndarray) -> np.ndarray:
    """Viridis-like colours of values in [0, 1]. [M] -> [M, 3]"""
    t = np.clip(np.asarray(t, dtype=np.float64), 0.0, 1.0) * (len(_VIRIDIS) - 1)
    i = np.minimum(t.astype(np.int64), len(_VIRIDIS) - 2)
    f = (t - i)[:, None]
    return _VIRIDIS[i] * (1 - f) + _VIRIDIS[i + 1] * f


def _to_numpy(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def grid_node_colors(features: Any, mode: str = "norm") -> np.ndarray:
    """Colours of grid nodes from their features ``[C, R, R, R]`` (or ``[R^3, C]``). -> ``[R^3, 3]``

    ``"norm"``: ``ramp((|f_i| - min) / (max - min))``; ``"pca"``: the centred features projected
    on their top three principal directions, each min-max scaled to ``[0, 1]`` as R, G, B.
    Nodes are in the flattened order ``a * R^2 + b * R + c`` of :class:`gridify.nn.RegularGrid`.
    """
    f = _to_numpy(features).astype(np.float64)
    if f.ndim == 4:
        f = f.reshape(f.shape[0], -1).T
    if f.ndim != 2:
        raise ValueError(f"grid_node_colors: features must be [C, R, R, R] or [R^3, C], got {f.shape}")
    if mode == "norm":
        v = np.linalg.norm(f, axis=1)
        span = v.max() - v.min()
        return _ramp((v - v.min()) / span if span > 0 else np.zeros_like(v))
    if mode == "pca":
        q = f - f.mean(0)
        _, _, vt = np.linalg.svd(q, full_matrices=False)
        proj = q @ vt[:3].T
        if proj.shape[1] < 3:
            proj = np.concatenate([proj, np.zeros((len(proj), 3 - proj.shape[1]))], 1)
        lo, hi = proj.min(0), proj.max(0)
        return np.where(hi > lo, (proj - lo) / np.where(hi > lo, hi - lo, 1.0), 0.5)
    raise ValueError(f"grid_node_colors: mode must be 'norm' or 'pca', got {mode!r}")


def _grid_positions(resolution: int, bounds: Tuple[float, float]) -> np.ndarray:
    ax = np.linspace(bounds[0], bounds[1], resolution)
    a, b, c = np.meshgrid(ax, ax, ax, indexing="ij")
    return np.stack([a.ravel(), b.ravel(), c.ravel()], 1)


def _edge_segments(edges: Any, points: np.ndarray, grid_pos: Optional[np.ndarray], max_edges: int,
                   seed: int) -> np.ndarray:
    """Edges as segments ``[E, 2, 3]`` from a BipartiteGraph, an ``[E, 2, 3]`` array or an
    edge index ``[2, E]`` (point id, node id) into ``points`` / the grid nodes."""
    if hasattr(edges, "edge_index") and hasattr(edges, "grid"):  # BipartiteGraph
        point, node = _to_numpy(edges.edge_index)
        nodes = _to_numpy(edges.grid.positions())
        seg = np.stack([_to_numpy(edges.pos)[point], nodes[node % len(nodes)]], 1)
    else:
        e = _to_numpy(edges)
        if e.ndim == 3 and e.shape[1:] == (2, 3):
            seg = e
        elif e.ndim == 2 and e.shape[0] == 2 and e.dtype.kind in "iu":
            if grid_pos is None:
                raise ValueError("show: an edge index [2, E] needs grid= to place the grid nodes")
            seg = np.stack([points[e[0]], grid_pos[e[1] % len(grid_pos)]], 1)
        else:
            raise ValueError(f"show: edges must be a BipartiteGraph, an [E, 2, 3] array of segments or a [2, E] "
                             f"edge index, got shape {e.shape}")
    if len(seg) > max_edges:
        seg = seg[np.sort(np.random.default_rng(seed).choice(len(seg), max_edges, replace=False))]
    return seg.astype(np.float64)


def _layer_data(points: Any, labels: Any, colors: Any, grid: Any, grid_color: str, grid_bounds: Tuple[float, float],
                edges: Any, max_edges: int, seed: int, num_classes: Optional[int]
                ) -> Tuple[Dict[str, Dict[str, np.ndarray]], Any]:
    """Plain numpy arrays of every layer that has data, and the labels used (file labels too)."""
    if isinstance(points, (str, os.PathLike)):
        from .io import read_points

        cloud = read_points(points)
        points = cloud.points
        if colors is None and labels is None:
            colors = cloud.colors if cloud.colors is not None else None
            labels = cloud.labels
    elif hasattr(points, "points") and hasattr(points, "normals"):  # gridify.io.PointCloud
        if colors is None and labels is None:
            colors, labels = points.colors, points.labels
        points = points.points
    pos = _to_numpy(points).astype(np.float64)
    if pos.ndim != 2 or pos.shape[1] != 3 or len(pos) == 0:
        raise ValueError(f"show: points must have shape [N, 3] with N >= 1, got {pos.shape}")
    if not np.isfinite(pos).all():
        raise ValueError("show: points contain NaN/Inf values")
    if labels is not None:
        lab = _to_numpy(labels).reshape(-1)
        if lab.size == 1 and len(pos) > 1:
            lab = np.full(len(pos), int(lab[0]))
        if lab.shape != (len(pos),):
            raise ValueError(f"show: labels must have shape [{len(pos)}] (one per point), got {lab.shape}")
        col = label_colors(lab, num_classes)
    elif colors is not None:
        col = _to_numpy(colors).astype(np.float64)
        if col.shape != pos.shape:
            raise ValueError(f"show: colors must have shape {list(pos.shape)}, got {col.shape}")
        if col.max() > 1.0:
            col = col / 255.0
    else:
        z = pos[:, 2]
        col = _ramp((z - z.min()) / (np.ptp(z) or 1.0))
    out = {"points": {"pos": pos, "colors": np.clip(col, 0, 1)}}
    grid_pos = None
    if grid is not None:
        g = _to_numpy(grid)
        if g.ndim == 5 and g.shape[0] == 1:
            g = g[0]
        if g.ndim != 4 or not g.shape[1] == g.shape[2] == g.shape[3]:
            raise ValueError(f"show: grid must be [C, R, R, R] features, got {g.shape}")
        grid_pos = _grid_positions(g.shape[1], grid_bounds)
        out["grid"] = {"pos": grid_pos, "colors": grid_node_colors(g, grid_color)}
    if edges is not None:
        seg = _edge_segments(edges, pos, grid_pos, max_edges, seed)
        out["edges"] = {"segments": seg}
    return out, (None if labels is None else lab)


def _legend_entries(labels: Any, class_names: Optional[Sequence[str]], num_classes: Optional[int]
                    ) -> List[Tuple[str, Tuple[float, float, float]]]:
    if labels is None:
        return []
    lab = np.asarray(_to_numpy(labels)).reshape(-1).astype(np.int64)
    present = np.unique(lab)
    n = int(num_classes if num_classes is not None else (len(class_names) if class_names else present.max() + 1))
    pal = palette(max(n, 1))
    counts = np.bincount(lab, minlength=n)
    out = []
    for i in present.tolist():
        name = class_names[i] if class_names is not None and i < len(class_names) else str(i)
        out.append((f"{name} ({counts[i]})", tuple(pal[i])))
    return out


@contextlib.contextmanager
def _quiet_native_output():
    """Silence Open3D/Filament's C++ start-up messages (fd 1 and 2); re-raise with their text."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
    except (OSError, ValueError, AttributeError):  # no real file descriptors (e.g. some notebooks)
        yield lambda: ""
        return
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)

        def text() -> str:
            tmp.flush()
            tmp.seek(0)
            return tmp.read().decode("utf-8", "replace")

        try:
            yield text
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _import_open3d():
    try:
        import open3d as o3d
    except ImportError as exc:  # pragma: no cover - open3d is a dependency
        raise RenderError(f"gridify.vis needs open3d (pip install open3d): {exc}") from None
    return o3d


def _renderer(o3d: Any, width: int, height: int):
    """A fresh OffscreenRenderer (about 0.3 s). Renderers are not cached: Filament aborts the
    process when a renderer still alive at interpreter exit is destroyed."""
    with _quiet_native_output() as captured:
        try:
            return o3d.visualization.rendering.OffscreenRenderer(int(width), int(height))
        except Exception as exc:  # noqa: BLE001 - one clear message for every driver problem
            log = captured().strip().splitlines()
            raise RenderError(
                f"Open3D's offscreen renderer could not start ({exc}). Headless rendering needs a Vulkan or "
                f"EGL driver; on Debian/Ubuntu install the software one with `apt-get install "
                f"mesa-vulkan-drivers`." + (f" Open3D said: {' | '.join(log[-3:])}" if log else "")) from None


def _o3d_geometries(o3d: Any, data: Dict[str, Dict[str, np.ndarray]], point_size: float, grid_point_size: float,
                    line_width: float) -> Dict[str, Tuple[Any, Any]]:
    R = o3d.visualization.rendering
    V3 = o3d.utility.Vector3dVector
    out = {}
    for name, d in data.items():
        mat = R.MaterialRecord()
        if name == "edges":
            seg = d["segments"]
            geo = o3d.geometry.LineSet(V3(seg.reshape(-1, 3)),
                                       o3d.utility.Vector2iVector(np.arange(2 * len(seg)).reshape(-1, 2)))
            geo.colors = V3(np.tile(np.asarray(EDGE_COLOR, dtype=np.float64), (len(seg), 1)))
            mat.shader, mat.line_width = "unlitLine", float(line_width)
        else:
            geo = o3d.geometry.PointCloud(V3(d["pos"]))
            geo.colors = V3(d["colors"])
            mat.shader = "defaultUnlit"
            mat.point_size = float(grid_point_size if name == "grid" else point_size)
        out[name] = (geo, mat)
    return out


def _camera(data: Dict[str, Dict[str, np.ndarray]], fov: float, direction: Sequence[float]):
    pts = np.concatenate([d["pos"] if "pos" in d else d["segments"].reshape(-1, 3) for d in data.values()], 0)
    lo, hi = pts.min(0), pts.max(0)
    center = (lo + hi) / 2
    radius = max(float(np.linalg.norm(hi - lo)) / 2, 1e-6)
    d = np.asarray(direction, dtype=np.float64)
    d = d / np.linalg.norm(d)
    dist = radius / np.sin(np.radians(fov) / 2) * 1.05
    return center, center + d * dist, np.array([0.0, 0.0, 1.0])


def render(data: Dict[str, Dict[str, np.ndarray]], *, width: int = 800, height: int = 600, point_size: float = 3.0,
           grid_point_size: float = 6.0, line_width: float = 1.0, background=(1.0, 1.0, 1.0), fov: float = 40.0,
           direction: Sequence[float] = (1.0, -1.4, 0.9)) -> np.ndarray:
    """Render layer data (see :func:`show`) offscreen. Returns the RGB image ``[H, W, 3]`` uint8."""
    o3d = _import_open3d()
    r = _renderer(o3d, width, height)
    scene = r.scene
    scene.clear_geometry()
    for name, (geo, mat) in _o3d_geometries(o3d, data, point_size, grid_point_size, line_width).items():
        scene.add_geometry(name, geo, mat)
    scene.set_background([*map(float, background), 1.0])
    scene.view.set_post_processing(False)  # no tone mapping / anti-aliasing: exact colours
    center, eye, up = _camera(data, fov, direction)
    r.setup_camera(float(fov), center.astype(np.float32), eye.astype(np.float32), up.astype(np.float32))
    with _quiet_native_output():
        img = np.array(r.render_to_image())
    scene.clear_geometry()
    del scene, r  # release the engine before its materials (see _renderer)
    return np.ascontiguousarray(img[..., :3])


def _draw_legend(img: np.ndarray, entries: List[Tuple[str, Tuple[float, float, float]]], title: Optional[str]
                 ) -> np.ndarray:
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        warnings.warn("Pillow is not installed: the PNG has no legend (pip install pillow)")
        return img
    im = Image.fromarray(img)
    draw = ImageDraw.Draw(im)
    font = ImageFont.load_default()
    y = 6
    if title:
        draw.text((8, y), title, fill=(0, 0, 0), font=font)
        y += 16
    for text, rgb in entries[:40]:
        c = tuple(int(v) for v in np.floor(np.asarray(rgb) * 255 + 0.5).clip(0, 255))
        draw.rectangle([8, y + 1, 20, y + 12], fill=c, outline=(0, 0, 0))
        draw.text((26, y), text, fill=(0, 0, 0), font=font)
        y += 16
    return np.asarray(im)


def show(points: Any, labels: Any = None, class_names: Optional[Sequence[str]] = None, *, colors: Any = None,
         grid: Any = None, grid_color: str = "norm", grid_bounds: Tuple[float, float] = (-1.0, 1.0),
         edges: Any = None, layers: Optional[Sequence[str]] = None, out: Union[str, os.PathLike, None] = None,
         width: int = 800, height: int = 600, point_size: float = 3.0, grid_point_size: float = 6.0,
         legend: bool = True, title: Optional[str] = None, max_edges: int = 20_000, seed: int = 0,
         num_classes: Optional[int] = None) -> Optional[np.ndarray]:
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
        edges: a :class:`BipartiteGraph`, ``[E, 2, 3]`` segments or a ``[2, E]`` (point, node)
            index; at most ``max_edges`` (a seeded random subset) are drawn.
        layers: the layers to show (default: every layer given); interactive windows still get
            the others, hidden, so they can be toggled.
        out: PNG path for headless rendering; None opens a window.
        width, height, point_size, grid_point_size: image size and point sizes in pixels.
        legend, title: the legend of the labels present and an optional title.
        num_classes: size of the palette (default ``len(class_names)`` or ``max(labels) + 1``).

    Returns:
        The rendered RGB image ``[H, W, 3]`` uint8 (legend included) when ``out`` is given.

    Raises:
        ValueError: bad shapes or layer names. RenderError: no display / no render driver.
    """
    if grid_color not in ("norm", "pca"):
        raise ValueError(f"show: grid_color must be 'norm' or 'pca', got {grid_color!r}")
    if num_classes is None and class_names is not None:
        num_classes = len(class_names)
    data, labels = _layer_data(points, labels, colors, grid, grid_color, grid_bounds, edges, max_edges, seed,
                               num_classes)
    bad = [name for name in (layers or ()) if name not in LAYERS]
    if bad:
        raise ValueError(f"show: unknown layer(s) {bad}; layers are {list(LAYERS)}")
    missing = [name for name in (layers or ()) if name not in data]
    if missing:
        raise ValueError(f"show: layer(s) {missing} requested but not given (pass grid= / edges=)")
    visible = list(layers) if layers is not None else list(data)
    entries = _legend_entries(labels, class_names, num_classes) if legend else []
    if out is not None:
        img = render({k: v for k, v in data.items() if k in visible}, width=width, height=height,
                     point_size=point_size, grid_point_size=grid_point_size)
        if entries or title:
            img = _draw_legend(img, entries, title)
        path = Path(os.fspath(out))
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_png(path, img)
        return img
    _show_window(data, visible, entries, title or "gridify", width, height, point_size, grid_point_size)
    return None


def _write_png(path: Path, img: np.ndarray) -> None:
    try:
        from PIL import Image

        atomic_write(path, lambda fh: Image.fromarray(img).save(fh, format="PNG"))
    except ImportError:
        o3d = _import_open3d()
        if not o3d.io.write_image(str(path), o3d.geometry.Image(np.ascontiguousarray(img))):
            raise RenderError(f"could not write {path}") from None


def _show_window(data, visible, entries, title, width, height, point_size, grid_point_size) -> None:
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise RenderError("no display for an interactive window (DISPLAY is not set); pass out='view.png' "
                          "(gridify show ... --out view.png) to render headless")
    o3d = _import_open3d()
    geoms = []
    for name, (geo, mat) in _o3d_geometries(o3d, data, point_size, grid_point_size, 1.0).items():
        geoms.append({"name": name, "geometry": geo, "material": mat, "is_visible": name in visible})
    for text, _ in entries:
        print(f"[gridify.vis] {text}")
    pts = data["points"]
    anchors = []
    if entries:
        cols = pts["colors"]
        for text, rgb in entries:
            mask = np.all(np.abs(cols - np.asarray(rgb)) < 1e-6, axis=1)
            if mask.any():
                anchors.append((pts["pos"][mask].mean(0), text))

    def on_init(vis: Any) -> None:
        for p, text in anchors:
            vis.add_3d_label(p.astype(np.float32), text)

    o3d.visualization.draw(geoms, title=title, width=width, height=height, show_ui=True,
                           point_size=int(point_size), on_init=on_init)
