"""The LiDAR (.las / .laz through laspy) and glTF (.glb / .gltf through trimesh) readers, and named fields."""

import base64
import json
import struct
import sys

import numpy as np
import pytest

from gridify.io import ReferencedFileNotFoundError, read_mesh, read_points

laspy = pytest.importorskip("laspy")
trimesh = pytest.importorskip("trimesh")


def _las_file(path, n=500, point_format=3, version="1.2", compress=False, seed=0):
    """A LiDAR tile in UTM metres (offset 5e5 / 5.4e6), millimetre scale, with intensity, returns, classes."""
    r = np.random.default_rng(seed)
    header = laspy.LasHeader(point_format=point_format, version=version)
    header.offsets = np.array([512_000.0, 5_412_000.0, 100.0])
    header.scales = np.array([0.001, 0.001, 0.001])
    las = laspy.LasData(header)
    las.x = 512_000 + r.random(n) * 100
    las.y = 5_412_000 + r.random(n) * 100
    las.z = 100 + r.random(n) * 20
    las.intensity = r.integers(0, 65535, n)
    las.return_number = r.integers(1, 4, n)
    las.number_of_returns = np.full(n, 3)
    las.classification = r.integers(1, 7, n)
    las.gps_time = np.arange(n) * 1e-3
    if "red" in las.point_format.dimension_names:
        las.red, las.green, las.blue = (r.integers(0, 65536, n) for _ in range(3))
    las.write(str(path), do_compress=compress)
    return laspy.read(str(path))


@pytest.mark.parametrize(
    "ext, point_format, version", [(".las", 3, "1.2"), (".laz", 3, "1.2"), (".las", 6, "1.4"), (".laz", 7, "1.4")]
)
def test_las_and_laz(tmp_path, ext, point_format, version):
    pytest.importorskip("lazrs")
    f = tmp_path / f"tile{ext}"
    ref = _las_file(f, point_format=point_format, version=version, compress=ext == ".laz")
    cloud = read_points(f)
    assert cloud.points.dtype == np.float64  # large offset: kept
    np.testing.assert_array_equal(cloud.points, np.stack([ref.x, ref.y, ref.z], 1))
    assert cloud.labels is None and cloud.fields == {} and cloud.normals is None
    if point_format in (3, 7):
        np.testing.assert_allclose(cloud.colors, np.stack([ref.red, ref.green, ref.blue], 1) / 65535.0, atol=1e-7)
    kept = read_points(f, fields=["intensity", "return_number", "gps_time"], labels_from="classification")
    np.testing.assert_array_equal(kept.labels, np.asarray(ref.classification))
    assert kept.labels.dtype == np.int64
    np.testing.assert_array_equal(kept.fields["intensity"], np.asarray(ref.intensity))
    assert kept.fields["intensity"].dtype == np.uint16
    np.testing.assert_array_equal(kept.fields["return_number"], np.asarray(ref.return_number))
    np.testing.assert_allclose(kept.fields["gps_time"], np.arange(500) * 1e-3)
    every = read_points(f, fields="all")
    assert {"intensity", "classification", "number_of_returns", "point_source_id"} <= set(every.fields)
    assert not {"X", "Y", "Z", "red", "green", "blue"} & set(every.fields)


def test_field_options_errors(tmp_path):
    f = tmp_path / "tile.las"
    _las_file(f, n=20)
    with pytest.raises(
        ValueError,
        match=r"tile\.las: fields=: the file has no per-point field 'colour'; "
        r"its fields are \[.*'intensity'.*\]",
    ):
        read_points(f, fields=["colour"])
    with pytest.raises(ValueError, match=r"labels_from=: the file has no per-point field 'label'"):
        read_points(f, labels_from="label")
    assert read_points(f, fields=["INTENSITY"]).fields.keys() == {"intensity"}  # case-insensitive fallback
    g = tmp_path / "cloud.xyz"
    g.write_text("1 2 3\n")
    with pytest.raises(
        ValueError,
        match=r"cloud\.xyz: read_points option labels_from= does not apply to \.xyz "
        r"files \(formats with named per-point fields: \.pcd \.ply \.las \.laz \.bin\)",
    ):
        read_points(g, labels_from="classification")
    with pytest.raises(ValueError, match=r"read_points: fields must be \"all\" or a sequence of field names"):
        read_points(f, fields="intensity")
    with pytest.raises(ValueError, match=r"labels_from=.gps_time.: the field holds non-integer values"):
        read_points(f, labels_from="gps_time")


