r"""``export_onnx``: a trained gridified model as a self-contained ONNX file, checked before it is written.

:func:`export_onnx` resolves the model (a checkpoint path, a Predictor or a bare model), wraps it
(:class:`gridify.export.OnnxModel`: the model's own forward on its fixed-shape path, on a folded copy of
multi-branch layers), traces the wrapper (``torch.onnx.export``, dynamo exporter, under
:func:`gridify.export.tracing.tracing_mode` with depthwise 3D convolutions as sums of 2D ones),
checks the file with onnxruntime against the model's own PyTorch forward on random and degenerate
clouds (identical, collinear, coplanar points, ``N = k``), records the metadata a deployment needs
and writes the file atomically. The parity check's difference is

    max_{check clouds} |onnxruntime(x) - PyTorch(x)|        (a NaN / Inf on one side only: inf)

The file's ONNX opset is the requested one, 18 to 25 (:data:`ONNX_OPSETS`; default 20); every
argument is checked before anything is traced.

The traced graph is optimized by :func:`optimize_graph`: torch's own optimization without onnxscript's
pattern rewriter (constant folding, dead-node removal, shared initializers, common subexpressions), which
took more than half of a scene segmenter's export (4.4 of 7.8 minutes on a 2-core AMD EPYC) for a file
that onnxruntime runs as fast (its own graph optimizations run when a session loads the file) and that
gives the same logits.
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
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import torch
from torch import Tensor, nn

from .._checks import check_int, check_number, fail, is_int, trusted_inputs
from .._files import atomic_write_bytes
from .._progress import elapsed_words, heartbeat
from .._version import __version__
from ..checkpoint import build_model_from_checkpoint, checkpoint_file, inference_settings, load_checkpoint
from ..ops.knn_dense import NODE_CHUNK, check_dense_size
from ..nn.reparam import is_reparameterizable, reparameterize_model
from ..ops.grid import grid_knn
from ..registry import MODELS, TASKS
from ..tasks import get_task
from ..transforms import NORMALIZATIONS, check_up_axis
from .tracing import DepthwiseConv3dAs2d, eval_mode, scatter_reduce_rows, tracing_mode
from .wrappers import ExportError, OnnxModel, check_exportable, clouds_in_metres, fail_export

__all__ = [
    "DEFAULT_OPSET",
    "EXPORT_FORMATS",
    "ExportReport",
    "INSTALL_HINT",
    "ONNX_OPSETS",
    "check_task_exportable",
    "export_onnx",
    "require_export_dependencies",
]

EXPORT_FORMATS = ("onnx",)
#: seconds between the ``still running`` lines of ``progress`` while a stage runs
HEARTBEAT_SECONDS = 30.0
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


def _model_name(net: nn.Module) -> str:
    """The name ``net``'s class is registered under in :data:`gridify.registry.MODELS` (else the class name)."""
    return next((name for name in MODELS.names() if MODELS.get(name) is type(net)), type(net).__name__)


