"""Real training steps of a named recipe on real data: ``gridify bench --recipe NAME``.

The synthetic sweep of :mod:`gridify.bench.synthetic` times random ellipsoid clouds without data
loading, augmentation or duplicate points. This mode times what ``gridify train --config NAME``
actually runs, step by step::

    gridify bench --recipe modelnet10_fast --data-root ../shared/data/modelnet10_pcd --steps 200 \\
        --models gridified,pointnet2,point_ckconv --threads 2 --out outputs/benchmark_recipe

Everything is built by :mod:`gridify.training` itself, not re-implemented: the config (shipped
name or path, ``_base_`` files, ``--override section.key=value`` as in ``gridify train``,
``--data-root``), the datasets and augmentations (:func:`gridify.training.runner.build_data`), the
model, loss and optimizer (:func:`gridify.training.runner.build_module`: the
:class:`~gridify.training.module.PointCloudTask` with its ``training_step`` loss and its
``configure_optimizers`` AdamW + warm-up/cosine schedule) and the training DataLoader
(:meth:`~gridify.training.module.PointCloudData.train_dataloader`: same sampler, batch size,
collate, ``num_workers`` and epoch seeding). Lightning's ``Trainer`` is not run: a small stand-in
tells the data module and the task what they read of it (one process, the epoch, the schedule's
length), and :class:`gridify.bench.harness.MedianTimer` runs ``--warmup`` (at least 1) untimed
steps, then ``--steps`` timed ones. Each model is measured in a fresh process (``--isolation
subprocess``, the default: ``python -m gridify.bench.recipe ... --_worker NAME``), so that no model
inherits the allocator heap, caches or thread pools of the one before; ``--isolation inprocess``
measures them one after another in this process.

Per timed step (means over the steps, ms, each with the half-width of its 95 % Student's t
interval; ``median step``: the median with its order-statistic interval and whether it is within
``± --rel-ci``; on CUDA the clock waits for the device at every boundary, around each neighbour
search too, which takes a little GPU/CPU overlap away):

* ``data``: waiting for the next batch from the loader (reading, augmentation, collation, in this
  process or the workers; the move to the device included);
* ``graph``: the neighbour search inside the forward pass, timed by wrapping the functions the
  models call for the duration of the benchmark: the bilateral kNN graph
  (``bilateral_knn_unchecked`` as called by :class:`gridify.nn.Gridification`) for gridified
  models, FPS + ball query (and kNN interpolation) for PointNet2, the kNN neighbourhoods for
  PointCKConvNet; neighbour searches that a model re-runs in its backward pass (gradient
  checkpointing) count here too, not in ``backward``;
* ``forward``: ``PointCloudTask.training_step`` (forward + loss) minus ``graph``;
* ``backward``: ``loss.backward()`` minus ``graph``;
* ``optimizer``: gradient clipping (when the recipe sets it), ``optimizer.step()``, the LR
  scheduler's step and ``zero_grad``;
* ``step``: the wall time from asking for the batch to the end of the optimizer step (the parts
  plus a few microseconds of bookkeeping);
* ``inference``: ``model.eval()``, ``torch.no_grad()``, the forward pass alone on the first
  ``--infer-steps`` of the same (already loaded) batches; ``train/infer`` = (graph + forward +
  backward + optimizer) / inference, both without data loading;
* ``cores``: CPU time of the process and its DataLoader workers (user + system, from ``os.times``
  and ``/proc/<pid>/stat`` of the live children) over the wall time of the timed steps;
* ``ms/cloud``: ``step`` divided by the clouds in a batch;
* ``synthetic``: the same model, loss and optimizer on synthetic clouds of the same batch size
  and points per cloud (ellipsoid surfaces as in :mod:`gridify.bench.synthetic`, no data loading,
  ``--synthetic-steps``), and ``real/synth`` = ``step`` / ``synthetic``.

Models (``--models``, comma- or space-separated): ``gridified`` (the recipe's own model),
``pointnet2`` and ``point_ckconv`` (the peers :mod:`gridify.baselines` registers as
``pointnet2_classifier`` / ``point_ckconv_classifier``, with their default sizes as the synthetic
benchmark builds them, ``in_channels`` and ``num_classes`` from the recipe's data, and the recipe's
optimizer settings), or any registered model name (built with its defaults). Outputs in ``--out``:
``benchmark_recipe.json`` (machine, settings, resolved config, rows) and ``benchmark_recipe.csv``
(:data:`RECIPE_COLUMNS`), plus the printed table. A model that fails is a row with its error; a run in
which no model could be measured ends with a non-zero status and one line naming the first error.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from .._commands import bench_recipe_parser
from .._paths import PathError, check_output_dir, one_line_errors
from ..tasks import get_task
from . import harness
from .harness import Clock, cpu_seconds, fmt_value

__all__ = [
    "main",
    "build_parser",
    "RECIPE_COLUMNS",
    "PEERS",
    "peer_registry_name",
    "peer_of_task",
    "cpu_seconds",
    "graph_timer",
    "time_training",
    "time_inference",
]

#: columns of ``benchmark_recipe.csv`` (and keys of every row in the JSON)
RECIPE_COLUMNS = [
    "model",
    "registry_name",
    "params",
    "batch",
    "points_per_cloud",
    "steps",
    "data_ms",
    "graph_ms",
    "forward_ms",
    "backward_ms",
    "optimizer_ms",
    "step_ms",
    "step_ms_rel_ci",
    "step_median_ms",
    "step_median_ms_ci_low",
    "step_median_ms_ci_high",
    "step_median_ms_rel_ci",
    "step_median_ms_reached",
    "parts_ms",
    "inference_ms",
    "inference_ms_rel_ci",
    "infer_graph_ms",
    "train_over_inference",
    "train_over_inference_rel_ci",
    "cores_used",
    "ms_per_cloud",
    "infer_ms_per_cloud",
    "synthetic_step_ms",
    "real_over_synthetic",
    "real_over_synthetic_rel_ci",
    "graph_what",
    "status",
]
#: ``--models`` spellings of the peers -> their model family (registry name without the task suffix)
PEERS = {
    "pointnet2": "pointnet2",
    "pointnet++": "pointnet2",
    "point_ckconv": "point_ckconv",
    "pointckconv": "point_ckconv",
    "ckconv": "point_ckconv",
    "pointckconvnet": "point_ckconv",
}
#: what the ``graph`` column times, per model family
GRAPH_WHAT = {
    "gridified": "bilateral kNN (Gridification)",
    "pointnet2": "FPS + ball query (+ kNN interp.)",
    "point_ckconv": "kNN neighbourhoods",
}
DEFAULT_MODELS = ["gridified", "pointnet2", "point_ckconv"]
PRECISIONS = {"32-true": None, "32": None, 32: None, "bf16-mixed": torch.bfloat16}


# ----------------------------------------------------------------------------- command line
#: the parser of ``gridify bench --recipe`` (it lives in ``gridify._commands``: no torch while parsing)
build_parser = bench_recipe_parser


def _model_names(prog: str, given: Optional[List[str]]) -> List[str]:
    from ..registry import MODELS

    names = [n.strip() for item in (given or DEFAULT_MODELS) for n in item.split(",") if n.strip()]
    if not names:
        raise SystemExit(f"{prog}: error: --models names no model")
    for n in names:
        if n.lower() != "gridified" and n.lower() not in PEERS and n not in MODELS:
            raise SystemExit(
                f"{prog}: error: --models: unknown model {n!r}; expected gridified, pointnet2, "
                f"point_ckconv or a registered model ({', '.join(MODELS.names())})"
            )
    return names


def _load_config(prog: str, args: argparse.Namespace) -> Dict[str, Any]:
    """The resolved recipe config; each problem is one line naming the flag it comes from."""
    from ..training.cli import error_line
    from ..training.config import ConfigError, load_config_file, resolve_config

    try:
        load_config_file(args.recipe)
    except ConfigError as exc:
        raise SystemExit(f"{prog}: error: --recipe: {error_line(exc)}") from None
    overrides = list(args.override)
    if args.data_root is not None:
        if not Path(args.data_root).expanduser().is_dir():
            raise SystemExit(f"{prog}: error: --data-root: no such folder: {args.data_root}")
        overrides.append(f"data.root={json.dumps(str(args.data_root))}")
    try:
        return resolve_config(args.recipe, overrides)
    except ConfigError as exc:
        flag = "--override" if args.override else "--recipe"
        raise SystemExit(f"{prog}: error: {flag}: {error_line(exc)}") from None


# ----------------------------------------------------------------------------- measuring
def _hook_points() -> List[Tuple[Any, str]]:
    """``(module, function name)`` of every neighbour search a model calls, found by module global."""
    from ..baselines import point_ckconv, pointnet2
    from ..nn import gridification

    return [
        (gridification, "bilateral_knn_unchecked"),
        (pointnet2, "fps_unchecked"),
        (pointnet2, "radius_unchecked"),
        (pointnet2, "knn_unchecked"),
        (point_ckconv, "knn_neighbourhoods_unchecked"),
    ]


@contextlib.contextmanager
def graph_timer(clock: Callable[[], float]) -> Iterator[List[float]]:
    """Wrap the models' neighbour searches; yields ``[seconds spent in them so far]`` (nested calls once)."""
    spent = [0.0]
    depth = [0]
    saved = []

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*a: Any, **kw: Any) -> Any:
            depth[0] += 1
            t0 = clock() if depth[0] == 1 else 0.0
            try:
                return fn(*a, **kw)
            finally:
                if depth[0] == 1:
                    spent[0] += clock() - t0
                depth[0] -= 1

        return timed

    for module, name in _hook_points():
        fn = getattr(module, name)
        saved.append((module, name, fn))
        setattr(module, name, wrap(fn))
    try:
        yield spent
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)


