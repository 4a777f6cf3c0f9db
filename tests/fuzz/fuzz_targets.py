"""Fuzz targets for the file readers of :mod:`gridify.io`, one per format.

A target takes the bytes of a file, writes them under the format's extension and reads them with
:func:`gridify.io.read_points`. The contract for *any* input bytes:

* either a valid :class:`~gridify.io.PointCloud` comes back (points ``[N >= 1, 3]`` float32, or
  float64 for large-offset coordinates, and finite; normals/colors ``[N, 3]`` float32, colours
  in ``[0, 1]``; labels ``[N]`` int64; fields ``[N]`` each),
* or :class:`ValueError` is raised and its message names the file;
* within :data:`TIME_LIMIT` seconds;
* growing the memory traced by ``tracemalloc`` (NumPy's allocations included) by at most
  :func:`memory_limit` bytes: ``MEMORY_MULTIPLE x size x EXPANSION[ext] + MEMORY_CONSTANT``.

Anything else (another exception type, an error that does not name the file, a hang, an
invalid cloud, a reader that allocates what a header declares instead of what the file holds)
is a crash. Inputs are well-formed seed files (built here, no data files needed) mutated
byte-wise; :func:`mutated_files` is the hypothesis strategy, used by
``tests/fuzz/test_fuzz_readers.py`` (bounded, in the default tests) and ``scripts/fuzz.py``
(time-bounded, in ``.ci/run``). :data:`MEMORY` records the largest growth seen per format.
"""

from __future__ import annotations

import io
import os
import signal
import struct
import tempfile
import tracemalloc
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np

from gridify.io import PointCloud, read_points
from gridify.io.las import LAZ_MAX_RATIO
from gridify.io.npy import NPZ_MAX_EXPANSION
from gridify.io.pcd import LZF_MAX_RATIO
from gridify.io.trimesh_formats import INSTANCE_EXPANSION

#: seconds one read may take before it counts as a hang
TIME_LIMIT = 10.0

try:  # the LAS/LAZ targets need the optional extra (pip install 'gridify[las]')
    import laspy  # noqa: F401
    import lazrs  # noqa: F401

    HAVE_LAS = True
except ImportError:  # pragma: no cover - exercised where the extra is not installed
    HAVE_LAS = False

FORMATS = (".ply", ".pcd", ".xyz", ".txt", ".npy", ".npz", ".bin", ".off", ".obj", ".stl", ".glb", ".gltf") + (
    (".las", ".laz") if HAVE_LAS else ()
)

# Memory bound. Measured (tracemalloc peak growth of one read_points; large_files() and crafted
# worst cases of 0.1-13 MB): plain binary data needs 3-8x its size (int8 .npy: 15x, every value
# becomes a float64), text 4-9x (16x for '1 2 3' lines), meshes 7-16x, and the worst layouts
# 26-38x: OFF/OBJ/PLY meshes of 8-10-byte faces (each face becomes 24-byte float64 vertex
# temporaries while sampling) and text whose numbers do not parse, which takes the careful path
# of one Python bytes object per token. A small file costs at most ~70 kB whatever it holds
# (trimesh's scene, a 64-point sample, an exception). A reader that trusts a size declared in a
# header allocates 100x to 100,000,000x the file. The multiple leaves a margin of 1.7x over
# the worst layout (4x over typical files); the constant, 60x over the worst small file, is still
# 3x below what a 1 kB file declaring a million points would allocate.
#: the multiple of the (expanded) file size a read may allocate
MEMORY_MULTIPLE = 64
#: the bytes any read may allocate whatever the file's size
MEMORY_CONSTANT = 4 << 20
#: how much a format's data may expand when decoded: its codec's (or instancing's) checked limit
EXPANSION = {
    ".pcd": LZF_MAX_RATIO,
    ".npz": NPZ_MAX_EXPANSION,
    ".laz": LAZ_MAX_RATIO,
    ".glb": INSTANCE_EXPANSION,
    ".gltf": INSTANCE_EXPANSION,
}
#: per format, the reads that came closest to the bound: {"share": (growth / bound, growth, size),
#: "ratio": (growth / size, growth, size)}; the ratio only over files of RATIO_MIN_SIZE bytes or more
#: (below, a few kB of fixed cost make any ratio huge)
MEMORY: Dict[str, Dict[str, Tuple[float, int, int]]] = {}
RATIO_MIN_SIZE = 256


def memory_limit(ext: str, size: int) -> int:
    """The most a read of a ``size``-byte ``ext`` file may grow traced memory by (see the module docstring)."""
    return MEMORY_MULTIPLE * size * EXPANSION.get(ext, 1) + MEMORY_CONSTANT


