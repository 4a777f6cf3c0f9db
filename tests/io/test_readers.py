"""Readers of gridify.io: real sample files (skipped when absent) and generated files."""

import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest

from gridify.io import PointCloud, lzf_decompress, read_mesh, read_points, repair_normals, sample_mesh, write_ply


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------
def _cube():
    v = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], float)
    f = np.array(
        [
            [0, 2, 1],
            [0, 3, 2],
            [4, 5, 6],
            [4, 6, 7],
            [0, 1, 5],
            [0, 5, 4],
            [1, 2, 6],
            [1, 6, 5],
            [2, 3, 7],
            [2, 7, 6],
            [3, 0, 4],
            [3, 4, 7],
        ]
    )
    return v, f


def _off_text(v, f, counts_on_header_line=False):
    head = f"OFF{len(v)} {len(f)} 0\n" if counts_on_header_line else f"OFF\n{len(v)} {len(f)} 0\n"
    return head + "".join(f"{a} {b} {c}\n" for a, b, c in v) + "".join(f"3 {a} {b} {c}\n" for a, b, c in f)


def _rand_cloud(n=50, seed=0):
    r = np.random.default_rng(seed)
    pts = r.normal(size=(n, 3)).astype(np.float32)
    nrm = r.normal(size=(n, 3))
    nrm = (nrm / np.linalg.norm(nrm, axis=1, keepdims=True)).astype(np.float32)
    return pts, nrm


def _lzf_literal(data: bytes) -> bytes:
    """A valid LZF stream made only of literal runs (tests the decoder's literal path)."""
    out = bytearray()
    for i in range(0, len(data), 32):
        chunk = data[i : i + 32]
        out.append(len(chunk) - 1)
        out += chunk
    return bytes(out)


def _pcd_header(fields, sizes, types, n, kind):
    return (
        "# .PCD v0.7\nVERSION 0.7\nFIELDS "
        + " ".join(fields)
        + "\nSIZE "
        + " ".join(map(str, sizes))
        + "\nTYPE "
        + " ".join(types)
        + "\nCOUNT "
        + " ".join("1" for _ in fields)
        + f"\nWIDTH {n}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA {kind}\n"
    ).encode()


@pytest.fixture
def real(shared_data):
    return shared_data


# --------------------------------------------------------------------------------------
# real sample files
# --------------------------------------------------------------------------------------
def test_real_pcd_binary_modelnet10(real):
    f = sorted((real / "modelnet10_pcd/ModelNet10/pcd/chair/train").glob("*.pcd"))[0]
    c = read_points(f)
    assert c.points.shape == (1024, 3) and c.points.dtype == np.float32
    assert np.isfinite(c.points).all() and c.normals is None and c.source == str(f)
    o3d = pytest.importorskip("open3d")
    ref = np.asarray(o3d.io.read_point_cloud(str(f)).points)
    np.testing.assert_allclose(c.points, ref, rtol=1e-6, atol=1e-6)


def test_real_off_meshes_sampled(real):
    for f in sorted((real / "modelnet_off_sample/ModelNet10/bathtub/train").glob("*.off")):
        v, faces = read_mesh(f)
        assert v.shape[1] == 3 and faces.shape[1] == 3 and faces.max() < len(v)
        c = read_points(f, num_samples=500, seed=3)
        assert c.points.shape == (500, 3)
        np.testing.assert_allclose(np.linalg.norm(c.normals, axis=1), 1.0, atol=1e-5)
        assert (c.points >= v.min(0) - 1e-3).all() and (c.points <= v.max(0) + 1e-3).all()
        np.testing.assert_array_equal(c.points, read_points(f, num_samples=500, seed=3).points)


