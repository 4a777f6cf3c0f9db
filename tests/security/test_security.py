"""Security properties: no network at import or in tests, no unpickling of untrusted files, safe
archive extraction, weights-only checkpoint loading."""

import ast
import io
import os
import subprocess
import sys
import tarfile
import textwrap
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tests._network_guard import ExternalNetworkAccess, no_external_network  # noqa: F401  (autouse fixture)
from gridify.checkpoint import CheckpointError, load_checkpoint
from gridify.datasets.download import extract_archive
from gridify.io import read_points

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "gridify").rglob("*.py"), *(ROOT / "scripts").glob("*.py")])


# --------------------------------------------------------------------------------------
# no network
# --------------------------------------------------------------------------------------
def test_import_gridify_opens_no_socket():
    """Importing the library and its submodules creates no socket at all (not even loopback)."""
    code = textwrap.dedent("""
        import socket, sys
        class NoSocket(socket.socket):
            def __init__(self, *a, **k):
                raise SystemExit("socket created at import time")
        socket.socket = NoSocket
        socket.create_connection = lambda *a, **k: (_ for _ in ()).throw(SystemExit("connect at import"))
        socket.getaddrinfo = lambda *a, **k: (_ for _ in ()).throw(SystemExit("DNS lookup at import"))
        import gridify, gridify.io, gridify.ops, gridify.nn, gridify.models, gridify.backbones
        import gridify.datasets, gridify.datasets.download, gridify.checkpoint, gridify.metrics, gridify.transforms
        # (tqdm comes with torch.hub, matplotlib with torchmetrics: not gridify's own imports)
        heavy = sorted(m for m in ("lightning", "yaml") if m in sys.modules)
        print("OK", heavy)
    """)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "OK []", proc.stdout  # and the import stays light


def test_network_guard_blocks_external_hosts_only(no_external_network):  # noqa: F811 (the fixture)
    import socket

    with pytest.raises(ExternalNetworkAccess, match="only loopback allowed"):
        socket.create_connection(("192.0.2.1", 80), timeout=0.5)  # TEST-NET-1, never routed
    with pytest.raises(OSError):
        urllib.request.urlopen("http://example.invalid/x", timeout=0.5)
    assert len(no_external_network) == 2
    no_external_network.clear()  # these attempts were the point of the test
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        socket.create_connection(srv.getsockname(), timeout=1).close()  # loopback is fine
    finally:
        srv.close()
    assert no_external_network == []


# --------------------------------------------------------------------------------------
# no unpickling anywhere
# --------------------------------------------------------------------------------------
def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            yield node, owner, name


def _kw(node, key):
    return next((k.value for k in node.keywords if k.arg == key), None)


def test_sources_never_unpickle():
    """Static audit of gridify/ and scripts/: every deserialization is the safe kind."""
    problems = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                bad = [
                    m
                    for m in mods
                    if m.split(".")[0] in ("pickle", "cPickle", "dill", "marshal", "shelve", "joblib", "cloudpickle")
                ]
                if bad:
                    problems.append(f"{rel}:{node.lineno}: imports {bad}")
        for node, owner, name in _calls(tree):
            where = f"{rel}:{node.lineno}"
            if owner == "torch" and name == "load":
                wo = _kw(node, "weights_only")
                if not (isinstance(wo, ast.Constant) and wo.value is True):
                    problems.append(f"{where}: torch.load without weights_only=True")
            if owner in ("np", "numpy") and name == "load":
                ap = _kw(node, "allow_pickle")
                if not (isinstance(ap, ast.Constant) and ap.value is False):
                    problems.append(f"{where}: np.load without allow_pickle=False")
            if owner == "yaml" and name in ("load", "load_all", "unsafe_load", "full_load"):
                loader = _kw(node, "Loader")
                ok = (
                    name in ("load", "load_all")
                    and loader is not None
                    and (
                        (isinstance(loader, ast.Name) and loader.id == "_Loader")
                        or (isinstance(loader, ast.Attribute) and loader.attr in ("SafeLoader", "CSafeLoader"))
                    )
                )
                if not ok:
                    problems.append(f"{where}: yaml.{name} without a safe Loader")
            if owner == "" and name in ("eval", "exec"):
                problems.append(f"{where}: {name}()")
            if name == "extractall" and owner not in ("zf",):
                if _kw(node, "filter") is None and _kw(node, "members") is None:
                    problems.append(f"{where}: extractall without checked members")
    assert not problems, "\n".join(problems)


