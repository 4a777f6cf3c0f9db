"""Input validation shared by the whole library: the one place where arguments are checked.

Every check raises :class:`ValueError` with a message that names the entry point (``where``),
the argument, the problem and, for batched point clouds, the index of the offending cloud, so
users never see a bare traceback from deep inside torch.

One argument order for every helper: ``check_*(where, name, value, *options)``: the entry point
first, then the argument's name as the message prints it, then the value (for
:func:`check_point_pair`, the two names, then the two point sets; :func:`check_alloc`,
``(where, what, nbytes)``). The scalar and the tensor checks read alike:
``check_int(where, "k", k)``, ``check_finite(where, "pos", pos, batch)``,
``check_batch(where, "batch", batch, num_rows)``.

The convention: a public function or module validates its arguments once, with these helpers,
and then calls an unchecked implementation; library code that has already validated its inputs
calls the unchecked implementations directly, so a nested call inside a forward pass never
re-validates (no repeated host synchronisation on a GPU). Public *modules* nested inside other
modules (a backbone inside a model, a kernel network inside a convolution) cannot be bypassed
that way; their value checks (NaN/Inf, index ranges) run only when :func:`validating` is true,
i.e. outside a :func:`trusted_inputs` block and not while a graph is traced or compiled
(``torch.jit.trace``, ONNX export, ``torch.compile``, ``torch.export``). :func:`checked_forward`
decorates a module's ``forward``: it runs a check function at the outermost call and the forward
itself trusted.

Scalar hyper-parameters: :func:`check_int` / :func:`check_positive_int` (integers, ``bool``
refused), :func:`check_number` (finite real numbers with a lower bound), :func:`check_fraction`,
:func:`check_probability` and :func:`check_choice`. Tensors: :func:`check_tensor`,
:func:`check_float` (float16, bfloat16, float32, float64; other floating dtypes are refused),
:func:`check_integer`, :func:`check_device`, :func:`check_points`, :func:`check_point_pair`,
:func:`check_batch`, :func:`check_index` (values in ``[0, size)``), :func:`check_finite`.

Sizes: :func:`check_alloc` refuses a request before anything is allocated for it when

    estimated bytes  >  limit = $GRIDIFY_MAX_ALLOC_BYTES, else the memory granted to the process:
                                the machine's physical memory, or less where its cgroup's limit
                                (memory.max) or the address-space limit (ulimit -v, less what the
                                process maps already) grants less (for a CUDA device: that device's memory)

with a message naming the argument that asked for it and the bytes it would need.

Shapes:
    check_batch: batch [N] -> (batch [N] int64, B, counts [B]); check_index: index [E], values
    in [0, size); check_finite: any tensor, rows along dim 0.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import sys
import warnings
from typing import Any, Callable, Iterator, NoReturn, Optional, Sequence, Tuple, TypeVar

import numpy as np
import torch
from torch import Tensor

#: floating dtypes every public op and module accepts
SUPPORTED_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: integer dtypes accepted for index and batch tensors (``bool`` is refused)
INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
#: environment variable that overrides the allocation limit of :func:`check_alloc` (bytes)
MAX_ALLOC_ENV = "GRIDIFY_MAX_ALLOC_BYTES"


_INTERNAL_DIRS = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,  # gridify
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,  # torch (a module's __call__, autograd)
)


def warn_at_caller(message: str, category: type = UserWarning) -> None:
    """``warnings.warn`` attributed to the user's line: the first frame outside gridify and torch, however
    deep the call that warns (a fixed ``stacklevel`` points inside torch when a model's forward warns)."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL_DIRS):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level if frame is not None else 2)


def fail(where: str, msg: str) -> NoReturn:
    raise ValueError(f"{where}: {msg}")


def is_int(value: Any) -> bool:
    """A Python or NumPy integer, not a ``bool``."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> bool:
    """A real Python or NumPy number (possibly NaN/Inf), not a ``bool``."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def check_bool(where: str, name: str, value: Any) -> bool:
    """``value`` (a Python or NumPy bool) as a ``bool``; anything else raises, naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        fail(where, f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_int(
    where: str, name: str, value: Any, minimum: int = 1, allow_none: bool = False, as_bound: bool = False
) -> Optional[int]:
    """``value`` as an ``int >= minimum`` (or None when ``allow_none``); else ValueError.

    The message says "a positive integer" (``minimum=1``), "a non-negative integer" (0) or
    "an integer >= m" (any minimum, or always with ``as_bound``), with " or None" when None
    is allowed.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, torch.SymInt):  # a symbolic size under an exporter: no value to check
        return value  # type: ignore[return-value]
    if not is_int(value) or value < minimum:
        words = {} if as_bound else {1: "a positive integer", 0: "a non-negative integer"}
        what = words.get(minimum, f"an integer >= {minimum}")
        fail(where, f"{name} must be {what}{' or None' if allow_none else ''}, got {value!r}")
    return int(value)


