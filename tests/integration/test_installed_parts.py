"""The installed ggml-viz holds every native part its build could make on this machine. A part
missing where what its build needs is present (Vulkan's headers installed after ggml-viz was: the
Vulkan layer never built) fails here, by name, rather than as skips and failures elsewhere."""

from __future__ import annotations

import importlib
import shutil
import sysconfig

from ggml_viz.capture.gpu.vulkan_layer import LAYER_LIBRARY, headers_on_this_machine, layer_available
from ggml_viz.capture.preload.library import PRELOAD_LIBRARY

from .native import missing

REINSTALL = "ggml-viz was built before it could be; install it again (make test does when its build inputs change)"


def test_the_extensions_and_the_preload_library_are_built_where_a_compiler_is() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if not shutil.which(compiler):
        missing(f"no C compiler ({compiler}): ggml-viz's C parts cannot be built here")
    for extension in ("ggml_viz.capture.core._recorder", "ggml_viz.capture._memory_read"):
        importlib.import_module(extension)  # raises where the extension is missing
    assert PRELOAD_LIBRARY.is_file(), f"{PRELOAD_LIBRARY} is missing: {REINSTALL}"


def test_the_vulkan_layer_is_built_where_vulkans_headers_are() -> None:
    if not headers_on_this_machine():
        missing("Vulkan's headers are not installed (apt-get install libvulkan-dev): the layer cannot be built")
    assert layer_available(), f"Vulkan's headers are on this machine but {LAYER_LIBRARY} is not: {REINSTALL}"
