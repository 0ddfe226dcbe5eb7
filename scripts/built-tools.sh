# What scripts/build-llama.sh and build-whisper-tools.sh share (sourced, POSIX sh).

# check_shared_libraries PARTIAL "TARGETS" "LIBS": each program in PARTIAL/bin resolves every
# shared library, and loads each of LIBS from PARTIAL/lib (not from the system): ggml and its
# users must stay shared libraries for LD_PRELOAD to interpose them.
check_shared_libraries() {
	for target in $2; do
		deps=$(ldd "$1/bin/$target")
		if echo "$deps" | grep -q "not found"; then
			echo "$deps" >&2
			echo "$target: a shared library is missing" >&2
			exit 1
		fi
		for lib in $3; do
			echo "$deps" | grep -q "^[[:space:]]*$lib[^ ]* => $1/" ||
				{ echo "$deps" >&2; echo "$target does not load $lib from its lib/" >&2; exit 1; }
		done
	done
}

# finish_build DEST WORK: the filled DEST.partial becomes DEST, and the build tree goes.
finish_build() {
	rm -rf "$1"
	mv "$1.partial" "$1"
	rm -rf "$2"
}

# find_cmake PYTHON: sets CMAKE to a cmake of 3.21 or later (the machine's, else one installed
# from PyPI with ninja into PYTHON's environment) and GENERATOR to Ninja's where there is one.
find_cmake() {
	CMAKE=$(command -v cmake || true)
	if [ -z "$CMAKE" ] || ! "$CMAKE" --version | awk 'NR==1 { split($3, v, "."); exit !(v[1] > 3 || (v[1] == 3 && v[2] >= 21)) }'; then
		echo "-- installing cmake and ninja from PyPI into $(dirname "$1")"
		"$1" -m pip install --quiet cmake ninja
		CMAKE=$(dirname "$1")/cmake
	fi
	GENERATOR=
	if [ -x "$(dirname "$1")/ninja" ]; then PATH="$(dirname "$1"):$PATH"; fi
	if command -v ninja >/dev/null 2>&1; then GENERATOR="-G Ninja"; fi
}

# configure_portable SRC BUILD LOG [CMAKE_ARGS...]: configure a Release build, portable
# (GGML_NATIVE=OFF: AVX2, no AVX-512 or AMX), of shared libraries (so that LD_PRELOAD can interpose
# ggml), whose RUNPATH is set at link time ($ORIGIN/../lib: bin/ finds lib/, and lib/ finds itself)
# so the files are copied as they are, with no patchelf. CMake's output goes to LOG, shown on failure.
configure_portable() {
	src=$1 build=$2 log=$3
	shift 3
	# shellcheck disable=SC2086,SC2016
	"$CMAKE" -S "$src" -B "$build" $GENERATOR \
		-DCMAKE_BUILD_TYPE=Release \
		-DGGML_NATIVE=OFF \
		-DBUILD_SHARED_LIBS=ON \
		-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
		-DCMAKE_INSTALL_RPATH='$ORIGIN/../lib' \
		"$@" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
}