def test_ply_and_pcd_named_fields(tmp_path):
    """CloudCompare writes LiDAR classes as a 'scalar_Classification' vertex property."""
    n = 5
    body = b"".join(struct.pack("<3f2f", i, 0, 0, 10.0 * i, float(i % 2)) for i in range(n))
    f = tmp_path / "cc.ply"
    f.write_bytes(
        f"ply\nformat binary_little_endian 1.0\nelement vertex {n}\nproperty float x\nproperty float y\n"
        f"property float z\nproperty float scalar_Intensity\nproperty float scalar_Classification\n"
        f"end_header\n".encode()
        + body
    )
    c = read_points(f, fields=["scalar_Intensity"], labels_from="scalar_Classification")
    assert c.labels.tolist() == [0, 1, 0, 1, 0] and c.fields["scalar_Intensity"].tolist() == [0, 10, 20, 30, 40]
    assert read_points(f).fields == {} and read_points(f).labels is None
    g = tmp_path / "i.pcd"
    g.write_bytes(
        b"VERSION 0.7\nFIELDS x y z rgb intensity label\nSIZE 4 4 4 4 4 4\nTYPE F F F U F I\n"
        b"COUNT 1 1 1 1 1 1\nWIDTH 2\nHEIGHT 1\nPOINTS 2\nDATA ascii\n0 0 0 255 0.5 3\n1 0 0 65280 0.25 4\n"
    )
    c = read_points(g, fields="all")
    assert set(c.fields) == {"intensity", "label"} and c.labels.tolist() == [3, 4]  # rgb is in colors
    np.testing.assert_allclose(c.colors, [[0, 0, 1], [0, 1, 0]])
    assert c.fields["intensity"].dtype == np.float32 and c.fields["label"].dtype == np.int32
    with pytest.raises(ValueError, match=r"i\.pcd: labels_from='intensity': the field holds non-integer values"):
        read_points(g, labels_from="intensity")


def test_missing_laspy_names_the_install(tmp_path, monkeypatch):
    f = tmp_path / "tile.las"
    _las_file(f, n=10)
    monkeypatch.setitem(sys.modules, "laspy", None)  # import laspy -> ImportError
    with pytest.raises(
        ValueError,
        match=r"tile\.las: reading \.las files needs the optional package laspy: "
        r"pip install 'gridify\[las\]'",
    ):
        read_points(f)


def test_missing_lazrs_names_the_install(tmp_path, monkeypatch):
    pytest.importorskip("lazrs")
    f = tmp_path / "tile.laz"
    _las_file(f, n=10, compress=True)
    monkeypatch.setattr(laspy.LazBackend, "is_available", lambda self: False)
    with pytest.raises(
        ValueError,
        match=r"tile\.laz: reading compressed LAS \(\.laz\) needs the optional package "
        r"lazrs: pip install 'gridify\[las\]'",
    ):
        read_points(f)


def test_corrupt_lidar_headers(tmp_path):
    pytest.importorskip("lazrs")
    f = tmp_path / "tile.las"
    _las_file(f, n=100)
    data = bytearray(f.read_bytes())
    struct.pack_into("<I", data, 107, 1_000_000_000)  # legacy point count
    f.write_bytes(bytes(data))
    with pytest.raises(
        ValueError,
        match=r"tile\.las: truncated LAS: header declares 1000000000 points of 34 bytes "
        r"\(34000000000 bytes\) but only 3400 bytes of point data follow",
    ):
        read_points(f)
    struct.pack_into("<I", data, 107, 100)
    struct.pack_into("<I", data, 100, 4_000_000_000)  # number of VLRs: laspy would loop 4e9 times
    f.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"corrupt LAS header: 4000000000 VLRs \(at least 54 bytes each\)"):
        read_points(f)
    (tmp_path / "short.las").write_bytes(bytes(data[:200]))
    with pytest.raises(ValueError, match=r"short\.las: truncated LAS: 200 bytes, the header alone takes 227"):
        read_points(tmp_path / "short.las")
    z = tmp_path / "tile.laz"
    _las_file(z, n=100, compress=True)
    raw = bytearray(z.read_bytes())
    start = struct.unpack_from("<I", raw, 96)[0]
    table = struct.unpack_from("<q", raw, start)[0]
    struct.pack_into("<I", raw, table + 4, 0xFFFFFFFF)  # lazrs would allocate 64 GB and abort the process
    z.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"tile\.laz: corrupt LAZ: chunk table declares 4294967295 chunks"):
        read_points(z)
    struct.pack_into("<I", raw, table + 4, 1)
    struct.pack_into("<I", raw, 107, 50_000_000)
    z.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"corrupt LAZ: header declares 50000000 points .* \(limit 100x\)"):
        read_points(z)


