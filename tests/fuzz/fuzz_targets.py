"""Fuzz targets for the file readers of :mod:`gridify.io`, one per format.

A target takes the bytes of a file, writes them under the format's extension and reads them with
:func:`gridify.io.read_points`. The contract for *any* input bytes:

* either a valid :class:`~gridify.io.PointCloud` comes back (points ``[N >= 1, 3]`` float32 and
  finite; normals/colors ``[N, 3]`` float32, colours in ``[0, 1]``; labels ``[N]`` int64),
* or :class:`ValueError` is raised and its message names the file;
* within :data:`TIME_LIMIT` seconds.

Anything else (another exception type, an error that does not name the file, a hang, an
invalid cloud) is a crash. Inputs are well-formed seed files (built here, no data files needed)
mutated byte-wise; :func:`mutated_files` is the hypothesis strategy, used by
``tests/fuzz/test_fuzz_readers.py`` (bounded, in the default tests) and ``scripts/fuzz.py``
(time-bounded, in ``.ci/run``).
"""
from __future__ import annotations

import io
import os
import signal
import struct
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np

from gridify.io import PointCloud, read_points

#: seconds one read may take before it counts as a hang
TIME_LIMIT = 10.0

FORMATS = (".ply", ".pcd", ".xyz", ".txt", ".npy", ".npz", ".off", ".obj", ".stl")


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


def _ply(binary: bool, faces: bool = False, extra: bool = True) -> bytes:
    pts = _cloud()
    fmt = "binary_little_endian" if binary else "ascii"
    head = ["ply", f"format {fmt} 1.0", f"element vertex {len(pts)}",
            "property float x", "property float y", "property float z"]
    if extra:
        head += ["property float nx", "property float ny", "property float nz",
                 "property uchar red", "property uchar green", "property uchar blue", "property int label"]
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
                out.write(struct.pack("<3f3Bi", *nrm[i], 10 * i, 20, 30, i % 3))
        else:
            vals = [*p] + ([*nrm[i], 10 * i, 20, 30, i % 3] if extra else [])
            out.write((" ".join(repr(float(v)) if j < 6 else str(int(v)) for j, v in enumerate(vals)) + "\n").encode())
    if faces:
        for t in tris:
            out.write(struct.pack("<B3i", 3, *t) if binary else (f"3 {t[0]} {t[1]} {t[2]}\n").encode())
    return out.getvalue()


def _pcd(kind: str) -> bytes:
    pts = _cloud()
    head = ["# .PCD v0.7", "VERSION 0.7", "FIELDS x y z rgb label", "SIZE 4 4 4 4 4", "TYPE F F F U I",
            "COUNT 1 1 1 1 1", f"WIDTH {len(pts)}", "HEIGHT 1", "VIEWPOINT 0 0 0 1 0 0 0",
            f"POINTS {len(pts)}", f"DATA {kind}"]
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
            chunk = raw[i:i + 32]
            lzf.append(len(chunk) - 1)
            lzf += chunk
        body = struct.pack("<II", len(lzf), len(raw)) + bytes(lzf)
    return ("\n".join(head) + "\n").encode() + body


def _text(sep: str = " ", cols: int = 6, header: bool = False) -> bytes:
    pts = _cloud()
    nrm = pts / np.linalg.norm(pts, axis=1, keepdims=True)
    table = np.concatenate([pts, nrm, (np.arange(len(pts)) % 3)[:, None]], 1)[:, :cols]
    lines = [sep.join(f"{v:.6f}" for v in row) for row in table]
    return ((f"{len(pts)}\n" if header else "") + "# comment\n" + "\n".join(lines) + "\n").encode()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _npz() -> bytes:
    pts = _cloud()
    buf = io.BytesIO()
    np.savez(buf, pos=pts, normal=pts / np.linalg.norm(pts, axis=1, keepdims=True),
             color=np.full((len(pts), 3), 128, np.uint8), label=np.arange(len(pts)))
    return buf.getvalue()


def _off() -> bytes:
    return b"OFF\n4 4 0\n0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 1 2\n3 0 1 3\n3 0 2 3\n4 1 2 3 0\n"


def _obj() -> bytes:
    return (b"# tetra\nv 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nvn 0 0 1\n"
            b"f 1 2 3\nf 1 2 4\nf 1/1/1 3/1/1 4/1/1\nf 2 3 4\n")


def _stl(binary: bool) -> bytes:
    tris = [((0, 0, 0), (1, 0, 0), (0, 1, 0)), ((0, 0, 0), (1, 0, 0), (0, 0, 1)),
            ((0, 0, 0), (0, 1, 0), (0, 0, 1)), ((1, 0, 0), (0, 1, 0), (0, 0, 1))]
    if binary:
        out = bytearray(b"gridify fuzz seed".ljust(80, b" ") + struct.pack("<I", len(tris)))
        for t in tris:
            out += struct.pack("<12fH", 0, 0, 0, *t[0], *t[1], *t[2], 0)
        return bytes(out)
    lines = ["solid s"]
    for t in tris:
        lines += ["facet normal 0 0 0", " outer loop"] + [f"  vertex {a} {b} {c}" for a, b, c in t] + \
                 [" endloop", "endfacet"]
    return ("\n".join(lines + ["endsolid s"]) + "\n").encode()