# --------------------------------------------------------------------------------------
# export_onnx
# --------------------------------------------------------------------------------------
@dataclass
class ExportReport:
    """What :func:`export_onnx` wrote.

    ``inputs`` / ``outputs`` map tensor names to shapes (a dimension is an int, or a name such as
    ``"batch"`` when it is dynamic); ``max_abs_diff`` is the largest difference between the
    onnxruntime logits and the PyTorch model's on the check clouds (None without ``verify``); ``metric``: the file
    takes clouds in metres and maps every one into the grid box itself (a scene segmenter's).
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
    normalization: Optional[str] = None
    metric: bool = False

    def summary(self) -> str:
        def shapes(d: Dict[str, List[Union[int, str]]]) -> str:
            return ", ".join(f"{k} [{', '.join(map(str, v))}]" for k, v in d.items())

        check = "" if self.max_abs_diff is None else f"; onnxruntime vs PyTorch max |diff| {self.max_abs_diff:.2e}"
        if self.metric:
            mapping = "maps every crop (metres) into the grid box"
        elif not self.normalize:
            mapping = "clouds must be normalized"
        elif self.normalization in (None, "sphere"):
            mapping = "normalizes the clouds"
        else:
            mapping = f"normalizes the clouds (into the unit {self.normalization})"
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


def _resolve(model: Any, where: str) -> Tuple[nn.Module, Union[None, bool, str], Optional[List[str]], Optional[int]]:
    """``(network, normalize, class_names, num_points)`` of a path, a Predictor or a bare model
    (None where a bare model does not say; ``normalize``: a normalization name or False)."""
    if isinstance(model, (str, os.PathLike)):
        payload = load_checkpoint(checkpoint_file(model, where))
        settings = inference_settings(payload)
        net = build_model_from_checkpoint(payload, reparameterize=True)
        check_task_exportable(payload.get("task"), net, where)
        return net, settings["normalization"] or False, settings["class_names"], settings["num_points"]
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module) and hasattr(model, "normalize"):  # a gridify.Predictor
        check_task_exportable(getattr(model, "task", None), inner, where)
        names = list(getattr(model, "class_names", None) or []) or None
        return (
            inner,
            getattr(model, "normalization", "sphere" if model.normalize else None) or False,
            names,
            getattr(model, "num_points", None),
        )
    if isinstance(model, nn.Module):
        return model, None, None, None
    fail(
        where,
        f"model must be a checkpoint path, a gridify.Predictor or a GridifiedClassifier / GridifiedSegmenter / "
        f"GridifiedSceneSegmenter, got {type(model).__name__}",
    )


def _trace(
    wrapper: OnnxModel,
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
    shapes: Any = None
    if dims:  # forward(*inputs): a per-cloud input (category) has the batch axis only
        shapes = {"inputs": tuple({a: d for a, d in dims.items() if a == 0 or t.dim() > 1} or None for t in example)}
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
                custom_translation_table={torch.ops.aten.scatter_reduce.two: scatter_reduce_rows},
                opset_version=opset,
                verbose=False,
                optimize=False,  # optimize_graph below: the same passes but the slow pattern rewriter
            )
            optimize_graph(program.model)
        except Exception as exc:  # noqa: BLE001 - an exporter failure becomes one clear message
            while exc.__cause__ is not None or exc.__context__ is not None:  # the root cause says most
                exc = exc.__cause__ or exc.__context__
            lines = str(exc).strip().splitlines()
            problem = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    if problem is not None:
        fail_export(where, f"torch.onnx could not trace the model ({problem})")
    return program.model_proto


def optimize_graph(model: Any) -> None:
    """Optimize an exported ``onnx_ir.Model`` in place: the passes of torch's ``optimize=True``
    (``onnxscript.optimizer.optimize_ir``) without its pattern rewriter and fusions.

    Functions inlined; constants folded and unused nodes, functions and opsets removed (twice, or until
    nothing changes); constants lifted to initializers, duplicate initializers shared; common subexpressions
    eliminated; output and value names fixed; the nodes' debug metadata cleared (torch's exporter gives every node
    the Python stack trace, module path and FX node it came from: 6.4 of the shipped ``semantickitti`` file's
    13.5 MB, with the exporting machine's file paths in every node; the model's own ``metadata_props``, which
    ``_set_metadata`` writes afterwards, are not touched). Measured on the shipped ``semantickitti`` model (a 16,384-point
    crop, one onnxruntime thread, AMD EPYC): the export 3 min 18 s instead of 7 min 49 s, a file of 3,989
    nodes instead of 3,529 whose logits are bit for bit the same and whose run time is the same within the
    noise of three rounds (1.30-1.53 s against 1.32-1.47 s).
    """
    import onnx_ir as ir  # noqa: PLC0415 - the export extra
    from onnx_ir.passes import common  # noqa: PLC0415
    from onnxscript.optimizer import _constant_folding as folding  # noqa: PLC0415

    fold = folding.FoldConstantsPass(
        shape_inference=True,
        input_size_limit=folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
        output_size_limit=folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
    )
    cleanup = [common.RemoveUnusedNodesPass(), common.RemoveUnusedFunctionsPass(), common.RemoveUnusedOpsetsPass()]
    ir.passes.Sequential(
        common.InlinePass(),
        ir.passes.PassManager([fold, *cleanup], steps=2, early_stop=True),
        common.RemoveUnusedNodesPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
        common.ClearMetadataAndDocStringPass(),
    )(model)


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
    wrapper: OnnxModel, data: bytes, checks: List[Tuple[str, Tuple[Tensor, ...]]], atol: float, where: str
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


def _file_graph(wrapper: OnnxModel, inputs: Tuple[Tensor, ...]) -> Any:
    """The fixed-shape graph (:class:`gridify.nn.dense.FixedShapeGraph`) the file builds for ``inputs``: the
    gridification's, caught as the wrapper runs (its points in the grid box, its point -> node edges)."""
    graphs: List[Any] = []
    hook = wrapper.model.gridify.register_forward_hook(lambda module, args, out: graphs.append(out[1]))
    try:
        with torch.no_grad(), trusted_inputs():
            wrapper(*inputs)
    finally:
        hook.remove()
    return graphs[0]


