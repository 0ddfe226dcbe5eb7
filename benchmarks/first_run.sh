#!/bin/bash
# How long the README's quick start takes on this machine, from a fresh clone with an empty home
# folder (no ~/.cache/ggml-viz, no pip cache): each command's first run, then its second run, to the
# figure the README quotes ("make demo" to its summary: the viewer it then starts is stopped).
#
# usage: benchmarks/first_run.sh [REPOSITORY] [demo|test|demo-then-test ...]   (default: all three)
# Every line make prints goes to WORK/NAME.log with the seconds since the start in front.
set -euo pipefail
REPOSITORY=$(cd "${1:-$(dirname "$0")/..}" && pwd)
shift || true
SCENARIOS=${*:-demo test demo-then-test}
WORK=$(mktemp -d /tmp/ggml-viz-first-run.XXXXXX)
export GGML_VIZ_REQUIRE_BROWSER=1 GGML_VIZ_REQUIRE_NATIVE_TOOLS=1 PIP_NO_CACHE_DIR=1

# timed_make NAME TARGET: `make TARGET` in WORK/NAME (HOME=WORK/NAME-home); its seconds on stdout
timed_make() {
	local name=$1 target=$2 start log=$WORK/$1-$2-$(date +%s%N).log
	start=$(date +%s)
	(cd "$WORK/$name" && HOME=$WORK/$name-home make "$target" RUN=first-run-demo.ggmlviz 2>&1) | while IFS= read -r line; do
		printf '%4d %s\n' $(($(date +%s) - start)) "$line"
		case $line in *"press Ctrl-C to stop"*) pkill -f "ggml-viz view first-run-demo.ggmlviz" || true ;; esac
	done >"$log"
	local seconds
	seconds=$(awk '/run written to|passed|failed/ { t = $1 } END { print t }' "$log")
	echo "${seconds:-?} s ($(tail -1 "$log" | cut -c6-80); log $log)"
}

for scenario in $SCENARIOS; do
	git clone -q "$REPOSITORY" "$WORK/$scenario"
	mkdir -p "$WORK/$scenario-home"
	case $scenario in
	demo) echo "make demo, first run:  $(timed_make demo demo)"
		echo "make demo, second run: $(timed_make demo demo)" ;;
	test) echo "make test, first run:  $(timed_make test test)"
		echo "make test, second run: $(timed_make test test)" ;;
	demo-then-test) echo "make demo, first run:  $(timed_make demo-then-test demo)"
		echo "make test after it:    $(timed_make demo-then-test test)" ;;
	*) echo "unknown scenario $scenario (demo, test, demo-then-test)" >&2; exit 2 ;;
	esac
done
echo "logs in $WORK"
