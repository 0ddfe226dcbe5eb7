#!/bin/sh
# The README's two commands as on a machine nobody prepared, in order: `make demo` (until its web
# viewer answers), then `make test` as CI runs it (.ci/run: browser and native tools required),
# each timed. They run in a new clone of this checkout's HEAD with an empty home, so that
# ~/.cache/ggml-viz (every llama.cpp and whisper.cpp build), pip's cache and Mesa's shader cache
# start empty. With --remove-system-packages (root only; it uninstalls them from this machine) the
# Debian packages `make test` installs are removed first, so that the run installs them itself.
#
# usage: scripts/fresh-machine.sh [--remove-system-packages] [WORK_DIR]
# WORK_DIR (default: a new temporary folder) receives the clone, the home and the logs demo.log,
# test.log and times.txt.
set -eu
REMOVE=no
if [ "${1:-}" = "--remove-system-packages" ]; then
	REMOVE=yes
	shift
fi
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-$(mktemp -d)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
TIMES=$WORK/times.txt
: >"$TIMES"

if [ "$REMOVE" = yes ]; then
	[ "$(id -u)" = 0 ] || { echo "--remove-system-packages needs root" >&2; exit 2; }
	packages=$(sed -n 's/^SYSTEM_PACKAGES := //p' "$CHECKOUT/Makefile")
	echo "== Removing Debian's $packages"
	# shellcheck disable=SC2086 # a list of package names
	DEBIAN_FRONTEND=noninteractive apt-get remove -y --purge $packages >"$WORK/remove.log" 2>&1 || true
	DEBIAN_FRONTEND=noninteractive apt-get autoremove -y --purge >>"$WORK/remove.log" 2>&1 || true
fi

rm -rf "$WORK/checkout" "$WORK/home"
git clone -q "$CHECKOUT" "$WORK/checkout"
mkdir "$WORK/home"
cd "$WORK/checkout"
export HOME="$WORK/home"
unset XDG_CACHE_HOME XDG_CONFIG_HOME XDG_DATA_HOME MESA_SHADER_CACHE_DIR VIRTUAL_ENV
echo "== In $WORK/checkout with HOME=$HOME"

# `make demo` records, prints the summary, then serves the run until Ctrl-C: it counts as done when
# the viewer's page answers.
start=$(date +%s)
setsid make demo >"$WORK/demo.log" 2>&1 &
demo=$!
url=
while kill -0 "$demo" 2>/dev/null; do
	url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/[^ ]*' "$WORK/demo.log" | head -n 1 || true)
	[ -n "$url" ] && curl -sf -o /dev/null "$url" && break
	url=
	sleep 2
done
demo_seconds=$(($(date +%s) - start))
kill -INT -- "-$demo" 2>/dev/null || true
wait "$demo" 2>/dev/null || true
if [ -z "$url" ]; then
	tail -n 40 "$WORK/demo.log" >&2
	echo "make demo: FAILED after $demo_seconds s (log: $WORK/demo.log)" | tee -a "$TIMES"
	exit 1
fi
echo "make demo: viewer serving after $demo_seconds s" | tee -a "$TIMES"

start=$(date +%s)
status=0
CI=true bash .ci/run >"$WORK/test.log" 2>&1 || status=$?
test_seconds=$(($(date +%s) - start))
summary=$(grep -E '^=+ .*(passed|failed).* =+$' "$WORK/test.log" | tail -n 1 || true)
echo "make test (.ci/run): exit $status after $test_seconds s: $summary" | tee -a "$TIMES"
exit "$status"
