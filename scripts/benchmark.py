#!/usr/bin/env python
"""Speed and memory benchmark: gridified classifier vs PointCKConvNet and PointNet++ (see
:mod:`gridify.benchmarking`).

    python scripts/benchmark.py --quick
    python scripts/benchmark.py --threads 2 --out outputs/benchmark
"""

import sys

from gridify.cli import script_main  # light: --help and argument errors answer before torch is imported

if __name__ == "__main__":
    sys.exit(script_main("bench", "benchmark.py"))
