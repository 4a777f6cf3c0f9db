# gridify: two commands do everything on a fresh Linux machine.
#   make demo   set up .venv and run the main job on built-in (generated) data
#   make test   set up .venv and run the test suite
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test test-slow clean

setup:
	@bash scripts/setup.sh

demo: setup
	$(PY) scripts/reconstruct.py --quick --out outputs/reconstruction-demo

test: setup
	$(PY) -m pytest -m "not slow" -q $(PYTEST_ARGS)

test-slow: setup
	$(PY) -m pytest -m slow -q $(PYTEST_ARGS)

clean:
	rm -rf outputs .pytest_cache
