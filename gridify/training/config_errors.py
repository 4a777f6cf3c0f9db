"""Config sections checked against the declared keys; errors of what a config builds, in the config's words.

Checks, each raising :class:`~gridify.training.specs.ConfigError` (``<key> must be <rule>, got <value>``,
``unknown key ...``): :func:`check_values` (a section against its specs), :func:`check_model_section`
(``model.name`` and the keyword arguments its constructor takes, values per
:data:`~gridify.training.config_keys.MODEL_KEYS`) and :func:`check_dataset_section` (the dataset arguments of
``data`` and ``data.<split>``, values per :data:`~gridify.training.config_keys.DATASET_KEYS`); the keys a
constructor takes: :func:`constructor_keys`, :func:`model_keys`, :func:`dataset_keys`.

Messages: an exception of a model constructor (:func:`model_error`), of the optimizer (:func:`optimizer_error`)
or of Lightning's ``Trainer`` (:func:`trainer_error`) goes in, a :class:`~gridify.training.specs.ConfigError`
naming the config key comes out; a dataset's message comes out naming the keys a user sets
(:func:`dataset_message`: ``use_normals=False`` reads ``data.use_normals=false``). All of it is re-exported
by :mod:`gridify.training.schema`. No Lightning import.
"""

from __future__ import annotations

import ast
import inspect
import re
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from gridify.registry import DATASETS, MODELS

from .config_keys import DATASET_ALIASES, DATASET_KEYS, FORWARDED_KWARGS, MODEL_KEYS, RUN_DATA_KEYS
from .specs import ConfigError

__all__ = [
    "check_values",
    "constructor_keys",
    "model_keys",
    "dataset_keys",
    "check_model_section",
    "check_dataset_section",
    "model_error",
    "dataset_message",
    "optimizer_error",
    "trainer_error",
]


def check_values(prefix: str, values: Dict[str, Any], specs: Dict[str, Any]) -> None:
    """Check the keys of ``values`` (a section, ``prefix`` its dotted name) against ``specs``: unknown keys,
    sub-sections, then each value."""
    for key, value in values.items():
        name = f"{prefix}.{key}" if prefix else key
        if key not in specs:
            raise ConfigError(f"unknown key {name}; known keys of {prefix or 'the config'}: {', '.join(sorted(specs))}")
        spec = specs[key]
        if isinstance(spec, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{name} must be a mapping, got {value!r}")
            check_values(name, value, spec)
        else:
            spec.check(name, value)


def constructor_keys(cls: Any, skip: Iterable[str] = ("self",)) -> Tuple[List[str], bool]:
    """The keyword argument names of ``cls``'s constructor and whether it takes ``**kwargs`` too."""
    params = inspect.signature(cls).parameters.values()
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip]
    return names, any(p.kind == p.VAR_KEYWORD for p in params)


def model_keys(name: str) -> List[str]:
    """The ``model.*`` keys model ``name`` takes (with those it forwards, :data:`FORWARDED_KWARGS`)."""
    keys, _ = constructor_keys(MODELS.get(name))
    if name in FORWARDED_KWARGS:
        keys += [k for k in model_keys(FORWARDED_KWARGS[name]) if k not in keys]
    return keys


def check_model_section(model: Dict[str, Any]) -> None:
    """``model``: a registered ``name`` and the keyword arguments its constructor takes, each within its
    declared type and range (:data:`MODEL_KEYS`)."""
    name = model.get("name")
    if name not in MODELS:
        raise ConfigError(f"model.name: unknown model {name!r}; known models: {', '.join(MODELS.names())}")
    known = model_keys(name)
    for key, value in model.items():
        if key == "name":
            continue
        if key not in known:
            raise ConfigError(f"unknown key model.{key} for model {name}; its keys: {', '.join(sorted(known))}")
        if key in MODEL_KEYS:
            MODEL_KEYS[key].check(f"model.{key}", value)


def dataset_keys(name: str) -> List[str]:
    """The dataset arguments ``data.*`` takes for dataset ``name`` (ModelNet's ``name`` spelled ``version``)."""
    cls_name = DATASET_ALIASES.get(name, name)
    keys, _ = constructor_keys(DATASETS.get(cls_name))
    if cls_name == "modelnet":  # ModelNet's own "name" (10 / 40) is spelled data.version
        keys = [k for k in keys if k != "name"] + ["version"]
    return keys


def check_dataset_section(data: Dict[str, Any], loader_keys: Sequence[str]) -> None:
    """The dataset arguments of ``data`` and of ``data.train/val/test``: keys the dataset ``data.name`` takes,
    each within its declared type and range (:data:`DATASET_KEYS`)."""
    name = data["name"]
    known = dataset_keys(name)
    sections = [("data", {k: v for k, v in data.items() if k not in loader_keys})]
    sections += [(f"data.{s}", data.get(s) or {}) for s in ("train", "val", "test")]
    for prefix, values in sections:
        for key, value in values.items():
            if key in RUN_DATA_KEYS:
                raise ConfigError(f"{prefix}.{key} is set by the run: {RUN_DATA_KEYS[key]}")
            if key not in known:
                raise ConfigError(
                    f"unknown key {prefix}.{key} for dataset {name}; its keys: "
                    f"{', '.join(sorted(set(known) - set(RUN_DATA_KEYS)))}"
                )
            if key in DATASET_KEYS:
                DATASET_KEYS[key].check(f"{prefix}.{key}", value)


