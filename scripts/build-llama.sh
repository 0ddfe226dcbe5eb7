#!/bin/sh
# Build llama.cpp once per machine, from exactly the llama.cpp source that the llama-cpp-python
# sdist vendors (vendor/llama.cpp), with portable flags, in parts and only what is asked for:
#   libraries  libllama and libggml* (what llama-cpp-python loads: `make demo` needs no more)
#   programs   llama-server, llama-cli, llama-completion, llama-bench (the tests run them),
#              added to the same build tree: the libraries are not compiled again
#   vulkan     the libraries with ggml's Vulkan backend, llama-completion and llama-bench, in a
#              DEST of their own (EXTRA_CMAKE_ARGS: -DGGML_VULKAN=ON and the headers' folder)
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
	say_part="llama.cpp's libraries (libllama, libggml), once per machine: about a minute and a half on 2 cores"
	;;
programs)
	TARGETS="llama llama-server llama-cli llama-completion llama-bench ggml-rpc-server"
	say_part="llama.cpp's programs (llama-server, llama-cli, llama-completion, llama-bench, ggml-rpc-server), once per machine: about 3 minutes on 2 cores"
	;;
vulkan)
	TARGETS="llama llama-completion llama-bench"
	say_part="llama.cpp with ggml's Vulkan backend (libraries, llama-completion, llama-bench), once per machine: glslc compiles its shaders, about 6 minutes on 2 cores"
	;;
*)
	echo "usage: $0 VERSION DEST PYTHON JOBS libraries|programs|vulkan [EXTRA_CMAKE_ARGS]" >&2
	exit 2
	;;
esac
echo "== Building $say_part ($JOBS jobs), from llama-cpp-python $VERSION's llama.cpp, into $DEST"

mkdir -p "$DEST"
if [ ! -f "$DEST/src.done" ]; then
	rm -rf "$DEST/sdist" "$DEST/src" "$DEST/build"
	echo "-- downloading the llama-cpp-python $VERSION sdist"
	"$PYTHON" "$(dirname "$0")/download_sdist.py" llama-cpp-python "$VERSION" "$DEST/sdist"
	mkdir "$DEST/src"
	tar -xzf "$DEST"/sdist/*.tar.gz -C "$DEST/src"
	touch "$DEST/src.done"
fi
SRC=$(echo "$DEST"/src/*/vendor/llama.cpp)
[ -f "$SRC/CMakeLists.txt" ] || { echo "no vendor/llama.cpp in the llama-cpp-python $VERSION sdist" >&2; exit 1; }

find_cmake "$PYTHON"
if [ ! -f "$DEST/build/CMakeCache.txt" ]; then
	echo "-- configuring"
	# No web UI is embedded in llama-server (its API works without it), so the build downloads
	# nothing. LLAMA_CURL=OFF changes nothing in this llama.cpp, which no longer uses libcurl (its
	# HTTPS goes through OpenSSL when found).
	# shellcheck disable=SC2086
	configure_portable "$SRC" "$DEST/build" "$DEST/configure.log" \
		-DLLAMA_BUILD_TOOLS=ON \
		-DLLAMA_CURL=OFF \
		-DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_USE_PREBUILT_UI=OFF \
		-DGGML_RPC=ON \
		$EXTRA_CMAKE_ARGS
fi
# shellcheck disable=SC2086
"$CMAKE" --build "$DEST/build" --config Release -j"$JOBS" --target $TARGETS

mkdir -p "$DEST/lib" "$DEST/bin" "$DEST/include"
# A library a running program maps is never rewritten in place: only a changed file is copied.
for library in "$DEST"/build/bin/lib*.so*; do
	cmp -s "$library" "$DEST/lib/${library##*/}" 2>/dev/null || cp -P "$library" "$DEST/lib/"
done
cp "$SRC"/ggml/include/*.h "$SRC"/include/llama.h "$DEST/include/"
if [ "$PART" != libraries ]; then
	for target in $TARGETS; do
		[ "$target" = llama ] || cp "$DEST/build/bin/$target" "$DEST/bin/"
	done
	# Every library must resolve inside DEST/lib, and ggml and llama must be shared dependencies.
	check_shared_libraries "$DEST" "llama-completion llama-bench" "libllama.so libggml-base.so"
fi
if [ "$PART" = programs ]; then
	check_shared_libraries "$DEST" "llama-server llama-cli" "libllama.so libggml-base.so"
	check_shared_libraries "$DEST" "ggml-rpc-server" "libggml-base.so libggml-rpc.so"
fi
if [ "$PART" = vulkan ]; then
	check_shared_libraries "$DEST" "llama-completion" "libggml-vulkan.so"
fi
touch "$DEST/$PART.done"
echo "== llama.cpp's $PART are in $DEST"
