"""Real training steps of a named recipe on real data: ``gridify bench --recipe NAME``.

The benchmark itself is :mod:`gridify.bench.recipe` (what it times and how: its docstring), on the
harness of :mod:`gridify.bench.harness`; the names below are re-exported from there (this module's
former contents).
"""

from __future__ import annotations

from .bench.recipe import (
    DEFAULT_MODELS,
    GRAPH_WHAT,
    PEERS,
    PRECISIONS,
    RECIPE_COLUMNS,
    TABLE,
    build_parser,
    cpu_seconds,
    format_table,
    graph_timer,
    machine_facts,
    main,
    optimizer_of,
    peer_registry_name,
    time_inference,
    time_training,
    write_outputs,
)

__all__ = [
    "main",
    "build_parser",
    "RECIPE_COLUMNS",
    "PEERS",
    "peer_registry_name",
    "cpu_seconds",
    "graph_timer",
    "time_training",
    "time_inference",
    "DEFAULT_MODELS",
    "GRAPH_WHAT",
    "PRECISIONS",
    "TABLE",
    "format_table",
    "machine_facts",
    "optimizer_of",
    "write_outputs",
]
