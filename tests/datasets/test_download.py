"""gridify.datasets.download without the network: file:// URLs, a local HTTP server, monkeypatching."""

import hashlib
import http.server
import io
import os
import tarfile
import threading
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

from gridify.datasets import ModelNet
from gridify.datasets.download import (
    ARCHIVES,
    COMPLETE_MARKER,
    DownloadError,
    download_and_extract,
    download_file,
    extract_archive,
    sha256_of,
)


def _zip_bytes(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name), data)
    return buf.getvalue()


def _toy_zip(size=300_000):
    payload = bytes(range(256)) * (size // 256)
    return _zip_bytes({"toy/a.txt": b"hello", "toy/sub/b.bin": payload})


def _tar_bytes(entries, mode="w:gz"):
    """entries: (name, kind, data_or_linkname) with kind in file/sym/hard/dir."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, kind, val in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(val)
                tf.addfile(info, io.BytesIO(val))
                continue
            info.type = {"sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE, "dir": tarfile.DIRTYPE}[kind]
            if kind in ("sym", "hard"):
                info.linkname = val
            tf.addfile(info)
    return buf.getvalue()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server API)
        srv = self.server
        srv.requests.append((self.path, self.headers.get("Range")))
        data = srv.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        rng = self.headers.get("Range")
        if rng and srv.support_range:
            start = int(rng.split("=", 1)[1].split("-", 1)[0])
            body = data[start:]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # keep test output quiet
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.files, srv.requests, srv.support_range = {}, [], True
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any URL other than file:// or 127.0.0.1 fails like an offline machine."""
    real = urllib.request.urlopen

    def guarded(req, *args, **kwargs):
        url = req.full_url if isinstance(req, urllib.request.Request) else str(req)
        if url.startswith("file:") or url.startswith("http://127.0.0.1"):
            return real(req, *args, **kwargs)
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", guarded)


def _no_temp_dirs(root: Path):
    return not any(".extracting-" in p.name for p in root.iterdir())


# --------------------------------------------------------------------------------------
# half-downloaded archives
# --------------------------------------------------------------------------------------
def _zip(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


# --------------------------------------------------------------------------------------
def test_file_url_download_extract_marker_and_reuse(tmp_path, no_network, monkeypatch):
    data = _toy_zip()
    src = tmp_path / "mirror" / "toy.zip"
    src.parent.mkdir()
    src.write_bytes(data)
    root = tmp_path / "root"
    dest = download_and_extract("toy", root, [src.as_uri()], sha256=_sha(data), progress=False)
    assert dest == root / "toy"
    assert (dest / "a.txt").read_bytes() == b"hello" and (dest / "sub" / "b.bin").stat().st_size > 0
    assert (dest / COMPLETE_MARKER).is_file() and _sha(data) in (dest / COMPLETE_MARKER).read_text()
    assert (root / "toy.zip").is_file() and not (root / "toy.zip.part").exists()
    assert _no_temp_dirs(root)
    # complete: no network access at all on the next call
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: pytest.fail("network touched"))
    assert download_and_extract("toy", root, ["http://example.invalid/toy.zip"], sha256=_sha(data)) == dest


def test_mirrors_tried_in_order(tmp_path, server, no_network):
    data = _toy_zip(5000)
    server.files["/good/toy.zip"] = data
    urls = [server.base + "/missing/toy.zip", "http://mirror.invalid/toy.zip", server.base + "/good/toy.zip"]
    dest = download_and_extract("toy", tmp_path, urls, sha256=_sha(data), progress=False)
    assert (dest / "a.txt").read_bytes() == b"hello"
    assert [p for p, _ in server.requests] == ["/missing/toy.zip", "/good/toy.zip"]


@pytest.mark.parametrize("support_range", [True, False])
def test_resume_partial_download(tmp_path, server, support_range):
    data = _toy_zip()
    server.files["/toy.zip"] = data
    server.support_range = support_range
    half = len(data) // 2
    (tmp_path / "toy.zip.part").write_bytes(data[:half])
    out = download_file(server.base + "/toy.zip", tmp_path / "toy.zip", sha256=_sha(data), progress=False)
    assert out.read_bytes() == data and not (tmp_path / "toy.zip.part").exists()
    assert server.requests == [("/toy.zip", f"bytes={half}-")]  # resumed with an HTTP Range request


def test_downloaded_sha256_mismatch(tmp_path, server):
    server.files["/toy.zip"] = _toy_zip(3000)
    with pytest.raises(DownloadError, match=r"(?s)sha256 mismatch for http://127\.0\.0\.1.*toy\.zip"):
        download_and_extract("toy", tmp_path, [server.base + "/toy.zip"], sha256="0" * 64, progress=False)
    assert not (tmp_path / "toy.zip").exists() and not (tmp_path / "toy.zip.part").exists()
    assert not (tmp_path / "toy").exists()


def test_placed_archive_sha256_checked(tmp_path, no_network):
    data = _toy_zip(3000)
    (tmp_path / "toy.zip").write_bytes(data)
    with pytest.raises(ValueError, match=r"toy\.zip: sha256 mismatch \(expected 0+, got [0-9a-f]{64}\)"):
        download_and_extract("toy", tmp_path, ["https://example.invalid/toy.zip"], sha256="0" * 64)
    assert not (tmp_path / "toy").exists()


def test_offline_message_then_archive_placed_by_hand(tmp_path, no_network):
    data = _toy_zip(3000)
    urls = ["https://a.invalid/data/toy.zip", "https://b.invalid/toy.zip"]
    with pytest.raises(DownloadError) as err:
        download_and_extract("toy", tmp_path, urls, sha256=_sha(data), progress=False, note="ask a colleague")
    msg = str(err.value)
    for needle in [
        "'toy.zip'",
        urls[0],
        urls[1],
        str(tmp_path / "toy.zip"),
        _sha(data),
        "by hand",
        "name resolution",
        "ask a colleague",
    ]:
        assert needle in msg, needle
    (tmp_path / "toy.zip").write_bytes(data)  # the user follows the instructions
    dest = download_and_extract("toy", tmp_path, urls, sha256=_sha(data), progress=False)
    assert (dest / "a.txt").read_bytes() == b"hello"


def test_dataset_offline_error_names_the_archive(tmp_path, no_network):
    with pytest.raises(DownloadError, match=r"(?s)ModelNet10\.zip.*put it at"):
        ModelNet(tmp_path, name="10", source="off", download=True)
    assert all(spec.urls and spec.filename for spec in ARCHIVES.values())


@pytest.mark.parametrize("member", ["../evil.txt", "toy/../../evil.txt", "/abs/evil.txt", "..\\evil.txt"])
def test_zip_slip_refused(tmp_path, member):
    data = _zip_bytes({"toy/ok.txt": b"ok", member: b"pwned"})
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "bad.zip").write_bytes(data)
    with pytest.raises(ValueError, match=r"bad\.zip: unsafe archive member"):
        download_and_extract("bad", tmp_path / "root", ["file:///nonexistent/bad.zip"], progress=False)
    assert not list(tmp_path.rglob("evil.txt"))
    assert not (tmp_path / "root" / "bad").exists() and _no_temp_dirs(tmp_path / "root")


