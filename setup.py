"""Build steps pyproject.toml cannot express: the native recorder (a C extension, optional:
ggml-viz falls back to its Python recorder without it) and the start-up hook (.pth)."""

import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

STARTUP_HOOK = "ggml_viz_startup.pth"


class BuildWithStartupHook(build_py):
    """Install ggml_viz_startup.pth at the top of site-packages, as coverage.py's docs suggest."""

    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", STARTUP_HOOK), os.path.join(self.build_lib, STARTUP_HOOK))

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, STARTUP_HOOK)]


native_recorder = Extension(
    "ggml_viz.capture._native",
    sources=["src/ggml_viz/capture/_native.c"],
    extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE"],
    libraries=["m"],
    optional=True,
)

setup(cmdclass={"build_py": BuildWithStartupHook}, ext_modules=[native_recorder])
