"""Speed and memory benchmark: gridified classifier vs native point-cloud baselines.

Measures, for every model and every number of points ``N`` (and, in a second sweep, every
neighbourhood size ``k`` at a fixed ``N``):

* inference time of a batch (under ``torch.no_grad()``, model in eval mode), throughput (clouds/s)
  and time per point; training-step time (forward, cross-entropy, backward, AdamW step;
  ``--train-step``); each timed by :class:`gridify.bench.harness.MedianTimer`: ``--warmup`` (at
  least 1) untimed runs, then at least ``--repeats`` timed ones, more until the 95 % confidence
  interval of the median is within ``± --rel-ci`` of it or ``--time-budget`` seconds of timed runs
  are spent; the median, its interval, quartiles, min, max, repeats and whether the target was
  reached are recorded;
* peak memory: on CUDA ``torch.cuda.max_memory_allocated`` minus the memory allocated before
  the measurement; on the CPU the increase of the process's peak resident set size
  (``getrusage(RUSAGE_SELF).ru_maxrss``) over its resident set size after one cold
  single-cloud forward pass (which loads lazy imports and caches). ``ru_maxrss`` only ever grows,
  so the inference and the training step of every (model, N) are measured in two fresh
  subprocesses (``--isolation subprocess``, the default); ``--isolation inprocess`` is faster but
  its CPU memory figures are lower bounds, and its training step runs after the inference in the
  same process (its CPU peak is then ``max(inference peak, training peak)``).
* the machine's dense fp32 matmul peak (best GFLOP/s of ``torch.mm`` of 2048 x 2048 matrices
  with the same thread count, measured before and after the sweep; the higher is used) and, for gridified models, the achieved GFLOP/s of the forward pass:
  FLOPs counted by :class:`torch.utils.flop_counter.FlopCounterMode` (matmuls and convolutions;
  FFTs are not counted by it) plus an estimate of every FFT convolution of
  :class:`gridify.nn.flexconv.SepFlexConv3d` (``2.5 n log2 n`` real FLOPs per real transform of
  ``n`` samples, 6 FLOPs per complex product), divided by the measured forward time.

Models (``--models``): ``gridified`` (the thesis ModelNet40 configuration:
``GridifiedClassifier(in_channels=3, num_classes=40, resolution=R, k=9, hidden_channels=128,
depth=3, kernel_size=9)``, CCNN backbone), ``gridified-<backbone>`` for any registered backbone
(``gridified-resnet``, ``gridified-mrconv``, ...), ``gridified-<backbone>-reparam`` (the model
folded by :func:`gridify.nn.reparameterize_model` after ``model.eval()``; inference
only), ``pointnet2`` (:class:`gridify.baselines.PointNet2Classifier`, PyG example sizes) and
``point_ckconv`` (:class:`gridify.baselines.PointCKConvClassifier`, ``K = 64`` by default).
Variants whose backbone is not registered are reported as skipped.

**Grid resolution rule**: ``R = max(2, round(N ** (1/3)))``, so the grid has about ``N`` nodes.

**Batch**: the batch of every measurement is the largest ``b <= --batch-size`` with
``b * N <= --max-points-per-batch`` (:func:`gridify.bench.harness.batch_for`; default 65,536 points:
batch 32 up to N = 2,048, 1 at 65,536), the same for every model at one N and the same whether the
cell runs alone or in a sweep; a batch that runs out of memory is halved and retried, and the batch
actually used is recorded. The time budget caps the number of repeats beyond ``--repeats``, never
the batch. How a figure is measured, and what else keeps cells independent of each other: the
docstring of :mod:`gridify.bench.harness`.

The inputs are synthetic: ``N`` points on the surface of a random ellipsoid inside
``[-0.9, 0.9]^3`` per cloud, coordinates as the only features (``in_channels = 3``).

Outputs in ``--out``: ``benchmark.json`` (machine, settings, matmul peak, rows), ``benchmark.csv``
(one row per measurement, :data:`CSV_COLUMNS`: every time with its 95 % interval, ``_rel_ci``
and ``_reached``), ``scaling_n.png`` / ``scaling_k.png`` (log-log time per cloud and peak memory
per cloud, like thesis figures 4.8 and 4.9) and a printed table with each figure's spread
(``2,812 ± 3.1 %``) and each model's throughput ratio ``reference / model`` with its interval
(:func:`gridify.bench.harness.ratio_interval`).

Usage::

    gridify bench --quick
    gridify bench --threads 2 --out outputs/benchmark

The other modes of ``gridify bench`` (:func:`gridify.bench.main` picks the mode): ``--recipe NAME``, real
training steps of a training recipe on real data (:mod:`gridify.bench.recipe`), and ``--scenes``, scene
segmentation at scene scale (:mod:`gridify.bench.scenes`).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from .._commands import BENCH_MAX_POINTS_PER_BATCH, bench_parser
from .._paths import one_line_errors
from ..models.gridified import CLASSIFIER_PRESETS
from ..precision import autocast, resolve_precision
from ..runtime import tune_cpu_allocator
from . import harness
from .harness import PeakMemory, fmt_value, is_oom, sync

__all__ = [
    "main",
    "build_benchmark_model",
    "grid_resolution",
    "matmul_gflops",
    "measure",
    "format_table",
    "write_csv",
    "CSV_COLUMNS",
    "DEFAULT_NUM_POINTS",
    "DEFAULT_KS",
]

DEFAULT_NUM_POINTS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
DEFAULT_KS = [4, 8, 16, 32, 64, 128]
DEFAULT_MODELS = ["gridified", "pointnet2", "point_ckconv"]
#: the default of ``--max-points-per-batch``: batches of 32 clouds up to N = 2,048, one cloud at N = 65,536
DEFAULT_MAX_POINTS_PER_BATCH = BENCH_MAX_POINTS_PER_BATCH
NUM_CLASSES = 40


def _spread(key: str) -> List[str]:
    """A figure's CSV columns: the median, its 95 % interval, the half-width over the median, whether the target
    was reached."""
    return [key, f"{key}_ci_low", f"{key}_ci_high", f"{key}_rel_ci", f"{key}_reached"]


CSV_COLUMNS = [
    "sweep",
    "model",
    "precision",
    "num_points",
    "resolution",
    "k",
    "batch",
    *_spread("ms_per_batch"),
    "ms_per_batch_q1",
    "ms_per_batch_q3",
    "ms_per_batch_min",
    "ms_per_batch_max",
    "repeats",
    *_spread("clouds_per_s"),
    "us_per_point",
    "peak_mb",
    "train_batch",
    *_spread("train_ms_per_batch"),
    "train_ms_per_batch_q1",
    "train_ms_per_batch_q3",
    "train_ms_per_batch_min",
    "train_ms_per_batch_max",
    "train_ms_per_batch_repeats",
    "train_clouds_per_s",
    "train_peak_mb",
    "train_peak_mb_per_cloud",
    *_spread("train_over_inference"),
    "params",
    "gflop_per_cloud",
    "gflops_achieved",
    *_spread("ratio"),
    *_spread("train_ratio"),
    "status",
]
RESULT_TAG = "GRIDIFY_BENCHMARK_RESULT:"
#: the printed table's ``(row key, header)`` columns
TABLE = [
    ("sweep", "sweep"),
    ("model", "model"),
    ("num_points", "N"),
    ("resolution", "R"),
    ("k", "k"),
    ("batch", "batch"),
    ("ms_per_batch", "ms/batch"),
    ("clouds_per_s", "clouds/s"),
    ("us_per_point", "us/point"),
    ("peak_mb", "peak MB"),
    ("train_batch", "train b"),
    ("train_ms_per_batch", "train ms/b"),
    ("train_peak_mb_per_cloud", "train MB/cloud"),
    ("train_over_inference", "train/infer"),
    ("gflops_achieved", "GFLOP/s"),
    ("ratio", "ref/model"),
    ("train_ratio", "train ref/model"),
    ("status", "status"),
]


# ----------------------------------------------------------------------------- models and data
def grid_resolution(num_points: int) -> int:
    """``R = max(2, round(N ** (1/3)))``: a grid of about ``N`` nodes."""
    return max(2, int(round(num_points ** (1.0 / 3.0))))


def _model_kind(name: str) -> Tuple[str, Optional[str], bool]:
    """``(family, backbone, reparam)`` of a benchmark model name."""
    key = name.lower()
    if key in ("pointnet2", "pointnet++"):
        return "pointnet2", None, False
    if key in ("point_ckconv", "ckconv", "pointckconvnet", "point-ckconv"):
        return "point_ckconv", None, False
    if key == "gridified" or key.startswith("gridified-"):
        parts = [p for p in key.split("-")[1:] if p not in CLASSIFIER_PRESETS]
        reparam = bool(parts) and parts[-1] == "reparam"
        if reparam:
            parts = parts[:-1]
        backbone = "-".join(parts) if parts else "ccnn"
        return "gridified", backbone, reparam
    raise ValueError(
        f"benchmark: unknown model {name!r}; expected gridified[-fast][-<backbone>][-reparam], "
        f"pointnet2 or point_ckconv"
    )


def model_preset(name: str) -> str:
    """The named configuration of a gridified benchmark model: ``gridified-fast`` -> ``"fast"``, else ``"thesis"``."""
    return next((p for p in name.lower().split("-")[1:] if p in CLASSIFIER_PRESETS), "thesis")


def model_uses_k(name: str) -> bool:
    return _model_kind(name)[0] in ("gridified", "point_ckconv")


def skip_reason(name: str) -> Optional[str]:
    """Why ``name`` cannot be built here (``None``: it can)."""
    family, backbone, reparam = _model_kind(name)
    if family != "gridified":
        return None
    from ..registry import BACKBONES

    if backbone not in BACKBONES:
        return f"backbone {backbone!r} is not registered"
    return None


def build_benchmark_model(
    name: str, num_points: int, k: Optional[int] = None, device: torch.device = torch.device("cpu")
) -> nn.Module:
    """The benchmark configuration of model ``name`` for clouds of ``num_points`` points.

    ``-reparam`` variants run one forward pass in eval mode (so every layer knows its input
    resolution) and are then folded by :func:`gridify.nn.reparameterize_model`.
    """
    from .. import baselines  # noqa: F401  (registers the baseline models)
    from ..models import build_model

    family, backbone, reparam = _model_kind(name)
    reason = skip_reason(name)
    if reason is not None:
        raise ValueError(f"benchmark: model {name!r} unavailable: {reason}")
    if family == "gridified":
        preset = dict(CLASSIFIER_PRESETS[model_preset(name)])
        if k is not None:
            preset["k"] = k
        model = build_model(
            "gridified_classifier",
            in_channels=3,
            num_classes=NUM_CLASSES,
            resolution=grid_resolution(num_points),
            backbone=backbone,
            **preset,
        ).to(device)
        if reparam:
            from ..nn.reparam import reparameterize_model

            model.eval()
            pos, batch, _ = make_batch(1, num_points, device)
            with torch.no_grad():
                model(pos, None, batch)
            reparameterize_model(model)
        return model
    if family == "pointnet2":
        return build_model("pointnet2_classifier", in_channels=3, num_classes=NUM_CLASSES)
    return build_model("point_ckconv_classifier", in_channels=3, num_classes=NUM_CLASSES, k=64 if k is None else k)


def make_batch(batch_size: int, num_points: int, device: torch.device, seed: int = 0) -> Tuple[Tensor, Tensor, Tensor]:
    """``(pos [B*N, 3], batch [B*N], y [B])``: points on random ellipsoids inside ``[-0.9, 0.9]^3``
    (:func:`gridify.bench.harness.ellipsoid_clouds`: cloud ``i`` and its label are the same at every batch size)."""
    points, _ = harness.ellipsoid_clouds(batch_size, num_points, seed)
    pos = points.reshape(-1, 3)
    batch = torch.arange(batch_size).repeat_interleave(num_points)
    y = torch.tensor([(int(seed) * 7919 + 31 * i) % NUM_CLASSES for i in range(batch_size)], dtype=torch.long)
    return pos.to(device), batch.to(device), y.to(device)


# ----------------------------------------------------------------------------- machine
def machine_info(device: torch.device) -> Dict[str, Any]:
    """:func:`gridify.bench.harness.machine_facts`, the device's name (the CPU's on the CPU), CUDA's and PyG's versions."""
    info = harness.machine_facts(device)
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
    else:
        info["device_name"] = info["cpu"]
    try:
        import torch_geometric

        info["torch_geometric"] = torch_geometric.__version__
    except ImportError:
        pass
    return info


def matmul_gflops(device: torch.device, size: int = 2048, repeats: int = 10) -> float:
    """Peak fp32 matmul rate: the best GFLOP/s of ``repeats`` timed ``torch.mm`` of two
    ``size x size`` matrices, after three untimed ones (:func:`gridify.bench.harness.time_repeats`, its
    ``min_s``; the clock waits for a CUDA device).

    The best, not the median: it is the peak the forward pass is compared with, and one slow
    repeat (another process, a clock change) must not lower it. Measured on this machine, 2
    threads, 15 repeats: 1024^2 min 226 / median 324 / max 334 GFLOP/s; a median of 5 taken
    right after start-up once read 205.
    """
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    timing = harness.time_repeats(lambda: torch.mm(a, b), max(1, repeats), warmup=3, clock=harness.Clock(device))
    return 2.0 * size**3 / timing["min_s"] / 1e9


# ----------------------------------------------------------------------------- FLOP counting
def count_forward_flops(model: nn.Module, args: Tuple[Any, ...]) -> Tuple[float, float]:
    """``(counted, fft_estimate)`` FLOPs of one ``model(*args)`` forward pass (no grad).

    ``counted`` comes from :class:`torch.utils.flop_counter.FlopCounterMode` (matmuls,
    convolutions); ``fft_estimate`` adds the FFT convolutions of every
    :class:`gridify.nn.flexconv.SepFlexConv3d` that takes its FFT path, which the counter skips.
    """
    from torch.utils.flop_counter import FlopCounterMode

    from ..nn import flexconv

    fft_flops = [0.0]

    def hook(module: nn.Module, inputs: Tuple[Any, ...]) -> None:
        x = inputs[0]
        r = x.shape[-1]
        p, _, _ = module.kernel_geometry(r)
        k = 2 * p + 1
        if not module._use_fft(k, x.device):
            return
        n = flexconv.next_fast_len(r + p)
        b, c = x.shape[0], x.shape[1]
        size = n**3
        per_transform = 2.5 * size * math.log2(max(size, 2))
        fft_flops[0] += per_transform * (b * c + c + b * c) + 6.0 * b * c * n * n * (n // 2 + 1)

    handles = [m.register_forward_pre_hook(hook) for m in model.modules() if isinstance(m, flexconv.SepFlexConv3d)]
    try:
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            model(*args)
    finally:
        for h in handles:
            h.remove()
    return float(counter.get_total_flops()), fft_flops[0]


# ----------------------------------------------------------------------------- measurement
#: what a measuring child of ``(model, N[, k])`` times: the inference, or the training step
PARTS = ("infer", "train")
#: the version of the cells a ``--_worker`` child takes (:func:`cell_spec`'s keys): ``scripts/bench_guard.py``
#: reads it from each checkout it compares and refuses one whose worker takes other cells
WORKER_PROTOCOL = 2
#: seconds a child may take beyond its time budget before it is stopped (a guard against a hung child: the
#: minimum repeats run whatever the budget, so a very slow step may need long)
CHILD_TIMEOUT_S = 1800.0


def time_cell(
    fn: Callable[[int], None], device: torch.device, batch: int, timer: harness.MedianTimer
) -> Dict[str, Any]:
    """``fn(batch)`` timed by ``timer`` (:class:`gridify.bench.harness.MedianTimer`: warm-up, then repeats
    until the median is known); a batch that runs out of memory is halved and timed again (warm-up included),
    and ``batch`` of the result is the batch timed."""
    b = batch
    while True:
        try:
            return {"batch": b, **timer.run(functools.partial(fn, b))}
        except (RuntimeError, MemoryError) as exc:
            if not is_oom(exc) or b == 1:
                raise
            b = max(1, b // 2)
            if device.type == "cuda":
                torch.cuda.empty_cache()


def _per_cloud(row: Dict[str, Any], prefix: str, batch: int, num_points: int) -> None:
    """``<prefix>clouds_per_s`` (and for the inference ``us_per_point``) with their intervals, from
    ``<prefix>ms_per_batch``'s (the same measurement, so the same spread)."""
    key = f"{prefix}ms_per_batch"
    med, lo, hi = harness.interval_of(row, key)
    rel, reached = row[f"{key}_rel_ci"], row[f"{key}_reached"]
    row.update(
        harness.derived_fields(
            f"{prefix}clouds_per_s", (1e3 * batch / med, 1e3 * batch / lo, 1e3 * batch / hi), rel, reached
        )
    )
    if not prefix:
        scale = 1e3 / (batch * num_points)
        row.update(harness.derived_fields("us_per_point", (med * scale, lo * scale, hi * scale), rel, reached))


