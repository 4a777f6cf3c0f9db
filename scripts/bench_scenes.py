#!/usr/bin/env python
"""Speed and memory of scene segmentation at scene scale, in one run, on a named CPU.

Three parts, every measurement in a fresh child process (``python bench_scenes.py --cell JSON``
printing one JSON line), so that no cell inherits another's allocator caches or peak memory:

1. **N sweep** (``--num-points``, default 16384 65536 262144) for each model of ``--models``
   (``scene_segmenter``, ``pointnet2_segmenter``, ``point_ckconv_segmenter``; 2 features, 19
   classes, metric coordinates): on ONE cloud of ``N`` points (batch vector all zeros)

   * training step: forward + cross-entropy on random labels in ``[0, 19)`` + backward + AdamW step;
   * inference: one forward under ``torch.no_grad`` in eval mode;

   each timed as the median of ``--repeats`` runs after one warm-up step. The train and the
   inference cell of a ``(model, N)`` run in separate children.
2. **Real scans** through :func:`gridify.scene_inference.predict_scene` (``voxel_size=0.1``,
   ``max_points=16384``, ``batch_size=1``: every point scored through fragments and crops) with a
   scene segmenter: a SemanticKITTI scan (features intensity, height), a ScanNet scene (r, g, b
   / 255) and a 3DMatch fragment (height); one child per scan.
3. **End to end**: a ~1M-point ``.bin`` of 8 KITTI scans tiled 120 m apart in x, and a 65,536-point
   crop of the first scan: reading it (:func:`gridify.io.read_points`), ``Predictor.predict`` and
   writing the labelled PLY (:func:`gridify.cli.write_labels`). The Predictor loads ``--ckpt``, or
   an untrained scene segmenter exported to a temporary file (the timing does not depend on the
   weights); it is warmed up on a small generated cloud first, so the 65k and the 1M run compare
   time per point without the one-off start-up.

Clouds: the N-sweep takes the ``N`` points nearest in xy to the sensor of the SemanticKITTI scan
``<data-root>/semantickitti_mini/dataset/sequences/00/velodyne/000000.bin`` (~124k points; for a
larger ``N``, copies of the scan shifted by 100 m in x are added first), features
``[intensity, z - min z]``. Without the data the scan is generated
(:class:`gridify.datasets.ProceduralScenes`, ``kind="outdoor"``), or drawn uniformly in a
40 x 40 x 4 m box with ``--source random``. A part whose data is missing is reported as skipped.

Reported numbers:

* time per point: ``us/point = 1e6 * t / N``, with ``t`` the median step (sweep), the
  ``predict_scene`` call (scans) or read + predict + write (end to end), and ``N`` the points of
  the cloud (every point is scored).
* peak RSS: the largest resident set (physical memory: Python, the torch libraries, data, model,
  activations, gradients, optimizer state) the child process had over its life, ``VmHWM`` of
  ``/proc/self/status`` in MiB. ``ru_maxrss`` is stored too but not used: on Linux a child's
  ``ru_maxrss`` keeps the parent's peak across fork/exec, so it is never below the parent's.
  ``baseline`` is the peak right after the imports, the data and the model build, so
  ``peak - baseline`` is what the step itself needs.
* "cannot run: <reason>": a cell is not run when its estimated peak exceeds ``--memory-limit-gb``
  (``baseline + 1.1 x extra``; ``extra``: the line through the peak - baseline of the same model's
  two largest measured smaller ``N``, proportional to ``N`` from one, a conservative prior
  without any), or when the first step extrapolated linearly from the largest measured smaller
  ``N`` exceeds twice ``--max-step-seconds``; a run cell stops when its
  warm-up step passes ``--max-step-seconds``, its RSS passes ``--memory-limit-gb``, or it raises
  (RuntimeError, MemoryError, ...). A larger ``N`` of a model whose cell failed on time or memory
  is not tried.

Goals tested on the last lines: training step >= 10x faster than PointNet2 at 65k; peak memory
linear in N (least-squares fit of peak - baseline against N, and the ratio 262k / 65k against
the ideal 4); end-to-end time per point at 1M within 2x that at 65k.

Outputs (``--out``, default outputs/bench_scenes): results.json (environment + every cell),
results.csv (one row per measurement) and bench_scenes.png (train time and peak memory vs N,
log-log).

Usage:
    python scripts/bench_scenes.py                      # full run, 2 threads
    python scripts/bench_scenes.py --threads 1 --models scene_segmenter pointnet2_segmenter
    python scripts/bench_scenes.py --quick              # seconds: N = 2048, 4096; a ~20k tiled scene
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_MODELS = ("scene_segmenter", "pointnet2_segmenter", "point_ckconv_segmenter")
DEFAULT_NUM_POINTS = (16384, 65536, 262144)
QUICK_NUM_POINTS = (2048, 4096)
NUM_CLASSES = 19
#: keyword arguments of each benchmarked model (metric LiDAR-like scenes)
MODEL_KWARGS: Dict[str, Dict[str, Any]] = {
    "scene_segmenter": dict(resolution=(32, 32, 8), extent=(40.0, 40.0, 8.0)),
    "pointnet2_segmenter": dict(ratios=(0.2, 0.25), radii=(0.5, 1.5), max_num_neighbors=32),
    # the paper's CCNN_{4,32} trunk; K = 32 neighbours (PointNet2's ball cap), a 0.5 m kernel radius
    # (PointNet2's first radius) instead of the unit-sphere defaults K = 64, radius 1
    "point_ckconv_segmenter": dict(k=32, radius=0.5),
}
#: prior peak-minus-baseline bytes per point (train, infer) for the first N of a model (conservative)
PRIOR_BYTES_PER_POINT: Dict[str, Tuple[float, float]] = {
    "scene_segmenter": (32e3, 8e3),
    "pointnet2_segmenter": (64e3, 16e3),
    "point_ckconv_segmenter": (16e3, 4e3),
}
PRIOR_DEFAULT = (64e3, 16e3)
PRIOR_BASELINE = 0.6 * 2**30
KITTI_SCAN = Path("semantickitti_mini/dataset/sequences/00/velodyne/000000.bin")
KITTI_TILES = [Path(f"semantickitti_mini/dataset/sequences/0{i}/velodyne/000000.bin") for i in range(8)]
SCANNET_DIR = Path("scans/mmdet3d_real_scans/tests/data/scannet")
THREEDMATCH_DIR = Path("scans/threedmatch_fragments_tp3d/notebooks/data/3DMatch")
SWEEP_SHIFT, TILE_SHIFT = 100.0, 120.0
PROCEDURAL_POINTS, QUICK_BASE_POINTS = 124_000, 8192
QUICK_SCAN_POINTS, QUICK_TILE_POINTS, QUICK_SMALL_POINTS = 4096, 2560, 4096
E2E_SMALL_POINTS = 65536
VOXEL_SIZE, MAX_POINTS = 0.1, 16384
CHILD_SETUP_SECONDS = 600.0
MARKER = "@@bench_scenes@@ "
MIB = 2**20


# ---------------------------------------------------------------------------- memory / environment
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


def _ru_maxrss_mib() -> float:
    import resource

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / (1024.0 * 1024.0) if sys.platform == "darwin" else kib / 1024.0  # bytes on macOS


def peak_mib() -> float:
    """This process's peak resident set in MiB (VmHWM; ru_maxrss where /proc is missing)."""
    kib = _status_kib("VmHWM")
    return kib / 1024.0 if kib is not None else _ru_maxrss_mib()


