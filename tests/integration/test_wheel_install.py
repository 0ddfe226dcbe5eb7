"""`pip install` of ggml-viz's wheel into a clean virtual environment (what a user, or pipx, does)
records llama.cpp's own program with no compiler, no llama.cpp build and no llama-cpp-python:
the preload library is in the wheel and found in the installed package. The steps and their
timing are benchmarks/install.py's (its medians over repeats: the README's figures)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .native import llama_tool

pytestmark = pytest.mark.model

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "install.py"


def load_benchmark():
    if "install_benchmark" not in sys.modules:  # (a dataclass looks its module up there)
        spec = importlib.util.spec_from_file_location("install_benchmark", BENCHMARK)
        sys.modules["install_benchmark"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["install_benchmark"])
    return sys.modules["install_benchmark"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `make wheel` builds (GGML_VIZ_WHEEL: one built already)."""
    if os.environ.get("GGML_VIZ_WHEEL"):
        return Path(os.environ["GGML_VIZ_WHEEL"])
    for tool in ("build", "auditwheel"):
        if importlib.util.find_spec(tool) is None:
            pytest.skip(f"{tool} is not installed (the test extra has it)")
    return load_benchmark().repaired_wheel(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_holds_the_native_code(wheel):
    # a manylinux wheel, with the C recorder, the preload library and the start-up hook inside
    assert "-manylinux_" in wheel.name and wheel.name.endswith("_x86_64.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "ggml_viz/capture/preload/libggml_viz_preload.so" in names
    assert any(n.startswith("ggml_viz/capture/core/_recorder.") and n.endswith(".so") for n in names)
    assert "ggml_viz_startup.pth" in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: llama-cpp-python")]
    # an extra, not a dependency: ggml-viz's own (python), and the tests' (its server)
    assert requires and all("; extra ==" in line for line in requires)
    assert any('extra == "python"' in line for line in requires)


def test_a_clean_venv_with_the_wheel_records_llama_completion(wheel, tmp_path, model_path):
    # GIVEN a fresh virtual environment with the wheel pip-installed from the machine's package index
    benchmark = load_benchmark()
    program = benchmark.completion(llama_tool("llama-completion"), model_path)
    # WHEN its console script (as pipx calls it) runs llama.cpp's own llama-completion
    timing, output = benchmark.install_and_run(wheel, tmp_path, program)
    print(f"venv {timing.venv_s:.1f} s, pip install {timing.install_s:.1f} s, first run {timing.first_run_s:.1f} s")
    venv = tmp_path / "venv"
    env = benchmark.clean_environment()
    # THEN llama-cpp-python was not installed with it ...
    no_llama = subprocess.run([str(venv / "bin" / "python"), "-c", "import llama_cpp"], capture_output=True, env=env)
    assert no_llama.returncode != 0 and b"No module named 'llama_cpp'" in no_llama.stderr
    # ... the preload library came from the installed package ...
    preload = benchmark.run([str(venv / "bin" / "ggml-viz"), "preload-path"], env=env).stdout.strip()
    assert Path(preload).resolve().is_relative_to(venv.resolve()) and Path(preload).exists()
    # ... and the run opens, with graphs and node times
    summary = json.loads(
        benchmark.run([str(venv / "bin" / "ggml-viz"), "summary", "--json", str(output)], env=env).stdout
    )
    assert summary["status"] == "complete"
    assert summary["graphs"] >= 4 and summary["timed_node_events"] > 0
    assert {phase["phase"] for phase in summary["phases"]} == {"prompt", "decode"}