def _node_ties_only(wrapper: OnnxModel, inputs: Tuple[Tensor, ...]) -> bool:
    """Whether the fixed-shape graph of the check clouds differs from the model's own (bilateral kNN)
    graph, and only by *equally near* grid nodes: some point's ``k'`` nodes are not
    :func:`gridify.ops.grid_knn`'s, but every point's lie at the same squared distances. A point exactly on a symmetry plane of the lattice
    (identical points normalize onto the centre node) has nodes tied at its ``k'``-th place, which
    the graph gives to the lower node index and ``grid_knn`` by its own candidate order; both edge
    sets are correct, so the file is then compared with PyTorch over the graph it holds."""
    m = wrapper.model.gridify
    with torch.no_grad():
        graph = _file_graph(wrapper, inputs)
        pos, point_nodes = graph.pos, graph.point_nodes
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
def _graph_knn_backend(model: nn.Module) -> Iterator[None]:
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
    wrapper: OnnxModel,
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
    checks.append((f"random clouds (N={other})", wrapper.example_inputs(batch_size or 3, other, seed + 1)))
    sizes = [n] if num_points is not None else [n, k]
    if num_points is None:
        checks.append((f"random clouds (N=k={k})", wrapper.example_inputs(batch_size or 2, k, seed + 2)))
    for size in sizes:
        checks += _degenerate_inputs(wrapper, batch_size or 1, size, seed + 3)
    return checks


def _degenerate_inputs(wrapper: OnnxModel, batch: int, n: int, seed: int) -> List[Tuple[str, Tuple[Tensor, ...]]]:
    """Seeded degenerate clouds ``[batch, n, 3]``, labelled: identical points, two points repeated,
    collinear and coplanar points (placed as the wrapper's ``example_inputs`` places its clouds). Where a
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
    return [(f"{name} (N={n})", wrapper.place(u, g)) for name, u in shapes.items()]


def _shapes(values: Any) -> Dict[str, List[Union[int, str]]]:
    """Name -> shape (ints, or the names of dynamic axes) of ONNX graph inputs / outputs."""
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}


def export_onnx(
    model: Any,
    path: Union[str, "os.PathLike[str]"],
    *,
    num_points: Optional[int] = None,
    batch_size: Optional[int] = None,
    normalize: Union[None, bool, str] = None,
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
    cloud is one crop, and :class:`gridify.export.OnnxSceneModel` covers a whole scan with crops as
    :meth:`gridify.Predictor.predict` does. The metadata records the class names, the
    normalization, ``k``, ``R``, the gridify version (a scene segmenter's extent, features, voxel size,
    crop size). The graph costs time ``O(B N R)`` for ``R`` grid nodes (brute force; a scene segmenter's bucketed
    search far less), memory ``O(B N`` :data:`gridify.ops.knn_dense.NODE_CHUNK` ``)`` (its node search runs in blocks).

    Args:
        model: a checkpoint path (``model.pt`` / ``.ckpt``, folded for inference), a shipped model's name
            (``"semantickitti"``), a :class:`gridify.Predictor` or a :class:`gridify.models.GridifiedClassifier`,
            :class:`~gridify.models.GridifiedSegmenter` or :class:`~gridify.models.GridifiedSceneSegmenter`.
        path: the ``.onnx`` file to write, a ``str`` or ``os.PathLike`` (atomically: the file
            appears complete or not at all; missing parent folders are created). Checked
            before anything runs: not a folder or other non-file, and its folder creatable.
        num_points: a fixed number of points per cloud; None (default): a dynamic axis, any
            ``N >= k`` (onnxruntime rejects smaller clouds in its TopK). The file runs the network
            once on the given points; the Predictor's resampling of other sizes to the training
            size (and its vote over subsets) is not part of it.
        batch_size: a fixed number of clouds; None (default): a dynamic axis.
        normalize: centre and scale every cloud inside the graph: ``"sphere"`` (True), ``"cube"`` (its bounding box
            into ``[-1, 1]^3``; :data:`gridify.transforms.NORMALIZATIONS`), False (the points must lie in the grid
            box); None (default): as the checkpoint / Predictor was trained, True for a bare model.
        verify: run the file with onnxruntime on seeded clouds (the traced shape, other sizes and
            ``N = k`` for dynamic axes; random and degenerate: identical, repeated, collinear, coplanar)
            against the model's PyTorch forward; a difference above ``atol`` (NaN/Inf on one side only:
            infinite) raises, naming the check clouds, and nothing is written.
        opset: the file's ONNX opset, in :data:`ONNX_OPSETS` (18 to 25); None: :data:`DEFAULT_OPSET` (20).
        seed: seed of the example / check clouds.
        up_axis: the clouds' up direction (:data:`gridify.transforms.UP_AXES`): not ``"z"``: rotated to z up
            inside the graph, as ``predict --up-axis`` does; in the metadata (``up_axis``).
        progress: called with a line before each stage (tracing, checking, writing; each says how long the one
            before took), e.g. ``print``, and from a timer thread every 30 s while one runs (``still running``).

    Raises:
        ExportError: a model or option that is not exportable (the message names it; e.g. an
            MRConv model that never ran a forward, whose folded kernels would be placeholders),
            a failed check or a failed write. ImportError: onnx / onnxscript / onnxruntime
            missing (with the ``pip install`` line). ValueError: bad arguments (the message
            names the argument), raised before any tracing.
    """
    where = "export_onnx"
    args = _check_export_args(where, path, num_points, batch_size, normalize, verify, atol, opset, seed)
    target, num_points, batch_size, atol, opset = args
    say, up_axis = _progress(where, progress), check_up_axis(where, up_axis)
    net, stored_normalize, class_names, train_points = _resolve(model, where)
    check_exportable(net, where)
    n = _export_num_points(net, num_points, batch_size, train_points, where)
    require_export_dependencies(where, verify)
    wrapper = _folded_wrapper(net, _graph_normalization(normalize, stored_normalize), where, up_axis)
    example = wrapper.example_inputs(batch_size or 2, n, seed)
    say(f"tracing {type(wrapper).__name__} ({n} points per cloud) to ONNX opset {opset}")
    with _stage(say, "tracing", "the trace") as took:
        proto, names = _onnx_model(model, net, wrapper, example, class_names, batch_size, num_points, opset, where)
    data, diff = proto.SerializeToString(), None
    if verify:
        say(f"checking the file against PyTorch in onnxruntime (random and degenerate clouds, other sizes; {took})")
        with _stage(say, "checking", "the check") as took:
            diff = _checked(wrapper, data, example, batch_size, num_points, n, seed, atol, where)
    say(f"writing {target} ({took})")
    return _write_export(target, data, proto, wrapper, names, diff, net, where)


