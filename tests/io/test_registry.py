"""The format registry of gridify.io: built-in table, user formats, validation, the low-layer import rule."""

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

import gridify.io as gio
from gridify.io import (
    PointCloud,
    describe_formats,
    find_format,
    formats,
    read_mesh,
    read_points,
    register_mesh_reader,
    register_reader,
    unregister_reader,
)

# the extensions (and their order) of the module before the registry existed
BUILTIN = (
    ".pcd",
    ".ply",
    ".npy",
    ".npz",
    ".xyz",
    ".txt",
    ".pts",
    ".csv",
    ".xyzn",
    ".xyzrgb",
    ".las",
    ".laz",
    ".bin",
    ".off",
    ".obj",
    ".stl",
    ".glb",
    ".gltf",
)


@pytest.fixture(autouse=True)
def builtin_table_restored():
    """Every test leaves the registry as it found it (the built-in formats only)."""
    assert gio.SUPPORTED_EXTENSIONS == BUILTIN
    yield
    assert gio.SUPPORTED_EXTENSIONS == BUILTIN, "a test left a format registered"


def _read_foo(path: Path, *, columns=None) -> PointCloud:
    """Toy format: one ``x y z`` line per point; ``columns`` recorded in the source."""
    table = np.loadtxt(path, ndmin=2)
    return PointCloud(table[:, :3], source=f"columns={columns}")


def test_builtin_table():
    assert gio.MESH_EXTENSIONS == (".off", ".obj", ".stl", ".glb", ".gltf")
    assert [f.extensions for f in formats()] == [
        (".pcd",),
        (".ply",),
        (".npy",),
        (".npz",),
        (".xyz", ".txt", ".pts", ".csv"),
        (".xyzn", ".xyzrgb"),
        (".las", ".laz"),
        (".bin",),
        (".off",),
        (".obj", ".stl"),
        (".glb", ".gltf"),
    ]
    assert find_format(".PLY").mesh_reader is not None and not find_format(".ply").is_mesh
    assert find_format(".txt").options == ("columns",) and find_format(".npz").options == ()
    assert find_format(".off").options == ("num_samples", "seed") and find_format(".foo") is None
    assert find_format(".LAZ").options == ("fields", "labels_from") == find_format(".pcd").options
    assert find_format(".bin").options == ("fields", "labels_from")
    assert gio.reader_takes("scan.BIN", "fields") and gio.reader_takes("a/b.ply", "num_samples")
    assert not gio.reader_takes("cloud.xyz", "fields") and not gio.reader_takes("x.foo", "fields")
    assert find_format(".ply").options == ("num_samples", "seed", "fields", "labels_from")
    assert gio.READ_OPTIONS == ("num_samples", "seed", "columns", "fields", "labels_from")
    table = describe_formats()
    for ext in BUILTIN:
        assert ext in table
    assert "surface-sampled" in table and "trimesh" in table and "pip install 'gridify[las]'" in table
    assert table in gio.__doc__  # the package docstring shows the registry's table
    assert {"SUPPORTED_EXTENSIONS", "MESH_EXTENSIONS", "register_reader"} <= set(dir(gio))
    with pytest.raises(AttributeError, match="no attribute 'NOPE'"):
        gio.NOPE  # noqa: B018


def test_register_a_reader_for_a_new_extension(tmp_path):
    f = tmp_path / "toy.FOO"
    f.write_text("0 0 0\n1 2 3\nnan 0 0\n")
    with pytest.raises(ValueError, match=r"toy\.FOO: unsupported file extension '\.FOO'; supported: \.pcd, "):
        read_points(f)
    decorated = register_reader(".foo", "toy format, one ``x y z`` line per point", options=("columns",))(_read_foo)
    try:
        assert decorated is _read_foo
        assert gio.SUPPORTED_EXTENSIONS == BUILTIN + (".foo",) and ".foo" not in gio.MESH_EXTENSIONS
        assert "``.foo``" in describe_formats() and "toy format" in describe_formats()
        with pytest.warns(UserWarning, match=r"dropped 1 of 3 points") as rec:
            c = read_points(f, columns=("x", "y", "z"))
        assert rec[0].filename == __file__  # the warning points at the caller of read_points
        np.testing.assert_array_equal(c.points, [[0, 0, 0], [1, 2, 3]])
        assert c.source == str(f)  # read_points names the cloud after the file
        with pytest.raises(ValueError, match=r"toy\.FOO: 1 of 3 points have NaN/Inf"):
            read_points(f, drop_invalid=False)
        with pytest.raises(
            ValueError,
            match=r"toy\.FOO: unsupported mesh extension '\.FOO'; "
            r"supported: \.off \.obj \.stl \.glb \.gltf \.ply$",
        ):
            read_mesh(f)  # a point-cloud format has no mesh reader
    finally:
        unregister_reader(".foo")
    with pytest.raises(ValueError, match=r"unsupported file extension '\.FOO'; supported: \.pcd, .*\.gltf$"):
        read_points(f)


def test_a_reader_gets_only_its_options_and_its_errors_name_the_file(tmp_path):
    seen = []

    def plain(path):
        seen.append(path)
        raise KeyError("no such field")

    def sampled(path, *, num_samples, seed):
        seen.append((num_samples, seed))
        return PointCloud(np.zeros((0, 3)))

    register_reader((".aa", ".bb"), "plain toy", plain)
    register_reader(".cc", "sampled toy", sampled, options=("seed", "num_samples"))
    try:
        for ext in (".aa", ".bb", ".cc"):
            (tmp_path / f"t{ext}").write_text("x")
        # an option the reader does not take is refused before it runs, never dropped
        with pytest.raises(ValueError, match=r"t\.aa: read_points option columns= does not apply to \.aa files"):
            read_points(tmp_path / "t.aa", columns=("x", "y", "z"))
        assert seen == []
        with pytest.raises(ValueError, match=r"t\.aa: could not read \.aa file \(KeyError: 'no such field'\)"):
            read_points(tmp_path / "t.aa")
        assert seen == [tmp_path / "t.aa"]
        with pytest.raises(ValueError, match=r"t\.cc: file contains no points"):
            read_points(tmp_path / "t.cc", num_samples=7.0, seed=3)
        assert seen[-1] == (7, 3) and type(seen[-1][0]) is int
        assert find_format(".cc").options == ("num_samples", "seed")  # kept in READ_OPTIONS order
    finally:
        unregister_reader((".aa", ".bb", ".cc"))


