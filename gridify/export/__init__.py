r"""Deployment exports: a trained gridified model as a self-contained ONNX file.

The PyTorch forward builds its graph with data-dependent code (a KD-tree, ``torch.unique``,
chunked loops), which no exporter can trace. The exported file runs the model's own ``forward`` on its
fixed-shape path instead: inside :func:`gridify.nn.dense.fixed_shapes` the layers take equally sized clouds
``[B, N, 3]`` and build the bilateral kNN graph by brute force or bucketed search
(:mod:`gridify.ops.knn_dense`), (de-)gridify over it with
:class:`gridify.nn.gridification.BipartiteConv`'s own message and update, and a scene segmenter maps every
crop into its grid box with :func:`gridify.models.scene.scene_box_dense`. This package wraps, traces, checks
and runs them:

* :mod:`gridify.export.wrappers`: :class:`OnnxModel` (and :class:`OnnxClassifier`, ``points [B, N, 3]``
  (+ ``normals``) -> ``logits [B, K]``, and :class:`OnnxSegmenter`, -> per-point ``logits [B, N, K]``): the
  inputs only (their names and checks, the up axis, the in-graph normalization
  ``p' = (p - mean(p)) / max_j |p_j - mean(p)|`` or into ``[-1, 1]^3`` by the bounding box,
  ``normalize="cube"``; :func:`normalize_points`), then the model's forward;
* :mod:`gridify.export.exporter`: :func:`export_onnx` (trace, parity check against PyTorch with
  onnxruntime on random and degenerate clouds, metadata, atomic write);
* :mod:`gridify.export.tracing`: the model's state while traced (:func:`tracing_mode`) and the
  traced forms of a depthwise 3D convolution (:func:`depthwise_conv3d_as_2d`) and of the max
  aggregation's scatter;
* :mod:`gridify.export.runtime`: :class:`OnnxSceneModel`, a scene segmenter's file over a whole scan.

Exportable: ``gridified_classifier`` with any registered backbone (``ccnn``, ``resnet``, ``unet``;
``mrconv`` folded into its inference form), xyz or xyz + normals features; ``gridified_segmenter``
and ``scene_segmenter``; float32 on the CPU. Writing a file needs the optional extra
``pip install 'gridify[export]'`` (onnx, onnxscript, onnxruntime); this package imports without it.
The names of the layers' fixed-shape forms (``gridify_dense``, ``dense_bilateral_knn``, ``NODE_CHUNK``,
...) and ``scene_box_dense`` stay importable from here.

Shapes:
    OnnxClassifier: points ``[B, N, 3]`` (+ normals ``[B, N, 3]`` for 6-feature models) -> logits ``[B, K]``.
    OnnxSegmenter: points ``[B, N, 3]`` (+ features / normals ``[B, N, F]``, category ``[B]``) -> logits ``[B, N, K]``.
"""

from ..models.scene import scene_box_dense
from ..nn.dense import (
    dense_bilateral_knn,
    dense_bilateral_knn_unchecked,
    dense_edge_index,
    dense_grid_knn_unchecked,
    grid_axes,
    grid_tables,
)
from ..nn.gridification import gridify_dense
from ..ops.knn_dense import (
    BUCKET_LEVELS,
    BUCKET_MIN_POINTS,
    BUCKETS_SEARCHED,
    NODE_CHUNK,
    SEARCHES,
    node_points_bucketed,
    point_buckets,
)
from .exporter import (
    DEFAULT_OPSET,
    EXPORT_FORMATS,
    INSTALL_HINT,
    ONNX_OPSETS,
    ExportReport,
    check_task_exportable,
    export_onnx,
    require_export_dependencies,
)
from .runtime import OnnxSceneModel
from .tracing import DepthwiseConv3dAs2d, depthwise_conv3d_as_2d, eval_mode, tracing_mode
from .wrappers import (
    ExportError,
    OnnxClassifier,
    OnnxModel,
    OnnxSegmenter,
    check_exportable,
    fail_export,
    normalize_points,
)

__all__ = [
    "DepthwiseConv3dAs2d",
    "ExportError",
    "ExportReport",
    "OnnxClassifier",
    "OnnxModel",
    "OnnxSegmenter",
    "OnnxSceneModel",
    "NODE_CHUNK",
    "grid_axes",
    "dense_grid_knn_unchecked",
    "node_points_bucketed",
    "point_buckets",
    "SEARCHES",
    "BUCKET_LEVELS",
    "BUCKETS_SEARCHED",
    "BUCKET_MIN_POINTS",
    "scene_box_dense",
    "check_exportable",
    "check_task_exportable",
    "depthwise_conv3d_as_2d",
    "dense_bilateral_knn",
    "dense_bilateral_knn_unchecked",
    "dense_edge_index",
    "eval_mode",
    "export_onnx",
    "fail_export",
    "grid_tables",
    "gridify_dense",
    "normalize_points",
    "require_export_dependencies",
    "tracing_mode",
    "EXPORT_FORMATS",
    "INSTALL_HINT",
    "ONNX_OPSETS",
    "DEFAULT_OPSET",
]
