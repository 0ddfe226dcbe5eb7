"""`pip install` of ggml-viz's wheel into a clean virtual environment (what a user, or pipx, does)
records llama.cpp's own program with no compiler, no llama.cpp build and no llama-cpp-python:
the preload library is in the wheel and found in the installed package. The steps and their
timing are benchmarks/install.py's (its medians over repeats: the README's figures).

The wheel is one for every CPython from 3.10 (cp310-abi3) on glibc 2.28 or newer (manylinux_2_28):
its tag, the glibc symbol versions its libraries link and their use of CPython's stable ABI are
checked, and it is installed into this Python's venv and into one of CPython 3.10, its oldest."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.capture.gpu.vulkan_layer import headers_on_this_machine

from .arch_models import write_model
from .native import llama_tool, missing
from .vulkan import lavapipe_environment, vulkan_llama_folder

pytestmark = pytest.mark.model

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "install.py"
OLDEST_GLIBC = (2, 28)  # scripts/build_wheel.py's target
OLDEST_PYTHON = "3.10"
NATIVE_PARTS = (
    "ggml_viz/capture/core/_recorder.abi3.so",
    "ggml_viz/capture/_memory_read.abi3.so",
    "ggml_viz/capture/preload/libggml_viz_preload.so",
)
VULKAN_LAYER = "ggml_viz/capture/gpu/libggml_viz_vulkan_layer.so"


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
    for tool in ("build", "auditwheel", "ziglang"):  # (ziglang: its C for glibc 2.28, not this machine's)
        if importlib.util.find_spec(tool) is None:
            pytest.skip(f"{tool} is not installed (the test extra has it)")
    return load_benchmark().repaired_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def libraries(wheel, tmp_path_factory) -> list[Path]:
    """The wheel's shared libraries, unpacked."""
    folder = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as archive:
        names = [name for name in archive.namelist() if name.endswith(".so")]
        archive.extractall(folder, names)
    return [folder / name for name in names]


def glibc_of(platform: str) -> tuple[int, int]:
    """The glibc a manylinux platform tag asks for (manylinux_2_28_x86_64: 2.28)."""
    found = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", platform)
    assert found, platform
    return int(found[1]), int(found[2])


def test_the_wheel_is_one_for_cpython_3_10_on_and_glibc_2_28_on(wheel):
    # GIVEN the wheel's name: name-version-python-abi-platforms
    python, abi, platforms = wheel.name.removesuffix(".whl").split("-")[-3:]
    # THEN every CPython from 3.10 (the stable ABI), on x86_64 Linux with glibc 2.28 or newer
    assert (python, abi) == ("cp310", "abi3")
    assert all(glibc_of(platform) <= OLDEST_GLIBC for platform in platforms.split("."))


def test_the_wheel_holds_the_native_code(wheel):
    # the C recorder and the memory read kernel (built once, on the stable ABI), the preload
    # library, the Vulkan layer (where Vulkan's headers are) and the start-up hook inside
    names = zipfile.ZipFile(wheel).namelist()
    assert set(NATIVE_PARTS) <= set(names)
    assert VULKAN_LAYER in names or not headers_on_this_machine()
    assert "ggml_viz_startup.pth" in names
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: llama-cpp-python")]
    # an extra, not a dependency: ggml-viz's own (python), and the tests' (its server)
    assert requires and all("; extra ==" in line for line in requires)
    assert any('extra == "python"' in line for line in requires)


def test_its_libraries_link_no_glibc_symbol_newer_than_2_28(wheel, libraries):
    # GIVEN each shared library in the wheel: the extensions, the preload library, the Vulkan layer
    if not shutil.which("readelf"):
        missing("readelf is not installed (Debian's binutils)")
    for library in libraries:
        symbols = subprocess.run(["readelf", "--dyn-syms", "-W", str(library)], capture_output=True, text=True)
        versions = {(int(major), int(minor)) for major, minor in re.findall(r"@GLIBC_(\d+)\.(\d+)", symbols.stdout)}
        # THEN each glibc function it calls is one glibc 2.28 has, by its version
        assert versions and max(versions) <= OLDEST_GLIBC, (library.name, sorted(versions))
    # AND auditwheel finds it so
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True)
    consistent = re.search(r'consistent with\s+the following platform tag:\s+"([^"]+)"', shown.stdout)
    assert consistent and glibc_of(consistent[1]) <= OLDEST_GLIBC, shown.stdout