class _Took:
    """How long a :func:`_stage` ran, as its ``str`` (``"the trace took 3 min 18 s"``) once it ended."""

    def __init__(self, what: str) -> None:
        self.what, self.text = what, ""

    def __str__(self) -> str:
        return self.text


@contextlib.contextmanager
def _stage(say: Callable[[str], None], name: str, what: str) -> Iterator[_Took]:
    """Run a long export stage with ``<name>: still running`` lines every :data:`HEARTBEAT_SECONDS`."""
    took, start = _Took(what), time.monotonic()
    with heartbeat(say, name, HEARTBEAT_SECONDS):
        yield took
    took.text = f"{what} took {elapsed_words(time.monotonic() - start)}"


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
    crops = clouds_in_metres(net)  # a scene segmenter's crops: 4,096 points by default
    n = num_points or (4096 if crops else max(int(train_points or 1024), k + 1))
    block = min(net.gridify.grid.num_nodes, NODE_CHUNK)
    check_dense_size(where, f"num_points={n}, batch_size={batch_size or 3}", batch_size or 3, n, block, torch.float32)
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
    _set_metadata(proto, wrapper, names, _scene_settings(model) if wrapper.metric else None)
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
        normalization=wrapper.normalization,
        class_names=names,
        max_abs_diff=diff,
        num_bytes=len(data),
        model=_model_name(net),
        metric=wrapper.metric,
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
    ``features`` (names), ``voxel_size`` and ``max_points`` where recorded, and the whole-scan
    defaults ``votes`` / ``max_fragments`` of :meth:`gridify.Predictor.predict` where the checkpoint has them."""
    out: Dict[str, Any] = {}
    if isinstance(model, (str, os.PathLike)):  # a path, or a shipped model's name (its file)
        meta = load_checkpoint(checkpoint_file(model, "export_onnx"))
    else:
        meta = getattr(model, "meta", None) or {}
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
    for key in ("votes", "max_fragments"):  # the whole-scan defaults the checkpoint records, if any
        if info.get(key) is not None:
            out[key] = info[key]
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
    if (
        normalize is not None
        and not isinstance(normalize, bool)
        and not (isinstance(normalize, str) and normalize in NORMALIZATIONS)
    ):
        fail(
            where,
            f"normalize must be None, True or False, got {normalize!r} (or a normalization: {', '.join(NORMALIZATIONS)})",
        )
    return target, num_points, batch_size, atol, opset


def _graph_normalization(normalize: Union[None, bool, str], stored: Union[None, bool, str]) -> Union[bool, str]:
    """The wrapper's ``normalize``: the argument, or where it is None the checkpoint's / Predictor's ``stored`` one
    (True for a bare model: ``stored`` None); True on a model trained with a named normalization means that one."""
    if normalize is None or (normalize is True and isinstance(stored, str)):
        return True if stored is None else stored
    return normalize


def _folded_wrapper(net: nn.Module, normalize: Union[bool, str], where: str, up_axis: str = "z") -> OnnxModel:
    """The :class:`OnnxModel` of ``net``, on a folded copy when ``net`` has unfolded
    multi-branch layers (they cannot be traced); placeholder kernels raise :class:`ExportError`."""
    _check_folded_layers(net, where, before=True)
    if any(is_reparameterizable(m) and not m.reparameterized for m in net.modules()):
        net = copy.deepcopy(net)
        reparameterize_model(net)
        _check_folded_layers(net, where, before=False)
    return OnnxModel(net, normalize=normalize, up_axis=up_axis)


def _first_run(wrapper: OnnxModel, example: Tuple[Tensor, ...], where: str) -> None:
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
    if target.suffix.lower() != ".onnx":  # onnxruntime reads any name; another extension is a slip of the hand
        fail(
            where,
            f"path={raw!r} must end in .onnx (an ONNX file is written), e.g. {str(target.with_suffix('.onnx'))!r}",
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
    proto: Any, wrapper: OnnxModel, class_names: List[str], scene: Optional[Dict[str, Any]] = None
) -> None:
    """Record what a deployment needs in the ONNX file's ``metadata_props`` (strings): for a scene
    segmenter (clouds in metres) also its ``extent`` and, from the checkpoint, the ``features`` (names, in order),
    ``voxel_size`` and ``max_points`` of its training crops (``scene``); and a line on the inputs and outputs
    as the file's ``doc_string``."""
    import onnx

    net = wrapper.model
    props = {
        "gridify_version": __version__,
        "model": _model_name(net),
        "class_names": json.dumps(class_names),
        "normalize": json.dumps(wrapper.normalize),
        "normalization": wrapper.normalization or "none",
        "in_channels": str(net.in_channels),
        "inputs": json.dumps(wrapper.input_names),
        "k": str(net.gridify.k),
        "resolution": json.dumps(net.gridify.resolution),
        "up_axis": wrapper.up_axis,
    }
    if wrapper.metric:
        props["extent"] = json.dumps(net.extent)
        props.update({key: json.dumps(value) for key, value in (scene or {}).items()})
    onnx.helper.set_model_props(proto, props)
    proto.doc_string = _doc_line(wrapper, len(proto.graph.output[0].type.tensor_type.shape.dim), scene)