def rss_bytes() -> Optional[int]:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def mem_total_gib() -> Optional[float]:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


# ---------------------------------------------------------------------------- clouds
def _crop(points: np.ndarray, n: int) -> np.ndarray:
    """Indices of the ``n`` points nearest in xy to the point nearest to the sensor (the origin)."""
    from gridify.transforms import crop_xy

    centre = int(np.argmin((points[:, :2].astype(np.float64) ** 2).sum(1)))
    return crop_xy(points, centre, n)


def read_kitti(path: Path) -> Tuple[np.ndarray, np.ndarray]:
    from gridify.io import read_points

    cloud = read_points(path, fields=["intensity"])
    return np.asarray(cloud.points, np.float32), np.asarray(cloud.fields["intensity"], np.float32).reshape(-1)


def base_scan(source: str, data_root: Path, quick: bool, seed: int = 0) -> Tuple[np.ndarray, np.ndarray, str]:
    """``(points [M, 3], intensity [M], description)`` of the scan the sweep clouds are cut from."""
    kitti = data_root / KITTI_SCAN
    if source in ("auto", "kitti") and kitti.is_file():
        pts, inten = read_kitti(kitti)
        return pts, inten, f"SemanticKITTI {KITTI_SCAN}"
    if source == "kitti":
        raise FileNotFoundError(f"--source kitti: {kitti} does not exist")
    m = QUICK_BASE_POINTS if quick else PROCEDURAL_POINTS
    if source in ("auto", "procedural"):
        from gridify.datasets import ProceduralScenes

        item = ProceduralScenes("test", num_scenes=1, num_points=m, kind="outdoor", seed=seed)[0]
        return (
            item["pos"].numpy().astype(np.float32),
            item["strength"].numpy().reshape(-1).astype(np.float32),
            f"ProceduralScenes outdoor ({m} points; no {kitti})",
        )
    rng = np.random.default_rng(seed)
    pts = (rng.random((m, 3)) * np.array([40.0, 40.0, 4.0]) - np.array([20.0, 20.0, 0.0])).astype(np.float32)
    return pts, rng.random(m).astype(np.float32), f"uniform random in a 40 x 40 x 4 m box ({m} points)"


def scene_cloud(
    points: np.ndarray, intensity: np.ndarray, n: int, shift: float = SWEEP_SHIFT
) -> Tuple[np.ndarray, np.ndarray]:
    """``n`` points nearest in xy to the sensor of the scan, tiled ``shift`` metres apart in x when
    ``n`` exceeds it; features ``[intensity, z - min z]``. Returns ``(pos [n, 3], x [n, 2])`` float32."""
    m = len(points)
    if n > m:
        copies = -(-n // m)
        points = np.concatenate([points + np.array([shift * i, 0.0, 0.0], np.float32) for i in range(copies)])
        intensity = np.tile(intensity, copies)
    idx = _crop(points, n)
    p = np.ascontiguousarray(points[idx], np.float32)
    x = np.stack([intensity[idx], p[:, 2] - p[:, 2].min()], 1).astype(np.float32)
    return p, x


# ---------------------------------------------------------------------------- child cells
class StepTimeout(Exception):
    pass


class _Watchdog:
    """Stops the child when its RSS passes the memory limit (prints the cell's result first)."""

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
                        "peak_mib": peak_mib(),
                        "kind": "memory",
                        "reason": f"RSS {rss / 2**30:.1f} GiB passed --memory-limit-gb {self.limit / 2**30:g}",
                    }
                )
                os._exit(0)
            time.sleep(0.05)


def _timed_first(fn: Callable[[], Any], limit_s: float) -> float:
    """Run ``fn`` once; StepTimeout when it takes more than ``limit_s`` seconds."""

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


def _build(name: str, in_channels: int) -> Any:
    import torch
    from gridify.models import build_model

    torch.manual_seed(0)
    return build_model(name, in_channels=in_channels, num_classes=NUM_CLASSES, **MODEL_KWARGS.get(name, {}))


def cell_sweep(spec: Dict[str, Any]) -> Dict[str, Any]:
    import torch
    import torch.nn.functional as F

    n, mode = int(spec["n"]), spec["mode"]
    pts, inten, source = base_scan(spec["source"], Path(spec["data_root"]), spec["quick"])
    p, x = scene_cloud(pts, inten, n)
    device = torch.device(spec.get("device") or "cpu")
    pos, feats = torch.from_numpy(p).to(device), torch.from_numpy(x).to(device)
    batch = torch.zeros(n, dtype=torch.long, device=device)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=torch.Generator().manual_seed(0)).to(device)
    model = _build(spec["model"], 2).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if mode == "train":
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(pos, feats, batch), y).backward()
            opt.step()
            sync()
    else:
        model.eval()

        def step() -> None:
            with torch.no_grad():
                model(pos, feats, batch)
            sync()

    baseline = peak_mib()
    first = _timed_first(step, float(spec["max_step_seconds"]))
    times = []
    for _ in range(int(spec["repeats"])):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {
        "status": "measured",
        "seconds": med,
        "min_s": min(times),
        "times": times,
        "first_s": first,
        "us_per_point": 1e6 * med / n,
        "baseline_mib": baseline,
        "points": n,
        "source": source,
        "parameters": sum(q.numel() for q in model.parameters()),
        "device": str(device),
        "device_peak_mib": torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None,
    }


