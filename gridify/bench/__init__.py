"""The speed / memory benchmarks of gridify, on one harness, and ``gridify bench``, their one command.

* :mod:`gridify.bench.harness`: what every benchmark shares: timing (a warm-up, then repeats until the
  median's 95 % interval is within a target, :class:`~gridify.bench.harness.MedianTimer`; one call too long to
  repeat, :func:`~gridify.bench.harness.time_once`), spreads and intervals of ratios, the batch rule, the device
  clock, peak memory (RSS high-water, CUDA peak), a measurement in a fresh subprocess (one tagged JSON line back),
  the machine's facts, the printed table and the JSON / CSV files;
* :mod:`gridify.bench.synthetic`: ``gridify bench``, the sweep over N and k on synthetic clouds;
* :mod:`gridify.bench.recipe`: ``gridify bench --recipe NAME``, real training steps of a recipe;
* :mod:`gridify.bench.scenes` and :mod:`gridify.bench.scenes_report`: ``gridify bench --scenes``, scene
  segmentation at scene scale (the measurements; the report, the files and the mode's entry);
* :mod:`gridify.bench.plots`: their figures (matplotlib, imported when a figure is drawn).

:func:`main` runs the mode a command line names (``gridify._commands.bench_command``); the modes' arguments
are parsed by ``gridify._commands`` (no PyTorch while parsing). Importing the package imports none of the
modules (no PyTorch): ``python -m gridify.bench.<module>`` runs a measuring child process.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``gridify bench [...]``: the synthetic sweep (:mod:`gridify.bench.synthetic`), or the mode ``--recipe NAME``
    (:mod:`gridify.bench.recipe`) or ``--scenes`` (:mod:`gridify.bench.scenes_report`) names: that module's
    ``main(argv)``, imported now; the exit status."""
    from .._commands import bench_command

    argv = list(sys.argv[1:] if argv is None else argv)
    command = bench_command(argv)
    if command == "bench --recipe":
        from .recipe import main as run
    elif command == "bench --scenes":
        from .scenes_report import main as run
    else:
        from .synthetic import main as run
    return run(argv)
