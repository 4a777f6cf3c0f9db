r"""Deployment exports: a trained gridified classifier as a self-contained ONNX file.

The PyTorch forward builds its graph with data-dependent code (a KD-tree, ``torch.unique``,
chunked loops), which no exporter can trace. :class:`OnnxClassifier` runs the same network on
fixed-shape tensors, with the bilateral kNN graph built by brute force, per cloud ``b``:

    A_{b,i} = topk_k { ||c_i^G - c_j||^2 : j < N }              (grid node i <- its k nearest points)
    P_{b,j} = topk_k' { ||c_i^G - c_j||^2 : i < R^3 }           (point j -> its k' = min(k, R^3) nearest nodes)
    keep_{b,j,t} = [ j not in A_{b, P_{b,j,t}} ]                 (the point -> node edges A does not hold)

so ``E = {(j, i) : j in A_i} U {(j, i) : i in P_j, keep}`` is the deduplicated union without
``torch.unique``: ``R^3 k + N k'`` candidate edges, the duplicates masked out, so a mean counts
every edge once. The distances use the same float arithmetic as :func:`gridify.ops.knn` (torch
backend) for ``A`` and as :func:`gridify.ops.grid_knn` for ``P``, so ``E`` is
:func:`gridify.nn.bilateral_knn`'s edge set. Exact ties are broken by the lower index: for
equidistant points (duplicates) this is what the brute-force and KD-tree searches do too; a point
lying exactly on a symmetry plane of the lattice may keep a different but equally near node at
its k-th place than :func:`gridify.ops.grid_knn` (identical points, which normalize onto the
centre of the lattice, do; the parity check of :func:`export_onnx` tells such ties apart). The gridification is then

    x_i^G = phi_upd( AGG( {phi_msg(phi_node(x_j), phi_pos(c_i^G - c_j)) : j in A_i}
                          U {... : i in P_j, keep_{j,i}} ) )

with the model's own ``phi_node`` / ``phi_pos`` / ``phi_upd`` (weights shared, not copied),
followed by the model's ``grid_norm``, ``backbone``, pooling and head. With ``normalize`` the
graph first centres every cloud and scales it into the unit sphere,
``p' = (p - mean(p)) / max_j |p_j - mean(p)|`` (in float64, as :func:`gridify.api.normalize_cloud`).

:func:`export_onnx` traces it (``torch.onnx.export``, dynamo exporter; depthwise 3D convolutions
as sums of 2D ones, :func:`depthwise_conv3d_as_2d`, which onnxruntime runs ~8x faster), writes
the file atomically and checks it with onnxruntime against the model's own PyTorch forward, on
random and on degenerate clouds (identical, collinear, coplanar points, ``N = k``).
The file's ONNX opset is the requested one, 18 to 25 (:data:`ONNX_OPSETS`; default 20); every
argument is checked before anything is traced.
Batch and number of points are dynamic axes unless fixed. Exportable: ``gridified_classifier``
with any registered backbone (``ccnn``, ``resnet``, ``unet``; ``mrconv`` folded into its
inference form), xyz or xyz + normals features, float32 on the CPU. It needs the optional extra
``pip install 'gridify[export]'`` (onnx, onnxscript, onnxruntime); this module imports without it.

Segmenters (:class:`OnnxSegmenter`) use the same edge set on any grid ``(Rx, Ry, Rz)``
(:func:`dense_grid_knn_unchecked`: ``A`` in blocks of :data:`NODE_CHUNK` nodes, by brute force or,
for scene models, in the nearest buckets of a kd split of the points with an exactness check and
a brute-force fallback, :func:`node_points_bucketed`; ``P`` among the nearest coordinates of every
axis), gridify over it (:func:`gridify_dense_graph`), run the
backbone, and de-gridify over the transposed edges (:func:`degridify_dense_graph`)

    x_j^P = phi_upd( AGG( {phi_msg(phi_node(g_i), phi_pos(c_j - c_i^G)) : j in A_i}
                          U {... : i in P_j, keep_{j,i}} ) )

before the model's point branch and head: per-point logits. A scene segmenter maps every cloud
(one crop, in metres) into its grid box inside the graph (:func:`scene_box_dense`);
:class:`OnnxSceneModel` runs such a file over a whole scan with the training crops.

Shapes:
    dense_bilateral_knn: pos ``[B, N, 3]`` -> node_points ``[B, R^3, k]``, point_nodes ``[B, N, k']``,
    keep ``[B, N, k']`` (bool).
    gridify_dense: pos ``[B, N, 3]``, x ``[B, N, F]`` -> ``[B, C, R, R, R]``.
    node_points_bucketed: pos ``[B, N, 3]``, nodes ``[R, 3]`` -> node_points ``[B, R, k]``.
    OnnxClassifier: points ``[B, N, 3]`` (+ normals ``[B, N, 3]`` for 6-feature models) -> logits ``[B, K]``.
    OnnxSegmenter: points ``[B, N, 3]`` (+ features / normals ``[B, N, F]``, category ``[B]``) -> logits ``[B, N, K]``.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import logging
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, NoReturn, Optional, Tuple, Union

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from ._checks import (
    check_alloc,
    check_finite,
    check_float,
    check_int,
    check_number,
    check_tensor,
    element_size,
    fail,
    is_int,
    trusted_inputs,
    validating,
)
from ._files import atomic_write_bytes
from ._version import __version__
from .checkpoint import build_model_from_checkpoint, inference_settings, load_checkpoint
from .models import GridifiedClassifier, GridifiedSceneSegmenter, GridifiedSegmenter
from .models.scene import FLAT_TOLERANCE
from .nn.grid import RegularGrid
from .nn.gridification import Degridification, Gridification
from .nn.reparam import is_reparameterizable, reparameterize_model
from .ops.grid import box_tensors, grid_knn
from .ops.knn import smallest_by_index
from .registry import TASKS
from .tasks import get_task
from .transforms import check_up_axis, up_axis_rotation

__all__ = [
    "DepthwiseConv3dAs2d",
    "ExportError",
    "ExportReport",
    "OnnxClassifier",
    "OnnxSegmenter",
    "OnnxSceneModel",
    "NODE_CHUNK",
    "grid_axes",
    "dense_grid_knn_unchecked",
    "node_points_bucketed",
    "point_buckets",
    "SEARCHES",
    "gridify_dense_graph",
    "degridify_dense_graph",
    "scene_box_dense",
    "check_exportable",
    "check_task_exportable",
    "depthwise_conv3d_as_2d",
    "dense_bilateral_knn",
    "dense_bilateral_knn_unchecked",
    "dense_edge_index",
    "eval_mode",
    "export_onnx",
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

EXPORT_FORMATS = ("onnx",)
#: What to run when the optional export dependencies are missing.
INSTALL_HINT = "pip install 'gridify[export]'  (onnx, onnxscript, onnxruntime)"
#: The ONNX opsets (default ``ai.onnx`` domain) :func:`export_onnx` writes, both ends included.
#: torch's dynamo exporter builds the graph at opset 18 at least (its torchlib) and converts it with
#: onnxscript's version converter, which reaches 25: a lower request came back as an opset-18 file
#: (after tracebacks on stderr), a higher one as a file onnxruntime rejects. Every opset of the range
#: was exported and checked with onnxruntime (torch 2.13, onnxscript 0.7, onnxruntime 1.32).
ONNX_OPSETS = (18, 25)
#: The opset written when ``opset`` is None (torch.onnx's own default, ``ONNX_DEFAULT_OPSET``).
DEFAULT_OPSET = 20


#: the exportable model classes and their registered names
_MODEL_NAMES = {
    GridifiedClassifier: "gridified_classifier",
    GridifiedSegmenter: "gridified_segmenter",
    GridifiedSceneSegmenter: "scene_segmenter",
}


def _model_name(net: nn.Module) -> str:
    return next(name for cls, name in _MODEL_NAMES.items() if isinstance(net, cls))


class ExportError(RuntimeError):
    """A model (or an export option) that this exporter cannot handle; the message says what."""


def _check_clouds(
    where: str,
    pos: Any,
    name: str,
    k: int = 1,
    dtype: Optional[torch.dtype] = None,
    device: Optional[torch.device] = None,
) -> Tensor:
    """``pos``: a finite floating tensor ``[B, N, 3]``, ``B >= 1``, ``N >= k`` (of ``dtype`` / on
    ``device`` when given); messages name ``name`` and, for a NaN / Inf, the cloud and row."""
    pos = check_tensor(where, name, pos)
    if pos.dim() != 3 or pos.size(-1) != 3 or pos.size(0) == 0:
        fail(where, f"{name} must have shape [B, N, 3] with B >= 1, got {tuple(pos.shape)}")
    check_float(where, name, pos)
    if dtype is not None and pos.dtype != dtype:
        fail(
            where,
            f"{name} must be {str(dtype).replace('torch.', '')} (the model's dtype), got {pos.dtype}; "
            f"convert it with .to({dtype})",
        )
    if device is not None and pos.device != device:
        fail(where, f"{name} is on {pos.device} but the model is on {device}")
    if pos.size(1) < k:
        fail(
            where,
            f"every cloud needs at least k={k} points, got N={pos.size(1)}"
            if k > 1
            else f"every cloud needs at least one point, got N={pos.size(1)}",
        )
    check_finite(where, name, pos.reshape(-1, 3), torch.arange(pos.size(0)).repeat_interleave(pos.size(1)))
    return pos


def _check_dense_size(where: str, what: str, batch: int, num_points: int, num_nodes: int, dtype: torch.dtype) -> None:
    """Refuse (before allocating) a fixed-shape graph whose ``[B, R^3, N]`` distance matrix alone
    exceeds the allocation limit; ``what`` names the arguments that decide the size."""
    nbytes = batch * num_points * num_nodes * element_size(dtype)
    check_alloc(
        where, f"{what} (a [B, R^3, N] = [{batch}, {num_nodes}, {num_points}] {str(dtype)[6:]} distance matrix)", nbytes
    )


# --------------------------------------------------------------------------------------
# the exportable graph
# --------------------------------------------------------------------------------------
def dense_bilateral_knn(pos: Tensor, grid: RegularGrid, k: int) -> Tuple[Tensor, Tensor, Tensor]:
    """Bilateral kNN edges of equally sized clouds ``pos [B, N, 3]`` as fixed-shape index tensors.

    Returns ``(node_points [B, R^3, k], point_nodes [B, N, k'], keep [B, N, k'])`` (see the module
    docstring; ``k' = min(k, R^3)``). Validates its arguments, then runs
    :func:`dense_bilateral_knn_unchecked`. :func:`dense_edge_index` turns the result into the
    ``edge_index`` of :func:`gridify.nn.bilateral_knn`.
    """
    where = "dense_bilateral_knn"
    if not isinstance(grid, RegularGrid):
        fail(where, f"grid must be a RegularGrid, got {type(grid).__name__}")
    k = check_int(where, "k", k)
    pos = _check_clouds(where, pos, "pos", k)
    _check_dense_size(where, f"pos {tuple(pos.shape)}", pos.size(0), pos.size(1), grid.num_nodes, pos.dtype)
    return dense_bilateral_knn_unchecked(pos, k, *grid_tables(grid, pos.device, pos.dtype))


def grid_tables(
    grid: RegularGrid, device: Optional[torch.device] = None, dtype: torch.dtype = torch.float32
) -> Tuple[Tensor, Tensor]:
    """The constants of the traced graph: node positions ``[R^3, 3]`` (``linspace`` per axis, as
    the node -> points search uses) and per-axis node coordinates ``lo + a h`` ``[3, R]`` (as
    :func:`gridify.ops.grid_knn` computes them; the two may differ in the last bit)."""
    if not isinstance(grid, RegularGrid):
        fail("grid_tables", f"grid must be a RegularGrid, got {type(grid).__name__}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        fail("grid_tables", f"dtype must be a floating torch.dtype, got {dtype!r}")
    lo, hi = box_tensors(grid.lower, grid.upper, device, dtype)
    h = (hi - lo) / (grid.resolution - 1)
    axis = lo[:, None] + torch.arange(grid.resolution, device=device).to(dtype) * h[:, None]
    return grid.positions(device, dtype), axis


def _smallest(d: Tensor, k: int) -> Tensor:
    """Columns of the ``k`` smallest entries of every row of ``d [B, M, N]``, ties to the lower column
    as :func:`gridify.ops.knn` breaks them: in the exported graph ONNX ``TopK`` does that by
    definition; run eagerly, ``torch.topk`` does not promise it, so :func:`smallest_by_index` runs."""
    if torch.compiler.is_compiling() or torch.compiler.is_exporting():
        return torch.topk(d, k, dim=2, largest=False, sorted=True).indices
    return smallest_by_index(d.reshape(-1, d.size(2)), k)[1].view(d.size(0), d.size(1), k)


def dense_bilateral_knn_unchecked(pos: Tensor, k: int, nodes: Tensor, axis: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`dense_bilateral_knn` on validated inputs (finite ``[B, N, 3]``, ``N >= k``) and the
    grid's :func:`grid_tables` ``nodes [R^3, 3]``, ``axis [3, R]``; traceable with static ``k``."""
    B, N = pos.shape[:2]
    R = axis.size(1)
    R3 = nodes.size(0)
    d = (nodes[None, :, None, 0] - pos[:, None, :, 0]).pow(2)
    d = d + (nodes[None, :, None, 1] - pos[:, None, :, 1]).pow(2)
    d = d + (nodes[None, :, None, 2] - pos[:, None, :, 2]).pow(2)  # [B, R^3, N], as knn's torch backend
    node_points = _smallest(d, k)
    da = (axis - pos[..., None]).pow(2)  # [B, N, 3, R], as grid_knn
    dist = da[:, :, 0, :, None, None] + da[:, :, 1, None, :, None]
    dist = dist + da[:, :, 2, None, None, :]  # [B, N, R, R, R]: node a R^2 + b R + c
    kk = min(k, R3)
    point_nodes = _smallest(dist.reshape(B, N, R**3), kk)  # ties to the lower node, eagerly as in the graph
    chosen = torch.gather(node_points, 1, point_nodes.reshape(B, N * kk, 1).expand(-1, -1, k))
    own = torch.arange(N, device=pos.device).view(1, N, 1, 1)
    keep = ~(chosen.view(B, N, kk, k) == own).any(-1)
    return node_points, point_nodes, keep


def dense_edge_index(node_points: Tensor, point_nodes: Tensor, keep: Tensor) -> Tensor:
    """The edges of :func:`dense_bilateral_knn` as a :class:`gridify.nn.BipartiteGraph` ``edge_index``.

    ``[2, E]``: global point index ``b N + j`` and global node index ``b R^3 + i``, sorted by
    node, then point (the layout of :func:`gridify.nn.bilateral_knn`).
    """
    where = "dense_edge_index"
    for name, t in (("node_points", node_points), ("point_nodes", point_nodes), ("keep", keep)):
        check_tensor(where, name, t)
        if t.dim() != 3:
            fail(where, f"{name} must have 3 dimensions, got shape {tuple(t.shape)}")
        if name != "keep" and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool):
            fail(where, f"{name} must be an integer tensor, got dtype {t.dtype}")
    if keep.dtype != torch.bool:
        fail(where, f"keep must be a bool tensor, got dtype {keep.dtype}")
    if point_nodes.shape != keep.shape or point_nodes.size(0) != node_points.size(0):
        fail(
            where,
            f"node_points [B, R^3, k], point_nodes [B, N, k'] and keep [B, N, k'] do not fit together: "
            f"{tuple(node_points.shape)}, {tuple(point_nodes.shape)}, {tuple(keep.shape)}",
        )
    for name, t, size in (
        ("node_points", node_points, point_nodes.size(1)),
        ("point_nodes", point_nodes, node_points.size(1)),
    ):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= size):
            fail(where, f"{name} must hold indices in [0, {size}), got values in [{int(t.min())}, {int(t.max())}]")
    B, R3, k = node_points.shape
    N = point_nodes.size(1)
    cloud_pt = torch.arange(B).view(B, 1, 1) * N
    cloud_nd = torch.arange(B).view(B, 1, 1) * R3
    a_point = (node_points + cloud_pt).reshape(-1)
    a_node = (torch.arange(R3).view(1, R3, 1) + cloud_nd).expand(B, R3, k).reshape(-1)
    b_point = (torch.arange(N).view(1, N, 1) + cloud_pt).expand_as(point_nodes)[keep]
    b_node = (point_nodes + cloud_nd)[keep]
    point = torch.cat([a_point, b_point])
    node = torch.cat([a_node, b_node])
    order = torch.argsort(node * (B * N) + point)
    return torch.stack([point[order], node[order]])


