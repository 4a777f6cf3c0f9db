"""What every benchmark of gridify shares: timing, peak memory, isolation, machine facts, tables and files.

* **timing**: :func:`time_repeats` runs ``warmup`` untimed calls, then ``repeats`` timed ones, and
  reports the median (``seconds``), ``min_s``, ``max_s`` and every time; :class:`Clock` is a wall
  clock that waits for the device first (CUDA work is asynchronous); :func:`timed_first` stops a
  first call that passes a time limit (:class:`StepTimeout`);
* **memory**: the peak resident set of this process (``VmHWM`` of ``/proc/self/status``,
  :func:`peak_rss_mib`; ``ru_maxrss``, :func:`maxrss_mib`, where /proc is missing), its resident set
  now (:func:`rss_mb`), :class:`PeakMemory` (CUDA ``max_memory_allocated`` or the rise of the CPU
  peak RSS above a baseline), :class:`RssWatchdog` (ends a child whose RSS passes a limit) and
  :func:`cpu_seconds` (CPU time of the process and its live children);
* **isolation**: :func:`run_child` runs ``python -m <module> <args>`` in a fresh interpreter (its
  own peak RSS, allocator and caches) and reads back the one JSON line the child printed after a
  marker (:func:`emit_once`);
* **machine**: :func:`machine_facts` (CPU model, cores, threads, torch, Python, platform, device);
* **reporting**: :func:`format_table` (right-aligned columns under a dashed rule),
  :func:`write_json` and :func:`write_csv` (atomic writes).

PyTorch is imported inside the functions that need it, so a benchmark's command line parses without it.
"""

from __future__ import annotations

import csv
import io
import json
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
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .._files import atomic_write_text
from ..runtime import cpu_model

__all__ = [
    "sync",
    "Clock",
    "time_repeats",
    "summarize",
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
    "run_child",
    "emit_once",
    "machine_facts",
    "fmt_value",
    "format_table",
    "write_json",
    "write_csv",
    "check_measured",
    "crop_sizes",
]

MIB = 2**20


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


def summarize(times: Sequence[float]) -> Dict[str, Any]:
    """``{seconds: median, min_s, max_s, times, repeats}`` of measured times (seconds)."""
    return {
        "seconds": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "times": list(times),
        "repeats": len(times),
    }


def time_repeats(
    fn: Callable[[], Any], repeats: int, warmup: int = 0, clock: Callable[[], float] = time.perf_counter
) -> Dict[str, Any]:
    """``warmup`` untimed calls of ``fn``, then ``repeats`` (at least one) timed ones: :func:`summarize` of them."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, repeats)):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return summarize(times)


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


def _child_env(threads: Optional[int]) -> Dict[str, str]:
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
        env["MKL_NUM_THREADS"] = str(threads)
    # the child imports the same gridify as this process, wherever it is started
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def run_child(
    module: str,
    args: Sequence[str],
    *,
    marker: str,
    timeout: float,
    threads: Optional[int] = None,
    cwd: Optional[str] = None,
) -> ChildRun:
    """Run ``python -m module *args`` in a fresh interpreter (``OMP/MKL_NUM_THREADS = threads`` when given);
    the JSON of its last stdout line starting with ``marker``, its status and output."""
    cmd = [sys.executable, "-m", module, *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_child_env(threads), cwd=cwd)
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
    """A table cell: ``-`` for None, ``digits`` significant digits below ``fixed_from``, whole numbers above."""
    if v is None:
        return "-"
    if isinstance(v, float):
        if v == 0:
            return "0"
        return f"{v:.{digits}g}" if abs(v) < fixed_from else f"{v:.0f}"
    return str(v)


def format_table(
    rows: Iterable[Dict[str, Any]], columns: Sequence[Tuple[str, str]], *, fixed_from: float = 1e4, width: int = 60
) -> str:
    """``(key, header)`` columns of ``rows``, right-aligned under a dashed rule; cells cut at ``width`` characters."""
    table = [[h for _, h in columns]] + [
        [fmt_value(r.get(c), fixed_from=fixed_from)[:width] for c, _ in columns] for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


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
