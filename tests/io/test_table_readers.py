"""The small readers of gridify.io that the scene layouts call: a KITTI scan's rows and labels, a headerless binary
table, a strict text table (S3DIS annotations), a PLY's vertex element and a ``.npy`` array; each error names the
file (and the line, for text)."""

import numpy as np
import pytest

from gridify.io.kitti import read_kitti_labels, read_kitti_rows
from gridify.io.npy import read_npy_array
from gridify.io.ply import read_ply_vertices
from gridify.io.raw import read_raw_rows
from gridify.io.text import read_text_rows

RNG = np.random.default_rng(3)


def test_kitti_rows_and_labels(tmp_path):
    rows = RNG.uniform(-20, 20, (9, 4)).astype("<f4")
    rows.tofile(tmp_path / "000000.bin")
    got = read_kitti_rows(tmp_path / "000000.bin")
    assert got.dtype == np.float32 and got.shape == (9, 4)
    np.testing.assert_array_equal(got, rows)
    raw = np.array([0, 10, 40 | (7 << 16), 252], "<u4")
    raw.tofile(tmp_path / "000000.label")
    labels = read_kitti_labels(tmp_path / "000000.label")
    assert labels.dtype == np.uint32 and labels.tolist() == raw.tolist()
    (tmp_path / "cut.bin").write_bytes(rows.tobytes()[:-3])
    with pytest.raises(ValueError, match=r"cut\.bin: 141 bytes is not a whole number of 16-byte rows"):
        read_kitti_rows(tmp_path / "cut.bin")
    (tmp_path / "cut.label").write_bytes(raw.tobytes()[:-1])
    with pytest.raises(ValueError, match=r"cut\.label: 15 bytes is not a whole number of 1-value rows of uint32"):
        read_kitti_labels(tmp_path / "cut.label")
    with pytest.raises(FileNotFoundError, match=r"none\.bin: no such file"):
        read_kitti_rows(tmp_path / "none.bin")


def test_raw_rows(tmp_path):
    pts = RNG.uniform(0, 1, (5, 6)).astype("<f4")
    pts.tofile(tmp_path / "p.bin")
    np.testing.assert_array_equal(read_raw_rows(tmp_path / "p.bin", "<f4", 6), pts)
    np.arange(3, dtype="<i8").tofile(tmp_path / "m.bin")
    assert read_raw_rows(tmp_path / "m.bin", "<i8", 1)[:, 0].tolist() == [0, 1, 2]
    (tmp_path / "e.bin").write_bytes(b"")
    with pytest.raises(
        ValueError,
        match=r"e\.bin: 0 bytes is not a whole number of 6-value rows of float32 "
        r"\(24 bytes each\)",
    ):
        read_raw_rows(tmp_path / "e.bin", "<f4", 6)


def test_text_rows_name_the_file_and_line(tmp_path):
    f = tmp_path / "wall_1.txt"
    f.write_text("1.0 2.0 3.0 10 20 30\n\n4 5 6 7 8 9\n")
    np.testing.assert_array_equal(read_text_rows(f, 6), [[1, 2, 3, 10, 20, 30], [4, 5, 6, 7, 8, 9]])
    f.write_text("1.0 2.0 3.0 10 20 30\n4 5 6 7\x1000 8 9\n")  # the raw S3DIS release's stray control character
    with pytest.raises(ValueError, match=r"wall_1\.txt:2: not a number: b'7\\x1000'"):
        read_text_rows(f, 6, "x y z r g b")
    f.write_text("1.0 2.0 3.0 10 20 30\n4 5 6 7 8\n")
    with pytest.raises(ValueError, match=r"wall_1\.txt:2: expected 6 numbers \(x y z r g b\), got 5"):
        read_text_rows(f, 6, "x y z r g b")
    f.write_text("\n  \n")
    with pytest.raises(ValueError, match=r"wall_1\.txt: empty file \(no rows of x y z r g b\)"):
        read_text_rows(f, 6, "x y z r g b")


def test_text_rows_skip_comment_lines_keeping_line_numbers(tmp_path):
    f = tmp_path / "labels.txt"
    np.savetxt(f, np.array([0, 2, 1]), fmt="%d", header="one label per point")  # '# one label per point'
    np.testing.assert_array_equal(read_text_rows(f, 1), [[0], [2], [1]])
    f.write_text("# x y z\n1 2 3\n  # a note\n4 5\n")
    with pytest.raises(ValueError, match=r"labels\.txt:4: expected 3 numbers, got 2"):
        read_text_rows(f, 3)


_HEAD = "ply\nformat {fmt} 1.0\nelement vertex {n}\nproperty float x\nproperty float y\nproperty float z\n"


def test_ply_vertices_with_a_label_property(tmp_path):
    head = _HEAD.format(fmt="ascii", n=3) + "property int label\n"
    f = tmp_path / "labels.ply"
    f.write_text(
        head + "element face 1\nproperty list uchar int vertex_indices\nend_header\n"
        "0 0 0 1\n1 0 0 40\n0 1 0 7\n3 0 1 2\n"
    )
    v = read_ply_vertices(f)
    assert set(v) == {"x", "y", "z", "label"} and v["label"].dtype == np.int32 and v["label"].tolist() == [1, 40, 7]
    b = tmp_path / "big.ply"
    rec = np.array([(1.5, 2.5, 3.5, 9)], dtype=[("x", ">f4"), ("y", ">f4"), ("z", ">f4"), ("label", ">u2")])
    b.write_bytes(
        (_HEAD.format(fmt="binary_big_endian", n=1) + "property ushort label\nend_header\n").encode() + rec.tobytes()
    )
    v = read_ply_vertices(b)
    assert v["label"].dtype == np.dtype("=u2") and v["label"].tolist() == [9] and v["z"].tolist() == [3.5]


def test_ply_vertices_refuse_counts_that_lie(tmp_path):
    f = tmp_path / "short.ply"
    f.write_text(_HEAD.format(fmt="ascii", n=2) + "end_header\n" + "0 0 0\n" * 4)
    with pytest.raises(ValueError, match=r"short\.ply: PLY header declares 2 vertices but the data holds 4 data lines"):
        read_ply_vertices(f)
    g = tmp_path / "cut.ply"
    g.write_bytes(_HEAD.format(fmt="binary_little_endian", n=100).encode() + b"end_header\n" + b"\0" * 24)
    with pytest.raises(ValueError, match=r"cut\.ply: truncated PLY"):
        read_ply_vertices(g)
    h = tmp_path / "face_first.ply"
    h.write_text("ply\nformat ascii 1.0\nelement face 0\nproperty list uchar int vertex_indices\nend_header\n")
    with pytest.raises(ValueError, match=r"face_first\.ply: the first PLY element is 'face', not 'vertex'"):
        read_ply_vertices(h)


def test_npy_array_is_a_writable_copy_and_never_unpickled(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(6, dtype=np.int16).reshape(3, 2))
    a = read_npy_array(tmp_path / "a.npy")
    assert a.dtype == np.int16 and a.shape == (3, 2) and a.flags.writeable
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=r"o\.npy: .*pickled"):
        read_npy_array(tmp_path / "o.npy")
    np.save(tmp_path / "t.npy", np.zeros((1000, 3)))
    (tmp_path / "t.npy").write_bytes((tmp_path / "t.npy").read_bytes()[:200])
    with pytest.raises(ValueError, match=r"t\.npy: truncated \.npy"):
        read_npy_array(tmp_path / "t.npy")
