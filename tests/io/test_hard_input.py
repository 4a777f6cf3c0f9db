"""Hard input for gridify.io: tiny files whose headers declare huge sizes, and paths that are not plain files.

Every crafted file here is a few hundred bytes and declares gigabytes: the read must fail in well
under a second, with a message naming the file and the problem, and without allocating what the
header declares (tracemalloc's peak stays under 2 MB; NumPy's allocations are traced).
"""

import io
import os
import re
import signal
import socket
import struct
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

from gridify.io import lzf_decompress, read_mesh, read_points, sample_mesh

PEAK_LIMIT = 2 << 20  # bytes a refused tiny file may make a reader allocate
TIME_LIMIT = 0.5  # seconds


def refused(path, match, **options):
    """read_points(path) raises ValueError(match) naming the file, fast and without a large allocation."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=match) as err:
            read_points(path, **options)
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(err.value)
    assert elapsed < TIME_LIMIT, f"took {elapsed:.2f} s"
    assert peak < PEAK_LIMIT, f"allocated {peak} bytes"
    return str(err.value)


def _pcd(kind, points, fields="x y z", sizes="4 4 4", types="F F F", counts="1 1 1"):
    return (
        f"VERSION 0.7\nFIELDS {fields}\nSIZE {sizes}\nTYPE {types}\nCOUNT {counts}\nWIDTH {points}\n"
        f"HEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {points}\nDATA {kind}\n"
    ).encode()


# --------------------------------------------------------------------------------------
# sizes declared in headers
# --------------------------------------------------------------------------------------
def test_compressed_pcd_declaring_4_gb(tmp_path):
    """The reported case: a 172-byte binary_compressed PCD whose header declares ~4 GB of points."""
    n = 357_913_941  # x 12 bytes = 4,294,967,292: the largest size the u4 field holds
    lzf = bytes([29]) + bytes(30) + bytes([0xE0, 0xFF, 0x00]) * 3  # a valid stream: 30 + 3 x 264 bytes
    head = (
        f"VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH {n}\nHEIGHT 1\n"
        f"POINTS {n}\nDATA binary_compressed\n"
    ).encode()
    f = tmp_path / "huge.pcd"
    f.write_bytes(head + struct.pack("<II", len(lzf), n * 12) + lzf)
    assert f.stat().st_size == 172
    refused(
        f,
        r"huge\.pcd: corrupt PCD: header declares 357913941 points \(4294967292 bytes\) but a "
        r"compressed block of 40 bytes holds at most 3520 \(LZF expands at most 88x\)",
    )
    assert lzf_decompress(lzf, 30 + 3 * 264) == bytes(30 + 3 * 264)


@pytest.mark.parametrize(
    "kind, match",
    [
        ("binary", r"truncated PCD: header declares 1000000000 points \(12000000000 bytes of binary data\)"),
        (
            "ascii",
            r"truncated PCD: header declares 1000000000 points x 3 values, but the 6 bytes after the "
            r"header hold fewer than 3000000000 values",
        ),
    ],
)
def test_pcd_declaring_a_billion_points(tmp_path, kind, match):
    f = tmp_path / f"{kind}.pcd"
    f.write_bytes(_pcd(kind, 1_000_000_000) + b"1 2 3\n")
    refused(f, match)


def test_pcd_count_field_declaring_a_huge_record(tmp_path):
    f = tmp_path / "count.pcd"
    f.write_bytes(_pcd("ascii", 2, counts="100000000 1 1") + b"1 2 3\n")
    refused(f, r"truncated PCD: header declares 2 points x 100000002 values")


def test_lzf_expansion_is_bounded():
    """LZF's largest expansion is 88x (a 3-byte back reference yields 264 bytes): more is refused."""
    run = bytes([0]) + b"a" + bytes([0xE0, 0xFF, 0x00])  # 'a', then a back reference of 264 bytes
    assert lzf_decompress(run, 265) == b"a" * 265
    assert lzf_decompress(bytes([31]) + bytes(32), 32) == bytes(32)
    with pytest.raises(
        ValueError,
        match=r"lzf_decompress: 5 compressed bytes cannot decode to 441 bytes "
        r"\(LZF expands at most 88x\)",
    ):
        lzf_decompress(run, 441)
    with pytest.raises(ValueError, match=r"lzf_decompress: out_len must be a non-negative integer, got -1"):
        lzf_decompress(run, -1)


