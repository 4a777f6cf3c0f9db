#!/usr/bin/env python
"""Evaluate a trained network on the test split (see :mod:`gridify.evaluation`).

    python scripts/evaluate.py --ckpt outputs/procedural/checkpoints/model.pt

Same as ``gridify evaluate``.
"""

import sys

from gridify.cli import script_main  # light: --help and argument errors answer before torch is imported

if __name__ == "__main__":
    sys.exit(script_main("evaluate", "evaluate.py"))
