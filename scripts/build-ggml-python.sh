#!/bin/sh
# Build ggml-python (Python bindings that call ggml through ctypes) from its PyPI sdist, CPU only
# and portable, with the ggml that sdist vendors, and install it into a folder of its own:
#   DEST/ggml/                 the Python package (import ggml with DEST on PYTHONPATH)
#   DEST/ggml/lib/libggml*.so  its ggml libraries (0.0.37 and older: DEST/ggml/libggml.so)
#   DEST/tests/                its own test suite, from the sdist
# `pip install --target` rather than the virtual environment: the tests run two versions of one
# package, each on its own ggml (a current one and a 2024 one), each with DEST on PYTHONPATH.
# Its dependencies are in ggml-viz's environment already (numpy is ggml-viz's own, typing_extensions
# llama-cpp-python's), so none is installed here.
# DEST is built as DEST.partial and renamed at the end, so an interrupted build never leaves a
# half-filled cache.
#
# usage: scripts/build-ggml-python.sh VERSION DEST PYTHON JOBS [CMAKE_ARGS]
set -eu
# shellcheck source=scripts/built-tools.sh
. "$(dirname "$0")/built-tools.sh"

VERSION=$1
DEST=$2
PYTHON=$3
JOBS=$4
EXTRA_CMAKE_ARGS=${5:-}

echo "== Building ggml-python $VERSION and its vendored ggml ($JOBS jobs) into $DEST, once per machine"
echo "   (about 50 seconds for 0.0.45, 17 for 0.0.37, on 2 cores)"
WORK="$DEST.build"
if [ ! -f "$WORK/sdist.done" ]; then
	rm -rf "$WORK"
	echo "-- downloading the ggml-python $VERSION sdist"
	"$PYTHON" "$(dirname "$0")/download_sdist.py" ggml-python "$VERSION" "$WORK/sdist"
	touch "$WORK/sdist.done"
fi

# scikit-build-core (pip fetches it for the build) configures ggml with CMAKE_ARGS and builds it
# with CMAKE_BUILD_PARALLEL_LEVEL jobs. No wheel cache: a wheel built with other CMAKE_ARGS must
# not be reused.
rm -rf "$DEST.partial"
CMAKE_ARGS="$EXTRA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$JOBS \
	"$PYTHON" -m pip install --quiet --no-deps --no-cache-dir --target "$DEST.partial" "$WORK"/sdist/*.tar.gz

# Its own test suite, kept beside the package (DEST/tests): the tests run it under ggml-viz.
tar -xzf "$WORK"/sdist/*.tar.gz -C "$WORK" --wildcards "*/tests/*"
cp -r "$WORK"/ggml_python-*/tests "$DEST.partial/tests"

# The package must load its own ggml and name the version asked for.
PYTHONPATH="$DEST.partial" "$PYTHON" -c "
import sys, ggml
assert ggml.__version__ == sys.argv[1], ggml.__version__
assert ggml.__file__.startswith(sys.argv[2]), ggml.__file__
" "$VERSION" "$DEST.partial/"
finish_build "$DEST" "$WORK"
echo "== ggml-python $VERSION is in $DEST (on PYTHONPATH: import ggml)"
