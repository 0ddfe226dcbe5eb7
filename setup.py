"""Build steps pyproject.toml cannot express: the start-up hook (.pth) beside the package."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

STARTUP_HOOK = "ggml_viz_startup.pth"


class BuildWithStartupHook(build_py):
    """Install ggml_viz_startup.pth at the top of site-packages, as coverage.py's docs suggest."""

    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join("src", STARTUP_HOOK), os.path.join(self.build_lib, STARTUP_HOOK))

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, STARTUP_HOOK)]


setup(cmdclass={"build_py": BuildWithStartupHook})
