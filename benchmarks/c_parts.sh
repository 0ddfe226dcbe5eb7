#!/bin/sh
# ggml-viz's C parts built in place in the checkout, as setup.py builds them (the contract's header
# written first; every C file of util/, gpu/ and core/ in both; the Vulkan layer a library of its
# own, built where Vulkan's headers are: the compiler's, or those in $VULKAN_INCLUDE), for the GPU
# benchmarks that run from a checkout on a machine of their own.
#   sh benchmarks/c_parts.sh REPO PYTHON WORK
REPO=$1 PY=$2 WORK=$3
CAPTURE=$REPO/src/ggml_viz/capture
CONTRACT=$WORK/contract
PYTHONPATH=$REPO/src "$PY" -m ggml_viz.capture.c_header "$CONTRACT" > /dev/null || exit 1
CFLAGS="-O2 -std=c11 -D_GNU_SOURCE -fPIC -Wall -I$CONTRACT"
CORE=$(ls "$CAPTURE"/util/*.c "$CAPTURE"/gpu/*.c "$CAPTURE"/core/*.c | grep -v -e '/vulkan_layer\.c$' -e '/_recorder[^/]*\.c$')
# shellcheck disable=SC2086 # the lists split on purpose
gcc $CFLAGS -fvisibility=hidden -shared "$CAPTURE"/preload/*.c $CORE \
    -o "$CAPTURE/preload/libggml_viz_preload.so" -ldl -lpthread -lm || exit 1
VULKAN_FLAGS=${VULKAN_INCLUDE:+-I$VULKAN_INCLUDE}
# shellcheck disable=SC2086
if echo '#include <vulkan/vk_layer.h>' | gcc $VULKAN_FLAGS -E -x c - > /dev/null 2>&1; then
    # shellcheck disable=SC2086
    gcc $CFLAGS $VULKAN_FLAGS -fvisibility=hidden -shared "$CAPTURE/gpu/vulkan_layer.c" \
        -o "$CAPTURE/gpu/libggml_viz_vulkan_layer.so" -lpthread -Wl,-soname,libggml_viz_vulkan_layer.so ||
        echo "the Vulkan layer was not built"
else
    echo "the Vulkan layer was not built: no vulkan/vk_layer.h (libvulkan-dev, or VULKAN_INCLUDE)"
fi
read -r PY_INCLUDE EXT_SUFFIX <<END
$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'], sysconfig.get_config_var('EXT_SUFFIX'))")
END
# shellcheck disable=SC2086
gcc $CFLAGS -fvisibility=hidden -shared -I"$PY_INCLUDE" "$CAPTURE"/core/_recorder*.c $CORE \
    -o "$CAPTURE/core/_recorder$EXT_SUFFIX" -ldl -lm 2> "$WORK/extension.log" ||
    echo "the Python extension was not built (no Python headers?): $(tail -1 "$WORK/extension.log")"
