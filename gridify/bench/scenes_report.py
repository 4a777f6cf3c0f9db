"""The report of the scene benchmark (:mod:`gridify.bench.scenes`): its Markdown tables, goals and CSV rows, and
the entry of its mode, ``gridify bench --scenes`` (:func:`main`: parse, run the parts, report, write the files).

* part 1 (N sweep): time (the median ± its 95 % interval) and peak RSS per model and N, the time ratios against
  ``scene_segmenter`` with their intervals (:func:`time_ratio`) and
  the least-squares fit ``peak - baseline = a + b N`` (:func:`memory_fit`);
* part 2 (real scans) and part 3 (end to end): one line per scan / scene;
* the goals: training step >= 10x faster than PointNet2 at 65k, peak memory linear in N (the ratio
  of the largest N to 65k within 1.25x the ideal), end-to-end time per point at 1M within 2x that at 65k.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from .._commands import bench_scenes_parser
from .._paths import one_line_errors
from . import harness
from .scenes import MAX_POINTS, VOXEL_SIZE, check_run, finish_args, run

__all__ = ["main", "report", "memory_fit", "csv_rows", "write_outputs", "time_ratio", "CSV_FIELDS"]

#: the columns of ``results.csv``
CSV_FIELDS = [
    "part",
    "name",
    "n",
    "mode",
    "status",
    "reason",
    "seconds",
    "ci_low_s",
    "ci_high_s",
    "rel_ci",
    "reached",
    "repeats",
    "min_s",
    "max_s",
    "us_per_point",
    "peak_mib",
    "baseline_mib",
]


def _fmt_s(v: Optional[float]) -> str:
    return "-" if v is None else (f"{v:.3f}" if v < 100 else f"{v:.0f}")


def _seconds(res: Dict[str, Any]) -> str:
    """A sweep cell's median seconds with its spread (``1.234 ± 2.0 %``, ``*``: the target not reached)."""
    return _fmt_s(res["seconds"]) + harness.fmt_spread(res.get("rel_ci"), res.get("reached"))


def _interval(res: Dict[str, Any]) -> tuple:
    return res["seconds"], res.get("ci_low_s", res["seconds"]), res.get("ci_high_s", res["seconds"])