def test_replace_keeps_the_order_and_the_other_extensions(tmp_path):
    register_reader((".aa", ".bb"), "first toy", _read_foo)
    register_reader(".cc", "second toy", _read_foo)
    try:
        with pytest.raises(
            ValueError,
            match=r"register_reader: \.bb already has a reader \('first toy'\); "
            r"pass replace=True",
        ):
            register_reader(".bb", "third toy", _read_foo)
        register_reader(".BB", "third toy", _read_foo, replace=True)
        assert gio.SUPPORTED_EXTENSIONS[-3:] == (".aa", ".bb", ".cc")
        assert [(f.extensions, f.description) for f in formats()][-3:] == [
            ((".aa",), "first toy"),
            ((".bb",), "third toy"),
            ((".cc",), "second toy"),
        ]
        unregister_reader(".aa")
        assert find_format(".aa") is None and find_format(".bb").description == "third toy"
    finally:
        unregister_reader((".bb", ".cc"))
    with pytest.raises(KeyError, match=r"unregister_reader: no reader is registered for \.bb"):
        unregister_reader(".bb")


def test_register_a_mesh_format(tmp_path):
    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float)
    f = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])

    @register_mesh_reader(".tet", "toy tetrahedron")
    def read_tet(path):
        return v, f

    try:
        assert gio.MESH_EXTENSIONS == (".off", ".obj", ".stl", ".glb", ".gltf", ".tet")
        fmt = find_format(".tet")
        assert fmt.is_mesh and fmt.mesh_reader is read_tet and fmt.options == ("num_samples", "seed")
        path = tmp_path / "a.tet"
        path.write_text("tet")
        vertices, faces = read_mesh(path)
        np.testing.assert_array_equal(faces, f)
        c = read_points(path, num_samples=64, seed=1)
        assert c.points.shape == (64, 3) and c.normals.shape == (64, 3)
        np.testing.assert_array_equal(c.points, read_points(path, num_samples=64, seed=1).points)
        other = tmp_path / "a.xyz"
        other.write_text("1 2 3\n")
        with pytest.raises(
            ValueError,
            match=r"a\.xyz: unsupported mesh extension '\.xyz'; "
            r"supported: \.off \.obj \.stl \.glb \.gltf \.tet \.ply$",
        ):
            read_mesh(other)
    finally:
        unregister_reader(".tet")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(extensions="foo"), ValueError, r"an extension is a dot followed by a name .* got 'foo'"),
        (dict(extensions=".tar.gz"), ValueError, r"got '\.tar\.gz'"),
        (dict(extensions=()), ValueError, r"give at least one extension"),
        (dict(options=("colums",)), ValueError, r"unknown options \['colums'\]; a reader may take"),
        (dict(description="two\nlines"), ValueError, r"description must be one non-empty line"),
        (dict(description=" "), ValueError, r"description must be one non-empty line"),
        (dict(reader=42), TypeError, r"reader must be callable, got int"),
        (dict(is_mesh=True), ValueError, r"a mesh format \(\.qq\) needs a mesh_reader"),
        (dict(mesh_reader="read"), TypeError, r"mesh_reader must be callable, got str"),
        (dict(extensions=".PLY"), ValueError, r"\.ply already has a reader"),
    ],
)
def test_register_reader_refuses_bad_arguments(kwargs, error, message):
    args = dict(extensions=".qq", description="toy", reader=_read_foo) | kwargs
    with pytest.raises(error, match=message):
        register_reader(args.pop("extensions"), args.pop("description"), args.pop("reader"), **args)


def test_io_is_a_low_layer():
    """gridify.io imports only numpy, torch, the standard library, gridify._files / _checks / ops.knn
    (the one neighbour search, for repair_normals: io sits just above ops) and itself at module level;
    trimesh, scipy and laspy only inside the functions that need them."""
    lazy = {"trimesh", "scipy", "laspy"}
    for path in sorted(Path(gio.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        top = set(tree.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    continue
                if node.level == 2:
                    assert node.module in ("_files", "_checks", "ops.knn"), (path.name, node.module)
                    continue
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                ok = root in sys.stdlib_module_names or root in ("numpy", "torch") or (root in lazy and node not in top)
                assert ok, f"{path.name}:{node.lineno} imports {root}"


def test_a_user_reader_whose_sidecar_is_missing_raises_an_error_naming_both_files(tmp_path):
    def with_sidecar(path):
        return PointCloud(np.loadtxt(Path(str(path) + ".labels")))  # FileNotFoundError from numpy

    register_reader(".sc", "toy format with a sidecar file", with_sidecar)
    try:
        (tmp_path / "t.sc").write_text("x")
        with pytest.raises(
            ValueError,
            match=r"t\.sc: could not read \.sc file: a file it refers to is missing "
            r"\(.*t\.sc\.labels",
        ) as err:
            read_points(tmp_path / "t.sc")
        assert isinstance(err.value, FileNotFoundError) and isinstance(err.value, gio.ReferencedFileNotFoundError)
    finally:
        unregister_reader(".sc")