def test_its_extensions_use_the_stable_abi_of_cpython_3_10(wheel):
    # GIVEN abi3audit, which reads the CPython functions each extension calls
    if importlib.util.find_spec("abi3audit") is None:
        pytest.skip("abi3audit is not installed (the test extra has it)")
    audit = subprocess.run(
        [sys.executable, "-m", "abi3audit", "--strict", "--summary", str(wheel)], capture_output=True, text=True
    )
    # THEN each is in the stable ABI of CPython 3.10, the wheel's tag (none from a later one, none outside it)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    said = " ".join((audit.stdout + audit.stderr).split())  # (its summary, on stderr)
    assert re.search(r"\d extensions scanned; 0 ABI version mismatches and 0 ABI violations", said), said


def oldest_python() -> str:
    """A CPython 3.10 to make a venv from: pyenv's, or one on PATH (that runs: not a pyenv shim without one)."""
    pyenv = sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{OLDEST_PYTHON}.*/bin/python{OLDEST_PYTHON}")))
    for candidate in (*reversed(pyenv), shutil.which(f"python{OLDEST_PYTHON}")):
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    pytest.skip(f"no CPython {OLDEST_PYTHON} here (pyenv's, or python{OLDEST_PYTHON} on PATH)")


@pytest.mark.parametrize("python", ["this", OLDEST_PYTHON])
def test_a_clean_venv_with_the_wheel_records_llama_completion(wheel, tmp_path, model_path, python):
    # GIVEN a fresh virtual environment (of this Python, or of CPython 3.10) with the wheel pip-installed
    # from the machine's package index
    benchmark = load_benchmark()
    program = benchmark.completion(llama_tool("llama-completion"), model_path)
    interpreter = oldest_python() if python == OLDEST_PYTHON else None
    # WHEN its console script (as pipx calls it) runs llama.cpp's own llama-completion
    timing, output = benchmark.install_and_run(wheel, tmp_path, program, python=interpreter)
    print(f"venv {timing.venv_s:.1f} s, pip install {timing.install_s:.1f} s, first run {timing.first_run_s:.1f} s")
    venv = tmp_path / "venv"
    env = benchmark.clean_environment()
    # THEN it says its version, and the extensions the wheel built once load in this interpreter
    version = benchmark.run([str(venv / "bin" / "ggml-viz"), "--version"], env=env).stdout
    assert version.strip() == f"ggml-viz {ggml_viz.__version__}"
    loaded = benchmark.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "from ggml_viz.capture.core.extension import extension, IMPORT_ERROR; "
            "from ggml_viz.capture import _memory_read; print(extension.__file__ if extension else IMPORT_ERROR)",
        ],
        env=env,
    ).stdout.strip()
    assert loaded.endswith("_recorder.abi3.so") and Path(loaded).resolve().is_relative_to(venv.resolve()), loaded
    # AND llama-cpp-python was not installed with it ...
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


def test_the_wheels_vulkan_layer_times_a_vulkan_program(wheel, tmp_path):
    # GIVEN a fresh virtual environment with the wheel, and llama.cpp's Vulkan build on lavapipe
    # (Mesa's Vulkan device in software) running a tiny model
    if not headers_on_this_machine():
        missing("Vulkan's headers are not installed (apt-get install libvulkan-dev): the wheel has no Vulkan layer")
    program = vulkan_llama_folder() / "bin" / "llama-completion"
    model = write_model(tmp_path / "tiny-llama.gguf", "llama").path
    benchmark, venv = load_benchmark(), tmp_path / "venv"
    env = benchmark.clean_environment()
    benchmark.run([benchmark.base_python(), "-m", "venv", str(venv)], env=env)
    benchmark.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile", str(wheel)], env=env
    )
    # WHEN its ggml-viz records the program with the GPU's times
    output = tmp_path / "vulkan.ggmlviz"
    completion = [str(program), "-m", str(model), "-p", "hi", "-n", "2", "-ngl", "99", "-no-cnv", "--no-warmup"]
    benchmark.run(
        [str(venv / "bin" / "ggml-viz"), "run", "--gpu", "every", "-o", str(output), "--", *completion, "-t", "2"],
        env={**env, **lavapipe_environment()},
    )
    # THEN the layer loaded from the installed package timed the program's nodes on the device
    gpu = ggml_viz.open(output).manifest["gpu"]
    assert gpu["timer"] == "vulkan" and gpu["problem"] is None, gpu
    assert Path(gpu["vulkan_layer"]).resolve().is_relative_to(venv.resolve()), gpu["vulkan_layer"]
    assert gpu["kernels"] > 0 and gpu["attributed_kernels"] == gpu["kernels"]


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
