#!/usr/bin/env python
"""Evaluate a trained network on the test split (see :mod:`gridify.evaluation`).

    python scripts/evaluate.py --ckpt outputs/procedural/checkpoints/model.pt

Same as ``gridify evaluate``.
"""

from gridify.evaluation import main

if __name__ == "__main__":
    main()