@pytest.mark.parametrize(
    "entry",
    [
        ("link", "sym", "/etc/passwd"),
        ("toy/link", "sym", "../../outside"),
        ("toy/hard", "hard", "../outside"),
        ("dev", "fifo", None),
    ],
)
def test_tar_links_outside_refused(tmp_path, entry):
    name, kind, target = entry
    if kind == "fifo":
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            info = tarfile.TarInfo(name)
            info.type = tarfile.FIFOTYPE
            tf.addfile(info)
        data = buf.getvalue()
    else:
        data = _tar_bytes([("toy/ok.txt", "file", b"ok"), (name, kind, target)])
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(data)
    with pytest.raises(ValueError, match=r"bad\.tar\.gz: unsafe"):
        extract_archive(archive, tmp_path / "out")


def test_tar_with_internal_link_and_several_top_level_entries(tmp_path):
    data = _tar_bytes([("a/x.txt", "file", b"x"), ("a/link", "sym", "x.txt"), ("b.txt", "file", b"b")])
    src = tmp_path / "two.tar.gz"
    src.write_bytes(data)
    dest = download_and_extract("two", tmp_path / "root", [src.as_uri()], sha256=sha256_of(src), progress=False)
    assert (dest / "a" / "x.txt").read_bytes() == b"x" and (dest / "b.txt").read_bytes() == b"b"
    assert (dest / "a" / "link").resolve() == (dest / "a" / "x.txt").resolve()


