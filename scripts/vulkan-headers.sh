#!/bin/sh
# The Vulkan headers ggml's Vulkan backend compiles against, once per machine, into DEST.
# llama.cpp 0.3.36's ggml-vulkan uses VK_EXT_layer_settings (vk::LayerSettingEXT), which
# Debian 12's libvulkan-dev (1.3.239) lacks: the headers come from Debian 13's libvulkan-dev
# 1.4.309 (the same archive, checked against its SHA-256), unpacked into DEST/usr/include. Only
# the headers are used: the program still links and loads the machine's libvulkan.
#
# usage: scripts/vulkan-headers.sh DEST
set -eu
DEST=$1
DEB=libvulkan-dev_1.4.309.0-1_amd64.deb
SHA256=8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a
URL=${GGML_VIZ_DEBIAN_MIRROR:-http://deb.debian.org/debian}/pool/main/v/vulkan-loader/$DEB

echo "== Fetching the Vulkan 1.4.309 headers (Debian 13's $DEB, 1.5 MB) into $DEST"
rm -rf "$DEST.partial"
mkdir -p "$DEST.partial"
if command -v curl >/dev/null 2>&1; then
	curl -sSfL -o "$DEST.partial/$DEB" "$URL"
else
	wget -q -O "$DEST.partial/$DEB" "$URL"
fi
echo "$SHA256  $DEST.partial/$DEB" | sha256sum -c --quiet -
dpkg-deb -x "$DEST.partial/$DEB" "$DEST.partial"
rm "$DEST.partial/$DEB"
[ -f "$DEST.partial/usr/include/vulkan/vulkan.hpp" ] || { echo "no vulkan.hpp in $DEB" >&2; exit 1; }
rm -rf "$DEST"
mv "$DEST.partial" "$DEST"