class _TrainerStandIn:
    """What :class:`PointCloudData` and :class:`PointCloudTask` read of a Lightning trainer: one process,
    the epoch and batch counters of the fit loop, the schedule's length."""

    world_size, global_rank, is_global_zero, global_step = 1, 0, True, 0

    def __init__(self, max_epochs: int, max_steps: int) -> None:
        self.max_epochs, self.max_steps = max_epochs, max_steps
        current = SimpleNamespace(processed=0)
        self.fit_loop = SimpleNamespace(
            epoch_progress=SimpleNamespace(current=current),
            epoch_loop=SimpleNamespace(batch_progress=SimpleNamespace(current=SimpleNamespace(processed=0))),
        )

    def set_epoch(self, epoch: int) -> None:
        self.fit_loop.epoch_progress.current.processed = epoch


class _Batches:
    """The recipe's training batches, epoch after epoch, moved to the device."""

    def __init__(self, datamodule: Any, stand_in: _TrainerStandIn, device: torch.device) -> None:
        self.loader = datamodule.train_dataloader()
        self.stand_in, self.device, self.epoch = stand_in, device, 0
        self.it: Optional[Iterator[Any]] = None

    def next(self) -> Dict[str, Any]:
        while True:
            if self.it is None:
                self.stand_in.set_epoch(self.epoch)
                self.it = iter(self.loader)
            try:
                batch = next(self.it)
                break
            except StopIteration:
                self.it, self.epoch = None, self.epoch + 1
        return {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}

    def close(self) -> None:
        self.it = None  # ends the workers of a multi-process loader