def measure(
    model_name: str,
    num_points: int,
    k: Optional[int] = None,
    batch_size: int = 32,
    repeats: int = 6,
    warmup: int = 1,
    time_budget: float = 20.0,
    device: str = "cpu",
    train_step: bool = True,
    max_points_per_batch: int = DEFAULT_MAX_POINTS_PER_BATCH,
    count_flops: bool = True,
    seed: int = 0,
    precision: str = "fp32",
    rel_ci: float = 0.05,
    part: str = "both",
) -> Dict[str, Any]:
    """One benchmark row: inference (``part="infer"``), training step (``"train"``) or both (``"both"``, in this
    process, inference first) of one model at one N: times, peak memory, FLOPs.

    The batch is :func:`gridify.bench.harness.batch_for` of ``batch_size`` and ``max_points_per_batch`` (halved
    only after an out-of-memory error); each figure is timed by :class:`gridify.bench.harness.MedianTimer`
    (``warmup`` untimed calls, then at least ``repeats`` timed ones, more until the median's 95 % interval is
    within ``± rel_ci`` or ``time_budget`` seconds of timed calls are spent). ``precision``
    (``fp32``/``bf16``/``fp16``) runs the forward passes under that autocast.
    """
    if part not in ("both", *PARTS):
        raise ValueError(f"benchmark: part must be one of both, {', '.join(PARTS)}; got {part!r}")
    dev = torch.device(device)
    torch.manual_seed(seed)
    family, _, reparam = _model_kind(model_name)
    row = _row_head(model_name, num_points, k, precision)
    reason = skip_reason(model_name)
    if reason is not None:
        row["status"] = f"skipped: {reason}"
        return row
    model = build_benchmark_model(model_name, num_points, k, dev).to(dev)
    row["params"] = sum(p.numel() for p in model.parameters())
    batch = harness.batch_for(num_points, batch_size, max_points_per_batch)
    data: Dict[int, Tuple[Tensor, Tensor, Tensor]] = {}

    def get(b: int) -> Tuple[Tensor, Tensor, Tensor]:
        if b not in data:
            data[b] = make_batch(b, num_points, dev, seed)
        return data[b]

    def infer(b: int) -> None:
        pos, bvec, _ = get(b)
        with torch.no_grad(), autocast(precision, dev):
            model(pos, None, bvec)

    timer = harness.MedianTimer(
        rel_ci=rel_ci, min_repeats=repeats, max_seconds=time_budget, warmup=warmup, clock=harness.Clock(dev)
    )
    # One cold single-cloud forward pass first: lazy imports (SciPy's KD-tree, ...), kernel caches and library
    # workspaces would otherwise count as activation memory. Then the memory baseline.
    model.eval()
    infer(1)
    sync(dev)
    memory = PeakMemory(dev)
    if part in ("both", "infer"):
        res = time_cell(infer, dev, batch, timer)
        b = res["batch"]
        row.update(batch=b, **harness.figure_fields("ms_per_batch", res, 1e3), peak_mb=memory.peak())
        row.update(repeats=res["repeats"], stopped=res["stopped"], warmup_ms=[1e3 * t for t in res["warmup_s"]])
        _per_cloud(row, "", b, num_points)
    if part in ("both", "train") and train_step and not reparam:
        row.update(_measure_training(model, get, dev, precision, batch, timer))
        row["train_peak_mb"] = memory.peak()
        _per_cloud(row, "train_", row["train_batch"], num_points)
    if part == "both":
        derive(row)
    if part in ("both", "infer") and count_flops and family == "gridified":
        # after the timings: the counter's forward pass (a dispatch mode) must not run between two of them
        counted, fft = count_forward_flops(model, (get(1)[0], None, get(1)[1]))
        row.update(gflop_per_cloud=(counted + fft) / 1e9, gflop_per_cloud_counted=counted / 1e9)
    row["status"] = "ok"
    return row