def test_lzf_overlapping_copy_is_fast():
    """A run of one repeated byte (distance-1 back references) decodes in C, not byte by byte."""
    stream = bytes([0]) + b"z" + bytes([0xE0, 0xFF, 0x00]) * 40_000  # 120 kB -> 10.6 MB
    start = time.perf_counter()
    out = lzf_decompress(stream, 1 + 264 * 40_000)
    assert out == b"z" * (1 + 264 * 40_000)
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize(
    "fmt, body, match",
    [
        ("ascii", b"1 2 3\n", r"truncated PLY: header declares 300000000 vertex items, at least 1799999999 bytes"),
        (
            "binary_little_endian",
            b"\x00" * 12,
            r"truncated PLY: header declares 300000000 vertex items, "
            r"at least 3600000000 bytes",
        ),
    ],
)
def test_ply_declaring_huge_elements(tmp_path, fmt, body, match):
    f = tmp_path / "huge.ply"
    f.write_bytes(
        f"ply\nformat {fmt} 1.0\nelement vertex 300000000\nproperty float x\nproperty float y\n"
        f"property float z\nend_header\n".encode()
        + body
    )
    refused(f, match)


@pytest.mark.parametrize(
    "fmt, face",
    [
        ("ascii", b"4000000000 0 1 2\n"),
        ("binary_little_endian", struct.pack("<I3i", 4_000_000_000, 0, 1, 2)),
    ],
)
def test_ply_list_declaring_four_billion_entries(tmp_path, fmt, face):
    verts = b"0 0 0\n1 0 0\n0 1 0\n" if fmt == "ascii" else np.eye(3, dtype="<f4").tobytes()
    f = tmp_path / "list.ply"
    f.write_bytes(
        f"ply\nformat {fmt} 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
        f"property float z\nelement face 1\nproperty list uint int vertex_indices\n"
        f"end_header\n".encode()
        + verts
        + face
    )
    refused(f, r"truncated PLY \(element 'face'")


def test_ply_negative_list_length(tmp_path):
    f = tmp_path / "neg.ply"
    f.write_bytes(
        b"ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
        b"property float z\nelement face 1\nproperty list char int vertex_indices\nend_header\n"
        + np.eye(3, dtype="<f4").tobytes()
        + struct.pack("<b3i", -3, 0, 1, 2)
    )
    refused(f, r"truncated PLY \(element 'face' is cut short\)")
    g = tmp_path / "neg_ascii.ply"
    g.write_bytes(
        b"ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
        b"element face 2\nproperty list uchar int vertex_indices\nend_header\n0 0 0\n1 0 0\n0 1 0\n"
        b"3 0 1 2\n-3 0 1 2\n"
    )
    refused(
        g,
        r"corrupt PLY data \(element 'face' has a list length that is not a non-negative integer "
        r"\(-3\.0\)\)",
    )


def test_off_declaring_huge_counts(tmp_path):
    f = tmp_path / "huge.off"
    f.write_bytes(b"OFF\n300000000 1 0\n0 0 0\n")
    refused(f, r"truncated OFF file: header declares 300000000 vertices and 1 faces but only 1 data lines")


def _npy_header(shape, descr="<f8"):
    h = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}"
    h = h + " " * (117 - len(h)) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode()


def test_npy_declaring_a_huge_shape(tmp_path):
    f = tmp_path / "big.npy"
    f.write_bytes(_npy_header((100_000_000, 3)) + bytes(24))
    refused(
        f,
        r"big\.npy: truncated \.npy: header declares shape \(100000000, 3\) of float64 "
        r"\(2400000000 bytes\) but only 24 bytes follow the header",
    )