def _autocast(device: torch.device, dtype: Optional[torch.dtype]) -> Any:
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def _train_step(
    task: Any,
    opt: Any,
    sched: Any,
    batch: Dict[str, Any],
    step: int,
    clip: Optional[float],
    clock: Callable[[], float],
    graph: List[float],
    amp: Optional[torch.dtype],
) -> Dict[str, float]:
    """One training step as Lightning runs it; ``{forward, backward, optimizer, graph}`` seconds (graph taken out)."""
    device = batch["pos"].device
    g0, t0 = graph[0], clock()
    task.on_train_batch_start(batch, step)
    with _autocast(device, amp):
        loss = task.training_step(batch, step)
    g1, t1 = graph[0], clock()
    loss.backward()
    g2, t2 = graph[0], clock()
    if clip:
        torch.nn.utils.clip_grad_norm_(task.parameters(), float(clip))
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    t3 = clock()
    return {"forward": (t1 - t0) - (g1 - g0), "backward": (t2 - t1) - (g2 - g1), "optimizer": t3 - t2, "graph": g2 - g0}


def time_training(
    task: Any,
    optim: Tuple[Any, Any],
    batches: Any,
    steps: int,
    warmup: int,
    clock: Callable[[], float],
    graph: List[float],
    clip: Optional[float] = None,
    amp: Optional[torch.dtype] = None,
    keep: int = 0,
    rel_ci: Optional[float] = None,
) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """``warmup`` (at least 1) untimed, then ``steps`` timed training steps over ``batches.next()`` with
    ``optim`` = ``(optimizer, per-step LR scheduler)``, timed by :class:`gridify.bench.harness.MedianTimer`
    (a fixed number of steps; ``rel_ci``: the precision the median step is checked against).

    Returns the mean seconds per step of every part (``data``, ``graph``, ``forward``, ``backward``,
    ``optimizer``, ``step``; ``compute``: graph + forward + backward + optimizer) and ``<part>_ci`` (the half-width of the 95 % t interval of each mean),
    ``timing`` (the median step and its spread, :func:`gridify.bench.harness.summarize`), ``cores`` (CPU seconds
    / wall seconds over the timed steps), ``batch`` and ``points`` (mean clouds per batch and points per cloud),
    and the first ``keep`` timed batches (for the inference timing on the same batches).
    """
    opt, sched = optim
    task.train()
    done: List[Tuple[Dict[str, float], int, int]] = []  # per step: (parts, clouds, points), warm-up included
    kept: List[Dict[str, Any]] = []

    def one_step() -> None:
        i = len(done)
        t0 = clock()
        batch = batches.next()
        t1 = clock()
        parts = _train_step(task, opt, sched, batch, i, clip, clock, graph, amp)
        parts.update(data=t1 - t0, step=clock() - t0)
        parts["compute"] = parts["graph"] + parts["forward"] + parts["backward"] + parts["optimizer"]
        n = get_task(task.task).num_items(batch)  # clouds (sequences, scenes) of the step
        done.append((parts, n, int(batch["pos"].size(0))))
        if i >= warmup and len(kept) < keep:
            kept.append(batch)

    marks: Dict[str, float] = {}

    def start_timing() -> None:
        marks.update(cpu=cpu_seconds(), wall=clock())

    timer = harness.MedianTimer(
        rel_ci=rel_ci, min_repeats=steps, max_repeats=steps, max_seconds=math.inf, warmup=warmup, clock=clock
    )
    timing = timer.run(one_step, before_timing=start_timing)
    wall, cpu = clock() - marks["wall"], cpu_seconds() - marks["cpu"]
    timed = done[warmup:]
    out: Dict[str, Any] = {}
    for part in ("data", "graph", "forward", "backward", "optimizer", "step", "compute"):
        mean, lo, hi = harness.mean_ci([p[part] for p, _, _ in timed])
        out[part], out[f"{part}_ci"] = mean, (hi - lo) / 2
    clouds, points = sum(c for _, c, _ in timed), sum(q for _, _, q in timed)
    out.update(
        timing=timing,
        cores=cpu / wall if wall > 0 else 0.0,
        batch=clouds / steps,
        points=points / max(clouds, 1),
    )
    return out, kept


