"""gridify.io.read_labels, the one reader of label files (the folder / ShapeNet datasets' files beside the clouds and a
scan's ground truth), and gridify.io.read_scan, the one reading of a scan with every per-point field its format
holds."""

import numpy as np
import pytest

from gridify.datasets.scene_layouts import read_scan_labels
from gridify.io import holds_fields, read_labels, read_points, read_scan


def test_read_labels_reads_every_label_file_format(tmp_path):
    (tmp_path / "a.labels").write_text("# part ids\n0 1\n2\n\n3  # last\n")
    assert read_labels(tmp_path / "a.labels").tolist() == [0, 1, 2, 3]
    (tmp_path / "b.seg").write_text("1\n4\n")
    assert read_labels(tmp_path / "b.seg").dtype == np.int64
    np.save(tmp_path / "c.npy", np.array([[1.0], [2.0], [-1.0]]))  # [N, 1] whole floats: their ids
    assert read_labels(tmp_path / "c.npy").tolist() == [1, 2, -1]
    raw = np.array([10, 40 | (7 << 16)], np.uint32)  # SemanticKITTI: the raw values, instance bits and all
    raw.tofile(tmp_path / "d.label")
    assert read_labels(tmp_path / "d.label").tolist() == [10, 40 | (7 << 16)]


@pytest.mark.parametrize(
    "name, write, message",
    [
        ("x.labels", lambda p: p.write_text("0\n1\nbanana\n"), r"x\.labels:3: not a number: b'banana'"),
        ("x.labels", lambda p: p.write_text("0\n1.5\n"), r"x\.labels: labels must be integers, row 1 holds 1\.5"),
        ("x.labels", lambda p: p.write_text("# nothing\n\n"), r"x\.labels: empty file \(no labels\)"),
        ("x.npy", lambda p: np.save(p, np.zeros((4, 3))), r"labels must hold one value per point .* shape \(4, 3\)"),
        ("x.npy", lambda p: np.save(p, np.array([True])), r"x\.npy: labels must be integers, got dtype bool"),
        ("x.npy", lambda p: np.save(p, np.zeros(0)), r"x\.npy: empty label file"),
        ("x.npy", lambda p: p.write_bytes(b"not an array"), r"x\.npy: not a readable \.npy array"),
        ("x.label", lambda p: p.write_bytes(b"\0" * 6), r"x\.label: 6 bytes is not a whole number"),
    ],
)
def test_read_labels_refuses_naming_the_file(tmp_path, name, write, message):
    write(tmp_path / name)
    with pytest.raises(ValueError, match=message):
        read_labels(tmp_path / name)
    with pytest.raises(FileNotFoundError):
        read_labels(tmp_path / "missing.labels")


def test_a_scans_ground_truth_goes_through_the_same_reader(tmp_path):
    (tmp_path / "t.txt").write_text("0\n1\n1.5\n")
    with pytest.raises(ValueError, match=r"t\.txt: labels must be integers, row 2 holds 1\.5"):
        read_scan_labels(tmp_path / "t.txt", 3, ["a", "b"])
    (tmp_path / "t.txt").write_text("0\n1\n-1\n")
    assert read_scan_labels(tmp_path / "t.txt", 3, ["a", "b"]).tolist() == [0, 1, -1]


def test_read_scan_keeps_every_field_a_format_holds(tmp_path):
    rows = np.c_[np.random.default_rng(0).random((5, 3)), np.linspace(0, 1, 5)].astype("<f4")
    rows.tofile(tmp_path / "s.bin")
    np.savetxt(tmp_path / "s.xyz", rows[:, :3])
    assert holds_fields(tmp_path / "s.bin") and not holds_fields(tmp_path / "s.xyz")
    assert np.allclose(read_scan(tmp_path / "s.bin").fields["intensity"], rows[:, 3])
    assert read_points(tmp_path / "s.bin").fields == {}  # read_points keeps fields only when asked
    assert read_scan(tmp_path / "s.xyz").fields == {} and len(read_scan(tmp_path / "s.xyz")) == 5
