"""Visual inspection with Open3D: labelled clouds, grid nodes and bilateral kNN edges.

:func:`show` draws up to three layers:

``points``  the cloud, coloured by ``labels`` (predicted class or part; one fixed colour per id
            from :func:`palette`), by explicit ``colors``, or when neither is given light grey
            beside a grid or edges (so their colours stand out) and by height along the
            camera's up vector on its own;
``grid``    grid nodes over ``grid_bounds``, coloured by the norm of their features
            (``grid_color="norm"``, a viridis-like ramp from min to max) or by the first three
            principal components of the features mapped to RGB (``grid_color="pca"``), both
            scaled over the nodes drawn;
``edges``   bilateral kNN edges between points and grid nodes, as a line set: by default the
            edges of a few chosen grid nodes, each node in its own colour of
            :func:`edge_palette`, drawn as a large marker and named in the legend.

What is drawn, and why:

* **Grid nodes** (``grid_nodes``). ``"touched"`` (the default) draws the nodes the cloud touches,

      T = { argmin_i |c_i - p_j| : j = 1..N },

  the nearest grid node of every point: the nodes whose cell holds part of the cloud, each
  joined to that point by the point -> node half of the bilateral kNN. ``"all"`` draws the whole
  ``R^3`` lattice. Touched is the better default because in the bilateral kNN *every* node has
  edges (each node takes its ``k`` nearest points), so the full lattice is a cube of mostly empty
  space whose nodes hide the object; ``T`` draws the shape as the grid sees it, coloured by what
  the gridification put there.
* **Edges** (``edge_nodes``). All edges (``"all"``, one grey) make a star of lines from the far
  nodes into the object. By default only the edges of ``n = 8`` nodes are drawn: ``n`` points
  spread over the cloud by farthest point sampling,

      s_1 = p_1,   s_{t+1} = argmax_j min_{u <= t} |p_j - s_u|,

  each replaced by its nearest grid node that has edges (repeats skipped; more samples are taken
  until ``n`` distinct nodes are found or the cloud is exhausted), so the chosen nodes are spread
  over the object and lie in ``T``. A list of node indices (``a * R^2 + b * R + c``) chooses them
  by hand. At most ``max_edges`` edges are drawn (a seeded random subset beyond that).
* **Camera** (``view``). ``"pca"`` (the default) looks along the axis of least variance of the
  cloud, the eigenvector ``e_3`` of the smallest eigenvalue of

      Sigma = 1/N sum_j (p_j - mu)(p_j - mu)^T,

  at the plane of the two largest. The eye sits at ``centre + t d`` with ``d = +-e_3`` (the sign
  on the side of the ``"iso"`` direction ``(1, -1.4, 0.9)``); ``up`` is the z axis projected on
  the image plane (the y axis when the view is within 26 degrees of vertical, so a top view has
  +y up). ``t`` is the smallest distance at which every drawn point is in the field of view,
  and the centre is the middle of their projected extent. ``"iso"`` or a direction vector
  replace ``d``, ``up=`` the up vector; window and PNG use the same camera.

With ``out=None`` an interactive Open3D window opens (the layers not in ``layers`` start hidden
and every layer can be toggled in the window's scene panel; the legend is printed and drawn as
3D labels). With ``out="view.png"`` the scene is rendered headless with Open3D's
``OffscreenRenderer`` (unlit shaders and no post-processing, so every point has exactly its
colour) and the legend is composited onto the image with Pillow (a colour swatch and the name
of every label present and of every chosen edge node; skipped with a warning if Pillow is
missing). Headless rendering needs a Vulkan or EGL driver; on Debian/Ubuntu
``apt-get install mesa-vulkan-drivers`` gives a software (llvmpipe) one that works on machines
without a GPU or display.

Shapes:
    points ``[N, 3]``, labels ``[N]``, colors ``[N, 3]``; grid features ``[C, R, R, R]``; edges a
    :class:`gridify.nn.connectivity.BipartiteGraph`, ``[E, 2, 3]`` segments or a ``[2, E]``
    (point, node) index; :func:`touched_nodes` ``[N, 3] -> [|T|]``; :func:`edge_subset`
    ``-> ([E'], [S])``; :func:`view_direction` ``[N, 3] -> ([3], [3])``; images ``[H, W, 3]`` uint8.

Open3D is imported lazily: importing this package costs nothing.

The package, by concept: :mod:`gridify.vis.colors` (the palettes, the label colours, the grid
nodes' colours), :mod:`gridify.vis.camera` (the view direction, up, the angles, the eye that fits
the scene), :mod:`gridify.vis.layers` (the touched nodes, the edge subset, every layer's arrays
and legend entries), :mod:`gridify.vis.rendering` (Open3D: offscreen rendering, the legend, the
PNG, the window), :mod:`gridify.vis.scene` (:func:`show`, :func:`show_comparison`) and
:mod:`gridify.vis.checks` (the cloud check they share). Every name is imported from here.
"""

from .camera import ISO_DIRECTION as ISO_DIRECTION
from .camera import VIEWS, view_direction
from .colors import EDGE_COLOR as EDGE_COLOR
from .colors import EDGE_SHADE as EDGE_SHADE
from .colors import POINT_GREY as POINT_GREY
from .colors import Entry as Entry
from .colors import edge_palette, grid_node_colors, label_colors, palette
from .layers import DEFAULT_EDGE_NODES as DEFAULT_EDGE_NODES
from .layers import DEFAULT_MAX_EDGES as DEFAULT_MAX_EDGES
from .layers import GRID_NODES, LAYERS, edge_subset, touched_nodes
from .rendering import RenderError, render
from .scene import show, show_comparison

# the module's former private names that tests/vis/test_vis.py reads here (public in the modules that share them)
from .camera import fit_camera as _fit_camera  # noqa: F401
from .colors import VIRIDIS as _VIRIDIS  # noqa: F401
from .layers import grid_layer as _grid_layer  # noqa: F401

__all__ = [
    "show",
    "show_comparison",
    "render",
    "palette",
    "edge_palette",
    "label_colors",
    "grid_node_colors",
    "touched_nodes",
    "edge_subset",
    "view_direction",
    "LAYERS",
    "GRID_NODES",
    "VIEWS",
    "RenderError",
]