def _named_key(message: str, keys: Iterable[str]) -> Optional[str]:
    """The key a constructor's message is about: ``Where: <key> must ...``, else the first key it names."""
    keys = list(keys)
    m = re.match(r"^[\w.]+: (\w+) must\b", message)
    if m and m.group(1) in keys:
        return m.group(1)
    for key in sorted(keys, key=len, reverse=True):
        if re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message):
            return key
    return None


def model_error(
    name: str, kwargs: Dict[str, Any], exc: BaseException, build: Optional[Callable[[Dict[str, Any]], Any]] = None
) -> ConfigError:
    """A model constructor's ValueError/TypeError as a :class:`ConfigError` naming ``model.<key>``.

    The key is the one the message names (``Gridification: k must be ...``); when it names none
    (``RegularGrid: upper must exceed lower``), ``build(kwargs)`` is tried once without each given key
    in turn (the data-filled sizes last): the first key whose removal changes the outcome is named."""
    message = str(exc)
    key = _named_key(message, kwargs)
    if key is None and build is not None:
        key = _culprit(kwargs, message, build)
    where = f"model.{key}" if key is not None else f"model ({name})"
    return ConfigError(f"{where}: {message}")


#: a Python value as a dataset's message writes it after ``key=``: a literal, a quoted string or a list
_PY_VALUE = r"True|False|None|'[^']*'|\"[^\"]*\"|\[[^\]]*\]|[\w.+-]+"


def _yaml_spelling(text: str) -> str:
    """``text``, a Python literal (``False``, ``'v0_points'``, ``['Mug']``), as the command line's YAML writes it
    (``false``, ``v0_points``, ``[Mug]``); anything else as it is."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text

    def spell(v: Any) -> str:
        if isinstance(v, bool) or v is None:
            return {True: "true", False: "false", None: "null"}[v]
        if isinstance(v, str):
            return v if re.fullmatch(r"[\w./-]+", v) else repr(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(spell(x) for x in v) + "]"
        return str(v)

    return spell(value)


def dataset_message(
    name: str, split: str, keys: Iterable[str], exc: BaseException, per_split: Sequence[str] = (), where: bool = True
) -> str:
    """A dataset constructor's message in the words of the config.

    Every ``key=value`` of one of the dataset's arguments ``keys`` reads ``data.key=value`` in YAML spelling
    (``data.<split>.key`` when ``per_split``, the split's own section, set it); ``root=`` is ``--data-root``.
    With ``where``, a message about one argument (``ShapeNetPart: categories must ...``) starts with its key
    (``data.categories: ...``), any other with ``data (<name>, split '<split>'):`` and a space."""
    message = str(exc)
    keys = [k for k in keys if k not in ("split", "transform")]

    def key_of(k: str) -> str:
        return "--data-root" if k == "root" else (f"data.{split}.{k}" if k in per_split else f"data.{k}")

    for key in sorted(keys, key=len, reverse=True):
        pattern = rf"(?<![\w.]){re.escape(key)}=({_PY_VALUE})"
        message = re.sub(pattern, lambda m, k=key: f"{key_of(k)}={_yaml_spelling(m.group(1))}", message)
    if not where:
        return message
    m = re.match(r"^[\w.]+(?: \([^)]*\))?: (\w+) must\b", message)
    return f"{key_of(m.group(1)) if m and m.group(1) in keys else f'data ({name}, split {split!r})'}: {message}"


def _culprit(kwargs: Dict[str, Any], message: str, build: Callable[[Dict[str, Any]], Any]) -> Optional[str]:
    """The first key of ``kwargs`` without which ``build`` no longer fails with ``message``."""
    filled = ("in_channels", "num_classes", "num_categories")
    for key in sorted(kwargs, key=lambda k: k in filled):
        if key in ("in_channels", "num_classes"):
            continue
        try:
            build({k: v for k, v in kwargs.items() if k != key})
        except Exception as exc:  # noqa: BLE001 - any other outcome points at this key
            if str(exc) == message:
                continue
        return key
    return None


_OPTIMIZER_WORDS = (("learning rate", "lr"), ("beta", "betas"), ("weight_decay", "weight_decay"), ("eps", "eps"))


def optimizer_error(exc: BaseException) -> ConfigError:
    """An optimizer's ValueError as a :class:`ConfigError` naming ``optim.<key>``."""
    message = str(exc)
    key = next((k for word, k in _OPTIMIZER_WORDS if word in message.lower()), None)
    return ConfigError(f"{'optim.' + key if key else 'optim'}: {message}")


def trainer_error(tr: Dict[str, Any], exc: BaseException) -> ConfigError:
    """An error of Lightning's ``Trainer(...)`` as a :class:`ConfigError` naming the ``trainer`` key it is
    about (else the accelerator, devices, strategy and precision it was given)."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    key = _named_key(message.replace("`", " "), [k for k in tr if k != "checkpoint"])
    if key is not None:
        return ConfigError(f"trainer.{key}={tr[key]!r}: {message}")
    given = ", ".join(f"{k}={tr.get(k)!r}" for k in ("accelerator", "devices", "strategy", "precision"))
    return ConfigError(f"trainer ({given}): {message}")
