"""Speed and memory of scene segmentation at scene scale, in one run, on a named CPU: ``gridify bench --scenes``.

Three parts, every measurement in a fresh child process (``python -m gridify.bench.scenes --cell JSON``
printing one JSON line, :func:`gridify.bench.harness.run_child`), so that no cell inherits another's
allocator caches or peak memory:

1. **N sweep** (``--num-points``, default 16384 65536 262144) for each model of ``--models``
   (``scene_segmenter``, ``pointnet2_segmenter``, ``point_ckconv_segmenter``; 2 features, 19
   classes, metric coordinates): on ONE cloud of ``N`` points (batch vector all zeros)

   * training step: forward + cross-entropy on random labels in ``[0, 19)`` + backward + AdamW step;
   * inference: one forward under ``torch.no_grad`` in eval mode;

   each timed by :class:`gridify.bench.harness.MedianTimer`: one untimed warm-up step, then at least
   ``--repeats`` timed ones, more until the 95 % interval of the median is within ``± --rel-ci`` of
   it or ``--time-budget`` seconds of timed steps are spent (the median, its interval and whether the
   target was reached are recorded). The train and the inference cell of a ``(model, N)`` run in
   separate children.
2. **Real scans** through :func:`gridify.scene_inference.predict_scene` (``voxel_size=0.1``,
   ``max_points=16384``, ``batch_size=1``: every point scored through fragments and crops) with a
   scene segmenter: a SemanticKITTI scan (features intensity, height), a ScanNet scene (r, g, b
   / 255) and a 3DMatch fragment (height); one child per scan.
3. **End to end**: a ~1M-point ``.bin`` of 8 KITTI scans tiled 120 m apart in x, and a 65,536-point
   crop of the first scan: reading it (:func:`gridify.io.read_points`), ``Predictor.predict`` and
   writing the labelled PLY (as ``gridify predict --out x.ply``). The Predictor loads ``--ckpt``, or
   an untrained scene segmenter exported to a temporary file (the timing does not depend on the
   weights); it is warmed up on a small generated cloud first, so the 65k and the 1M run compare
   time per point without the one-off start-up.

Parts 2 and 3 time one run each (a whole scan or scene, after a warm-up on a small cloud;
:func:`gridify.bench.harness.time_once`): their figures carry no interval.

Clouds: the N-sweep takes the ``N`` points nearest in xy to the sensor of the SemanticKITTI scan
``<data-root>/semantickitti_mini/dataset/sequences/00/velodyne/000000.bin`` (~124k points; for a
larger ``N``, copies of the scan shifted by 100 m in x are added first), features
``[intensity, height]`` (built as the recipes train with them,
:func:`gridify.datasets.scene_base.build_scene_features`: ``height`` is z above the cloud's 1st percentile of z).
Without the data the scan is generated
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
log-log), written by :func:`gridify.bench.scenes_report.write_outputs`.

Usage (the arguments: ``gridify._commands.bench_scenes_parser``; the run:
:func:`gridify.bench.scenes_report.main`)::

    gridify bench --scenes                      # full run, 2 threads
    gridify bench --scenes --threads 1 --models scene_segmenter pointnet2_segmenter
    gridify bench --scenes --quick              # seconds: N = 2048, 4096; a ~20k tiled scene
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ..runtime import cpu_model
from . import harness
from .harness import StepTimeout, peak_rss_mib

#: the repository root (the children run there)
ROOT = Path(__file__).resolve().parents[2]

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
#: the scene layouts of the ScanNet data under ``SCANNET_DIR`` (mmdetection3d's test data)
SCANNET_LAYOUTS = ("mmdet3d_scannet_instance", "mmdet3d_scannet")
#: the features of the sweep's clouds and of the KITTI scan (as the exported model of part 3 names them)
SCAN_FEATURES = ("strength", "height")
THREEDMATCH_DIR = Path("scans/threedmatch_fragments_tp3d/notebooks/data/3DMatch")
SWEEP_SHIFT, TILE_SHIFT = 100.0, 120.0
PROCEDURAL_POINTS, QUICK_BASE_POINTS = 124_000, 8192
QUICK_SCAN_POINTS, QUICK_TILE_POINTS, QUICK_SMALL_POINTS = 4096, 2560, 4096
E2E_SMALL_POINTS = 65536
VOXEL_SIZE, MAX_POINTS = 0.1, 16384
CHILD_SETUP_SECONDS = 600.0
MARKER = "@@bench_scenes@@ "
MIB = 2**20


# ---------------------------------------------------------------------------- clouds
def _crop(points: np.ndarray, n: int) -> np.ndarray:
    """Indices of the ``n`` points nearest in xy to the point nearest to the sensor (the origin)."""
    from ..transforms import crop_xy

    centre = int(np.argmin((points[:, :2].astype(np.float64) ** 2).sum(1)))
    return crop_xy(points, centre, n)


def read_kitti(path: Path) -> Tuple[np.ndarray, np.ndarray]:
    from ..io import read_scan

    cloud = read_scan(path)  # with every field of the scan: its intensity
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
        from ..datasets import ProceduralScenes

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
    ``n`` exceeds it; features ``[intensity, height]`` (:data:`SCAN_FEATURES`, built by
    :func:`~gridify.datasets.scene_base.build_scene_features`). Returns ``(pos [n, 3], x [n, 2])`` float32."""
    from ..datasets.scene_base import build_scene_features

    m = len(points)
    if n > m:
        copies = -(-n // m)
        points = np.concatenate([points + np.array([shift * i, 0.0, 0.0], np.float32) for i in range(copies)])
        intensity = np.tile(intensity, copies)
    idx = _crop(points, n)
    p = np.ascontiguousarray(points[idx], np.float32)
    x = build_scene_features(SCAN_FEATURES, p, strength=intensity[idx], where="the sweep cloud")
    return p, x


# ---------------------------------------------------------------------------- child cells
def _build(name: str, in_channels: int) -> Any:
    import torch
    from ..models import build_model

    torch.manual_seed(0)
    return build_model(name, in_channels=in_channels, num_classes=NUM_CLASSES, **MODEL_KWARGS.get(name, {}))


def cell_sweep(spec: Dict[str, Any]) -> Dict[str, Any]:
    """A training step or an inference pass of one model on one cloud of ``spec["n"]`` points, timed by
    :class:`gridify.bench.harness.MedianTimer`: the first call untimed (the warm-up, limited to
    ``max_step_seconds``; its time is ``first_s``), then at least ``repeats`` timed calls, more until the median's
    95 % interval is within ``± rel_ci`` or ``time_budget`` seconds of timed calls are spent."""
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

    baseline = peak_rss_mib()
    timer = harness.MedianTimer(
        rel_ci=float(spec["rel_ci"]),
        min_repeats=int(spec["repeats"]),
        max_seconds=float(spec["time_budget"]),
        warmup=1,
        first_limit_s=float(spec["max_step_seconds"]),
    )
    timing = timer.run(step)
    med = timing["seconds"]
    return {
        "status": "measured",
        **{k: v for k, v in timing.items() if k not in ("warmup_s", "target")},
        "first_s": timing["warmup_s"][0],
        "us_per_point": 1e6 * med / n,
        "baseline_mib": baseline,
        "points": n,
        "source": source,
        "parameters": sum(q.numel() for q in model.parameters()),
        "device": str(device),
        "device_peak_mib": torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None,
    }


def _load_scan(spec: Dict[str, Any]) -> Tuple[np.ndarray, np.ndarray, str]:
    """``(pos [N, 3], x [N, F], description)`` of a real scan (its features built by
    :func:`~gridify.datasets.scene_base.build_scene_features`, as the recipes train with them)."""
    from ..datasets.scene_base import build_scene_features
    from ..datasets.scene_layouts import read_scene
    from ..io import centre_large_offset, read_scan

    path, kind = Path(spec["path"]), spec["scan"]
    if kind == "semantickitti":
        pts, inten = read_kitti(path)
        x = build_scene_features(SCAN_FEATURES, pts, strength=inten, where=str(path))
        what = "features intensity, height"
    elif kind == "scannet":
        ref = next(r for r in scannet_scenes(Path(spec["data_root"]) / SCANNET_DIR) if r.path == path)
        scene = read_scene(ref)  # its layout's reader: colours on the 0-255 scale
        pts = np.ascontiguousarray(scene["coord"], np.float32)
        x = build_scene_features(("color",), pts, color=scene["color"] / 255.0, where=str(path))
        what = "features r, g, b / 255"
    else:
        pts = centre_large_offset(read_scan(path).points)[0].astype(np.float32)  # UTM: centred in float64 first
        x = build_scene_features(("height",), pts, where=str(path))
        what = "feature height"
    if spec["quick"] and len(pts) > QUICK_SCAN_POINTS:
        from ..transforms import crop_xy

        centre = int(np.argmin(((pts[:, :2] - pts[:, :2].mean(0)) ** 2).sum(1)))
        idx = crop_xy(pts, centre, QUICK_SCAN_POINTS)
        pts, x = pts[idx], x[idx]
        what += f", --quick crop of {QUICK_SCAN_POINTS} points"
    return np.ascontiguousarray(pts, np.float32), np.ascontiguousarray(x, np.float32), what


def cell_scan(spec: Dict[str, Any]) -> Dict[str, Any]:
    import torch
    from ..scene_inference import predict_scene

    pts, x, what = _load_scan(spec)
    pos, feats = torch.from_numpy(pts), torch.from_numpy(x)
    model = _build("scene_segmenter", x.shape[1])
    model.eval()
    with torch.no_grad():  # warm-up on a small crop (lazy initialisation, allocator)
        m = min(len(pts), 2048)
        model(pos[:m], feats[:m], torch.zeros(m, dtype=torch.long))
    baseline = peak_rss_mib()
    crops: List[int] = []
    probs, dt = harness.time_once(
        lambda: predict_scene(
            model,
            pos,
            feats,
            voxel_size=VOXEL_SIZE,
            max_points=MAX_POINTS,
            batch_size=1,
            progress=lambda done, total: crops.append(total),
        )
    )
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
    """Read a scene file, ``Predictor.predict`` it and write the labelled PLY (after a warm-up on a small cloud)."""
    from ..api import load
    from ..api.prediction import write_prediction
    from ..io import read_scan

    predictor = load(spec["ckpt"])
    rng = np.random.default_rng(0)  # warm-up (lazy initialisation, allocator) on a small generated cloud
    _, warmup = harness.time_once(
        lambda: predictor.predict(
            rng.uniform(-20, 20, (512, 3)).astype(np.float32),
            features=rng.random((512, predictor.in_channels)).astype(np.float32),
        )
    )
    baseline = peak_rss_mib()
    cloud, read_s = harness.time_once(lambda: read_scan(spec["path"]))
    pred, predict_s = harness.time_once(lambda: predictor.predict(cloud, batch_size=int(spec["batch_size"])))
    out, write_s = harness.time_once(lambda: write_prediction(Path(spec["out"]), cloud, pred))
    n, seconds = len(cloud.points), read_s + predict_s + write_s
    size = out.stat().st_size
    out.unlink()
    return {
        "status": "measured",
        "points": n,
        "read_s": read_s,
        "predict_s": predict_s,
        "write_s": write_s,
        "seconds": seconds,
        "us_per_point": 1e6 * seconds / n,
        "predict_us_per_point": 1e6 * predict_s / n,
        "baseline_mib": baseline,
        "ply_bytes": size,
        "warmup_s": warmup,
    }


CELLS = {"sweep": cell_sweep, "scan": cell_scan, "e2e": cell_e2e}


def child_main(text: str) -> int:
    """Run one cell (``--cell JSON``) and print its result as one JSON line (always, even on failure)."""
    import torch

    spec = json.loads(text)
    emit = harness.emit_once(MARKER)  # one result only: the watchdog's or the cell's
    torch.set_num_threads(int(spec["threads"]))
    harness.RssWatchdog(float(spec["memory_limit_gb"]) * 2**30, emit)
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
    result.update(peak_mib=peak_rss_mib(), ru_maxrss_mib=harness.maxrss_mib(), threads=torch.get_num_threads())
    emit(result)
    return 0


def run_child(spec: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    """Run a cell in a fresh interpreter; its JSON result, or a "cannot run" result naming why there is none."""
    run = harness.run_child(
        "gridify.bench.scenes",
        ["--cell", json.dumps(spec)],
        marker=MARKER,
        timeout=timeout,
        threads=int(spec["threads"]),
        cwd=str(ROOT),
    )
    if run.timed_out:
        return {"status": "cannot run", "reason": f"timed out after {timeout:.0f} s", "kind": "time"}
    if run.result is not None:
        return {**run.result, "child_wall_s": run.wall}
    tail = (run.stderr.strip().splitlines() or ["no output"])[-1][:300]
    code = run.returncode
    if code is not None and code < 0:
        why = f"child killed by signal {-code}" + (" (out of memory?)" if code == -9 else "")
        return {"status": "cannot run", "reason": f"{why}: {tail}", "kind": "memory"}
    return {"status": "cannot run", "reason": f"child exited with code {code}: {tail}", "kind": "error"}


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
    timeout = CHILD_SETUP_SECONDS + 1.5 * (args.max_step_seconds * (args.repeats + 1) + args.time_budget)
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
                            rel_ci=args.rel_ci,
                            time_budget=args.time_budget,
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
                        f"{res['seconds']:.3f} s{harness.fmt_spread(res.get('rel_ci'), res.get('reached'))} "
                        f"({res['repeats']} repeats), peak {res['peak_mib']:.0f} MiB"
                        if res["status"] == "measured"
                        else f"cannot run: {res['reason']}"
                    )
                )
            rows.append(row)
    return rows