def test_real_normal_resampled_text_and_placeholder_normals(real):
    f = real / "modelnet40_normal_resampled_sample/data/modelnet40_normal_resampled/sofa/sofa_0469.txt"
    c = read_points(f)
    assert c.points.shape == (10000, 3) and c.normals.shape == (10000, 3)
    ones = np.all(c.normals == 1.0, axis=1)
    assert ones.sum() >= 1  # the release's (1, 1, 1) placeholders are read faithfully
    fixed = repair_normals(c.points, c.normals)
    np.testing.assert_allclose(np.linalg.norm(fixed, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(
        fixed[~ones], c.normals[~ones] / np.linalg.norm(c.normals[~ones], axis=1, keepdims=True), atol=1e-6
    )


def test_real_shapenet_files(real):
    sp = real / "shapenetpart_sample"
    pts = sorted((sp / "v0_points/02691156/points").glob("*.pts"))[0]
    c = read_points(pts)
    assert c.points.shape == (2488, 3) and c.labels is None
    txt = sorted((sp / "v0_normal/data").rglob("04379243/*.txt"))[0]
    c = read_points(txt)
    assert c.normals is not None and set(np.unique(c.labels)) <= {47, 48, 49}
    npz = read_points(sp / "cap_processed/cap_val_decoded.npz")
    assert npz.points.shape == (13259, 3) and npz.normals.shape == (13259, 3)
    assert set(np.unique(npz.labels)) == {6, 7}


def test_real_ply_scan_and_tristrip_mesh(real):
    scan = real / "scans/threedmatch_fragments_tp3d/notebooks/data/3DMatch/redkitchen_000.ply"
    c = read_points(scan)
    assert c.points.shape == (258342, 3)
    o3d = pytest.importorskip("open3d")
    np.testing.assert_allclose(c.points[:100], np.asarray(o3d.io.read_point_cloud(str(scan)).points)[:100], atol=1e-6)
    igea = real / "scans/scanned_meshes_common3d/data/igea.ply"  # 'tristrips' element: a mesh
    v, f = read_mesh(igea)
    assert v.shape == (134345, 3) and len(f) > 200_000
    m = read_points(igea, num_samples=2000)
    assert m.points.shape == (2000, 3) and m.normals is not None


def test_real_obj_and_npy(real):
    c = read_points(real / "scans/scanned_meshes_common3d/data/rocker-arm.obj", num_samples=1000)
    assert c.points.shape == (1000, 3) and c.normals is not None
    vert = real / "scans/mmdet3d_real_scans/tests/data/scannet/scannet_train_instance_data/scene0000_00_vert.npy"
    c = read_points(vert)  # x y z r g b, colours 0-255
    assert c.points.shape == (50000, 3) and c.colors is not None
    assert 0.0 <= c.colors.min() and c.colors.max() <= 1.0


# --------------------------------------------------------------------------------------
# generated files
# --------------------------------------------------------------------------------------
def test_ply_roundtrip_binary_and_ascii(tmp_path):
    pts, nrm = _rand_cloud()
    col = np.random.default_rng(1).random((50, 3)).astype(np.float32)
    lab = np.arange(50) % 4
    for binary in (True, False):
        f = write_ply(tmp_path / f"c_{binary}.ply", pts, nrm, col, labels=lab, binary=binary)
        c = read_points(f)
        np.testing.assert_allclose(c.points, pts, atol=1e-6)
        np.testing.assert_allclose(c.normals, nrm, atol=1e-6)
        np.testing.assert_allclose(c.colors, np.round(col * 255) / 255, atol=1e-6)
        np.testing.assert_array_equal(c.labels, lab)
    o3d = pytest.importorskip("open3d")  # our files are readable by other tools
    ref = o3d.io.read_point_cloud(str(tmp_path / "c_True.ply"))
    np.testing.assert_allclose(np.asarray(ref.points), pts, atol=1e-6)


def test_ply_big_endian_and_quad_mesh(tmp_path):
    pts, _ = _rand_cloud(5)
    body = b"".join(struct.pack(">fff", *p) for p in pts)
    f = tmp_path / "be.ply"
    f.write_bytes(
        b"ply\nformat binary_big_endian 1.0\nelement vertex 5\nproperty float x\nproperty float y\n"
        b"property float z\nend_header\n" + body
    )
    np.testing.assert_allclose(read_points(f).points, pts, atol=1e-6)
    # an ascii unit square made of one quad face: sampled points lie on z=0 within [0,1]^2
    q = tmp_path / "quad.ply"
    q.write_text(
        "ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty float y\nproperty float z\n"
        "element face 1\nproperty list uchar int vertex_indices\nend_header\n"
        "0 0 0\n1 0 0\n1 1 0\n0 1 0\n4 0 1 2 3\n"
    )
    c = read_points(q, num_samples=300)
    assert c.points.shape == (300, 3) and np.allclose(c.points[:, 2], 0)
    assert c.points[:, :2].min() >= 0 and c.points[:, :2].max() <= 1
    np.testing.assert_allclose(np.abs(c.normals[:, 2]), 1.0, atol=1e-6)


def test_pcd_ascii_with_normals_rgb_label(tmp_path):
    pts, nrm = _rand_cloud(4)
    rgb = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (10, 20, 30)]
    rows = []
    for p, n, (r, g, b) in zip(pts, nrm, rgb):
        packed = struct.unpack("<f", struct.pack("<I", (r << 16) | (g << 8) | b))[0]
        rows.append(" ".join(f"{v:.9g}" for v in (*p, *n)) + f" {packed:.9g} {r % 3}")
    f = tmp_path / "a.pcd"
    f.write_bytes(
        _pcd_header(
            ["x", "y", "z", "normal_x", "normal_y", "normal_z", "rgb", "label"], [4] * 8, ["F"] * 7 + ["U"], 4, "ascii"
        )
        + ("\n".join(rows) + "\n").encode()
    )
    c = read_points(f)
    np.testing.assert_allclose(c.points, pts, atol=1e-6)
    np.testing.assert_allclose(c.normals, nrm, atol=1e-6)
    np.testing.assert_allclose(c.colors * 255, np.array(rgb), atol=1e-3)
    np.testing.assert_array_equal(c.labels, [r % 3 for r, _, _ in rgb])


@pytest.mark.parametrize("fmt", ["ply", "pcd"])
def test_a_fractional_label_property_is_ignored_by_name_never_truncated(tmp_path, fmt):
    """A float 'label' property holding 1.5 / NaN was cast to int64 (1, and an arbitrary id for NaN): wrong ground
    truth without a sign. It is ignored with a warning naming the file, the property and the row, and the reason
    is kept in PointCloud.ignored; whole numbers stored as floats still read as ids."""
    rows = np.array([[0, 0, 0, 1.0], [1, 0, 0, 2.0], [0, 1, 0, 1.5], [0, 0, 1, np.nan]])

    def write(name, values):
        f = tmp_path / f"{name}.{fmt}"
        data = "".join(f"{a:g} {b:g} {c:g} {float(v)!r}\n" for (a, b, c), v in zip(rows[:, :3], values))
        if fmt == "ply":
            head = "ply\nformat ascii 1.0\nelement vertex 4\n" + "".join(
                f"property float {k}\n" for k in ("x", "y", "z", "label")
            )
            f.write_text(head + "end_header\n" + data)
        else:
            f.write_bytes(_pcd_header(["x", "y", "z", "label"], [4] * 4, ["F"] * 4, 4, "ascii") + data.encode())
        return f

    assert read_points(write("whole", [1.0, 2.0, 0.0, 5.0])).labels.tolist() == [1, 2, 0, 5]
    with pytest.warns(UserWarning, match=rf"frac\.{fmt}: property 'label' is not a label: .*row 2 holds 1\.5"):
        c = read_points(write("frac", rows[:, 3]))
    assert c.labels is None and "row 2 holds 1.5" in c.ignored["labels"]
    with pytest.warns(UserWarning, match=r"row 3 holds nan"):
        assert read_points(write("nan", [1.0, 2.0, 0.0, np.nan])).labels is None


def test_pcd_binary_and_compressed(tmp_path):
    pts, _ = _rand_cloud(40)
    f = tmp_path / "b.pcd"
    f.write_bytes(_pcd_header(list("xyz"), [4] * 3, ["F"] * 3, 40, "binary") + pts.astype("<f4").tobytes())
    np.testing.assert_allclose(read_points(f).points, pts)
    # binary_compressed: field-major payload, LZF-coded (literal runs only)
    payload = b"".join(np.ascontiguousarray(pts[:, i]).astype("<f4").tobytes() for i in range(3))
    comp = _lzf_literal(payload)
    g = tmp_path / "c.pcd"
    g.write_bytes(
        _pcd_header(list("xyz"), [4] * 3, ["F"] * 3, 40, "binary_compressed")
        + struct.pack("<II", len(comp), len(payload))
        + comp
    )
    np.testing.assert_allclose(read_points(g).points, pts)


def test_pcd_compressed_written_by_open3d(tmp_path):
    o3d = pytest.importorskip("open3d")
    pts = np.repeat(np.random.default_rng(0).random((100, 3)), 3, axis=0)  # repeats -> back references
    pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pts))
    f = tmp_path / "o3d.pcd"
    assert o3d.io.write_point_cloud(str(f), pc, write_ascii=False, compressed=True)
    assert b"binary_compressed" in f.read_bytes()[:400]
    np.testing.assert_allclose(read_points(f).points, pts, atol=1e-6)