def _load_scan(spec: Dict[str, Any]) -> Tuple[np.ndarray, np.ndarray, str]:
    """``(pos [N, 3], x [N, F], description)`` of a real scan."""
    path, kind = Path(spec["path"]), spec["scan"]
    if kind == "semantickitti":
        pts, inten = read_kitti(path)
        x = np.stack([inten, pts[:, 2] - pts[:, 2].min()], 1)
        what = "features intensity, height"
    elif kind == "scannet":
        rows = (
            np.load(path, allow_pickle=False) if path.suffix == ".npy" else np.fromfile(path, np.float32).reshape(-1, 6)
        )
        pts = np.ascontiguousarray(rows[:, :3], np.float32)
        x = rows[:, 3:6] / 255.0
        what = "features r, g, b / 255"
    else:
        from gridify.io import centre_large_offset, read_points

        pts = centre_large_offset(read_points(path).points)[0].astype(np.float32)  # UTM: centred in float64 first
        x = (pts[:, 2] - pts[:, 2].min())[:, None]
        what = "feature height"
    if spec["quick"] and len(pts) > QUICK_SCAN_POINTS:
        from gridify.transforms import crop_xy

        centre = int(np.argmin(((pts[:, :2] - pts[:, :2].mean(0)) ** 2).sum(1)))
        idx = crop_xy(pts, centre, QUICK_SCAN_POINTS)
        pts, x = pts[idx], x[idx]
        what += f", --quick crop of {QUICK_SCAN_POINTS} points"
    return np.ascontiguousarray(pts, np.float32), np.ascontiguousarray(x, np.float32), what


def cell_scan(spec: Dict[str, Any]) -> Dict[str, Any]:
    import torch
    from gridify.scene_inference import predict_scene

    pts, x, what = _load_scan(spec)
    pos, feats = torch.from_numpy(pts), torch.from_numpy(x)
    model = _build("scene_segmenter", x.shape[1])
    model.eval()
    with torch.no_grad():  # warm-up on a small crop (lazy initialisation, allocator)
        m = min(len(pts), 2048)
        model(pos[:m], feats[:m], torch.zeros(m, dtype=torch.long))
    baseline = peak_mib()
    crops: List[int] = []
    t0 = time.perf_counter()
    probs = predict_scene(
        model,
        pos,
        feats,
        voxel_size=VOXEL_SIZE,
        max_points=MAX_POINTS,
        batch_size=1,
        progress=lambda done, total: crops.append(total),
    )
    dt = time.perf_counter() - t0
    assert probs.shape == (len(pts), NUM_CLASSES)
    n = len(pts)
    return {
        "status": "measured",
        "seconds": dt,
        "us_per_point": 1e6 * dt / n,
        "points": n,
        "crops": crops[-1] if crops else None,
        "baseline_mib": baseline,
        "features": what,
    }


def cell_e2e(spec: Dict[str, Any]) -> Dict[str, Any]:
    import gridify
    from gridify.cli import write_labels
    from gridify.io import read_points, reader_takes

    predictor = gridify.load(spec["ckpt"])
    rng = np.random.default_rng(0)  # warm-up (lazy initialisation, allocator) on a small generated cloud
    w0 = time.perf_counter()
    predictor.predict(
        rng.uniform(-20, 20, (512, 3)).astype(np.float32),
        features=rng.random((512, predictor.in_channels)).astype(np.float32),
    )
    warmup = time.perf_counter() - w0
    baseline = peak_mib()
    t0 = time.perf_counter()
    cloud = (
        read_points(spec["path"], fields="all") if reader_takes(spec["path"], "fields") else read_points(spec["path"])
    )
    t1 = time.perf_counter()
    pred = predictor.predict(cloud, batch_size=int(spec["batch_size"]))
    t2 = time.perf_counter()
    out = write_labels(Path(spec["out"]), cloud, pred)
    t3 = time.perf_counter()
    n = len(cloud.points)
    size = out.stat().st_size
    out.unlink()
    return {
        "status": "measured",
        "points": n,
        "read_s": t1 - t0,
        "predict_s": t2 - t1,
        "write_s": t3 - t2,
        "seconds": t3 - t0,
        "us_per_point": 1e6 * (t3 - t0) / n,
        "predict_us_per_point": 1e6 * (t2 - t1) / n,
        "baseline_mib": baseline,
        "ply_bytes": size,
        "warmup_s": warmup,
    }


CELLS = {"sweep": cell_sweep, "scan": cell_scan, "e2e": cell_e2e}


def child_main(text: str) -> int:
    """Run one cell (``--cell JSON``) and print its result as one JSON line (always, even on failure)."""
    spec = json.loads(text)
    lock = threading.Lock()
    emitted: List[bool] = []

    def emit(result: Dict[str, Any]) -> None:
        with lock:  # one result only: the watchdog's or the cell's
            if not emitted:
                emitted.append(True)
                sys.stdout.write(MARKER + json.dumps(result) + "\n")
                sys.stdout.flush()

    import torch

    torch.set_num_threads(int(spec["threads"]))
    _Watchdog(float(spec["memory_limit_gb"]) * 2**30, emit)
    try:
        result = CELLS[spec["cell"]](spec)
    except StepTimeout as exc:
        result = {"status": "cannot run", "reason": str(exc), "kind": "time"}
    except MemoryError as exc:
        result = {"status": "cannot run", "reason": f"MemoryError: {exc}", "kind": "memory"}
    except Exception as exc:  # noqa: BLE001 - every cell ends measured or with its reason
        msg = " ".join(str(exc).split())
        kind = "memory" if any(w in msg.lower() for w in ("memory", "alloc")) else "error"
        result = {"status": "cannot run", "reason": f"{type(exc).__name__}: {msg}"[:600], "kind": kind}
    result.update(peak_mib=peak_mib(), ru_maxrss_mib=_ru_maxrss_mib(), threads=torch.get_num_threads())
    emit(result)
    return 0