def scannet_scenes(root: Path) -> List[Any]:
    """The scenes (``SceneRef``) of every split under ``root`` in the layouts of
    :data:`SCANNET_LAYOUTS` (found by the layouts: :func:`~gridify.datasets.scene_layouts.find_scenes`)."""
    from ..datasets.scene_layouts import find_scenes

    refs: List[Any] = []
    for layout in SCANNET_LAYOUTS:
        try:
            refs += find_scenes(root, layout, "all")
        except (ValueError, OSError):  # no such folder, or not this layout
            continue
    return refs


def find_scans(data_root: Path) -> Dict[str, Tuple[Optional[Path], str]]:
    """``scan -> (path, note)``; path None (with the reason) where the data is missing."""
    from ..datasets.scene_layouts import read_scene

    out: Dict[str, Tuple[Optional[Path], str]] = {}
    kitti = data_root / KITTI_SCAN
    out["semantickitti"] = (kitti, "") if kitti.is_file() else (None, f"no {kitti}")
    sdir = data_root / SCANNET_DIR
    cands: List[Tuple[int, Path]] = []
    for ref in scannet_scenes(sdir):
        try:
            cands.append((len(read_scene(ref)["coord"]), ref.path))
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
    from ..checkpoint import export_model
    from ..datasets.scene_layouts import SEMANTICKITTI_CLASSES
    from ..models import GridifiedSceneSegmenter

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


