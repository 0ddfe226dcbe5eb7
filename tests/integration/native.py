"""Native programs for the tests: the plain ggml programs they build, llama.cpp's and
whisper.cpp's own tools, and the other ggml programs `make setup` installs (ggml-python, gpt4all)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import distribution
from pathlib import Path
from typing import NoReturn

import pytest

from ..build_cache import cache_folder
from ..whisper_models import MISSING_TOOLS, whisper_tools_folder

HERE = Path(__file__).parent
PLAIN_PROGRAM_SOURCE = HERE.parent / "native" / "plain_ggml_program.c"
SIMPLE_CTX_PROGRAM_SOURCE = HERE.parent / "native" / "simple_ctx_program.c"
# Python programs of the tests' own on other ggml bindings (ggml-python's and gpt4all's run with
# ggml_python()'s or gpt4all_folder()'s folder on PYTHONPATH)
PROGRAMS = HERE.parent / "programs"


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
    missing("no ggml headers beside llama-cpp-python's libraries: run `make setup`")


def whisper_cpp_ggml() -> Ggml:
    """The ggml whisper.cpp 1.8.5 vendors (0.13.1), as scripts/build-whisper-tools.sh built it; the
    test skips without it (fails where GGML_VIZ_REQUIRE_NATIVE_TOOLS says every tool must be there)."""
    folder = whisper_tools_folder()
    ggml = Ggml(folder / "lib", folder / "include")
    if not ggml.base_library.exists() or not (ggml.include / "ggml.h").exists():
        missing(MISSING_TOOLS)
    return ggml


def build_plain_program(folder: Path, ggml: Ggml | None = None) -> Path:
    """Compile the plain ggml program against a ggml's headers and shared libraries
    (llama-cpp-python's by default)."""
    return _build_ggml_program(PLAIN_PROGRAM_SOURCE, folder, ggml)


def build_simple_ctx_program(folder: Path, ggml: Ggml | None = None) -> Path:
    """Compile the simple-ctx ggml program (tensors in a ggml context, no backend; its modes
    compute with ggml_graph_compute_with_ctx, ggml_graph_plan and ggml_graph_compute, or a CPU
    backend's graph plan) against a ggml's headers and shared libraries (llama-cpp-python's by
    default; ggml_python_ggml("0.0.37") makes it a program on a ggml of early 2024)."""
    return _build_ggml_program(SIMPLE_CTX_PROGRAM_SOURCE, folder, ggml)


def _build_ggml_program(source: Path, folder: Path, ggml: Ggml | None) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip(f"no C compiler to build {source.name}")
    ggml = ggml or llama_cpp_ggml()
    program = folder / source.stem
    # a ggml of early 2024 is one library, libggml
    libraries = ["-lggml", "-lggml-base", "-lggml-cpu"] if (ggml.lib / "libggml-base.so").exists() else ["-lggml"]
    subprocess.run(
        [
            compiler,
            "-O1",
            "-o",
            str(program),
            str(source),
            f"-I{ggml.include}",
            f"-L{ggml.lib}",
            *libraries,
            f"-Wl,-rpath,{ggml.lib}",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
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
        missing(f"{name} is not installed beside ggml-viz (make setup builds llama.cpp's own programs)")
    return path


def whisper_tool(name: str) -> Path:
    """whisper.cpp's own program `name`, as `make setup` installs it beside ggml-viz, or where
    scripts/build-whisper-tools.sh built it (see tests/whisper_models.py)."""
    for path in (Path(sys.executable).parent / name, whisper_tools_folder() / "bin" / name):
        if path.exists():
            return path
    missing(f"{name} is not installed beside ggml-viz (make setup builds whisper.cpp's own programs)")


def ggml_python(version: str) -> Path:
    """The folder `make setup` installed ggml-python `version` into (0.0.45: ggml 0.15.3; 0.0.37:
    a ggml of the first half of 2024), with its own ggml libraries: put it on PYTHONPATH to
    `import ggml`. The test skips without it (fails where GGML_VIZ_REQUIRE_NATIVE_TOOLS says every
    tool must be there)."""
    folder = cache_folder() / f"ggml-python-{version}"
    return _installed(folder, folder / "ggml" / "__init__.py", f"ggml-python {version}")


def ggml_python_ggml(version: str) -> Ggml:
    """The ggml ggml-python `version` vendors, as its build installed it beside the package
    (lib/, include/), for C programs built against it. 0.0.37's is a ggml of early 2024: one
    library, libggml, with no soname version (so no base_library, version() or op_number())."""
    folder = ggml_python(version)
    include = folder / "include"
    return Ggml(folder / "lib", include / "ggml" if (include / "ggml" / "ggml.h").exists() else include)


def gpt4all_folder() -> Path:
    """The folder `make setup` installed gpt4all 2.8.2 into (its llmodel libraries bundle a
    llama.cpp of mid-2024): put it on PYTHONPATH to `import gpt4all`. The test skips without it
    (fails where GGML_VIZ_REQUIRE_NATIVE_TOOLS says every tool must be there)."""
    folder = cache_folder() / "gpt4all-2.8.2"
    return _installed(folder, folder / "gpt4all" / "__init__.py", "gpt4all 2.8.2")


def _installed(folder: Path, marker: Path, name: str) -> Path:
    if not marker.exists():
        missing(f"{name} is not installed in {folder} (make setup installs it)")
    return folder


def missing(message: str) -> NoReturn:
    """A tool the test needs is not there: the test skips, or fails where GGML_VIZ_REQUIRE_NATIVE_TOOLS
    says every tool must be there (CI)."""
    if os.environ.get("GGML_VIZ_REQUIRE_NATIVE_TOOLS"):
        pytest.fail(message)
    pytest.skip(message)


def untraced(
    program: list[str], preload: Path | None = None, extra_env: dict[str, str] | None = None, **kwargs
) -> subprocess.CompletedProcess:
    """The program run without ggml-viz (with `preload` alone in LD_PRELOAD, if given), with
    `extra_env` set besides (PYTHONPATH=ggml_python(...) for a ggml-python program, say)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_") and k != "LD_PRELOAD"}
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    env.update(extra_env or {})
    return subprocess.run(program, capture_output=True, text=True, timeout=300, env=env, **kwargs)
