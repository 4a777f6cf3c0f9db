import pytest
import torch

from tests._network_guard import no_external_network  # noqa: F401  (autouse: tests may open loopback sockets only)
from tests.helpers import shared_data_root

# The suite's tensors are small: one intra-op thread is as fast and immune to the oversubscription
# slow-down seen when another process competes for the 2 cores of a CI machine.
torch.set_num_threads(1)


@pytest.fixture
def shared_data():
    root = shared_data_root()
    if root is None:
        pytest.skip("real data not available (../shared/data or $GRIDIFY_SHARED_DATA)")
    return root


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
