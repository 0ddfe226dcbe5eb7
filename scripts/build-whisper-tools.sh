#!/bin/sh
# Build whisper.cpp's own command-line program (whisper-cli) from exactly the whisper.cpp source
# that the pywhispercpp sdist vendors (whisper.cpp/, with its ggml), with portable flags, and
# install it with every shared library it loads into DEST:
#   DEST/bin/whisper-cli       RUNPATH $ORIGIN/../lib
#   DEST/lib/lib*.so*          libwhisper, libggml, libggml-base, libggml-cpu
#   DEST/include/*.h           the vendored ggml's and whisper's headers, for programs built
#                              against these libraries
#   DEST/models/for-tests-*    whisper.cpp's own test model files (hyperparameters, mel filters and
#                              vocabulary, no tensors): real files for the model file reader's tests
# ggml and whisper stay shared libraries (BUILD_SHARED_LIBS=ON) so that a profiler loaded with
# LD_PRELOAD can interpose their exported functions. DEST is built as DEST.partial and renamed
# at the end, so an interrupted build never leaves a half-filled cache.
#
# usage: scripts/build-whisper-tools.sh PYWHISPERCPP_VERSION DEST PYTHON [JOBS] [EXTRA_CMAKE_ARGS]
set -eu
# shellcheck source=scripts/built-tools.sh
. "$(dirname "$0")/built-tools.sh"

VERSION=$1
DEST=$2
PYTHON=$3
JOBS=${4:-$(nproc 2>/dev/null || echo 2)}
EXTRA_CMAKE_ARGS=${5:-}
TARGETS="whisper-cli"

echo "Building whisper.cpp's programs ($TARGETS) from pywhispercpp $VERSION's vendored"
echo "whisper.cpp into $DEST: once per machine, about a minute on 2 cores ($JOBS jobs here)."

# The source and build trees stay in WORK until the programs are installed, so that a rerun after
# an interruption or a failure picks the build up where it stopped.
WORK="$DEST.build"
if [ ! -f "$WORK/src.done" ]; then
	rm -rf "$WORK"
	mkdir -p "$WORK/sdist" "$WORK/src"
	echo "-- downloading the pywhispercpp $VERSION sdist"
	"$PYTHON" "$(dirname "$0")/download_sdist.py" pywhispercpp "$VERSION" "$WORK/sdist"
	tar -xzf "$WORK"/sdist/*.tar.gz -C "$WORK/src"
	touch "$WORK/src.done"
else
	echo "-- resuming the build in $WORK"
fi
SRC=$(echo "$WORK"/src/*/whisper.cpp)
[ -f "$SRC/CMakeLists.txt" ] || { echo "no whisper.cpp in the pywhispercpp $VERSION sdist" >&2; exit 1; }

find_cmake "$PYTHON"
# No SDL2, curl or ffmpeg: whisper-cli reads WAV files itself, and the build downloads nothing.
# shellcheck disable=SC2086
configure_portable "$SRC" "$WORK/build" "$WORK/configure.log" \
	-DWHISPER_BUILD_EXAMPLES=ON \
	-DWHISPER_BUILD_TESTS=OFF \
	-DWHISPER_BUILD_SERVER=OFF \
	-DWHISPER_SDL2=OFF \
	-DWHISPER_CURL=OFF \
	-DWHISPER_FFMPEG=OFF \
	$EXTRA_CMAKE_ARGS
# shellcheck disable=SC2086
"$CMAKE" --build "$WORK/build" --config Release -j"$JOBS" --target $TARGETS

rm -rf "$DEST.partial"
mkdir -p "$DEST.partial/bin" "$DEST.partial/lib" "$DEST.partial/include" "$DEST.partial/models"
for target in $TARGETS; do
	cp "$WORK/build/bin/$target" "$DEST.partial/bin/"
done
# The libraries lie in the build tree's src/ and ggml/src/; -P keeps their version symlinks.
find "$WORK/build" -name 'lib*.so*' \( -type f -o -type l \) -exec cp -P {} "$DEST.partial/lib/" \;
cp "$SRC"/ggml/include/*.h "$SRC"/include/whisper.h "$DEST.partial/include/"
cp "$SRC"/models/for-tests-ggml-*.bin "$DEST.partial/models/"

# Every library must resolve inside DEST/lib, and ggml and whisper must be shared dependencies.
check_shared_libraries "$DEST.partial" "$TARGETS" "libwhisper.so libggml-base.so libggml-cpu.so"
finish_build "$DEST" "$WORK"
echo "whisper.cpp's programs are in $DEST/bin"
