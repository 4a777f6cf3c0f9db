"""The scene layouts, one module each, found by name in the registry :data:`LAYOUTS`.

* :mod:`~gridify.datasets.layouts.base`: :class:`SceneLayout` (what a layout is and says), :data:`LAYOUTS`,
  :func:`get_layout`, :class:`SceneRef` and the helpers every layout's reader shares;
* :mod:`~.semantickitti` (``semantickitti``), :mod:`~.pointcept` (``pointcept``, the common layout),
  :mod:`~.s3dis` (``s3dis``), :mod:`~.scannet` (``scannet``), :mod:`~.mmdet3d` (``mmdet3d_scannet``,
  ``mmdet3d_scannet_instance``, ``mmdet3d_s3dis``).

A new layout is one new module here or in a plugin, and nothing else: a :class:`SceneLayout` subclass registered
with ``@LAYOUTS.register("name")``. Importing this package imports every module of it (no import line to add);
:func:`gridify.datasets.scene_layouts.find_scenes` / ``read_scene``, the scene datasets (``data.layout: name``),
the converter and the single-scan ground truth find it in the registry. The ``gridify convert --layout`` choices
(``gridify._clinames.LAYOUTS``: the command line's parser runs without importing the library) are read from these
modules' sources: a layout here registers with ``@LAYOUTS.register("name")`` starting a line, the name a string
literal.

The order in which the single-scan questions are asked (the ground truth of a scan: SemanticKITTI's ``labels/``
before Pointcept's ``segment.npy``) is each layout's :attr:`SceneLayout.scan_order`, not the order of the imports:
:func:`registered_layouts` sorts by it.
"""

import importlib
import pkgutil

from .base import LAYOUTS, SceneLayout, SceneRef, get_layout, registered_layouts


def _import_layout_modules() -> None:
    """Import every module of this package but ``base`` (by name), which registers their layouts."""
    for name in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if name != "base":
            importlib.import_module(f"{__name__}.{name}")


_import_layout_modules()

__all__ = ["LAYOUTS", "SceneLayout", "SceneRef", "get_layout", "registered_layouts"]
