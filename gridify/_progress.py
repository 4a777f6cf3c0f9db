"""Progress of long work (a scene's crops): one ``progress=`` argument with one meaning everywhere.

``progress=`` of :meth:`gridify.Predictor.predict` (scene segmenters), :func:`gridify.scene_inference.predict_scene`
and the CLI's ``predict`` takes ``None`` / ``False`` (silent), ``True`` (a bar on stderr, :func:`stderr_bar`) or a
callable ``progress(done, total)`` called after every model call. :func:`resolve_progress` turns any of them into
``None`` or a callable, and refuses anything else naming the argument.

The bar: ``\\r[what] [#####     ] 12/40 crops`` redrawn in place on a terminal; a line per 10 % (``[what] 12/40
crops (30 %)``) when stderr is a file or a pipe, so a redirected log holds a few lines, not thousands.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional

from ._checks import fail

__all__ = ["ProgressFn", "resolve_progress", "stderr_bar"]

#: ``progress(done, total)``: called after every unit of work (``done`` of ``total`` units)
ProgressFn = Callable[[int, int], None]


def stderr_bar(what: str, unit: str = "crops") -> ProgressFn:
    """A ``progress(done, total)`` callback drawing a bar on stderr (a line per 10 % when stderr is no terminal)."""
    tty = sys.stderr.isatty()
    state = {"shown": -1}

    def progress(done: int, total: int) -> None:
        frac = done / max(total, 1)
        if tty:
            bar = "#" * int(30 * frac)
            end = "\n" if done >= total else ""
            print(f"\r[{what}] [{bar:<30}] {done}/{total} {unit}", end=end, file=sys.stderr, flush=True)
        elif int(10 * frac) > state["shown"]:
            state["shown"] = int(10 * frac)
            print(f"[{what}] {done}/{total} {unit} ({100 * frac:.0f} %)", file=sys.stderr, flush=True)

    return progress


def resolve_progress(where: str, progress: Any, what: str = "predict") -> Optional[ProgressFn]:
    """``None`` / ``False`` -> None, ``True`` -> :func:`stderr_bar` (``what`` labels it), a callable -> itself;
    anything else is refused with a ``ValueError`` naming ``progress``."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return stderr_bar(what)
    if not callable(progress):
        fail(
            where,
            f"progress must be None, True / False or callable as progress(done, total), got {type(progress).__name__}",
        )
    return progress
