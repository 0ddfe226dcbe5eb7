"""Native programs for the tests: a plain ggml program they build, and llama.cpp's and
whisper.cpp's own tools."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..whisper_models import whisper_tools_folder

HERE = Path(__file__).parent
PLAIN_PROGRAM_SOURCE = HERE.parent / "native" / "plain_ggml_program.c"


def llama_cpp_lib_dir() -> Path:
    import llama_cpp

    return Path(llama_cpp.__file__).parent / "lib"


def build_plain_program(folder: Path) -> Path:
    """Compile the plain ggml program against llama-cpp-python's ggml shared libraries."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the plain ggml program")
    lib = llama_cpp_lib_dir()
    program = folder / "plain_ggml_program"
    subprocess.run(
        [compiler, "-O1", "-o", str(program), str(PLAIN_PROGRAM_SOURCE), f"-L{lib}", "-lggml", "-lggml-base",
         "-lggml-cpu", f"-Wl,-rpath,{lib}"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return program


def build_shared_library(folder: Path, name: str, source: str) -> Path:
    """A small shared library from C source (shims the tests put beside the program)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    (folder / f"{name}.c").write_text(source)
    library = folder / f"lib{name}.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(library), str(folder / f"{name}.c")], check=True)
    return library


def llama_tool(name: str) -> Path:
    """llama.cpp's own program `name`, as `make setup` installs it beside ggml-viz."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        message = f"{name} is not installed beside ggml-viz (make setup builds llama.cpp's own programs)"
        if os.environ.get("GGML_VIZ_REQUIRE_NATIVE_TOOLS"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def whisper_tool(name: str) -> Path:
    """whisper.cpp's own program `name`, as `make setup` installs it beside ggml-viz, or where
    scripts/build-whisper-tools.sh built it (see tests/whisper_models.py)."""
    for path in (Path(sys.executable).parent / name, whisper_tools_folder() / "bin" / name):
        if path.exists():
            return path
    message = f"{name} is not installed beside ggml-viz (make setup builds whisper.cpp's own programs)"
    if os.environ.get("GGML_VIZ_REQUIRE_NATIVE_TOOLS"):
        pytest.fail(message)
    pytest.skip(message)


def untraced(program: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_") and k != "LD_PRELOAD"}
    return subprocess.run(program, capture_output=True, text=True, timeout=300, env=env, **kwargs)
