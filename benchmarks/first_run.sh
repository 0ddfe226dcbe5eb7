#!/bin/bash
# How long the README's quick start takes on this machine, from a fresh clone with an empty home
# folder (no ~/.cache/ggml-viz, no pip cache, no Mesa shader cache: Mesa finds its cache by the
# password database, not HOME, so XDG_CACHE_HOME names it): each command's first run, then
# its second run, to the figure the README quotes ("make demo" to its summary: the viewer it then
# starts is stopped). `make test` runs as CI runs it (browser and native tools required).
#
# With --remove-system-packages (root only: it uninstalls them from this machine), the Debian
# packages `make test` installs (the Makefile's SYSTEM_PACKAGES) are removed before each scenario,
# as on a machine nobody prepared: the run must install them itself, and build with them.
#
# usage: benchmarks/first_run.sh [--remove-system-packages] [REPOSITORY] [demo|test|demo-then-test ...]
#        (default: all three)
# Every line make prints goes to WORK/NAME.log with the seconds since the start in front.
set -euo pipefail
REMOVE_PACKAGES=no
if [ "${1:-}" = --remove-system-packages ]; then
	[ "$(id -u)" = 0 ] || { echo "--remove-system-packages needs root" >&2; exit 2; }
	REMOVE_PACKAGES=yes
	shift
fi
REPOSITORY=$(cd "${1:-$(dirname "$0")/..}" && pwd)
shift || true
SCENARIOS=${*:-demo test demo-then-test}
WORK=$(mktemp -d /tmp/ggml-viz-first-run.XXXXXX)
export GGML_VIZ_REQUIRE_BROWSER=1 GGML_VIZ_REQUIRE_NATIVE_TOOLS=1 PIP_NO_CACHE_DIR=1

# timed_make NAME TARGET: `make TARGET` in WORK/NAME (HOME=WORK/NAME-home); its seconds on stdout
timed_make() {
	local name=$1 target=$2 start log=$WORK/$1-$2-$(date +%s%N).log
	start=$(date +%s)
	(cd "$WORK/$name" && env -u MESA_SHADER_CACHE_DIR HOME="$WORK/$name-home" XDG_CACHE_HOME="$WORK/$name-home/.cache" make "$target" RUN=first-run-demo.ggmlviz 2>&1) | while IFS= read -r line; do
		printf '%4d %s\n' $(($(date +%s) - start)) "$line"
		case $line in *"press Ctrl-C to stop"*) pkill -f "ggml-viz view first-run-demo.ggmlviz" || true ;; esac
	done >"$log"
	local seconds
	seconds=$(awk '/run written to|passed|failed/ { t = $1 } END { print t }' "$log")
	echo "${seconds:-?} s ($(tail -1 "$log" | cut -c6-80); log $log)"
}

# remove_system_packages: the Makefile's SYSTEM_PACKAGES uninstalled (and what only they needed)
remove_system_packages() {
	local packages
	packages=$(sed -n 's/^SYSTEM_PACKAGES := //p' "$REPOSITORY/Makefile")
	echo "removing Debian's $packages"
	# shellcheck disable=SC2086 # a list of package names
	DEBIAN_FRONTEND=noninteractive apt-get remove -y --purge $packages >"$WORK/remove-packages.log" 2>&1 || true
	DEBIAN_FRONTEND=noninteractive apt-get autoremove -y --purge >>"$WORK/remove-packages.log" 2>&1 || true
}

for scenario in $SCENARIOS; do
	[ "$REMOVE_PACKAGES" = no ] || remove_system_packages
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