class _Boom:
    """Unpickling this object would create the file named in ``marker`` (arbitrary code execution)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_malicious_pickles_never_execute(tmp_path):
    marker = tmp_path / "pwned"
    ckpt = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": _Boom(str(marker))}, ckpt)
    with pytest.raises(CheckpointError, match="refusing to load"):
        load_checkpoint(ckpt)
    from gridify import training as T

    with pytest.raises(Exception, match="Weights only load failed|Unsupported global"):
        T.atomic_checkpoint_io().load_checkpoint(ckpt)  # the Lightning resume path
    arr = np.empty(3, dtype=object)
    arr[:] = [_Boom(str(marker))] * 3
    npy = tmp_path / "evil.npy"
    np.save(npy, arr, allow_pickle=True)
    with pytest.raises(ValueError, match="refusing to load it"):
        read_points(npy)
    npz = tmp_path / "evil.npz"
    np.savez(npz, pos=arr)
    with pytest.raises(ValueError, match="pickled Python objects"):
        read_points(npz)
    assert not marker.exists(), "unpickling ran code"


# --------------------------------------------------------------------------------------
# archive extraction
# --------------------------------------------------------------------------------------
def _zip_with_symlink(name, target):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("toy/ok.txt", b"ok")
        info = zipfile.ZipInfo(name)
        info.create_system = 3
        info.external_attr = 0o120777 << 16  # a symlink
        zf.writestr(info, target)
    return buf.getvalue()


@pytest.mark.parametrize(
    "name, target", [("toy/link", "/etc/passwd"), ("toy/link", "../../outside"), ("toy/a/link", "../../../x")]
)
def test_zip_symlinks_outside_refused(tmp_path, name, target):
    archive = tmp_path / "bad.zip"
    archive.write_bytes(_zip_with_symlink(name, target))
    with pytest.raises(ValueError, match=r"bad\.zip: unsafe link"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "toy" / "ok.txt").exists()  # checked before anything is written


def test_tar_symlink_then_write_through_it_refused(tmp_path):
    """A link to a parent folder followed by a member written 'through' it never escapes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        link = tarfile.TarInfo("toy/up")
        link.type, link.linkname = tarfile.SYMTYPE, ".."
        tf.addfile(link)
        data = b"pwned"
        f = tarfile.TarInfo("toy/up/up/escape.txt")
        f.size = len(data)
        tf.addfile(f, io.BytesIO(data))
    archive = tmp_path / "bad.tar"
    archive.write_bytes(buf.getvalue())
    out = tmp_path / "a" / "b" / "out"
    try:
        extract_archive(archive, out)
    except ValueError as exc:
        assert "bad.tar" in str(exc)
    assert not list(tmp_path.rglob("escape.txt")) or all(
        out.resolve() in p.resolve().parents for p in tmp_path.rglob("escape.txt")
    )


@pytest.mark.parametrize("name", ["/abs/x.txt", "../x.txt", "a/../../x.txt", "C:/x.txt", "..\\x.txt"])
def test_tar_absolute_and_parent_paths_refused(tmp_path, name):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        f = tarfile.TarInfo(name)
        f.size = 1
        tf.addfile(f, io.BytesIO(b"x"))
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match=r"bad\.tar\.gz: unsafe archive member"):
        extract_archive(archive, tmp_path / "out")
    assert not list(tmp_path.rglob("x.txt"))