def _messages(conv: nn.Module, h_src: Tensor, offset: Tensor) -> Tensor:
    """``phi_msg(h_src, phi_pos(offset))`` of a :class:`gridify.nn.gridification.BipartiteConv`.

    ``h_src`` is ``phi_node`` (times ``msg_node`` for concat messages) at the source points.
    """
    p = conv.phi_pos(offset)
    if conv.message == "product":
        return h_src * p
    return conv.msg_out(nn.functional.gelu(h_src + p))


def gridify_dense(
    module: Gridification, pos: Tensor, x: Tensor, tables: Optional[Tuple[Tensor, Tensor]] = None
) -> Tensor:
    r"""The forward of a :class:`gridify.nn.Gridification` on fixed-shape tensors (traceable).

    ``pos [B, N, 3]`` (finite, ``N >= k``) and ``x [B, N, F]`` -> ``[B, C, R, R, R]``: the same
    result as ``module(pos, x)`` (to float rounding) over the edges of
    :func:`dense_bilateral_knn_unchecked`; points outside the grid box connect to their nearest
    nodes (``outside="allow"``). Aggregations ``mean``, ``sum`` and ``max``. ``tables``: the grid's
    :func:`grid_tables` (computed here when None; pass them when tracing). Validates its
    arguments (outside a trace), then runs the unchecked implementation that the export traces.
    """
    if validating():
        _check_gridify_dense(module, pos, x, tables)
    return _gridify_dense(module, pos, x, tables)


def _check_gridify_dense(module: Any, pos: Any, x: Any, tables: Any) -> None:
    where = "gridify_dense"
    if not isinstance(module, Gridification):
        fail(where, f"module must be a gridify.nn.Gridification, got {type(module).__name__}")
    if module.max_in_degree is not None:
        fail(
            where,
            f"the module caps the in-degree (max_in_degree={module.max_in_degree}); gridify_dense builds "
            f"the uncapped bilateral kNN graph",
        )
    p = next(module.parameters())
    pos = _check_clouds(where, pos, "pos", module.k, p.dtype, p.device)
    x = check_tensor(where, "x", x)
    if x.dim() != 3 or x.shape[:2] != pos.shape[:2] or x.size(2) != module.in_channels:
        fail(
            where,
            f"x must have shape [B, N, F] = [{pos.size(0)}, {pos.size(1)}, {module.in_channels}] (pos' B and "
            f"N, the module's in_channels), got {tuple(x.shape)}",
        )
    if x.dtype != pos.dtype or x.device != pos.device:
        fail(where, f"x must have pos' dtype and device ({pos.dtype} on {pos.device}), got {x.dtype} on {x.device}")
    check_finite(where, "x", x.reshape(-1, x.size(2)), torch.arange(x.size(0)).repeat_interleave(x.size(1)))
    if tables is not None:
        R = module.grid.resolution
        ok = (
            isinstance(tables, (tuple, list))
            and len(tables) == 2
            and all(isinstance(t, Tensor) for t in tables)
            and tuple(tables[0].shape) == (R**3, 3)
            and tuple(tables[1].shape) == (3, R)
            and all(t.dtype == pos.dtype and t.device == pos.device for t in tables)
        )
        if not ok:
            fail(
                where,
                f"tables must be None or the grid's grid_tables(grid, device, dtype): (nodes [{R**3}, 3], "
                f"axis [3, {R}]) of pos' dtype and device",
            )
    _check_dense_size(where, f"pos {tuple(pos.shape)}", pos.size(0), pos.size(1), module.grid.num_nodes, pos.dtype)


def _gridify_dense(
    module: Gridification, pos: Tensor, x: Tensor, tables: Optional[Tuple[Tensor, Tensor]] = None
) -> Tensor:
    """:func:`gridify_dense` on validated inputs (what the export traces): :func:`gridify_dense_graph`
    over :func:`dense_bilateral_knn_unchecked`'s graph."""
    nodes, axis = grid_tables(module.grid, pos.device, pos.dtype) if tables is None else tables
    return gridify_dense_graph(module, pos, x, nodes, dense_bilateral_knn_unchecked(pos, module.k, nodes, axis))


def normalize_points(points: Tensor) -> Tensor:
    """Centre every cloud of ``points [B, N, 3]`` on its centroid and scale it into the unit sphere.

    ``p' = (p - c) / s``, ``c = mean_j p_j``, ``s = max_j |p_j - c|``, computed in float64 (as
    :func:`gridify.api.normalize_cloud`) and returned in ``points``' dtype. A cloud of identical
    points (``s = 0``) maps to the origin. ``points``: a finite floating tensor, ``B, N >= 1``.
    """
    if validating():
        _check_clouds("normalize_points", points, "points")
    return _normalize_points(points)


def _normalize_points(points: Tensor) -> Tensor:
    """:func:`normalize_points` on validated inputs (what the export traces)."""
    p = points.to(torch.float64)
    q = p - p.mean(1, keepdim=True)
    s = q.pow(2).sum(-1).amax(1).sqrt()
    # s = 0 only when every q is 0: divide by 1 there. No tiny clamp constant: the exporter writes
    # Python scalars through float32, where a clamp_min(1e-300) became 0.0 and the graph 0 / 0 = NaN.
    s = torch.where(s > 0, s, torch.ones_like(s))
    return (q / s.view(-1, 1, 1)).to(points.dtype)


def _up_rotation(up_axis: str, dtype: torch.dtype) -> Optional[Tensor]:
    """The ``3 x 3`` rotation to z up of ``up_axis`` (None for ``"z"``: nothing in the graph)."""
    return None if up_axis == "z" else torch.as_tensor(up_axis_rotation(up_axis), dtype=dtype)


def _to_z_up(rotation: Optional[Tensor], inputs: Tuple[Tensor, ...], names: List[str]) -> Tuple[Tensor, ...]:
    """``points`` (and ``normals``) of the inputs rotated to z up (``p @ R^T``); the others as they are."""
    if rotation is None:
        return inputs
    return tuple(t @ rotation.T if name in ("points", "normals") else t for t, name in zip(inputs, names))


