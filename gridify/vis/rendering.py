"""Open3D for :mod:`gridify.vis`: headless rendering, the PNG legend, the PNG file, the interactive window.

Open3D is imported only when something is drawn (:func:`render`, :func:`show_window`), so that
importing :mod:`gridify.vis` costs nothing. A PNG is rendered by a fresh ``OffscreenRenderer`` with
unlit shaders and no post-processing (every point has exactly its colour), its C++ start-up
messages silenced and quoted in the :class:`RenderError` when it cannot start; :func:`draw_legend`
composites the legend onto it with Pillow (skipped with a warning when Pillow is missing) and
:func:`write_png` writes it atomically. The window (:func:`show_window`) shows every layer, the
ones not asked for hidden, with the legend printed and drawn as 3D labels.

Shapes:
    layer data ``{"points": {"pos": [N, 3], "colors": [N, 3]}, "grid": {...}, "edges": {...}}``
    (grid: ``"pos" [M, 3]``, ``"colors" [M, 3]``; edges: ``"segments" [E, 2, 3]``,
    ``"colors" [E, 3]``, ``"nodes" [S, 3]``, ``"node_colors" [S, 3]``); camera direction and up
    ``[3]``; images ``[H, W, 3]`` uint8.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._checks import check_int, check_number, fail
from .._files import atomic_write
from .camera import check_angles, check_view, fit_camera, view_unchecked
from .checks import check_cloud
from .colors import EDGE_COLOR, Entry
from .layers import LAYERS


class RenderError(RuntimeError):
    """Open3D could not render (no display for a window, or no driver for offscreen rendering)."""


@dataclass
class Style:
    """Image size (pixels), point sizes and edge width (pixels), vertical field of view (degrees), background RGB."""

    width: int = 800
    height: int = 600
    point_size: float = 3.0
    grid_point_size: float = 6.0
    line_width: float = 1.0
    fov: float = 40.0
    background: Tuple[float, float, float] = (1.0, 1.0, 1.0)


def check_style(
    where: str,
    width: Any,
    height: Any,
    point_size: Any,
    grid_point_size: Any,
    line_width: Any,
    fov: Any = 40.0,
    background: Any = (1.0, 1.0, 1.0),
) -> Style:
    """The checked :class:`Style` (``fov`` below 180 degrees, ``background`` three numbers in ``[0, 1]``)."""
    bg = np.asarray(background, dtype=object).reshape(-1)
    if bg.size != 3 or not all(isinstance(v, (int, float, np.integer, np.floating)) and 0 <= v <= 1 for v in bg):
        fail(where, f"background must be three numbers in [0, 1], got {background!r}")
    fov = check_number(where, "fov", fov)
    if fov >= 180:
        fail(where, f"fov must be below 180 degrees, got {fov!r}")
    return Style(
        check_int(where, "width", width),
        check_int(where, "height", height),
        check_number(where, "point_size", point_size),
        check_number(where, "grid_point_size", grid_point_size),
        check_number(where, "line_width", line_width),
        fov,
        tuple(float(v) for v in bg),
    )


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
                f"mesa-vulkan-drivers`." + (f" Open3D said: {' | '.join(log[-3:])}" if log else "")
            ) from None


#: the layer a geometry belongs to (for the toggles), when its name is not a layer
_LAYER_OF = {"edge nodes": "edges"}


def _o3d_geometries(o3d: Any, data: Dict[str, Dict[str, np.ndarray]], style: Style) -> Dict[str, Tuple[Any, Any]]:
    R = o3d.visualization.rendering
    V3 = o3d.utility.Vector3dVector

    def cloud(pos: np.ndarray, colors: np.ndarray, size: float) -> Tuple[Any, Any]:
        geo = o3d.geometry.PointCloud(V3(pos))
        geo.colors = V3(colors)
        mat = R.MaterialRecord()
        mat.shader, mat.point_size = "defaultUnlit", float(size)
        return geo, mat

    out = {}
    for name, d in data.items():
        if name != "edges":
            out[name] = cloud(d["pos"], d["colors"], style.grid_point_size if name == "grid" else style.point_size)
            continue
        seg = d["segments"]
        geo = o3d.geometry.LineSet(
            V3(seg.reshape(-1, 3)), o3d.utility.Vector2iVector(np.arange(2 * len(seg)).reshape(-1, 2))
        )
        geo.colors = V3(d.get("colors", np.tile(np.asarray(EDGE_COLOR, dtype=np.float64), (len(seg), 1))))
        mat = R.MaterialRecord()
        mat.shader, mat.line_width = "unlitLine", float(style.line_width)
        out[name] = (geo, mat)
        if len(d.get("nodes", ())):
            out["edge nodes"] = cloud(d["nodes"], d["node_colors"], style.grid_point_size + 6)
    return out


def _positions(data: Dict[str, Dict[str, np.ndarray]]) -> np.ndarray:
    """Every drawn 3D position (points, nodes, segment ends). [M, 3]"""
    parts = [d[key].reshape(-1, 3) for d in data.values() for key in ("pos", "segments", "nodes") if key in d]
    return np.concatenate(parts, 0)


def render_unchecked(data: Dict[str, Dict[str, np.ndarray]], style: Style, d: np.ndarray, up: np.ndarray) -> np.ndarray:
    """:func:`render` on validated data, style and camera (unit direction ``d`` to the eye, unit ``up``)."""
    o3d = _import_open3d()
    r = _renderer(o3d, style.width, style.height)
    scene = r.scene
    scene.clear_geometry()
    for name, (geo, mat) in _o3d_geometries(o3d, data, style).items():
        scene.add_geometry(name, geo, mat)
    scene.set_background([*style.background, 1.0])
    scene.view.set_post_processing(False)  # no tone mapping / anti-aliasing: exact colours
    centre, eye = fit_camera(_positions(data), d, up, style.fov, style.width / style.height)
    r.setup_camera(style.fov, centre.astype(np.float32), eye.astype(np.float32), up.astype(np.float32))
    with _quiet_native_output():
        img = np.array(r.render_to_image())
    scene.clear_geometry()
    del scene, r  # release the engine before its materials (see _renderer)
    return np.ascontiguousarray(img[..., :3])


def render(
    data: Dict[str, Dict[str, np.ndarray]],
    *,
    width: int = 800,
    height: int = 600,
    point_size: float = 3.0,
    grid_point_size: float = 6.0,
    line_width: float = 1.0,
    background: Sequence[float] = (1.0, 1.0, 1.0),
    fov: float = 40.0,
    view: Any = "pca",
    up: Any = None,
    azimuth: float = 0.0,
    elevation: float = 0.0,
) -> np.ndarray:
    """Render layer data offscreen. Returns the RGB image ``[H, W, 3]`` uint8.

    ``data`` maps layer names to arrays: ``{"points": {"pos": [N, 3], "colors": [N, 3]}, "grid":
    {"pos", "colors"}, "edges": {"segments": [E, 2, 3], optional "colors": [E, 3] (default
    ``EDGE_COLOR``), "nodes": [S, 3], "node_colors": [S, 3]}}``. The camera (``view``, ``up``,
    ``azimuth``, ``elevation``, see :func:`view_direction`) comes from the ``points`` layer (every
    position when it is absent).
    """
    where = "render"
    style = check_style(where, width, height, point_size, grid_point_size, line_width, fov, background)
    view, up = check_view(where, view, up)
    angles = check_angles(where, azimuth, elevation)
    bad = [name for name in data if name not in LAYERS]
    if bad or not data:
        fail(where, f"data must map layer names {list(LAYERS)} to arrays, got {sorted(data)}")
    pos = data["points"]["pos"] if "points" in data else _positions(data)
    d, up = view_unchecked(where, check_cloud(where, pos, "the positions"), view, up, *angles)
    return render_unchecked(data, style, d, up)


def draw_legend(img: np.ndarray, labels: List[Entry], edges: List[Entry], title: Optional[str]) -> np.ndarray:
    """Title, label swatches (squares) and edge swatches (thick lines) in the top-left corner, on a
    translucent white box so that they stay readable over the scene."""
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:
        warnings.warn("Pillow is not installed: the PNG has no legend (pip install pillow)")
        return img
    font = ImageFont.load_default()
    rows, y = [], 6  # (y, text, colour or None, is a label)
    if title:
        rows.append((y, title, None, False))
        y += 16
    for i, (text, rgb, _) in enumerate((labels + edges)[:40]):
        y += 6 if i == len(labels) and labels else 0  # a gap between the labels and the edges
        rows.append((y, text, rgb, i < len(labels)))
        y += 16
    im = Image.fromarray(img).convert("RGBA")
    box = Image.new("RGBA", im.size, (0, 0, 0, 0))
    right = 8 + max(18 * (c is not None) + ImageDraw.Draw(box).textlength(t, font=font) for _, t, c, _ in rows)
    ImageDraw.Draw(box).rectangle([2, 2, int(right) + 6, y + 2], fill=(255, 255, 255, 200))
    im = Image.alpha_composite(im, box).convert("RGB")
    draw = ImageDraw.Draw(im)
    for top, text, rgb, is_label in rows:
        if rgb is not None:
            c = tuple(int(v) for v in np.floor(np.asarray(rgb) * 255 + 0.5).clip(0, 255))
            draw.rectangle(
                [8, top + 1, 20, top + 12] if is_label else [8, top + 5, 20, top + 8],
                fill=c,
                outline=(0, 0, 0) if is_label else None,
            )
        draw.text((8 + 18 * (rgb is not None), top), text, fill=(0, 0, 0), font=font)
    return np.asarray(im)


def write_png(path: Path, img: np.ndarray) -> None:
    """Write the image atomically as a PNG (with Pillow, else Open3D), creating the parent folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        from PIL import Image

        atomic_write(path, lambda fh: Image.fromarray(img).save(fh, format="PNG"))
    except ImportError:
        o3d = _import_open3d()
        if not o3d.io.write_image(str(path), o3d.geometry.Image(np.ascontiguousarray(img))):
            raise RenderError(f"could not write {path}") from None