def optimizer_of(task: Any, stand_in: Any) -> Tuple[Any, Any]:
    """The recipe's optimizer and per-step LR scheduler, from ``PointCloudTask.configure_optimizers``
    (which reads the schedule's length from the trainer, here ``stand_in``)."""
    task._trainer = stand_in
    try:
        conf = task.configure_optimizers()
    finally:
        task._trainer = None  # training_step's self.log calls are then no-ops: nothing records them
    return conf["optimizer"], conf["lr_scheduler"]["scheduler"]


def time_inference(
    task: Any,
    batches: Sequence[Dict[str, Any]],
    clock: Callable[[], float],
    graph: List[float],
    amp: Optional[torch.dtype] = None,
    rel_ci: Optional[float] = None,
) -> Dict[str, Any]:
    """The eval-mode, no-grad forward pass over ``batches`` (one untimed first, on the first batch), timed by
    :class:`gridify.bench.harness.MedianTimer`: ``inference`` (mean seconds per batch), ``inference_ci`` (the
    half-width of its 95 % t interval), ``infer_graph`` (mean seconds of neighbour search) and ``timing`` (the
    median and its spread)."""
    from ..training.metrics import forward_batch

    model = task.model
    model.eval()
    # inference builds its own graph: a graph the loader's workers built ahead is left out
    batches = [{k: v for k, v in b.items() if k != "graph"} for b in batches]
    calls: List[float] = []  # graph seconds per call, the warm-up's first

    def forward() -> None:
        g0 = graph[0]
        forward_batch(model, batches[max(0, len(calls) - 1)], task.task)
        calls.append(graph[0] - g0)

    timer = harness.MedianTimer(
        rel_ci=rel_ci, min_repeats=len(batches), max_repeats=len(batches), max_seconds=math.inf, clock=clock
    )
    with torch.no_grad(), _autocast(batches[0]["pos"].device, amp):
        timing = timer.run(forward)
    model.train()
    mean, lo, hi = harness.mean_ci(timing["times"])
    return {
        "inference": mean,
        "inference_ci": (hi - lo) / 2,
        "infer_graph": statistics.fmean(calls[1:]),
        "timing": timing,
    }