class OnnxClassifier(nn.Module):
    """A :class:`gridify.models.GridifiedClassifier` on fixed-shape inputs, ready for ``torch.onnx.export``.

    ``forward(points [B, N, 3], normals [B, N, 3])`` (``normals`` only for models with
    ``in_channels == 6``) -> logits ``[B, K]``: optional normalization (:func:`normalize_points`),
    point features ``x = points'`` (3 features) or ``[points', normals]`` (6, as
    :class:`gridify.Predictor` builds them), :func:`gridify_dense`, then the model's
    ``grid_norm``, ``backbone``, ``pool_grid`` and ``head``. The wrapped model is the given one
    (shared weights); put it in eval mode. Called eagerly, ``forward`` and :meth:`reference`
    check their inputs (finite tensors of the model's dtype and device, ``[B, N, 3]`` with
    ``N >= k``, normals exactly when the model takes them); while traced they do not, so the
    exported graph holds no checks.

    Shapes:
        points ``[B, N, 3]``, normals ``[B, N, 3]`` -> logits ``[B, num_classes]``
    """

    def __init__(self, model: GridifiedClassifier, normalize: bool = True, up_axis: str = "z") -> None:
        super().__init__()
        check_exportable(model, type(self).__name__)
        if not isinstance(normalize, bool):
            fail(type(self).__name__, f"normalize must be True or False, got {normalize!r}")
        self.model = model
        self.normalize = normalize
        self.use_normals = model.in_channels == 6
        self.up_axis = check_up_axis(type(self).__name__, up_axis)
        dtype = next(model.parameters()).dtype
        nodes, axis = grid_tables(model.gridify.grid, dtype=dtype)
        self.register_buffer("nodes", nodes, persistent=False)
        self.register_buffer("axis", axis, persistent=False)
        self.register_buffer("up_rotation", _up_rotation(self.up_axis, dtype), persistent=False)

    @property
    def input_names(self) -> List[str]:
        return ["points", "normals"] if self.use_normals else ["points"]

    def _features(self, points: Tensor, normals: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        if self.up_rotation is not None:  # the file's clouds have another up axis: rotated to z up first
            points = points @ self.up_rotation.T
            normals = None if normals is None else normals @ self.up_rotation.T
        pos = _normalize_points(points) if self.normalize else points
        return pos, (torch.cat([pos, normals], -1) if self.use_normals else pos)

    def check_inputs(self, points: Any, normals: Any = None, where: Optional[str] = None) -> None:
        """Raise ValueError naming what is wrong with ``forward``'s arguments (None when they are fine)."""
        where = where or f"{type(self).__name__}.forward"
        dtype, device = self.nodes.dtype, self.nodes.device
        k = self.model.gridify.k
        points = _check_clouds(where, points, "points", k, dtype, device)
        if self.use_normals:
            if normals is None:
                fail(where, "normals are required: the model takes xyz + normals (in_channels=6)")
            normals = check_tensor(where, "normals", normals)
            if normals.shape != points.shape:
                fail(where, f"normals must have the shape of points {tuple(points.shape)}, got {tuple(normals.shape)}")
            _check_clouds(where, normals, "normals", k, dtype, device)
        elif normals is not None:
            fail(where, "the model takes no normals (in_channels=3); pass the points only")
        _check_dense_size(
            where,
            f"points {tuple(points.shape)}",
            points.size(0),
            points.size(1),
            self.model.gridify.grid.num_nodes,
            dtype,
        )

    def forward(self, points: Tensor, normals: Optional[Tensor] = None) -> Tensor:
        if not validating():  # traced (or called by library code that checked): the graph itself
            return self._forward(points, normals)
        self.check_inputs(points, normals)
        with trusted_inputs():  # checked once here; the nested modules need not repeat it
            return self._forward(points, normals)

    def _forward(self, points: Tensor, normals: Optional[Tensor]) -> Tensor:
        pos, x = self._features(points, normals)
        m = self.model
        z = m.backbone(m.grid_norm(_gridify_dense(m.gridify, pos, x, (self.nodes, self.axis))))
        return m.head(m.pool_grid(z))

    @torch.no_grad()
    def reference(self, points: Tensor, normals: Optional[Tensor] = None) -> Tensor:
        """The same logits through the model's own forward (bilateral kNN graph): the reference path."""
        if validating():
            self.check_inputs(points, normals, f"{type(self).__name__}.reference")
        return self.model(*self._features(points, normals))


def check_exportable(model: Any, where: str = "export_onnx") -> None:
    """Raise :class:`ExportError` naming what makes ``model`` unexportable (None when it is fine)."""
    if not isinstance(model, (GridifiedClassifier, GridifiedSegmenter, GridifiedSceneSegmenter)):
        fail_export(
            where,
            f"{type(model).__name__} is not exportable: the gridified classifier, part segmenter and "
            f"scene segmenter (gridified_classifier, gridified_segmenter, scene_segmenter) have an ONNX "
            f"route",
        )
    if not isinstance(model, GridifiedSceneSegmenter) and model.in_channels not in (3, 6):
        fail_export(
            where,
            f"the model takes {model.in_channels} features per point; only xyz (3) and xyz + "
            f"normals (6) models are exportable (the features gridify.load's Predictor builds)",
        )
    if model.gridify.max_in_degree is not None:
        fail_export(
            where,
            f"the gridification caps the in-degree (max_in_degree={model.gridify.max_in_degree}); "
            f"only the uncapped bilateral kNN graph is exportable",
        )
    p = next(model.parameters())
    if p.dtype != torch.float32 or p.device.type != "cpu":
        fail_export(
            where,
            f"the model's weights are {p.dtype} on {p.device}; the export traces float32 models on "
            f"the CPU (model.float().cpu())",
        )


def fail_export(where: str, msg: str) -> NoReturn:
    raise ExportError(f"{where}: {msg}")


# --------------------------------------------------------------------------------------
# export_onnx
# --------------------------------------------------------------------------------------
@dataclass
class ExportReport:
    """What :func:`export_onnx` wrote.

    ``inputs`` / ``outputs`` map tensor names to shapes (a dimension is an int, or a name such as
    ``"batch"`` when it is dynamic); ``max_abs_diff`` is the largest difference between the
    onnxruntime logits and the PyTorch model's on the check clouds (None without ``verify``).
    """

    path: Path
    format: str
    inputs: Dict[str, List[Union[int, str]]]
    outputs: Dict[str, List[Union[int, str]]]
    normalize: bool
    class_names: List[str]
    max_abs_diff: Optional[float]
    num_bytes: int
    model: str = "gridified_classifier"

    def summary(self) -> str:
        def shapes(d: Dict[str, List[Union[int, str]]]) -> str:
            return ", ".join(f"{k} [{', '.join(map(str, v))}]" for k, v in d.items())

        check = "" if self.max_abs_diff is None else f"; onnxruntime vs PyTorch max |diff| {self.max_abs_diff:.2e}"
        if self.model == "scene_segmenter":
            mapping = "maps every crop (metres) into the grid box"
        else:
            mapping = "normalizes the clouds" if self.normalize else "clouds must be normalized"
        return (
            f"{self.path} ({self.format}, {self.num_bytes / 1e6:.2f} MB): {shapes(self.inputs)} -> "
            f"{shapes(self.outputs)}; {mapping}{check}"
        )


def require_export_dependencies(where: str, verify: bool = True) -> None:
    """Raise ImportError with the ``pip install`` line when onnx / onnxscript (/ onnxruntime) are missing."""
    need = ["onnx", "onnxscript"] + (["onnxruntime"] if verify else [])
    missing = [name for name in need if importlib.util.find_spec(name) is None]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise ImportError(
            f"{where}: the ONNX export needs {', '.join(missing)}, which {verb} not installed; run: {INSTALL_HINT}"
        )


def check_task_exportable(task: Any, model: Any, where: str = "export_onnx") -> None:
    """Refuse (:class:`ExportError`) a ``model`` whose (registered) ``task`` has no export route, with the
    task's reason (:attr:`gridify.tasks.Task.export_reason`); other tasks are left to :func:`check_exportable`."""
    if isinstance(task, str) and task in TASKS:
        t = get_task(task)
        if not t.exportable:
            fail_export(where, f"{type(model).__name__} is not exportable: {t.export_reason}")


def _resolve(model: Any, where: str) -> Tuple[nn.Module, Optional[bool], Optional[List[str]], Optional[int]]:
    """``(network, normalize, class_names, num_points)`` of a path, a Predictor or a bare model
    (None where a bare model does not say)."""
    if isinstance(model, (str, os.PathLike)):
        payload = load_checkpoint(model)
        settings = inference_settings(payload)
        net = build_model_from_checkpoint(payload, reparameterize=True)
        check_task_exportable(payload.get("task"), net, where)
        return net, settings["normalize"], settings["class_names"], settings["num_points"]
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module) and hasattr(model, "normalize"):  # a gridify.Predictor
        check_task_exportable(getattr(model, "task", None), inner, where)
        names = list(getattr(model, "class_names", None) or []) or None
        return inner, bool(model.normalize), names, getattr(model, "num_points", None)
    if isinstance(model, nn.Module):
        return model, None, None, None
    fail(
        where,
        f"model must be a checkpoint path, a gridify.Predictor or a GridifiedClassifier / GridifiedSegmenter / "
        f"GridifiedSceneSegmenter, got {type(model).__name__}",
    )


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """``model`` in eval mode for the duration; afterwards every module gets its own mode back
    through ``train(mode)`` (parents first), which also drops caches filled meanwhile."""
    if not isinstance(model, nn.Module):
        fail("eval_mode", f"model must be a torch.nn.Module, got {type(model).__name__}")
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.train(mode)


@contextlib.contextmanager
def tracing_mode(model: nn.Module) -> Iterator[None]:
    """Put ``model`` in the state the exporter traces, and restore it afterwards.

    * eval mode (:func:`eval_mode`: dropout off, BatchNorm running statistics);
    * parameters with ``requires_grad=False`` under autograd: layers take their gradient-free
      inference paths (direct depthwise convolutions, no FFT) but not the in-place ones, which
      an exporter cannot trace;
    * every 0-dim integer buffer (a layer's recorded resolution, BatchNorm's step counter) becomes
      a plain constant for the duration, since layers read them with ``int()`` to choose their
      geometry and a traced buffer has no value;
    * nested modules trust their inputs (:func:`gridify._checks.trusted_inputs`): a value check is
      a data-dependent branch, which a graph cannot hold.
    """
    if not isinstance(model, nn.Module):
        fail("tracing_mode", f"model must be a torch.nn.Module, got {type(model).__name__}")
    flags = [(p, p.requires_grad) for p in model.parameters()]
    saved = []
    for module in model.modules():
        scalars = [
            n for n, b in module._buffers.items() if b is not None and b.dim() == 0 and not b.is_floating_point()
        ]
        if scalars:
            saved.append((module, dict(module._buffers)))
            for name in scalars:
                module.__dict__[name] = module._buffers.pop(name).clone()
    try:
        for p, _ in flags:
            p.requires_grad_(False)
        with eval_mode(model), torch.enable_grad(), trusted_inputs():  # no data-dependent checks in a graph
            yield
    finally:
        for module, buffers in saved:  # the same buffers, in their original order
            for name in buffers:
                module.__dict__.pop(name, None)
            module._buffers.clear()
            module._buffers.update(buffers)
        for p, flag in flags:
            p.requires_grad_(flag)


def depthwise_conv3d_as_2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    r"""A same-size depthwise 3D cross-correlation as a sum of ``K`` depthwise 2D ones.

        y[b, c, i] = sum_{d < K} conv2d(x_pad[b, c, i + d], w[c, 0, d])        (zero padding, P = K // 2)

    The same values as ``F.conv3d(x, weight, bias, padding=K // 2, groups=C)`` (to float
    rounding): the depth axis is zero-padded by ``P``, its slices become a batch of 2D images,
    each of the ``K`` depth taps is one depthwise ``conv2d`` over them, and the results are
    summed with a shift of ``d``. onnxruntime's grouped 3D convolution is slow (measured, one
    thread: 45.6 ms for ``C = 128, R = 9, K = 9`` against 5.9 ms for this form and 2.3 ms for
    PyTorch's conv3d), so the ONNX export traces this form (:class:`DepthwiseConv3dAs2d`).

    Shapes:
        x ``[B, C, D, H, W]``, weight ``[C, 1, K, K, K]`` (K odd), bias ``[C]`` -> ``[B, C, D, H, W]``
    """
    where = "depthwise_conv3d_as_2d"
    x = check_tensor(where, "x", x)
    weight = check_tensor(where, "weight", weight)
    if x.dim() != 5:
        fail(where, f"x must have shape [B, C, D, H, W], got {tuple(x.shape)}")
    check_float(where, "x", x)
    C, K = x.size(1), weight.shape[-1] if weight.dim() else 0
    if tuple(weight.shape) != (C, 1, K, K, K) or K % 2 == 0:
        fail(
            where,
            f"weight must have shape [C, 1, K, K, K] with C={C} (x's channels) and K odd, got {tuple(weight.shape)}",
        )
    if bias is not None and (not isinstance(bias, Tensor) or tuple(bias.shape) != (C,)):
        fail(
            where,
            f"bias must be None or a tensor [C] = [{C}], got "
            f"{tuple(bias.shape) if isinstance(bias, Tensor) else type(bias).__name__}",
        )
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dtype != x.dtype or t.device != x.device):
            fail(where, f"{name} must have x's dtype and device ({x.dtype} on {x.device}), got {t.dtype} on {t.device}")
    return _depthwise_conv3d_as_2d(x, weight, bias)


