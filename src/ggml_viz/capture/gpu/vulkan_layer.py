"""ggml-viz's Vulkan layer (vulkan_layer.c beside this), seen from Python: the environment that
puts it into a traced process.

The Vulkan loader reads the layer's manifest (ggml_viz_vulkan_layer.json, in this folder) from
VK_ADD_LAYER_PATH, which adds to the places it searches rather than replacing them, and enables it
by name through VK_INSTANCE_LAYERS. The layer is an explicit one: the loaders of Debian 12 and
other distributions of 2023 (1.3.239) find implicit layers only in system folders, and an
explicit layer enabled this way is in the traced process alone, never in another program.
The layer passes every call on untouched until the recorder asks it to time a window.

GGML_VK_DEBUG_MARKERS=1 (unless the program's environment sets it) makes ggml-vulkan name its
pipelines (vkSetDebugUtilsObjectNameEXT), so the GPU's kernels are named as ggml names them
("mul_mat_vec_q4_0_f32_f32", ...); without it they are "pipeline N", in creation order. It
costs a debug label per node on the host, no GPU work.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
from collections.abc import Mapping
from pathlib import Path

LAYER_NAME = "VK_LAYER_GGMLVIZ_timer"
LAYER_LIBRARY = Path(__file__).with_name("libggml_viz_vulkan_layer.so")
LAYER_MANIFEST = Path(__file__).with_name("ggml_viz_vulkan_layer.json")


def layer_available() -> bool:
    """Whether this installation has the layer (it is built only where Vulkan's headers were)."""
    return LAYER_LIBRARY.is_file() and LAYER_MANIFEST.is_file()


def headers_on_this_machine() -> bool:
    """Whether this machine's C compiler finds Vulkan's layer header (vk_layer.h: Debian's
    libvulkan-dev), the one thing beyond a compiler the layer's build needs. Where it does and the
    layer is missing, ggml-viz was built before the headers were installed."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()
    try:
        found = subprocess.run(
            [*compiler, "-E", "-x", "c", "-"],
            input="#include <vulkan/vk_layer.h>\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return found.returncode == 0


def layer_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to `env` so that a program started with it loads the layer (none
    where this installation has no layer)."""
    if not layer_available():
        return {}
    paths = [str(LAYER_MANIFEST.parent), *filter(None, env.get("VK_ADD_LAYER_PATH", "").split(os.pathsep))]
    layers = [*filter(None, env.get("VK_INSTANCE_LAYERS", "").split(os.pathsep)), LAYER_NAME]
    added = {
        "VK_ADD_LAYER_PATH": os.pathsep.join(dict.fromkeys(paths)),
        "VK_INSTANCE_LAYERS": os.pathsep.join(dict.fromkeys(layers)),
    }
    if "GGML_VK_DEBUG_MARKERS" not in env:
        added["GGML_VK_DEBUG_MARKERS"] = "1"
    return added


def enable_in_this_process(gpu: str, detail: str) -> None:
    """Put the layer into the Vulkan instances this process creates from now on, where GPU times
    are wanted (`gpu`, `detail`: the capture settings'). ggml-vulkan creates its instance once,
    when ggml's backends are first registered (llama.cpp loading a model): an instance made
    before keeps no layer, and the GPU timer says so."""
    if gpu.strip().lower() != "off" and detail.strip().lower() != "graph":
        os.environ.update(layer_environment(os.environ))