# ---------------------------------------------------------------------------- run
def finish_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """The parsed ``gridify bench --scenes`` arguments (``gridify._commands.bench_scenes_parser``) made ready to
    run: ``--quick``'s and the other defaults applied (``--data-root``: ``$GRIDIFY_SHARED_DATA``, else
    ``../shared/data`` beside the checkout), paths resolved (the children run in the repository root), the N sorted;
    a device other than cpu / cuda refused (``parser.error``)."""
    if args.num_points is None:
        args.num_points = list(QUICK_NUM_POINTS if args.quick else DEFAULT_NUM_POINTS)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.quick:
        args.time_budget = min(args.time_budget, 5.0)
    args.num_points = sorted(set(args.num_points))
    if args.device.split(":")[0] not in ("cpu", "cuda"):
        parser.error(f"--device {args.device}: the scene benchmark runs on cpu or cuda")
    default_root = os.environ.get("GRIDIFY_SHARED_DATA") or ROOT.parent / "shared" / "data"
    args.data_root = Path(args.data_root or default_root).expanduser().resolve()
    args.out = Path(args.out)
    if args.ckpt is not None:
        args.ckpt = Path(args.ckpt).expanduser().resolve()


def check_run(args: argparse.Namespace, prog: str) -> None:
    """What the parser cannot check: ``--ckpt`` exists, ``--models`` are registered, ``--source kitti`` has
    its scan; one-line ``SystemExit`` of ``prog`` naming the flag otherwise."""
    if args.ckpt is not None and not args.ckpt.is_file():
        raise SystemExit(f"{prog}: error: --ckpt {args.ckpt}: no such file")
    from ..registry import MODELS

    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        raise SystemExit(f"{prog}: error: --models {unknown} not registered; registered: {MODELS.names()}")
    if args.source == "kitti" and not (args.data_root / KITTI_SCAN).is_file():
        raise SystemExit(f"{prog}: error: --source kitti: {args.data_root / KITTI_SCAN} does not exist")


