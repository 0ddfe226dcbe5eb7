"""llama.cpp with ggml's Vulkan backend, on Mesa's lavapipe (a Vulkan device in software, on the
CPU), for the tests of GPU times on Vulkan: `make setup` builds it (scripts/build-llama.sh
vulkan) and installs Debian's mesa-vulkan-drivers."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from ..build_cache import cache_folder
from .native import missing

LLAMA_CPP_VERSION = "0.3.36"


def vulkan_llama_folder() -> Path:
    """The Vulkan build of llama.cpp (bin/, lib/): the test skips without it (fails where
    GGML_VIZ_REQUIRE_NATIVE_TOOLS says every tool must be there)."""
    folder = cache_folder() / f"llama.cpp-{LLAMA_CPP_VERSION}-vulkan"
    if not (folder / "vulkan.done").exists():
        missing(f"llama.cpp with ggml's Vulkan backend is not built in {folder} (make setup builds it)")
    return folder


def lavapipe_environment() -> dict[str, str]:
    """The variables that make the Vulkan loader pick lavapipe, and ggml-vulkan use it (it skips
    a CPU-type device unless told which devices to use)."""
    icds = sorted(glob.glob("/usr/share/vulkan/icd.d/lvp_icd.*.json"))
    if not icds:
        missing("Mesa's lavapipe is not installed (apt-get install mesa-vulkan-drivers)")
    return {"VK_ICD_FILENAMES": icds[0], "GGML_VK_VISIBLE_DEVICES": "0"}


# What ggml-viz adds to a traced program's environment for its Vulkan layer (a recording made in
# this test process adds them to its own, which the programs the tests start would inherit).
LAYER_VARIABLES = ("LD_PRELOAD", "VK_ADD_LAYER_PATH", "VK_INSTANCE_LAYERS", "GGML_VK_DEBUG_MARKERS")


def environment(**extra: str) -> dict[str, str]:
    """The test process's environment, ggml-viz's own variables left out, with lavapipe picked."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_") and k not in LAYER_VARIABLES}
    return {**env, **lavapipe_environment(), **extra}
