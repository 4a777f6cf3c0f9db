"""The value specs of the config schema: what one config key accepts, as a small declarative type.

A :class:`Spec` (:class:`Int`, :class:`Num`, :class:`Bool`, :class:`Choice`, :class:`Str`, :class:`ListOf`,
:class:`AnyOf`, :class:`PerAxis`, :class:`Mapping`, :class:`Devices`) takes a value in and gives out
whether it accepts it (:meth:`Spec.ok`), its rule in words (:meth:`Spec.rule`: ``a positive integer``,
``a finite number > 0``, ``one of [...]``) and values it refuses (:meth:`Spec.bad_values`, from which the
tests generate a wrong-type and an out-of-range value for every key). :meth:`Spec.check` raises
:class:`ConfigError` ``<key> must be <rule>, got <value>``.

Rules: numbers are finite (``.nan`` / ``.inf`` are refused everywhere), booleans are strict
(``'false'`` is an error, not True), integers are ``int`` (``2.0`` and ``true`` are refused).
The specs know values only: the declared keys that use them are :mod:`gridify.training.config_keys`
(all of it re-exported by :mod:`gridify.training.schema`). No registry, no YAML, no Lightning.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from gridify._checks import is_real

__all__ = [
    "ConfigError",
    "Spec",
    "Int",
    "Num",
    "Bool",
    "Choice",
    "Str",
    "ListOf",
    "AnyOf",
    "PerAxis",
    "Mapping",
    "Devices",
    "INT64_MAX",
]

INT64_MAX = 2**63 - 1


class ConfigError(ValueError):
    """A problem with the config file or a command-line override."""


class Spec:
    """What one key accepts. ``nullable``: null is accepted too; ``doc``: what the key does; ``text``:
    the rule in words (default: :meth:`describe`)."""

    def __init__(self, nullable: bool = False, doc: str = "", text: Optional[str] = None) -> None:
        self.nullable, self.doc, self._text = nullable, doc, text

    def accepts(self, value: Any) -> bool:  # pragma: no cover - every spec overrides it
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - every spec overrides it
        raise NotImplementedError

    def samples(self) -> List[Tuple[str, Any]]:
        """Values this spec refuses, each tagged ``"type"`` (a wrong type) or ``"range"`` (out of range)."""
        return []

    def rule(self) -> str:
        """The rule in words, e.g. ``null or a positive integer``."""
        text = self._text or self.describe()
        return f"null or {text}" if self.nullable and not text.startswith("null") else text

    def ok(self, value: Any) -> bool:
        return (value is None and self.nullable) or (value is not None and self.accepts(value))

    def check(self, key: str, value: Any) -> None:
        """Raise :class:`ConfigError` ``<key> must be <rule>, got <value>`` unless the value is accepted."""
        if not self.ok(value):
            raise ConfigError(f"{key} must be {self.rule()}, got {value!r}")

    def bad_values(self) -> List[Tuple[str, Any]]:
        """:meth:`samples` plus null where it is not accepted, without any value the spec accepts."""
        out = list(self.samples()) + ([] if self.nullable else [("type", None)])
        return [(kind, v) for kind, v in out if not self.ok(v)]


class Int(Spec):
    """An ``int`` (not a bool, not ``2.0``) in ``[min, max]``; ``odd``: odd only; ``also``: extra accepted values."""

    def __init__(
        self,
        min: Optional[int] = None,
        max: Optional[int] = None,
        odd: bool = False,
        also: Sequence[int] = (),
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.min, self.max, self.odd, self.also = min, max, odd, tuple(also)

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        if value in self.also:
            return True
        return (
            (self.min is None or value >= self.min)
            and value <= (INT64_MAX if self.max is None else self.max)
            and (not self.odd or value % 2 == 1)
        )

    def describe(self) -> str:
        what = "an odd integer" if self.odd else "an integer"
        if self.max is not None:
            text = f"{what} in [{self.min}, {self.max}]"
        elif self.min == 1:
            text = f"{'an odd' if self.odd else 'a'} positive integer"
        elif self.min == 0:
            text = f"a non-negative {'odd ' if self.odd else ''}integer"
        else:
            text = f"{what} >= {self.min}" if self.min is not None else what
        return text + "".join(f" or {a}" for a in self.also)

    def samples(self) -> List[Tuple[str, Any]]:
        out: List[Tuple[str, Any]] = [("type", "3"), ("type", 2.5), ("type", True)]
        if self.min is not None:
            out.append(("range", self.min - 1 if self.min - 1 not in self.also else min(self.also) - 1))
        out.append(("range", (self.max if self.max is not None else INT64_MAX) + 1))
        if self.odd:
            out.append(("range", 4))
        return out


class Num(Spec):
    """A finite ``int`` or ``float`` (not a bool, not NaN/Inf) within the bounds (``*_open``: bound excluded)."""

    def __init__(
        self,
        min: Optional[float] = None,
        max: Optional[float] = None,
        min_open: bool = False,
        max_open: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.min, self.max, self.min_open, self.max_open = min, max, min_open, max_open

    def accepts(self, value: Any) -> bool:
        if not is_real(value) or not math.isfinite(value):
            return False
        low = self.min is None or (value > self.min if self.min_open else value >= self.min)
        high = self.max is None or (value < self.max if self.max_open else value <= self.max)
        return low and high

    def describe(self) -> str:
        if self.min is not None and self.max is not None:
            return (
                f"a number in {'(' if self.min_open else '['}{self.min:g}, {self.max:g}{')' if self.max_open else ']'}"
            )
        if self.min is not None:
            return f"a finite number {'>' if self.min_open else '>='} {self.min:g}"
        if self.max is not None:
            return f"a finite number {'<' if self.max_open else '<='} {self.max:g}"
        return "a finite number"

    def samples(self) -> List[Tuple[str, Any]]:
        out: List[Tuple[str, Any]] = [
            ("type", "0.5"),
            ("type", True),
            ("range", math.nan),
            ("range", math.inf),
            ("range", -math.inf),
        ]
        if self.min is not None:
            out.append(("range", self.min if self.min_open else self.min - 1))
        if self.max is not None:
            out.append(("range", self.max if self.max_open else self.max + 1))
        return out


class Bool(Spec):
    """``true`` or ``false`` only (``'false'``, ``0`` and ``'yes'`` are refused); ``also``: extra accepted values."""

    def __init__(self, also: Sequence[Any] = (), **kw: Any) -> None:
        super().__init__(**kw)
        self.also = tuple(also)

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool) or (isinstance(value, str) and value in self.also)

    def describe(self) -> str:
        return "true or false" + "".join(f" or {a!r}" for a in self.also)

    def samples(self) -> List[Tuple[str, Any]]:
        return [("type", "false"), ("type", "true"), ("type", 1), ("type", 0), ("range", "maybe")]


class Choice(Spec):
    """One of ``options`` (a sequence, or a function returning one, e.g. a registry's names)."""

    def __init__(self, options: Union[Sequence[Any], Callable[[], Sequence[Any]]], **kw: Any) -> None:
        super().__init__(**kw)
        self._options = options

    @property
    def options(self) -> List[Any]:
        return list(self._options() if callable(self._options) else self._options)

    def accepts(self, value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, (str, int)) and value in self.options

    def describe(self) -> str:
        return f"one of {self.options}"

    def samples(self) -> List[Tuple[str, Any]]:
        return [("type", 3.5), ("type", ["x"]), ("type", True), ("range", "bogus_choice")]


class Str(Spec):
    """A non-empty string."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str) and value != "" and "\0" not in value

    def describe(self) -> str:
        return "a non-empty string"

    def samples(self) -> List[Tuple[str, Any]]:
        return [("type", 5), ("type", ["a"]), ("range", "")]


class ListOf(Spec):
    """A list (or tuple) of items accepted by ``item``; ``length``: exactly that many; ``min_len``: at least."""

    def __init__(self, item: Spec, length: Optional[int] = None, min_len: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        self.item, self.length, self.min_len = item, length, min_len

    def accepts(self, value: Any) -> bool:
        if not isinstance(value, (list, tuple)):
            return False
        if (self.length is not None and len(value) != self.length) or len(value) < self.min_len:
            return False
        return all(self.item.ok(v) for v in value)

    def describe(self) -> str:
        count = f"{self.length} " if self.length is not None else ("1 or more " if self.min_len == 1 else "")
        return f"a list of {count}items, each {self.item.rule()}"

    def samples(self) -> List[Tuple[str, Any]]:
        good = self.good_item()
        n = self.length if self.length is not None else max(1, self.min_len)
        out: List[Tuple[str, Any]] = [("type", "a"), ("type", 7)]
        out += [("range", [bad] + [good] * (n - 1)) for _, bad in self.item.bad_values()[:2]]
        if self.length is not None:
            out.append(("range", [good] * (self.length + 1)))
        if self.min_len:
            out.append(("range", []))
        return out

    def good_item(self) -> Any:
        """An item the list accepts (for the generated bad lists)."""
        for cand in (0.5, 1, "a", "mean", True):
            if self.item.ok(cand):
                return cand
        return self.item.options[0] if isinstance(self.item, Choice) else None


class AnyOf(Spec):
    """Anything one of ``specs`` accepts (``text`` should say the rule in words)."""

    def __init__(self, *specs: Spec, **kw: Any) -> None:
        super().__init__(**kw)
        self.specs = specs

    def accepts(self, value: Any) -> bool:
        return any(s.ok(value) for s in self.specs)

    def describe(self) -> str:
        return " or ".join(s.rule() for s in self.specs)

    def samples(self) -> List[Tuple[str, Any]]:
        return [s for spec in self.specs for s in spec.samples()]


class PerAxis(Spec):
    """A value ``item`` accepts, or a list of 3 of them (one per axis); a refusal states the rule of the
    form given (``an integer >= 2`` for a scalar, ``a list of 3 items, each ...`` for a list)."""

    def __init__(self, item: Spec, **kw: Any) -> None:
        super().__init__(**kw)
        self.item, self.axes = item, ListOf(item, length=3)

    def accepts(self, value: Any) -> bool:
        return self.item.ok(value) or self.axes.ok(value)

    def describe(self) -> str:
        return f"{self.item.rule()} or a list of 3 of them"

    def check(self, key: str, value: Any) -> None:
        if not self.ok(value):
            rule = self.axes.rule() if isinstance(value, (list, tuple)) else self.item.rule()
            raise ConfigError(f"{key} must be {'null or ' if self.nullable else ''}{rule}, got {value!r}")

    def samples(self) -> List[Tuple[str, Any]]:
        return self.item.samples() + [("range", [2, 2]), ("range", [1, 2, 2])]


class Mapping(Spec):
    """A mapping (its keys are checked elsewhere, e.g. by the component it configures)."""

    def accepts(self, value: Any) -> bool:
        return isinstance(value, dict)

    def describe(self) -> str:
        return "a mapping"

    def samples(self) -> List[Tuple[str, Any]]:
        return [("type", [1, 2]), ("type", "a: 1")]


class Devices(Spec):
    """``trainer.devices``: a count, -1 (all), ``auto``, a list of device indices or a string such as ``0,1``."""

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if isinstance(value, int):
            return value >= 1 or value == -1
        if isinstance(value, (list, tuple)):
            return (
                len(value) > 0
                and len(set(value)) == len(value)
                and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
            )
        if isinstance(value, str):
            text = value.strip()
            return (
                text in ("auto", "-1")
                or bool(re.fullmatch(r"[0-9]+(\s*,\s*[0-9]+)*\s*,?", text))
                and ("," in text or int(text) >= 1)
            )
        return False

    def describe(self) -> str:
        return "a positive count, -1 (all), 'auto', a list of device indices or a string such as '0,1'"

    def samples(self) -> List[Tuple[str, Any]]:
        return [
            ("type", 2.5),
            ("type", True),
            ("type", {"a": 1}),
            ("range", 0),
            ("range", -2),
            ("range", "0"),
            ("range", "gpu7"),
            ("range", []),
            ("range", [0, 0]),
            ("range", [-1]),
        ]