class _SyntheticBatches:
    """Clouds on random ellipsoids (as the synthetic benchmark's) of the recipe's batch and cloud size."""

    def __init__(
        self, like: Dict[str, Any], task: str, clouds: int, points: int, in_channels: int, seed: int = 0
    ) -> None:
        g = torch.Generator().manual_seed(seed)
        d = torch.randn(clouds, points, 3, generator=g)
        d = d / d.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        pos = (d * (0.45 + 0.45 * torch.rand(clouds, 1, 3, generator=g))).reshape(-1, 3)
        # features: xyz, then the unit directions as normals, zero-padded to in_channels
        x = torch.cat([pos, d.reshape(-1, 3), torch.zeros(pos.size(0), max(0, in_channels - 6))], 1)[:, :in_channels]
        device, labels = like["pos"].device, clouds * points if get_task(task).dense else clouds
        self.batch = dict(
            like,
            graph=None,
            pos=pos.to(device),
            x=x.to(device),
            batch=torch.arange(clouds).repeat_interleave(points).to(device),
            ptr=(torch.arange(clouds + 1) * points).to(device),  # as collate_points: the task counts clouds by it
            y=torch.zeros(labels, dtype=like["y"].dtype, device=device),
        )
        if isinstance(like.get("category"), torch.Tensor):
            self.batch["category"] = torch.zeros(clouds, dtype=like["category"].dtype, device=device)

    def next(self) -> Dict[str, Any]:
        return self.batch


# ----------------------------------------------------------------------------- models
def peer_registry_name(name: str, task: str) -> Tuple[str, str]:
    """``(family, registry name)`` of a ``--models`` entry: ``pointnet2`` -> ``pointnet2_classifier``
    (:func:`peer_of_task`)."""
    key = name.lower()
    if key == "gridified":
        return "gridified", ""
    if key in PEERS:
        return PEERS[key], peer_of_task(PEERS[key], task)
    family = next((f for f in GRAPH_WHAT if name.startswith(f)), name)
    return family, name


def peer_of_task(family: str, task: str) -> str:
    """The registry name of the ``family`` peer made for ``task``, or for a task whose models serve it (the tasks'
    :attr:`~gridify.tasks.Task.models` tables: ``pointnet2_segmenter`` for scene segmentation); the family's
    classifier when none is (refused with its task by ``_check_model_tasks``)."""
    serving = (task, *get_task(task).model_tasks)
    made = [n for t in serving for n in get_task(t).models]
    return next((n for n in made if n.startswith(f"{family}_")), f"{family}_classifier")


def _build_task(cfg: Dict[str, Any], info: Dict[str, Any], num_train: int, name: str) -> Tuple[Any, Dict[str, Any]]:
    """``(PointCloudTask, config)`` for model ``name``: the recipe's own model, or a peer with its defaults."""
    from ..training.runner import build_module

    cfg = copy.deepcopy(cfg)
    family, registry = peer_registry_name(name, cfg["task"])
    if family != "gridified" or registry:
        cfg["model"] = {"name": registry}
    task, record = build_module(cfg, info, num_train, 1)
    return task, {
        "family": family if registry else "gridified",
        "registry_name": record.model_name,
        "params": record.num_params,
    }


def _mean_fields(key: str, mean_s: float, ci_s: float) -> Dict[str, Any]:
    """``key`` (a mean, ms) and ``key_rel_ci`` (the half-width of its 95 % t interval over it)."""
    return {key: 1e3 * mean_s, f"{key}_rel_ci": ci_s / mean_s if mean_s > 0 else None}


def _interval(mean_s: float, ci_s: float) -> Tuple[float, float, float]:
    return mean_s, max(mean_s - ci_s, 1e-12), mean_s + ci_s


