#!/bin/sh
# The Vulkan headers ggml's Vulkan backend compiles against, once per machine, into DEST.
# llama.cpp 0.3.36's ggml-vulkan uses VK_EXT_layer_settings (vk::LayerSettingEXT), which
# Debian 12's libvulkan-dev (1.3.239) lacks: the headers come from Debian 13's ("trixie")
# libvulkan-dev 1.4.309.0-1, unpacked into DEST/usr/include. Only the headers are used: the
# program still links and loads the machine's libvulkan.
#
# apt decides where the package comes from, as it does for the machine's own packages: the
# script asks apt for the URIs of the Debian archive this machine already uses (whatever mirror,
# proxy or local copy its apt sources name), and runs apt-get on a private configuration (its
# own sources list, state and cache, in a temporary folder) that names Debian 13 at those URIs,
# checked with the Debian archive keyring. The rest of the machine's apt configuration (proxies,
# authentication, Check-Valid-Until...) applies unchanged; the machine's own package lists and
# cache are not touched. The .deb is checked by apt against trixie's signed index and, for amd64,
# against the SHA-256 below.
#
# usage: scripts/vulkan-headers.sh DEST
set -eu
DEST=$1
PACKAGE=libvulkan-dev
VERSION=1.4.309.0-1
SHA256_AMD64=8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a
SUITE=trixie
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

fail() {
	echo "vulkan-headers.sh: $*" >&2
	exit 1
}
# By hand, on any system: the Khronos Vulkan-Headers of the same version do as well.
BY_HAND="or put Vulkan headers 1.4.309 (Debian 13's $PACKAGE $VERSION, unpacked with dpkg-deb -x, \
or Khronos' Vulkan-Headers v1.4.309) in $DEST so that $DEST/usr/include/vulkan/vulkan.hpp exists"

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
	fail "apt-get and dpkg-deb are needed: the headers come from Debian 13 through the machine's Debian apt sources; $BY_HAND"
fi
ARCH=$(dpkg --print-architecture)

# The machine's Debian archive, as apt itself reads its sources (one-line and deb822 files alike,
# disabled entries left out): the index targets whose Release file says Origin: Debian and Label:
# Debian (the security archive is Debian-Security, backports "Debian Backports"). Where the
# machine's package lists were never downloaded there is no Release file to say so, and the
# entries for the release the machine runs (its VERSION_CODENAME, on a Debian machine) are taken.
# Either way, entries of the component main only (another vendor's suite may share the codename).
# (os-release is read in a subshell: its VERSION would replace this script's)
# shellcheck disable=SC1091
OS_ID=$(if [ -r /etc/os-release ]; then . /etc/os-release && echo "${ID:-}"; fi)
# shellcheck disable=SC1091
OS_CODENAME=$(if [ -r /etc/os-release ]; then . /etc/os-release && echo "${VERSION_CODENAME:-}"; fi)
# (awk reads the records apt-get indextargets prints, one per index file, fields "Name: value")
debian_uris() {
	awk -v id="$OS_ID" -v codename="$OS_CODENAME" '
	function flush() {
		if (uri != "" && target == "deb" && component == "main" && (origin == "Debian" && label == "Debian" ||
			origin == "" && id == "debian" && codename != "" && release == codename))
			print uri
		uri = target = component = origin = label = release = ""
	}
	/^$/ { flush(); next }
	{ field = $1; value = $0; sub(/^[^:]*:[ \t]*/, "", value) }
	field == "Repo-URI:" { uri = value }
	field == "Target-Of:" { target = value }
	field == "Component:" { component = value }
	field == "Origin:" { origin = value }
	field == "Label:" { label = value }
	field == "Release:" { release = value }
	END { flush() }' | sort -u
}
URIS=$(apt-get indextargets 'Created-By: Packages' | debian_uris)
# (apt lists only the targets whose Release file it has unless told not to read them)
[ -n "$URIS" ] || URIS=$(apt-get indextargets --no-release-info 'Created-By: Packages' | debian_uris)
[ -n "$URIS" ] ||
	fail "this machine's apt sources name no Debian archive (apt-get indextargets shows no Origin: Debian, Label: Debian entry), and the headers come from Debian 13 through them: add the Debian archive (or its mirror) to the apt sources, $BY_HAND"