class ReaderCrash(AssertionError):
    """A reader broke its contract on some input."""


class _Hang(BaseException):
    pass


@contextmanager
def _time_limit(seconds: float):
    if not hasattr(signal, "SIGALRM"):  # pragma: no cover - Windows: no hang detection
        yield
        return

    def on_alarm(signum, frame):
        raise _Hang()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------------------
# seed files
# --------------------------------------------------------------------------------------
def _cloud(n: int = 6, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)


def _ply(binary: bool, faces: bool = False, extra: bool = True, n: int = 6) -> bytes:
    pts = _cloud(n)
    fmt = "binary_little_endian" if binary else "ascii"
    head = [
        "ply",
        f"format {fmt} 1.0",
        f"element vertex {len(pts)}",
        "property float x",
        "property float y",
        "property float z",
    ]
    if extra:
        head += [
            "property float nx",
            "property float ny",
            "property float nz",
            "property uchar red",
            "property uchar green",
            "property uchar blue",
            "property int label",
        ]
    tris = [(0, 1, 2), (0, 2, 3), (3, 4, 5)]
    if faces:
        head += [f"element face {len(tris)}", "property list uchar int vertex_indices"]
    head.append("end_header")
    out = io.BytesIO()
    out.write(("\n".join(head) + "\n").encode())
    nrm = pts / np.linalg.norm(pts, axis=1, keepdims=True)
    for i, p in enumerate(pts):
        if binary:
            out.write(struct.pack("<3f", *p))
            if extra:
                out.write(struct.pack("<3f3Bi", *nrm[i], 10 * i % 256, 20, 30, i % 3))
        else:
            vals = [*p] + ([*nrm[i], 10 * i % 256, 20, 30, i % 3] if extra else [])
            out.write((" ".join(repr(float(v)) if j < 6 else str(int(v)) for j, v in enumerate(vals)) + "\n").encode())
    if faces:
        for t in tris:
            out.write(struct.pack("<B3i", 3, *t) if binary else (f"3 {t[0]} {t[1]} {t[2]}\n").encode())
    return out.getvalue()


def _pcd(kind: str, n: int = 6) -> bytes:
    pts = _cloud(n)
    head = [
        "# .PCD v0.7",
        "VERSION 0.7",
        "FIELDS x y z rgb label",
        "SIZE 4 4 4 4 4",
        "TYPE F F F U I",
        "COUNT 1 1 1 1 1",
        f"WIDTH {len(pts)}",
        "HEIGHT 1",
        "VIEWPOINT 0 0 0 1 0 0 0",
        f"POINTS {len(pts)}",
        f"DATA {kind}",
    ]
    dt = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("rgb", "<u4"), ("label", "<i4")])
    arr = np.zeros(len(pts), dt)
    arr["x"], arr["y"], arr["z"] = pts.T
    arr["rgb"] = (np.arange(len(pts)) * 0x010203) & 0xFFFFFF
    arr["label"] = np.arange(len(pts)) % 2
    body = b""
    if kind == "ascii":
        body = "".join(f"{r['x']} {r['y']} {r['z']} {r['rgb']} {r['label']}\n" for r in arr).encode()
    elif kind == "binary":
        body = arr.tobytes()
    else:  # binary_compressed with an all-literal LZF stream
        raw = b"".join(arr[name].tobytes() for name in dt.names)
        lzf = bytearray()
        for i in range(0, len(raw), 32):
            chunk = raw[i : i + 32]
            lzf.append(len(chunk) - 1)
            lzf += chunk
        body = struct.pack("<II", len(lzf), len(raw)) + bytes(lzf)
    return ("\n".join(head) + "\n").encode() + body


def _text(sep: str = " ", cols: int = 6, header: bool = False, n: int = 6) -> bytes:
    pts = _cloud(n)
    nrm = pts / np.linalg.norm(pts, axis=1, keepdims=True)
    table = np.concatenate([pts, nrm, (np.arange(len(pts)) % 3)[:, None]], 1)[:, :cols]
    lines = [sep.join(f"{v:.6f}" for v in row) for row in table]
    return ((f"{len(pts)}\n" if header else "") + "# comment\n" + "\n".join(lines) + "\n").encode()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _npz(compressed: bool = False, n: int = 6) -> bytes:
    pts = _cloud(n)
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(
        buf,
        pos=pts,
        normal=pts / np.linalg.norm(pts, axis=1, keepdims=True),
        color=np.full((len(pts), 3), 128, np.uint8),
        label=np.arange(len(pts)),
    )
    return buf.getvalue()


