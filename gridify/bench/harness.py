"""What every benchmark of gridify shares: timing, peak memory, isolation, machine facts, tables and files.

* **timing**: :class:`MedianTimer`, the one stopping rule of every timed figure (``gridify bench`` and its
  ``--recipe`` and ``--scenes`` modes, ``scripts/bench_guard.py``): at least one untimed warm-up call, then timed
  calls until the median is known to a stated precision (below); :func:`summarize` of the times (median, its
  95 % interval, quartiles, min, max, mean); :func:`time_repeats` (a fixed number of repeats through the same
  class: the matmul peak of ``gridify bench``, ``scripts/bench_backbones.py``, ``bench_graph_ties.py``,
  ``bench_onnx_search.py``); :func:`time_once` (one call too long to repeat, a whole scan or scene, after a
  warm-up of the caller's own: ``gridify bench --scenes``' scans and end-to-end parts; :class:`MedianTimer` times
  each call with it); :class:`Clock` is a wall clock that waits for the device first (CUDA work is
  asynchronous); :func:`timed_first` stops a first call that passes a time limit (:class:`StepTimeout`).
  No benchmark reads a clock around a call of its own (``tests/benchmarking/test_timing.py`` holds them to it);
* **spreads**: :func:`median_ci` (the order-statistic interval of a median), :func:`mean_ci` (Student's t),
  :func:`ratio_interval` (a ratio of two figures and its interval), :func:`figure_fields` /
  :func:`ratio_fields` (a figure's row keys) and :func:`fmt_spread` (``± 3.1 %``);
* **batches**: :func:`batch_for` (the batch of a cell, from the flags alone) and :func:`ellipsoid_clouds`
  (synthetic clouds, each cloud the same whatever the batch);
* **memory**: the peak resident set of this process (``VmHWM`` of ``/proc/self/status``,
  :func:`peak_rss_mib`; ``ru_maxrss``, :func:`maxrss_mib`, where /proc is missing), its resident set
  now (:func:`rss_mb`), :class:`PeakMemory` (CUDA ``max_memory_allocated`` or the rise of the CPU
  peak RSS above a baseline), :class:`RssWatchdog` (ends a child whose RSS passes a limit) and
  :func:`cpu_seconds` (CPU time of the process and its live children);
* **isolation**: :func:`run_child` runs ``python -m <module> <args>`` in a fresh interpreter (its
  own peak RSS, allocator and caches), importing the gridify of a given checkout, and reads back the one
  JSON line the child printed after a marker (:func:`emit_once`);
* **machine**: :func:`machine_facts` (CPU model, cores, threads, torch, Python, platform, device);
* **reporting**: :func:`format_table` (right-aligned columns under a dashed rule, each figure with its spread),
  :func:`write_json` and :func:`write_csv` (atomic writes).

How figures are measured (:class:`MedianTimer`):

1. **Warm-up.** ``warmup`` (at least 1) untimed calls come first, at the batch that is then timed: the first
   call of a fresh process pays one-time costs (lazy imports, kernel caches, the allocator growing its heap,
   first-touch page faults) that can take several times a warm call, and it is never reported as the
   measurement.
2. **Repeats until the median is known.** Timed calls follow until, after at least ``min_repeats``, the 95 %
   confidence interval of the median has a half-width of at most ``rel_ci`` x the median (the target is
   *reached*), or the next call would end past ``max_seconds`` of timed calls (the *budget*: it caps the
   repeats beyond the minimum, never what one call measures), or ``max_repeats`` were made. The interval is
   the distribution-free order-statistic one (:func:`median_ci`): sorted times ``x_(1) <= ... <= x_(n)``,
   ``[x_(l), x_(n+1-l)]`` with the largest ``l`` whose coverage ``1 - 2 P(Binomial(n, 1/2) <= l - 1)`` is at
   least 95 %. It needs at least 6 times (with 5, ``[min, max]`` covers 93.75 %); with fewer it is ``[min,
   max]`` with its lower coverage, and the target is not reached.
3. **What is recorded.** Per figure: the median, the interval and its coverage, the half-width relative to
   the median (``rel_ci``), the quartiles, min, max, mean, every time, the repeats, whether the target was
   reached and why the repeats stopped (``target``, ``budget``, ``max repeats``). Tables print ``median ±
   rel_ci`` (``2,812 ± 3.1 %``) and mark a figure whose target was not reached with ``*``.
4. **Ratios** of two figures (a peer over the reference, training over inference, one checkout over another)
   get the interval of :func:`ratio_interval`: the ratio of the medians, and the two log half-widths added in
   quadrature, ``r exp(± sqrt(h_a^2 + h_b^2))`` with ``h = log(hi / lo) / 2`` of each figure.

What else keeps a figure the same whether its cell runs alone or in a sweep (found by reading the code; the
fixes are in :mod:`gridify.bench.synthetic` and :mod:`gridify.bench.recipe`):

* the batch of a cell comes from ``--batch-size`` and ``--max-points-per-batch`` alone (:func:`batch_for`),
  never from a timing probe (a probe at one cloud used to pick it from the time budget, so one slow probe
  changed what a cell measured, and the cold probe could itself be reported as the measurement);
* the synthetic clouds of a batch are drawn cloud by cloud from ``seed`` (:func:`ellipsoid_clouds`), so cloud
  ``i`` is the same at every batch size (the ellipsoids' axes used to depend on the batch);
* inference and the training step of a ``(model, N)`` run in two fresh processes (they shared one, the
  training step timed after the inference and after the FLOP counter's forward pass); the FLOP count runs
  after the inference timing;
* each model of ``gridify bench --recipe`` runs in a fresh process (they ran one after another in one, each
  on the heap, caches and thread pools the one before left);
* every child gets the parent's environment with ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS`` set to the thread
  count and ``torch.set_num_threads`` called with it, and ``--malloc tuned`` is applied in every child (and
  in the parent, for its matmul peak), never in one only;
* left as they are, and said so in the docs: the order of the cells (a machine warms up, other processes
  come and go; ``scripts/bench_guard.py`` interleaves two checkouts for that reason), a batch halved after an
  out-of-memory error (recorded in the row) and ``--isolation inprocess`` (one process for everything).

PyTorch is imported inside the functions that need it, so a benchmark's command line parses without it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

from .._files import atomic_write_text
from ..runtime import cpu_model

__all__ = [
    "sync",
    "Clock",
    "CONFIDENCE",
    "MedianTimer",
    "time_repeats",
    "time_once",
    "summarize",
    "median_ci",
    "mean_ci",
    "ratio_interval",
    "figure_fields",
    "ratio_fields",
    "derived_fields",
    "interval_of",
    "fmt_spread",
    "batch_for",
    "ellipsoid_clouds",
    "StepTimeout",
    "timed_first",
    "rss_bytes",
    "rss_mb",
    "maxrss_mib",
    "peak_rss_mib",
    "mem_total_gib",
    "PeakMemory",
    "RssWatchdog",
    "is_oom",
    "cpu_seconds",
    "ChildRun",
    "ROOT",
    "child_env",
    "run_child",
    "emit_once",
    "machine_facts",
    "fmt_value",
    "format_table",
    "SPREAD_NOTE",
    "write_json",
    "write_csv",
    "check_measured",
    "crop_sizes",
]

MIB = 2**20
T = TypeVar("T")


# ----------------------------------------------------------------------------- timing
def sync(device: Any) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    if getattr(device, "type", str(device).split(":")[0]) == "cuda":
        import torch

        torch.cuda.synchronize(device)


class Clock:
    """Wall clock that waits for the device first (CUDA work is asynchronous)."""

    def __init__(self, device: Any) -> None:
        self.cuda = getattr(device, "type", str(device).split(":")[0]) == "cuda"
        self.device = device

    def __call__(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)
        return time.perf_counter()


#: the confidence level of every interval the benchmarks report
CONFIDENCE = 0.95
#: Student's t quantile of 0.975 for 1 to 30 degrees of freedom (beyond: the normal's 1.96)
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> Tuple[float, float, float]:
    """``(low, high, coverage)``: the distribution-free confidence interval of the median of ``values``.

    With the values sorted, ``x_(1) <= ... <= x_(n)``, the interval is ``[x_(l), x_(n+1-l)]`` with the largest
    ``l`` whose coverage ``1 - 2 P(Binomial(n, 1/2) <= l - 1)`` is at least ``confidence`` (exact, by integers).
    Too few values for that (``n <= 5`` at 95 %): ``[min, max]`` and its coverage, below ``confidence``.
    """
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("median_ci: no values")
    total = 2**n
    best, coverage = 1, 1.0 - 2.0 / total  # l = 1: [min, max], P(B <= 0) = 2^-n
    below = 1  # 2^n P(B <= l - 1)
    for l in range(2, (n + 1) // 2 + 1):
        below += math.comb(n, l - 1)
        cov = 1.0 - 2.0 * below / total
        if cov < confidence:
            break
        best, coverage = l, cov
    return xs[best - 1], xs[n - best], coverage


def mean_ci(values: Sequence[float]) -> Tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``values`` and its 95 % Student's t interval (``low = high = mean``
    for a single value)."""
    n = len(values)
    if n == 0:
        raise ValueError("mean_ci: no values")
    mean = statistics.fmean(values)
    if n == 1:
        return mean, mean, mean
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    h = t * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - h, mean + h