def run_child(spec: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    """Run a cell in a fresh interpreter; its JSON result, or a "cannot run" result naming why there is none."""
    env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]), MKL_NUM_THREADS=str(spec["threads"]))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--cell", json.dumps(spec)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        return {"status": "cannot run", "reason": f"timed out after {timeout:.0f} s", "kind": "time"}
    wall = time.perf_counter() - t0
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARKER):
            result = json.loads(line[len(MARKER) :])
            result["child_wall_s"] = wall
            return result
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
    if proc.returncode < 0:
        why = f"child killed by signal {-proc.returncode}" + (" (out of memory?)" if proc.returncode == -9 else "")
        return {"status": "cannot run", "reason": f"{why}: {tail}", "kind": "memory"}
    return {"status": "cannot run", "reason": f"child exited with code {proc.returncode}: {tail}", "kind": "error"}


# ---------------------------------------------------------------------------- parts
def _common(args: argparse.Namespace) -> Dict[str, Any]:
    return {
        "threads": args.threads,
        "device": args.device,
        "memory_limit_gb": args.limit_gb,
        "quick": args.quick,
        "data_root": str(args.data_root),
        "source": args.source,
    }


def _fmt_s(v: Optional[float]) -> str:
    return "-" if v is None else (f"{v:.3f}" if v < 100 else f"{v:.0f}")


def estimate_extra(done: List[Dict[str, Any]], n: int) -> Tuple[float, str]:
    """Bytes over the baseline at ``n`` points, from the measured smaller N of the same model and
    mode: proportional to the one measurement, or the line through the last two (fixed costs
    such as the grid's do not grow with N); never below 0."""
    e = [(r["points"], max(r["peak_mib"] - r["baseline_mib"], 0.0) * MIB) for r in done]
    (n1, e1) = e[-1]
    if len(e) == 1 or e[-2][0] == n1:
        return e1 * n / n1, f"{e1 / n1 / 1e3:.1f} kB/point measured at N={n1}"
    (n0, e0) = e[-2]
    slope = max((e1 - e0) / (n1 - n0), 0.0)
    return max(e1 + slope * (n - n1), 0.0), (
        f"{slope / 1e3:.1f} kB/point between N={n0} and N={n1} + {e1 / 2**30:.2f} GiB at N={n1}"
    )


def part_sweep(args: argparse.Namespace, log: Callable[[str], None]) -> List[Dict[str, Any]]:
    rows: List[Dict[str, Any]] = []
    ns = sorted(args.num_points)
    timeout = CHILD_SETUP_SECONDS + 1.5 * args.max_step_seconds * (args.repeats + 1)
    for name in args.models:
        measured: Dict[str, List[Dict[str, Any]]] = {}  # mode -> the measured results, by increasing N
        failed: Dict[str, str] = {}  # mode -> why larger N are not tried
        for n in ns:
            row: Dict[str, Any] = {"part": "sweep", "model": name, "n": n}
            for mode in ("train", "infer"):
                reason = None
                prior = PRIOR_BYTES_PER_POINT.get(name, PRIOR_DEFAULT)[mode == "infer"]
                if mode in failed:
                    reason = failed[mode]
                else:
                    done = measured.get(mode, [])
                    if done:
                        prev = done[-1]
                        base = prev["baseline_mib"] * MIB
                        extra, basis = estimate_extra(done, n)
                        est_time = prev["first_s"] * n / prev["points"]
                        if est_time > 2 * args.max_step_seconds:
                            reason = (
                                f"first step estimated {est_time:.0f} s (linear from {prev['first_s']:.1f} s "
                                f"at N={prev['points']}) > 2x --max-step-seconds {args.max_step_seconds:g}"
                            )
                    else:
                        base, extra, basis = PRIOR_BASELINE, prior * n, f"prior {prior / 1e3:.0f} kB/point"
                    est = base + 1.1 * extra
                    if reason is None and est > args.limit_gb * 2**30:
                        reason = f"estimated peak {est / 2**30:.1f} GiB > --memory-limit-gb {args.limit_gb:g} ({basis})"
                if reason is not None:
                    res: Dict[str, Any] = {"status": "cannot run", "reason": reason, "kind": "skipped"}
                else:
                    log(f"  {name} N={n} {mode} ...")
                    res = run_child(
                        dict(
                            _common(args),
                            cell="sweep",
                            model=name,
                            n=n,
                            mode=mode,
                            repeats=args.repeats,
                            max_step_seconds=args.max_step_seconds,
                        ),
                        timeout,
                    )
                    if res["status"] == "measured":
                        measured.setdefault(mode, []).append(res)
                    elif res.get("kind") in ("time", "memory"):
                        failed[mode] = f"N={n} failed already ({res['reason']})"
                row[mode] = res
                log(
                    f"  {name} N={n} {mode}: "
                    + (
                        f"{res['seconds']:.3f} s, peak {res['peak_mib']:.0f} MiB"
                        if res["status"] == "measured"
                        else f"cannot run: {res['reason']}"
                    )
                )
            rows.append(row)
    return rows


