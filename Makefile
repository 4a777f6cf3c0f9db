# gridify: two commands do everything on a fresh Linux machine.
#   make demo         set up .venv, train + test a gridified classifier on the built-in procedural shapes
#   make test         set up .venv and run the test suite
#   make reconstruct  the paper's reconstruction experiment, small sweep
#   make docs         the documentation site (docs/_build/html), warnings as errors
PY := .venv/bin/python
PYTEST_ARGS ?=
FUZZ_SECONDS ?= 220

.PHONY: setup demo reconstruct test test-slow fuzz docs lint clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(PY) scripts/train.py --config configs/procedural.yaml --overwrite

reconstruct: setup
	$(PY) scripts/reconstruct.py --quick --out outputs/reconstruction-demo

test: setup
	$(PY) -m pytest -m "not slow" -q $(PYTEST_ARGS)

test-slow: setup
	$(PY) -m pytest -m slow -q $(PYTEST_ARGS)

# time-bounded fuzzing of every file reader (exit 1 and a reproducer on a crash)
fuzz: setup
	$(PY) scripts/fuzz.py --seconds $(FUZZ_SECONDS)

# the documentation site: Sphinx, warnings as errors, every cross-reference checked (-n)
# ruff: lint and the formatter's check on everything
lint: setup
	$(PY) -m ruff check gridify tests scripts
	$(PY) -m ruff format --check gridify tests scripts

docs: setup
	$(PY) -m sphinx -W --keep-going -n -b html docs docs/_build/html

clean:
	rm -rf outputs .pytest_cache