def seed_files() -> Dict[str, List[bytes]]:
    """Well-formed files of every format (each one reads into a valid cloud)."""
    return {
        ".ply": [_ply(True), _ply(False), _ply(True, faces=True, extra=False), _ply(False, faces=True, extra=False)],
        ".pcd": [_pcd("ascii"), _pcd("binary"), _pcd("binary_compressed")],
        ".xyz": [_text(" ", 3), _text(" ", 6), _text(",", 7), _text(" ", 4, header=True)],
        ".txt": [_text(",", 6), _text("\t", 3)],
        ".npy": [_npy(_cloud()), _npy(np.concatenate([_cloud(), np.ones((6, 4), np.float32)], 1)),
                 _npy(np.arange(18, dtype=np.int16).reshape(6, 3))],
        ".npz": [_npz()],
        ".off": [_off()],
        ".obj": [_obj()],
        ".stl": [_stl(True), _stl(False)],
    }


# --------------------------------------------------------------------------------------
# the contract
# --------------------------------------------------------------------------------------
def _check_cloud(cloud: object, where: str) -> None:
    if not isinstance(cloud, PointCloud):
        raise ReaderCrash(f"{where}: returned {type(cloud).__name__}, not a PointCloud")
    n = len(cloud)
    pts = cloud.points
    if n < 1 or pts.shape != (n, 3) or pts.dtype != np.float32 or not np.isfinite(pts).all():
        raise ReaderCrash(f"{where}: invalid points (shape {pts.shape}, dtype {pts.dtype}, "
                          f"finite={bool(np.isfinite(pts).all())})")
    for name in ("normals", "colors"):
        a = getattr(cloud, name)
        if a is not None and (a.shape != (n, 3) or a.dtype != np.float32):
            raise ReaderCrash(f"{where}: invalid {name} (shape {a.shape}, dtype {a.dtype})")
    if cloud.colors is not None and not ((cloud.colors >= 0) & (cloud.colors <= 1)).all():
        raise ReaderCrash(f"{where}: colours outside [0, 1] (min {np.nanmin(cloud.colors)}, "
                          f"max {np.nanmax(cloud.colors)})")
    if cloud.labels is not None and (cloud.labels.shape != (n,) or cloud.labels.dtype != np.int64):
        raise ReaderCrash(f"{where}: invalid labels (shape {cloud.labels.shape})")


def check_reader(ext: str, data: bytes, workdir: os.PathLike | str | None = None) -> str:
    """Run the reader of ``ext`` on ``data``; returns ``"ok"`` or ``"rejected"``, raises :class:`ReaderCrash`."""
    import warnings

    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="gridify-fuzz-")
        workdir = tmp.name
    path = Path(workdir) / f"input{ext}"
    path.write_bytes(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                with _time_limit(TIME_LIMIT):
                    cloud = read_points(path, num_samples=64)
            except _Hang:
                raise ReaderCrash(f"{ext}: read_points did not return within {TIME_LIMIT} s (hang)") from None
            except ValueError as exc:
                if str(path) not in str(exc):
                    raise ReaderCrash(f"{ext}: ValueError that does not name the file: {exc}") from exc
                return "rejected"
            except ReaderCrash:
                raise
            except BaseException as exc:  # noqa: BLE001 - any other exception is the bug we hunt
                if isinstance(exc, KeyboardInterrupt):
                    raise
                raise ReaderCrash(f"{ext}: {type(exc).__name__} escaped read_points: {exc}") from exc
        _check_cloud(cloud, ext)
        return "ok"
    finally:
        if tmp is not None:
            tmp.cleanup()


# --------------------------------------------------------------------------------------
# mutations (a hypothesis strategy)
# --------------------------------------------------------------------------------------
INTERESTING = [b"0", b"-1", b"1", b"3", b"255", b"256", b"65535", b"2147483647", b"-2147483648",
               b"4294967295", b"99999999999999999999", b"1e308", b"-1e308", b"1e-320", b"nan", b"inf",
               b"-inf", b"0x10", b"1.5", b"", b" ", b"\n", b"\x00", b"\xff\xff\xff\xff"]


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
            del buf[pos:pos + max(1, len(payload))]
        elif kind == "overwrite":
            buf[pos:pos + len(payload)] = payload
        elif kind == "number":  # replace the number nearest to pos by an interesting one
            nums = [m for m in re.finditer(rb"-?\d+(\.\d+)?(e-?\d+)?", bytes(buf))]
            if nums:
                m = min(nums, key=lambda m: abs(m.start() - pos))
                buf[m.start():m.end()] = INTERESTING[payload[0] % len(INTERESTING)] if payload else b"-1"
        elif kind == "duplicate":
            chunk = bytes(buf[pos:pos + 16 * (len(payload) + 1)])
            buf[pos:pos] = chunk
        elif kind == "binary_int":  # overwrite 4 bytes with an extreme little-endian integer
            vals = [0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 0x0000FFFF]
            v = vals[(payload[0] if payload else 0) % len(vals)]
            buf[pos:pos + 4] = struct.pack("<I", v)
    return bytes(buf)


def mutated_files(ext: str):
    """Hypothesis strategy of ``bytes``: a seed file of ``ext`` with 0-4 mutations."""
    from hypothesis import strategies as st

    seeds = seed_files()[ext]
    op = st.tuples(st.sampled_from(["truncate", "flip", "insert", "delete", "overwrite", "number",
                                    "duplicate", "binary_int", "number", "flip"]),
                   st.floats(0.0, 1.0, allow_nan=False), st.binary(min_size=0, max_size=12))
    return st.builds(mutate, st.sampled_from(seeds), st.lists(op, min_size=0, max_size=4))


TARGETS: Dict[str, Callable[[bytes], str]] = {ext: (lambda data, _e=ext: check_reader(_e, data)) for ext in FORMATS}