echo "== Fetching the Vulkan 1.4.309 headers (Debian 13's $PACKAGE $VERSION, 1.5 MB) into $DEST through apt, from $(echo "$URIS" | tr '\n' ' ')"
APT=$(mktemp -d)
trap 'rm -rf "$APT"' EXIT
# apt fetches as its _apt user where it runs as root: the folders it writes must be reachable
chmod 755 "$APT"
mkdir -p "$APT/state/lists/partial" "$APT/cache/archives/partial" "$APT/deb"
if [ "$(id -u)" = 0 ] && id _apt >/dev/null 2>&1; then chown _apt "$APT/deb"; fi
# (without the keyring, apt's own trusted keys: trusted.gpg.d)
SIGNED_BY='' KEYS="apt's trusted keys ($KEYRING is missing)"
if [ -f "$KEYRING" ]; then SIGNED_BY=" signed-by=$KEYRING" KEYS=$KEYRING; fi
for uri in $URIS; do
	echo "deb [arch=$ARCH target=Packages$SIGNED_BY] $uri $SUITE main"
done >"$APT/sources.list"
# (the state and cache files named too, in case the machine's configuration gives them absolute paths)
set -- -o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null \
	-o "Dir::State=$APT/state" -o "Dir::State::Lists=$APT/state/lists" \
	-o "Dir::State::extended_states=$APT/state/extended_states" \
	-o "Dir::Cache=$APT/cache" -o "Dir::Cache::Archives=$APT/cache/archives" \
	-o "Dir::Cache::pkgcache=$APT/cache/pkgcache.bin" -o "Dir::Cache::srcpkgcache=$APT/cache/srcpkgcache.bin"

apt-get "$@" -q update >"$APT/update.log" 2>&1 || true
if ! apt-cache "$@" madison "$PACKAGE" 2>/dev/null | awk -v v="$VERSION" '$3 == v { found = 1 } END { exit !found }'; then
	grep -E '^(E|W|Err):' "$APT/update.log" >&2 || true
	if grep -q -E 'NO_PUBKEY|not signed|signature' "$APT/update.log"; then
		fail "apt could not check Debian 13's archive signature with $KEYS: Debian 12's current debian-archive-keyring package has Debian 13's keys (apt-get install debian-archive-keyring), $BY_HAND"
	fi
	OFFERED=$(apt-cache "$@" madison "$PACKAGE" 2>/dev/null | awk '{ print $3 }' | sort -u | tr '\n' ' ')
	if [ -n "$OFFERED" ]; then
		fail "Debian 13 no longer has $PACKAGE $VERSION but ${OFFERED% }: set VERSION and SHA256_AMD64 in scripts/vulkan-headers.sh to it (and the Makefile's VULKAN_HEADERS), $BY_HAND"
	fi
	fail "apt could not get Debian 13's ($SUITE) package list from this machine's Debian source(s) $(echo "$URIS" | tr '\n' ' ')(apt's messages above): the source must also carry $SUITE, $BY_HAND"
fi
(cd "$APT/deb" && apt-get "$@" -q download "$PACKAGE=$VERSION" >"$APT/download.log" 2>&1) ||
	{ cat "$APT/download.log" >&2; fail "apt could not download $PACKAGE $VERSION from Debian 13 (apt's messages above), $BY_HAND"; }
DEB=$APT/deb/${PACKAGE}_${VERSION}_$ARCH.deb
[ -f "$DEB" ] || fail "apt downloaded no ${PACKAGE}_${VERSION}_$ARCH.deb"
if [ "$ARCH" = amd64 ]; then
	echo "$SHA256_AMD64  $DEB" | sha256sum -c --quiet - || fail "$DEB is not the $PACKAGE $VERSION this script was written for"
fi

rm -rf "$DEST.partial"
mkdir -p "$DEST.partial"
dpkg-deb -x "$DEB" "$DEST.partial"
[ -f "$DEST.partial/usr/include/vulkan/vulkan.hpp" ] || fail "no vulkan.hpp in $PACKAGE $VERSION"
grep -q VK_EXT_layer_settings "$DEST.partial/usr/include/vulkan/vulkan_core.h" ||
	fail "$PACKAGE $VERSION's headers lack VK_EXT_layer_settings"
rm -rf "$DEST"
mv "$DEST.partial" "$DEST"
