"""The memory bound of the fuzz contract: valid files stay inside it, and the harness catches a reader that does not.

``fuzz_targets.memory_limit(ext, size)`` = MEMORY_MULTIPLE x size x EXPANSION[ext] + MEMORY_CONSTANT
is what one read_points may grow tracemalloc's traced memory by; the multiple was chosen from the
growth these files need (see the comment in fuzz_targets.py).
"""

import numpy as np
import pytest

from tests.fuzz import fuzz_targets as F  # noqa: E402  (scripts/fuzz.py imports it as a top-level module)


@pytest.fixture(scope="module")
def large():
    return F.large_files(20_000)


@pytest.mark.parametrize("ext", F.FORMATS)
def test_valid_files_stay_within_the_memory_bound(ext, large, tmp_path):
    for data in large[ext]:
        F.MEMORY.pop(ext, None)
        assert F.check_reader(ext, data, tmp_path) == "ok"  # raises ReaderCrash past the bound
        share, grown, size = F.MEMORY[ext]["share"]
        assert 0 < share <= 1.0 and size == len(data)
        # the multiple leaves a margin: no valid file needs more than half of it
        assert grown <= F.MEMORY_MULTIPLE * size * F.EXPANSION.get(ext, 1) / 2 + F.MEMORY_CONSTANT


def test_the_harness_catches_a_reader_that_allocates_what_a_header_declares(tmp_path, monkeypatch):
    import gridify.io as gio

    def greedy(path, **kwargs):
        block = np.ones(16 << 20, np.uint8)  # 16 MB for a 6-byte file
        return gio.PointCloud(np.zeros((1, 3)) + block[:3].reshape(1, 3))

    monkeypatch.setattr(F, "read_points", greedy)
    with pytest.raises(
        F.ReaderCrash,
        match=r"\.xyz: reading 6 bytes grew memory by \d+ bytes, more than the "
        r"bound 4194688 \(64 x 6 x 1 \+ 4194304\)",
    ):
        F.check_reader(".xyz", b"1 2 3\n", tmp_path)
    assert F.memory_limit(".pcd", 1000) == 64 * 1000 * 88 + F.MEMORY_CONSTANT