def test_lzf_back_reference():
    # 'abc' literal then a back reference of length 6 at distance 3 -> 'abcabcabc'
    stream = bytes([2]) + b"abc" + bytes([(4 << 5) | 0, 2])
    assert lzf_decompress(stream, 9) == b"abcabcabc"


@pytest.mark.parametrize("sep", [" ", ",", "\t"])
def test_text_columns(tmp_path, sep):
    pts, nrm = _rand_cloud(20)
    lab = np.arange(20) % 3
    f3 = tmp_path / "a.xyz"
    np.savetxt(f3, pts, delimiter=sep)
    np.testing.assert_allclose(read_points(f3).points, pts, atol=1e-6)
    f6 = tmp_path / "b.txt"
    np.savetxt(f6, np.hstack([pts, nrm]), delimiter=sep)
    c6 = read_points(f6)
    np.testing.assert_allclose(c6.normals, nrm, atol=1e-6)
    f7 = tmp_path / "c.txt"
    np.savetxt(f7, np.hstack([pts, nrm, lab[:, None]]), delimiter=sep, header="x y z nx ny nz label")
    c7 = read_points(f7)
    np.testing.assert_array_equal(c7.labels, lab)
    np.testing.assert_allclose(c7.normals, nrm, atol=1e-6)


def test_text_colours_count_header_and_columns(tmp_path):
    pts, _ = _rand_cloud(10)
    col = np.random.default_rng(2).integers(0, 256, size=(10, 3))
    f = tmp_path / "c.pts"
    f.write_text("10\n" + "".join(" ".join(map(str, (*p, *c))) + "\n" for p, c in zip(pts, col)))
    c = read_points(f)
    np.testing.assert_allclose(c.points, pts, atol=1e-6)
    np.testing.assert_allclose(c.colors * 255, col, atol=1e-4)
    c2 = read_points(f, columns=("x", "y", "z", "_", "_", "label"))
    np.testing.assert_array_equal(c2.labels, col[:, 2])
    assert c2.colors is None


