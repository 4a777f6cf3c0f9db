"""Coordinates with a large offset (UTM metres) keep float64; everything else is float32 (gridify.io.cloud)."""

import struct

import numpy as np
import pytest

from gridify.io import LARGE_OFFSET, PointCloud, read_points, write_ply
from gridify.io.cloud import coordinate_dtype


def _utm(n=200, seed=0, offset=(512_345.0, 5_412_345.0, 123.0), extent=100.0):
    """Points of a 100 m tile in UTM metres, with millimetre detail (not representable in float32)."""
    r = np.random.default_rng(seed)
    return np.round(np.asarray(offset) + r.random((n, 3)) * extent, 3)


def test_the_rule():
    pts = _utm()
    assert coordinate_dtype(pts) == np.float64  # max|p| ~ 5.4e6 > 1000 x 100 m
    assert coordinate_dtype(pts.astype(np.float32)) == np.float32  # stored float32: nothing to keep
    assert coordinate_dtype(pts - pts.mean(0)) == np.float32  # centred: float32 keeps the detail
    exact = np.array([[500_000.0, 1, 2], [500_001.0, 1, 2]])  # float32 holds these exactly
    assert coordinate_dtype(exact) == np.float32
    # the boundary: max|p| must exceed LARGE_OFFSET x extent (extent = the longest side of the box)
    below = np.array([[LARGE_OFFSET * 0.5 - 0.1, 0, 0], [LARGE_OFFSET * 0.5 - 0.1, 0.5, 0]])
    assert coordinate_dtype(below) == np.float32  # max|p| = 499.9 <= 1000 x 0.5
    above = below + np.array([0.2, 0, 0])  # max|p| = 500.1 > 1000 x 0.5
    assert coordinate_dtype(above) == np.float64
    # all points at one place (extent 0): no shape to keep, float32 even far away
    assert coordinate_dtype(np.array([[0.1, 0.2, 0.3]])) == np.float32
    assert coordinate_dtype(np.repeat(pts[:1], 5, axis=0)) == np.float32
    # invalid rows (NaN, beyond float32) do not count; int64 coordinates follow the same rule
    assert coordinate_dtype(np.vstack([pts, [[np.nan, 0, 0], [1e39, 0, 0]]])) == np.float64
    assert coordinate_dtype(np.array([[123_456_789, 0, 0], [123_456_790, 1, 1]])) == np.float64
    assert coordinate_dtype(np.array([[np.nan, 0, 0]])) == np.float32


def test_pointcloud_keeps_float64_and_select_reapplies_the_rule():
    pts = _utm()
    cloud = PointCloud(pts, labels=np.arange(len(pts)), fields={"intensity": np.arange(len(pts), dtype=np.uint16)})
    assert cloud.points.dtype == np.float64
    np.testing.assert_array_equal(cloud.points, pts)
    sub = cloud.select(np.arange(10))
    assert sub.points.dtype == np.float64 and sub.fields["intensity"].tolist() == list(range(10))
    assert PointCloud(pts.astype(np.float32)).points.dtype == np.float32
    assert PointCloud(pts - pts.mean(0)).points.dtype == np.float32  # centred
    with pytest.raises(ValueError, match=r"field 'intensity' must have shape \[200\], got \(3,\)"):
        PointCloud(pts, fields={"intensity": np.zeros(3)})


def test_text_utm_coordinates_keep_their_millimetres(tmp_path):
    pts = _utm()
    f = tmp_path / "tile.xyz"
    f.write_text("".join(f"{x:.3f} {y:.3f} {z:.3f}\n" for x, y, z in pts))
    cloud = read_points(f)
    assert cloud.points.dtype == np.float64
    np.testing.assert_array_equal(cloud.points, pts)  # every millimetre survives
    assert np.abs(pts.astype(np.float32) - pts).max() > 0.01  # what float32 would have lost: centimetres
    small = tmp_path / "small.xyz"
    small.write_text("".join(f"{x:.3f} {y:.3f} {z:.3f}\n" for x, y, z in pts - pts.mean(0)))
    assert read_points(small).points.dtype == np.float32


def _pcd(pts, size, typ):
    head = (
        f"VERSION 0.7\nFIELDS x y z\nSIZE {size} {size} {size}\nTYPE {typ} {typ} {typ}\nCOUNT 1 1 1\n"
        f"WIDTH {len(pts)}\nHEIGHT 1\nPOINTS {len(pts)}\nDATA binary\n"
    ).encode()
    return head + pts.astype(f"<f{size}").tobytes()