def summarize(times: Sequence[float], confidence: float = CONFIDENCE) -> Dict[str, Any]:
    """The statistics of measured times (seconds): ``seconds`` (the median), ``ci_low_s`` / ``ci_high_s`` and
    ``ci_coverage`` (:func:`median_ci`), ``rel_ci`` (the interval's half-width over the median; None for one
    time), ``q1_s`` / ``q3_s`` (quartiles), ``min_s``, ``max_s``, ``mean_s``, ``times`` and ``repeats``."""
    times = list(times)
    med = statistics.median(times)
    lo, hi, coverage = median_ci(times, confidence)
    q1, q3 = (statistics.quantiles(times, n=4, method="inclusive")[::2]) if len(times) > 1 else (med, med)
    return {
        "seconds": med,
        "ci_low_s": lo,
        "ci_high_s": hi,
        "ci_coverage": coverage,
        "rel_ci": (hi - lo) / 2 / med if len(times) > 1 and med > 0 else None,
        "q1_s": q1,
        "q3_s": q3,
        "min_s": min(times),
        "max_s": max(times),
        "mean_s": statistics.fmean(times),
        "times": times,
        "repeats": len(times),
    }


class MedianTimer:
    """Times a call until its median is known to a stated precision: the one stopping rule of the benchmarks.

    :meth:`run` makes ``warmup`` untimed calls (at least one: a cold first call is never the measurement; the
    first one limited to ``first_limit_s`` seconds when given, :func:`timed_first`), then timed calls until,
    after at least ``min_repeats``, the ``confidence`` interval of the median (:func:`median_ci`) has a
    half-width of at most ``rel_ci`` x the median (``stopped="target"``), or the next call would end past
    ``max_seconds`` of timed calls (``"budget"``: it caps the repeats beyond the minimum), or ``max_repeats``
    were made (``"max repeats"``). ``rel_ci=None``: no target (a fixed number of repeats, ``reached`` False).

    Args:
        rel_ci: the target half-width of the interval, a fraction of the median (0.05: ± 5 %), or None.
        min_repeats: timed calls made whatever the budget.
        max_repeats: timed calls at most.
        max_seconds: seconds of timed calls after which no further call starts (beyond ``min_repeats``).
        warmup: untimed calls first, at least 1.
        first_limit_s: the first warm-up call's time limit (:class:`StepTimeout`), or None.
        clock: seconds now; :class:`Clock` waits for a CUDA device first.
        confidence: the interval's confidence level.
    """

    def __init__(
        self,
        *,
        rel_ci: Optional[float] = 0.05,
        min_repeats: int = 6,
        max_repeats: int = 10_000,
        max_seconds: float = 20.0,
        warmup: int = 1,
        first_limit_s: Optional[float] = None,
        clock: Callable[[], float] = time.perf_counter,
        confidence: float = CONFIDENCE,
    ) -> None:
        for name, v, low in (("min_repeats", min_repeats, 1), ("warmup", warmup, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"MedianTimer: {name} must be an integer >= {low}, got {v!r}")
        if isinstance(max_repeats, bool) or not isinstance(max_repeats, int) or max_repeats < min_repeats:
            raise ValueError(
                f"MedianTimer: max_repeats must be an integer >= min_repeats {min_repeats}, got {max_repeats!r}"
            )
        if rel_ci is not None and not (rel_ci > 0 and math.isfinite(rel_ci)):
            raise ValueError(f"MedianTimer: rel_ci must be a finite fraction > 0 or None, got {rel_ci!r}")
        if not max_seconds > 0:
            raise ValueError(f"MedianTimer: max_seconds must be > 0, got {max_seconds!r}")
        if not 0 < confidence < 1:
            raise ValueError(f"MedianTimer: confidence must be in (0, 1), got {confidence!r}")
        self.rel_ci, self.min_repeats, self.max_repeats = rel_ci, min_repeats, max_repeats
        self.max_seconds, self.warmup, self.first_limit_s = max_seconds, warmup, first_limit_s
        self.clock, self.confidence = clock, confidence

    def reached(self, stats: Dict[str, Any]) -> bool:
        """Whether :func:`summarize`'s ``stats`` meet the target (an interval of the full confidence, narrow enough)."""
        return (
            self.rel_ci is not None
            and stats["rel_ci"] is not None
            and stats["ci_coverage"] >= self.confidence
            and stats["rel_ci"] <= self.rel_ci
        )

    def _call(self, fn: Callable[[], Any]) -> float:
        return time_once(fn, self.clock)[1]

    def run(self, fn: Callable[[], Any], before_timing: Optional[Callable[[], Any]] = None) -> Dict[str, Any]:
        """Warm up, then time ``fn`` (``before_timing()`` between the two, untimed); :func:`summarize` of the
        timed calls plus ``warmup_s`` (the warm-up calls' seconds), ``target`` (``rel_ci``), ``reached`` and
        ``stopped``."""
        warm: List[float] = []
        for i in range(self.warmup):
            if i == 0 and self.first_limit_s is not None:
                warm.append(time_once(lambda: timed_first(fn, self.first_limit_s), self.clock)[1])
            else:
                warm.append(self._call(fn))
        if before_timing is not None:
            before_timing()
        times: List[float] = []
        spent = 0.0
        while True:
            times.append(self._call(fn))
            spent += times[-1]
            if len(times) < self.min_repeats:
                continue
            stats = summarize(times, self.confidence)
            if self.reached(stats):
                stopped = "target"
            elif len(times) >= self.max_repeats:
                stopped = "max repeats"
            elif spent + stats["seconds"] > self.max_seconds:
                stopped = "budget"
            else:
                continue
            return {
                **stats,
                "warmup_s": warm,
                "target": self.rel_ci,
                "reached": stopped == "target",
                "stopped": stopped,
            }


def time_once(fn: Callable[[], T], clock: Callable[[], float] = time.perf_counter) -> Tuple[T, float]:
    """``(fn(), seconds)``: one call of ``fn`` timed by ``clock`` (:class:`Clock` waits for a CUDA device first).

    Every timed call of the benchmarks goes through here (:class:`MedianTimer` too); called alone, it is the figure
    of a call too long to repeat (a whole scan), which the caller warms up first on something small, and which
    carries no interval."""
    t0 = clock()
    value = fn()
    return value, clock() - t0


def time_repeats(
    fn: Callable[[], Any], repeats: int, warmup: int = 1, clock: Callable[[], float] = time.perf_counter
) -> Dict[str, Any]:
    """``warmup`` (at least 1) untimed calls of ``fn``, then exactly ``repeats`` timed ones: :class:`MedianTimer`
    without a target (:func:`summarize` of them, ``reached`` False)."""
    return MedianTimer(
        rel_ci=None, min_repeats=repeats, max_repeats=repeats, max_seconds=math.inf, warmup=warmup, clock=clock
    ).run(fn)


# ----------------------------------------------------------------------------- spreads
def figure_fields(key: str, stats: Dict[str, Any], scale: float = 1.0) -> Dict[str, Any]:
    """The row fields of one timed figure from :class:`MedianTimer`'s ``stats``: ``key`` (the median x
    ``scale``), ``key_ci_low`` / ``key_ci_high`` (its interval), ``key_rel_ci`` (the half-width over the
    median), ``key_q1`` / ``key_q3``, ``key_min`` / ``key_max`` (x ``scale``), ``key_repeats`` and
    ``key_reached`` (whether the target was reached)."""
    return {
        key: stats["seconds"] * scale,
        f"{key}_ci_low": stats["ci_low_s"] * scale,
        f"{key}_ci_high": stats["ci_high_s"] * scale,
        f"{key}_rel_ci": stats["rel_ci"],
        f"{key}_q1": stats["q1_s"] * scale,
        f"{key}_q3": stats["q3_s"] * scale,
        f"{key}_min": stats["min_s"] * scale,
        f"{key}_max": stats["max_s"] * scale,
        f"{key}_repeats": stats["repeats"],
        f"{key}_reached": bool(stats.get("reached")),
    }


def interval_of(row: Dict[str, Any], key: str, scale: float = 1.0) -> Optional[Tuple[float, float, float]]:
    """``(median, low, high)`` of the figure ``key`` of ``row`` (:func:`figure_fields`) x ``scale``; None
    where the row has no such figure."""
    vals = [row.get(key), row.get(f"{key}_ci_low"), row.get(f"{key}_ci_high")]
    if any(v is None for v in vals):
        return None
    return vals[0] * scale, vals[1] * scale, vals[2] * scale


def ratio_interval(
    num: Tuple[float, float, float], den: Tuple[float, float, float]
) -> Optional[Tuple[float, float, float]]:
    """``(ratio, low, high)`` of two figures given as ``(median, low, high)``: the ratio of the medians, and
    its interval ``r exp(± sqrt(h_num^2 + h_den^2))`` with ``h = log(high / low) / 2`` of each figure (log
    half-widths added in quadrature, as for independent errors). None where a value is not positive."""
    if min(*num, *den) <= 0:
        return None
    r = num[0] / den[0]
    h = math.hypot(math.log(num[2] / num[1]) / 2, math.log(den[2] / den[1]) / 2)
    return r, r * math.exp(-h), r * math.exp(h)


def derived_fields(
    key: str, interval: Tuple[float, float, float], rel_ci: Optional[float], reached: bool
) -> Dict[str, Any]:
    """The row fields of a figure derived from a measured one by a positive factor or its reciprocal (clouds/s
    from ms per batch, a ratio): ``key`` (``interval[0]``), ``key_ci_low`` / ``key_ci_high`` (the other two
    values of ``interval``, in either order), ``key_rel_ci`` (the half-width over the figure; None when the
    source's ``rel_ci`` is None: one repeat, no interval) and ``key_reached``."""
    value, lo, hi = interval[0], min(interval[1:]), max(interval[1:])
    return {
        key: value,
        f"{key}_ci_low": lo,
        f"{key}_ci_high": hi,
        f"{key}_rel_ci": None if rel_ci is None or value == 0 else (hi - lo) / 2 / abs(value),
        f"{key}_reached": bool(reached),
    }


def ratio_fields(
    key: str, num_row: Dict[str, Any], num_key: str, den_row: Dict[str, Any], den_key: str,
    num_scale: float = 1.0, den_scale: float = 1.0,
) -> Dict[str, Any]:  # fmt: skip
    """The row fields of the ratio ``num_row[num_key] x num_scale / (den_row[den_key] x den_scale)`` of two
    figures (:func:`ratio_interval`, :func:`derived_fields`): ``key``, ``key_ci_low``, ``key_ci_high``,
    ``key_rel_ci`` (None when either figure has no interval) and ``key_reached`` (both figures reached their
    target); empty where either figure is missing."""
    a, b = interval_of(num_row, num_key, num_scale), interval_of(den_row, den_key, den_scale)
    r = None if a is None or b is None else ratio_interval(a, b)
    if r is None:
        return {}
    rels = (num_row.get(f"{num_key}_rel_ci"), den_row.get(f"{den_key}_rel_ci"))
    reached = bool(num_row.get(f"{num_key}_reached")) and bool(den_row.get(f"{den_key}_reached"))
    return derived_fields(key, r, None if None in rels else 0.0, reached)


def fmt_spread(rel: Optional[float], reached: Optional[bool] = True) -> str:
    """``± 3.1 %`` (a tenth of a percent below 10 %, whole percents above), ``*`` appended when the target was
    not reached (``reached`` False); empty for None."""
    if rel is None or not math.isfinite(rel):
        return "" if reached is not False else " *"
    pct = 100 * rel
    text = f"± {pct:.1f} %" if pct < 9.95 else f"± {pct:.0f} %"
    return " " + text + ("*" if reached is False else "")


# ----------------------------------------------------------------------------- batches
def batch_for(num_points: int, batch_size: int, max_points_per_batch: int) -> int:
    """The batch of a cell: the largest ``b <= batch_size`` with ``b x num_points <= max_points_per_batch``,
    at least 1. It depends on the flags alone (never on a timing), so a cell measures the same batch alone or
    in a sweep, on any machine."""
    return max(1, min(int(batch_size), int(max_points_per_batch) // max(1, int(num_points))))


def ellipsoid_clouds(batch_size: int, num_points: int, seed: int = 0) -> Tuple[Any, Any]:
    """``(points [B, N, 3], directions [B, N, 3])``: points on the surfaces of random ellipsoids inside
    ``[-0.9, 0.9]^3`` (axes in ``[0.45, 0.9]``) and the unit directions they were drawn along. Cloud ``i`` is
    drawn from its own generator (seeded by ``seed`` and ``i``), so it is the same at every batch size."""
    import torch

    pts, dirs = [], []
    for i in range(batch_size):
        g = torch.Generator().manual_seed(int(seed) * 1_000_003 + i)
        d = torch.randn(num_points, 3, generator=g)
        d = d / d.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        axes = 0.45 + 0.45 * torch.rand(1, 3, generator=g)
        pts.append(d * axes)
        dirs.append(d)
    return torch.stack(pts), torch.stack(dirs)


class StepTimeout(Exception):
    """A timed call passed its time limit."""


def timed_first(fn: Callable[[], Any], limit_s: float) -> float:
    """Run ``fn`` once; its seconds, or :class:`StepTimeout` when it takes more than ``limit_s`` seconds
    (stopped by ``SIGALRM`` where the platform has it and this is the main thread)."""

    def _alarm(signum: int, frame: Any) -> None:
        raise StepTimeout(f"first step exceeded --max-step-seconds {limit_s:g} s")

    use_alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, limit_s)
    t0 = time.perf_counter()
    try:
        fn()
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    dt = time.perf_counter() - t0
    if dt > limit_s:
        raise StepTimeout(f"first step took {dt:.0f} s > --max-step-seconds {limit_s:g} s")
    return dt


# ----------------------------------------------------------------------------- memory
def _status_kib(key: str) -> Optional[int]:
    """A ``kB`` entry of /proc/self/status (VmHWM, VmRSS), None where there is none."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_bytes() -> Optional[int]:
    """This process's resident set now (bytes; ``/proc/self/statm``), None where there is no /proc."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def rss_mb() -> float:
    """This process's resident set now, MiB (0 where it cannot be read)."""
    rss = rss_bytes()
    return 0.0 if rss is None else rss / MIB


def maxrss_mib() -> float:
    """``getrusage(RUSAGE_SELF).ru_maxrss`` in MiB (kilobytes on Linux, bytes on macOS).

    On Linux a child's ``ru_maxrss`` keeps the parent's peak across fork/exec: :func:`peak_rss_mib`
    is the figure to report from a child process.
    """
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / MIB if sys.platform == "darwin" else r / 1024.0


def peak_rss_mib() -> float:
    """This process's peak resident set in MiB (VmHWM; ru_maxrss where /proc is missing)."""
    kib = _status_kib("VmHWM")
    return kib / 1024.0 if kib is not None else maxrss_mib()


def mem_total_gib() -> Optional[float]:
    """The machine's physical memory (``MemTotal`` of /proc/meminfo), GiB; None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


class PeakMemory:
    """Peak memory above a baseline taken at construction, MiB: CUDA ``max_memory_allocated`` (its peak
    statistics reset), or the rise of the CPU peak RSS (``ru_maxrss``) over the resident set then."""

    def __init__(self, device: Any) -> None:
        self.device = device
        if device.type == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats(device)
            self.base = torch.cuda.memory_allocated(device) / MIB
        else:
            self.base = rss_mb()

    def peak(self) -> float:
        if self.device.type == "cuda":
            import torch

            return torch.cuda.max_memory_allocated(self.device) / MIB - self.base
        return max(0.0, maxrss_mib() - self.base)


class RssWatchdog:
    """Ends this (child) process when its RSS passes ``limit_bytes``, emitting a "cannot run" result first."""

    def __init__(self, limit_bytes: float, emit: Callable[[Dict[str, Any]], None]) -> None:
        self.limit, self.emit = limit_bytes, emit
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            rss = rss_bytes()
            if rss is None:
                return
            if rss > self.limit:
                self.emit(
                    {
                        "status": "cannot run",
                        "peak_mib": peak_rss_mib(),
                        "kind": "memory",
                        "reason": f"RSS {rss / 2**30:.1f} GiB passed --memory-limit-gb {self.limit / 2**30:g}",
                    }
                )
                os._exit(0)
            time.sleep(0.05)


def is_oom(exc: BaseException) -> bool:
    """Whether an exception says the memory ran out (CPU or CUDA)."""
    msg = str(exc).lower()
    return isinstance(exc, MemoryError) or "out of memory" in msg or "can't allocate" in msg or "cannot allocate" in msg


def _live_children() -> List[int]:
    pids: List[int] = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return []
    return pids


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, its reaped children and its live children (DataLoader workers)."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for pid in _live_children():
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15 of stat)
        except (OSError, IndexError, ValueError):
            continue
    return total


# ----------------------------------------------------------------------------- isolation
@dataclass
class ChildRun:
    """What a measuring child process gave back: its result (None: no tagged line), exit status and output."""

    result: Optional[Dict[str, Any]]
    returncode: Optional[int]
    stdout: str
    stderr: str
    wall: float
    timed_out: bool = False


#: the checkout whose gridify this process imports (a child imports it too unless told another)
ROOT = Path(__file__).resolve().parents[2]


def child_env(threads: Optional[int], root: Optional[Path] = None) -> Dict[str, str]:
    """The environment of a measuring child: this process's, with ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS``
    set to ``threads`` (when given) and the checkout ``root`` (default: this one, :data:`ROOT`) first on
    ``PYTHONPATH``, so that the child imports that checkout's gridify wherever it is started."""
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
        env["MKL_NUM_THREADS"] = str(threads)
    first = str(Path(root).resolve() if root is not None else ROOT)
    env["PYTHONPATH"] = os.pathsep.join([first, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def run_child(
    module: str,
    args: Sequence[str],
    *,
    marker: str,
    timeout: Optional[float],
    threads: Optional[int] = None,
    cwd: Optional[str] = None,
    root: Optional[Path] = None,
) -> ChildRun:
    """Run ``python -m module *args`` in a fresh interpreter (:func:`child_env`: ``OMP/MKL_NUM_THREADS =
    threads`` when given, the gridify of the checkout ``root``, default this one; stopped after ``timeout``
    seconds, None: never); the JSON of its last stdout line starting with ``marker``, its status and output."""
    cmd = [sys.executable, "-m", module, *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=child_env(threads, root), cwd=cwd
        )
    except subprocess.TimeoutExpired:
        return ChildRun(None, None, "", "", time.perf_counter() - t0, timed_out=True)
    wall = time.perf_counter() - t0
    result = None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(marker):
            result = json.loads(line[len(marker) :])
            break
    return ChildRun(result, proc.returncode, proc.stdout, proc.stderr, wall)


def emit_once(marker: str) -> Callable[[Dict[str, Any]], None]:
    """A function printing its first result as one ``marker + JSON`` line (later calls print nothing):
    the result a parent's :func:`run_child` reads, whoever (the measurement or a watchdog) has it first."""
    lock = threading.Lock()
    emitted: List[bool] = []

    def emit(result: Dict[str, Any]) -> None:
        with lock:
            if not emitted:
                emitted.append(True)
                sys.stdout.write(marker + json.dumps(result) + "\n")
                sys.stdout.flush()

    return emit


# ----------------------------------------------------------------------------- machine
def machine_facts(device: Any = "cpu") -> Dict[str, Any]:
    """CPU model, logical cores, torch threads, torch / Python versions, platform and device
    (on CUDA ``device_name`` too)."""
    import torch

    facts: Dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(device),
    }
    if torch.device(device).type == "cuda":
        facts["device_name"] = torch.cuda.get_device_name(device)
    return facts


# ----------------------------------------------------------------------------- reporting
def fmt_value(v: Any, digits: int = 3, fixed_from: float = 1e4) -> str:
    """A table cell: ``-`` for None, ``digits`` significant digits below ``fixed_from``, whole numbers above
    (with thousands separators: ``2,812``)."""
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        return f"{v:.{digits}g}" if abs(v) < fixed_from else f"{v:,.0f}"
    return str(v)


def format_table(
    rows: Iterable[Dict[str, Any]], columns: Sequence[Tuple[str, str]], *, fixed_from: float = 1e4, width: int = 60
) -> str:
    """``(key, header)`` columns of ``rows``, right-aligned under a dashed rule; cells cut at ``width`` characters.

    A figure whose row holds its spread (``<key>_rel_ci``, :func:`figure_fields` / :func:`ratio_fields`) is
    printed with it, ``2,812 ± 3.1 %``, and with ``*`` when ``<key>_reached`` is False (its target not reached).
    """

    def shown(r: Dict[str, Any], c: str) -> str:
        text = fmt_value(r.get(c), fixed_from=fixed_from)
        if r.get(c) is not None and (f"{c}_rel_ci" in r or f"{c}_reached" in r):
            text += fmt_spread(r.get(f"{c}_rel_ci"), r.get(f"{c}_reached"))
        return text[:width]

    table = [[h for _, h in columns]] + [[shown(r, c) for c, _ in columns] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


#: the footnote of a table with spreads
SPREAD_NOTE = (
    "± : half-width of the 95 % confidence interval of the median, relative to it; * : the target precision "
    "(--rel-ci) was not reached (the time budget or the repeats ran out, or too few repeats for a 95 % interval)"
)


def write_json(path: Path, obj: Any) -> None:
    """``obj`` as indented JSON (other types as their ``str``), written atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, default=str))


def write_csv(path: Path, rows: Iterable[Dict[str, Any]], columns: Sequence[str]) -> None:
    """One CSV line per row with ``columns`` (a missing or None value: empty; other keys left out), atomically."""
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({c: ("" if r.get(c) is None else r.get(c)) for c in columns})
    atomic_write_text(path, buf.getvalue())


# ----------------------------------------------------------------------------- nothing measured
def check_measured(prog: str, rows: List[Dict[str, Any]], written: Any, name: Callable[[Dict[str, Any]], str]) -> None:
    """A benchmark run in which no row was measured (``status`` ``"ok"``) ends non-zero: a SystemExit of one line
    naming the first row (``name(row)``) and why it failed, and where the rows were written (the table and the files
    still hold every row). The one rule of ``gridify bench`` and ``gridify bench --recipe``."""
    failed = [r for r in rows if r.get("status") != "ok"]
    if not rows or len(failed) < len(rows):
        return
    first = failed[0]
    why = str(first.get("status", "")).removeprefix("error: ")
    more = f" (and {len(failed) - 1} other model(s): see the table)" if len(failed) > 1 else ""
    raise SystemExit(f"{prog}: error: no model could be measured: {name(first)}: {why}{more}; rows in {written}")


def crop_sizes(where: str, scan: Any, points: int, sizes: Sequence[int]) -> List[int]:
    """The crop sizes of ``sizes`` that a scan of ``points`` points holds (a crop of ``n`` points needs ``n``); a scan
    smaller than the smallest is refused (ValueError naming ``where``, the scan, its points and the minimum) instead
    of a run that measures nothing and prints an empty table."""
    usable = [int(n) for n in sizes if n <= points]
    if not usable:
        raise ValueError(
            f"{where}: the scan {scan} holds {points} points, too few to measure: the smallest crop timed is "
            f"{min(sizes)} points (sizes {', '.join(map(str, sizes))}); give a scan of at least {min(sizes)} points"
        )
    return usable
