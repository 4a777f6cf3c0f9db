"""The KITTI ``.bin`` reader of gridify.io: rows, fields and bad sizes."""

import numpy as np
import pytest

from gridify.io import read_points


def _scan(path, n=700, seed=0):
    rng = np.random.default_rng(seed)
    rows = np.concatenate([rng.uniform(-20, 20, (n, 2)), rng.uniform(-2, 1, (n, 1)), rng.uniform(0, 1, (n, 1))], 1)
    rows.astype("<f4").tofile(path)
    return rows.astype(np.float32)


def test_kitti_bin_reader_rows_fields_and_bad_sizes(tmp_path):
    rows = _scan(tmp_path / "000000.bin", n=50)
    c = read_points(tmp_path / "000000.bin")
    np.testing.assert_array_equal(c.points, rows[:, :3])
    assert c.fields == {} and c.labels is None
    c = read_points(tmp_path / "000000.bin", fields=["intensity"])
    np.testing.assert_array_equal(c.fields["intensity"], rows[:, 3])
    (tmp_path / "cut.bin").write_bytes((tmp_path / "000000.bin").read_bytes()[:-3])
    with pytest.raises(ValueError, match=r"cut\.bin: 797 bytes is not a whole number of 16-byte rows"):
        read_points(tmp_path / "cut.bin")
    (tmp_path / "empty.bin").write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.bin"):
        read_points(tmp_path / "empty.bin")
    with pytest.raises(ValueError, match=r"no per-point field 'colour'"):
        read_points(tmp_path / "000000.bin", fields=["colour"])