def show_window(
    data: Dict[str, Dict[str, np.ndarray]],
    visible: List[str],
    entries: List[Entry],
    title: str,
    style: Style,
    d: np.ndarray,
    up: np.ndarray,
) -> None:
    """The interactive Open3D window: every layer (the ones not in ``visible`` hidden), ``entries`` printed and drawn as
    3D labels; a :class:`RenderError` on Linux without a display."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise RenderError(
            "no display for an interactive window (DISPLAY is not set); pass out='view.png' "
            "(gridify show ... --out view.png) to render headless"
        )
    o3d = _import_open3d()
    geoms = [
        {"name": name, "geometry": geo, "material": mat, "is_visible": _LAYER_OF.get(name, name) in visible}
        for name, (geo, mat) in _o3d_geometries(o3d, data, style).items()
    ]
    for text, _, _ in entries:
        print(f"[gridify.vis] {text}")
    centre, eye = fit_camera(
        _positions({k: v for k, v in data.items() if k in visible}), d, up, style.fov, style.width / style.height
    )

    def on_init(vis: Any) -> None:
        for text, _, anchor in entries:
            vis.add_3d_label(np.asarray(anchor, dtype=np.float32), text)

    o3d.visualization.draw(
        geoms,
        title=title,
        width=style.width,
        height=style.height,
        show_ui=True,
        point_size=int(style.point_size),
        line_width=int(style.line_width),
        lookat=centre,
        eye=eye,
        up=up,
        field_of_view=style.fov,
        on_init=on_init,
    )