def _off() -> bytes:
    return b"OFF\n4 4 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 1 2\n3 0 1 3\n3 0 2 3\n4 1 2 3 0\n"


def _obj() -> bytes:
    return b"# tetra\nv 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nvn 0 0 1\nf 1 2 3\nf 1 2 4\nf 1/1/1 3/1/1 4/1/1\nf 2 3 4\n"


def _stl(binary: bool) -> bytes:
    tris = [
        ((0, 0, 0), (1, 0, 0), (0, 1, 0)),
        ((0, 0, 0), (1, 0, 0), (0, 0, 1)),
        ((0, 0, 0), (0, 1, 0), (0, 0, 1)),
        ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
    ]
    if binary:
        out = bytearray(b"gridify fuzz seed".ljust(80, b" ") + struct.pack("<I", len(tris)))
        for t in tris:
            out += struct.pack("<12fH", 0, 0, 0, *t[0], *t[1], *t[2], 0)
        return bytes(out)
    lines = ["solid s"]
    for t in tris:
        lines += (
            ["facet normal 0 0 0", " outer loop"]
            + [f"  vertex {a} {b} {c}" for a, b, c in t]
            + [" endloop", "endfacet"]
        )
    return ("\n".join(lines + ["endsolid s"]) + "\n").encode()


def _tetra_scene(offset: float = 0.0):
    import trimesh

    v = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], float) + offset
    f = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    return trimesh.Scene(trimesh.Trimesh(v, f, process=False))


def _glb() -> bytes:
    return _tetra_scene().export(file_type="glb")


def _gltf() -> bytes:
    """A .gltf whose buffers are embedded (base64 data URIs): one file, nothing beside it."""
    import trimesh

    return trimesh.exchange.gltf.export_gltf(_tetra_scene(), embed_buffers=True)["model.gltf"]


def _las(compress: bool, point_format: int = 3, version: str = "1.2", n: int = 6) -> bytes:
    """A LiDAR file of ``n`` points in UTM-like metres (large offset), with intensity and classification."""
    import laspy

    header = laspy.LasHeader(point_format=point_format, version=version)
    header.offsets = np.array([500_000.0, 5_400_000.0, 100.0])
    header.scales = np.array([0.001, 0.001, 0.001])
    las = laspy.LasData(header)
    pts = _cloud(n)
    las.x, las.y, las.z = (pts[:, i] * 10 + header.offsets[i] for i in range(3))
    las.intensity = np.arange(n) * 1000 % 65536
    las.classification = np.arange(n) % 3 + 1
    buf = io.BytesIO()
    las.write(buf, do_compress=compress)
    return buf.getvalue()


def _sphere(file_type: str, subdivisions: int) -> bytes:
    import trimesh

    mesh = trimesh.creation.icosphere(subdivisions)
    if file_type == "gltf":
        return trimesh.exchange.gltf.export_gltf(trimesh.Scene(mesh), embed_buffers=True)["model.gltf"]
    data = mesh.export(file_type=file_type)
    return data.encode() if isinstance(data, str) else data


def _kitti_bin(n: int = 6) -> bytes:
    """A KITTI ``.bin`` scan: ``n`` rows of float32 x y z intensity."""
    rows = np.concatenate([_cloud(n), np.linspace(0, 1, n, dtype=np.float32)[:, None]], 1)
    return rows.astype("<f4").tobytes()


def large_files(n: int = 20_000) -> Dict[str, List[bytes]]:
    """Valid files of ``n`` points (meshes: about ``n`` faces) per format, to measure the memory a read takes."""
    sub = max(1, int(round(np.log(max(n, 80) / 20) / np.log(4))))  # an icosphere has 20 x 4**sub faces
    files = {
        ".ply": [_ply(True, n=n), _ply(False, n=n), _sphere("ply", sub)],
        ".pcd": [_pcd("ascii", n), _pcd("binary", n), _pcd("binary_compressed", n)],
        ".xyz": [_text(" ", 3, n=n), _text(",", 7, n=n), b"1 2 3\n" * n],
        ".txt": [_text("\t", 6, n=n)],
        ".npy": [_npy(_cloud(n)), _npy(np.arange(3 * n, dtype=np.int8).reshape(n, 3))],
        ".npz": [_npz(n=n), _npz(compressed=True, n=n)],
        ".bin": [_kitti_bin(n)],
        ".off": [_sphere("off", sub)],
        ".obj": [_sphere("obj", sub)],
        ".stl": [_sphere("stl", sub)],
        ".glb": [_sphere("glb", sub)],
        ".gltf": [_sphere("gltf", sub)],
    }
    if HAVE_LAS:
        files[".las"] = [_las(False, n=n)]
        files[".laz"] = [_las(True, n=n)]
    return files


