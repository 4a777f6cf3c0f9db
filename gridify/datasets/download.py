"""Resumable, verified, atomic dataset downloads with safe archive extraction.

:func:`download_and_extract` fetches one archive from a list of mirrors (tried in order),
resumes an interrupted download (HTTP ``Range`` into ``<archive>.part``), verifies its
sha256, and extracts it so that a half-extracted folder can never be mistaken for a dataset:
the archive is unpacked into a temporary folder beside the destination, a completion marker
is written, and only then is the folder renamed into place. Archive members with absolute
paths, ``..`` components, or links pointing outside the destination are refused.

Without network access it fails with a :class:`DownloadError` that says exactly which file
to fetch by hand, from where, and where to put it; an archive placed there by hand is
accepted (and its sha256 checked) on the next call.

Only the standard library is used for the network (``urllib``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .._checks import warn_at_caller

PathLike = Union[str, "os.PathLike[str]"]

__all__ = [
    "download_and_extract",
    "download_file",
    "extract_archive",
    "sha256_of",
    "DownloadError",
    "ArchiveError",
    "DatasetNotFoundError",
    "ArchiveSpec",
    "ARCHIVES",
    "ARCHIVE_ALIASES",
    "COMPLETE_MARKER",
    "is_complete",
    "resolve_archive",
    "download_archive",
    "manual_instructions",
]

#: name of the marker file written into a fully extracted folder
COMPLETE_MARKER = ".gridify_complete"
_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """No mirror delivered the archive; the message says how to fetch it by hand (its first line, the
    ``summary``, what failed)."""

    @property
    def summary(self) -> str:
        return str(self).splitlines()[0] if str(self) else ""


class ArchiveError(DownloadError, ValueError):
    """An archive that cannot be extracted as it stands (members that collide); the message names the
    archive and the members. Both a :class:`DownloadError` and a :class:`ValueError` (what
    :func:`extract_archive` raises for every other unusable archive)."""


class DatasetNotFoundError(FileNotFoundError):
    """A dataset is not where it was expected; the message says how to get it.

    ``archive`` (a key of :data:`ARCHIVES`, or None) and ``root`` (the data root searched) let a
    command line say how to fetch it in its own words; ``summary`` is the message's first line.
    """

    def __init__(self, message: str, *, archive: Optional[str] = None, root: Optional[PathLike] = None) -> None:
        super().__init__(message)
        self.archive = archive
        self.root = None if root is None else Path(root)

    @property
    def summary(self) -> str:
        return str(self).splitlines()[0] if str(self) else ""

    def __reduce__(self) -> Any:  # keeps the keyword arguments through pickling (DataLoader workers, spawn)
        return (_rebuild_not_found, (str(self), self.archive, self.root))


def _rebuild_not_found(message: str, archive: Optional[str], root: Optional[Path]) -> "DatasetNotFoundError":
    return DatasetNotFoundError(message, archive=archive, root=root)


@dataclass(frozen=True)
class ArchiveSpec:
    """Where an archive can be fetched from, and what it unpacks to.

    Attributes:
        name: folder name of the extracted dataset under the data root.
        filename: archive file name.
        urls: mirrors, tried in order.
        sha256: expected checksum (``None``: not known yet; the computed one is recorded in
            the completion marker and printed so it can be pinned).
        note: extra advice for fetching it by hand.
    """

    name: str
    filename: str
    urls: Sequence[str]
    sha256: Optional[str] = None
    note: str = ""
    extra: Dict[str, str] = field(default_factory=dict)


# Known archives. The official hosts are unreliable (shapenet.cs.stanford.edu refuses
# connections; the ModelNet URLs moved); checksums are left unset until verified against a
# trusted copy -- never pin a checksum you have not computed yourself.
ARCHIVES: Dict[str, ArchiveSpec] = {
    "ModelNet40": ArchiveSpec(
        "ModelNet40",
        "ModelNet40.zip",
        ["https://modelnet.cs.princeton.edu/ModelNet40.zip", "http://modelnet.cs.princeton.edu/ModelNet40.zip"],
        note="the original OFF meshes from the Princeton ModelNet page",
    ),
    "ModelNet10": ArchiveSpec(
        "ModelNet10",
        "ModelNet10.zip",
        [
            "https://modelnet.cs.princeton.edu/ModelNet10.zip",
            "http://3dvision.princeton.edu/projects/2014/3DShapeNets/ModelNet10.zip",
        ],
        note="the original OFF meshes from the Princeton ModelNet page",
    ),
    "modelnet40_normal_resampled": ArchiveSpec(
        "modelnet40_normal_resampled",
        "modelnet40_normal_resampled.zip",
        ["https://shapenet.cs.stanford.edu/media/modelnet40_normal_resampled.zip"],
        note="the PointNet++ release; community mirrors exist on Kaggle and Hugging Face",
    ),
    "modelnet40_ply_hdf5_2048": ArchiveSpec(
        "modelnet40_ply_hdf5_2048",
        "modelnet40_ply_hdf5_2048.zip",
        ["https://shapenet.cs.stanford.edu/media/modelnet40_ply_hdf5_2048.zip"],
        note="the PointNet release; community mirrors exist on Hugging Face",
    ),
    "shapenetcore_partanno_segmentation_benchmark_v0_normal": ArchiveSpec(
        "shapenetcore_partanno_segmentation_benchmark_v0_normal",
        "shapenetcore_partanno_segmentation_benchmark_v0_normal.zip",
        ["https://shapenet.cs.stanford.edu/media/shapenetcore_partanno_segmentation_benchmark_v0_normal.zip"],
        note="the PointNet++ ShapeNet-Part release with normals; community mirrors exist on Kaggle",
    ),
    "shapenet_part_seg_hdf5_data": ArchiveSpec(
        "hdf5_data",
        "shapenet_part_seg_hdf5_data.zip",
        ["https://shapenet.cs.stanford.edu/media/shapenet_part_seg_hdf5_data.zip"],
        note="the PointNet ShapeNet-Part HDF5 release",
    ),
    "shapenetcore_partanno_v0": ArchiveSpec(
        "shapenetcore_partanno_v0",
        "shapenetcore_partanno_v0.zip",
        ["https://shapenet.cs.stanford.edu/ericyi/shapenetcore_partanno_v0.zip"],
        note="the original ShapeNet-Part v0 release (.pts + .seg)",
    ),
}


#: other spellings of archive names (lower case), e.g. the ``data.name`` of a config
ARCHIVE_ALIASES: Dict[str, str] = {
    "shapenet": "shapenetcore_partanno_segmentation_benchmark_v0_normal",
    "shapenetpart": "shapenetcore_partanno_segmentation_benchmark_v0_normal",
    "shapenet_part": "shapenetcore_partanno_segmentation_benchmark_v0_normal",
}


def resolve_archive(name: str) -> str:
    """The key of :data:`ARCHIVES` that ``name`` means: the key itself, in any case (``modelnet10`` ->
    ``ModelNet10``), or an alias of :data:`ARCHIVE_ALIASES`. Raises ``ValueError`` for an unknown name."""
    if name in ARCHIVES:
        return name
    folded = {k.lower(): k for k in ARCHIVES}
    key = folded.get(str(name).lower()) or ARCHIVE_ALIASES.get(str(name).lower())
    if key is None:
        raise ValueError(
            f"unknown archive {name!r}; known: {', '.join(ARCHIVES)} (any case; also {', '.join(ARCHIVE_ALIASES)})"
        )
    return key


def sha256_of(path: PathLike) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def is_complete(folder: PathLike) -> bool:
    """True when ``folder`` was fully extracted by :func:`download_and_extract`."""
    return (Path(folder) / COMPLETE_MARKER).is_file()


def _progress(total: Optional[int], initial: int, desc: str, enabled: bool):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional
        return None
    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, leave=False)


def download_file(
    url: str,
    dest: PathLike,
    *,
    sha256: Optional[str] = None,
    timeout: float = 30.0,
    progress: bool = True,
    resume: bool = True,
) -> Path:
    """Download ``url`` to ``dest`` (resumable through ``dest + '.part'``), verify, rename.

    A resumed download whose result fails the sha256 check (the ``.part`` file held bytes of
    another version, or was damaged) is fetched once more from the start before giving up.

    Raises:
        urllib.error.URLError / OSError: the transfer failed (the ``.part`` file is kept so a
            later call resumes).
        ValueError: the downloaded file's sha256 differs (the ``.part`` file is deleted).
    """
    part = Path(dest).with_name(Path(dest).name + ".part")
    resumed = bool(resume and part.exists() and part.stat().st_size > 0)
    try:
        return _download_once(url, dest, sha256=sha256, timeout=timeout, progress=progress, resume=resume)
    except ValueError:
        if not resumed:
            raise
        # the kept partial file was bad: start over once (the .part is gone after a mismatch)
        return _download_once(url, dest, sha256=sha256, timeout=timeout, progress=progress, resume=False)


def _download_once(
    url: str, dest: PathLike, *, sha256: Optional[str], timeout: float, progress: bool, resume: bool
) -> Path:
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    offset = part.stat().st_size if (resume and part.exists()) else 0
    req = urllib.request.Request(url, headers={"User-Agent": "gridify-downloader"})
    if offset:
        req.add_header("Range", f"bytes={offset}-")
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # range not satisfiable: the .part may be complete
            resp = None
        else:
            raise
    if resp is not None:
        with resp:
            status = getattr(resp, "status", None) or resp.getcode()
            if offset and status != 206:  # the server ignored the Range header: start over
                offset = 0
            length = resp.headers.get("Content-Length")
            total = int(length) + offset if length and length.isascii() and length.isdigit() else None
            bar = _progress(total, offset, dest.name, progress)
            try:
                with open(part, "ab" if offset else "wb") as fh:
                    for chunk in iter(lambda: resp.read(_CHUNK), b""):
                        fh.write(chunk)
                        if bar is not None:
                            bar.update(len(chunk))
            finally:
                if bar is not None:
                    bar.close()
            if total is not None and part.stat().st_size < total:
                raise OSError(f"connection closed after {part.stat().st_size} of {total} bytes")
    if sha256 is not None:
        got = sha256_of(part)
        if got.lower() != sha256.lower():
            part.unlink()
            raise ValueError(f"sha256 mismatch for {url}: expected {sha256}, got {got}")
    os.replace(part, dest)
    return dest


# --------------------------------------------------------------------------------------
# safe extraction
# --------------------------------------------------------------------------------------
def _check_member_name(name: str, archive: Path) -> PurePosixPath:
    norm = name.replace("\\", "/")
    if norm.startswith("/") or (len(norm) > 1 and norm[1] == ":"):
        raise ValueError(f"{archive}: unsafe archive member {name!r} (absolute path); refusing to extract")
    pp = PurePosixPath(norm)
    if ".." in pp.parts:
        raise ValueError(
            f"{archive}: unsafe archive member {name!r} (contains '..', would write outside "
            f"the destination); refusing to extract"
        )
    return pp


def _check_link_target(member: PurePosixPath, target: str, archive: Path, hard: bool) -> None:
    t = target.replace("\\", "/")
    if t.startswith("/") or (len(t) > 1 and t[1] == ":"):
        raise ValueError(
            f"{archive}: unsafe link {str(member)!r} -> {target!r} (absolute target, points "
            f"outside the destination); refusing to extract"
        )
    base = PurePosixPath() if hard else member.parent
    depth = 0
    for part in (base / t).parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                raise ValueError(
                    f"{archive}: unsafe link {str(member)!r} -> {target!r} (points outside "
                    f"the destination); refusing to extract"
                )
        elif part not in ("", "."):
            depth += 1


def _check_collisions(members: Sequence[Tuple[PurePosixPath, bool]], archive: Path, dest: Path) -> None:
    """Refuse members that cannot all be extracted: a file (or link) and a folder of the same name, a
    member below a file or link of the archive, or a member colliding with what ``dest`` already holds.

    ``members`` are ``(normalized path, is a folder)``; raises :class:`ArchiveError` (a DownloadError)
    naming the archive and both members (the system's NotADirectoryError / IsADirectoryError would
    name only a path of the destination, half-way through the extraction).
    """
    files: Dict[PurePosixPath, str] = {}
    folders: Dict[PurePosixPath, str] = {}
    for pp, is_dir in members:
        if pp.parts:
            (folders if is_dir else files).setdefault(pp, str(pp) + ("/" if is_dir else ""))
        for parent in list(pp.parents)[:-1]:  # every folder the member needs (not the root ".")
            folders.setdefault(parent, f"{pp}{'/' if is_dir else ''}")
    clash = next((f for f in files if f in folders), None)
    if clash is not None:
        raise ArchiveError(
            f"{archive}: archive members collide: {files[clash]!r} is a file (or link) but member "
            f"{folders[clash]!r} needs a folder {str(clash) + '/'!r}; the archive cannot be "
            f"extracted (a corrupt or badly made archive)"
        )
    for pp, is_dir in members:
        target = dest.joinpath(*pp.parts)
        if target.is_dir() and not target.is_symlink() and not is_dir:
            raise ArchiveError(f"{archive}: member {str(pp)!r} is a file but {target} is a folder already")
        for parent in list(pp.parents)[:-1]:
            there = dest.joinpath(*parent.parts)
            if there.is_symlink() or (there.exists() and not there.is_dir()):
                raise ArchiveError(f"{archive}: member {str(pp)!r} needs the folder {there}, which is a file already")


def _archive_kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".zip"):
        return "zip"
    if name.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")):
        return "tar"
    if zipfile.is_zipfile(path):
        return "zip"
    if tarfile.is_tarfile(path):
        return "tar"
    raise ValueError(f"{path}: unknown archive type (expected .zip, .tar, .tar.gz, .tgz, .tar.bz2, .tar.xz)")


#: the largest expansion (uncompressed size / archive size) extracted: a real dataset archive expands a few times,
#: a decompression bomb hundreds or thousands of times (a 4.7 MB zip of 1 GiB is 218x)
MAX_EXPANSION_RATIO = 100.0
#: the largest total size extracted, in bytes, unless ``$GRIDIFY_MAX_EXTRACT_BYTES`` says otherwise
MAX_EXTRACT_BYTES_ENV = "GRIDIFY_MAX_EXTRACT_BYTES"
DEFAULT_MAX_EXTRACT_BYTES = 256 << 30


def _check_expanded_size(archive: Path, dest: Path, total: int) -> None:
    """Refuse an archive whose members add up to more than the extraction limit, expand more than
    :data:`MAX_EXPANSION_RATIO` times, or need more than the free space at ``dest`` (before anything is written)."""
    from .._checks import format_bytes

    env = os.environ.get(MAX_EXTRACT_BYTES_ENV, "").strip()
    try:
        limit = int(float(env)) if env else DEFAULT_MAX_EXTRACT_BYTES
    except ValueError:
        raise ValueError(f"{MAX_EXTRACT_BYTES_ENV} must be a number of bytes, got {env!r}") from None
    size = max(archive.stat().st_size, 1)
    if total > limit:
        raise ValueError(
            f"{archive}: expands to {format_bytes(total)}, more than the extraction limit of "
            f"{format_bytes(limit)} (set {MAX_EXTRACT_BYTES_ENV} to allow it); refusing to extract"
        )
    if total > 1 << 20 and total / size > MAX_EXPANSION_RATIO:
        raise ValueError(
            f"{archive}: {format_bytes(size)} that expand to {format_bytes(total)} ({total / size:.0f}x, "
            f"more than {MAX_EXPANSION_RATIO:.0f}x: a decompression bomb or a corrupt archive); "
            f"refusing to extract"
        )
    free = shutil.disk_usage(dest).free
    if total > free:
        raise ValueError(
            f"{archive}: expands to {format_bytes(total)} but {dest} has {format_bytes(free)} free; refusing to extract"
        )


def extract_archive(archive: PathLike, dest: PathLike) -> Path:
    """Extract a zip or tar archive into the folder ``dest`` after checking every member and the
    total expanded size (``_check_expanded_size``: the limit, the expansion ratio, the free space).

    Raises:
        ValueError: unknown or corrupt archive, or an unsafe member (absolute path, ``..``,
            a link pointing outside ``dest``, a device file).
        ArchiveError: (a DownloadError and a ValueError) members that collide (a file and a folder
            of the same name, a member below
            a file, a member where ``dest`` already holds something of the other kind), naming
            the archive and the members.
    """
    archive = Path(archive)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    kind = _archive_kind(archive)
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                infos = zf.infolist()
                for info in infos:
                    pp = _check_member_name(info.filename, archive)
                    mode = info.external_attr >> 16
                    if stat.S_ISLNK(mode):
                        target = zf.read(info).decode("utf-8", "replace")
                        _check_link_target(pp, target, archive, hard=False)
                _check_collisions([(_check_member_name(i.filename, archive), i.is_dir()) for i in infos], archive, dest)
                _check_expanded_size(archive, dest, sum(i.file_size for i in infos))
                bad = zf.testzip()
                if bad is not None:
                    raise ValueError(f"{archive}: corrupt archive (CRC error in member {bad!r})")
                zf.extractall(dest)
        else:
            with tarfile.open(archive) as tf:
                members = tf.getmembers()
                for m in members:
                    pp = _check_member_name(m.name, archive)
                    if m.issym() or m.islnk():
                        _check_link_target(pp, m.linkname, archive, hard=m.islnk())
                    elif not (m.isfile() or m.isdir()):
                        raise ValueError(
                            f"{archive}: unsafe archive member {m.name!r} (device, fifo or "
                            f"other special file); refusing to extract"
                        )
                _check_collisions([(_check_member_name(m.name, archive), m.isdir()) for m in members], archive, dest)
                _check_expanded_size(archive, dest, sum(m.size for m in members if m.isfile()))
                if hasattr(tarfile, "data_filter"):  # defence in depth (Python >= 3.11.4)
                    tf.extractall(dest, members=members, filter="data")
                else:  # pragma: no cover
                    tf.extractall(dest, members=members)
    except ValueError:
        raise
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise  # a real I/O problem (disk full, permissions), not a corrupt archive
        raise ValueError(f"{archive}: corrupt or truncated archive ({type(exc).__name__}: {exc})") from None
    # belt and braces: nothing may resolve outside dest
    root = dest.resolve()
    for p in dest.rglob("*"):
        if p.is_symlink():
            target = (p.parent / os.readlink(p)).resolve()
            if root not in target.parents and target != root:
                raise ValueError(f"{archive}: link {p} points outside the destination")
    return dest


# --------------------------------------------------------------------------------------
# the whole pipeline
# --------------------------------------------------------------------------------------
def _manual_hint(filename: str, urls: Sequence[str], archive_path: Path, sha256: Optional[str], note: str) -> str:
    lines = [f"Download {filename!r} by hand from one of:"]
    lines += [f"    {u}" for u in urls]
    if note:
        lines.append(f"  ({note})")
    lines.append(f"and put it at:\n    {archive_path}")
    if sha256:
        lines.append(f"(its sha256 must be {sha256})")
    lines.append("then run again: the archive there is verified and extracted automatically.")
    return "\n".join(lines)


def download_and_extract(
    name: str,
    root: PathLike,
    urls: Sequence[str],
    sha256: Optional[str] = None,
    *,
    filename: Optional[str] = None,
    extract: bool = True,
    keep_archive: bool = True,
    timeout: float = 30.0,
    retries: int = 1,
    progress: bool = True,
    note: str = "",
) -> Path:
    """Make ``root/name`` hold the extracted contents of an archive, fetching it if needed.

    Steps: (1) ``root/name`` already complete (it has the :data:`COMPLETE_MARKER`) -> done;
    (2) an archive ``root/<filename>`` placed by hand (or downloaded earlier) is verified
    against ``sha256``; (3) otherwise each mirror in ``urls`` is tried in order, resuming a
    previous partial download; (4) the archive is extracted into a temporary folder, the
    marker is written, and the folder is renamed to ``root/name``. An archive holding a single
    top-level folder is unwrapped (``ModelNet40.zip`` -> ``root/ModelNet40/<classes>``).

    Args:
        name: folder name of the extracted dataset under ``root``.
        root: the data root.
        urls: mirror URLs (``http(s)://`` or ``file://``), tried in order.
        sha256: expected hex checksum of the archive; ``None`` skips verification (the
            computed checksum is then recorded in the marker and reported).
        filename: archive name; defaults to the last path component of the first URL.
        extract: False only downloads (returns the archive path).
        keep_archive: keep the archive after a successful extraction.
        timeout: socket timeout per request, seconds.
        retries: attempts per mirror.
        progress: show a tqdm progress bar when tqdm is installed.
        note: extra advice appended to the by-hand instructions.

    Returns:
        ``root/name`` (or the archive path when ``extract=False``).

    Raises:
        DownloadError: no mirror worked; the message says what to download, from where, and
            where to put it.
        ValueError: an archive placed by hand has the wrong sha256, the archive is corrupt,
            or it contains unsafe members; or ``root/name`` exists but is incomplete.
    """
    if not urls and filename is None:
        raise ValueError(f"download_and_extract({name!r}): give at least one URL or a filename")
    root = Path(root)
    dest = root / name
    if extract and dest.exists():
        if is_complete(dest):
            return dest
        raise ValueError(
            f"{dest} exists but has no {COMPLETE_MARKER} marker: it may be a partial "
            f"extraction or data placed there by hand. Delete it to re-extract, or (if it "
            f"is complete) point the dataset's root at it directly."
        )
    filename = _archive_name(name, urls, filename)
    archive = root / filename
    root.mkdir(parents=True, exist_ok=True)
    _obtain_archive(name, filename, archive, urls, sha256, timeout, retries, progress, note)
    if not extract:
        return archive
    digest = sha256 or sha256_of(archive)
    _extract_into_place(
        archive, root, name, dest, {"name": name, "archive": filename, "sha256": digest, "verified": sha256 is not None}
    )
    if sha256 is None:
        warn_at_caller(
            f"{archive}: no reference sha256 to verify against; its sha256 is {digest} "
            f"(recorded in {dest / COMPLETE_MARKER})"
        )
    if not keep_archive:
        archive.unlink(missing_ok=True)
    return dest


def _archive_name(name: str, urls: Sequence[str], filename: Optional[str]) -> str:
    """The archive's file name: ``filename``, else the last path component of the first URL."""
    filename = filename or PurePosixPath(urllib.request.url2pathname(str(urls[0]).split("?")[0])).name
    if not filename:
        raise ValueError(f"download_and_extract({name!r}): cannot infer the archive name from {urls[0]!r}")
    return filename


def _obtain_archive(
    name: str,
    filename: str,
    archive: Path,
    urls: Sequence[str],
    sha256: Optional[str],
    timeout: float,
    retries: int,
    progress: bool,
    note: str,
) -> None:
    """Make ``archive`` (``root/filename``) exist: a copy there with the right sha256 is kept, a wrong one set aside
    (:func:`_set_aside_mismatch`) and the mirrors tried in order. When none works, a set-aside copy is put back
    and a ValueError (it was wrong) or DownloadError (there was none) says what to download by hand."""
    bad_copy, mismatch = _set_aside_mismatch(archive, sha256)
    if archive.exists():
        return
    errors = _fetch_from_mirrors(urls, archive, sha256, timeout, retries, progress)
    if archive.exists():
        return
    tried = "\n".join(f"    {e}" for e in errors) or "    (no mirror URLs given)"
    hint = _manual_hint(filename, urls, archive, sha256, note)
    if bad_copy is not None:
        os.replace(bad_copy, archive)  # leave things as they were
        raise ValueError(
            f"{mismatch}. Re-fetching it failed; tried:\n{tried}\nDelete it and run "
            f"again, or replace it with a good copy.\n" + hint
        )
    raise DownloadError(
        f"could not download {filename!r} for dataset {name!r} (no mirror worked)\ntried:\n{tried}\n" + hint
    )


def _set_aside_mismatch(archive: Path, sha256: Optional[str]) -> Tuple[Optional[Path], str]:
    """An archive whose sha256 is wrong (a half download, another version) is moved aside to
    ``<name>.corrupt`` (never silently deleted) so a good copy can be fetched: ``(moved, message)``."""
    if not archive.exists() or sha256 is None:
        return None, ""
    got = sha256_of(archive)
    if got.lower() == sha256.lower():
        return None, ""
    mismatch = (
        f"{archive}: sha256 mismatch (expected {sha256}, got {got}); the archive is "
        f"truncated, corrupt or a different version"
    )
    bad_copy = archive.with_name(archive.name + ".corrupt")
    os.replace(archive, bad_copy)
    warn_at_caller(f"{mismatch}; moved it to {bad_copy} and re-fetching it")
    return bad_copy, mismatch


def _fetch_from_mirrors(
    urls: Sequence[str], archive: Path, sha256: Optional[str], timeout: float, retries: int, progress: bool
) -> List[str]:
    """Try each mirror (``retries`` attempts each, with back-off) until ``archive`` exists; the errors seen."""
    errors: List[str] = []
    attempts = max(1, int(retries))
    for url in urls:
        for attempt in range(attempts):
            try:
                download_file(url, archive, sha256=sha256, timeout=timeout, progress=progress)
                break
            except ValueError as exc:  # checksum mismatch: this mirror serves something else
                errors.append(f"{url}: {exc}")
                break
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                reason = getattr(exc, "reason", None) or exc
                errors.append(f"{url}: {type(exc).__name__}: {reason}")
                if attempt + 1 < attempts:
                    time.sleep(min(2.0**attempt, 10.0))
        if archive.exists():
            break
    return errors


def _extract_into_place(archive: Path, root: Path, name: str, dest: Path, marker: Dict[str, Any]) -> None:
    """Extract into a temporary folder, write the completion marker, rename to ``dest`` (atomic)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.extracting-", dir=str(root)))
    try:
        extract_archive(archive, tmp)
        entries = [p for p in tmp.iterdir() if p.name not in ("__MACOSX",)]
        content = entries[0] if (len(entries) == 1 and entries[0].is_dir()) else tmp
        marker = dict(marker, extracted_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
        (content / COMPLETE_MARKER).write_text(json.dumps(marker, indent=1))
        try:
            os.rename(content, dest)
        except OSError:
            if not is_complete(dest):  # else another process finished first
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def download_archive(key: str, root: PathLike, **kwargs) -> Path:
    """:func:`download_and_extract` for one of the known :data:`ARCHIVES` (any spelling :func:`resolve_archive`
    accepts)."""
    spec = ARCHIVES[resolve_archive(key)]
    return download_and_extract(
        spec.name, root, spec.urls, spec.sha256, filename=spec.filename, note=spec.note, **kwargs
    )


def manual_instructions(key: str, root: PathLike) -> str:
    """The by-hand download instructions for one of the known :data:`ARCHIVES`."""
    spec = ARCHIVES[resolve_archive(key)]
    return _manual_hint(spec.filename, spec.urls, Path(root) / spec.filename, spec.sha256, spec.note)
