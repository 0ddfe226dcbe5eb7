#!/bin/sh
# Build llama.cpp once per machine, from exactly the llama.cpp source that the llama-cpp-python
# sdist vendors (vendor/llama.cpp), with portable flags, in parts and only what is asked for:
#   libraries  libllama and libggml* (what llama-cpp-python loads: `make demo` needs no more)
#   programs   llama-server, llama-cli, llama-completion, llama-bench (the tests run them),
#              added to the same build tree: the libraries are not compiled again
# Python programs (through llama-cpp-python, whose own build is skipped: the Makefile links these
# libraries into it) and native programs then run the very same ggml binaries.
#
#   DEST/sdist/*.tar.gz     the llama-cpp-python sdist (also the source of its Python package and
#                           of llama.cpp's vocabulary files for the tests)
#   DEST/src, DEST/build    source and CMake build tree, kept so a later part or a rerun after an
#                           interruption picks the build up where it stopped
#   DEST/lib/lib*.so*       RUNPATH $ORIGIN/../lib: they find each other in any folder named lib
#   DEST/bin/llama-*        RUNPATH $ORIGIN/../lib
#   DEST/include/*.h        ggml's and llama's headers, for programs built against these libraries
#   DEST/PART.done          written last: a part is either whole or absent
# ggml and llama stay shared libraries (BUILD_SHARED_LIBS=ON) so that a profiler loaded with
# LD_PRELOAD can interpose their exported functions.
#
# usage: scripts/build-llama.sh LLAMA_CPP_PYTHON_VERSION DEST PYTHON JOBS PART [EXTRA_CMAKE_ARGS]
set -eu
# shellcheck source=scripts/built-tools.sh
. "$(dirname "$0")/built-tools.sh"

VERSION=$1
DEST=$2
PYTHON=$3
JOBS=$4
PART=$5
EXTRA_CMAKE_ARGS=${6:-}
case $PART in
libraries)
	TARGETS="llama"
	say_part="llama.cpp's libraries (libllama, libggml), once per machine: 4 to 6 minutes on 2 cores"
	;;
programs)
	TARGETS="llama llama-server llama-cli llama-completion llama-bench"
	say_part="llama.cpp's programs (llama-server, llama-cli, llama-completion, llama-bench), once per machine: 5 to 8 minutes on 2 cores"
	;;
*)
	echo "usage: $0 VERSION DEST PYTHON JOBS libraries|programs [EXTRA_CMAKE_ARGS]" >&2
	exit 2
	;;
esac
echo "== Building $say_part ($JOBS jobs), from llama-cpp-python $VERSION's llama.cpp, into $DEST"

mkdir -p "$DEST"
if [ ! -f "$DEST/src.done" ]; then
	rm -rf "$DEST/sdist" "$DEST/src" "$DEST/build"
	echo "-- downloading the llama-cpp-python $VERSION sdist"
	"$PYTHON" -m pip download --progress-bar on --no-deps --no-binary :all: -d "$DEST/sdist" "llama-cpp-python==$VERSION"
	mkdir "$DEST/src"
	tar -xzf "$DEST"/sdist/*.tar.gz -C "$DEST/src"
	touch "$DEST/src.done"
fi
SRC=$(echo "$DEST"/src/*/vendor/llama.cpp)
[ -f "$SRC/CMakeLists.txt" ] || { echo "no vendor/llama.cpp in the llama-cpp-python $VERSION sdist" >&2; exit 1; }

# cmake and ninja from PyPI when the machine has none (or too old a cmake for llama.cpp).
CMAKE=$(command -v cmake || true)
if [ -z "$CMAKE" ] || ! "$CMAKE" --version | awk 'NR==1 { split($3, v, "."); exit !(v[1] > 3 || (v[1] == 3 && v[2] >= 21)) }'; then
	echo "-- installing cmake and ninja from PyPI into $(dirname "$PYTHON")"
	"$PYTHON" -m pip install --quiet cmake ninja
	CMAKE=$(dirname "$PYTHON")/cmake
fi
GENERATOR=
if command -v ninja >/dev/null 2>&1 || [ -x "$(dirname "$PYTHON")/ninja" ]; then
	GENERATOR="-G Ninja"
	PATH="$(dirname "$PYTHON"):$PATH"
fi

if [ ! -f "$DEST/build/CMakeCache.txt" ]; then
	echo "-- configuring"
	# The RUNPATH is set at link time ($ORIGIN/../lib: bin/ finds lib/, and lib/ finds itself), so
	# the files are copied as they are, with no patchelf. No web UI is embedded in llama-server
	# (its API works without it), so the build downloads nothing. LLAMA_CURL=OFF changes nothing
	# in this llama.cpp, which no longer uses libcurl (its HTTPS goes through OpenSSL when found).
	# The build is portable (GGML_NATIVE=OFF: AVX2, no AVX-512 or AMX), see the README.
	# shellcheck disable=SC2086,SC2016
	"$CMAKE" -S "$SRC" -B "$DEST/build" $GENERATOR \
		-DCMAKE_BUILD_TYPE=Release \
		-DGGML_NATIVE=OFF \
		-DBUILD_SHARED_LIBS=ON \
		-DLLAMA_BUILD_TOOLS=ON \
		-DLLAMA_CURL=OFF \
		-DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_USE_PREBUILT_UI=OFF \
		-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
		-DCMAKE_INSTALL_RPATH='$ORIGIN/../lib' \
		$EXTRA_CMAKE_ARGS >"$DEST/configure.log" 2>&1 || { cat "$DEST/configure.log" >&2; exit 1; }
fi
# shellcheck disable=SC2086
"$CMAKE" --build "$DEST/build" --config Release -j"$JOBS" --target $TARGETS

mkdir -p "$DEST/lib" "$DEST/bin" "$DEST/include"
# A library a running program maps is never rewritten in place: only a changed file is copied.
for library in "$DEST"/build/bin/lib*.so*; do
	cmp -s "$library" "$DEST/lib/${library##*/}" 2>/dev/null || cp -P "$library" "$DEST/lib/"
done
cp "$SRC"/ggml/include/*.h "$SRC"/include/llama.h "$DEST/include/"
if [ "$PART" = programs ]; then
	for target in $TARGETS; do
		[ "$target" = llama ] || cp "$DEST/build/bin/$target" "$DEST/bin/"
	done
	# Every library must resolve inside DEST/lib, and ggml and llama must be shared dependencies.
	check_shared_libraries "$DEST" "llama-server llama-cli llama-completion llama-bench" "libllama.so libggml-base.so"
fi
touch "$DEST/$PART.done"
echo "== llama.cpp's $PART are in $DEST"
