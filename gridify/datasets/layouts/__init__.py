"""The scene layouts, one module each, found by name in the registry :data:`LAYOUTS`.

* :mod:`~gridify.datasets.layouts.base`: :class:`SceneLayout` (what a layout is and says), :data:`LAYOUTS`,
  :func:`get_layout`, :class:`SceneRef` and the helpers every layout's reader shares;
* :mod:`~.semantickitti` (``semantickitti``), :mod:`~.pointcept` (``pointcept``, the common layout),
  :mod:`~.s3dis` (``s3dis``), :mod:`~.scannet` (``scannet``), :mod:`~.mmdet3d` (``mmdet3d_scannet``,
  ``mmdet3d_scannet_instance``, ``mmdet3d_s3dis``).

A new layout is one new module here (imported below) or in a plugin: a :class:`SceneLayout` subclass registered
with ``@LAYOUTS.register("name")``; :func:`gridify.datasets.scene_layouts.find_scenes` / ``read_scene``, the
scene datasets (``data.layout: name``), the converter and the single-scan ground truth find it there. (The
``gridify convert --layout`` choices are a literal of ``gridify._clinames``, which the command line's parser
reads without importing the library: a built-in layout's name goes there too.)

The registration order is the order in which the single-scan questions are asked (the ground truth of a scan:
SemanticKITTI's ``labels/`` before Pointcept's ``segment.npy``).
"""

from . import semantickitti  # noqa: F401  (registers the layout; first: see the module docstring)
from . import pointcept, s3dis, scannet  # noqa: F401  (register the layouts)
from . import mmdet3d  # noqa: F401  (registers mmdetection3d's three layouts)
from .base import LAYOUTS, SceneLayout, SceneRef, get_layout, registered_layouts

__all__ = ["LAYOUTS", "SceneLayout", "SceneRef", "get_layout", "registered_layouts"]
