"""The format registry: which reader handles which file extension.

One :class:`ReaderFormat` record per format: its extensions, a one-line description, whether it
is a mesh format, its reader and the keyword arguments of :func:`~gridify.io.read_points` the
reader accepts. Dispatch in :func:`~gridify.io.read_points` and :func:`~gridify.io.read_mesh`,
the extension lists (``SUPPORTED_EXTENSIONS``, ``MESH_EXTENSIONS``) and the format table of the
package docstring (:func:`describe_formats`) are all read from this one table, so a format
registered with :func:`register_reader` is read, listed and documented like a built-in one::

    @register_reader(".foo", "toy format, one ``x y z`` line per point", options=("columns",))
    def read_foo(path: Path, *, columns: Optional[Sequence[str]] = None) -> PointCloud: ...

A reader is called as ``reader(path, **options)``: ``path`` is an existing, non-empty
:class:`~pathlib.Path`, ``options`` the declared subset of :data:`READ_OPTIONS` (``num_samples``
is an ``int`` in ``[1, MAX_SAMPLES]``, ``fields`` None, ``"all"`` or a tuple of names,
``labels_from`` None or a name; read_points refuses ``columns`` / ``fields`` / ``labels_from`` for a
format that does not declare them, and hands a reader no option it did not declare). It returns a
:class:`~gridify.io.PointCloud` and raises ValueError naming the file for bad input; read_points wraps any other exception into such a ValueError (a
FileNotFoundError for another file it opens into a ReferencedFileNotFoundError, also one). A
``mesh_reader(path)`` returns the raw mesh, as :func:`~gridify.io.read_mesh` does.

Shapes:
    a reader returns a :class:`~gridify.io.PointCloud` (points ``[N, 3]``); a mesh reader
    ``(vertices [V, 3] float64, faces [F, 3] int64)``.
"""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

import numpy as np

from .cloud import PointCloud

__all__ = [
    "READ_OPTIONS",
    "ReaderFormat",
    "register_reader",
    "unregister_reader",
    "find_format",
    "reader_takes",
    "formats",
    "describe_formats",
    "supported_extensions",
    "mesh_extensions",
    "mesh_reader_extensions",
]

#: keyword arguments of read_points a reader may accept (it declares which in ``options``)
READ_OPTIONS: Tuple[str, ...] = ("num_samples", "seed", "columns", "fields", "labels_from")

PointReader = Callable[..., PointCloud]
MeshReader = Callable[[Path], Tuple[np.ndarray, np.ndarray]]
Extensions = Union[str, Iterable[str]]

_DESCRIPTION_WIDTH = 63  # characters per line of the description column of describe_formats()


@dataclasses.dataclass(frozen=True)
class ReaderFormat:
    """One registered file format.

    Attributes:
        extensions: lower-case extensions with the dot, e.g. ``(".xyz", ".txt")``.
        description: one line for the format table (reStructuredText inline markup allowed).
        reader: ``reader(path, **options) -> PointCloud``.
        options: the keyword arguments of read_points the reader takes, from :data:`READ_OPTIONS`.
        is_mesh: the format always holds a mesh (its points are surface samples).
        mesh_reader: ``mesh_reader(path) -> (vertices, faces)`` for read_mesh, or None.
    """

    extensions: Tuple[str, ...]
    description: str
    reader: PointReader
    options: Tuple[str, ...] = ()
    is_mesh: bool = False
    mesh_reader: Optional[MeshReader] = None


# extension -> its format, in registration order (the order of SUPPORTED_EXTENSIONS)
_BY_EXTENSION: Dict[str, ReaderFormat] = {}


def _extensions(where: str, extensions: Extensions) -> Tuple[str, ...]:
    exts = (extensions,) if isinstance(extensions, str) else tuple(extensions)
    if not exts:
        raise ValueError(f"{where}: give at least one extension")
    for ext in exts:
        if not isinstance(ext, str) or not re.fullmatch(r"\.[^./\\\s]+", ext):
            raise ValueError(
                f"{where}: an extension is a dot followed by a name without dots, slashes "
                f"or spaces, e.g. '.xyz'; got {ext!r}"
            )
    return tuple(dict.fromkeys(ext.lower() for ext in exts))


def _release(extensions: Tuple[str, ...]) -> None:
    """The formats holding any of ``extensions`` keep only their other extensions.

    The caller then reassigns (same place in the order) or removes ``extensions`` themselves.
    """
    holders = {id(f): f for f in (_BY_EXTENSION.get(e) for e in extensions) if f is not None}
    for old in holders.values():
        kept = dataclasses.replace(old, extensions=tuple(e for e in old.extensions if e not in extensions))
        for ext in kept.extensions:
            _BY_EXTENSION[ext] = kept


