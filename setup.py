"""Build steps pyproject.toml cannot express: the native recorder (a C extension, optional:
ggml-viz falls back to its Python recorder without it), the preload library that records
native programs (`ggml-viz run -- llama-server ...`), and the start-up hook (.pth)."""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

STARTUP_HOOK = "ggml_viz_startup.pth"
NATIVE = "src/ggml_viz/capture/native"
C_FLAGS = ["-O2", "-std=c11", "-D_GNU_SOURCE"]
# The recorder core both native parts build on: the recorder, GOT redirection, the GPU timer.
CORE = ("recorder", "got_hook", "gpu/cupti_activity", "gpu/gpu_tracer", "gpu/graph_compute")


class BuildWithStartupHook(build_py):
    """Install ggml_viz_startup.pth at the top of site-packages, as coverage.py's docs suggest."""

    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", STARTUP_HOOK), os.path.join(self.build_lib, STARTUP_HOOK))

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, STARTUP_HOOK)]


class BuildWithPreloadLibrary(build_ext):
    """Also build libggml_viz_preload.so: a plain shared library (no Python in it) that
    `ggml-viz run` puts into native programs with LD_PRELOAD. Optional, like the extension:
    without a C compiler, ggml-viz records Python programs with its Python recorder."""

    PRELOAD = "ggml_viz/capture/libggml_viz_preload.so"

    def run(self) -> None:
        super().run()
        try:
            objects = self.compiler.compile(
                [f"{NATIVE}/{name}.c" for name in ("preload", "preload_setup", "preload_spool", "preload_wire", *CORE)],
                output_dir=self.build_temp,
                extra_preargs=[*C_FLAGS, "-fPIC", "-fvisibility=hidden", "-Wall"],
            )
            output = os.path.join(self.build_lib, self.PRELOAD)
            self.compiler.link_shared_object(objects, output, libraries=["dl", "pthread", "m"])
            if self.inplace:
                self.copy_file(output, os.path.join("src", self.PRELOAD))
        except Exception as error:  # noqa: BLE001 - optional, as the extension is
            print(f"warning: the preload library for native programs was not built: {error}")

    def get_outputs(self) -> list:
        return [*super().get_outputs(), os.path.join(self.build_lib, self.PRELOAD)]


native_recorder = Extension(
    "ggml_viz.capture._native",
    sources=["src/ggml_viz/capture/_native.c", "src/ggml_viz/capture/_native_gpu.c",
             *(f"{NATIVE}/{name}.c" for name in CORE)],
    depends=[f"{NATIVE}/{name}.h" for name in (*CORE, "gpu/cupti_abi")],
    extra_compile_args=C_FLAGS,
    libraries=["m", "dl"],
    optional=True,
)

setup(
    cmdclass={"build_py": BuildWithStartupHook, "build_ext": BuildWithPreloadLibrary},
    ext_modules=[native_recorder],
)