@pytest.mark.parametrize("suffix", [".txt", ".npy"])
def test_named_intensity_column_becomes_a_field(tmp_path, suffix):
    pts, _ = _rand_cloud(12)
    strength = np.linspace(0.0, 0.99, 12)
    table = np.hstack([strength[:, None], pts])  # intensity first: the names, not the position, decide
    f = tmp_path / f"scan{suffix}"
    np.save(f, table) if suffix == ".npy" else np.savetxt(f, table)
    cloud = read_points(f, columns=("intensity", "x", "y", "z"))
    np.testing.assert_allclose(cloud.points, pts, atol=1e-6)
    np.testing.assert_allclose(cloud.fields["intensity"], strength, atol=1e-6)
    assert cloud.labels is None and set(cloud.fields) == {"intensity"}
    assert read_points(f).fields == {}  # without names a 4th non-integer column is not guessed
    with pytest.raises(ValueError, match=r"columns= names \['x'\] more than once"):
        read_points(f, columns=("x", "x", "y", "z"))


def test_npy_and_npz_variants(tmp_path):
    pts, nrm = _rand_cloud(30)
    np.save(tmp_path / "a.npy", pts)
    np.testing.assert_allclose(read_points(tmp_path / "a.npy").points, pts)
    np.save(tmp_path / "b.npy", np.hstack([pts, nrm]))
    np.testing.assert_allclose(read_points(tmp_path / "b.npy").normals, nrm)
    lab = np.arange(30) % 5
    for pk, nk, lk in (("pos", "normal", "part_label"), ("points", "normals", "label"), ("xyz", "norm", "seg")):
        f = tmp_path / f"{pk}.npz"
        np.savez(f, **{pk: pts, nk: nrm, lk: lab})
        c = read_points(f)
        np.testing.assert_allclose(c.points, pts)
        np.testing.assert_allclose(c.normals, nrm)
        np.testing.assert_array_equal(c.labels, lab)
    np.savez(tmp_path / "cls.npz", pos=pts, label=np.array([3]))  # one class label, not per point
    assert read_points(tmp_path / "cls.npz").labels is None


def test_off_counts_on_header_line_and_polygons(tmp_path):
    v, f = _cube()
    a = tmp_path / "a.off"
    a.write_text(_off_text(v, f, counts_on_header_line=True))  # 'OFF8 12 0'
    va, fa = read_mesh(a)
    np.testing.assert_allclose(va, v)
    np.testing.assert_array_equal(fa, f)
    c = read_points(a, num_samples=400, seed=1)
    assert np.allclose(np.abs(c.points - 0.5).max(axis=1), 0.5, atol=1e-6)  # on the cube's surface
    # a quad face is fan-triangulated; comments and blank lines are skipped
    b = tmp_path / "b.off"
    b.write_text("OFF\n# a comment\n4 1 0\n\n0 0 0\n1 0 0\n1 1 0\n0 1 0\n4 0 1 2 3\n")
    assert read_mesh(b)[1].tolist() == [[0, 1, 2], [0, 2, 3]]