def seed_files() -> Dict[str, List[bytes]]:
    """Well-formed files of every format (each one reads into a valid cloud)."""
    seeds = {
        ".ply": [_ply(True), _ply(False), _ply(True, faces=True, extra=False), _ply(False, faces=True, extra=False)],
        ".pcd": [_pcd("ascii"), _pcd("binary"), _pcd("binary_compressed")],
        ".xyz": [_text(" ", 3), _text(" ", 6), _text(",", 7), _text(" ", 4, header=True)],
        ".txt": [_text(",", 6), _text("\t", 3)],
        ".npy": [
            _npy(_cloud()),
            _npy(np.concatenate([_cloud(), np.ones((6, 4), np.float32)], 1)),
            _npy(np.arange(18, dtype=np.int16).reshape(6, 3)),
        ],
        ".npz": [_npz(), _npz(compressed=True)],
        ".bin": [_kitti_bin(6), _kitti_bin(1)],
        ".off": [_off()],
        ".obj": [_obj()],
        ".stl": [_stl(True), _stl(False)],
        ".glb": [_glb()],
        ".gltf": [_gltf()],
    }
    if HAVE_LAS:
        seeds[".las"] = [_las(False), _las(False, point_format=6, version="1.4")]
        seeds[".laz"] = [_las(True), _las(True, point_format=1)]
    return seeds


# --------------------------------------------------------------------------------------
# the contract
# --------------------------------------------------------------------------------------
def _check_cloud(cloud: object, where: str) -> None:
    if not isinstance(cloud, PointCloud):
        raise ReaderCrash(f"{where}: returned {type(cloud).__name__}, not a PointCloud")
    n = len(cloud)
    pts = cloud.points
    if n < 1 or pts.shape != (n, 3) or pts.dtype not in (np.float32, np.float64) or not np.isfinite(pts).all():
        raise ReaderCrash(
            f"{where}: invalid points (shape {pts.shape}, dtype {pts.dtype}, finite={bool(np.isfinite(pts).all())})"
        )
    for name in ("normals", "colors"):
        a = getattr(cloud, name)
        if a is not None and (a.shape != (n, 3) or a.dtype != np.float32):
            raise ReaderCrash(f"{where}: invalid {name} (shape {a.shape}, dtype {a.dtype})")
    if cloud.colors is not None and not ((cloud.colors >= 0) & (cloud.colors <= 1)).all():
        raise ReaderCrash(
            f"{where}: colours outside [0, 1] (min {np.nanmin(cloud.colors)}, max {np.nanmax(cloud.colors)})"
        )
    if cloud.labels is not None and (cloud.labels.shape != (n,) or cloud.labels.dtype != np.int64):
        raise ReaderCrash(f"{where}: invalid labels (shape {cloud.labels.shape})")
    if any(np.shape(v) != (n,) for v in cloud.fields.values()):
        raise ReaderCrash(f"{where}: invalid fields ({ {k: np.shape(v) for k, v in cloud.fields.items()} })")