def test_corrupt_archive_leaves_nothing_behind(tmp_path):
    data = _toy_zip(20000)
    (tmp_path / "toy.zip").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"toy\.zip: corrupt or truncated archive"):
        download_and_extract("toy", tmp_path, ["file:///nonexistent/toy.zip"], progress=False)
    assert not (tmp_path / "toy").exists() and _no_temp_dirs(tmp_path)


def test_incomplete_destination_is_not_mistaken_for_a_dataset(tmp_path):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "half.txt").write_text("partial")
    with pytest.raises(ValueError, match=r"toy exists but has no \.gridify_complete marker"):
        download_and_extract("toy", tmp_path, ["file:///nonexistent/toy.zip"])


def test_unknown_archive_type(tmp_path):
    f = tmp_path / "data.rar"
    f.write_bytes(b"Rar!\x1a\x07\x00 not really")
    with pytest.raises(ValueError, match=r"data\.rar: unknown archive type"):
        extract_archive(f, tmp_path / "out")


_COLLIDING = {
    "zip, file then folder": ("zip", [("toy/x", "file", b"1"), ("toy/x/y.txt", "file", b"2")]),
    "zip, folder then file": ("zip", [("toy/x/y.txt", "file", b"2"), ("toy/x", "file", b"1")]),
    "zip, folder entry and file": ("zip", [("toy/x/", "dir", b""), ("toy/x", "file", b"1")]),
    "tar, file then folder": ("tar", [("toy/x", "file", b"1"), ("toy/x/y.txt", "file", b"2")]),
    "tar, folder then file": ("tar", [("toy/x", "dir", b""), ("toy/x", "file", b"1")]),
    "tar, link then folder": ("tar", [("toy/x", "sym", "a.txt"), ("toy/x/y.txt", "file", b"2")]),
}


def _colliding_archive(tmp_path, kind, entries):
    if kind == "zip":
        path = tmp_path / "clash.zip"
        path.write_bytes(_zip_bytes({name: data for name, _, data in entries}))
    else:
        path = tmp_path / "clash.tar.gz"
        path.write_bytes(_tar_bytes(entries))
    return path


@pytest.mark.parametrize("case", sorted(_COLLIDING))
def test_colliding_members_raise_a_download_error_naming_archive_and_member(tmp_path, case):
    kind, entries = _COLLIDING[case]
    archive = _colliding_archive(tmp_path, kind, entries)
    with pytest.raises(DownloadError, match=r"clash\.(zip|tar\.gz): archive members collide: 'toy/x' is a file"):
        extract_archive(archive, tmp_path / "out")
    with pytest.raises(ValueError, match=r"members collide"):  # still the ValueError extract_archive documents
        extract_archive(archive, tmp_path / "out2")
    root = tmp_path / "root"
    with pytest.raises(DownloadError, match=r"clash\.(zip|tar\.gz): archive members collide: 'toy/x'"):
        download_and_extract("clash", root, [archive.as_uri()], sha256=sha256_of(archive), progress=False)
    assert not (root / "clash").exists() and _no_temp_dirs(root)