def test_obj_stl_via_trimesh(tmp_path):
    trimesh = pytest.importorskip("trimesh")
    v, f = _cube()
    mesh = trimesh.Trimesh(v, f, process=False)
    for ext in ("obj", "stl"):
        path = tmp_path / f"cube.{ext}"
        mesh.export(path)
        c = read_points(path, num_samples=200)
        assert c.points.shape == (200, 3)
        assert np.allclose(np.abs(c.points - 0.5).max(axis=1), 0.5, atol=1e-5)


def test_sample_mesh_deterministic_and_area_weighted():
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [10, 0, 0], [13, 0, 0], [10, 1, 0]], float)
    f = np.array([[0, 1, 2], [3, 4, 5]])  # areas 0.5 and 1.5
    p1, n1 = sample_mesh((v, f), 4000, seed=7)
    p2, n2 = sample_mesh((v, f), 4000, seed=7)
    np.testing.assert_array_equal(p1, p2)
    assert not np.array_equal(p1, sample_mesh((v, f), 4000, seed=8)[0])
    frac_big = (p1[:, 0] >= 10).mean()
    assert abs(frac_big - 0.75) < 0.03
    np.testing.assert_allclose(n1, np.tile([0, 0, 1], (4000, 1)))
    small = p1[p1[:, 0] < 10]
    assert (small[:, 0] + small[:, 1] <= 1 + 1e-6).all() and (small >= -1e-7).all()
    with pytest.raises(ValueError, match="zero surface area"):
        sample_mesh((v, np.array([[0, 0, 1]])), 10)


def test_pointcloud_validation():
    with pytest.raises(ValueError, match=r"points must have shape \[N, 3\]"):
        PointCloud(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="normals must have shape"):
        PointCloud(np.zeros((4, 3)), normals=np.zeros((3, 3)))
    # what numpy would cast silently (bools to 0/1, fractional labels truncated) or fail on deep inside
    with pytest.raises(ValueError, match=r"^PointCloud: points must hold real numbers, got dtype bool$"):
        PointCloud(np.ones((4, 3), dtype=bool))
    with pytest.raises(ValueError, match=r"^PointCloud: points must hold real numbers, got dtype <U1$"):
        PointCloud(np.array([["1", "2", "3"]]))
    with pytest.raises(ValueError, match=r"^scan\.txt: colors must hold real numbers, got dtype complex128$"):
        PointCloud(np.zeros((2, 3)), colors=np.zeros((2, 3), complex), source="scan.txt")
    with pytest.raises(ValueError, match=r"field 'intensity' must hold real numbers, got dtype object"):
        PointCloud(np.zeros((2, 3)), fields={"intensity": np.array([None, 1.0], dtype=object)})
    with pytest.raises(ValueError, match=r"^PointCloud: fields must be a dict of name -> \[N\] array .*got list$"):
        PointCloud(np.zeros((2, 3)), fields=[1, 2])
    cloud = PointCloud(np.zeros((3, 3)), dropped=np.array([0, 2]))  # rows 0 and 2 of a 5-row file were dropped
    assert [cloud.file_row(i) for i in range(3)] == [1, 3, 4] and PointCloud(np.zeros((2, 3))).file_row(1) == 1
    with pytest.raises(
        ValueError, match=r"labels must be integers, row 1 holds 0\.5 \(a float64 array: .*not truncated"
    ):
        PointCloud(np.zeros((3, 3)), labels=np.array([1.0, 0.5, 2.0]))
    with pytest.raises(ValueError, match=r"labels must be integers, got dtype bool"):
        PointCloud(np.zeros((2, 3)), labels=np.array([True, False]))
    # colours on the unit scale: integers scaled (8-bit, or 16-bit above 255), 0-255 floats refused (not 255x too bright)
    rgb8 = np.array([[255, 0, 51], [0, 0, 0]], np.uint8)
    np.testing.assert_allclose(PointCloud(np.zeros((2, 3)), colors=rgb8).colors, rgb8 / 255.0, rtol=1e-6)
    np.testing.assert_allclose(PointCloud(np.zeros((1, 3)), colors=[[65535, 0, 257]]).colors, [[1, 0, 257 / 65535]])
    with pytest.raises(ValueError, match=r"^PointCloud: float colors must lie in \[0, 1\], got 255\.0 \(row 0.*by 255"):
        PointCloud(np.zeros((2, 3)), colors=rgb8.astype(np.float32))
    with pytest.raises(ValueError, match=r"integer colors must lie in 0\.\.255 or 0\.\.65535, got -1\.\.0"):
        PointCloud(np.zeros((1, 3)), colors=[[-1, 0, 0]])
    kept = PointCloud(
        np.zeros((3, 3)), labels=np.array([1.0, 0.0, 7.0]), fields={"flag": np.array([True, False, True])}
    )
    assert kept.labels.dtype == np.int64 and kept.labels.tolist() == [1, 0, 7] and kept.fields["flag"].dtype == bool