def test_npz_member_declaring_a_huge_shape(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pos.npy", _npy_header((100_000_000, 3)) + bytes(24))
    f = tmp_path / "big.npz"
    f.write_bytes(buf.getvalue())
    refused(f, r"big\.npz: array 'pos': truncated \.npy: header declares shape \(100000000, 3\)")


def test_npz_member_declaring_a_huge_uncompressed_size(tmp_path):
    """A central directory that lies about a member's size: numpy would allocate it before reading."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("pos.npy", _npy_header((2, 3)) + bytes(48))
    data = bytearray(buf.getvalue())
    cd = data.rindex(b"PK\x01\x02")
    struct.pack_into("<I", data, cd + 24, 4_000_000_000)  # uncompressed size in the central directory
    f = tmp_path / "lie.npz"
    f.write_bytes(bytes(data))
    refused(
        f,
        r"lie\.npz: array 'pos': declares 4000000000 bytes uncompressed, more than 100x the "
        r"archive's \d+ bytes \(a zip bomb\?\); refusing",
    )


def test_npz_zip_bomb(tmp_path):
    f = tmp_path / "bomb.npz"
    np.savez_compressed(f, pos=np.zeros((2_000_000, 3)))  # 48 MB of zeros in ~47 kB
    assert f.stat().st_size < 100_000
    refused(f, r"bomb\.npz: array 'pos': declares 48000128 bytes uncompressed, more than 100x the archive's")


def test_absurd_num_samples_refused_before_reading(tmp_path):
    f = tmp_path / "tri.off"
    f.write_text("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n")
    tracemalloc.start()
    try:
        with pytest.raises(
            ValueError,
            match=r"read_points: num_samples must be at most 16,777,216 \(sampling a "
            r"mesh needs about 130 bytes per point\), got 1,000,000,000,000",
        ):
            read_points(f, num_samples=10**12)
        with pytest.raises(ValueError, match=r"sample_mesh: n must be at most 16,777,216"):
            sample_mesh(read_mesh(f), 10**12)
        assert tracemalloc.get_traced_memory()[1] < PEAK_LIMIT
    finally:
        tracemalloc.stop()
    for bad in (0, -5, 2.5, "100", True):
        with pytest.raises(ValueError, match=r"read_points: num_samples must be a positive integer"):
            read_points(f, num_samples=bad)
    with pytest.raises(ValueError, match=r"read_points: seed must be a non-negative integer, got -1"):
        read_points(f, seed=-1)
    assert len(read_points(f, num_samples=7.0)) == 7


# --------------------------------------------------------------------------------------
# messages that name the right cause
# --------------------------------------------------------------------------------------
def test_random_bytes_in_a_npy_are_not_called_a_pickle(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(20):
        f = tmp_path / f"r{i}.npy"
        f.write_bytes(rng.integers(0, 256, 200, dtype=np.uint8).tobytes())
        msg = refused(f, r"not a \.npy file \(it does not start with the \\x93NUMPY magic bytes\)")
        assert "pickle" not in msg
    z = tmp_path / "zip.npy"
    np.savez(z.with_suffix(".npz"), pos=np.zeros((2, 3)))
    z.write_bytes(z.with_suffix(".npz").read_bytes())
    refused(z, r"zip\.npy: is a zip archive \(an \.npz\?\), not a \.npy file")
    h = tmp_path / "header.npy"
    h.write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': 'f8'}\n")
    refused(h, r"header\.npy: not a valid \.npy file \(bad header: ")


def test_only_real_object_arrays_and_pickles_are_called_pickled(tmp_path):
    import pickle

    obj = np.empty(2, dtype=object)
    obj[:] = [{"a": 1}, [1, 2]]
    np.save(tmp_path / "obj.npy", obj, allow_pickle=True)
    refused(tmp_path / "obj.npy", r"obj\.npy: contains pickled Python objects; refusing to load it")
    (tmp_path / "raw.npy").write_bytes(pickle.dumps({"pos": [1, 2, 3]}))
    refused(tmp_path / "raw.npy", r"raw\.npy: contains pickled Python objects; refusing to load it")
    (tmp_path / "almost.npy").write_bytes(pickle.dumps({"pos": [1, 2, 3]}) + b"trailing")
    refused(tmp_path / "almost.npy", r"almost\.npy: not a \.npy file")


def _no_hang(seconds=5):
    """Fail (instead of blocking the test run) when the block takes longer than ``seconds``."""

    def boom(*_):
        raise AssertionError(f"read_points blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    return old


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_is_not_a_regular_file_and_never_blocks(tmp_path):
    fifo = tmp_path / "pipe.ply"
    os.mkfifo(fifo)
    old = _no_hang()
    try:
        refused(
            fifo,
            r"pipe\.ply: not a regular file \(it is a FIFO \(named pipe\)\); read_points reads "
            r"regular files only",
        )
        with pytest.raises(ValueError, match=r"pipe\.ply: not a regular file"):
            read_mesh(fifo)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_socket_and_device_are_not_regular_files(tmp_path):
    path = tmp_path / "sock.xyz"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(str(path))
        refused(path, r"sock\.xyz: not a regular file \(it is a socket\)")
    finally:
        s.close()
    if os.path.exists("/dev/null"):
        with pytest.raises(ValueError, match=r"/dev/null: not a regular file \(it is a character device\)"):
            read_points("/dev/null")


def test_paths_that_cannot_be_files(tmp_path):
    f = tmp_path / "cloud.xyz"
    f.write_text("1 2 3\n")
    with pytest.raises(
        ValueError,
        match=r"cloud\.xyz/: the path ends with '/' \(a folder\) but names a file; "
        r"remove the trailing '/'",
    ):
        read_points(str(f) + "/")
    with pytest.raises(
        ValueError,
        match=r"cloud\.xyz/inner\.xyz: a component of the path is not a folder "
        r"\(.*cloud\.xyz is a file\)",
    ):
        read_points(f / "inner.xyz")
    with pytest.raises(ValueError, match=r"is a directory, expected a point-cloud or mesh file"):
        read_points(str(tmp_path) + "/")
    with pytest.raises(
        FileNotFoundError,
        match=r"nowhere/cloud\.xyz: no such file \(its folder .*nowhere "
        r"does not exist\)",
    ):
        read_points(tmp_path / "nowhere" / "cloud.xyz")
    with pytest.raises(ValueError, match=r"path must be a str or os\.PathLike, got int"):
        read_points(42)
    with pytest.raises(ValueError, match=r"the path contains a NUL byte"):
        read_points("a\0b.xyz")


def test_symbolic_links(tmp_path):
    broken = tmp_path / "broken.ply"
    broken.symlink_to(tmp_path / "gone.ply")
    with pytest.raises(
        FileNotFoundError,
        match=r"broken\.ply: broken symbolic link \(its target '.*gone\.ply' "
        r"does not exist\)",
    ):
        read_points(broken)
    a, b = tmp_path / "a.xyz", tmp_path / "b.xyz"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(ValueError, match=r"a\.xyz: too many levels of symbolic links \(a symbolic link loop\)"):
        read_points(a)
    good = tmp_path / "good.xyz"
    (tmp_path / "target.xyz").write_text("1 2 3\n")
    good.symlink_to(tmp_path / "target.xyz")
    assert read_points(good).points.tolist() == [[1, 2, 3]]


def test_permission_denied(tmp_path, monkeypatch):
    f = tmp_path / "secret.xyz"
    f.write_text("1 2 3\n")
    msg = r"secret\.xyz: permission denied \(this user may not read the file or search its folders\)"
    monkeypatch.setattr(os, "access", lambda *a, **k: False)  # as a user without read permission sees it
    with pytest.raises(ValueError, match=msg):
        read_points(f)
    monkeypatch.undo()

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", denied)  # the file became unreadable after the check
    with pytest.raises(ValueError, match=msg):
        read_points(f)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any file")
def test_permission_denied_for_real(tmp_path):
    f = tmp_path / "secret.xyz"
    f.write_text("1 2 3\n")
    f.chmod(0)
    try:
        with pytest.raises(ValueError, match=r"secret\.xyz: permission denied"):
            read_points(f)
    finally:
        f.chmod(0o644)


# --------------------------------------------------------------------------------------
# text decoded one way everywhere; data a reader leaves out is reported, never dropped silently
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_text_clouds_in_every_unicode_encoding_are_read(tmp_path, encoding):
    f = tmp_path / "cloud.xyz"
    f.write_bytes("# a comment\n1 2 3\n4 5 6\n".encode(encoding))
    assert read_points(f).points.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_broken_utf16_and_binary_text_name_their_cause(tmp_path):
    f = tmp_path / "cloud.xyz"
    f.write_bytes(b"\xff\xfe" + "1 2 3\n".encode("utf-16-le") + b"\x00\xd8")  # a lone surrogate at the end
    assert "not valid UTF-16-LE text" in refused(f, "UTF-16")
    g = tmp_path / "blob.xyz"
    g.write_bytes(b"\x01\x00\x02\x00\x00\x00\x03\x04" * 8)
    refused(g, "looks like a binary file")


def test_a_non_integer_4th_column_says_why_it_is_not_a_label(tmp_path):
    f = tmp_path / "scan.xyz"
    f.write_text("0 0 0 1\n1 0 0 2.5\n0 1 0 0\n")
    cloud = read_points(f)
    assert cloud.labels is None
    assert "column 4 holds non-integer values (data row 1: 2.5)" in cloud.ignored["labels"]


def test_dropped_rows_are_recorded_on_the_cloud(tmp_path):
    f = tmp_path / "scan.xyz"
    f.write_text("0 0 0\nnan 1 1\n1 1 1\n2 2 2\n")
    with pytest.warns(UserWarning, match=r"dropped 1 of 4 points with NaN/Inf coordinates \(row 1, 0-based\)"):
        cloud = read_points(f)
    assert cloud.dropped.tolist() == [1] and cloud.rows_in_file == 4 and len(cloud) == 3
    assert "read_points dropped 1 of its 4 rows" in cloud.dropped_note()


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("scan.xyz", "0 0 0\nnan 1 1\n1 1 1\n", r"dropped 1 of 3 points"),
        ("five.txt", "0 0 0 1 2\n1 1 1 3 4\n", r"5 columns; only x y z"),
        ("seven.txt", "0 0 0 0 0 1 0.5\n1 1 1 1 0 0 1.5\n", r"column 7 is not an integer label"),
    ],
)
def test_reader_warnings_point_at_the_callers_line(tmp_path, name, text, match):
    f = tmp_path / name
    f.write_text(text)
    with pytest.warns(UserWarning, match=match) as record:
        read_points(f)
    assert [w.filename for w in record if re.search(match, str(w.message))] == [__file__]


def test_obj_with_a_nan_vertex_names_the_vertex_not_zero_area(tmp_path):
    f = tmp_path / "tri.obj"
    f.write_text("v 0 0 0\nv 1 0 0\nv nan 1 0\nf 1 2 3\n")
    with pytest.raises(ValueError, match=r"vertex 2 \(0-based\) has NaN/Inf coordinates") as err:
        read_points(f)  # through trimesh (slow to import): not timed
    assert str(f) in str(err.value) and "zero surface area" not in str(err.value)


def test_ply_with_more_vertex_lines_than_declared_is_refused(tmp_path):
    f = tmp_path / "more.ply"
    f.write_text(
        "ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\n"
        "property float z\nend_header\n0 0 0\n1 1 1\n2 2 2\n3 3 3\n"
    )
    msg = refused(f, r"header declares 2 vertex items \(2 data lines\) but the data holds 4 lines")
    assert "refusing rather than dropping" in msg
    g = tmp_path / "more_binary.ply"
    body = np.arange(12, dtype="<f4").tobytes()
    g.write_bytes(
        b"ply\nformat binary_little_endian 1.0\nelement vertex 2\nproperty float x\nproperty float y\n"
        b"property float z\nend_header\n" + body
    )
    refused(g, r"room for 2 more vertex records")
    ok = tmp_path / "ok.ply"  # a trailing newline is not data
    ok.write_bytes(
        b"ply\nformat binary_little_endian 1.0\nelement vertex 2\nproperty float x\nproperty float y\n"
        b"property float z\nend_header\n" + body[:24] + b"\n"
    )
    assert len(read_points(ok)) == 2


def test_pcd_and_off_with_more_data_than_declared_are_refused(tmp_path):
    f = tmp_path / "more.pcd"
    f.write_bytes(_pcd("ascii", 2) + b"0 0 0\n1 1 1\n2 2 2\n")
    refused(f, r"PCD header declares 2 points x 3 values but the data holds 9 values \(1 points more\); refusing")
    g = tmp_path / "more_binary.pcd"
    g.write_bytes(_pcd("binary", 2) + np.arange(12, dtype="<f4").tobytes())
    refused(g, r"room for 2 more points")
    h = tmp_path / "more.off"
    h.write_text("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n3 0 2 1\n")
    with pytest.raises(
        ValueError,
        match=r"more.off: OFF header declares 3 vertices and 1 faces but 5 data lines "
        r"follow \(1 more\)",
    ):
        read_points(h)


def test_npy_with_more_values_than_its_shape_is_refused(tmp_path):
    f = tmp_path / "more.npy"
    buf = io.BytesIO()
    np.save(buf, np.zeros((2, 3)))
    f.write_bytes(buf.getvalue() + np.ones(3).tobytes())
    refused(
        f,
        r"header declares shape \(2, 3\) of float64 \(48 bytes\) but 72 bytes follow the header \(room for 3 "
        r"more values\)",
    )
