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


def test_uv_is_given_every_index_pip_uses():
    # GIVEN pip's settings: its index, extra indexes, find-links folders, constraints, certificates
    benchmark = load_benchmark()
    settings = {
        "index_url": "https://mirror.example/simple",
        "extra_index_urls": ["file:///srv/local/simple"],
        "find_links": ["/srv/wheels"],
        "constraints": ["/etc/pip-constraints.txt"],
        "cert": "/etc/ssl/certs/ca-certificates.crt",
        "no_index": False,
    }
    # WHEN they are turned into uv's options
    arguments, env = benchmark.uv_index_arguments(settings)
    # THEN uv searches the same places, and takes the best version on any index as pip does
    assert arguments == [
        "--default-index", "https://mirror.example/simple", "--index", "file:///srv/local/simple",
        "--find-links", "/srv/wheels", "--constraints", "/etc/pip-constraints.txt",
        "--index-strategy", "unsafe-best-match",
    ]  # fmt: skip
    assert env in ({"SSL_CERT_FILE": settings["cert"]}, {})  # (unless SSL_CERT_FILE is set already)
    assert benchmark.uv_index_arguments({**settings, "no_index": True})[0][0] == "--no-index"
    # AND this machine's pip settings are read from pip itself: its index is one pip names
    here = benchmark.pip_settings()
    assert set(here) == set(settings) and (here["index_url"] or here["no_index"])


@pytest.fixture(scope="module")
def installers(tmp_path_factory):
    """uv and pipx, installed from pip's index into a scratch virtual environment (as
    benchmarks/install.py gets them)."""
    return load_benchmark().scratch_tools(tmp_path_factory.mktemp("installers"), {"uv", "pipx"})


@pytest.mark.parametrize("installer", ["uv", "uv-tool", "pipx"])
def test_uv_and_pipx_install_the_wheel_that_records_llama_completion(
    installer, installers, wheel, tmp_path, model_path
):
    # GIVEN a fresh environment with the wheel installed by uv (a venv; a tool) or pipx, from pip's index
    benchmark = load_benchmark()
    program = benchmark.completion(llama_tool("llama-completion"), model_path)
    # WHEN its ggml-viz runs llama.cpp's own llama-completion, then starts again to summarize the run
    timing, output = benchmark.install_and_run(
        wheel, tmp_path, program, installer=installer, tools=installers, starts=1
    )
    print(f"{installer}: install {timing.install_s:.1f} s, first run {timing.first_run_s:.1f} s")
    command = benchmark.ggml_viz_command(installer, tmp_path)
    env = benchmark.clean_environment()
    # THEN the run is complete, with graphs and node times, and its kept summary is the computed one
    summary = benchmark.run([str(command), "summary", "--json", str(output)], env=env).stdout
    recomputed = benchmark.run([str(command), "summary", "--json", "--recompute", str(output)], env=env).stdout
    assert summary == recomputed
    assert json.loads(summary)["status"] == "complete" and json.loads(summary)["timed_node_events"] > 0
    assert (output / "summary-cache.json").is_file()