def test_nan_points_dropped_or_refused(tmp_path):
    pts, _ = _rand_cloud(10)
    pts[3] = np.nan
    f = tmp_path / "nan.pcd"
    f.write_bytes(_pcd_header(list("xyz"), [4] * 3, ["F"] * 3, 10, "binary") + pts.astype("<f4").tobytes())
    with pytest.warns(UserWarning, match="dropped 1 of 10"):
        assert len(read_points(f)) == 9
    with pytest.raises(ValueError, match="NaN/Inf"):
        read_points(f, drop_invalid=False)


# --------------------------------------------------------------------------------------
# errors: every message names the file and the problem
# --------------------------------------------------------------------------------------
def test_missing_and_unknown(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_points(tmp_path / "nope.ply")
    bad = tmp_path / "cloud.e57"
    bad.write_text("1 2 3\n")
    with pytest.raises(ValueError, match=r"cloud\.e57.*unsupported file extension"):
        read_points(bad)
    with pytest.raises(ValueError, match="is a directory"):
        read_points(tmp_path)


@pytest.mark.parametrize("ext", [".pcd", ".ply", ".xyz", ".txt", ".npy", ".npz", ".off", ".obj"])
def test_empty_files(tmp_path, ext):
    f = tmp_path / f"empty{ext}"
    f.write_bytes(b"")
    with pytest.raises(ValueError, match=rf"empty{ext}: file is empty"):
        read_points(f)


def test_truncated_binary_files(tmp_path):
    pts, _ = _rand_cloud(40)
    f = tmp_path / "t.pcd"
    f.write_bytes(_pcd_header(list("xyz"), [4] * 3, ["F"] * 3, 40, "binary") + pts.tobytes()[:200])
    with pytest.raises(ValueError, match=r"t\.pcd: truncated PCD: header declares 40 points"):
        read_points(f)
    g = write_ply(tmp_path / "t.ply", pts)
    g.write_bytes(g.read_bytes()[:-100])
    with pytest.raises(ValueError, match=r"t\.ply: truncated PLY"):
        read_points(g)
    h = tmp_path / "noend.ply"
    h.write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\n")
    with pytest.raises(ValueError, match="no 'end_header'"):
        read_points(h)
    np.save(tmp_path / "t.npy", pts)
    raw = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(raw[:150])
    with pytest.raises(ValueError, match=r"t\.npy"):
        read_points(tmp_path / "t.npy")
    np.savez(tmp_path / "t.npz", pos=pts)
    raw = (tmp_path / "t.npz").read_bytes()
    (tmp_path / "t.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match=r"t\.npz"):
        read_points(tmp_path / "t.npz")


def test_corrupt_text_off_and_headers(tmp_path):
    f = tmp_path / "bad.xyz"
    f.write_text("1 2 3\n4 5 6\n7 eight 9\n")
    with pytest.raises(ValueError, match=r"bad\.xyz: line 3 is not numeric"):
        read_points(f)
    g = tmp_path / "ragged.txt"
    g.write_text("1 2 3\n4 5 6\n7 8\n")
    with pytest.raises(ValueError, match=r"ragged\.txt: line 3 has 2 columns"):
        read_points(g)
    h = tmp_path / "two.xyz"
    h.write_text("1 2\n3 4\n")
    with pytest.raises(ValueError, match="at least 3 columns"):
        read_points(h)
    v, faces = _cube()
    t = tmp_path / "trunc.off"
    t.write_text(_off_text(v, faces)[:60])
    with pytest.raises(ValueError, match=r"trunc\.off: truncated OFF file: header declares 8 vertices"):
        read_points(t)
    o = tmp_path / "range.off"
    o.write_text("OFF\n3 1 0\n0 0 0\n1 0 0\n0 1 0\n3 0 1 7\n")
    with pytest.raises(ValueError, match=r"range\.off: OFF faces index vertices outside"):
        read_points(o)
    n = tmp_path / "notoff.off"
    n.write_text("hello\n")
    with pytest.raises(ValueError, match="not an OFF file"):
        read_points(n)
    p = tmp_path / "nofields.pcd"
    p.write_text("VERSION 0.7\nPOINTS 1\nDATA ascii\n1 2 3\n")
    with pytest.raises(ValueError, match="no FIELDS"):
        read_points(p)
    q = tmp_path / "garbage.ply"
    q.write_bytes(b"\x00\x01garbage")
    with pytest.raises(ValueError, match="not a PLY file"):
        read_points(q)
    r = tmp_path / "garbage.obj"
    r.write_text("this is not an obj file\n")
    with pytest.raises(ValueError, match=r"garbage\.obj"):
        read_points(r)


def test_pickles_refused(tmp_path):
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = {"a": 1}, [1, 2]
    np.save(tmp_path / "obj.npy", obj, allow_pickle=True)
    with pytest.raises(ValueError, match=r"obj\.npy: contains pickled Python objects; refusing"):
        read_points(tmp_path / "obj.npy")
    np.savez(tmp_path / "obj.npz", pos=obj)
    with pytest.raises(ValueError, match=r"obj\.npz: .*pickled Python objects"):
        read_points(tmp_path / "obj.npz")
    (tmp_path / "raw.npy").write_bytes(pickle.dumps({"pos": [1, 2, 3]}))
    with pytest.raises(ValueError, match=r"raw\.npy: contains pickled Python objects"):
        read_points(tmp_path / "raw.npy")


def test_npz_without_points_key(tmp_path):
    np.savez(tmp_path / "k.npz", foo=np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"no point array found.*foo"):
        read_points(tmp_path / "k.npz")


def test_library_imports_stay_light():
    code = (
        "import sys, gridify.io, gridify.transforms, gridify.datasets; "
        "bad = [m for m in ('open3d', 'matplotlib', 'lightning', 'pytorch_lightning') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_write_ply_is_atomic_and_honours_the_umask(tmp_path, monkeypatch):
    import os

    pts, _ = _rand_cloud(20)
    old_mask = os.umask(0o027)
    try:
        f = write_ply(tmp_path / "sub" / "a.ply", pts)
    finally:
        os.umask(old_mask)
    assert f == tmp_path / "sub" / "a.ply"
    assert os.stat(f).st_mode & 0o777 == 0o640  # what open(path, "w") gives, not mkstemp's 0600
    before = f.read_bytes()

    def dying_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", dying_fsync)
    with pytest.raises(OSError, match="disk full"):
        write_ply(f, pts[:5], binary=False)
    monkeypatch.undo()
    assert f.read_bytes() == before  # the previous file survives an interrupted write
    assert sorted(p.name for p in f.parent.iterdir()) == ["a.ply"]  # no temporary file left


def test_text_with_a_utf8_byte_order_mark_reads_like_without(tmp_path):
    from gridify.io import read_points

    body = "1 2 3\n4 5 6\n7 8 9\n"
    (tmp_path / "bom.xyz").write_bytes(b"\xef\xbb\xbf" + body.encode())
    (tmp_path / "plain.xyz").write_text(body)
    np.testing.assert_array_equal(read_points(tmp_path / "bom.xyz").points, read_points(tmp_path / "plain.xyz").points)


# --------------------------------------------------------------------------------------
# truncated dataset files
# --------------------------------------------------------------------------------------
def test_truncated_dataset_files_name_the_file(tmp_path):
    pts = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    ply = write_ply(tmp_path / "a.ply", pts)
    raw = ply.read_bytes()
    ply.write_bytes(raw[:-37])
    with pytest.raises(ValueError, match=rf"{ply}: truncated PLY"):
        read_points(ply)
    npy = tmp_path / "a.npy"
    np.save(npy, pts)
    npy.write_bytes(npy.read_bytes()[:-20])
    with pytest.raises(ValueError, match=rf"{npy}: "):
        read_points(npy)


def test_a_files_colours_off_the_unit_scale_are_clipped_by_every_reader_not_refused(tmp_path):
    """A hand-built PointCloud refuses 0-255 floats; a file's odd colours are data: each reader clips them first."""
    table = np.array([[0, 0, 0, -5.0, 300.0, np.nan], [1, 1, 1, 10.0, 20.0, 255.0]], np.float32)
    pcd = tmp_path / "odd.pcd"
    pcd.write_bytes(_pcd_header(list("xyzrgb"), [4] * 6, ["F"] * 6, 2, "binary") + table.astype("<f4").tobytes())
    np.savez(tmp_path / "odd.npz", pos=table[:, :3], color=table[:, 3:])
    np.savetxt(tmp_path / "odd.txt", np.nan_to_num(table, nan=7.0))
    for path in (pcd, tmp_path / "odd.npz", tmp_path / "odd.txt"):
        colors = read_points(path, columns=list("xyzrgb")) if path.suffix == ".txt" else read_points(path)
        colors = colors.colors
        assert colors is not None and np.isfinite(colors).all(), path
        assert colors.min() >= 0.0 and colors.max() <= 1.0, path
        assert colors[0, 0] == 0.0 and colors[0, 1] == 1.0, path  # -5 -> 0, 300 -> 1 (clipped, not refused)


def test_16_bit_colours_are_one_rule_in_every_reader(tmp_path):
    """Colours stored as 16-bit whole numbers (S3DIS-style text, a PLY ``ushort`` property, PCD ``r g b``, an npz)
    are divided by 65535, 8-bit ones by 255, the scale decided from the whole file (gridify.io.cloud.color_scale):
    the text reader ignored them as "neither normals nor colours", the PLY / PCD / npz readers clipped them at 1."""
    rng = np.random.default_rng(3)
    xyz = rng.uniform(0, 5, (40, 3)).round(3)
    rgb16 = rng.integers(0, 65536, (40, 3))
    rgb16[0] = [65535, 300, 0]
    want = rgb16 / 65535.0
    np.savetxt(tmp_path / "room.txt", np.c_[xyz, rgb16], fmt="%.3f %.3f %.3f %d %d %d")
    np.testing.assert_allclose(read_points(tmp_path / "room.txt").colors, want, atol=1e-7)
    np.savetxt(tmp_path / "named.txt", np.c_[rgb16, xyz], fmt="%d %d %d %.3f %.3f %.3f")
    got = read_points(tmp_path / "named.txt", columns=["r", "g", "b", "x", "y", "z"]).colors
    np.testing.assert_allclose(got, want, atol=1e-7)
    head = (
        f"ply\nformat binary_little_endian 1.0\nelement vertex {len(xyz)}\nproperty float x\nproperty float y\n"
        f"property float z\nproperty ushort red\nproperty ushort green\nproperty ushort blue\nend_header\n"
    )
    body = b"".join(struct.pack("<fffHHH", *p, *c) for p, c in zip(xyz.tolist(), rgb16.tolist()))
    (tmp_path / "c16.ply").write_bytes(head.encode() + body)
    np.testing.assert_allclose(read_points(tmp_path / "c16.ply").colors, want, atol=1e-7)
    pcd = (
        f"VERSION 0.7\nFIELDS x y z r g b\nSIZE 4 4 4 2 2 2\nTYPE F F F U U U\nCOUNT 1 1 1 1 1 1\n"
        f"WIDTH {len(xyz)}\nHEIGHT 1\nPOINTS {len(xyz)}\nDATA ascii\n"
    )
    pcd += "".join(f"{a} {b} {c} {r} {g} {bl}\n" for (a, b, c), (r, g, bl) in zip(xyz.tolist(), rgb16.tolist()))
    (tmp_path / "c16.pcd").write_text(pcd)
    np.testing.assert_allclose(read_points(tmp_path / "c16.pcd").colors, want, atol=1e-6)
    np.savez(tmp_path / "c16.npz", pos=xyz, rgb=rgb16.astype(np.uint16))
    np.testing.assert_allclose(read_points(tmp_path / "c16.npz").colors, want, atol=1e-7)
    rgb8 = rgb16 // 257  # 8-bit files keep their scale; whole numbers in 0..255 are 8-bit whatever type holds them
    np.savetxt(tmp_path / "room8.txt", np.c_[xyz, rgb8], fmt="%.3f %.3f %.3f %d %d %d")
    np.testing.assert_allclose(read_points(tmp_path / "room8.txt").colors, rgb8 / 255.0, atol=1e-7)
    (tmp_path / "c8.ply").write_bytes(
        head.encode() + b"".join(struct.pack("<fffHHH", *p, *c) for p, c in zip(xyz.tolist(), rgb8.tolist()))
    )
    np.testing.assert_allclose(read_points(tmp_path / "c8.ply").colors, rgb8 / 255.0, atol=1e-7)
    np.savetxt(tmp_path / "no.txt", np.c_[xyz, rgb16 + 70000], fmt="%.3f %.3f %.3f %d %d %d")  # beyond 16 bits
    with pytest.warns(UserWarning, match=r"columns 4-6 are neither unit normals nor colours"):
        assert read_points(tmp_path / "no.txt").colors is None