def check_positive_int(where: str, **values: Any) -> None:
    """Every keyword value must be a positive integer (``check_positive_int("Conv", channels=c)``)."""
    for name, value in values.items():
        check_int(where, name, value, 1)


def _finite(value: Any) -> bool:
    """``math.isfinite`` of a real number; False for an int beyond the float range (10**400), which it cannot take."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_number(
    where: str, name: str, value: Any, minimum: float = 0.0, strict: bool = True, allow_none: bool = False
) -> Optional[float]:
    """``value`` as a finite ``float`` above ``minimum`` (``> minimum`` when ``strict``, else ``>=``).

    With ``minimum=0`` the message says "a positive finite number" (strict) or "a non-negative
    finite number"; otherwise "a finite number > m" / ">= m".
    """
    if value is None and allow_none:
        return None
    ok = is_real(value) and _finite(value) and (value > minimum if strict else value >= minimum)
    if not ok:
        if minimum == 0:
            what = "a positive finite number" if strict else "a non-negative finite number"
        else:
            what = f"a finite number {'>' if strict else '>='} {minimum:g}"
        fail(where, f"{name} must be {what}{' or None' if allow_none else ''}, got {value!r}")
    return float(value)


#: Largest frequency scale (``omega0``) of a sinusoidal field or kernel: with ``2 pi omega0`` radians
#: per unit on coordinates of order 1, larger scales give float32 phases whose rounding error is
#: itself radians (an all-NaN or meaningless field instead of an error).
MAX_FREQUENCY_SCALE = 1e4


def check_frequency_scale(where: str, name: str, value: Any) -> float:
    """``value`` as a positive finite frequency scale of at most :data:`MAX_FREQUENCY_SCALE`."""
    v = check_number(where, name, value)
    if v > MAX_FREQUENCY_SCALE:  # type: ignore[operator]
        fail(
            where,
            f"{name} must be at most {MAX_FREQUENCY_SCALE:g} (a frequency scale; larger ones put float32 "
            f"phases beyond their precision), got {value!r}",
        )
    return v  # type: ignore[return-value]


def check_fraction(where: str, name: str, value: Any) -> float:
    """``value`` as a finite number in ``(0, 1]`` (a fraction of something to keep)."""
    ok = is_real(value) and math.isfinite(value) and 0.0 < value <= 1.0
    if not ok:
        fail(where, f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def check_probability(where: str, name: str, value: Any, include_one: bool = False) -> float:
    """``value`` as a probability in ``[0, 1)`` (``[0, 1]`` with ``include_one``)."""
    ok = is_real(value) and math.isfinite(value) and 0.0 <= value and (value <= 1.0 if include_one else value < 1.0)
    if not ok:
        fail(where, f"{name} must be a probability in [0, {'1]' if include_one else '1)'}, got {value!r}")
    return float(value)


def check_choice(where: str, name: str, value: Any, choices: Sequence[Any], unknown: bool = False) -> Any:
    """``value`` must be one of ``choices`` (shown as given: a tuple or a list).

    The message reads "name must be one of ..., got v", or with ``unknown`` (for names of
    backends and reductions) "unknown name v; expected one of ...".
    """
    try:
        ok = value in choices
    except TypeError:  # unhashable value against a set
        ok = False
    if not ok:
        fail(
            where,
            f"unknown {name} {value!r}; expected one of {choices}"
            if unknown
            else f"{name} must be one of {choices}, got {value!r}",
        )
    return value


def check_tensor(where: str, name: str, t: object) -> Tensor:
    if not isinstance(t, Tensor):
        fail(where, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t  # type: ignore[return-value]


def check_float(where: str, name: str, t: Tensor) -> None:
    """A floating tensor of a supported dtype (float16, bfloat16, float32, float64)."""
    if not t.is_floating_point():
        fail(where, f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if t.dtype not in SUPPORTED_FLOATS:
        fail(where, f"{name} has the unsupported dtype {t.dtype}; use float16, bfloat16, float32 or float64")


def check_integer(where: str, name: str, t: Tensor) -> None:
    """An integer tensor (``bool`` and floating tensors refused)."""
    if t.dtype not in INTEGER_DTYPES:
        fail(where, f"{name} must be an integer tensor, got dtype {t.dtype}")


def check_device(where: str, name: str, t: Tensor, device: torch.device, other: str = "the points") -> None:
    if t.device != device:
        fail(where, f"{name} is on {t.device} but {other} are on {device}")


def check_point_pair(where: str, names: Tuple[str, str], x: object, y: object) -> Tuple[Tensor, Tensor]:
    """Validate two point sets of one dimension on one device (the ``x``/``y`` of a search, named ``names``)."""
    nx, ny = names
    x = check_tensor(where, nx, x)
    y = check_tensor(where, ny, y)
    for name, t in ((nx, x), (ny, y)):
        if t.dim() != 2:
            fail(where, f"{name} must have shape [num_points, dim], got {tuple(t.shape)}")
        check_float(where, name, t)
    if x.size(1) != y.size(1):
        fail(where, f"{nx} and {ny} must have the same dimension, got {x.size(1)} and {y.size(1)}")
    if x.size(1) == 0:
        fail(where, f"{nx} and {ny} must have at least one coordinate per point, got dimension 0")
    if x.device != y.device:
        fail(where, f"{nx} is on {x.device} but {ny} is on {y.device}")
    return x, y


def cloud_of(batch: Optional[Tensor], row: int) -> int:
    return 0 if batch is None else int(batch[row])


def check_finite(
    where: str, name: str, t: Tensor, batch: Optional[Tensor] = None, dims: Optional[Sequence[str]] = None
) -> None:
    """Raise if ``t`` holds NaN or Inf, naming where the first one is.

    Rows are counted along dim 0. The message names the row's cloud (``batch``, or cloud 0) for
    tensors of at most two dimensions, else the full index; ``dims`` names the leading
    dimensions instead (``("sequence", "frame", "point")`` -> "sequence 1, frame 0, point 7").
    """
    if t.numel() == 0 or bool(torch.isfinite(t).all()):
        return
    bad = ~torch.isfinite(t.reshape(t.size(0) if t.dim() else 1, -1))
    rows = bad.any(1).nonzero().flatten()
    row = int(rows[0])
    first = bad[row].nonzero()[0, 0]
    what = "NaN" if bool(torch.isnan(t.reshape(bad.shape)[row, first])) else "Inf"
    if dims is not None:
        flat = row * bad.size(1) + int(first)
        index = np.unravel_index(flat, tuple(t.shape))
        at = ", ".join(f"{d} {int(i)}" for d, i in zip(dims, index))
        fail(where, f"{name} contains {what} values ({_affected(int(bad.sum()))}); first at {at}")
    if t.dim() > 2 and batch is None:
        index = tuple(int(i) for i in np.unravel_index(row * bad.size(1) + int(first), tuple(t.shape)))
        fail(where, f"{name} contains {what} values ({_affected(int(bad.sum()))}); first at index {index}")
    fail(
        where,
        f"{name} contains {what} values ({rows.numel()} rows affected); first in cloud "
        f"{cloud_of(batch, row)} at row {row}",
    )


def _affected(count: int) -> str:
    return f"{count} {'entry' if count == 1 else 'entries'} affected"


def check_batch(
    where: str,
    name: str,
    batch: Optional[Tensor],
    num_rows: int,
    num_clouds: Optional[int] = None,
    device: Optional[torch.device] = None,
    allow_empty: bool = False,
) -> Tuple[Tensor, int, Tensor]:
    """Validate a PyG-style batch vector and return ``(batch, num_clouds, counts)``.

    The vector must be 1-D, integer, of length ``num_rows``, non-negative and sorted (all rows of
    cloud 0, then cloud 1, ...). Every cloud in ``range(num_clouds)`` must be non-empty (unless
    ``allow_empty``). Cloud counts that could only come with empty clouds are refused before
    anything is allocated for them.
    """
    num_clouds = check_int(where, "num_clouds", num_clouds, 0, allow_none=True)
    if batch is None:
        batch = torch.zeros(num_rows, dtype=torch.long, device=device)
    check_tensor(where, name, batch)
    if batch.dim() != 1 or batch.numel() != num_rows:
        fail(
            where, f"{name} must be a 1-D tensor with one entry per point ({num_rows}), got shape {tuple(batch.shape)}"
        )
    check_integer(where, name, batch)
    if device is not None and batch.device != device:
        fail(where, f"{name} is on {batch.device} but the points are on {device}")
    batch = batch.long()
    if num_rows == 0:
        n = int(num_clouds or 0)
        if n > 0 and not allow_empty:
            fail(where, "cloud 0 is empty (no points at all); every cloud needs at least one point")
        check_alloc(where, f"num_clouds={n} (one count per cloud)", 8 * n, batch.device)
        return batch, n, batch.new_zeros(n)
    if int(batch.min()) < 0:
        fail(where, f"{name} holds negative cloud indices")
    if num_rows > 1 and bool((batch[1:] < batch[:-1]).any()):
        row = int((batch[1:] < batch[:-1]).nonzero()[0]) + 1
        fail(where, f"{name} must be sorted (all points of cloud 0, then cloud 1, ...); it decreases at row {row}")
    n = int(batch[-1]) + 1
    if num_clouds is not None:
        if num_clouds < n:
            fail(where, f"{name} refers to cloud {n - 1} but num_clouds={num_clouds}")
        n = num_clouds
    if n > num_rows and not allow_empty:
        what = f"num_clouds={n}" if num_clouds is not None else f"{name} (it refers to cloud {n - 1})"
        fail(
            where,
            f"{what} asks for {n} clouds but there are only {num_rows} points; every cloud needs at least one point",
        )
    check_alloc(where, f"{name} with {n} clouds (one count per cloud)", 8 * n, batch.device)
    counts = torch.bincount(batch, minlength=n)
    if not allow_empty and bool((counts == 0).any()):
        empty = (counts == 0).nonzero().flatten().tolist()
        fail(where, f"cloud {empty[0]} is empty (no points); empty clouds: {empty[:10]}")
    return batch, n, counts


def check_index(
    where: str,
    name: str,
    index: object,
    size: int,
    *,
    device: Optional[torch.device] = None,
    length: Optional[int] = None,
    other: str = "the data",
) -> Tensor:
    """A 1-D integer tensor with values in ``[0, size)`` (and ``length`` entries), returned as int64."""
    index = check_tensor(where, name, index)
    if index.dim() != 1 or (length is not None and index.numel() != length):
        want = f"[{length}]" if length is not None else "[E]"
        fail(where, f"{name} must be a 1-D integer tensor of shape {want}, got shape {tuple(index.shape)}")
    check_integer(where, name, index)
    if device is not None:
        check_device(where, name, index, device, other)
    if index.numel():
        lo, hi = int(index.min()), int(index.max())
        if lo < 0 or hi >= size:
            bad = int(((index < 0) | (index >= size)).nonzero()[0])
            fail(
                where,
                f"{name} values must lie in [0, {size}), got {int(index[bad])} at position {bad} (range [{lo}, {hi}])",
            )
    return index.long()


def check_points(where: str, name: str, pos: object, dim: int = 3) -> Tensor:
    """``pos`` must be a floating tensor of shape [N, dim]."""
    pos = check_tensor(where, name, pos)
    if pos.dim() != 2 or pos.size(-1) != dim:
        fail(where, f"{name} must have shape [N, {dim}], got {tuple(pos.shape)}")
    check_float(where, name, pos)
    return pos


# ---------------------------------------------------------------------------------------------
# validate once: trusted nested calls
# ---------------------------------------------------------------------------------------------
_TRUSTED: "contextvars.ContextVar[bool]" = contextvars.ContextVar("gridify_inputs_trusted", default=False)
F = TypeVar("F", bound=Callable[..., Any])


def validating() -> bool:
    """Whether the current call must run its value checks (NaN/Inf scans, index ranges).

    False inside :func:`trusted_inputs` (library code vouches for the inputs) and while a graph is
    traced: :func:`torch.jit.trace`, ONNX export, :func:`torch.compile` (dynamo) and
    :func:`torch.export` -- a value check is a data-dependent branch, which a graph cannot hold.
    Shape, dtype and type checks do not ask this: they run always (eagerly they are what gives a
    correct error; traced, their conditions are static).
    """
    if torch.compiler.is_compiling() or torch.compiler.is_exporting():  # first: dynamo never sees the ContextVar
        return False
    if torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
        return False
    return not _TRUSTED.get()


@contextlib.contextmanager
def trusted_inputs() -> Iterator[None]:
    """Mark the public modules called inside as fed by library code that validated their inputs."""
    token = _TRUSTED.set(True)
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def checked_forward(check: Callable[..., None]) -> Callable[[F], F]:
    """Decorate a module's ``forward``: ``check(self, *args, **kwargs)`` runs at the outermost call
    (not inside :func:`trusted_inputs`), then ``forward`` runs with its nested public calls trusted."""

    def decorate(forward: F) -> F:
        @functools.wraps(forward)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _TRUSTED.get():
                return forward(self, *args, **kwargs)
            check(self, *args, **kwargs)
            with trusted_inputs():
                return forward(self, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


# ---------------------------------------------------------------------------------------------
# allocation guard
# ---------------------------------------------------------------------------------------------
def physical_memory() -> int:
    """Bytes of physical memory of this machine (a very large number when it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 1 << 62


@functools.lru_cache(maxsize=1)
def cgroup_memory_limit() -> Optional[int]:
    """The memory limit of this process's cgroup in bytes (``memory.max``, cgroup v2; ``memory.limit_in_bytes``, v1),
    or None when there is none below the physical memory (or it cannot be read)."""
    paths = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, where = line.rstrip("\n").split(":", 2)
                if controllers == "":
                    paths.append(f"/sys/fs/cgroup{where.rstrip('/')}/memory.max")
                elif "memory" in controllers.split(","):
                    paths.append(f"/sys/fs/cgroup/memory{where.rstrip('/')}/memory.limit_in_bytes")
    except (OSError, ValueError):
        pass
    limits = []
    for path in paths:
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    below = [v for v in limits if 0 < v < physical_memory()]
    return min(below) if below else None


def _mapped_bytes() -> int:
    """Bytes of address space this process maps now (``VmSize``; 0 when it cannot be read)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def granted_memory() -> Tuple[int, str]:
    """The memory this process may allocate and where the figure comes from: the physical memory, or less where the
    cgroup's limit or the address-space limit (``ulimit -v``, less the address space the process maps already)
    grants less."""
    limit, source = physical_memory(), "the physical memory"
    cgroup = cgroup_memory_limit()
    if cgroup is not None and cgroup < limit:
        limit, source = cgroup, "the memory limit of this process's cgroup"
    try:
        import resource  # noqa: PLC0415 - POSIX only

        soft, infinite = resource.getrlimit(resource.RLIMIT_AS)[0], resource.RLIM_INFINITY
    except (ImportError, OSError, ValueError):  # pragma: no cover - non-POSIX
        soft, infinite = -1, -1
    if soft != infinite and soft >= 0:
        mapped = _mapped_bytes()
        left = max(int(soft) - mapped, 0)
        if left < limit:
            limit = left
            source = (
                f"the address-space limit (ulimit -v) of {format_bytes(soft)} less the {format_bytes(mapped)} "
                f"this process maps already"
            )
    return limit, source


def max_alloc_bytes(device: Optional[torch.device] = None) -> Tuple[int, str]:
    """The allocation limit of :func:`check_alloc` and where it comes from, ``(bytes, source)``."""
    env = os.environ.get(MAX_ALLOC_ENV, "").strip()
    if env:
        try:
            limit = float(env)
        except ValueError:
            limit = float("nan")
        if not (math.isfinite(limit) and limit > 0):
            raise ValueError(f"{MAX_ALLOC_ENV} must be a positive number of bytes, got {env!r}")
        return int(limit), MAX_ALLOC_ENV
    if device is not None and torch.device(device).type == "cuda":
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory), "the GPU's memory"
    return granted_memory()


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units: ``"1.5 GiB"``, ``"3.2e+06 EiB"`` beyond exbibytes."""
    value = float(min(n, 1e300))
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.3g} EiB"


