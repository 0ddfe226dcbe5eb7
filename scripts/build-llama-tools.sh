#!/bin/sh
# Build llama.cpp's own programs (llama-server, llama-cli, llama-completion, llama-bench) from
# exactly the llama.cpp source that the llama-cpp-python sdist vendors (vendor/llama.cpp), with
# the wheel's portable flags, and install them with every shared library they load into DEST:
#   DEST/bin/llama-*        RUNPATH $ORIGIN/../lib
#   DEST/lib/lib*.so*       libllama, libggml*, libllama-common, the tools' lib*-impl.so, ...
# ggml and llama stay shared libraries (BUILD_SHARED_LIBS=ON) so that a profiler loaded with
# LD_PRELOAD can interpose their exported functions. DEST is built as DEST.partial and renamed
# at the end, so an interrupted build never leaves a half-filled cache.
#
# usage: scripts/build-llama-tools.sh LLAMA_CPP_PYTHON_VERSION DEST PYTHON [JOBS] [EXTRA_CMAKE_ARGS]
set -eu
# shellcheck source=scripts/built-tools.sh
. "$(dirname "$0")/built-tools.sh"

VERSION=$1
DEST=$2
PYTHON=$3
JOBS=${4:-$(nproc 2>/dev/null || echo 2)}
EXTRA_CMAKE_ARGS=${5:-}
TARGETS="llama-server llama-cli llama-completion llama-bench"

echo "Building llama.cpp's programs ($TARGETS) from llama-cpp-python $VERSION's vendored"
echo "llama.cpp into $DEST: once per machine, 10 to 15 minutes on 2 cores ($JOBS jobs here)."

# The source and build trees stay in WORK until the programs are installed, so that a rerun after
# an interruption or a failure picks the build up where it stopped.
WORK="$DEST.build"
if [ ! -f "$WORK/src.done" ]; then
	rm -rf "$WORK"
	echo "-- downloading the llama-cpp-python $VERSION sdist"
	"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: -d "$WORK/sdist" "llama-cpp-python==$VERSION"
	mkdir "$WORK/src"
	tar -xzf "$WORK"/sdist/*.tar.gz -C "$WORK/src"
	touch "$WORK/src.done"
else
	echo "-- resuming the build in $WORK"
fi
SRC=$(echo "$WORK"/src/*/vendor/llama.cpp)
[ -f "$SRC/CMakeLists.txt" ] || { echo "no vendor/llama.cpp in the llama-cpp-python $VERSION sdist" >&2; exit 1; }

GENERATOR=
if command -v ninja >/dev/null 2>&1; then GENERATOR="-G Ninja"; fi
# The RUNPATH is set at link time ($ORIGIN/../lib: bin/ finds lib/, and lib/ finds itself), so
# the files are copied as they are, with no patchelf. No web UI is embedded in llama-server
# (its API works without it), so the build downloads nothing. LLAMA_CURL=OFF changes nothing in
# this llama.cpp, which no longer uses libcurl (its HTTPS goes through OpenSSL when found).
# shellcheck disable=SC2086,SC2016
cmake -S "$SRC" -B "$WORK/build" $GENERATOR \
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
	$EXTRA_CMAKE_ARGS
# shellcheck disable=SC2086
cmake --build "$WORK/build" --config Release -j"$JOBS" --target $TARGETS

rm -rf "$DEST.partial"
mkdir -p "$DEST.partial/bin" "$DEST.partial/lib"
for target in $TARGETS; do
	cp "$WORK/build/bin/$target" "$DEST.partial/bin/"
done
cp -P "$WORK"/build/bin/lib*.so* "$DEST.partial/lib/"

# Every library must resolve inside DEST/lib, and ggml and llama must be shared dependencies.
check_shared_libraries "$DEST.partial" "$TARGETS" "libllama.so libggml-base.so"
finish_build "$DEST" "$WORK"
echo "llama.cpp's programs are in $DEST/bin"
