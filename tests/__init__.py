"""gridify's test suite, laid out like the package.

One folder per part of the library (``ops/``, ``nn/``, ``io/``, ``backbones/``, ``baselines/``, ``models/``,
``datasets/``, ``transforms/``, ``metrics/``, ``tasks/``, ``training/``, ``evaluation/``, ``scene_inference/``,
``benchmarking/``, ``vis/``, ``cli/``; ``api/`` for the top-level api, checkpoint, export, pretrained and
runtime modules; ``package/`` for what spans the package: the import rules, the registry and the shared
checks of ``gridify._checks``), and apart from them the cross-cutting suites: ``properties/``
(hypothesis), ``fuzz/`` (the file readers; ``scripts/fuzz.py`` runs the long version), ``architecture/``
(layers, cycles, function length) and ``security/``.

Every folder is a package (an ``__init__.py``), so two folders may hold test files of one name. Plain
helpers live in ``tests/helpers.py`` (``from tests.helpers import ragged_batch``); fixtures live in
``tests/conftest.py``.
"""
