"""`pip install ggml-viz` has no llama-cpp-python (the extra `python` brings it): every path that
needs it says so in one line, with the command that installs it, and no traceback. Run in a
subprocess whose import system refuses `llama_cpp`, as an installation without it would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BLOCK_LLAMA_CPP = """
import sys

class NoLlamaCpp:
    def find_spec(self, name, path=None, target=None):
        if name == "llama_cpp" or name.startswith("llama_cpp."):
            raise ImportError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoLlamaCpp())
"""
INSTALL = "pip install 'ggml-viz[python]'"


def without_llama_cpp(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_") and k != "LLAMA_CPP_LIB_PATH"}
    environment.update(GGML_VIZ_CACHE=str(tmp_path / "cache"), **env)
    return subprocess.run(
        [sys.executable, "-c", BLOCK_LLAMA_CPP + code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=environment,
    )


def cli(*args: str) -> str:
    return f"from ggml_viz.commands import main\nsys.exit(main({list(args)!r}))"


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("ggml-viz: error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_the_blocker_does_block(tmp_path):
    result = without_llama_cpp("import llama_cpp", tmp_path)
    assert result.returncode != 0 and "No module named 'llama_cpp'" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        # (without -m, record and bench look for the default model's package first)
        pytest.param(("record", "-o", "out.ggmlviz", "-n", "1"), marks=pytest.mark.llama_cpp),
        pytest.param(("bench", "-p", "8", "-n", "1", "-r", "1"), marks=pytest.mark.llama_cpp),
        ("limits", "--again", "--threads", "1", "--types", "F32", "--size-mib", "16", "--repeats", "1", "--no-gpu"),
    ],
    ids=["record", "bench", "limits"],
)
def test_a_command_needing_llama_cpp_python_says_how_to_get_it(tmp_path, args):
    line = one_line_error(without_llama_cpp(cli(*args), tmp_path))
    assert "needs llama-cpp-python, which is not installed" in line
    assert INSTALL in line
    assert not (tmp_path / "out.ggmlviz").exists()  # record made no run directory


def test_limits_says_it_can_use_another_ggml(tmp_path):
    line = one_line_error(without_llama_cpp(cli("limits", "--again", "--no-gpu"), tmp_path))
    assert "LLAMA_CPP_LIB_PATH" in line


def test_the_python_api_raises_one_clear_error(tmp_path):
    code = """
import ggml_viz
from ggml_viz._errors import LlamaCppPythonMissing
try:
    ggml_viz.record("out.ggmlviz")
except LlamaCppPythonMissing as error:
    print(error)
"""
    result = without_llama_cpp(code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert INSTALL in result.stdout and len(result.stdout.strip().splitlines()) == 1
    assert not (tmp_path / "out.ggmlviz").exists()


def test_commands_reading_runs_need_no_llama_cpp_python(tmp_path):
    result = without_llama_cpp(cli("--version"), tmp_path)
    assert result.returncode == 0, result.stderr
    result = without_llama_cpp("import ggml_viz, ggml_viz.commands, ggml_viz.runformat.reader", tmp_path)
    assert result.returncode == 0, result.stderr