# --------------------------------------------------------------------------------------
# glTF
# --------------------------------------------------------------------------------------
def _tetra(offset=(0.0, 0.0, 0.0)):
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float) + offset
    return trimesh.Trimesh(v, [[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]], process=False)


def _on_tetra(points, offset=(0.0, 0.0, 0.0)):
    local = points - np.asarray(offset)
    return bool((local >= -1e-5).all() and (local.sum(1) <= 1 + 1e-5).all())


def test_glb_and_embedded_gltf(tmp_path):
    scene = trimesh.Scene()
    scene.add_geometry(_tetra(), node_name="a", transform=trimesh.transformations.translation_matrix([10, 0, 0]))
    glb = tmp_path / "scene.glb"
    glb.write_bytes(scene.export(file_type="glb"))
    c = read_points(glb, num_samples=300, seed=1)
    assert c.points.shape == (300, 3) and c.normals.shape == (300, 3)
    assert _on_tetra(c.points, (10, 0, 0))  # the node's transform is applied
    np.testing.assert_array_equal(c.points, read_points(glb, num_samples=300, seed=1).points)
    vertices, faces = read_mesh(glb)
    assert vertices.shape == (4, 3) and faces.shape == (4, 3)
    gltf = tmp_path / "scene.gltf"
    gltf.write_bytes(trimesh.exchange.gltf.export_gltf(scene, embed_buffers=True)["model.gltf"])
    assert _on_tetra(read_points(gltf, num_samples=100).points, (10, 0, 0))


def test_gltf_with_a_buffer_file_beside_it(tmp_path):
    files = _tetra().export(file_type="gltf")  # model.gltf + gltf_buffer_*.bin
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert len(files) > 1
    c = read_points(tmp_path / "model.gltf", num_samples=50)
    assert _on_tetra(c.points)
    tree = json.loads(files["model.gltf"])
    bad = tmp_path / "bad.gltf"

    def rejected(match, error=ValueError):
        bad.write_text(json.dumps(tree))
        with pytest.raises(error, match=match) as err:
            read_points(bad)
        return err.value

    for uri in ("../outside.bin", "/etc/passwd", "http://example.com/x.bin", "sub/x.bin"):
        tree["buffers"][0]["uri"] = uri
        rejected(
            r"bad\.gltf: glTF buffer 0 refers to .*; only files in the same folder as the \.gltf \(a plain "
            r"file name\) are read"
        )
    tree["buffers"][0]["uri"] = "missing.bin"
    rejected(r"missing\.bin: no such file", FileNotFoundError)
    # the file being read is unusable as it stands: also a ValueError, naming both files
    exc = rejected(
        r"bad\.gltf: glTF buffer 0 refers to 'missing\.bin', which is missing \(.*missing\.bin: no such "
        r"file\)"
    )
    assert isinstance(exc, ReferencedFileNotFoundError)
    tree["buffers"][0]["uri"] = "data:application/octet-stream;base64,AAAA"  # 3 bytes, views need more
    rejected(r"bad\.gltf: glTF bufferView 0 spans bytes \[0, \d+\) of buffer 0, which holds 3 bytes")
    tree["buffers"][0]["uri"] = "data:application/octet-stream;base64,AAA"
    rejected(r"bad\.gltf: glTF buffer 0 has corrupt base64 data in its URI")
    tree["buffers"][0]["uri"] = json.loads(files["model.gltf"])["buffers"][0]["uri"]
    tree["bufferViews"][0]["buffer"] = 7
    rejected(r"bad\.gltf: glTF bufferView 0 names buffer 7, but the file has 2")


def _gltf(accessors, nodes, mesh_mode=4, buffer=b""):
    tree = {
        "asset": {"version": "2.0"},
        "scene": 0,
        "scenes": [{"nodes": list(range(len(nodes)))}],
        "nodes": nodes,
        "meshes": [{"primitives": [{"attributes": {"POSITION": 0}, "mode": mesh_mode}]}],
        "buffers": [
            {
                "byteLength": len(buffer),
                "uri": "data:application/octet-stream;base64," + base64.b64encode(buffer).decode(),
            }
        ],
        "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": len(buffer)}],
        "accessors": accessors,
    }
    return json.dumps(tree).encode()


def test_gltf_point_primitives_are_a_point_cloud(tmp_path):
    pts = np.random.default_rng(0).random((10, 3)).astype("<f4")
    acc = [{"bufferView": 0, "componentType": 5126, "count": 10, "type": "VEC3"}]
    f = tmp_path / "points.gltf"
    f.write_bytes(_gltf(acc, [{"mesh": 0}], mesh_mode=0, buffer=pts.tobytes()))
    np.testing.assert_allclose(np.sort(read_points(f).points, 0), np.sort(pts, 0))


