"""Speed and memory benchmark: gridified classifier vs native point-cloud baselines.

The entry of ``gridify bench`` (and ``python -m gridify.benchmarking``): the benchmark itself is
:mod:`gridify.bench.synthetic` (the sweep over N and k on synthetic clouds), on the harness of
:mod:`gridify.bench.harness`; ``--recipe NAME`` is :mod:`gridify.bench.recipe`. The names below are
re-exported from there (this module's former contents).
"""

from __future__ import annotations

import sys

from .bench.synthetic import (
    CSV_COLUMNS,
    DEFAULT_KS,
    DEFAULT_MODELS,
    DEFAULT_NUM_POINTS,
    NUM_CLASSES,
    RESULT_TAG,
    add_ratios,
    build_benchmark_model,
    build_parser,
    count_forward_flops,
    cpu_model,
    format_table,
    grid_resolution,
    machine_info,
    main,
    make_batch,
    matmul_gflops,
    measure,
    model_preset,
    model_uses_k,
    plot,
    skip_reason,
    write_csv,
)

__all__ = [
    "main",
    "build_benchmark_model",
    "grid_resolution",
    "matmul_gflops",
    "measure",
    "CSV_COLUMNS",
    "DEFAULT_NUM_POINTS",
    "DEFAULT_KS",
    "DEFAULT_MODELS",
    "NUM_CLASSES",
    "RESULT_TAG",
    "add_ratios",
    "build_parser",
    "count_forward_flops",
    "cpu_model",
    "format_table",
    "machine_info",
    "make_batch",
    "model_preset",
    "model_uses_k",
    "plot",
    "skip_reason",
    "write_csv",
]

if __name__ == "__main__":
    sys.exit(main())