def _doc_line(wrapper: OnnxModel, rank: int, scene: Optional[Dict[str, Any]]) -> str:
    """``gridify <model>: <inputs> -> logits [B, K] (rank 2) or [B, N, K]; <how the clouds are mapped>``."""
    described = {"points": "points [B, N, 3]" + (" in metres" if wrapper.metric else "")}
    names = ", ".join((scene or {}).get("features") or []) or "as the checkpoint records"
    for name, width in wrapper.inputs.features:
        if name != "points":
            described[name] = f"{name} [B, N, {width}]" + (f" ({names})" if name == "features" else "")
    described.update({name: f"{name} [B] int64" for name, _ in wrapper.inputs.per_cloud})
    if wrapper.metric:
        mapping = "every cloud is one crop (its box is mapped into the grid inside the graph); cover a larger scene with crops as training did"
    elif wrapper.normalize:
        mapping = f"clouds are centred and scaled into the unit {wrapper.normalization} inside the graph"
    else:
        mapping = "clouds must already be normalized into the grid box"
    inputs = " + ".join(described[name] for name in wrapper.input_names)
    logits = "[B, K]" if rank == 2 else "[B, N, K]"
    return f"gridify {_model_name(wrapper.model).replace('_', ' ')}: {inputs} -> logits {logits}; {mapping}"