def _row_head(model_name: str, num_points: int, k: Optional[int], precision: str) -> Dict[str, Any]:
    """What a row says of its cell before anything is measured: model, N, precision, grid resolution, k."""
    family = _model_kind(model_name)[0]
    default_k = CLASSIFIER_PRESETS[model_preset(model_name)]["k"] if family == "gridified" else 64
    return {
        "model": model_name,
        "num_points": num_points,
        "precision": precision,
        "resolution": grid_resolution(num_points) if family == "gridified" else None,
        "k": (default_k if k is None else k) if model_uses_k(model_name) else None,
    }


def derive(row: Dict[str, Any]) -> None:
    """The figures of a row that need both the inference and the training step (and the FLOPs): training memory
    per cloud, ``train_over_inference`` (training over inference time per cloud, with its interval) and the
    achieved GFLOP/s (with the inference's spread)."""
    if row.get("train_batch"):
        if row.get("train_peak_mb") is not None:
            row["train_peak_mb_per_cloud"] = row["train_peak_mb"] / row["train_batch"]
        if row.get("batch"):
            row.update(
                harness.ratio_fields(
                    "train_over_inference",
                    row,
                    "train_ms_per_batch",
                    row,
                    "ms_per_batch",
                    1 / row["train_batch"],
                    1 / row["batch"],
                )
            )
    if row.get("gflop_per_cloud") and harness.interval_of(row, "clouds_per_s"):
        cps = harness.interval_of(row, "clouds_per_s")
        g = row["gflop_per_cloud"]
        row.update(
            harness.derived_fields(
                "gflops_achieved",
                (g * cps[0], g * cps[1], g * cps[2]),
                row.get("clouds_per_s_rel_ci"),
                bool(row.get("clouds_per_s_reached")),
            )
        )


