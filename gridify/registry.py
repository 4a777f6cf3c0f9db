"""Name -> class registries, one per kind of component.

A :class:`Registry` maps a short string name (``"ccnn"``, ``"rff"``, ...) to a class
so models and configs can refer to components by name, while the components themselves
keep typed keyword arguments::

    BACKBONES = Registry("backbone")

    @BACKBONES.register("ccnn")
    class CCNN(nn.Module): ...

    net = BACKBONES.build("ccnn", in_channels=64, out_channels=64, depth=3)
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Generic, Iterator, Optional, TypeVar

T = TypeVar("T")

__all__ = ["Registry", "UnknownNameError", "POS_EMBEDDINGS", "KERNELS", "BACKBONES", "MODELS", "DATASETS", "TASKS"]


class UnknownNameError(KeyError, ValueError):
    """A name that no component of this kind is registered under.

    Both a ``KeyError`` (a failed lookup, as before) and a ``ValueError`` (a bad argument value, as
    the rest of gridify's argument checks), so either ``except`` catches it. ``kind`` and ``name``
    say what was looked up; the message lists the registered names.
    """

    def __init__(self, message: str, kind: str = "", name: str = "") -> None:
        super().__init__(message)
        self.kind, self.name = kind, name

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


#: the modules whose import registers the built-in components (imported by :func:`load_components`)
COMPONENT_MODULES = ("gridify.nn", "gridify.backbones", "gridify.models", "gridify.baselines", "gridify.datasets")
_LOADING: Dict[str, bool] = {"started": False}


def load_components() -> None:
    """Import the modules that register the built-in components (once; ``import gridify`` is lazy, so a
    registry read before them would miss e.g. the baseline models). Re-entrant calls while they import
    return at once."""
    if _LOADING["started"]:
        return
    _LOADING["started"] = True
    import importlib

    for name in COMPONENT_MODULES:
        importlib.import_module(name)


class Registry(Generic[T]):
    """A named mapping from string keys to classes (or factories) of one kind; reading it first
    registers the built-in components (:func:`load_components`)."""

    def __init__(self, kind: str, base: Optional[type] = None) -> None:
        self.kind = kind
        #: the class every entry must subclass (None: any class or factory); checked when one is registered
        self.base = base
        self._entries: Dict[str, T] = {}

    def register(self, name: Optional[str] = None, obj: Optional[T] = None) -> Any:
        """Register ``obj`` under ``name``; usable as a decorator when ``obj`` is omitted.

        A ``name`` that is not a string is a TypeError and an empty one a ValueError, naming the registry and
        the value; with a :attr:`base`, an entry that is not a subclass of it is a TypeError at registration
        (not a failure deep inside its first use)."""
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{self.kind} registry: the name must be a string, got {type(name).__name__} {name!r}")

        def _add(target: T) -> T:
            key = (name or getattr(target, "__name__", None) or "").lower()
            if not key:
                raise ValueError(f"{self.kind} registry: cannot register an unnamed {self.kind} ({target!r})")
            if self.base is not None and not (isinstance(target, type) and issubclass(target, self.base)):
                what = f"class {target.__name__}" if isinstance(target, type) else f"{type(target).__name__} {target!r}"
                raise TypeError(
                    f"{self.kind} registry: {key!r} must be a subclass of {self.base.__module__}."
                    f"{self.base.__qualname__}, got {what}"
                )
            if key in self._entries and self._entries[key] is not target:
                raise KeyError(f"{self.kind} {key!r} is already registered to {self._entries[key]!r}")
            self._entries[key] = target
            return target

        if obj is not None:
            return _add(obj)
        return _add

    def unregister(self, name: str) -> T:
        """Remove and return the component registered under ``name`` (a plugin's, or a test's, cleanup);
        :class:`UnknownNameError` if none, TypeError for a name that is not a string."""
        target = self.get(name)
        del self._entries[name.lower()]
        return target

    def get(self, name: str) -> T:
        """The component registered under ``name`` (case-insensitive); :class:`UnknownNameError` if none,
        TypeError naming the registry and the value for a name that is not a string."""
        if not isinstance(name, str):
            raise TypeError(f"{self.kind} name must be a string, got {type(name).__name__} {name!r}")
        load_components()
        key = name.lower()
        if key not in self._entries:
            known = ", ".join(sorted(self._entries)) or "(none registered)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known {self.kind}s: {known}", self.kind, name)
        return self._entries[key]

    def build(self, name: str, **kwargs: Any) -> Any:
        """Instantiate the component registered under ``name`` with keyword arguments."""
        return self.get(name)(**kwargs)  # type: ignore[operator]

    def names(self) -> list[str]:
        load_components()
        return sorted(self._entries)

    def registered(self) -> list[str]:
        """The names in the order they were registered (:meth:`names` sorts them)."""
        load_components()
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        load_components()
        return isinstance(name, str) and name.lower() in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        load_components()
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"


#: Positional-embedding fields phi_pos (offset in R^3 -> R^H).
POS_EMBEDDINGS: Registry[Callable[..., Any]] = Registry("positional embedding")
#: Continuous kernel networks (offset in R^3 -> kernel values).
KERNELS: Registry[Callable[..., Any]] = Registry("kernel network")
#: Grid backbones, dense [B, C, R, R, R] -> [B, C', R, R, R].
BACKBONES: Registry[Callable[..., Any]] = Registry("backbone")
#: Full models (classifiers, segmenters, baselines).
MODELS: Registry[Callable[..., Any]] = Registry("model")
#: Datasets by the name configs use for them (``data.name``).
DATASETS: Registry[Callable[..., Any]] = Registry("dataset")
#: What a model predicts (``classification``, ``segmentation``, ``scene_segmentation``; see :mod:`gridify.tasks`).
TASKS: Registry[Callable[..., Any]] = Registry("task")