def _row(
    name: str,
    meta: Dict[str, Any],
    train: Dict[str, Any],
    infer: Optional[Dict[str, Any]],
    synth: Optional[Dict[str, Any]],
    steps: int,
) -> Dict[str, Any]:
    """One model's row: every part a mean with the spread of its t interval, the median step with the spread of
    its order-statistic interval (:func:`gridify.bench.harness.figure_fields`), the ratios with theirs."""
    parts = ("data", "graph", "forward", "backward", "optimizer", "step")
    row: Dict[str, Any] = {
        "model": name,
        "registry_name": meta["registry_name"],
        "params": meta["params"],
        "batch": train["batch"],
        "points_per_cloud": train["points"],
        "steps": steps,
    }
    for part in parts:
        row.update(_mean_fields(f"{part}_ms", train[part], train[f"{part}_ci"]))
    row.update(harness.figure_fields("step_median_ms", train["timing"], 1e3))
    row.update(
        parts_ms=1e3 * (train["compute"] + train["data"]),
        cores_used=train["cores"],
        ms_per_cloud=row["step_ms"] / train["batch"],
        ms_per_cloud_rel_ci=row["step_ms_rel_ci"],
        graph_what=GRAPH_WHAT.get(meta["family"], "-"),
        status="ok",
    )
    compute = _interval(train["compute"], train["compute_ci"])
    if infer is not None:
        row.update(_mean_fields("inference_ms", infer["inference"], infer["inference_ci"]))
        row.update(
            infer_graph_ms=1e3 * infer["infer_graph"],
            infer_ms_per_cloud=row["inference_ms"] / train["batch"],
            infer_ms_per_cloud_rel_ci=row["inference_ms_rel_ci"],
        )
        ratio = harness.ratio_interval(compute, _interval(infer["inference"], infer["inference_ci"]))
        if ratio is not None:
            row.update(harness.derived_fields("train_over_inference", ratio, 0.0, True))
            del row["train_over_inference_reached"]  # means: no target
    if synth is not None:
        busy = _interval(synth["step"] - synth["data"], synth["step_ci"])
        row.update(_mean_fields("synthetic_step_ms", busy[0], synth["step_ci"]))
        ratio = harness.ratio_interval(_interval(train["step"], train["step_ci"]), busy)
        if ratio is not None:
            row.update(harness.derived_fields("real_over_synthetic", ratio, 0.0, True))
            del row["real_over_synthetic_reached"]
    if meta["family"] not in GRAPH_WHAT:
        row["graph_ms"], row["graph_ms_rel_ci"], row["graph_what"] = None, None, "-"
    return row


def _measure_model(
    name: str,
    cfg: Dict[str, Any],
    data: Tuple[Any, Any, Any, Dict[str, Any]],
    settings: Dict[str, Any],
    device: torch.device,
) -> Dict[str, Any]:
    """Train, infer and (optionally) the synthetic step of one model; its row."""
    from ..training.data import graph_builder_of
    from ..training.module import PointCloudData

    train_set, val_set, augment, info = data
    torch.manual_seed(int(cfg["seed"]))
    task, meta = _build_task(cfg, info, len(train_set), name)
    task.to(device)
    tr = cfg["trainer"]
    stand_in = _TrainerStandIn(int(tr["max_epochs"]), int(tr["max_steps"]))
    optim = optimizer_of(task, stand_in)
    # as gridify train: with DataLoader workers, a gridified model's graphs are built in them
    datamodule = PointCloudData(cfg, train_set, val_set, augment, graph_builder_of(task.model, cfg))
    datamodule.trainer = stand_in
    clock, amp, clip = Clock(device), PRECISIONS[tr["precision"]], tr["gradient_clip_val"]
    batches = _Batches(datamodule, stand_in, device)
    with graph_timer(clock) as graph, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*self\.log.*")
        try:
            train, kept = time_training(
                task,
                optim,
                batches,
                settings["steps"],
                settings["warmup"],
                clock,
                graph,
                clip,
                amp,
                keep=max(1, settings["infer_steps"]),
                rel_ci=settings["rel_ci"],
            )
        finally:
            batches.close()
        infer = (
            time_inference(task, kept[: settings["infer_steps"]], clock, graph, amp, settings["rel_ci"])
            if settings["infer_steps"]
            else None
        )
        synth = None
        if settings["synthetic_steps"]:
            fake = _SyntheticBatches(
                kept[0],
                cfg["task"],
                int(cfg["data"]["batch_size"]),
                int(round(train["points"])),
                int(info["in_channels"]),
                int(cfg["seed"]),
            )
            synth, _ = time_training(task, optim, fake, settings["synthetic_steps"], 1, clock, graph, clip, amp)
    return _row(name, meta, train, infer, synth, settings["steps"])


# ----------------------------------------------------------------------------- report
TABLE = [
    ("model", "model"),
    ("data_ms", "data"),
    ("graph_ms", "graph"),
    ("forward_ms", "forward"),
    ("backward_ms", "backward"),
    ("optimizer_ms", "optim"),
    ("step_ms", "step"),
    ("step_median_ms", "median step"),
    ("inference_ms", "infer"),
    ("train_over_inference", "train/infer"),
    ("cores_used", "cores"),
    ("ms_per_cloud", "ms/cloud"),
    ("synthetic_step_ms", "synth step"),
    ("real_over_synthetic", "real/synth"),
    ("graph_what", "graph is"),
    ("status", "status"),
]


def format_table(rows: List[Dict[str, Any]]) -> str:
    """The printed table: one row per model, times in ms per training step (batch) unless named per cloud."""
    return harness.format_table(rows, TABLE, fixed_from=100, width=70)


