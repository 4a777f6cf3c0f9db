"""The benchmarks' figures (PNG through matplotlib's Agg backend; matplotlib is imported when one is drawn).

* :func:`plot_scaling`: ``gridify bench``'s ``scaling_n.png`` / ``scaling_k.png``, time and peak memory
  per cloud against N and k (like thesis figures 4.8 and 4.9);
* :func:`plot_scenes`: ``bench_scenes.png``, the scene benchmark's training step time and peak RSS against N.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

__all__ = ["plot_scaling", "plot_scenes"]


def plot_scaling(
    rows: List[Dict[str, Any]], out: Path, *, memory_lower_bound: bool = False, dpi: int = 120
) -> List[str]:
    """``gridify bench``: log-log plots of time and peak memory per cloud vs N and vs k (PNG, Agg backend);
    the paths written.

    ``memory_lower_bound``: the memory figures come from a ``--malloc tuned`` run (memory freed
    during the warm-up is reused), and the memory axes say so.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for sweep, xkey, xlabel in (("n", "num_points", "number of points N"), ("k", "k", "neighbours k")):
        sel = [r for r in rows if r.get("sweep") == sweep and r.get("status") == "ok"]
        if not sel:
            continue
        fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
        series = [
            ("ms_per_batch", "batch", "inference time per cloud [ms]"),
            ("train_ms_per_batch", "train_batch", "training step per cloud [ms]"),
            ("peak_mb", "batch", "peak inference memory per cloud [MB]"),
            ("train_peak_mb", "train_batch", "peak training memory per cloud [MB]"),
        ]
        if memory_lower_bound:
            series[2:] = [(y, b, label.replace("memory", "memory (lower bound)")) for y, b, label in series[2:]]
        for ax, (ykey, bkey, ylabel) in zip(axes, series):
            for model in sorted({r["model"] for r in sel}):
                pts = sorted(
                    (r[xkey], r[ykey] / r[bkey])
                    for r in sel
                    if r["model"] == model and r.get(ykey) and r.get(bkey) and r.get(xkey)
                )
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=model)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend()
        fig.tight_layout()
        path = out / f"scaling_{sweep}.png"
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        written.append(str(path))
    return written


def plot_scenes(results: Dict[str, Any], path: Path) -> Optional[Path]:
    """``bench_scenes``: train time and peak memory vs N (log-log), one line per model; None without matplotlib."""
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
