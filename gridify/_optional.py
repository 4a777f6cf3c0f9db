"""Optional accelerated dependencies, probed once at import time.

``torch_scatter`` and ``torch_cluster`` have no wheels on PyPI and compile from source, so
gridify never requires them: every op has a native PyTorch path. Set the environment variable
``GRIDIFY_DISABLE_ACCEL=1`` to ignore them even when installed (useful to compare backends).
"""

from __future__ import annotations

import os
import warnings

_DISABLED = os.environ.get("GRIDIFY_DISABLE_ACCEL", "0") not in ("", "0", "false", "False")


def _probe(module: str):
    if _DISABLED:
        return None
    try:
        return __import__(module)
    except ImportError:
        return None
    except Exception as exc:  # a broken binary build (ABI mismatch, missing symbol)
        warnings.warn(f"{module} is installed but failed to import ({exc}); using native PyTorch paths")
        return None


torch_scatter = _probe("torch_scatter")
torch_cluster = _probe("torch_cluster")
WITH_TORCH_SCATTER: bool = torch_scatter is not None
WITH_TORCH_CLUSTER: bool = torch_cluster is not None

__all__ = ["WITH_TORCH_SCATTER", "WITH_TORCH_CLUSTER", "torch_scatter", "torch_cluster"]
