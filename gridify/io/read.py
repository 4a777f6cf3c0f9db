"""The entry point :func:`read_points`: check the file, pick its reader, check the cloud it returns; and
:func:`read_scan`, the one reading of a scan for a scene segmenter (every per-point field its format holds).

The reader is the one the format registry (:mod:`gridify.io.registry`) holds for the file's
extension; :func:`~gridify.io.source.check_file` and :func:`finalize` are the checks every read
goes through (:func:`~gridify.io.read_mesh` uses check_file too). A mesh is sampled into at most
:data:`MAX_SAMPLES` points: ``num_samples`` is checked before anything is read or allocated.

Shapes:
    points ``[N, 3]`` float32 (float64 for large-offset coordinates, see :mod:`gridify.io.cloud`);
    normals/colors ``[N, 3]`` float32; labels ``[N]`` int64; fields name -> ``[N]``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, TypeVar, Union

import numpy as np

from .._checks import check_bool, check_int, fail, is_int, warn_at_caller
from .._files import PathLike
from .cloud import PointCloud, bulk_box, representable_rows, stray_rows
from .registry import find_format, formats, reader_takes, supported_extensions
from .source import ReferencedFileNotFoundError, check_file

__all__ = [
    "read_points",
    "read_scan",
    "holds_fields",
    "finalize",
    "check_read_options",
    "check_format_options",
    "run_reader",
    "MAX_SAMPLES",
]

#: options of the mesh readers (surface sampling); a point file has no surface, so they do not apply
MESH_OPTIONS = ("num_samples", "seed")
#: the most points read_points samples on a mesh (about 130 bytes of temporaries per sample: ~2 GB)
MAX_SAMPLES = 1 << 24

Fields = Union[None, str, Sequence[str]]
T = TypeVar("T")


def read_points(
    path: PathLike,
    *,
    num_samples: int = 10_000,
    seed: int = 0,
    columns: Optional[Sequence[str]] = None,
    drop_invalid: bool = True,
    fields: Fields = None,
    labels_from: Optional[str] = None,
) -> PointCloud:
    """Read a point cloud (or surface-sample a mesh) from ``path``.

    Args:
        path: the file; its extension picks the reader (see :func:`~gridify.io.describe_formats`).
        num_samples: number of surface points drawn from a mesh file (OFF/OBJ/STL/GLB/glTF, or
            a PLY with faces), at most ``MAX_SAMPLES`` (2**24). Ignored for point-cloud files.
        seed: seed of the mesh surface sampling; the same seed gives the same points.
        columns: for text and ``.npy`` files, the meaning of each column, e.g.
            ``("x", "y", "z", "r", "g", "b", "label")``; names are ``x y z nx ny nz r g b
            label``, ``_`` (ignored) and ``intensity`` (or ``remission``, ``reflectance``, ``strength``: kept
            in :attr:`PointCloud.fields`, what a scene segmenter reads). ``None`` infers it from the column count. A format that
            cannot honour ``columns``, ``fields`` or ``labels_from`` (``columns=`` on a ``.bin``)
            refuses it with a ValueError instead of ignoring it.
        drop_invalid: drop points whose coordinates are NaN/Inf or beyond the float32 range
            (organised PCD scans mark missing returns that way) with a warning; when False such
            a file raises.
        fields: extra per-point scalar fields to keep in :attr:`PointCloud.fields`, for formats
            with named fields (LAS/LAZ dimensions such as ``intensity``, ``return_number``,
            ``gps_time``; PLY vertex properties; PCD fields): a list of names, or ``"all"``.
        labels_from: the field whose values become ``labels`` (int64), e.g. ``"classification"``
            for LAS/LAZ; by default a file's ``label``-like field, if any (LAS/LAZ: none).

    Returns:
        A :class:`PointCloud`; ``source`` is the path as a string.

    Shapes:
        points ``[N, 3]`` (float64 only for large-offset coordinates); normals/colors ``[N, 3]``;
        labels ``[N]``; each field ``[N]``.

    Raises:
        FileNotFoundError: the file does not exist (or is a broken symbolic link).
        ReferencedFileNotFoundError: a file it refers to (a ``.gltf``'s buffer file, a
            registered reader's sidecar) does not exist; both a FileNotFoundError and a
            ValueError, naming both files.
        ValueError: the file is empty, truncated, corrupt, not a regular file, unreadable, or has
            an unsupported extension; the message names the file and the problem.
    """
    options = check_read_options(
        num_samples=num_samples,
        seed=seed,
        columns=columns,
        drop_invalid=drop_invalid,
        fields=fields,
        labels_from=labels_from,
    )
    p = check_file(path)
    ext = p.suffix.lower()
    fmt = find_format(ext)
    if fmt is None:
        raise ValueError(
            f"{p}: unsupported file extension {p.suffix!r}; supported: {', '.join(supported_extensions())}"
        )
    check_format_options(p, fmt, options)
    cloud = run_reader(p, fmt.reader, **{k: options[k] for k in fmt.options})
    return finalize(cloud, p, drop_invalid)


def holds_fields(path: PathLike) -> bool:
    """Whether the format of ``path`` (by its suffix) has named per-point fields (LiDAR intensity and the like: a
    KITTI ``.bin``, LAS/LAZ, PLY, PCD), which :func:`read_points` keeps only when asked (``fields=``) and
    :func:`read_scan` always keeps; False for a format without (text, ``.npy``: their columns are named with
    ``columns=``) and for an unregistered extension."""
    return reader_takes(path, "fields")


def read_scan(path: PathLike, **options: Any) -> PointCloud:
    """A scan read for a scene segmenter: :func:`read_points` with every per-point field the format holds
    (``fields="all"`` where :func:`holds_fields`), so that the features a model was trained with (LiDAR intensity)
    are found. The one place of that rule: prediction (:meth:`gridify.Predictor.predict` of a path), ``gridify
    predict`` / ``evaluate --scan`` / ``show``, :class:`gridify.export.OnnxSceneModel` and the scene benchmarks read
    scans through it. ``options``: the other keyword arguments of :func:`read_points` (``num_samples``,
    ``columns``, ...), passed on.

    Shapes:
        points ``[N, 3]``; each field ``[N]``.
    """
    if holds_fields(path):
        options = {"fields": "all", **options}
    return read_points(path, **options)


#: what each option of read_points is for, said when a format cannot honour it
_OPTION_USE = {
    "columns": "formats whose columns are unnamed",
    "fields": "formats with named per-point fields",
    "labels_from": "formats with named per-point fields",
}


def check_format_options(p: Path, fmt: Any, options: Dict[str, Any]) -> None:
    """Refuse an option that was given but that ``fmt``'s reader cannot honour (``columns=`` on a ``.bin``,
    ``fields=`` on a ``.xyz``): every option of :data:`~gridify.io.registry.READ_OPTIONS` the format does not
    declare, except ``num_samples`` / ``seed`` (they always have a value; a point file has no surface to
    sample, as read_points documents)."""
    for name, value in options.items():
        if value is None or name in fmt.options or name in MESH_OPTIONS:
            continue
        takers = " ".join(e for f in formats() if name in f.options for e in f.extensions)
        raise ValueError(
            f"{p}: read_points option {name}= does not apply to {p.suffix.lower()} files "
            f"({_OPTION_USE.get(name, 'formats that take it')}: {takers or 'none registered'})"
        )


def run_reader(p: Path, reader: Callable[..., T], **options: Any) -> T:
    """``reader(p, **options)``, with every exception turned into a ValueError naming ``p``.

    The exception: the file itself vanishing stays a plain FileNotFoundError; another missing file
    (one the file refers to) becomes a :class:`ReferencedFileNotFoundError`, which is both.
    """
    ext = p.suffix.lower()
    try:
        return reader(p, **options)
    except FileNotFoundError as exc:
        if isinstance(exc, ReferencedFileNotFoundError) or str(exc).startswith(f"{p}: ") or exc.filename in (p, str(p)):
            raise  # the file itself vanished, or the reader already named both files
        # a file the reader looked for beside this one (a registered reader's sidecar)
        raise ReferencedFileNotFoundError(
            f"{p}: could not read {ext} file: a file it refers to is missing ({exc})"
        ) from exc
    except ValueError as exc:
        if str(p) in str(exc):
            raise
        # a ValueError from numpy/trimesh or a helper (sample_mesh...): name the file
        raise ValueError(f"{p}: could not read {ext} file ({exc})") from exc
    except MemoryError as exc:
        raise ValueError(f"{p}: not enough memory to read the file ({exc or 'MemoryError'})") from exc
    except RecursionError as exc:
        raise ValueError(f"{p}: could not read {ext} file (nested too deeply: {exc})") from exc
    except Exception as exc:  # anything from numpy/trimesh/zipfile becomes a named ValueError
        raise ValueError(f"{p}: could not read {ext} file ({type(exc).__name__}: {exc})") from exc
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":  # KeyboardInterrupt, SystemExit, alarms: not ours
            raise
        # a Rust panic in a compiled dependency (lazrs) surfaces as pyo3's PanicException(BaseException)
        raise ValueError(f"{p}: could not read {ext} file (the decoder failed: {exc})") from exc


def _check_num_samples(where: str, num_samples: Any) -> int:
    """``num_samples`` as an int in ``[1, MAX_SAMPLES]``; an integral float (``7.0``) is accepted."""
    ok = is_int(num_samples) or (
        isinstance(num_samples, float) and math.isfinite(num_samples) and num_samples == int(num_samples)
    )
    if not ok or int(num_samples) < 1:
        fail(where, f"num_samples must be a positive integer, got {num_samples!r}")
    if int(num_samples) > MAX_SAMPLES:
        fail(
            where,
            f"num_samples must be at most {MAX_SAMPLES:,} (sampling a mesh needs about 130 bytes "
            f"per point), got {int(num_samples):,}",
        )
    return int(num_samples)


def check_read_options(
    *,
    num_samples: Any = 10_000,
    seed: Any = 0,
    columns: Any = None,
    drop_invalid: Any = True,
    fields: Any = None,
    labels_from: Any = None,
) -> Dict[str, Any]:
    """The options of read_points, checked (a ValueError names ``read_points`` and the argument).

    Returns:
        ``{name: value}`` for every option a reader may take (``num_samples`` as an int, ``fields``
        as a tuple of names or ``"all"``).
    """
    where = "read_points"
    n = _check_num_samples(where, num_samples)
    check_int(where, "seed", seed, 0)
    check_bool(where, "drop_invalid", drop_invalid)
    if columns is not None and (isinstance(columns, (str, bytes)) or not all(isinstance(c, str) for c in columns)):
        fail(where, f"columns must be a sequence of column names such as ('x', 'y', 'z'), got {columns!r}")
    if fields is not None and fields != "all":
        if isinstance(fields, (str, bytes)) or not all(isinstance(f, str) and f for f in fields):
            fail(where, f'fields must be "all" or a sequence of field names, got {fields!r}')
        fields = tuple(fields)
    if labels_from is not None and not (isinstance(labels_from, str) and labels_from):
        fail(where, f"labels_from must be a field name, got {labels_from!r}")
    return {
        "num_samples": n,
        "seed": int(seed),
        "columns": None if columns is None else tuple(columns),
        "fields": fields,
        "labels_from": labels_from,
    }


def finalize(cloud: PointCloud, p: Path, drop_invalid: bool) -> PointCloud:
    """Check what a reader returned: at least one point (colours in ``[0, 1]``: the readers clip theirs,
    :func:`gridify.io.cloud.clip_unit_colors`), invalid points dropped.

    A point is invalid when a coordinate is NaN, Inf or beyond the float32 range; the rows dropped
    are recorded in ``cloud.dropped`` (with a warning), so a caller pairing the rows with data of
    its own (labels in a sibling file) can drop the same rows or say why counts differ. Call it from
    read_points only: the warning points at read_points' caller.
    """
    cloud.source = str(p)
    if len(cloud) == 0:
        raise ValueError(f"{p}: file contains no points")
    bad = ~representable_rows(cloud.points)
    if bad.any():
        if not drop_invalid:
            raise ValueError(f"{p}: {int(bad.sum())} of {len(cloud)} points have NaN/Inf coordinates")
        if bad.all():
            raise ValueError(f"{p}: all {len(cloud)} points have NaN/Inf coordinates")
        rows = np.flatnonzero(bad).astype(np.int64)
        shown = ", ".join(str(int(r)) for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
        warn_at_caller(
            f"{p}: dropped {len(rows)} of {len(cloud)} points with NaN/Inf coordinates "
            f"(row{'s' if len(rows) > 1 else ''} {shown}, 0-based)"
        )
        cloud = cloud.select(~bad)
        cloud.source = str(p)
        cloud.dropped = rows
    _warn_stray_rows(cloud, p)
    return cloud


def _warn_stray_rows(cloud: PointCloud, p: Path) -> None:
    """Warn, naming the file, the count and the first row (the file's), of rows far outside the rest of a cloud
    with a large offset (:func:`gridify.io.cloud.stray_rows`: a ``(0, 0, 0)`` placeholder beside a UTM scan),
    which are kept: the coordinates stay float64 and are centred on the others, not cast to float32."""
    stray = stray_rows(cloud.points)
    if not len(stray):
        return
    lo, hi = bulk_box(np.asarray(cloud.points, dtype=np.float64))
    first = cloud.points[int(stray[0])]
    at = ", ".join(f"{float(v):.10g}" for v in first)
    centre = ", ".join(f"{float(v):.10g}" for v in (lo + hi) / 2)
    warn_at_caller(
        f"{p}: {len(stray)} of {len(cloud)} rows lie far from the rest of the cloud (first: row "
        f"{cloud.file_row(int(stray[0]))} at ({at}); half the points lie in a box of side "
        f"{float((hi - lo).max()):.4g} around ({centre})): kept, with the coordinates in float64 and centred on the rest; a placeholder row such as "
        f"(0, 0, 0) beside UTM coordinates is better dropped from the file"
    )
