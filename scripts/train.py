#!/usr/bin/env python
"""Train and test a gridified network from a YAML config (see :mod:`gridify.training`).

    python scripts/train.py --config configs/procedural.yaml [section.key=value ...]

Same as ``gridify train``; kept so the commands in the README and configs work from a checkout.
"""
from gridify.training import main

if __name__ == "__main__":
    main()