def _measure_training(
    model: nn.Module,
    get: Callable[[int], Tuple[Tensor, Tensor, Tensor]],
    dev: torch.device,
    precision: str,
    batch: int,
    timer: harness.MedianTimer,
) -> Dict[str, Any]:
    """A whole training step timed by ``timer``: zero_grad, forward (under ``precision``), cross-entropy,
    backward, AdamW step (PyTorch's default implementation, the same for every model)."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    def step(bb: int) -> None:
        pos, bvec, y = get(bb)
        opt.zero_grad(set_to_none=True)
        with autocast(precision, dev):
            logits = model(pos, None, bvec)
        nn.functional.cross_entropy(logits.float(), y).backward()
        opt.step()

    res = time_cell(step, dev, batch, timer)
    return {
        "train_batch": res["batch"],
        **harness.figure_fields("train_ms_per_batch", res, 1e3),
        "train_stopped": res["stopped"],
        "train_warmup_ms": [1e3 * t for t in res["warmup_s"]],
    }


def _worker_main(spec_json: str) -> int:
    """A measuring child (``--_worker JSON``): :func:`measure` of the spec; its row as one tagged JSON line."""
    spec = json.loads(spec_json)
    threads = spec.pop("threads", None)
    if threads:
        torch.set_num_threads(int(threads))
    malloc_applied = tune_cpu_allocator() if spec.pop("malloc", "default") == "tuned" else False
    try:
        row = measure(**spec)
    except Exception as exc:  # reported as a row, the sweep goes on
        row = {
            "model": spec.get("model_name"),
            "num_points": spec.get("num_points"),
            "k": spec.get("k"),
            "status": f"error: {type(exc).__name__}: {exc}"[:300],
        }
    row.update(malloc_applied=malloc_applied, threads=torch.get_num_threads())
    print(RESULT_TAG + json.dumps(row), flush=True)
    return 0


def run_isolated(spec: Dict[str, Any], timeout: float, root: Optional[Path] = None) -> Dict[str, Any]:
    """One measurement in a fresh process (:func:`gridify.bench.harness.run_child`, ``python -m
    gridify.bench.synthetic --_worker SPEC`` with the gridify of the checkout ``root``, default this one); its
    row, or one naming the failure."""
    base = {"model": spec["model_name"], "num_points": spec["num_points"], "k": spec.get("k")}
    run = harness.run_child(
        "gridify.bench.synthetic",
        ["--_worker", json.dumps(spec)],
        marker=RESULT_TAG,
        timeout=timeout,
        threads=spec.get("threads"),
        cwd=None if root is None else str(root),
        root=root,
    )
    if run.timed_out:
        return {**base, "status": f"timeout after {timeout:.0f} s"}
    if run.result is not None:
        return run.result
    tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
    return {**base, "status": f"error: worker exited {run.returncode}: {tail[0][:250]}"}


def merge_parts(infer: Dict[str, Any], train: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """One row from the inference child's row and the training child's (None: not measured): the training
    fields of the second joined to the first, the first failure as the status, then :func:`derive`."""
    row = dict(infer)
    if train is not None:
        if infer.get("status") == "ok" and train.get("status") != "ok":
            row["status"] = f"{train.get('status')} (training step)"
        row.update({k: v for k, v in train.items() if k.startswith("train_")})
    if row.get("status") == "ok":
        derive(row)
    return row


# ----------------------------------------------------------------------------- reporting
def add_ratios(rows: List[Dict[str, Any]], reference: str = "gridified") -> None:
    """``ratio`` = throughput of ``reference`` in the same sweep at the same (N, k) / this row's, i.e. this row's
    time per cloud over the reference's, with its interval (:func:`gridify.bench.harness.ratio_fields`);
    ``train_ratio`` the same for the training step."""

    def key(r: Dict[str, Any], with_k: bool) -> Tuple[Any, ...]:
        return (r.get("sweep"), r.get("num_points"), r.get("k") if with_k else None)

    ref_rows = [r for r in rows if r.get("model") == reference and r.get("status") == "ok"]
    for r in rows:
        if r.get("status") != "ok":
            continue
        with_k = r.get("sweep") == "k"
        match = [g for g in ref_rows if key(g, with_k) == key(r, with_k)]
        if not match:
            continue
        g = match[0]
        for out, prefix in (("ratio", ""), ("train_ratio", "train_")):
            ms, b = f"{prefix}ms_per_batch", f"{prefix}batch" if prefix else "batch"
            if r is g and r.get(ms):
                r[out] = 1.0  # the reference against itself: exactly 1, no spread
            elif r.get(ms) and g.get(ms):
                fields = harness.ratio_fields(out, r, ms, g, ms, 1 / r[b], 1 / g[b])
                r.update(fields or {out: (r[ms] / r[b]) / (g[ms] / g[b])})


def format_table(rows: List[Dict[str, Any]]) -> str:
    """The printed table (:data:`TABLE`'s columns; each time, and each figure derived from one, with its
    spread: :func:`gridify.bench.harness.format_table`)."""
    return harness.format_table(rows, TABLE, fixed_from=1e3, width=60)


def write_csv(path: Path, rows: List[Dict[str, Any]]) -> None:
    """``benchmark.csv``: one line per row, :data:`CSV_COLUMNS`."""
    harness.write_csv(path, rows, CSV_COLUMNS)


def plot(rows: List[Dict[str, Any]], out: Path, *, memory_lower_bound: bool = False, dpi: int = 120) -> List[str]:
    """Log-log plots of time and peak memory per cloud vs N and vs k (:func:`gridify.bench.plots.plot_scaling`)."""
    from .plots import plot_scaling

    return plot_scaling(rows, out, memory_lower_bound=memory_lower_bound, dpi=dpi)


# ----------------------------------------------------------------------------- CLI
build_parser = bench_parser  # the parser lives in gridify._commands (no torch while parsing)


def _check_args(args: argparse.Namespace) -> Tuple[List[str], List[int], List[int]]:
    """Apply ``--quick``, validate the arguments; ``(models, N values, k values)``."""
    if args.quick:
        args.num_points = args.num_points or [512, 1024]
        args.k = [8, 16] if args.k is None else args.k
        args.k_num_points = min(args.k_num_points, 512)
        args.batch_size = min(args.batch_size, 4)
        args.repeats = min(args.repeats, 2)
        args.time_budget = min(args.time_budget, 5.0)
    models = args.models or list(DEFAULT_MODELS)
    num_points = args.num_points or list(DEFAULT_NUM_POINTS)
    ks = DEFAULT_KS if args.k is None else args.k
    for name in models:
        try:
            _model_kind(name)  # fail fast on unknown names
        except ValueError as exc:
            prog = os.environ.get("GRIDIFY_PROG") or "benchmark"
            raise SystemExit(f"{prog}: error: --models: {str(exc).removeprefix('benchmark: ')}") from None
    return models, num_points, ks


def cell_spec(
    args: argparse.Namespace, model: str, num_points: int, k: Optional[int], device: torch.device, part: str
) -> Dict[str, Any]:
    """The keyword arguments of :func:`measure` for one part (``infer`` / ``train``) of one cell, from the parsed
    ``gridify bench`` arguments: what a measuring child gets (``scripts/bench_guard.py`` builds its cells here)."""
    return dict(
        model_name=model,
        num_points=num_points,
        k=k,
        batch_size=args.batch_size,
        repeats=args.repeats,
        rel_ci=args.rel_ci,
        warmup=args.warmup,
        time_budget=args.time_budget,
        device=str(device),
        train_step=args.train_step,
        max_points_per_batch=args.max_points_per_batch,
        count_flops=args.flops and part == "infer",
        seed=args.seed,
        precision=args.precision,
        part=part,
    )


def cell_parts(model: str, train_step: bool) -> List[str]:
    """The parts measured of a model: the inference, and the training step unless ``--no-train-step`` or a
    ``-reparam`` model (inference only)."""
    return ["infer", "train"] if train_step and not _model_kind(model)[2] else ["infer"]


def child_timeout(time_budget: float) -> float:
    """Seconds a measuring child may run: its time budget a few times over, plus :data:`CHILD_TIMEOUT_S`."""
    return 4 * time_budget + CHILD_TIMEOUT_S


def _measure_here(spec: Dict[str, Any]) -> Dict[str, Any]:
    try:
        return measure(**spec)
    except Exception as exc:  # noqa: BLE001 - a failing model is a row, the sweep goes on
        return {
            "model": spec["model_name"],
            "num_points": spec["num_points"],
            "k": spec.get("k"),
            "status": f"error: {type(exc).__name__}: {exc}"[:300],
        }


def _run_jobs(
    args: argparse.Namespace,
    jobs: List[Tuple[str, str, int, Optional[int]]],
    device: torch.device,
    malloc_applied: bool,
    started: float,
) -> List[Dict[str, Any]]:
    """Measure every (sweep, model, N, k) job: its inference and its training step each in a fresh process
    (:func:`run_isolated`), or both in this one with ``--isolation inprocess``; one row per job."""
    rows: List[Dict[str, Any]] = []
    child = {"threads": torch.get_num_threads(), "malloc": "tuned" if malloc_applied else "default"}
    for i, (sweep, model, n, k) in enumerate(jobs):
        parts: Dict[str, Dict[str, Any]] = {}
        for part in cell_parts(model, args.train_step):
            spec = cell_spec(args, model, n, k, device, part)
            if args.isolation == "subprocess":
                parts[part] = run_isolated({**spec, **child}, timeout=child_timeout(args.time_budget))
            else:
                parts[part] = _measure_here(spec)
            if parts[part].get("status") != "ok":
                break
        row = merge_parts(parts["infer"], parts.get("train"))
        row["sweep"] = sweep
        rows.append(row)
        print(
            f"[{i + 1}/{len(jobs)} {time.monotonic() - started:.0f}s] {sweep}-sweep {model} N={n} "
            f"k={row.get('k')}: {row.get('status')} batch={row.get('batch')} "
            f"ms/batch={fmt_value(row.get('ms_per_batch'))}"
            f"{harness.fmt_spread(row.get('ms_per_batch_rel_ci'), row.get('ms_per_batch_reached'))} "
            f"train ms/batch={fmt_value(row.get('train_ms_per_batch'))}"
            f"{harness.fmt_spread(row.get('train_ms_per_batch_rel_ci'), row.get('train_ms_per_batch_reached'))} "
            f"peak={fmt_value(row.get('peak_mb'))} MB",
            flush=True,
        )
    return rows


def _report(args: argparse.Namespace, result: Dict[str, Any], out: Path) -> None:
    """Write the JSON/CSV/PNG outputs and print the table."""
    rows, peak = result["rows"], result["matmul_gflops"]
    harness.write_json(out / "benchmark.json", result)
    write_csv(out / "benchmark.csv", rows)
    print()
    print(format_table(rows))
    print(harness.SPREAD_NOTE)
    for r in (r for r in rows if r.get("model") == "gridified" and r.get("gflops_achieved")):
        print(
            f"gridified {r['sweep']}-sweep N={r['num_points']} k={r.get('k')}: {r['gflops_achieved']:.1f} GFLOP/s "
            f"= {100 * r['gflops_achieved'] / peak:.0f} % of the matmul peak ({peak:.1f})"
        )
    if args.plots:
        try:
            for path in plot(rows, out, memory_lower_bound=args.malloc == "tuned"):
                print(f"wrote {path}")
        except ImportError:
            print("matplotlib not installed: no plots")
    print(f"wrote {out / 'benchmark.json'} and {out / 'benchmark.csv'}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``gridify bench``'s synthetic sweep (and ``python -m gridify.bench.synthetic --_worker SPEC``, a measuring
    child): prints the table, writes JSON, CSV and the plots; 0, or a SystemExit when no cell was measured."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # an OSError (the --out folder, a full disk) ends the command with one line naming the path
    with one_line_errors(os.environ.get("GRIDIFY_PROG") or "benchmark"):
        return _main(argv)


def _main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    if args._worker is not None:
        return _worker_main(args._worker)
    models, num_points, ks = _check_args(args)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    malloc_applied = tune_cpu_allocator() if args.malloc == "tuned" else False
    if args.malloc == "tuned" and not malloc_applied:
        print(
            "benchmark: --malloc tuned has no effect here (no glibc mallopt); measuring with the defaults", flush=True
        )
    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else ("cpu" if args.device == "auto" else args.device)
    )
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("benchmark: --device cuda requested but CUDA is not available")
    args.precision = resolve_precision(args.precision, device, where="benchmark")
    reference = args.reference or next((m for m in models if _model_kind(m)[0] == "gridified"), models[0])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info = machine_info(device)
    print(f"device: {info['device_name']} ({device}), threads {info['threads']}, torch {info['torch']}", flush=True)
    peak_before = matmul_gflops(device, size=args.matmul_size)
    print(f"dense fp32 matmul ({args.matmul_size}^3): {peak_before:.1f} GFLOP/s", flush=True)
    jobs: List[Tuple[str, str, int, Optional[int]]] = [("n", m, n, None) for m in models for n in num_points]
    jobs += [("k", m, args.k_num_points, k) for m in models if model_uses_k(m) for k in ks]
    started = time.monotonic()  # the run's wall time (progress lines, wall_seconds): no figure
    rows = _run_jobs(args, jobs, device, malloc_applied, started)
    # the peak is measured again after the sweep and the higher of the two is kept, so that a
    # slow moment during one measurement cannot flatter the forward's fraction of it
    peak_after = matmul_gflops(device, size=args.matmul_size)
    peak = max(peak_before, peak_after)
    print(f"dense fp32 matmul after the sweep: {peak_after:.1f} GFLOP/s; peak used: {peak:.1f}", flush=True)
    for row in rows:
        if row.get("gflops_achieved"):
            row["matmul_fraction"] = row["gflops_achieved"] / peak
    add_ratios(rows, reference)
    result = {
        "machine": info,
        "precision": args.precision,
        "reference": reference,
        "matmul_gflops": peak,
        "matmul_gflops_before_after": [peak_before, peak_after],
        "malloc": "tuned (gridify.runtime.tune_cpu_allocator)" if malloc_applied else "default",
        "resolution_rule": "R = max(2, round(N ** (1/3)))",
        "memory_method": (
            "cuda max_memory_allocated"
            if device.type == "cuda"
            else f"peak RSS increase (ru_maxrss), isolation={args.isolation}"
            + (", malloc tuned: lower bounds" if malloc_applied else "")
        ),
        "flops_method": "FlopCounterMode + estimated FFT convolutions (see gridify.bench.synthetic)",
        "settings": {k: v for k, v in vars(args).items() if k != "_worker"},
        "models": models,
        "num_points": num_points,
        "ks": ks,
        "rows": rows,
        "wall_seconds": time.monotonic() - started,
    }
    _report(args, result, out)
    harness.check_measured(  # a sweep in which every model failed ends non-zero (it printed a table of errors)
        os.environ.get("GRIDIFY_PROG") or "benchmark",
        rows,
        out / "benchmark.json",
        lambda row: f"{row.get('model')} N={row.get('num_points')}" + (f" k={row['k']}" if row.get("k") else ""),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