def environment(args: argparse.Namespace) -> Dict[str, Any]:
    """The machine (CPU model, cores, torch, threads, device, memory) and the memory limit of the cells;
    sets ``args.limit_gb`` (``--memory-limit-gb``, at most 90 % of the machine's memory)."""
    import torch

    total = harness.mem_total_gib()
    args.limit_gb = min(args.memory_limit_gb, 0.9 * total) if total else args.memory_limit_gb
    return {
        "cpu": cpu_model() or "unknown CPU",
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


def run(args: argparse.Namespace) -> Dict[str, Any]:
    """The three parts of ``args.parts`` (``torch.set_num_threads(args.threads)`` first); the results
    (environment, arguments, model keywords, one list per part, wall time)."""
    import torch

    torch.set_num_threads(args.threads)
    env = environment(args)
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
    t0 = time.monotonic()  # the run's wall time: no figure
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
    results["wall_s"] = time.monotonic() - t0
    return results


if __name__ == "__main__":  # a measuring child: python -m gridify.bench.scenes --cell JSON
    if len(sys.argv) != 3 or sys.argv[1] != "--cell":
        raise SystemExit("usage: python -m gridify.bench.scenes --cell JSON (run by gridify bench --scenes)")
    sys.exit(child_main(sys.argv[2]))
