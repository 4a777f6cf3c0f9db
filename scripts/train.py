#!/usr/bin/env python
"""Train and test a gridified network from a YAML config (see :mod:`gridify.training`).

    python scripts/train.py --config procedural [section.key=value ...]     # a shipped config, by name
    python scripts/train.py --config configs/procedural.yaml                 # or a path
    python scripts/train.py --config folder_classification --data-root my_data

Same as ``gridify train``; kept so the commands in the README and configs work from a checkout.
"""

import sys

from gridify.cli import script_main  # light: --help and argument errors answer before torch is imported

if __name__ == "__main__":
    sys.exit(script_main("train", "train.py"))