def find_scans(data_root: Path) -> Dict[str, Tuple[Optional[Path], str]]:
    """``scan -> (path, note)``; path None (with the reason) where the data is missing."""
    out: Dict[str, Tuple[Optional[Path], str]] = {}
    kitti = data_root / KITTI_SCAN
    out["semantickitti"] = (kitti, "") if kitti.is_file() else (None, f"no {kitti}")
    sdir = data_root / SCANNET_DIR
    cands: List[Tuple[int, Path]] = []
    if sdir.is_dir():
        for f in sorted(sdir.rglob("*")):
            try:
                if f.suffix == ".npy" and f.name.endswith("_vert_all.npy"):
                    a = np.load(f, mmap_mode="r", allow_pickle=False)
                    if a.ndim == 2 and a.shape[1] == 6:
                        cands.append((a.shape[0], f))
                elif f.suffix == ".bin" and f.parent.name == "points" and f.stat().st_size % 24 == 0:
                    cands.append((f.stat().st_size // 24, f))
            except (OSError, ValueError):
                continue
    if cands:  # the largest scene: mmdet3d's points/*.bin test fixtures hold only 100 points
        n, f = max(cands, key=lambda c: (c[0], -len(str(c[1]))))
        out["scannet"] = (f, f"{n} points, x y z r g b")
    else:
        out["scannet"] = (None, f"no ScanNet points (*_vert_all.npy or points/*.bin) under {sdir}")
    plys = sorted((data_root / THREEDMATCH_DIR).glob("*.ply")) if (data_root / THREEDMATCH_DIR).is_dir() else []
    out["3dmatch"] = (plys[0], "") if plys else (None, f"no *.ply under {data_root / THREEDMATCH_DIR}")
    return out


def part_scans(args: argparse.Namespace, log: Callable[[str], None]) -> List[Dict[str, Any]]:
    rows = []
    for scan, (path, note) in find_scans(args.data_root).items():
        row: Dict[str, Any] = {"part": "scans", "scan": scan, "path": str(path) if path else None}
        if path is None:
            row.update(status="cannot run", reason=f"data missing: {note}", kind="skipped")
        else:
            log(f"  {scan} ({path.name}) ...")
            row.update(
                run_child(
                    dict(_common(args), cell="scan", scan=scan, path=str(path)),
                    CHILD_SETUP_SECONDS + args.max_scene_seconds,
                )
            )
        log(
            f"  {scan}: "
            + (
                f"{row['points']} points, {row['seconds']:.2f} s"
                if row["status"] == "measured"
                else f"cannot run: {row['reason']}"
            )
        )
        rows.append(row)
    return rows


def export_untrained(path: Path) -> None:
    """An untrained KITTI scene segmenter as an exported model.pt (timing does not depend on the weights)."""
    import torch
    from gridify.checkpoint import export_model
    from gridify.datasets.scene_layouts import SEMANTICKITTI_CLASSES
    from gridify.models import GridifiedSceneSegmenter

    kwargs = dict(in_channels=2, num_classes=NUM_CLASSES, **MODEL_KWARGS["scene_segmenter"])
    torch.manual_seed(0)
    model = GridifiedSceneSegmenter(**kwargs)
    model.eval()
    info = {
        "class_names": list(SEMANTICKITTI_CLASSES),
        "features": ["strength", "height"],
        "voxel_size": VOXEL_SIZE,
        "max_points": MAX_POINTS,
        "num_points": MAX_POINTS,
        "normalization": None,
        "in_channels": 2,
    }
    export_model(
        path,
        model,
        {"model_name": "scene_segmenter", "model_kwargs": kwargs, "task": "scene_segmentation", "info": info},
    )


def _write_bin(path: Path, points: np.ndarray, intensity: np.ndarray) -> int:
    rows = np.concatenate([points.astype(np.float32), intensity.astype(np.float32)[:, None]], 1)
    rows.astype("<f4").tofile(path)
    return len(rows)


def part_e2e(args: argparse.Namespace, log: Callable[[str], None], tmp: Path) -> List[Dict[str, Any]]:
    if args.ckpt is not None:
        ckpt = args.ckpt
    else:
        ckpt = tmp / "scene_untrained.pt"
        export_untrained(ckpt)
    tiles = [args.data_root / t for t in KITTI_TILES]
    if args.source in ("auto", "kitti") and all(t.is_file() for t in tiles):
        scans = [read_kitti(t) for t in tiles]
        what = "8 SemanticKITTI scans (sequences 00-07, 000000.bin)"
    else:
        pts, inten, desc = base_scan(args.source, args.data_root, args.quick)
        scans = [(pts, inten)] * 8
        what = f"8 copies of {desc}"
    per_tile = QUICK_TILE_POINTS if args.quick else None
    big_pts, big_int = [], []
    for i, (pts, inten) in enumerate(scans):
        if per_tile is not None:
            idx = _crop(pts, per_tile)
            pts, inten = pts[idx], inten[idx]
        big_pts.append(pts + np.array([TILE_SHIFT * i, 0.0, 0.0], np.float32))
        big_int.append(inten)
    small_n = QUICK_SMALL_POINTS if args.quick else E2E_SMALL_POINTS
    idx = _crop(scans[0][0], small_n)
    files = [
        (
            "tiled",
            tmp / "tiled.bin",
            np.concatenate(big_pts),
            np.concatenate(big_int),
            f"{what}{' (--quick: %d points each)' % per_tile if per_tile else ''}, {TILE_SHIFT:g} m apart in x",
        ),
        ("crop", tmp / "crop.bin", scans[0][0][idx], scans[0][1][idx], "crop of the first scan"),
    ]
    rows = []
    for name, path, pts, inten, desc in files:
        n = _write_bin(path, pts, inten)
        log(f"  {name}: {n} points ...")
        row: Dict[str, Any] = {
            "part": "e2e",
            "scene": name,
            "description": desc,
            "file_points": n,
            "ckpt": str(ckpt) if args.ckpt is not None else "untrained scene_segmenter",
        }
        row.update(
            run_child(
                dict(
                    _common(args),
                    cell="e2e",
                    path=str(path),
                    ckpt=str(ckpt),
                    out=str(tmp / f"{name}_labeled.ply"),
                    batch_size=args.e2e_batch_size,
                ),
                CHILD_SETUP_SECONDS + args.max_scene_seconds,
            )
        )
        log(
            f"  {name}: "
            + (f"{row['seconds']:.2f} s" if row["status"] == "measured" else f"cannot run: {row['reason']}")
        )
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- report
def _cell_text(res: Optional[Dict[str, Any]], key: str, fmt: Callable[[Any], str]) -> str:
    if res is None:
        return "-"
    if res["status"] != "measured":
        reason = res.get("reason", "").replace("|", "/")
        return "cannot run: " + (reason if len(reason) <= 90 else reason[:87] + "...")
    v = res.get(key)
    return "-" if v is None else fmt(v)


def _mem(res: Dict[str, Any]) -> str:
    return f"{res['peak_mib']:.0f} (+{res['peak_mib'] - res['baseline_mib']:.0f})"


def _get(rows: List[Dict[str, Any]], model: str, n: int, mode: str) -> Optional[Dict[str, Any]]:
    for r in rows:
        if r["model"] == model and r["n"] == n and r[mode]["status"] == "measured":
            return r[mode]
    return None


def memory_fit(rows: List[Dict[str, Any]], model: str, mode: str = "train") -> Optional[Dict[str, Any]]:
    """Least-squares fit ``peak - baseline = a + b N`` (MiB) over the measured N of a model."""
    pts = [
        (r["n"], r[mode]["peak_mib"] - r[mode]["baseline_mib"])
        for r in rows
        if r["model"] == model and r[mode]["status"] == "measured"
    ]
    if len(pts) < 2:
        return None
    n = np.array([p[0] for p in pts], float)
    e = np.array([p[1] for p in pts], float)
    b, a = np.polyfit(n, e, 1)
    pred = a + b * n
    ss = float(((e - e.mean()) ** 2).sum())
    r2 = 1.0 - float(((e - pred) ** 2).sum()) / ss if ss > 0 else 1.0
    slope = float(np.polyfit(np.log(n), np.log(np.maximum(e, 1e-3)), 1)[0])
    return {"kib_per_point": b * 1024.0, "intercept_mib": float(a), "r2": r2, "loglog_exponent": slope, "points": pts}


def report(results: Dict[str, Any], args: argparse.Namespace) -> List[str]:
    lines: List[str] = []
    sweep, scans, e2e = results.get("sweep") or [], results.get("scans") or [], results.get("e2e") or []
    ns = sorted(args.num_points)
    goal_n = 65536 if 65536 in ns else ns[-1]
    goals: Dict[str, Any] = {}
    if sweep:
        lines += [
            "",
            "## 1. N sweep: one cloud of N points, batch of 1 (median of "
            f"{args.repeats} after a warm-up; peak RSS MiB of the child, (+ over its baseline))",
            "",
            "| model | N | train s/step | infer s | train us/point | infer us/point | train peak MiB | "
            "infer peak MiB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sweep:
            tr, inf = r["train"], r["infer"]
            if tr["status"] != "measured" and inf["status"] != "measured" and tr.get("reason") == inf.get("reason"):
                lines.append(f"| {r['model']} | {r['n']} | {_cell_text(tr, 'seconds', _fmt_s)} | | | | | |")
                continue
            lines.append(
                f"| {r['model']} | {r['n']} | {_cell_text(tr, 'seconds', _fmt_s)} | "
                f"{_cell_text(inf, 'seconds', _fmt_s)} | {_cell_text(tr, 'us_per_point', '{:.1f}'.format)} | "
                f"{_cell_text(inf, 'us_per_point', '{:.1f}'.format)} | "
                f"{_mem(tr) if tr['status'] == 'measured' else '-'} | "
                f"{_mem(inf) if inf['status'] == 'measured' else '-'} |"
            )
        others = [m for m in args.models if m != "scene_segmenter"]
        if "scene_segmenter" in args.models and others:
            lines += [
                "",
                "Time ratios (other model / scene_segmenter; > 1: scene_segmenter is faster):",
                "",
                "| N | " + " | ".join(f"{m} train | {m} infer" for m in others) + " |",
                "|---:|" + "---:|---:|" * len(others),
            ]
            for n in ns:
                cells = []
                for m in others:
                    for mode in ("train", "infer"):
                        a, b = _get(sweep, m, n, mode), _get(sweep, "scene_segmenter", n, mode)
                        cells.append(f"{a['seconds'] / b['seconds']:.1f}x" if a and b else "-")
                lines.append(f"| {n} | " + " | ".join(cells) + " |")
        a, b = _get(sweep, "pointnet2_segmenter", goal_n, "train"), _get(sweep, "scene_segmenter", goal_n, "train")
        ratio = a["seconds"] / b["seconds"] if a and b else None
        goals["train_10x_pointnet2"] = {"n": goal_n, "ratio": ratio, "pass": None if ratio is None else ratio >= 10}
        fits = {m: memory_fit(sweep, m) for m in args.models}
        goals["memory_linear"] = {}
        lines += ["", "Peak memory vs N (train, peak - baseline = a + b N, least squares):", ""]
        hi = ns[-1]
        lo = goal_n if goal_n != hi else (ns[-2] if len(ns) > 1 else hi)
        for m, fit in fits.items():
            ea, eb = _get(sweep, m, hi, "train"), _get(sweep, m, lo, "train")
            mr = None
            if ea and eb and hi != lo:
                mr = (ea["peak_mib"] - ea["baseline_mib"]) / max(eb["peak_mib"] - eb["baseline_mib"], 1e-6)
            ideal = hi / lo
            ok = None if mr is None else mr <= 1.25 * ideal
            goals["memory_linear"][m] = {"fit": fit, "n_hi": hi, "n_lo": lo, "ratio": mr, "ideal": ideal, "pass": ok}
            if fit is None:
                lines.append(f"- {m}: fewer than two measured N")
            else:
                lines.append(
                    f"- {m}: b = {fit['kib_per_point']:.2f} KiB/point, a = {fit['intercept_mib']:.0f} MiB, "
                    f"R^2 = {fit['r2']:.3f}, log-log exponent {fit['loglog_exponent']:.2f}; "
                    + (
                        f"(peak - baseline) at {hi} / at {lo} = {mr:.2f} (linear: {ideal:.1f})"
                        if mr is not None
                        else "ratio: -"
                    )
                )
    if scans:
        lines += [
            "",
            f"## 2. Real scans through predict_scene (scene_segmenter, voxel_size={VOXEL_SIZE}, "
            f"max_points={MAX_POINTS}, batch_size=1)",
            "",
            "| scan | points | crops | seconds | us/point | peak MiB | baseline MiB |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in scans:
            if r["status"] != "measured":
                lines.append(f"| {r['scan']} | {_cell_text(r, '', str)} | | | | | |")
            else:
                lines.append(
                    f"| {r['scan']} | {r['points']} | {r.get('crops') or '-'} | {r['seconds']:.2f} | "
                    f"{r['us_per_point']:.1f} | {r['peak_mib']:.0f} | {r['baseline_mib']:.0f} |"
                )
    if e2e:
        lines += [
            "",
            f"## 3. End to end: read_points + Predictor.predict (batch_size={args.e2e_batch_size}) + "
            "write labelled PLY",
            "",
            "| scene | points | read s | predict s | write s | total s | us/point | peak MiB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in e2e:
            if r["status"] != "measured":
                lines.append(f"| {r['scene']} ({r['file_points']}) | {_cell_text(r, '', str)} | | | | | | |")
            else:
                lines.append(
                    f"| {r['scene']} | {r['points']} | {r['read_s']:.2f} | {r['predict_s']:.2f} | "
                    f"{r['write_s']:.2f} | {r['seconds']:.2f} | {r['us_per_point']:.1f} | "
                    f"{r['peak_mib']:.0f} |"
                )
        big = next((r for r in e2e if r["scene"] == "tiled" and r["status"] == "measured"), None)
        small = next((r for r in e2e if r["scene"] == "crop" and r["status"] == "measured"), None)
        ratio = big["us_per_point"] / small["us_per_point"] if big and small else None
        goals["time_per_point_1m_within_2x"] = {
            "ratio": ratio,
            "pass": None if ratio is None else ratio <= 2.0,
            "n_big": big and big["points"],
            "n_small": small and small["points"],
        }
    results["goals"] = goals

    def verdict(ok: Optional[bool]) -> str:
        return "n/a" if ok is None else ("PASS" if ok else "FAIL")

    parts = []
    if "train_10x_pointnet2" in goals:
        g = goals["train_10x_pointnet2"]
        shown = "-" if g["ratio"] is None else f"{g['ratio']:.1f}x"
        parts.append(f"train >= 10x PointNet2 at N={g['n']}: {shown} {verdict(g['pass'])}")
    if "memory_linear" in goals and "scene_segmenter" in goals["memory_linear"]:
        g = goals["memory_linear"]["scene_segmenter"]
        parts.append(
            f"scene_segmenter peak memory linear in N ({g['n_hi']}/{g['n_lo']}: "
            f"{'-' if g['ratio'] is None else format(g['ratio'], '.2f')} vs {g['ideal']:.1f}) "
            f"{verdict(g['pass'])}"
        )
    if "time_per_point_1m_within_2x" in goals:
        g = goals["time_per_point_1m_within_2x"]
        parts.append(
            f"time/point at {g['n_big'] or '1M'} within 2x of {g['n_small'] or '65k'}: "
            f"{'-' if g['ratio'] is None else format(g['ratio'], '.2f') + 'x'} {verdict(g['pass'])}"
        )
    if parts:
        lines += ["", "Goals: " + " | ".join(parts)]
    return lines


def csv_rows(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    rows = []
    for r in results.get("sweep") or []:
        for mode in ("train", "infer"):
            c = r[mode]
            rows.append(
                {
                    "part": "sweep",
                    "name": r["model"],
                    "n": r["n"],
                    "mode": mode,
                    "status": c["status"],
                    "reason": c.get("reason", ""),
                    "seconds": c.get("seconds"),
                    "min_s": c.get("min_s"),
                    "us_per_point": c.get("us_per_point"),
                    "peak_mib": c.get("peak_mib"),
                    "baseline_mib": c.get("baseline_mib"),
                }
            )
    for r in results.get("scans") or []:
        rows.append(
            {
                "part": "scans",
                "name": r["scan"],
                "n": r.get("points"),
                "mode": "predict_scene",
                "status": r["status"],
                "reason": r.get("reason", ""),
                "seconds": r.get("seconds"),
                "us_per_point": r.get("us_per_point"),
                "peak_mib": r.get("peak_mib"),
                "baseline_mib": r.get("baseline_mib"),
            }
        )
    for r in results.get("e2e") or []:
        rows.append(
            {
                "part": "e2e",
                "name": r["scene"],
                "n": r.get("points", r.get("file_points")),
                "mode": "read+predict+write",
                "status": r["status"],
                "reason": r.get("reason", ""),
                "seconds": r.get("seconds"),
                "us_per_point": r.get("us_per_point"),
                "peak_mib": r.get("peak_mib"),
                "baseline_mib": r.get("baseline_mib"),
            }
        )
    return rows


def plot(results: Dict[str, Any], path: Path) -> Optional[Path]:
    """Train time and peak memory vs N (log-log), one line per model; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    models = list(dict.fromkeys(r["model"] for r in results.get("sweep") or []))
    for m in models:
        pts = [(r["n"], r["train"]) for r in results["sweep"] if r["model"] == m and r["train"]["status"] == "measured"]
        if not pts:
            continue
        n = [p[0] for p in pts]
        colour = axes[0].plot(n, [p[1]["seconds"] for p in pts], "o-", label=m)[0].get_color()
        axes[1].plot(n, [p[1]["peak_mib"] for p in pts], "o-", color=colour, label=f"{m} peak")
        axes[1].plot(
            n,
            [max(p[1]["peak_mib"] - p[1]["baseline_mib"], 1e-1) for p in pts],
            "x--",
            color=colour,
            label=f"{m} peak - baseline",
        )
    env = results["environment"]
    for ax, title, ylabel in ((axes[0], "training step", "seconds / step"), (axes[1], "training peak RSS", "MiB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("points N")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(f"{env['cpu']}, torch.get_num_threads() = {env['threads']}, torch {env['torch']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- main
def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--num-points",
        type=int,
        nargs="+",
        default=None,
        help=f"cloud sizes N of the sweep (default {' '.join(map(str, DEFAULT_NUM_POINTS))}; "
        f"--quick: {' '.join(map(str, QUICK_NUM_POINTS))})",
    )
    p.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), help="registered models of the sweep")
    p.add_argument(
        "--parts",
        nargs="+",
        choices=("sweep", "scans", "e2e"),
        default=["sweep", "scans", "e2e"],
        help="which parts to run",
    )
    p.add_argument(
        "--repeats", type=int, default=None, help="timed steps per cell after the warm-up (default 3; --quick: 1)"
    )
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads in every child")
    p.add_argument("--device", default="cpu", help="the sweep's device (cpu, cuda): a GPU's times beside the CPU's")
    p.add_argument(
        "--memory-limit-gb",
        type=float,
        default=16.0,
        help="cells whose estimated or measured RSS passes this many GiB cannot run",
    )
    p.add_argument(
        "--max-step-seconds", type=float, default=120.0, help="a sweep cell whose warm-up step takes longer cannot run"
    )
    p.add_argument(
        "--max-scene-seconds",
        type=float,
        default=1800.0,
        help="wall-time limit of one scan / end-to-end child (after its setup allowance)",
    )
    p.add_argument(
        "--ckpt",
        type=Path,
        default=None,
        help="scene segmenter checkpoint for the end-to-end part (default: an untrained one)",
    )
    p.add_argument(
        "--e2e-batch-size",
        type=int,
        default=8,
        help="crops per forward pass in Predictor.predict (8: as `gridify predict`)",
    )
    p.add_argument(
        "--data-root",
        type=Path,
        default=Path(os.environ.get("GRIDIFY_SHARED_DATA") or ROOT.parent / "shared" / "data"),
        help="folder with semantickitti_mini/ and scans/ ($GRIDIFY_SHARED_DATA or ../shared/data)",
    )
    p.add_argument(
        "--source",
        choices=("auto", "kitti", "procedural", "random"),
        default="auto",
        help="sweep clouds: the KITTI scan when present (auto), a generated outdoor scan, or uniform random points",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=ROOT / "outputs" / "bench_scenes",
        help="folder for results.json, results.csv and bench_scenes.png",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: N = 2048 4096, 1 repeat, scans cropped to 4096 points, a ~20k tiled scene",
    )
    p.add_argument("--cell", help=argparse.SUPPRESS)  # internal: run one cell (JSON) and print its result
    args = p.parse_args(argv)
    if args.num_points is None:
        args.num_points = list(QUICK_NUM_POINTS if args.quick else DEFAULT_NUM_POINTS)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    for flag, v in (
        ("--threads", args.threads),
        ("--repeats", args.repeats),
        ("--e2e-batch-size", args.e2e_batch_size),
    ):
        if v < 1:
            p.error(f"{flag} must be >= 1, got {v}")
    if any(n < 1 for n in args.num_points):
        p.error(f"--num-points must be positive, got {args.num_points}")
    for flag, v in (
        ("--memory-limit-gb", args.memory_limit_gb),
        ("--max-step-seconds", args.max_step_seconds),
        ("--max-scene-seconds", args.max_scene_seconds),
    ):
        if not v > 0:
            p.error(f"{flag} must be > 0, got {v}")
    args.num_points = sorted(set(args.num_points))
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        p.error(f"--device must be cpu or cuda[:N], got {args.device!r}")
    if args.device != "cpu":
        import torch

        if not torch.cuda.is_available():
            p.error(f"--device {args.device}: torch sees no CUDA device here")
    args.data_root = args.data_root.expanduser().resolve()  # the children run in the repository root
    if args.ckpt is not None:
        args.ckpt = args.ckpt.expanduser().resolve()
    return args


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    args = parse_args(argv)
    if args.cell is not None:
        raise SystemExit(child_main(args.cell))
    if args.ckpt is not None and not args.ckpt.is_file():
        raise SystemExit(f"bench_scenes: error: --ckpt {args.ckpt}: no such file")
    from gridify.registry import MODELS

    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        raise SystemExit(f"bench_scenes: error: --models {unknown} not registered; registered: {MODELS.names()}")
    if args.source == "kitti" and not (args.data_root / KITTI_SCAN).is_file():
        raise SystemExit(f"bench_scenes: error: --source kitti: {args.data_root / KITTI_SCAN} does not exist")
    import torch

    torch.set_num_threads(args.threads)
    total = mem_total_gib()
    args.limit_gb = min(args.memory_limit_gb, 0.9 * total) if total else args.memory_limit_gb
    env = {
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": args.device if args.device == "cpu" else f"{args.device} ({torch.cuda.get_device_name(args.device)})",
        "mem_total_gib": total,
        "memory_limit_gib": args.limit_gb,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731 - progress on stderr, tables on stdout
    print(
        f"CPU: {env['cpu']} ({env['cpu_count']} logical cores) | device {env['device']} | torch {env['torch']} | "
        f"torch.get_num_threads() = {env['threads']} | memory limit {args.limit_gb:.1f} GiB",
        flush=True,
    )
    results: Dict[str, Any] = {
        "environment": env,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "cell"},
        "model_kwargs": MODEL_KWARGS,
    }
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_scenes_") as tmp:
        if "sweep" in args.parts:
            log("part 1: N sweep")
            results["sweep"] = part_sweep(args, log)
        if "scans" in args.parts:
            log("part 2: real scans")
            results["scans"] = part_scans(args, log)
        if "e2e" in args.parts:
            log("part 3: end to end")
            results["e2e"] = part_e2e(args, log, Path(tmp))
    results["wall_s"] = time.perf_counter() - t0
    lines = report(results, args)
    print("\n".join(lines), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    rows = csv_rows(results)
    with open(args.out / "results.csv", "w", newline="") as fh:
        fields = [
            "part",
            "name",
            "n",
            "mode",
            "status",
            "reason",
            "seconds",
            "min_s",
            "us_per_point",
            "peak_mib",
            "baseline_mib",
        ]
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in fields})
    png = plot(results, args.out / "bench_scenes.png") if results.get("sweep") else None
    print(
        f"\nwrote {args.out / 'results.json'}, {args.out / 'results.csv'}"
        + (f", {png}" if png else " (no PNG: matplotlib missing or no sweep)")
        + f" in {results['wall_s']:.0f} s",
        flush=True,
    )
    return results


if __name__ == "__main__":
    main()
