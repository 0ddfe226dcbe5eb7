"""Native programs for the tests: a plain ggml program they build, and llama.cpp's and
whisper.cpp's own tools."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import distribution
from pathlib import Path

import pytest

from ..whisper_models import MISSING_TOOLS, whisper_tools_folder

HERE = Path(__file__).parent
PLAIN_PROGRAM_SOURCE = HERE.parent / "native" / "plain_ggml_program.c"


def llama_cpp_lib_dir() -> Path:
    import llama_cpp

    return Path(llama_cpp.__file__).parent / "lib"


@dataclass(frozen=True)
class Ggml:
    """A ggml the tests build programs against: its shared libraries and its headers."""

    lib: Path
    include: Path

    @property
    def base_library(self) -> Path:
        """libggml-base as a program linked to it loads it (by its soname, through the rpath)."""
        return self.lib / "libggml-base.so.0"

    def version(self) -> str:
        return self._ask("print(library.ggml_version().decode())")

    def op_number(self, name: str) -> int:
        """The number this ggml gives op `name` (ggml_op_name's table, read up to that op)."""
        return int(self._ask(f"print(next(op for op in range(1024) if library.ggml_op_name(op) == b{name!r}))"))

    def _ask(self, statement: str) -> str:
        """Run `statement` on this libggml-base in a process of its own: loaded here, it would stand in
        for llama-cpp-python's (a library of the same soname) when llama_cpp loads later."""
        script = (
            "import ctypes, sys\n"
            "library = ctypes.CDLL(sys.argv[1])\n"
            "library.ggml_version.restype = library.ggml_op_name.restype = ctypes.c_char_p\n"
            "library.ggml_op_name.argtypes = [ctypes.c_int]\n" + statement
        )
        answer = subprocess.run([sys.executable, "-c", script, str(self.base_library)], capture_output=True, text=True)
        assert answer.returncode == 0, answer.stderr
        return answer.stdout.strip()


def llama_cpp_ggml() -> Ggml:
    """The ggml llama-cpp-python loads: its libraries, and their headers (scripts/build-llama.sh puts
    them in include/ beside the libraries' lib/; a wheel with its own build, in site-packages'
    include/). The test skips without them (fails where GGML_VIZ_REQUIRE_NATIVE_TOOLS says every
    tool must be there)."""
    lib = llama_cpp_lib_dir()
    beside = Path(os.path.realpath(lib / "libggml-base.so")).parent.parent / "include"
    installed = [file for file in distribution("llama_cpp_python").files or () if file.name == "ggml.h"]
    if (beside / "ggml.h").exists():
        return Ggml(lib, beside)
    if installed:
        return Ggml(lib, Path(str(installed[0].locate())).parent)
    message = "no ggml headers beside llama-cpp-python's libraries: run `make setup`"
    pytest.fail(message) if os.environ.get("GGML_VIZ_REQUIRE_NATIVE_TOOLS") else pytest.skip(message)


def whisper_cpp_ggml() -> Ggml:
    """The ggml whisper.cpp 1.8.5 vendors (0.13.1), as scripts/build-whisper-tools.sh built it; the
    test skips without it (fails where GGML_VIZ_REQUIRE_NATIVE_TOOLS says every tool must be there)."""
    folder = whisper_tools_folder()
    ggml = Ggml(folder / "lib", folder / "include")
    if not ggml.base_library.exists() or not (ggml.include / "ggml.h").exists():
        if os.environ.get("GGML_VIZ_REQUIRE_NATIVE_TOOLS"):
            pytest.fail(MISSING_TOOLS)
        pytest.skip(MISSING_TOOLS)
    return ggml


def build_plain_program(folder: Path, ggml: Ggml | None = None) -> Path:
    """Compile the plain ggml program against a ggml's headers and shared libraries
    (llama-cpp-python's by default)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the plain ggml program")
    ggml = ggml or llama_cpp_ggml()
    program = folder / "plain_ggml_program"
    subprocess.run(
        [compiler, "-O1", "-o", str(program), str(PLAIN_PROGRAM_SOURCE), f"-I{ggml.include}", f"-L{ggml.lib}",
         "-lggml", "-lggml-base", "-lggml-cpu", f"-Wl,-rpath,{ggml.lib}"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return program


def compile_native(source_name: str, output: Path, *flags: str) -> Path:
    """tests/native/`source_name` compiled to `output` (a program, or a library with -shared)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    source = HERE.parent / "native" / source_name
    subprocess.run([compiler, "-O1", "-fPIC", "-o", str(output), str(source), *flags], check=True, capture_output=True)
    return output


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


def untraced(program: list[str], preload: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    """The program run without ggml-viz (with `preload` alone in LD_PRELOAD, if given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_") and k != "LD_PRELOAD"}
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    return subprocess.run(program, capture_output=True, text=True, timeout=300, env=env, **kwargs)