def _depthwise_conv3d_as_2d(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    """:func:`depthwise_conv3d_as_2d` on validated inputs (what :class:`DepthwiseConv3dAs2d` traces)."""
    B, C, D, H, W = x.shape
    K = weight.shape[-1]
    P = K // 2
    slices = nn.functional.pad(x, (0, 0, 0, 0, P, P)).transpose(1, 2).reshape(-1, C, H, W)  # [B (D + 2P), C, H, W]
    out: Optional[Tensor] = None
    for d in range(K):
        y = nn.functional.conv2d(slices, weight[:, :, d], padding=P, groups=C).reshape(B, D + 2 * P, C, H, W)
        out = y[:, d : d + D] if out is None else out + y[:, d : d + D]
    out = out.transpose(1, 2)
    return out if bias is None else out + bias.view(1, C, 1, 1, 1)


class DepthwiseConv3dAs2d(TorchFunctionMode):
    """While active, every same-size depthwise ``F.conv3d`` (``groups = C``, weight ``[C, 1, K, K, K]``,
    K odd, stride and dilation 1, padding ``K // 2``) runs as :func:`depthwise_conv3d_as_2d`;
    every other call runs unchanged. The ONNX export traces the backbones under it."""

    NAMES = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")

    def __torch_function__(self, func: Any, types: Any, args: Tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.conv3d:  # F.conv3d is the same function
            a = dict(zip(self.NAMES, args), **kwargs)
            x, w = a["input"], a["weight"]
            K = w.shape[-1]
            same = a.get("padding", 0) in (K // 2, (K // 2,) * 3, [K // 2] * 3, "same")
            if (
                x.dim() == 5
                and tuple(w.shape[1:]) == (1, K, K, K)
                and K % 2 == 1
                and a.get("groups", 1) == w.shape[0] == x.shape[1]
                and same
                and a.get("stride", 1) in (1, (1, 1, 1), [1, 1, 1])
                and a.get("dilation", 1) in (1, (1, 1, 1), [1, 1, 1])
            ):
                return _depthwise_conv3d_as_2d(x, w, a.get("bias"))
        return func(*args, **kwargs)


def _example_inputs(wrapper: OnnxClassifier, batch: int, n: int, seed: int) -> Tuple[Tensor, ...]:
    """Seeded clouds ``[batch, n, 3]`` on a noisy sphere (+ unit normals): inside the grid box when the
    wrapper does not normalize, off-centre and larger when it does (a segmenter: its own
    :meth:`OnnxSegmenter.example_inputs`)."""
    if isinstance(wrapper, OnnxSegmenter):
        return wrapper.example_inputs(batch, n, seed)
    g = torch.Generator().manual_seed(seed)
    dtype = wrapper.nodes.dtype
    direction = nn.functional.normalize(torch.randn(batch, n, 3, generator=g, dtype=torch.float64), dim=-1)
    radius = 0.6 + 0.3 * torch.rand(batch, n, 1, generator=g, dtype=torch.float64)
    grid = wrapper.model.gridify.grid
    lo, hi = (torch.tensor(v, dtype=torch.float64) for v in (grid.lower, grid.upper))
    half = float((hi - lo).min()) / 2
    points = (lo + hi) / 2 + direction * radius * half
    if wrapper.normalize:
        points = points * 3.0 + 2.0
    out = (points.to(dtype),)
    if wrapper.use_normals:
        out += (nn.functional.normalize(torch.randn(batch, n, 3, generator=g, dtype=torch.float64), dim=-1).to(dtype),)
    return out


def _scatter_reduce_rows(self: Any, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True) -> Any:
    """The ONNX of ``aten.scatter_reduce.two`` in the exported graphs: ``ScatterND`` on whole rows.

    torch's exporter writes ``ScatterElements``, which onnxruntime runs element by element (252 ms
    for 98,304 x 64 values on one thread, AMD EPYC, against 5.9 ms for ``ScatterND``: the max
    aggregation of a 16k-point crop's (de-)gridification). The exported models scatter only along
    ``dim=0`` with an index repeated along the rows (``_aggregate_dense``: ``dst[:, None].expand(-1, H)``),
    so its first column is the row index ``ScatterND`` takes."""
    from onnxscript import opset18 as op  # noqa: PLC0415 - an export dependency, imported when exporting

    if dim != 0 or not include_self or reduce not in _ND_REDUCTIONS:
        raise NotImplementedError(f"scatter_reduce(dim={dim}, reduce={reduce!r}, include_self={include_self})")
    rows = op.Slice(index, op.Constant(value_ints=[0]), op.Constant(value_ints=[1]), op.Constant(value_ints=[1]))
    return op.ScatterND(self, rows, src, reduction=_ND_REDUCTIONS[reduce])


#: ``scatter_reduce``'s reductions and ``ScatterND``'s names for them
_ND_REDUCTIONS = {"amax": "max", "amin": "min", "sum": "add", "prod": "mul"}


def _trace(
    wrapper: OnnxClassifier,
    example: Tuple[Tensor, ...],
    dynamic_batch: bool,
    dynamic_points: bool,
    opset: Optional[int],
    where: str,
) -> Any:
    """The ``onnx.ModelProto`` of ``wrapper`` (``torch.onnx.export``, dynamo exporter)."""
    dims: Dict[int, Any] = {}
    if dynamic_batch:
        dims[0] = torch.export.Dim("batch", min=1)
    if dynamic_points:
        dims[1] = torch.export.Dim("num_points", min=wrapper.model.gridify.k)
    shapes: Any = (
        {name: {a: d for a, d in dims.items() if name != "category" or a == 0} or None for name in wrapper.input_names}
        if dims
        else None
    )
    if shapes is not None and isinstance(wrapper, OnnxSegmenter):  # forward(*inputs)
        shapes = {"inputs": tuple(shapes[name] for name in wrapper.input_names)}
    problem = None
    with tracing_mode(wrapper), _quiet_exporter(), DepthwiseConv3dAs2d():
        try:
            program = torch.onnx.export(
                wrapper,
                example,
                None,
                dynamo=True,
                input_names=wrapper.input_names,
                output_names=["logits"],
                dynamic_shapes=shapes,
                custom_translation_table={torch.ops.aten.scatter_reduce.two: _scatter_reduce_rows},
                opset_version=opset,
                verbose=False,
            )
        except Exception as exc:  # noqa: BLE001 - an exporter failure becomes one clear message
            while exc.__cause__ is not None or exc.__context__ is not None:  # the root cause says most
                exc = exc.__cause__ or exc.__context__
            lines = str(exc).strip().splitlines()
            problem = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    if problem is not None:
        fail_export(where, f"torch.onnx could not trace the model ({problem})")
    return program.model_proto


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporter's progress prints, log lines and internal warnings (none is actionable
    for a user: the export either succeeds or raises)."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnx_ir", "onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*was assigned during export.*")  # caches, dropped after
            warnings.filterwarnings("ignore", message=".*shares the same shape constraints.*")  # one Dim per axis
            warnings.filterwarnings("ignore", category=FutureWarning)  # deprecations inside torch.export
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _verify(
    wrapper: OnnxClassifier, data: bytes, checks: List[Tuple[str, Tuple[Tensor, ...]]], atol: float, where: str
) -> Tuple[float, str]:
    """``(largest |onnxruntime - PyTorch|, the check clouds it came from)`` of the logits over the
    labelled check inputs: a NaN / Inf on one side only counts as an infinite difference (a plain
    ``max`` would drop a NaN). PyTorch is the model's own forward; where that differs by more than
    ``atol`` and its graph differs from the file's only by equally near nodes
    (:func:`_node_ties_only`), the model's layers over the file's graph. ExportError when
    onnxruntime cannot load or run the file, or when the model's own forward fails on a check cloud."""
    import onnxruntime as ort

    outputs = []
    problem = None
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        for _, inputs in checks:
            feeds = {n: t.numpy() for n, t in zip(wrapper.input_names, inputs)}
            outputs.append(torch.from_numpy(session.run(["logits"], feeds)[0]))
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types; one clear message
        lines = str(exc).strip().splitlines()
        problem = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    if problem is not None:
        fail_export(
            where, f"onnxruntime {ort.__version__} could not run the exported file ({problem}); nothing was written"
        )
    worst, label = 0.0, checks[0][0]
    for (name, inputs), got in zip(checks, outputs):
        try:
            with _graph_knn_backend(wrapper.model):
                want = wrapper.reference(*inputs)
        except Exception as exc:  # noqa: BLE001 - the model's own failure, named with the clouds
            lines = str(exc).strip().splitlines()
            raise ExportError(
                f"{where}: the model's own forward failed on the check clouds '{name}' "
                f"({type(exc).__name__}: {lines[0] if lines else ''}); nothing was written"
            ) from exc
        diff = _difference(got, want)
        if diff > atol and _node_ties_only(wrapper, inputs):  # the graphs differ by equally near nodes only
            with torch.no_grad(), trusted_inputs():
                diff = _difference(got, wrapper(*inputs))  # then the file must equal PyTorch on its own graph
        if diff > worst:
            worst, label = diff, name
    return worst, label


def _difference(got: Tensor, want: Tensor) -> float:
    """``max |got - want|``, a NaN or Inf on one side only counting as ``inf`` (equal infinities and
    NaNs on both sides as 0)."""
    same = (got == want) | (got.isnan() & want.isnan())
    return float(torch.where(same, 0.0, (got - want).abs().nan_to_num(nan=float("inf"))).max())


def _node_ties_only(wrapper: OnnxClassifier, inputs: Tuple[Tensor, ...]) -> bool:
    """Whether the fixed-shape graph of the check clouds differs from the model's own (bilateral kNN)
    graph, and only by *equally near* grid nodes: some point's ``k'`` nodes are not
    :func:`gridify.ops.grid_knn`'s, but every point's lie at the same squared distances. A point exactly on a symmetry plane of the lattice
    (identical points normalize onto the centre node) has nodes tied at its ``k'``-th place, which
    the graph gives to the lower node index and ``grid_knn`` by its own candidate order; both edge
    sets are correct, so the file is then compared with PyTorch over the graph it holds."""
    m = wrapper.model.gridify
    with torch.no_grad():
        if isinstance(wrapper, OnnxSegmenter):
            pos = wrapper.graph_points(*inputs)
            point_nodes = wrapper.point_nodes(pos)
        else:
            pos = _normalize_points(inputs[0]) if wrapper.normalize else inputs[0]
            point_nodes = dense_bilateral_knn_unchecked(pos, m.k, wrapper.nodes, wrapper.axis)[1]
        B, N = pos.shape[:2]
        kk, R3 = point_nodes.size(2), m.grid.num_nodes
        batch = torch.arange(B).repeat_interleave(N)
        theirs = grid_knn(pos.reshape(-1, 3), kk, m.grid.resolution, m.grid.lower, m.grid.upper, batch)[1]
        theirs = theirs.view(B, N, kk) - (torch.arange(B) * R3).view(B, 1, 1)
        nodes = m.grid.positions(dtype=torch.float64)

        def sorted_distances(idx: Tensor) -> Tensor:
            return (nodes[idx] - pos.double().unsqueeze(2)).pow(2).sum(-1).sort(-1).values

        if torch.equal(point_nodes.sort(-1).values, theirs.sort(-1).values):
            return False  # the same nodes: the difference is not a tie, the model's own forward decides
        return bool(torch.allclose(sorted_distances(point_nodes), sorted_distances(theirs), rtol=1e-9, atol=1e-12))


@contextlib.contextmanager
def _graph_knn_backend(model: GridifiedClassifier) -> Iterator[None]:
    """The model's node -> points search on the ``torch`` backend for the duration: the float
    arithmetic the exported graph reproduces. Near-ties (distances equal in float32, not in
    float64: dense degenerate clouds hold some) may otherwise go another way on the KD-tree,
    which ranks in float64, and move a logit by ~1e-4 without either graph being wrong."""
    saved = model.gridify.knn_backend
    model.gridify.knn_backend = "torch"
    try:
        yield
    finally:
        model.gridify.knn_backend = saved


def _check_inputs(
    wrapper: OnnxClassifier,
    example: Tuple[Tensor, ...],
    batch_size: Optional[int],
    num_points: Optional[int],
    n: int,
    seed: int,
) -> List[Tuple[str, Tuple[Tensor, ...]]]:
    """The labelled clouds of the parity check: the traced example, random clouds of another size
    (dynamic axes), and the degenerate clouds (:func:`_degenerate_inputs`) at the traced ``N`` and,
    with a dynamic ``N``, at ``N = k``. ``batch_size``: the fixed batch (None: dynamic)."""
    k = wrapper.model.gridify.k
    checks = [(f"random clouds (N={n})", example)]
    other = num_points or max(k, n // 2 + 1)
    checks.append((f"random clouds (N={other})", _example_inputs(wrapper, batch_size or 3, other, seed + 1)))
    sizes = [n] if num_points is not None else [n, k]
    if num_points is None:
        checks.append((f"random clouds (N=k={k})", _example_inputs(wrapper, batch_size or 2, k, seed + 2)))
    for size in sizes:
        checks += _degenerate_inputs(wrapper, batch_size or 1, size, seed + 3)
    return checks


def _degenerate_inputs(wrapper: OnnxClassifier, batch: int, n: int, seed: int) -> List[Tuple[str, Tuple[Tensor, ...]]]:
    """Seeded degenerate clouds ``[batch, n, 3]``, labelled: identical points, two points repeated,
    collinear and coplanar points (placed as :func:`_example_inputs` places its clouds). Where a
    graph divides by a spread, compares distances or ties, these are the clouds that break it."""
    g = torch.Generator().manual_seed(seed)
    f64 = torch.float64
    basis = torch.linalg.qr(torch.randn(batch, 3, 3, generator=g, dtype=f64))[0]  # per cloud: 3 orthonormal axes
    centre = 0.3 * (torch.rand(batch, 1, 3, generator=g, dtype=f64) - 0.5)
    t = 1.1 * torch.rand(batch, n, 2, generator=g, dtype=f64) - 0.55  # |centre + t0 e0 + t1 e1| < 1
    two = torch.where(torch.arange(n).view(1, n, 1) % 2 == 0, centre, -centre)
    shapes = {
        "identical points": centre.expand(batch, n, 3),
        "two points repeated": two,
        "collinear points": centre + t[..., :1] * basis[:, None, :, 0],
        "coplanar points": centre + t[..., :1] * basis[:, None, :, 0] + t[..., 1:] * basis[:, None, :, 1],
    }
    return [(f"{name} (N={n})", _place(wrapper, u, g)) for name, u in shapes.items()]


def _place(wrapper: OnnxClassifier, u: Tensor, g: torch.Generator) -> Tuple[Tensor, ...]:
    """Clouds ``u`` (float64, within the unit ball) in the grid box as :func:`_example_inputs` places
    them (off-centre and larger when the wrapper normalizes), plus seeded unit normals (a segmenter:
    :meth:`OnnxSegmenter.place`)."""
    if isinstance(wrapper, OnnxSegmenter):
        return wrapper.place(u, g)
    grid = wrapper.model.gridify.grid
    lo, hi = (torch.tensor(v, dtype=torch.float64) for v in (grid.lower, grid.upper))
    points = (lo + hi) / 2 + u * 0.9 * float((hi - lo).min()) / 2
    if wrapper.normalize:
        points = points * 3.0 + 2.0
    dtype = wrapper.nodes.dtype
    out = (points.contiguous().to(dtype),)
    if wrapper.use_normals:
        out += (nn.functional.normalize(torch.randn(u.shape, generator=g, dtype=torch.float64), dim=-1).to(dtype),)
    return out


def _shapes(values: Any) -> Dict[str, List[Union[int, str]]]:
    """Name -> shape (ints, or the names of dynamic axes) of ONNX graph inputs / outputs."""
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}


def export_onnx(
    model: Any,
    path: Union[str, "os.PathLike[str]"],
    *,
    num_points: Optional[int] = None,
    batch_size: Optional[int] = None,
    normalize: Optional[bool] = None,
    verify: bool = True,
    atol: float = 1e-4,
    opset: Optional[int] = None,
    seed: int = 0,
    progress: Optional[Callable[[str], None]] = None,
    up_axis: str = "z",
) -> ExportReport:
    """Export a trained gridified classifier or segmenter to a self-contained ONNX file (runs without gridify).

    A classifier's file computes :class:`OnnxClassifier`: inputs ``points [B, N, 3]`` (and
    ``normals [B, N, 3]`` for models trained with normals), output ``logits [B, K]``. A part or
    scene segmenter's file computes :class:`OnnxSegmenter`: per-point ``logits [B, N, K]`` of
    ``points [B, N, 3]`` (+ ``normals`` / ``category [B]`` for part segmenters trained with them,
    + ``features [B, N, F]`` for scene segmenters with per-point features); a scene segmenter's
    cloud is one crop, and :class:`OnnxSceneModel` covers a whole scan with crops as
    :meth:`gridify.Predictor.predict` does. The metadata records the class names, the
    normalization, ``k``, ``R``, the gridify version (a scene segmenter's extent, features, voxel size,
    crop size). The graph costs time ``O(B N R^3)`` (brute-force distances), memory ``O(B N R^3)``
    (classifier) or ``O(B N`` :data:`NODE_CHUNK` ``)`` (segmenter: its node search runs in blocks).

    Args:
        model: a checkpoint path (``model.pt`` / ``.ckpt``, folded for inference), a
            :class:`gridify.Predictor` or a :class:`gridify.models.GridifiedClassifier`,
            :class:`~gridify.models.GridifiedSegmenter` or :class:`~gridify.models.GridifiedSceneSegmenter`.
        path: the ``.onnx`` file to write, a ``str`` or ``os.PathLike`` (atomically: the file
            appears complete or not at all; missing parent folders are created). Checked
            before anything runs: not a folder or other non-file, and its folder creatable.
        num_points: a fixed number of points per cloud; None (default): a dynamic axis, any
            ``N >= k`` (onnxruntime rejects smaller clouds in its TopK). The file runs the network
            once on the given points; the Predictor's resampling of other sizes to the training
            size (and its vote over subsets) is not part of it.
        batch_size: a fixed number of clouds; None (default): a dynamic axis.
        normalize: centre and scale every cloud into the unit sphere inside the graph (default:
            as the checkpoint / Predictor says, True for a bare model). Without it the points
            must already lie in the grid box.
        verify: run the file with onnxruntime on seeded clouds (the traced shape, other sizes and
            ``N = k`` for dynamic axes; random and degenerate: identical, repeated, collinear, coplanar)
            against the model's PyTorch forward; a difference above ``atol`` (NaN/Inf on one side only:
            infinite) raises, naming the check clouds, and nothing is written.
        opset: the file's ONNX opset, in :data:`ONNX_OPSETS` (18 to 25); None: :data:`DEFAULT_OPSET` (20).
        seed: seed of the example / check clouds.
        up_axis: the clouds' up direction (:data:`gridify.transforms.UP_AXES`): not ``"z"``: rotated to z up
            inside the graph, as ``predict --up-axis`` does; in the metadata (``up_axis``).
        progress: called with a line before each stage (tracing, checking, writing), e.g. ``print``.

    Raises:
        ExportError: a model or option that is not exportable (the message names it; e.g. an
            MRConv model that never ran a forward, whose folded kernels would be placeholders),
            a failed check or a failed write. ImportError: onnx / onnxscript / onnxruntime
            missing (with the ``pip install`` line). ValueError: bad arguments (the message
            names the argument), raised before any tracing.
    """
    where = "export_onnx"
    target, num_points, batch_size, atol, opset = _check_export_args(
        where, path, num_points, batch_size, normalize, verify, atol, opset, seed
    )
    say = _progress(where, progress)
    up_axis = check_up_axis(where, up_axis)
    net, stored_normalize, class_names, train_points = _resolve(model, where)
    check_exportable(net, where)
    n = _export_num_points(net, num_points, batch_size, train_points, where)
    require_export_dependencies(where, verify)
    wrapper = _folded_wrapper(net, (stored_normalize is not False) if normalize is None else normalize, where, up_axis)
    example = _example_inputs(wrapper, batch_size or 2, n, seed)
    say(f"tracing {type(wrapper).__name__} ({n} points per cloud) to ONNX opset {opset}")
    proto, names = _onnx_model(model, net, wrapper, example, class_names, batch_size, num_points, opset, where)
    data = proto.SerializeToString()
    diff = None
    if verify:
        say("checking the file against PyTorch in onnxruntime (random and degenerate clouds, other sizes)")
        diff = _checked(wrapper, data, example, batch_size, num_points, n, seed, atol, where)
    say(f"writing {target}")
    return _write_export(target, data, proto, wrapper, names, diff, net, where)


def _progress(where: str, progress: Any) -> Callable[[str], None]:
    """``progress`` checked (None or a callable taking a line), or a callable that does nothing."""
    if progress is not None and not callable(progress):
        fail(where, f"progress must be None or callable as progress(line), got {type(progress).__name__}")
    return progress or (lambda line: None)


def _export_num_points(
    net: nn.Module, num_points: Optional[int], batch_size: Optional[int], train_points: Optional[int], where: str
) -> int:
    """The traced points per cloud ``N`` (checked against ``k`` and the dense graph's memory)."""
    k = net.gridify.k
    if num_points is not None and num_points < k:
        fail(where, f"num_points={num_points} is below k={k}: every grid node takes its k nearest points")
    scene = isinstance(net, GridifiedSceneSegmenter)
    n = num_points or (4096 if scene else max(int(train_points or 1024), k + 1))
    block = min(net.gridify.grid.num_nodes, NODE_CHUNK if not isinstance(net, GridifiedClassifier) else 1 << 62)
    _check_dense_size(where, f"num_points={n}, batch_size={batch_size or 3}", batch_size or 3, n, block, torch.float32)
    return n


def _onnx_model(
    model: Any,
    net: nn.Module,
    wrapper: Any,
    example: Tuple[Tensor, ...],
    class_names: Optional[List[str]],
    batch_size: Optional[int],
    num_points: Optional[int],
    opset: int,
    where: str,
) -> Tuple[Any, List[str]]:
    """``(proto, class names)``: the wrapper traced to an ONNX model of ``opset``, with its metadata."""
    _first_run(wrapper, example, where)
    proto = _trace(wrapper, example, batch_size is None, num_points is None, opset, where)
    _check_written_opset(proto, opset, where)
    names = class_names or [f"class{i}" for i in range(net.num_classes)]
    _set_metadata(proto, wrapper, names, _scene_settings(model) if isinstance(net, GridifiedSceneSegmenter) else None)
    return proto, names


def _write_export(
    target: Path,
    data: bytes,
    proto: Any,
    wrapper: Any,
    names: List[str],
    diff: Optional[float],
    net: nn.Module,
    where: str,
) -> ExportReport:
    """Write the serialized model ``data`` to ``target`` atomically and report what was written."""
    try:
        target = atomic_write_bytes(target, data)
    except OSError as exc:  # a folder removed or made read-only meanwhile, a full disk: nothing is left behind
        fail_export(where, f"could not write path={str(target)!r} ({exc.strerror or exc}); nothing was written")
    return ExportReport(
        path=target,
        format="onnx",
        inputs=_shapes(proto.graph.input),
        outputs=_shapes(proto.graph.output),
        normalize=wrapper.normalize,
        class_names=names,
        max_abs_diff=diff,
        num_bytes=len(data),
        model=_model_name(net),
    )


def _check_written_opset(proto: Any, opset: int, where: str) -> None:
    written = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if written != opset:
        fail_export(
            where, f"torch.onnx wrote opset {written} instead of the requested opset={opset}; nothing was written"
        )


def _checked(
    wrapper: Any,
    data: bytes,
    example: Tuple[Tensor, ...],
    batch_size: Optional[int],
    num_points: Optional[int],
    n: int,
    seed: int,
    atol: float,
    where: str,
) -> float:
    """The largest onnxruntime - PyTorch difference over the check clouds; ExportError above ``atol``."""
    checks = _check_inputs(wrapper, example, batch_size, num_points, n, seed)
    with eval_mode(wrapper):
        diff, label = _verify(wrapper, data, checks, atol, where)
    if not diff <= atol:
        fail_export(
            where,
            f"onnxruntime's logits differ from PyTorch's by {diff:.3g} > atol={atol:g} on the check "
            f"clouds '{label}' (a NaN or Inf on one side counts as inf); nothing was written",
        )
    return diff


def _scene_settings(model: Any) -> Dict[str, Any]:
    """The crops a scene segmenter was trained on, from its checkpoint (a path) or Predictor:
    ``features`` (names), ``voxel_size`` and ``max_points`` where recorded."""
    out: Dict[str, Any] = {}
    meta = load_checkpoint(model) if isinstance(model, (str, os.PathLike)) else (getattr(model, "meta", None) or {})
    data = (meta.get("config") or {}).get("data") or {}
    info = meta.get("info") or {}
    features = info.get("features", data.get("features"))
    if isinstance(features, str):
        features = [features]
    if features is not None:
        out["features"] = list(features)
    for key in ("voxel_size", "max_points"):
        value = info.get(key, data.get(key))
        if value is not None:
            out[key] = value
    return out


def _check_export_args(
    where: str,
    path: Any,
    num_points: Any,
    batch_size: Any,
    normalize: Any,
    verify: Any,
    atol: Any,
    opset: Any,
    seed: Any,
) -> Tuple[Path, Optional[int], Optional[int], float, int]:
    """:func:`export_onnx`'s arguments, checked before anything is traced:
    ``(target path, num_points, batch_size, atol, opset)``."""
    target = _check_output_path(where, path)
    num_points = check_int(where, "num_points", num_points, 1, allow_none=True)
    batch_size = check_int(where, "batch_size", batch_size, 1, allow_none=True)
    atol = check_number(where, "atol", atol)
    opset = _check_opset(where, opset)
    check_int(where, "seed", seed, 0)
    if not isinstance(verify, bool):
        fail(where, f"verify must be True or False, got {verify!r}")
    if normalize is not None and not isinstance(normalize, bool):
        fail(where, f"normalize must be None, True or False, got {normalize!r}")
    return target, num_points, batch_size, atol, opset


def _folded_wrapper(
    net: nn.Module, normalize: bool, where: str, up_axis: str = "z"
) -> Union["OnnxClassifier", "OnnxSegmenter"]:
    """The :class:`OnnxClassifier` of ``net``, on a folded copy when ``net`` has unfolded
    multi-branch layers (they cannot be traced); placeholder kernels raise :class:`ExportError`."""
    _check_folded_layers(net, where, before=True)
    if any(is_reparameterizable(m) and not m.reparameterized for m in net.modules()):
        net = copy.deepcopy(net)
        reparameterize_model(net)
        _check_folded_layers(net, where, before=False)
    if isinstance(net, GridifiedClassifier):
        return OnnxClassifier(net, normalize=normalize, up_axis=up_axis)
    return OnnxSegmenter(net, normalize=normalize, up_axis=up_axis)


def _first_run(wrapper: "OnnxClassifier", example: Tuple[Tensor, ...], where: str) -> None:
    """Run the model once before tracing: lazy initialization (a CCNN fixes its kernel scale on its
    first input), and the model's own failure named as an :class:`ExportError`."""
    with eval_mode(wrapper):
        try:
            wrapper.reference(*example)
        except Exception as exc:  # noqa: BLE001 - the model's own failure, named before any tracing
            lines = str(exc).strip().splitlines()
            raise ExportError(
                f"{where}: the model's own forward failed on the example clouds "
                f"({type(exc).__name__}: {lines[0] if lines else ''})"
            ) from exc


def _check_opset(where: str, opset: Any) -> int:
    """``opset`` as an int in :data:`ONNX_OPSETS` (None: :data:`DEFAULT_OPSET`)."""
    lo, hi = ONNX_OPSETS
    if opset is None:
        return DEFAULT_OPSET
    if not is_int(opset):
        fail(where, f"opset must be an int from {lo} to {hi} or None, got {opset!r}")
    value = int(opset)
    if not lo <= value <= hi:
        fail(
            where,
            f"opset={opset!r} is not supported: the exporter writes ONNX opsets {lo} to {hi} (None: {DEFAULT_OPSET})",
        )
    return value


def _check_output_path(where: str, path: Any) -> Path:
    """``path`` as a :class:`~pathlib.Path` of a file that can be written: a ``str`` / ``os.PathLike``,
    not an existing folder or other non-file, its nearest existing ancestor a writable folder."""
    if not isinstance(path, (str, os.PathLike)):
        fail(where, f"path must be a str or os.PathLike (the .onnx file to write), got {type(path).__name__}")
    raw = os.fspath(path)
    if not isinstance(raw, str):
        fail(where, f"path must name the file as text, got {type(raw).__name__} {raw!r}")
    if not raw:
        fail(where, "path is empty; give the .onnx file to write")
    if "\0" in raw:
        fail(where, f"path contains a NUL character: {raw!r}")
    if raw.endswith(os.sep) or (os.altsep and raw.endswith(os.altsep)):
        fail(
            where,
            f"path={raw!r} ends with a separator, so it names a folder; give the file, e.g. "
            f"{os.path.join(raw, 'model.onnx')!r}",
        )
    target = Path(raw)
    if os.path.isdir(target):
        fail(where, f"path={raw!r} is a folder; give the file to write, e.g. {str(target / 'model.onnx')!r}")
    if os.path.lexists(target) and not os.path.isfile(target):
        fail(
            where,
            f"path={raw!r} exists and is not a regular file (a device, socket, pipe or broken link); "
            f"it would be replaced",
        )
    ancestor = target.absolute().parent
    while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not os.path.isdir(ancestor):
        fail(where, f"path={raw!r} cannot be created: {str(ancestor)!r} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        fail(where, f"path={raw!r} cannot be written: no permission to create files in {str(ancestor)!r}")
    if ancestor == target.absolute().parent:  # the folder exists: try what the final write does
        try:
            fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=str(ancestor))
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            fail(
                where,
                f"path={raw!r} cannot be written: cannot create a file in {str(ancestor)!r} ({exc.strerror or exc})",
            )
    return target


def _check_folded_layers(net: nn.Module, where: str, before: bool) -> None:
    """ExportError when a reparameterizable layer (MRConv) is folded into a placeholder kernel: it
    was folded before it saw any input and without a resolution, so it has no inference form."""
    bad = [
        name or type(m).__name__
        for name, m in net.named_modules()
        if is_reparameterizable(m)
        and m.reparameterized
        and hasattr(m, "folded_resolution")
        and int(getattr(m, "folded_resolution")) == 0
    ]
    if not bad:
        return
    layers = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    if before:
        fail_export(
            where,
            f"the model's MRConv layers ({layers}) were folded (reparameterize()) before they saw any "
            f"input and without a resolution, so their kernels are placeholders; load folded weights "
            f"(a checkpoint written by export_model), or rebuild the model, run it once and fold it",
        )
    fail_export(
        where,
        f"the model's MRConv layers ({layers}) have never seen an input, so folding them into their "
        f"inference form gives placeholder kernels (MRConv3d: reparameterize() ran before the layer "
        f"saw any input and without a resolution); run the model once on a cloud before exporting "
        f"(model.eval(); model(points, features)), or build its MRConv layers with resolution=R",
    )


def _set_metadata(
    proto: Any,
    wrapper: Union[OnnxClassifier, "OnnxSegmenter"],
    class_names: List[str],
    scene: Optional[Dict[str, Any]] = None,
) -> None:
    """Record what a deployment needs in the ONNX file's ``metadata_props`` (strings): for a scene
    segmenter also its ``extent`` and, from the checkpoint, the ``features`` (names, in order),
    ``voxel_size`` and ``max_points`` of its training crops (``scene``)."""
    import onnx

    net = wrapper.model
    name = _model_name(net)
    props = {
        "gridify_version": __version__,
        "model": name,
        "class_names": json.dumps(class_names),
        "normalize": json.dumps(wrapper.normalize),
        "in_channels": str(net.in_channels),
        "inputs": json.dumps(wrapper.input_names),
        "k": str(net.gridify.k),
        "resolution": json.dumps(net.gridify.resolution),
        "up_axis": wrapper.up_axis,
    }
    if isinstance(net, GridifiedSceneSegmenter):
        props["extent"] = json.dumps(net.extent)
        props.update({key: json.dumps(value) for key, value in (scene or {}).items()})
    onnx.helper.set_model_props(proto, props)
    if isinstance(wrapper, OnnxClassifier):
        proto.doc_string = (
            "gridify gridified classifier: points [B, N, 3]"
            + (" + normals [B, N, 3]" if wrapper.use_normals else "")
            + " -> logits [B, K]"
            + (
                "; clouds are centred and scaled into the unit sphere inside the graph"
                if wrapper.normalize
                else "; clouds must already be normalized into the grid box"
            )
        )
    elif wrapper.scene:
        names = ", ".join((scene or {}).get("features") or []) or "as the checkpoint records"
        extra = f" + features [B, N, {wrapper.num_features}] ({names})" if wrapper.num_features else ""
        proto.doc_string = (
            f"gridify scene segmenter: points [B, N, 3] in metres{extra} -> logits [B, N, K]; every "
            f"cloud is one crop (its box is mapped into the grid inside the graph); cover a larger "
            f"scene with crops as training did"
        )
    else:
        proto.doc_string = (
            "gridify part segmenter: points [B, N, 3]"
            + (" + normals [B, N, 3]" if wrapper.use_normals else "")
            + (" + category [B] int64" if wrapper.num_categories else "")
            + " -> logits [B, N, K]"
            + (
                "; clouds are normalized inside the graph"
                if wrapper.normalize
                else "; clouds must already be normalized into the grid box"
            )
        )


# --------------------------------------------------------------------------------------
# segmenters: per-axis grids, node chunks, the de-gridification over the transposed edges
# --------------------------------------------------------------------------------------
#: Grid nodes per block of the node -> points search of the segmenter graph: its distance block is
#: ``[B, NODE_CHUNK, N]`` (a 16,384-point crop: 64 MiB), so a scene grid of 8,192 nodes never holds
#: the whole ``[B, R^3, N]`` matrix.
NODE_CHUNK = 1024


#: The node -> points searches of the segmenter graph (:class:`OnnxSegmenter` ``search``): ``"brute"``
#: forms every node-point distance (in blocks of ``node_chunk`` nodes); ``"bucketed"``
#: (:func:`node_points_bucketed`) looks in the nearest buckets of a kd split of the points and
#: falls back to every point only for the nodes it cannot prove exact. Both give the same neighbours.
SEARCHES = ("brute", "bucketed")
#: ``2 ** BUCKET_LEVELS`` point buckets (equal sizes, kd splits) in the bucketed search
BUCKET_LEVELS = 9
#: buckets a node looks in before its exactness check
BUCKETS_SEARCHED = 8
#: points per bucket at least (a smaller cloud is padded with points at infinity)
BUCKET_MIN_POINTS = 8


def _gather_rows(table: Tensor, idx: Tensor) -> Tensor:
    """``table[b, idx[b, ...]]`` for ``table [B, T, ...]`` and ``idx [B, ...]`` (one flat gather)."""
    B, T = table.shape[:2]
    offset = (torch.arange(B, device=idx.device) * T).view(B, *([1] * (idx.dim() - 1)))
    return table.reshape(B * T, *table.shape[2:])[idx + offset]


def _finite_bounds(pts: Tensor, dim: int) -> Tuple[Tensor, Tensor]:
    """Per-axis min and max of the finite rows of ``pts [..., 3]`` along ``dim`` (inf / -inf: none)."""
    finite = torch.isfinite(pts[..., :1])
    lo = torch.where(finite, pts, torch.full_like(pts, float("inf"))).amin(dim)
    hi = torch.where(finite, pts, torch.full_like(pts, float("-inf"))).amax(dim)
    return lo, hi


def point_buckets(pos: Tensor, levels: int, min_points: int) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """A kd split of every cloud of ``pos [B, N, 3]`` into ``G = 2 ** levels`` buckets of equal size ``M``:
    ``levels`` times, every bucket is sorted along its widest axis and cut in half. The clouds are
    padded to ``Np = G M >= max(N, G min_points)`` points with points at infinity (last, never
    anyone's neighbour). Returns the padded points ``[B, Np, 3]``, the members ``[B, G, M]`` (point
    indices) and every bucket's box ``lo, hi [B, G, 3]`` (of its finite points; ``inf, -inf`` when none).
    Traceable: the sizes follow ``N`` symbolically."""
    B, N = pos.shape[:2]
    G = 2**levels
    Np = torch.sym_max(N, G * min_points)
    Np = (Np + G - 1) // G * G
    pad = torch.full((B, Np - N, 3), float("inf"), dtype=pos.dtype, device=pos.device)
    padded = torch.cat([pos, pad], 1)
    idx = torch.arange(Np, device=pos.device).expand(B, Np)
    for level in range(levels):
        seg = idx.reshape(B, 2**level, -1)
        pts = _gather_rows(padded, seg)  # [B, 2^l, S, 3]
        lo, hi = _finite_bounds(pts, 2)
        spread = hi - lo
        axis = torch.where(torch.isfinite(spread), spread, torch.zeros_like(spread)).argmax(-1)
        key = torch.gather(pts, 3, axis[:, :, None, None].expand(-1, -1, pts.size(2), 1)).squeeze(-1)
        idx = torch.gather(seg, 2, torch.argsort(key, dim=2)).reshape(B, Np)
    members = idx.reshape(B, G, -1)
    lo, hi = _finite_bounds(_gather_rows(padded, members), 2)
    return padded, members, lo, hi


def _squared_distances(c: Tensor, p: Tensor) -> Tensor:
    """``|c - p|^2`` summed x, y, z in that order (as :func:`gridify.ops.knn`'s torch backend), ``c [..., 3]``
    broadcast against ``p [..., 3]``."""
    d = (c[..., 0] - p[..., 0]).pow(2)
    d = d + (c[..., 1] - p[..., 1]).pow(2)
    return d + (c[..., 2] - p[..., 2]).pow(2)


def _bucket_bounds(lo: Tensor, hi: Tensor, axes: Tuple[Tensor, Tensor, Tensor]) -> Tensor:
    """``lb [B, R, G]``: the squared distance from every grid node to every bucket box ``lo, hi [B, G, 3]``,
    per axis on the node coordinates ``axes`` and summed x, y, z (node ``(a Ry + b) Rz + c``). Every
    term is at most the point's own (rounding is monotone), so ``lb`` never exceeds a member's distance."""
    gaps = []
    for a, ax in enumerate(axes):  # [B, R_a, G]
        lo_a, hi_a, c = lo[:, None, :, a], hi[:, None, :, a], ax[None, :, None]
        gaps.append(((lo_a - c).clamp(min=0) + (c - hi_a).clamp(min=0)).pow(2))
    lb = gaps[0][:, :, None, None] + gaps[1][:, None, :, None]
    return (lb + gaps[2][:, None, None, :]).reshape(lo.size(0), -1, lo.size(1))


def node_points_bucketed(
    pos: Tensor,
    k: int,
    nodes: Tensor,
    axes: Tuple[Tensor, Tensor, Tensor],
    node_chunk: int = NODE_CHUNK,
    levels: int = BUCKET_LEVELS,
    searched: int = BUCKETS_SEARCHED,
    min_points: int = BUCKET_MIN_POINTS,
) -> Tensor:
    r"""``A`` of :func:`dense_grid_knn_unchecked` (node -> its ``k`` nearest points, ties to the lower
    point) without forming every node-point distance, exactly.

    The points are split into buckets (:func:`point_buckets`). A node ``c`` looks at the points of
    the ``t`` buckets whose boxes are nearest (``_bucket_bounds``) and takes the ``k + 1``
    nearest of them (same distances). Every point outside those buckets is at least
    ``lb_{(t+1)}(c)`` away, the ``(t+1)``-th smallest bound: where the ``k``-th distance found is
    below it and the ``k + 1`` distances are all different, no other point and no other order can
    be the answer, and it is the exact one. The other nodes (few: a node far from every point, tied
    distances) search every point with the brute force's tie rule. Node blocks of ``node_chunk``
    bound the memory.

    Shapes:
        pos ``[B, N, 3]`` (finite, ``N >= k``), nodes ``[R, 3]`` (the lattice of ``axes``) -> node_points ``[B, R, k]``
    """
    B, N = pos.shape[:2]
    t = min(searched, 2**levels - 1)
    padded, members, lo, hi = point_buckets(pos, levels, max(min_points, -(-(k + 1) // t)))  # t M > k candidates
    bounds, nearest = torch.topk(_bucket_bounds(lo, hi, axes), t + 1, dim=2, largest=False, sorted=True)
    blocks = []
    for s in range(0, nodes.size(0), node_chunk):
        c = nodes[s : s + node_chunk]
        cand = _gather_rows(members, nearest[:, s : s + node_chunk, :t]).reshape(B, c.size(0), -1)  # [B, C, t M]
        d = _squared_distances(c[None, :, None], _gather_rows(padded, cand))
        dist, local = torch.topk(d, k + 1, dim=2, largest=False, sorted=True)
        found = torch.gather(cand, 2, local[..., :k])
        tied = (dist[..., 1:] == dist[..., :-1]).any(-1)
        unproven = ((dist[..., k - 1] >= bounds[:, s : s + node_chunk, t]) | tied).nonzero()  # [F, 2]
        brute = _squared_distances(c[unproven[:, 1]].unsqueeze(1), pos[unproven[:, 0]])  # [F, N]
        found = found.index_put((unproven[:, 0], unproven[:, 1]), _smallest(brute.unsqueeze(0), k).squeeze(0))
        blocks.append(found)
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, 1)


def grid_axes(
    grid: RegularGrid, device: Optional[torch.device] = None, dtype: torch.dtype = torch.float32
) -> Tuple[Tensor, Tensor, Tensor]:
    """The node coordinates of every axis ``lo_a + t h_a`` (``[Rx]``, ``[Ry]``, ``[Rz]``), as
    :func:`gridify.ops.grid_knn` computes them (a per-axis :func:`grid_tables` ``axis``)."""
    if not isinstance(grid, RegularGrid):
        fail("grid_axes", f"grid must be a RegularGrid, got {type(grid).__name__}")
    lo, hi = box_tensors(grid.lower, grid.upper, device, dtype)
    return tuple(
        lo[a] + torch.arange(r, device=device).to(dtype) * ((hi[a] - lo[a]) / (r - 1))  # type: ignore
        for a, r in enumerate(grid.shape)
    )


def dense_grid_knn_unchecked(
    pos: Tensor,
    k: int,
    nodes: Tensor,
    axes: Tuple[Tensor, Tensor, Tensor],
    node_chunk: int = NODE_CHUNK,
    search: str = "brute",
) -> Tuple[Tensor, Tensor, Tensor]:
    r"""The fixed-shape bilateral kNN graph of :func:`dense_bilateral_knn_unchecked` on any grid
    ``(Rx, Ry, Rz)``, in bounded memory (traceable with static ``k``).

    ``A`` (node -> its ``k`` nearest points) runs block by block over ``node_chunk`` nodes
    (``[B, node_chunk, N]`` distances at a time), or, with ``search="bucketed"``, through
    :func:`node_points_bucketed` (the same neighbours from far fewer distances). ``P`` (point -> its ``k' = min(k, R^3)`` nearest
    nodes) looks only at the ``m_a = min(k', R_a)`` nearest coordinates of every axis: a node whose
    ``x`` coordinate is not among them has ``m_a >= k'`` nodes (same ``y, z``) that are nearer, or
    as near and of lower index, so the ``k'`` nearest lie among the ``m_x m_y m_z`` candidates;
    these are listed in increasing node index, so ties go to the lower node as in
    :func:`dense_bilateral_knn_unchecked`. Same outputs (``node_points [B, R^3, k]``,
    ``point_nodes [B, N, k']``, ``keep [B, N, k']``) and float arithmetic.
    """
    B, N = pos.shape[:2]
    R3 = nodes.size(0)
    if search == "bucketed":
        node_points = node_points_bucketed(pos, k, nodes, axes, node_chunk)
    else:
        blocks = []
        for s in range(0, R3, node_chunk):  # [B, chunk, N] distances, as knn's torch backend
            blocks.append(_smallest(_squared_distances(nodes[None, s : s + node_chunk, None], pos[:, None]), k))
        node_points = blocks[0] if len(blocks) == 1 else torch.cat(blocks, 1)
    kk = min(k, R3)
    shape = [a.size(0) for a in axes]
    dists, idxs = [], []
    for a, ax in enumerate(axes):
        da = (ax - pos[..., a : a + 1]).pow(2)  # [B, N, R_a], as grid_knn
        idx = _smallest(da, min(kk, shape[a])).sort(-1).values  # the nearest coordinates, in index order
        dists.append(torch.gather(da, 2, idx))
        idxs.append(idx)
    dist = dists[0][..., :, None, None] + dists[1][..., None, :, None]
    dist = (dist + dists[2][..., None, None, :]).reshape(B, N, -1)
    flat = (idxs[0][..., :, None, None] * shape[1] + idxs[1][..., None, :, None]) * shape[2] + idxs[2][
        ..., None, None, :
    ]
    point_nodes = torch.gather(flat.reshape(B, N, -1), 2, _smallest(dist, kk))
    chosen = torch.gather(node_points, 1, point_nodes.reshape(B, N * kk, 1).expand(-1, -1, k))
    own = torch.arange(N, device=pos.device).view(1, N, 1, 1)
    keep = ~(chosen.view(B, N, kk, k) == own).any(-1)
    return node_points, point_nodes, keep


def _aggregate_dense(
    conv: nn.Module,
    dense: Tensor,
    dense_keep: Optional[Tensor],
    scat: Tensor,
    scat_dst: Tensor,
    scat_keep: Optional[Tensor],
) -> Tensor:
    """``phi_upd(AGG)`` over the two edge kinds of the fixed-shape graph: ``dense [D, t, H]`` (the
    ``t`` edges every target ``d < D`` has, ``dense_keep [D, t]`` masking duplicates, None: all)
    and ``scat [E, H]`` scattered to the targets ``scat_dst [E]`` (``scat_keep [E]``, None: all).
    The max scatters whole rows (its index repeated along them): exported, it is ``ScatterND``
    (:func:`_scatter_reduce_rows`)."""
    H = dense.size(-1)
    if conv.aggr == "max":
        d = dense if dense_keep is None else dense.masked_fill(~dense_keep.unsqueeze(-1), float("-inf"))
        s = scat if scat_keep is None else scat.masked_fill(~scat_keep.unsqueeze(-1), float("-inf"))
        agg = d.amax(1).scatter_reduce(0, scat_dst.unsqueeze(-1).expand(-1, H), s, "amax")
    else:
        dk = (
            torch.ones(dense.shape[:2], dtype=dense.dtype, device=dense.device)
            if dense_keep is None
            else dense_keep.to(dense.dtype)
        )
        sk = (
            torch.ones(scat.size(0), dtype=scat.dtype, device=scat.device)
            if scat_keep is None
            else scat_keep.to(scat.dtype)
        )
        agg = (dense * dk.unsqueeze(-1)).sum(1).index_add(0, scat_dst, scat * sk.unsqueeze(-1))
        if conv.aggr == "mean":
            agg = agg / dk.sum(1).index_add(0, scat_dst, sk).unsqueeze(-1)
    return conv.phi_upd(agg)


def gridify_dense_graph(
    module: Gridification, pos: Tensor, x: Tensor, nodes: Tensor, graph: Tuple[Tensor, Tensor, Tensor]
) -> Tensor:
    """The gridification ``[B, C, Rx, Ry, Rz]`` of ``pos [B, N, 3]`` / ``x [B, N, F]`` over the
    fixed-shape ``graph`` of :func:`dense_grid_knn_unchecked` (no checks: what the export traces)."""
    node_points, point_nodes, keep = graph
    conv, grid = module.conv, module.grid
    B, N = pos.shape[:2]
    R3, k = nodes.size(0), node_points.size(2)
    h = conv.phi_node(x)
    if conv.message == "concat":
        h = conv.msg_node(h)
    H = h.size(-1)
    cloud = torch.arange(B, device=pos.device)
    src = (node_points + (cloud * N).view(B, 1, 1)).reshape(-1)  # A: node <- its k points, [B R^3 k]
    dst = (point_nodes + (cloud * R3).view(B, 1, 1)).reshape(-1)  # P: point -> its k' nodes, [B N k']
    m_a = _messages(conv, h.reshape(-1, H)[src], nodes.repeat(B, 1).repeat_interleave(k, 0) - pos.reshape(-1, 3)[src])
    m_b = _messages(conv, h.unsqueeze(2), nodes[point_nodes] - pos.unsqueeze(2)).reshape(-1, H)
    out = _aggregate_dense(conv, m_a.view(B * R3, k, H), None, m_b, dst, keep.reshape(-1))
    return grid.to_dense_unchecked(out, B)


def degridify_dense_graph(
    module: Degridification, z: Tensor, pos: Tensor, nodes: Tensor, graph: Tuple[Tensor, Tensor, Tensor]
) -> Tensor:
    r"""The de-gridification ``[B, N, C_out]`` of grid features ``z [B, C, Rx, Ry, Rz]`` at the points
    ``pos [B, N, 3]`` over the transposed edges of the fixed-shape ``graph``: node ``i`` sends to
    every point of ``A_i`` and to every point ``j`` whose ``P_j`` holds it (``keep``), with
    offsets ``c_j - c_i^G`` (no checks: what the export traces)."""
    node_points, point_nodes, keep = graph
    conv = module.conv
    B, N = pos.shape[:2]
    R3, k, kk = nodes.size(0), node_points.size(2), point_nodes.size(2)
    h = conv.phi_node(z.permute(0, 2, 3, 4, 1).reshape(B * R3, -1))
    if conv.message == "concat":
        h = conv.msg_node(h)
    H = h.size(-1)
    cloud = torch.arange(B, device=pos.device)
    dst = (node_points + (cloud * N).view(B, 1, 1)).reshape(-1)  # A edges: node -> point, [B R^3 k]
    pos_flat = pos.reshape(-1, 3)
    m_a = _messages(conv, h.repeat_interleave(k, 0), pos_flat[dst] - nodes.repeat(B, 1).repeat_interleave(k, 0))
    src = (point_nodes + (cloud * R3).view(B, 1, 1)).reshape(-1)  # P edges: point <- node, [B N k']
    m_b = _messages(
        conv, h[src], pos.unsqueeze(2).expand(-1, -1, kk, -1).reshape(-1, 3) - nodes[point_nodes].reshape(-1, 3)
    )
    out = _aggregate_dense(conv, m_b.view(B * N, kk, H), keep.reshape(B * N, kk), m_a, dst, None)
    return out.view(B, N, -1)


def scene_box_dense(points: Tensor, extent: Optional[Tuple[float, float, float]]) -> Tensor:
    """:func:`gridify.models.scene.scene_box_coordinates` of equally sized clouds ``points [B, N, 3]`` (the
    same float arithmetic): every cloud centred on its bounding-box centre, divided by half the
    fixed ``extent`` (or its own half extent, 1 on a flat axis), clamped into ``[-1, 1]``."""
    lo, hi = points.amin(1, keepdim=True), points.amax(1, keepdim=True)
    centre = (lo + hi) / 2
    if extent is None:
        half = (hi - lo) / 2
        half = torch.where(half > FLAT_TOLERANCE * (1 + centre.abs()), half, torch.ones_like(half))
    else:
        half = torch.tensor(extent, dtype=points.dtype, device=points.device).view(1, 1, 3) / 2
    return ((points - centre) / half).clamp(-1.0, 1.0)


class OnnxSegmenter(nn.Module):
    """A gridified segmenter on fixed-shape inputs, ready for ``torch.onnx.export``: per-point logits.

    * :class:`gridify.models.GridifiedSceneSegmenter` (``scene_segmenter``): ``points [B, N, 3]``
      in metres (+ ``features [B, N, F]``, the checkpoint's per-point features, when ``F > 0``);
      every cloud is mapped into the grid box as the model does (:func:`scene_box_dense`).
    * :class:`gridify.models.GridifiedSegmenter` (``gridified_segmenter``, part segmentation):
      ``points [B, N, 3]`` (+ ``normals [B, N, 3]`` for 6-feature models, + ``category [B]``
      int64 for models trained with object categories), normalized as :class:`OnnxClassifier`
      normalizes.

    Then :func:`dense_grid_knn_unchecked` (node blocks of :data:`NODE_CHUNK`),
    :func:`gridify_dense_graph`, the model's ``grid_norm`` and ``backbone``,
    :func:`degridify_dense_graph` and the model's point branch and head: ``logits [B, N, K]``.
    The wrapped model is the given one (shared weights). Eager calls check their inputs; traced,
    the graph holds no checks.

    Shapes:
        points ``[B, N, 3]`` (+ features ``[B, N, F]`` / normals ``[B, N, 3]``, category ``[B]``)
        -> logits ``[B, N, num_classes]``
    """

    def __init__(
        self,
        model: nn.Module,
        normalize: bool = True,
        node_chunk: int = NODE_CHUNK,
        up_axis: str = "z",
        search: Optional[str] = None,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        check_exportable(model, where)
        if not isinstance(normalize, bool):
            fail(where, f"normalize must be True or False, got {normalize!r}")
        if search is not None and search not in SEARCHES:
            fail(where, f"search must be one of {', '.join(SEARCHES)} (or None: by model), got {search!r}")
        self.node_chunk = check_int(where, "node_chunk", node_chunk, 1)
        self.up_axis = check_up_axis(where, up_axis)
        self.model = model
        self.scene = isinstance(model, GridifiedSceneSegmenter)
        # a scene grid holds thousands of nodes over a crop of thousands of points: search by bucket
        self.search = search or ("bucketed" if self.scene else "brute")
        self.normalize = False if self.scene else normalize
        self.use_normals = not self.scene and model.in_channels == 6
        self.num_features = model.in_channels if self.scene else 0
        self.num_categories = 0 if self.scene else int(model.num_categories)
        dtype = next(model.parameters()).dtype
        grid = model.gridify.grid
        self.register_buffer("up_rotation", _up_rotation(self.up_axis, dtype), persistent=False)
        self.register_buffer("nodes", grid.positions(dtype=dtype), persistent=False)
        for name, ax in zip(("axis_x", "axis_y", "axis_z"), grid_axes(grid, dtype=dtype)):
            self.register_buffer(name, ax, persistent=False)

    @property
    def input_names(self) -> List[str]:
        if self.scene:
            return ["points"] + (["features"] if self.num_features else [])
        return ["points"] + (["normals"] if self.use_normals else []) + (["category"] if self.num_categories else [])

    @property
    def axes(self) -> Tuple[Tensor, Tensor, Tensor]:
        return self.axis_x, self.axis_y, self.axis_z

    def graph_points(self, *inputs: Tensor) -> Tensor:
        """The coordinates the graph is built on (grid box), ``[B, N, 3]``."""
        if self.scene:
            return scene_box_dense(inputs[0], self.model.extent)
        return _normalize_points(inputs[0]) if self.normalize else inputs[0]

    def _features(self, inputs: Tuple[Tensor, ...]) -> Tuple[Tensor, Tensor]:
        u = self.graph_points(*inputs)
        if self.scene:
            return u, (torch.cat([u, inputs[1]], -1) if self.num_features else u)
        return u, (torch.cat([u, inputs[1]], -1) if self.use_normals else u)

    def check_inputs(self, *inputs: Any, where: Optional[str] = None) -> None:
        """Raise ValueError naming what is wrong with ``forward``'s arguments (None when they are fine)."""
        where = where or f"{type(self).__name__}.forward"
        names = self.input_names
        if len(inputs) != len(names):
            fail(where, f"expected the inputs {', '.join(names)} ({len(names)}), got {len(inputs)} tensors")
        dtype, device = self.nodes.dtype, self.nodes.device
        k = self.model.gridify.k
        points = _check_clouds(where, inputs[0], "points", k, dtype, device)
        B, N = points.shape[:2]
        for name, value in zip(names[1:], inputs[1:]):
            value = check_tensor(where, name, value)
            if name == "category":
                if value.dim() != 1 or value.numel() != B or value.dtype != torch.int64:
                    fail(where, f"category must be an int64 tensor [B] = [{B}], got {value.dtype} {tuple(value.shape)}")
                bad = ((value < 0) | (value >= self.num_categories)).nonzero().flatten()
                if bad.numel():
                    fail(
                        where,
                        f"category must hold integers in [0, {self.num_categories}), got "
                        f"{int(value[bad[0]])} for cloud {int(bad[0])}",
                    )
                continue
            width = self.num_features if name == "features" else 3
            if value.dim() != 3 or tuple(value.shape) != (B, N, width):
                fail(
                    where,
                    f"{name} must have shape [B, N, {width}] = [{B}, {N}, {width}] (one row per point), got "
                    f"{tuple(value.shape)}",
                )
            check_float(where, name, value)
            if value.dtype != dtype or value.device != device:
                fail(
                    where,
                    f"{name} must be {str(dtype).replace('torch.', '')} on {device} (the model's), got "
                    f"{value.dtype} on {value.device}",
                )
            check_finite(where, name, value.reshape(B * N, width), torch.arange(B).repeat_interleave(N))
        nbytes = B * N * min(self.node_chunk, self.nodes.size(0)) * element_size(dtype)
        check_alloc(
            where,
            f"points {tuple(points.shape)} (a [B, {min(self.node_chunk, self.nodes.size(0))}, N] distance block)",
            nbytes,
        )

    def forward(self, *inputs: Tensor) -> Tensor:
        if not validating():
            return self._forward(*inputs)
        self.check_inputs(*inputs)
        with trusted_inputs():
            return self._forward(*inputs)

    def _forward(self, *inputs: Tensor) -> Tensor:
        m = self.model
        u, x = self._features(_to_z_up(self.up_rotation, inputs, self.input_names))
        graph = dense_grid_knn_unchecked(u, m.gridify.k, self.nodes, self.axes, self.node_chunk, self.search)
        z = m.backbone(m.grid_norm(gridify_dense_graph(m.gridify, u, x, self.nodes, graph)))
        voxel = degridify_dense_graph(m.degridify, z, u, self.nodes, graph)
        B, N = u.shape[:2]
        parts = [voxel, m.point_mlp(x)]
        if self.num_categories:
            onehot = nn.functional.one_hot(inputs[-1], self.num_categories).to(voxel.dtype)
            parts.append(onehot.unsqueeze(1).expand(-1, N, -1))
        return m.head(torch.cat(parts, -1))

    @torch.no_grad()
    def reference(self, *inputs: Tensor) -> Tensor:
        """The same logits through the model's own forward (bilateral kNN graph): the reference path."""
        if validating():
            self.check_inputs(*inputs, where=f"{type(self).__name__}.reference")
        inputs = _to_z_up(self.up_rotation, inputs, self.input_names)
        if self.scene:
            return self.model(inputs[0], inputs[1] if self.num_features else None)
        u, x = self._features(inputs)
        return self.model(u, x, category=inputs[-1] if self.num_categories else None)

    def point_nodes(self, u: Tensor) -> Tensor:
        """``P`` of the fixed-shape graph of grid-box points ``u [B, N, 3]``."""
        return dense_grid_knn_unchecked(u, self.model.gridify.k, self.nodes, self.axes, self.node_chunk, self.search)[1]

    def example_inputs(self, batch: int, n: int, seed: int) -> Tuple[Tensor, ...]:
        """Seeded random clouds ``[batch, n, 3]`` (+ their other inputs), as :meth:`place` places them."""
        g = torch.Generator().manual_seed(seed)
        u = 2 * torch.rand(batch, n, 3, generator=g, dtype=torch.float64) - 1
        if not self.scene:
            u = nn.functional.normalize(u, dim=-1) * (
                0.6 + 0.3 * torch.rand(batch, n, 1, generator=g, dtype=torch.float64)
            )
        return self.place(u, g)

    def place(self, u: Tensor, g: torch.Generator) -> Tuple[Tensor, ...]:
        """Clouds ``u`` (float64, in ``[-1, 1]^3``) as inputs: a scene segmenter gets metric points
        (a 30 x 30 x 3 m box far from the origin, as a scan in map coordinates) and features in
        ``[0, 1]``; a part segmenter gets them as ``_place`` places a classifier's, plus
        normals and categories."""
        dtype = self.nodes.dtype
        batch, n = u.shape[:2]
        if self.scene:
            points = torch.tensor([350.0, -120.0, 2.0], dtype=torch.float64) + u * torch.tensor(
                [15.0, 15.0, 1.5], dtype=torch.float64
            )
            out = (points.to(dtype),)
            if self.num_features:
                out += (torch.rand(batch, n, self.num_features, generator=g, dtype=torch.float64).to(dtype),)
            return out
        points = u * 0.9
        if self.normalize:
            points = points * 3.0 + 2.0
        out = (points.contiguous().to(dtype),)
        if self.use_normals:
            out += (nn.functional.normalize(torch.randn(u.shape, generator=g, dtype=torch.float64), dim=-1).to(dtype),)
        if self.num_categories:
            out += (torch.randint(0, self.num_categories, (batch,), generator=g),)
        return out


class OnnxSceneModel:
    """An exported scene segmenter (an ONNX file of :func:`export_onnx`) as the ``model(pos, x, batch)
    -> logits`` callable that :func:`gridify.scene_inference.predict_scene` covers a whole scan with.

    ``__call__`` runs the file once per cloud of the flat batch (``pos [n, 3]`` metres, ``x [n, F]``
    the features the file's metadata names, ``batch [n]`` sorted); :meth:`predict` scores every point
    of a scene with the crops recorded in the file (``voxel_size``, ``max_points``), as
    :meth:`gridify.Predictor.predict` does with the checkpoint. Needs onnxruntime only.

    Shapes:
        __call__: pos ``[n, 3]``, x ``[n, F]``, batch ``[n]`` -> logits ``[n, K]``;
        predict: pos ``[N, 3]``, x ``[N, F]`` -> probabilities ``[N, K]``
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], threads: Optional[int] = None) -> None:
        where = "OnnxSceneModel"
        require_export_dependencies(where, verify=True)
        import onnxruntime as ort

        if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
            fail(where, f"path must name an existing .onnx file, got {path!r}")
        threads = check_int(where, "threads", threads, 1, allow_none=True)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime's own exception types; one clear message
            fail(
                where,
                f"onnxruntime could not load {os.fspath(path)!r} ({type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''})",
            )
        meta = self.session.get_modelmeta().custom_metadata_map
        if meta.get("model") != "scene_segmenter":
            fail(
                where,
                f"{os.fspath(path)!r} is not a scene segmenter exported by gridify (its metadata says model="
                f"{meta.get('model')!r})",
            )
        self.inputs = json.loads(meta["inputs"])
        self.class_names = json.loads(meta["class_names"])
        self.features = json.loads(meta.get("features", "null"))
        self.voxel_size = json.loads(meta.get("voxel_size", "null"))
        self.max_points = json.loads(meta.get("max_points", "null"))
        self.in_channels = int(meta["in_channels"])
        self.k = int(meta.get("k", 1))
        shape = self.session.get_inputs()[0].shape  # [B, N, 3]: N an int for a fixed-size export
        self.fixed_points = shape[1] if isinstance(shape[1], int) else None

    def __call__(self, pos: Tensor, x: Optional[Tensor] = None, batch: Optional[Tensor] = None) -> Tensor:
        """Logits of every cloud of the flat batch. A cloud of fewer than ``k`` points runs padded with copies
        of its own points (cyclically) and its own rows are returned: the PyTorch model takes such a cloud as it
        is (its searches hold all ``N < k`` points, as the padded one does), the file's searches need ``k``. A
        fixed-size export (``--num-points N``) takes exactly ``N`` points: another size is an error naming both
        (padding a cloud of ``k`` or more points would change which points its nodes see)."""
        n = pos.size(0)
        batch = torch.zeros(n, dtype=torch.long) if batch is None else batch.cpu()
        ends = torch.cumsum(torch.bincount(batch), 0).tolist()
        out, start = [], 0
        if "features" in self.inputs and (x is None or x.dim() != 2 or x.size(1) != self.in_channels):
            fail("OnnxSceneModel", f"x must hold the {self.in_channels} features {self.features} per point")
        for end in ends:
            m = end - start
            want = max(m, self.k)
            if self.fixed_points is not None and want != self.fixed_points:
                fail(
                    "OnnxSceneModel",
                    f"a crop of {m} points, but the file was exported for exactly {self.fixed_points} points per "
                    f"cloud (gridify export --num-points); export it with a dynamic size (no --num-points) to cover "
                    f"scans, whose crops vary in size",
                )
            rows = torch.arange(want) % max(m, 1) + start  # the cloud's own rows, repeated to the size the file takes
            feeds = {"points": pos[rows].detach().cpu().float().numpy()[None]}
            if "features" in self.inputs:
                feeds["features"] = x[rows].detach().cpu().float().numpy()[None]
            out.append(torch.from_numpy(self.session.run(["logits"], feeds)[0][0][:m]))
            start = end
        return torch.cat(out).to(pos.device)

    def features_of(self, cloud: Any) -> Tensor:
        """The file's per-point input ``x [N, F]`` of a scan (a path or a :class:`gridify.io.PointCloud`),
        built from the feature names in its metadata by the same function as the datasets and
        :meth:`gridify.Predictor.predict` (:func:`gridify.datasets.scene_base.build_scene_features`)."""
        from .datasets.scene_base import build_scene_features  # noqa: PLC0415
        from .io import PointCloud, read_points, reader_takes  # noqa: PLC0415

        if not isinstance(cloud, PointCloud):
            cloud = read_points(cloud, fields="all") if reader_takes(cloud, "fields") else read_points(cloud)
        fields = {k.lower(): v for k, v in (cloud.fields or {}).items()}
        strength = next((fields[k] for k in ("intensity", "strength", "remission", "reflectance") if k in fields), None)
        x = build_scene_features(
            list(self.features or []),
            cloud.points,
            color=cloud.colors,
            normal=cloud.normals,
            strength=strength,
            where=cloud.source or "OnnxSceneModel.features",
        )
        return torch.from_numpy(x if self.features else x[:, :0])

    def predict(
        self, pos: Tensor, x: Optional[Tensor] = None, *, votes: int = 1, seed: int = 0, progress: Optional[Any] = None
    ) -> Tensor:
        """Class probabilities ``[N, K]`` of every point of a scene, covered with the file's crops
        (``x``: :meth:`features_of` the scan)."""
        from .scene_inference import predict_scene  # noqa: PLC0415

        return predict_scene(
            self,
            pos,
            x if x is not None else pos.new_zeros(pos.size(0), 0),
            voxel_size=self.voxel_size,
            max_points=self.max_points,
            votes=votes,
            seed=seed,
            batch_size=1,
            progress=progress,
        )