def check_alloc(where: str, what: str, nbytes: int, device: Optional[torch.device] = None, hint: str = "") -> None:
    """Refuse a request for ``nbytes`` bytes beyond :func:`max_alloc_bytes`, before allocating.

    ``what`` names the argument that decides the size (``"dim_size=10**12 ([dim_size, 16] float32)"``);
    ``hint`` (optional) ends the message: what lowers the figure (``"lower it with ..."``).
    """
    limit, source = max_alloc_bytes(device)
    if nbytes > limit:
        fail(
            where,
            f"{what} would need {format_bytes(nbytes)} ({float(min(nbytes, 1e300)):.3g} bytes), more "
            f"than the allocation limit of {format_bytes(limit)} ({source}; set {MAX_ALLOC_ENV} to "
            f"change it)" + (f"; {hint}" if hint else ""),
        )


def element_size(dtype: torch.dtype) -> int:
    """Bytes per element of ``dtype``."""
    return torch.empty((), dtype=dtype).element_size()


def check_parameters(where: str, what: str, count: int) -> None:
    """Refuse a module whose ``count`` float32 parameters (an estimate from its widths) exceed the
    allocation limit, before any of them is allocated; ``what`` names the width arguments."""
    check_alloc(where, f"{what} (about {float(min(count, 1e300)):.3g} parameters)", 4 * count)