def test_member_colliding_with_the_destination_is_named(tmp_path):
    archive = tmp_path / "ok.zip"
    archive.write_bytes(_zip_bytes({"toy/x/y.txt": b"2"}))
    out = tmp_path / "out"
    (out / "toy").mkdir(parents=True)
    (out / "toy" / "x").write_text("already a file")
    with pytest.raises(DownloadError, match=r"ok\.zip: member 'toy/x/y.txt' needs the folder .*toy/x, which is a file"):
        extract_archive(archive, out)


def test_half_downloaded_archive_is_detected_and_refetched(tmp_path):
    data = _zip({"toy/a.txt": b"hello", "toy/b.bin": os.urandom(50_000)})
    digest = hashlib.sha256(data).hexdigest()
    mirror = tmp_path / "mirror" / "toy.zip"
    mirror.parent.mkdir()
    mirror.write_bytes(data)
    root = tmp_path / "root"
    root.mkdir()
    # a previous download died half-way, leaving a truncated archive under the final name
    (root / "toy.zip").write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match=r"toy.zip: sha256 mismatch .* re-fetching"):
        out = download_and_extract("toy", root, [mirror.as_uri()], digest)
    assert (out / "a.txt").read_bytes() == b"hello"
    assert sha256_of(root / "toy.zip") == digest
    assert list(root.glob("toy.zip.corrupt*"))  # the bad copy is kept aside, not silently deleted


def test_half_downloaded_archive_reported_when_no_mirror_works(tmp_path):
    data = _zip({"toy/a.txt": b"hello"})
    digest = hashlib.sha256(data).hexdigest()
    root = tmp_path / "root"
    root.mkdir()
    (root / "toy.zip").write_bytes(data[:40])
    with pytest.raises(ValueError, match=r"toy.zip: sha256 mismatch"):
        with pytest.warns(UserWarning):
            download_and_extract("toy", root, [(tmp_path / "nowhere" / "toy.zip").as_uri()], digest)


def test_partial_part_file_with_wrong_bytes_is_restarted(tmp_path):
    """A stale ``.part`` (e.g. from another version) is resumed, fails the sha256, and is fetched afresh."""
    data = os.urandom(20_000)
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    dest = tmp_path / "out" / "src.bin"
    dest.parent.mkdir()
    (dest.parent / "src.bin.part").write_bytes(os.urandom(5_000))
    download_file(src.as_uri(), dest, sha256=hashlib.sha256(data).hexdigest(), progress=False)
    assert dest.read_bytes() == data


def test_extraction_refuses_a_decompression_bomb_and_archives_over_the_limit(tmp_path, monkeypatch):
    import io
    import tarfile
    import zipfile

    from gridify.datasets.download import extract_archive

    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("data/zeros.bin", b"\0" * (32 << 20))  # 32 MiB of zeros in ~32 KB
    with pytest.raises(
        ValueError, match=r"bomb.zip: .* that expand to 32.0 MiB \(\d+x, more than 100x: a decompression bomb"
    ):
        extract_archive(bomb, tmp_path / "out")
    assert not any((tmp_path / "out").rglob("*.bin"))  # nothing was written
    ok = tmp_path / "ok.tar"
    with tarfile.open(ok, "w") as tf:
        data = os.urandom(2 << 20)
        info = tarfile.TarInfo("d/a.bin")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    monkeypatch.setenv("GRIDIFY_MAX_EXTRACT_BYTES", str(1 << 20))
    with pytest.raises(
        ValueError,
        match=r"ok.tar: expands to 2.0 MiB, more than the extraction limit of 1.0 MiB "
        r"\(set GRIDIFY_MAX_EXTRACT_BYTES",
    ):
        extract_archive(ok, tmp_path / "out2")
    monkeypatch.delenv("GRIDIFY_MAX_EXTRACT_BYTES")
    assert (extract_archive(ok, tmp_path / "out2") / "d" / "a.bin").stat().st_size == 2 << 20