def test_gltf_size_bombs_are_refused(tmp_path):
    acc = [{"componentType": 5126, "count": 1_000_000_000, "type": "VEC3"}]  # no bufferView: zeros
    f = tmp_path / "bomb.gltf"
    f.write_bytes(_gltf(acc, [{"mesh": 0}]))
    with pytest.raises(
        ValueError,
        match=r"bomb\.gltf: glTF accessor 0 declares 1000000000 items \(12000000000 "
        r"bytes\), more than the \d+ bytes of data the file holds",
    ):
        read_points(f)
    # one mesh instanced at 2,000 nodes: flattened, 2,000 copies of its vertices and faces
    sphere = trimesh.creation.icosphere(4)
    scene = trimesh.Scene()
    for i in range(2000):
        scene.add_geometry(
            sphere, geom_name="s", node_name=f"n{i}", transform=trimesh.transformations.translation_matrix([i, 0, 0])
        )
    g = tmp_path / "instanced.glb"
    g.write_bytes(scene.export(file_type="glb"))
    assert g.stat().st_size < 1_000_000
    with pytest.raises(
        ValueError,
        match=r"instanced\.glb: the scene places its meshes at 2000 nodes: flattened it "
        r"would hold more than \d+ bytes of vertices and faces \(64x the file's "
        r"size\); refusing",
    ):
        read_points(g)


def test_corrupt_glb(tmp_path):
    data = _tetra().export(file_type="glb")
    cases = {
        b"xxxx" + data[4:]: r"not a GLB file \(does not start with 'glTF'\)",
        data[:12]: r"truncated GLB \(12 bytes; the header alone is 20\)",
        data[:60]: r"truncated GLB: the JSON chunk declares \d+ bytes but only 40 follow the header",
        data[:16] + b"BIN\x00" + data[20:]: r"corrupt GLB \(the first chunk is not JSON\)",
        data[:4] + b"\x01" + data[5:]: r"GLB version 1; only glTF 2\.0 is supported",
    }
    for i, (raw, match) in enumerate(cases.items()):
        f = tmp_path / f"c{i}.glb"
        f.write_bytes(raw)
        with pytest.raises(ValueError, match=match):
            read_points(f)
    f = tmp_path / "list.gltf"
    f.write_bytes(b"[1, 2, 3]")
    with pytest.raises(ValueError, match=r"list\.gltf: not a glTF file \(its JSON is a list, not an object\)"):
        read_points(f)


def test_las_header_counting_fewer_points_than_its_records_is_refused(tmp_path):
    """Reading the declared points only would drop the others silently."""
    f = tmp_path / "tile.las"
    _las_file(f, n=50)
    data = bytearray(f.read_bytes())
    struct.pack_into("<I", data, 107, 40)  # the LAS 1.2 point count: 40 of the 50 records
    f.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"tile\.las: corrupt LAS header: it declares 40 points but 50 records"):
        read_points(f)


@pytest.mark.parametrize("scale", [0.0, float("nan")])
def test_las_scale_zero_is_refused_not_collapsed(tmp_path, scale):
    f = tmp_path / "tile.las"
    _las_file(f, n=20)
    data = bytearray(f.read_bytes())
    struct.pack_into("<d", data, 139, scale)  # y scale factor
    f.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"tile\.las: corrupt LAS header: y scale"):
        read_points(f)


@pytest.mark.parametrize(
    "name, body, option, takers",
    [
        ("scan.bin", np.zeros((4, 4), np.float32).tobytes(), {"columns": ("x", "y", "z", "_")}, r"\.npy .*\.xyz"),
        ("cloud.xyz", b"1 2 3\n4 5 6\n", {"fields": "all"}, r"\.pcd \.ply"),
        ("cloud.npy", None, {"labels_from": "label"}, r"\.las"),
    ],
    ids=["columns-bin", "fields-xyz", "labels_from-npy"],
)
def test_an_option_the_format_cannot_honour_is_refused(tmp_path, name, body, option, takers):
    """read_points' dispatch refuses every option a format's reader does not take, instead of dropping it
    (columns= on a headerless .bin scan was ignored); num_samples / seed stay mesh-only, as documented."""
    f = tmp_path / name
    if body is None:
        np.save(f, np.zeros((4, 3), np.float32))
    else:
        f.write_bytes(body)
    (key,) = option
    with pytest.raises(
        ValueError, match=rf"{name}: read_points option {key}= does not apply to \.\w+ files \(.*{takers}"
    ):
        read_points(f, **option)
    assert len(read_points(f, num_samples=7, seed=3)) == (2 if name == "cloud.xyz" else 4)