def register_reader(
    extensions: Extensions,
    description: str,
    reader: Optional[PointReader] = None,
    *,
    options: Iterable[str] = (),
    is_mesh: bool = False,
    mesh_reader: Optional[MeshReader] = None,
    replace: bool = False,
) -> Callable[..., Any]:
    """Register ``reader`` for files with ``extensions``; a decorator when ``reader`` is omitted.

    Args:
        extensions: one extension or several (``".foo"`` or ``(".foo", ".bar")``), matched
            case-insensitively against the file's last suffix.
        description: one line for the format table (:func:`describe_formats`).
        reader: ``reader(path, **options) -> PointCloud`` (see the module docstring).
        options: which of ``num_samples``, ``seed``, ``columns``, ``fields``, ``labels_from``
            read_points passes on.
        is_mesh: the format always holds a mesh; it is then listed in ``MESH_EXTENSIONS`` and
            needs a ``mesh_reader`` (:func:`~gridify.io.register_mesh_reader` builds both).
        mesh_reader: ``mesh_reader(path) -> (vertices, faces)``, used by read_mesh.
        replace: take over extensions that are already registered (they keep their place in
            ``SUPPORTED_EXTENSIONS``); otherwise that is a ValueError.

    Returns:
        ``reader`` (the decorated function, unchanged).
    """
    where = "register_reader"
    exts = _extensions(where, extensions)
    opts = tuple(options)
    unknown = sorted(set(opts) - set(READ_OPTIONS))
    if unknown:
        raise ValueError(f"{where}: unknown options {unknown}; a reader may take {list(READ_OPTIONS)}")
    if not isinstance(description, str) or not description.strip() or "\n" in description.strip():
        raise ValueError(f"{where}: description must be one non-empty line, got {description!r}")
    if mesh_reader is not None and not callable(mesh_reader):
        raise TypeError(f"{where}: mesh_reader must be callable, got {type(mesh_reader).__name__}")
    if is_mesh and mesh_reader is None:
        raise ValueError(f"{where}: a mesh format ({', '.join(exts)}) needs a mesh_reader")

    def add(fn: PointReader) -> PointReader:
        if not callable(fn):
            raise TypeError(f"{where}: reader must be callable, got {type(fn).__name__}")
        taken = [e for e in exts if e in _BY_EXTENSION]
        if taken and not replace:
            raise ValueError(
                f"{where}: {', '.join(taken)} already has a reader "
                f"({_BY_EXTENSION[taken[0]].description!r}); pass replace=True to replace it"
            )
        record = ReaderFormat(
            exts, description.strip(), fn, tuple(o for o in READ_OPTIONS if o in opts), bool(is_mesh), mesh_reader
        )
        _release(tuple(taken))
        for ext in exts:  # a taken extension keeps its place in the order
            _BY_EXTENSION[ext] = record
        return fn

    return add if reader is None else add(reader)


def unregister_reader(extensions: Extensions) -> None:
    """Forget the readers of ``extensions``; a format keeps its other extensions.

    Raises:
        KeyError: one of ``extensions`` has no reader.
    """
    exts = _extensions("unregister_reader", extensions)
    missing = [e for e in exts if e not in _BY_EXTENSION]
    if missing:
        raise KeyError(f"unregister_reader: no reader is registered for {', '.join(missing)}")
    _release(exts)
    for ext in exts:
        del _BY_EXTENSION[ext]


def find_format(extension: str) -> Optional[ReaderFormat]:
    """The format registered for ``extension`` (with the dot, any case), or None."""
    return _BY_EXTENSION.get(extension.lower())


def reader_takes(path: Any, option: str) -> bool:
    """Whether the reader of ``path``'s format (by its last suffix) takes the read_points ``option``
    (one of :data:`READ_OPTIONS`, e.g. ``"fields"``); False for an unregistered extension."""
    fmt = find_format(Path(path).suffix)
    return fmt is not None and option in fmt.options


def formats() -> Tuple[ReaderFormat, ...]:
    """Every registered format, in registration order."""
    return tuple({id(f): f for f in _BY_EXTENSION.values()}.values())


def supported_extensions() -> Tuple[str, ...]:
    """Every registered extension, in registration order (``SUPPORTED_EXTENSIONS``)."""
    return tuple(_BY_EXTENSION)


def mesh_extensions() -> Tuple[str, ...]:
    """The extensions of mesh formats (``MESH_EXTENSIONS``)."""
    return tuple(e for e, f in _BY_EXTENSION.items() if f.is_mesh)


def mesh_reader_extensions() -> Tuple[str, ...]:
    """The extensions read_mesh reads: mesh formats, then formats that may hold a mesh (PLY)."""
    return mesh_extensions() + tuple(e for e, f in _BY_EXTENSION.items() if not f.is_mesh and f.mesh_reader is not None)


def describe_formats() -> str:
    """The format table, as a reStructuredText simple table (the package docstring shows it).

    One row per format: its extensions and its description, wrapped to 63 characters.
    """
    wrap = textwrap.TextWrapper(_DESCRIPTION_WIDTH, break_long_words=False, break_on_hyphens=False).wrap
    rows = [("``" + " ".join(f.extensions) + "``", wrap(f.description)) for f in formats()]
    left = max([len(ext) for ext, _ in rows] + [len("Extensions")]) + 2
    rule = "=" * (left - 2) + "  " + "=" * _DESCRIPTION_WIDTH
    lines = [rule, "Extensions".ljust(left) + "Format", rule]
    for ext, desc in rows:
        lines.append((ext.ljust(left) + desc[0]).rstrip())
        lines.extend(" " * left + more for more in desc[1:])
    lines.append(rule)
    return "\n".join(lines)
