"""The declared type and range of every config key: one table for the check, the key listing and the docs.

:data:`SCHEMA` mirrors :data:`DEFAULTS` (the top-level keys and the sections ``data``, ``optim``,
``trainer``): every key has a :class:`Spec`, a small declarative type (:class:`Int`, :class:`Num`,
:class:`Bool`, :class:`Choice`, :class:`Str`, :class:`ListOf`, :class:`AnyOf`, :class:`Mapping`) that
says what it accepts and in words (``a positive integer``, ``a finite number > 0``, ``one of [...]``).
The dataset arguments of ``data`` (and ``data.train/val/test``) and the model arguments of ``model``
are free-form keyword arguments of the chosen dataset / model: their names are checked against its
constructor's signature, and their values against :data:`DATASET_KEYS` / :data:`MODEL_KEYS`.

Rules: numbers are finite (``.nan`` / ``.inf`` are refused everywhere), booleans are strict
(``'false'`` is an error, not True), integers are ``int`` (``2.0`` and ``true`` are refused).
A bad value raises :class:`ConfigError` ``<key> must be <rule>, got <value>``.

From the same table: :func:`key_rows` (the key listing, ``python -m gridify.training.schema``),
:func:`markdown_table` (``docs/config_keys.md``, ``python -m gridify.training.schema --markdown``)
and :func:`annotated_yaml` (a resolved config with each key's rule as a comment). Errors of a model
constructor (:func:`model_error`), of the optimizer (:func:`optimizer_error`) and of the trainer
(:func:`trainer_error`) become :class:`ConfigError` naming the config key; a dataset's message names the
keys a user sets (:func:`dataset_message`: ``use_normals=False`` reads ``data.use_normals=false``). No
Lightning import.

The schema, one concept per module, every name re-exported here (import from here or from its module)::

    specs          the value specs (Spec, Int, Num, Bool, Choice, ...) and ConfigError
    config_keys    the declared keys: DEFAULTS, SCHEMA, DATASET_KEYS, MODEL_KEYS and the keys' vocabularies
    config_errors  the section checks (check_values, check_model_section, ...) and the errors of the
                   model, dataset, optimizer and trainer as ConfigError naming the key
    config_docs    the key listing, docs/config_keys.md, the commented config, main

In: nothing; out: the names above. ``python -m gridify.training.schema [--markdown]`` runs :func:`main`.
"""

from __future__ import annotations

from .config_docs import annotated_yaml, declared_keys, key_rows, main, markdown_table
from .config_docs import print_keys  # noqa: F401  (importable from here as before; not in __all__)
from .config_errors import (
    check_dataset_section,
    check_model_section,
    check_values,
    constructor_keys,
    dataset_keys,
    dataset_message,
    model_error,
    model_keys,
    optimizer_error,
    trainer_error,
)
from .config_keys import (
    ACCELERATORS,
    DATASET_ALIASES,
    DATASET_KEYS,
    DEFAULTS,
    FORWARDED_KWARGS,
    MODEL_KEYS,
    PRECISIONS,
    RUN_DATA_KEYS,
    SCHEDULES,
    SCHEMA,
    STRATEGIES,
    TASKS,
    dataset_names,
)
from .specs import (
    INT64_MAX,
    AnyOf,
    Bool,
    Choice,
    ConfigError,
    Devices,
    Int,
    ListOf,
    Mapping,
    Num,
    PerAxis,
    Spec,
    Str,
)

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
    "DEFAULTS",
    "TASKS",
    "DATASET_ALIASES",
    "SCHEMA",
    "DATASET_KEYS",
    "RUN_DATA_KEYS",
    "MODEL_KEYS",
    "FORWARDED_KWARGS",
    "PRECISIONS",
    "STRATEGIES",
    "ACCELERATORS",
    "SCHEDULES",
    "INT64_MAX",
    "dataset_names",
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
    "declared_keys",
    "key_rows",
    "markdown_table",
    "annotated_yaml",
    "main",
]


if __name__ == "__main__":
    main()