def machine_facts(cfg: Dict[str, Any], device: torch.device) -> Dict[str, Any]:
    """CPU, cores available, torch, threads, workers, batch size, device."""
    facts = harness.machine_facts(device)
    facts.update(
        num_workers=int(cfg["data"]["num_workers"]),
        batch_size=int(cfg["data"]["batch_size"]),
        precision=str(cfg["trainer"]["precision"]),
    )
    if hasattr(os, "sched_getaffinity"):
        facts["cores_available"] = len(os.sched_getaffinity(0))
    if hasattr(os, "getloadavg"):  # other processes competing for the cores lower "cores" and raise the times
        facts["load_average_1min_at_start"] = os.getloadavg()[0]
    return facts


def write_outputs(out: Path, result: Dict[str, Any]) -> None:
    """``benchmark_recipe.json`` (everything) and ``benchmark_recipe.csv`` (:data:`RECIPE_COLUMNS`)."""
    harness.write_json(out / "benchmark_recipe.json", result)
    harness.write_csv(out / "benchmark_recipe.csv", result["rows"], RECIPE_COLUMNS)


# ----------------------------------------------------------------------------- main
def _settings(args: argparse.Namespace) -> Dict[str, Any]:
    infer = min(args.steps, 50) if args.infer_steps is None else min(args.infer_steps, args.steps)
    return {
        "steps": args.steps,
        "warmup": args.warmup,
        "rel_ci": args.rel_ci,
        "infer_steps": infer,
        "synthetic_steps": args.synthetic_steps,
        "threads": args.threads,
    }


def _prepare(
    prog: str, args: argparse.Namespace
) -> Tuple[Dict[str, Any], Dict[str, Any], List[str], torch.device, Path]:
    """Validate everything before anything slow: ``(config, settings, models, device, out)``."""
    settings = _settings(args)
    models = _model_names(prog, args.models)
    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else ("cpu" if args.device == "auto" else args.device)
    )
    try:
        out = check_output_dir(args.out, "--out", files=("benchmark_recipe.json", "benchmark_recipe.csv"))
    except PathError as exc:
        raise SystemExit(f"{prog}: error: {exc}") from None
    cfg = _load_config(prog, args)
    _check_model_tasks(prog, models, cfg, args.recipe)
    if cfg["trainer"]["precision"] not in PRECISIONS:
        raise SystemExit(
            f"{prog}: error: --recipe: trainer.precision {cfg['trainer']['precision']!r} is not "
            f"timed by bench --recipe (32-true or bf16-mixed)"
        )
    return cfg, settings, models, device, out


def _check_model_tasks(prog: str, models: List[str], cfg: Dict[str, Any], recipe: str) -> None:
    """Every ``--models`` entry serves the recipe's task (:func:`gridify.checkpoint.task_served`), before the data
    is read: a classifier peer of a temporal or scene recipe is named with its task and the models that serve the
    recipe's, instead of failing inside its first step (a TypeError, or a grid-box error about the crops)."""
    from ..checkpoint import model_task, task_served
    from ..registry import MODELS

    task = cfg["task"]
    serving = [n for n in MODELS.names() if task_served(task, model_task(MODELS.get(n)))]
    for name in models:
        _, registry = peer_registry_name(name, task)
        if not registry:  # gridified: the recipe's own model
            continue
        serves = model_task(MODELS.get(registry))
        if not task_served(task, serves):
            shown = name if name.lower() == registry else f"{name} ({registry})"
            raise SystemExit(
                f"{prog}: error: --models: {shown} is a {serves} model, but the recipe {recipe} trains the task "
                f"{task}; models that serve it: gridified (the recipe's own){''.join(', ' + n for n in serving)}"
            )


def _build_data(prog: str, cfg: Dict[str, Any]) -> Tuple[Any, Any, Any, Dict[str, Any]]:
    from ..training.cli import error_line
    from ..training.runner import RUN_ERRORS, build_data

    try:
        return build_data(cfg)
    except RUN_ERRORS as exc:
        flag = "--data-root" if cfg["data"].get("root") is not None else "--recipe"
        raise SystemExit(f"{prog}: error: {flag}: {error_line(exc)}") from None


#: the marker of a measuring child's result line (``--_worker NAME``)
MARKER = "@@bench_recipe@@ "


