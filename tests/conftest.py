import os
from pathlib import Path

import pytest
import torch

from _network_guard import no_external_network  # noqa: F401  (autouse: tests may open loopback sockets only)

# The suite's tensors are small: one intra-op thread is as fast and immune to the oversubscription
# slow-down seen when another process competes for the 2 cores of a CI machine.
torch.set_num_threads(1)


def shared_data_root() -> Path | None:
    """``../shared/data`` beside the project, or ``$GRIDIFY_SHARED_DATA``; None when absent."""
    env = os.environ.get("GRIDIFY_SHARED_DATA")
    root = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return root if root.is_dir() else None


@pytest.fixture
def shared_data():
    root = shared_data_root()
    if root is None:
        pytest.skip("real data not available (../shared/data or $GRIDIFY_SHARED_DATA)")
    return root


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def ragged_batch(sizes, seed=0, scale=1.0):
    """Points of len(sizes) clouds in [-scale, scale]^3, with a sorted batch vector."""
    g = torch.Generator().manual_seed(seed)
    pos = (torch.rand(sum(sizes), 3, generator=g) * 2 - 1) * scale
    batch = torch.cat([torch.full((n,), i, dtype=torch.long) for i, n in enumerate(sizes)])
    return pos, batch
