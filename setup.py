"""Build steps pyproject.toml cannot express: the C recorder's Python extension (optional:
ggml-viz falls back to its Python recorder without it), the preload library that records
native programs (`ggml-viz run -- llama-server ...`), and the start-up hook (.pth)."""

import glob
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

STARTUP_HOOK = "ggml_viz_startup.pth"
CAPTURE = "src/ggml_viz/capture"
# Warnings on everywhere; as errors only where developers and CI build (GGML_VIZ_WERROR=1: `make check`
# and `make test` set it), where a C part that does not build also fails the build instead of being left
# out. A user's `pip install` keeps them warnings: a newer compiler's new warning must not drop the
# optional C parts.
WERROR = os.environ.get("GGML_VIZ_WERROR") == "1"
C_FLAGS = ["-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", *(["-Werror"] if WERROR else [])]
# The C both the extension and the preload library build on, in its layers (each includes only the
# ones below it: scripts/check_c_includes.py): arrays, clock and pointer set (capture/util/), the GPU
# timer (capture/gpu/; its Vulkan layer is a library of its own), the recorder (capture/core/; its
# _recorder*.c are the extension's). Every such file is built: a new one needs no list.


def c_sources(folder: str, leave_out: tuple[str, ...] = ()) -> list[str]:
    paths = sorted(glob.glob(f"{CAPTURE}/{folder}/*.c"))
    return [path[len(CAPTURE) + 1 : -2] for path in paths if not os.path.basename(path).startswith(leave_out)]


CORE = (*c_sources("util"), *c_sources("gpu", ("vulkan_layer",)), *c_sources("core", ("_recorder",)))
# What the contract's header is written from (write_contract_header).
CONTRACT_SOURCES = [f"{CAPTURE}/{name}.py" for name in ("contract/__init__", "contract/records", "contract/constants")]
CONTRACT_SOURCES += [f"{CAPTURE}/settings.py", f"{CAPTURE}/c_header.py"]
PRELOAD_SOURCES = c_sources("preload")
# The Python extensions are built on CPython's limited API as of 3.10 (the stable ABI): one build, in a
# wheel tagged cp310-abi3, serves every CPython from 3.10.
LIMITED_API = [("Py_LIMITED_API", "0x030A0000")]


class BuildWithStartupHook(build_py):
    """Install ggml_viz_startup.pth at the top of site-packages, as coverage.py's docs suggest."""

    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", STARTUP_HOOK), os.path.join(self.build_lib, STARTUP_HOOK))

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, STARTUP_HOOK)]


def write_contract_header(folder: str) -> str:
    """ggml_viz_contract.h, the C side of the contract between the C and the Python, written from its
    declarations (capture/contract/ and settings.py, by capture/c_header.py: plain Python, importable
    before anything is installed)."""
    sys.path.insert(0, "src")
    try:
        from ggml_viz.capture.c_header import write_header
    finally:
        sys.path.remove("src")
    return os.path.dirname(write_header(folder))