def _measure_here(
    name: str, cfg: Dict[str, Any], data: Tuple[Any, Any, Any, Dict[str, Any]], settings: Dict[str, Any], device: Any
) -> Dict[str, Any]:
    try:
        return _measure_model(name, cfg, data, settings, device)
    except Exception as exc:  # noqa: BLE001 - one model failing (whatever the error) leaves the others measured
        return {"model": name, "status": f"error: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}


def _measure_isolated(argv: Sequence[str], name: str, threads: Optional[int]) -> Dict[str, Any]:
    """One model measured in a fresh process (``python -m gridify.bench.recipe ARGV --_worker NAME``,
    :func:`gridify.bench.harness.run_child`): its row, or one naming why there is none."""
    run = harness.run_child(
        "gridify.bench.recipe", [*argv, "--_worker", name], marker=MARKER, timeout=None, threads=threads
    )
    if run.result is not None:
        return run.result
    tail = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"model": name, "status": f"error: the measuring process exited {run.returncode}: {tail[0][:200]}"}


def _worker_main(prog: str, args: argparse.Namespace) -> int:
    """A measuring child: the model ``args._worker`` measured in this process, its row printed as one line."""
    cfg, settings, _, device, _ = _prepare(prog, args)
    threads = settings["threads"] or cfg["trainer"]["num_threads"]
    if threads:
        torch.set_num_threads(int(threads))
    row = _measure_here(args._worker, cfg, _build_data(prog, cfg), settings, device)
    print(MARKER + json.dumps(row, default=str), flush=True)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``gridify bench --recipe NAME ...``: time real training steps, each model in a fresh process (``--isolation
    subprocess``, the default: no allocator, cache or thread-pool state carried from one model to the next);
    prints the table, writes JSON and CSV."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    prog = parser.prog
    if args._worker is not None:
        return _worker_main(prog, args)
    cfg, settings, models, device, out = _prepare(prog, args)
    threads = settings["threads"] or cfg["trainer"]["num_threads"]
    if threads:
        torch.set_num_threads(int(threads))
    data = _build_data(prog, cfg)  # here too: a bad data root is one line before any model runs
    facts = machine_facts(cfg, device)
    print(
        f"bench --recipe {args.recipe}: {cfg['data']['name']} ({data[3]['source_format']}), {len(data[0])} "
        f"training clouds, batch {facts['batch_size']}, {facts['num_workers']} workers | {facts['cpu']}, "
        f"{facts['threads']} threads, torch {facts['torch']}, {device}, isolation {args.isolation}",
        flush=True,
    )
    result = {
        "machine": facts,
        "recipe": args.recipe,
        "settings": {**settings, "models": models, "overrides": args.override, "isolation": args.isolation},
        "units": "ms per training step (one batch) unless named per cloud",
        "config": cfg,
        "rows": [],
    }
    for name in models:
        started = time.monotonic()  # the progress line's seconds: no figure
        if args.isolation == "subprocess":
            row = _measure_isolated(argv, name, int(threads) if threads else None)
        else:
            row = _measure_here(name, cfg, data, settings, device)
        result["rows"].append(row)
        if hasattr(os, "getloadavg"):
            row["load_average_1min_after"] = os.getloadavg()[0]
        print(
            f"[{name}] {row['status']}: "
            + " ".join(f"{h} {fmt_value(row.get(c), fixed_from=100)}" for c, h in TABLE[1:-2])
            + f" ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        with one_line_errors(prog):  # after every model: a long run that is stopped keeps what it measured
            out.mkdir(parents=True, exist_ok=True)
            write_outputs(out, result)
    print()
    print(format_table(result["rows"]))
    print(
        "ms per training step (batch), means over the timed steps; graph = the neighbour search inside the forward "
        "pass (see 'graph is'), forward and backward exclude it; train/infer = (graph + forward + backward + optim) "
        "/ infer; median step: the median with its order-statistic interval"
    )
    print(
        "± : half-width of the 95 % confidence interval (of the mean: Student's t; of the median step: order "
        "statistics) relative to the figure; * : the median step's interval is wider than --rel-ci"
    )
    print(f"wrote {out / 'benchmark_recipe.json'} and {out / 'benchmark_recipe.csv'}")
    _check_measured(prog, result["rows"], out)
    return 0


def _check_measured(prog: str, rows: List[Dict[str, Any]], out: Path) -> None:
    """A run that measured no model ends non-zero with one line naming the first failure (the table and the
    files still hold every row): :func:`gridify.bench.harness.check_measured`."""
    harness.check_measured(prog, rows, out / "benchmark_recipe.json", lambda row: str(row.get("model")))


if __name__ == "__main__":  # a measuring child: python -m gridify.bench.recipe ARGV --_worker NAME
    sys.exit(main())
