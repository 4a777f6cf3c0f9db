"""Speed and memory benchmark: gridified classifier vs native point-cloud baselines.

Measures, for every model and every number of points ``N`` (and, in a second sweep, every
neighbourhood size ``k`` at a fixed ``N``):

* inference time of a batch (median of ``--repeats`` runs after ``--warmup`` runs, under
  ``torch.no_grad()``, model in eval mode), throughput (clouds/s) and time per point;
* training-step time (forward, cross-entropy, backward, AdamW step; ``--train-step``);
* peak memory: on CUDA ``torch.cuda.max_memory_allocated`` minus the memory allocated before
  the measurement; on the CPU the increase of the process's peak resident set size
  (``getrusage(RUSAGE_SELF).ru_maxrss``) over its resident set size after one cold
  single-cloud forward pass (which loads lazy imports and caches). ``ru_maxrss`` only ever grows, so every (model, N) measurement runs in a fresh
  subprocess (``--isolation subprocess``, the default); ``--isolation inprocess`` is faster but
  its CPU memory figures are lower bounds. The training peak is measured after the inference
  runs in the same process, so on the CPU it is ``max(inference peak, training peak)``.
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

**Time budget**: every measurement (one model, one ``N``, inference or training) first runs
one batch of a single cloud as a warm-up and times a second one (skipped when the first already
took a quarter of the budget; when it took half the budget, that single run is the measurement);
the batch size is then the largest ``b <= --batch-size`` (and
``b * N <= --max-points-per-batch``) for which ``(1 + repeats) * b * t_1`` fits in
``--time-budget``, the warm-up and the timed repeats stop early once the budget is spent (at
least one timed run is always made), and the batch size actually used is recorded. A batch that
runs out of memory is halved and retried.

The inputs are synthetic: ``N`` points on the surface of a random ellipsoid inside
``[-0.9, 0.9]^3`` per cloud, coordinates as the only features (``in_channels = 3``).

Outputs in ``--out``: ``benchmark.json`` (machine, settings, matmul peak, rows), ``benchmark.csv``
(one row per measurement, :data:`CSV_COLUMNS`), ``scaling_n.png`` / ``scaling_k.png`` (log-log
time per cloud and peak memory per cloud, like thesis figures 4.8 and 4.9) and a printed table
with each model's throughput ratio ``gridified / model``.

Usage::

    python scripts/benchmark.py --quick
    python scripts/benchmark.py --threads 2 --out outputs/benchmark

``--recipe NAME`` switches to another mode, real training steps of a training recipe on real data
(:mod:`gridify.bench.recipe`): ``gridify bench --recipe modelnet10_fast --data-root DIR``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from .._commands import bench_parser
from .._paths import one_line_errors
from ..models.gridified import CLASSIFIER_PRESETS
from ..precision import autocast, resolve_precision
from ..runtime import cpu_model  # noqa: F401 (public here too)
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
NUM_CLASSES = 40
CSV_COLUMNS = [
    "sweep",
    "model",
    "precision",
    "num_points",
    "resolution",
    "k",
    "batch",
    "ms_per_batch",
    "clouds_per_s",
    "us_per_point",
    "peak_mb",
    "train_batch",
    "train_ms_per_batch",
    "train_clouds_per_s",
    "train_peak_mb",
    "train_peak_mb_per_cloud",
    "train_over_inference",
    "repeats",
    "params",
    "gflop_per_cloud",
    "gflops_achieved",
    "ratio",
    "train_ratio",
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
    """``(pos [B*N, 3], batch [B*N], y [B])``: points on random ellipsoids inside ``[-0.9, 0.9]^3``."""
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(batch_size, num_points, 3, generator=g)
    d = d / d.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    axes = 0.45 + 0.45 * torch.rand(batch_size, 1, 3, generator=g)
    pos = (d * axes).reshape(-1, 3)
    batch = torch.arange(batch_size).repeat_interleave(num_points)
    y = torch.randint(0, NUM_CLASSES, (batch_size,), generator=g)
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
    ``size x size`` matrices, after three untimed ones.

    The best, not the median: it is the peak the forward pass is compared with, and one slow
    repeat (another process, a clock change) must not lower it. Measured on this machine, 2
    threads, 15 repeats: 1024^2 min 226 / median 324 / max 334 GFLOP/s; a median of 5 taken
    right after start-up once read 205.
    """
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    for _ in range(3):
        torch.mm(a, b)
    sync(device)
    best = math.inf
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * size**3 / best / 1e9


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
class _Timer:
    """Run ``fn(b)`` under a time budget: probe at b=1, pick b, warm up, time repeats."""

    def __init__(
        self, fn: Callable[[int], None], device: torch.device, budget: float, repeats: int, warmup: int, max_batch: int
    ) -> None:
        self.fn, self.device, self.budget = fn, device, budget
        self.repeats, self.warmup, self.max_batch = repeats, warmup, max_batch

    def _once(self, b: int) -> float:
        t0 = time.perf_counter()
        self.fn(b)
        sync(self.device)
        return time.perf_counter() - t0

    def run(self) -> Dict[str, Any]:
        start = time.perf_counter()
        t1 = self._once(1)  # first call: one-time costs (lazy init, caches, allocator growth)
        if t1 >= self.budget / 2:
            # one cloud already takes half the budget: that run is the (single) measurement; at
            # this size the one-time costs are negligible next to the run itself
            return {"batch": 1, "seconds": t1, "repeats": 1}
        if t1 < self.budget / 4:
            t1 = self._once(1)  # the probe proper
        b = self.max_batch
        if b > 1:
            b = max(1, min(b, int(self.budget / ((1 + self.repeats) * max(t1, 1e-9)))))
        while True:
            try:
                warm = self.warmup if b > 1 else max(0, self.warmup - 1)
                for _ in range(warm):
                    if time.perf_counter() - start > self.budget / 2:
                        break
                    self._once(b)
                times = []
                for _ in range(self.repeats):
                    times.append(self._once(b))
                    if time.perf_counter() - start > self.budget:
                        break
                break
            except (RuntimeError, MemoryError) as exc:
                if not is_oom(exc) or b == 1:
                    raise
                b = max(1, b // 2)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
        return {"batch": b, **harness.summarize(times)}


def measure(
    model_name: str,
    num_points: int,
    k: Optional[int] = None,
    batch_size: int = 32,
    repeats: int = 5,
    warmup: int = 1,
    time_budget: float = 20.0,
    device: str = "cpu",
    train_step: bool = True,
    max_points_per_batch: int = 1 << 20,
    count_flops: bool = True,
    seed: int = 0,
    precision: str = "fp32",
) -> Dict[str, Any]:
    """One benchmark row: inference (and training-step) time and peak memory of one model at one N.

    ``precision`` (``fp32``/``bf16``/``fp16``) runs the forward passes under that autocast.
    """
    dev = torch.device(device)
    torch.manual_seed(seed)
    family, _, reparam = _model_kind(model_name)
    default_k = CLASSIFIER_PRESETS[model_preset(model_name)]["k"] if family == "gridified" else 64
    row: Dict[str, Any] = {
        "model": model_name,
        "num_points": num_points,
        "precision": precision,
        "resolution": grid_resolution(num_points) if family == "gridified" else None,
        "k": (default_k if k is None else k) if model_uses_k(model_name) else None,
    }
    reason = skip_reason(model_name)
    if reason is not None:
        row["status"] = f"skipped: {reason}"
        return row
    model = build_benchmark_model(model_name, num_points, k, dev).to(dev)
    row["params"] = sum(p.numel() for p in model.parameters())
    max_batch = max(1, min(batch_size, max_points_per_batch // num_points))
    data = {b: make_batch(b, num_points, dev, seed) for b in sorted({1, max_batch})}

    def get(b: int) -> Tuple[Tensor, Tensor, Tensor]:
        if b not in data:
            data[b] = make_batch(b, num_points, dev, seed)
        return data[b]

    def infer(b: int) -> None:
        pos, batch, _ = get(b)
        with torch.no_grad(), autocast(precision, dev):
            model(pos, None, batch)

    # One cold forward pass first: lazy imports (SciPy's KD-tree, ...), kernel caches and
    # library workspaces would otherwise count as activation memory. Then the memory baseline.
    model.eval()
    infer(1)
    sync(dev)
    memory = PeakMemory(dev)
    res = _Timer(infer, dev, time_budget, repeats, warmup, max_batch).run()
    b = res["batch"]
    row.update(
        batch=b,
        ms_per_batch=1e3 * res["seconds"],
        clouds_per_s=b / res["seconds"],
        us_per_point=1e6 * res["seconds"] / (b * num_points),
        peak_mb=memory.peak(),
        repeats=res["repeats"],
    )
    if count_flops and family == "gridified":
        pos, batch, _ = get(1)
        counted, fft = count_forward_flops(model, (pos, None, batch))
        row["gflop_per_cloud"] = (counted + fft) / 1e9
        row["gflop_per_cloud_counted"] = counted / 1e9
        row["gflops_achieved"] = row["gflop_per_cloud"] * row["clouds_per_s"]
    if train_step and not reparam:
        row.update(_measure_training(model, get, dev, precision, b, time_budget, repeats, warmup))
        row["train_peak_mb"] = memory.peak()
        row["train_peak_mb_per_cloud"] = row["train_peak_mb"] / row["train_batch"]
        row["train_over_inference"] = row["train_ms_per_batch"] / row["train_batch"] / (row["ms_per_batch"] / b)
    row["status"] = "ok"
    return row


def _measure_training(
    model: nn.Module,
    get: Callable[[int], Tuple[Tensor, Tensor, Tensor]],
    dev: torch.device,
    precision: str,
    max_batch: int,
    time_budget: float,
    repeats: int,
    warmup: int,
) -> Dict[str, Any]:
    """Median time of a whole training step: zero_grad, forward (under ``precision``), cross-entropy,
    backward, AdamW step (PyTorch's default implementation, the same for every model)."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    def step(bb: int) -> None:
        pos, batch, y = get(bb)
        opt.zero_grad(set_to_none=True)
        with autocast(precision, dev):
            logits = model(pos, None, batch)
        nn.functional.cross_entropy(logits.float(), y).backward()
        opt.step()

    res = _Timer(step, dev, time_budget, repeats, warmup, max_batch).run()
    tb = res["batch"]
    return dict(train_batch=tb, train_ms_per_batch=1e3 * res["seconds"], train_clouds_per_s=tb / res["seconds"])


def _worker_main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    threads = spec.pop("threads", None)
    if threads:
        torch.set_num_threads(int(threads))
    if spec.pop("malloc", "default") == "tuned":
        tune_cpu_allocator()
    try:
        row = measure(**spec)
    except Exception as exc:  # reported as a row, the sweep goes on
        row = {
            "model": spec.get("model_name"),
            "num_points": spec.get("num_points"),
            "k": spec.get("k"),
            "status": f"error: {type(exc).__name__}: {exc}"[:300],
        }
    print(RESULT_TAG + json.dumps(row), flush=True)
    return 0


def _run_isolated(spec: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    """One measurement in a fresh process (:func:`gridify.bench.harness.run_child`); its row, or one naming the failure."""
    base = {"model": spec["model_name"], "num_points": spec["num_points"], "k": spec.get("k")}
    run = harness.run_child(
        "gridify.bench.synthetic",
        ["--_worker", json.dumps(spec)],
        marker=RESULT_TAG,
        timeout=timeout,
        threads=spec.get("threads"),
    )
    if run.timed_out:
        return {**base, "status": f"timeout after {timeout:.0f} s"}
    if run.result is not None:
        return run.result
    tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
    return {**base, "status": f"error: worker exited {run.returncode}: {tail[0][:250]}"}


# ----------------------------------------------------------------------------- reporting
def add_ratios(rows: List[Dict[str, Any]], reference: str = "gridified") -> None:
    """``ratio`` = throughput of ``reference`` in the same sweep at the same (N, k) / this row's."""

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
        r["ratio"] = g["clouds_per_s"] / r["clouds_per_s"]
        if g.get("train_clouds_per_s") and r.get("train_clouds_per_s"):
            r["train_ratio"] = g["train_clouds_per_s"] / r["train_clouds_per_s"]


def format_table(rows: List[Dict[str, Any]]) -> str:
    """The printed table (:data:`TABLE`'s columns)."""
    return harness.format_table(rows, TABLE, fixed_from=1e4, width=60)


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
    for name, v in (
        ("--batch-size", args.batch_size),
        ("--repeats", args.repeats),
        ("--max-points-per-batch", args.max_points_per_batch),
        ("--k-num-points", args.k_num_points),
    ):
        if v < 1:
            raise SystemExit(f"benchmark: {name} must be >= 1, got {v}")
    if any(n < 8 for n in num_points) or any(k < 1 for k in ks):
        raise SystemExit("benchmark: --num-points must be >= 8 and --k >= 1")
    if args.matmul_size < 16:
        raise SystemExit(f"benchmark: --matmul-size must be >= 16, got {args.matmul_size}")
    if args.time_budget <= 0:
        raise SystemExit(f"benchmark: --time-budget must be positive, got {args.time_budget}")
    return models, num_points, ks


def _run_jobs(
    args: argparse.Namespace,
    jobs: List[Tuple[str, str, int, Optional[int]]],
    device: torch.device,
    malloc_applied: bool,
    started: float,
) -> List[Dict[str, Any]]:
    """Measure every (sweep, model, N, k) job, each in a fresh process unless ``--isolation inprocess``."""
    rows: List[Dict[str, Any]] = []
    for i, (sweep, model, n, k) in enumerate(jobs):
        spec = dict(
            model_name=model,
            num_points=n,
            k=k,
            batch_size=args.batch_size,
            repeats=args.repeats,
            warmup=args.warmup,
            time_budget=args.time_budget,
            device=str(device),
            train_step=args.train_step,
            max_points_per_batch=args.max_points_per_batch,
            count_flops=args.flops,
            seed=args.seed,
            precision=args.precision,
        )
        if args.isolation == "subprocess":
            row = _run_isolated(
                {**spec, "threads": torch.get_num_threads(), "malloc": "tuned" if malloc_applied else "default"},
                timeout=6 * args.time_budget + 300,
            )
        else:
            try:
                row = measure(**spec)
            except Exception as exc:
                row = {"model": model, "num_points": n, "k": k, "status": f"error: {type(exc).__name__}: {exc}"}
        row["sweep"] = sweep
        rows.append(row)
        print(
            f"[{i + 1}/{len(jobs)} {time.perf_counter() - started:.0f}s] {sweep}-sweep {model} N={n} "
            f"k={row.get('k')}: {row.get('status')} batch={row.get('batch')} "
            f"ms/batch={fmt_value(row.get('ms_per_batch'))} peak={fmt_value(row.get('peak_mb'))} MB",
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
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a == "--recipe" or a.startswith("--recipe=") for a in argv):
        # real training steps of a recipe on real data: a mode of its own (gridify.benchmark_recipe)
        from .recipe import main as recipe_main

        return recipe_main(argv)
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
    started = time.perf_counter()
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
        "flops_method": "FlopCounterMode + estimated FFT convolutions (see gridify.benchmarking)",
        "settings": {k: v for k, v in vars(args).items() if k != "_worker"},
        "models": models,
        "num_points": num_points,
        "ks": ks,
        "rows": rows,
        "wall_seconds": time.perf_counter() - started,
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