def test_binary_formats_keep_float64_only_when_stored_float64(tmp_path):
    pts = _utm()
    (tmp_path / "d.pcd").write_bytes(_pcd(pts, 8, "F"))
    (tmp_path / "f.pcd").write_bytes(_pcd(pts, 4, "F"))
    np.testing.assert_array_equal(read_points(tmp_path / "d.pcd").points, pts)
    assert read_points(tmp_path / "f.pcd").points.dtype == np.float32
    body = b"".join(struct.pack("<3d", *p) for p in pts)
    (tmp_path / "d.ply").write_bytes(
        f"ply\nformat binary_little_endian 1.0\nelement vertex {len(pts)}\n"
        f"property double x\nproperty double y\nproperty double z\n"
        f"end_header\n".encode()
        + body
    )
    c = read_points(tmp_path / "d.ply")
    assert c.points.dtype == np.float64
    np.testing.assert_array_equal(c.points, pts)
    assert read_points(write_ply(tmp_path / "f.ply", pts)).points.dtype == np.float32  # written as float
    np.save(tmp_path / "d.npy", pts)
    np.testing.assert_array_equal(read_points(tmp_path / "d.npy").points, pts)
    np.savez(tmp_path / "d.npz", pos=pts)
    assert read_points(tmp_path / "d.npz").points.dtype == np.float64
    np.save(tmp_path / "f.npy", pts.astype(np.float32))
    assert read_points(tmp_path / "f.npy").points.dtype == np.float32


def test_invalid_points_are_dropped_even_in_float64(tmp_path):
    pts = _utm(10)
    lines = [f"{x:.3f} {y:.3f} {z:.3f}" for x, y, z in pts] + ["1e39 0 0", "nan 0 0"]
    f = tmp_path / "bad.xyz"
    f.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match=r"dropped 2 of 12 points with NaN/Inf coordinates"):
        cloud = read_points(f)
    assert cloud.points.dtype == np.float64 and len(cloud) == 10
    with pytest.raises(ValueError, match=r"2 of 12 points have NaN/Inf coordinates"):
        read_points(f, drop_invalid=False)


def test_mesh_samples_keep_float64_for_a_large_offset(tmp_path):
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float) * 50 + [512_345.678, 5_412_345.678, 100.25]
    faces = [[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]
    off = (
        "OFF\n4 4 0\n"
        + "".join(f"{a:.17g} {b:.17g} {c:.17g}\n" for a, b, c in v)
        + "".join(f"3 {a} {b} {c}\n" for a, b, c in faces)
    )
    (tmp_path / "far.off").write_text(off)
    c = read_points(tmp_path / "far.off", num_samples=500)
    assert c.points.dtype == np.float64 and c.normals.dtype == np.float32
    local = c.points - v[0]
    assert (local >= -1e-6).all() and (local.sum(1) <= 50 + 1e-6).all()  # on the tetrahedron, to the micrometre
    (tmp_path / "near.off").write_text(
        "OFF\n4 4 0\n"
        + "".join(f"{a:g} {b:g} {c:g}\n" for a, b, c in v - v[0])
        + "".join(f"3 {a} {b} {c}\n" for a, b, c in faces)
    )
    assert read_points(tmp_path / "near.off", num_samples=500).points.dtype == np.float32


def test_a_stray_row_does_not_decide_the_precision(tmp_path):
    """One (0, 0, 0) row beside a UTM tile made the whole cloud's extent the offset itself: float32 before
    centring (half a metre at 5.4e6 m). The bulk box decides instead; the cloud is centred on it, the row named."""
    from gridify.io import centre_large_offset
    from gridify.io.cloud import bulk_box, stray_rows

    pts = _utm(400)
    mixed = np.vstack([pts[:7], [[0.0, 0.0, 0.0]], pts[7:]])
    assert coordinate_dtype(mixed) == np.float64 and stray_rows(mixed).tolist() == [7]
    assert stray_rows(pts).size == 0 and stray_rows(pts - pts.mean(0)).size == 0  # nothing stray: no warning
    moved, offset = centre_large_offset(mixed)
    lo, hi = bulk_box(pts)
    assert np.abs(offset - (lo + hi) / 2).max() < 50  # centred on the tile, not half way to the origin
    tile = moved.astype(np.float32)[np.arange(len(mixed)) != 7].astype(np.float64)
    assert np.abs((tile - tile[0]) - (pts - pts[0])).max() < 1e-4  # every millimetre after the float32 cast
    assert np.abs(moved.astype(np.float32)[7] + offset).max() < 1.0  # the stray row stays where it was
    f = tmp_path / "tile.xyz"
    f.write_text("".join(f"{x:.3f} {y:.3f} {z:.3f}\n" for x, y, z in mixed))
    with pytest.warns(
        UserWarning,
        match=r"tile\.xyz: 1 of 401 rows lie far from the rest of the cloud \(first: row 7 "
        r"at \(0, 0, 0\);.*kept, with the coordinates in float64",
    ):
        cloud = read_points(f)
    assert cloud.points.dtype == np.float64
    np.testing.assert_array_equal(cloud.points, mixed)
    body = b"".join(struct.pack("<3d", *p) for p in mixed)  # a binary format: the same rule
    (tmp_path / "d.ply").write_bytes(
        f"ply\nformat binary_little_endian 1.0\nelement vertex {len(mixed)}\nproperty double x\nproperty double y\n"
        f"property double z\nend_header\n".encode()
        + body
    )
    with pytest.warns(UserWarning, match=r"d\.ply: 1 of 401 rows lie far"):
        assert read_points(tmp_path / "d.ply").points.dtype == np.float64
    # a quarter of the rows elsewhere is no longer a few stray rows: the cloud spans both places
    half = np.vstack([pts, np.zeros((300, 3))])
    assert coordinate_dtype(half) == np.float32 and stray_rows(half).size == 0