def _traced_read(path: Path) -> Tuple[object, int]:
    """``(read_points(path), or the Exception it raised; bytes of traced memory the read grew by)``."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(1)
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    try:
        try:
            result: object = read_points(path, num_samples=64)
        except (_Hang, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - returned: check_reader classifies it
            result = exc
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        if started:
            tracemalloc.stop()


def _record_memory(ext: str, size: int, grown: int) -> None:
    """Keep the worst reads per format in :data:`MEMORY`; raise a crash past :func:`memory_limit`."""
    worst = MEMORY.setdefault(ext, {"share": (0.0, 0, 0), "ratio": (0.0, 0, 0)})
    for key, value in (("share", grown / memory_limit(ext, size)), ("ratio", grown / max(1, size))):
        if value > worst[key][0] and (key == "share" or size >= RATIO_MIN_SIZE):
            worst[key] = (value, grown, size)
    if grown > memory_limit(ext, size):
        raise ReaderCrash(
            f"{ext}: reading {size} bytes grew memory by {grown} bytes, more than the bound "
            f"{memory_limit(ext, size)} ({MEMORY_MULTIPLE} x {size} x {EXPANSION.get(ext, 1)} "
            f"+ {MEMORY_CONSTANT})"
        )


_WARM: set = set()


def _warm_up(ext: str, workdir: Path) -> None:
    """Read the seeds of ``ext`` once, untraced: lazy imports are not the reader's memory (trimesh, laspy;
    and every text codec, which trimesh imports on its first file that is not UTF-8)."""
    if ext in _WARM:
        return
    _WARM.add(ext)
    import warnings

    for i, data in enumerate(s for seed in seed_files().get(ext, []) for s in (seed, b"\xd0" + seed)):
        path = workdir / f"warm{i}{ext}"
        path.write_bytes(data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                read_points(path, num_samples=64)
            except ValueError:
                pass


def check_reader(ext: str, data: bytes, workdir: os.PathLike | str | None = None) -> str:
    """Run the reader of ``ext`` on ``data``; returns ``"ok"`` or ``"rejected"``, raises :class:`ReaderCrash`."""
    import warnings

    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="gridify-fuzz-")
        workdir = tmp.name
    _warm_up(ext, Path(workdir))
    path = Path(workdir) / f"input{ext}"
    path.write_bytes(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with _time_limit(TIME_LIMIT):
                    result, grown = _traced_read(path)
            except _Hang:
                raise ReaderCrash(f"{ext}: read_points did not return within {TIME_LIMIT} s (hang)") from None
        _record_memory(ext, len(data), grown)
        if isinstance(result, ValueError):
            if str(path) not in str(result):
                raise ReaderCrash(f"{ext}: ValueError that does not name the file: {result}") from result
            return "rejected"
        if isinstance(result, BaseException):  # any other exception is the bug we hunt
            raise ReaderCrash(f"{ext}: {type(result).__name__} escaped read_points: {result}") from result
        _check_cloud(result, ext)
        return "ok"
    finally:
        if tmp is not None:
            tmp.cleanup()


# --------------------------------------------------------------------------------------
# mutations (a hypothesis strategy)
# --------------------------------------------------------------------------------------
INTERESTING = [
    b"0",
    b"-1",
    b"1",
    b"3",
    b"255",
    b"256",
    b"65535",
    b"2147483647",
    b"-2147483648",
    b"4294967295",
    b"99999999999999999999",
    b"1e308",
    b"-1e308",
    b"1e-320",
    b"nan",
    b"inf",
    b"-inf",
    b"0x10",
    b"1.5",
    b"",
    b" ",
    b"\n",
    b"\x00",
    b"\xff\xff\xff\xff",
]


def mutate(data: bytes, ops: List[tuple]) -> bytes:
    """Apply ``(kind, position in [0, 1], payload)`` mutations to ``data``."""
    import re

    buf = bytearray(data)
    for kind, frac, payload in ops:
        pos = min(len(buf), int(frac * len(buf)))
        if kind == "truncate":
            del buf[pos:]
        elif kind == "flip" and buf:
            i = min(pos, len(buf) - 1)
            buf[i] ^= (payload[0] if payload else 0xFF) or 1
        elif kind == "insert":
            buf[pos:pos] = payload
        elif kind == "delete":
            del buf[pos : pos + max(1, len(payload))]
        elif kind == "overwrite":
            buf[pos : pos + len(payload)] = payload
        elif kind == "number":  # replace the number nearest to pos by an interesting one
            nums = [m for m in re.finditer(rb"-?\d+(\.\d+)?(e-?\d+)?", bytes(buf))]
            if nums:
                m = min(nums, key=lambda m: abs(m.start() - pos))
                buf[m.start() : m.end()] = INTERESTING[payload[0] % len(INTERESTING)] if payload else b"-1"
        elif kind == "duplicate":
            chunk = bytes(buf[pos : pos + 16 * (len(payload) + 1)])
            buf[pos:pos] = chunk
        elif kind == "binary_int":  # overwrite 4 bytes with an extreme little-endian integer
            vals = [0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 0x0000FFFF]
            v = vals[(payload[0] if payload else 0) % len(vals)]
            buf[pos : pos + 4] = struct.pack("<I", v)
    return bytes(buf)


def mutated_files(ext: str):
    """Hypothesis strategy of ``bytes``: a seed file of ``ext`` with 0-4 mutations."""
    from hypothesis import strategies as st

    seeds = seed_files()[ext]
    op = st.tuples(
        st.sampled_from(
            ["truncate", "flip", "insert", "delete", "overwrite", "number", "duplicate", "binary_int", "number", "flip"]
        ),
        st.floats(0.0, 1.0, allow_nan=False),
        st.binary(min_size=0, max_size=12),
    )
    return st.builds(mutate, st.sampled_from(seeds), st.lists(op, min_size=0, max_size=4))


TARGETS: Dict[str, Callable[[bytes], str]] = {ext: (lambda data, _e=ext: check_reader(_e, data)) for ext in FORMATS}
