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