def time_ratio(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """``a``'s median time over ``b``'s (two measured sweep cells) with its 95 % interval
    (:func:`gridify.bench.harness.ratio_interval`): ``ratio``, ``low``, ``high``, ``rel_ci`` (None when a cell
    has a single repeat), ``reached`` (both cells reached their target)."""
    r = harness.ratio_interval(_interval(a), _interval(b))
    if r is None:
        return {"ratio": a["seconds"] / b["seconds"], "low": None, "high": None, "rel_ci": None, "reached": False}
    single = a.get("rel_ci") is None or b.get("rel_ci") is None
    return {
        "ratio": r[0],
        "low": r[1],
        "high": r[2],
        "rel_ci": None if single else (r[2] - r[1]) / 2 / r[0],
        "reached": bool(a.get("reached")) and bool(b.get("reached")),
    }


def _fmt_ratio(t: Dict[str, Any]) -> str:
    return f"{t['ratio']:.1f}x" + harness.fmt_spread(t["rel_ci"], t["reached"])


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


def _sweep_table(sweep: List[Dict[str, Any]], repeats: int) -> List[str]:
    lines = [
        "",
        "## 1. N sweep: one cloud of N points, batch of 1 (the median of at least "
        f"{repeats} steps after a warm-up, ± the half-width of its 95 % interval, * the target precision not "
        "reached; peak RSS MiB of the child, (+ over its baseline))",
        "",
        "| model | N | train s/step | infer s | train us/point | infer us/point | train peak MiB | infer peak MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sweep:
        tr, inf = r["train"], r["infer"]
        if tr["status"] != "measured" and inf["status"] != "measured" and tr.get("reason") == inf.get("reason"):
            lines.append(f"| {r['model']} | {r['n']} | {_cell_text(tr, 'seconds', _fmt_s)} | | | | | |")
            continue
        lines.append(
            f"| {r['model']} | {r['n']} | {_cell_text(tr, 'seconds', lambda v: _seconds(tr))} | "
            f"{_cell_text(inf, 'seconds', lambda v: _seconds(inf))} | "
            f"{_cell_text(tr, 'us_per_point', '{:.1f}'.format)} | "
            f"{_cell_text(inf, 'us_per_point', '{:.1f}'.format)} | "
            f"{_mem(tr) if tr['status'] == 'measured' else '-'} | "
            f"{_mem(inf) if inf['status'] == 'measured' else '-'} |"
        )
    return lines


def _ratio_table(sweep: List[Dict[str, Any]], models: Sequence[str], ns: Sequence[int]) -> List[str]:
    others = [m for m in models if m != "scene_segmenter"]
    if "scene_segmenter" not in models or not others:
        return []
    lines = [
        "",
        "Time ratios (other model / scene_segmenter; > 1: scene_segmenter is faster; ± from the two cells' intervals):",
        "",
        "| N | " + " | ".join(f"{m} train | {m} infer" for m in others) + " |",
        "|---:|" + "---:|---:|" * len(others),
    ]
    for n in ns:
        cells = []
        for m in others:
            for mode in ("train", "infer"):
                a, b = _get(sweep, m, n, mode), _get(sweep, "scene_segmenter", n, mode)
                cells.append(_fmt_ratio(time_ratio(a, b)) if a and b else "-")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def _memory_lines(
    sweep: List[Dict[str, Any]], models: Sequence[str], ns: Sequence[int], goal_n: int, goals: Dict[str, Any]
) -> List[str]:
    """The linear fits of peak memory against N; ``goals["memory_linear"]``."""
    fits = {m: memory_fit(sweep, m) for m in models}
    goals["memory_linear"] = {}
    lines = ["", "Peak memory vs N (train, peak - baseline = a + b N, least squares):", ""]
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
    return lines


def _sweep_lines(results: Dict[str, Any], args: Any, goals: Dict[str, Any]) -> List[str]:
    """Part 1's tables; ``goals["train_10x_pointnet2"]`` and ``goals["memory_linear"]``."""
    sweep, ns = results["sweep"], sorted(args.num_points)
    goal_n = 65536 if 65536 in ns else ns[-1]
    lines = _sweep_table(sweep, args.repeats) + _ratio_table(sweep, args.models, ns)
    a, b = _get(sweep, "pointnet2_segmenter", goal_n, "train"), _get(sweep, "scene_segmenter", goal_n, "train")
    t = time_ratio(a, b) if a and b else None
    ratio = None if t is None else t["ratio"]
    goals["train_10x_pointnet2"] = {
        "n": goal_n,
        "ratio": ratio,
        "ratio_low": None if t is None else t["low"],
        "ratio_high": None if t is None else t["high"],
        "rel_ci": None if t is None else t["rel_ci"],
        "pass": None if ratio is None else ratio >= 10,
    }
    return lines + _memory_lines(sweep, args.models, ns, goal_n, goals)


def _scan_lines(scans: List[Dict[str, Any]]) -> List[str]:
    lines = [
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
    return lines


def _e2e_lines(e2e: List[Dict[str, Any]], batch_size: int, goals: Dict[str, Any]) -> List[str]:
    """Part 3's table; ``goals["time_per_point_1m_within_2x"]``."""
    lines = [
        "",
        f"## 3. End to end: read_points + Predictor.predict (batch_size={batch_size}) + write labelled PLY",
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
    return lines


def _verdict(ok: Optional[bool]) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def _goal_lines(goals: Dict[str, Any]) -> List[str]:
    parts = []
    if "train_10x_pointnet2" in goals:
        g = goals["train_10x_pointnet2"]
        shown = "-" if g["ratio"] is None else f"{g['ratio']:.1f}x" + harness.fmt_spread(g.get("rel_ci"))
        parts.append(f"train >= 10x PointNet2 at N={g['n']}: {shown} {_verdict(g['pass'])}")
    if "memory_linear" in goals and "scene_segmenter" in goals["memory_linear"]:
        g = goals["memory_linear"]["scene_segmenter"]
        parts.append(
            f"scene_segmenter peak memory linear in N ({g['n_hi']}/{g['n_lo']}: "
            f"{'-' if g['ratio'] is None else format(g['ratio'], '.2f')} vs {g['ideal']:.1f}) "
            f"{_verdict(g['pass'])}"
        )
    if "time_per_point_1m_within_2x" in goals:
        g = goals["time_per_point_1m_within_2x"]
        parts.append(
            f"time/point at {g['n_big'] or '1M'} within 2x of {g['n_small'] or '65k'}: "
            f"{'-' if g['ratio'] is None else format(g['ratio'], '.2f') + 'x'} {_verdict(g['pass'])}"
        )
    return ["", "Goals: " + " | ".join(parts)] if parts else []


def report(results: Dict[str, Any], args: Any) -> List[str]:
    """The printed report (Markdown tables of the three parts, then the goals); sets ``results["goals"]``.

    ``args``: the command's arguments (``num_points``, ``models``, ``repeats``, ``e2e_batch_size``).
    """
    lines: List[str] = []
    goals: Dict[str, Any] = {}
    if results.get("sweep"):
        lines += _sweep_lines(results, args, goals)
    if results.get("scans"):
        lines += _scan_lines(results["scans"])
    if results.get("e2e"):
        lines += _e2e_lines(results["e2e"], args.e2e_batch_size, goals)
    results["goals"] = goals
    return lines + _goal_lines(goals)


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
                    **{k: c.get(k) for k in ("seconds", "ci_low_s", "ci_high_s", "rel_ci", "reached", "repeats")},
                    "min_s": c.get("min_s"),
                    "max_s": c.get("max_s"),
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


def write_outputs(results: Dict[str, Any], out: Path) -> Optional[Path]:
    """``results.json``, ``results.csv`` (:data:`CSV_FIELDS`) and, with a sweep and matplotlib,
    ``bench_scenes.png`` in ``out`` (created); the PNG's path or None."""
    from .plots import plot_scenes

    out.mkdir(parents=True, exist_ok=True)
    harness.write_json(out / "results.json", results)
    harness.write_csv(out / "results.csv", csv_rows(results), CSV_FIELDS)
    return plot_scenes(results, out / "bench_scenes.png") if results.get("sweep") else None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``gridify bench --scenes [...]``: run the parts (every cell in a fresh child process,
    :func:`gridify.bench.scenes.run`), print the report, write ``results.json``, ``results.csv`` and
    ``bench_scenes.png`` to ``--out``; 0."""
    parser = bench_scenes_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    finish_args(args, parser)
    check_run(args, parser.prog)
    results = run(args)
    print("\n".join(report(results, args)), flush=True)
    with one_line_errors(parser.prog):  # the --out folder, a full disk: one line naming the path
        png = write_outputs(results, args.out)
    print(
        f"\nwrote {args.out / 'results.json'}, {args.out / 'results.csv'}"
        + (f", {png}" if png else " (no PNG: matplotlib missing or no sweep)")
        + f" in {results['wall_s']:.0f} s",
        flush=True,
    )
    return 0