class BuildWithPreloadLibrary(build_ext):
    """Also build libggml_viz_preload.so: a plain shared library (no Python in it) that
    `ggml-viz run` puts into native programs with LD_PRELOAD. Optional, like the extension:
    without a C compiler, ggml-viz records Python programs with its Python recorder.
    Every C build first writes the contract's header (write_contract_header) where the compiler looks."""

    PRELOAD = "ggml_viz/capture/preload/libggml_viz_preload.so"
    VULKAN_LAYER = "ggml_viz/capture/gpu/libggml_viz_vulkan_layer.so"

    def run(self) -> None:
        contract = write_contract_header(os.path.join(self.build_temp, "contract"))
        for extension in self.extensions:
            extension.include_dirs.append(contract)
        self.contract_include = contract
        super().run()
        if self.inplace:
            self.remove_shadowing_builds()
        self.build_vulkan_layer()
        try:
            objects = self.compiler.compile(
                [f"{CAPTURE}/{name}.c" for name in (*PRELOAD_SOURCES, *CORE)],
                output_dir=self.build_temp,
                extra_preargs=[*C_FLAGS, "-fPIC", "-fvisibility=hidden"],
                include_dirs=[self.contract_include],
            )
            output = os.path.join(self.build_lib, self.PRELOAD)
            self.compiler.link_shared_object(objects, output, libraries=["dl", "pthread", "m"])
            if self.inplace:
                self.copy_file(output, os.path.join("src", self.PRELOAD))
        except Exception as error:  # noqa: BLE001 - optional, as the extension is
            if WERROR:
                raise
            print(f"warning: the preload library for native programs was not built: {error}")

    def remove_shadowing_builds(self) -> None:
        """An in-place build for one CPython left from before the limited API (_recorder.cpython-311-*.so) is
        imported before the abi3 build beside it (_recorder.abi3.so): removed once that one is built."""
        for extension in self.extensions:
            built = self.get_ext_fullpath(extension.name)
            if not os.path.exists(built):
                continue
            stem = os.path.join(os.path.dirname(built), extension.name.rsplit(".", 1)[-1])
            for older in glob.glob(f"{stem}.cpython-*.so"):
                print(f"removing {older}: {os.path.basename(built)} replaces it")
                os.remove(older)

    def build_vulkan_layer(self) -> None:
        """libggml_viz_vulkan_layer.so: the Vulkan layer that times GPU nodes on Vulkan (no libvulkan
        linked: it calls the next layer's functions). Optional: it needs Vulkan's headers
        (Debian's libvulkan-dev); without them, Vulkan programs keep their graph times."""
        if not self.has_header("vulkan/vk_layer.h"):
            print("warning: the Vulkan layer was not built: Vulkan's headers are not installed (libvulkan-dev)")
            return
        try:
            objects = self.compiler.compile(
                [f"{CAPTURE}/gpu/vulkan_layer.c"],
                output_dir=self.build_temp,
                extra_preargs=[*C_FLAGS, "-fPIC", "-fvisibility=hidden"],
                include_dirs=[self.contract_include],
            )
            output = os.path.join(self.build_lib, self.VULKAN_LAYER)
            self.compiler.link_shared_object(
                objects, output, libraries=["pthread"], extra_postargs=["-Wl,-soname,libggml_viz_vulkan_layer.so"]
            )
            if self.inplace:
                self.copy_file(output, os.path.join("src", self.VULKAN_LAYER))
        except Exception as error:  # noqa: BLE001 - optional, as the extension is
            if WERROR:
                raise
            print(f"warning: the Vulkan layer was not built: {error}")

    def has_header(self, header: str) -> bool:
        """Whether the compiler finds `header` (compiling a file that includes it)."""
        os.makedirs(self.build_temp, exist_ok=True)
        probe = os.path.join(self.build_temp, "has_header.c")
        with open(probe, "w") as file:
            file.write(f"#include <{header}>\n")
        try:
            self.compiler.compile([probe], output_dir=self.build_temp)
        except Exception:  # noqa: BLE001 - the compiler's error: the header is missing
            return False
        return True

    def get_outputs(self) -> list:
        return [*super().get_outputs(), os.path.join(self.build_lib, self.PRELOAD),
                os.path.join(self.build_lib, self.VULKAN_LAYER)]  # fmt: skip


recorder_extension = Extension(
    "ggml_viz.capture.core._recorder",
    sources=[f"{CAPTURE}/{name}.c" for name in ("core/_recorder", "core/_recorder_gpu", *CORE)],
    depends=sorted(glob.glob(f"{CAPTURE}/**/*.h", recursive=True)) + CONTRACT_SOURCES,
    # hidden: the recorder's functions are not for other libraries to bind to (PyInit__recorder is exported)
    extra_compile_args=[*C_FLAGS, "-fvisibility=hidden"],
    libraries=["m", "dl"],
    define_macros=LIMITED_API,
    py_limited_api=True,
    optional=not WERROR,
)

# `ggml-viz limits`' memory read kernel (optional: without it the memory's read bandwidth is ggml's
# F32 matrix-vector rate, and the limits say so).
memory_read_extension = Extension(
    "ggml_viz.capture._memory_read",
    sources=[f"{CAPTURE}/memory_read.c"],
    extra_compile_args=C_FLAGS,
    libraries=["pthread"],
    define_macros=LIMITED_API,
    py_limited_api=True,
    optional=not WERROR,
)

setup(
    cmdclass={"build_py": BuildWithStartupHook, "build_ext": BuildWithPreloadLibrary},
    ext_modules=[recorder_extension, memory_read_extension],
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
