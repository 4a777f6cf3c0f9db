"""The speed / memory benchmarks of gridify, on one harness.

* :mod:`gridify.bench.harness`: what every benchmark shares: timing (a warm-up, then repeats until the
  median's 95 % interval is within a target, :class:`~gridify.bench.harness.MedianTimer`), spreads and
  intervals of ratios, the batch rule, the device clock, peak memory (RSS high-water, CUDA peak), a measurement in a
  fresh subprocess (one tagged JSON line back), the machine's facts, the printed table and the
  JSON / CSV files;
* :mod:`gridify.bench.synthetic`: ``gridify bench``, the sweep over N and k on synthetic clouds;
* :mod:`gridify.bench.recipe`: ``gridify bench --recipe NAME``, real training steps of a recipe;
* :mod:`gridify.bench.scenes` and :mod:`gridify.bench.scenes_report`: scene segmentation at scene
  scale (``python scripts/bench_scenes.py``);
* :mod:`gridify.bench.plots`: their figures (matplotlib, imported when a figure is drawn).

Importing the package imports none of them (no PyTorch): ``python -m gridify.bench.<module>`` runs a
measuring child process.
"""
