"""`ggml-viz doctor`: what this machine can record, each line "ok" or what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ggml_viz.commands.doctor import FIX, NOTE, OK, chromium_line, cupti_line, llama_cpp_python_line

from .native import llama_tool


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_")}
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "ggml_viz", "doctor", *args], capture_output=True, text=True, timeout=180, env=base
    )


def checks(answer: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    return {check["topic"]: check for check in json.loads(answer.stdout)["checks"]}


def test_this_machine() -> None:
    """Here the extension and the preload library load and llama-cpp-python reads its ggml: ready."""
    answer = doctor()
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert "ready to record llama-cpp-python" in answer.stdout
    assert answer.stderr == ""
    found = checks(doctor("--json"))
    for topic in ("C extension", "preload library", "llama-cpp-python", "settings"):
        assert found[topic]["state"] == OK, found[topic]
    assert found["llama-cpp-python"]["facts"]["ggml_version"]
    assert {"NVIDIA GPU", "CUPTI", "Vulkan", "Chromium", "Graphviz", "machine limits"} <= set(found)
    # the layer is built here (Debian's libvulkan-dev) and the loader installed (make setup)
    assert found["Vulkan"]["state"] == OK and found["Vulkan"]["facts"]["layer"].endswith("vulkan_layer.so")
    for check in found.values():
        assert check["state"] in (OK, NOTE, FIX)


def test_settings_in_effect_are_said() -> None:
    found = checks(doctor("--json", env={"GGML_VIZ_DETAIL": "graph"}))
    assert "GGML_VIZ_DETAIL" in found["settings"]["text"]
    assert found["settings"]["facts"]["variables"] == ["GGML_VIZ_DETAIL"]


def test_a_program() -> None:
    """llama.cpp's own program: the ggml libraries it loads, their version, and that ggml-viz reads them."""
    program = llama_tool("llama-server")
    answer = doctor("--json", "--", str(program))
    assert answer.returncode == 0, answer.stdout + answer.stderr
    found = checks(answer)
    loads = found["program llama-server"]
    assert loads["state"] == OK
    assert any(name.startswith("libggml-base") for name in loads["facts"]["libraries"])
    ggml = found["its ggml"]
    assert ggml["state"] == OK and "read by ggml-viz" in ggml["text"]
    assert ggml["facts"]["version"] and Path(ggml["facts"]["library"]).exists()
    assert "ready to record llama-server" in doctor("--program", str(program)).stdout


def test_a_missing_program(tmp_path: Path) -> None:
    answer = doctor("--", str(tmp_path / "llama-nothing"))
    assert answer.returncode == 2
    assert answer.stdout == ""
    assert answer.stderr.strip().splitlines() == [
        f"ggml-viz: error: {tmp_path / 'llama-nothing'}: no such program (not a file, nor a name on PATH)"
    ]


def test_a_program_without_ggml(tmp_path: Path) -> None:
    """An executable that loads no ggml: the line says what to do, and the status is 1."""
    answer = doctor("--program", "/bin/true")
    assert answer.returncode == 1, answer.stdout
    assert "fix" in answer.stdout and "BUILD_SHARED_LIBS=ON" in answer.stdout
    assert "not ready to record true" in answer.stdout


def test_failing_lines_say_what_to_do(monkeypatch) -> None:
    missing = chromium_line(None)
    assert missing.state == NOTE and "apt-get install chromium" in missing.text
    assert chromium_line("/usr/bin/chromium").state == OK
    monkeypatch.setattr("ggml_viz.commands.doctor.cupti_candidates", lambda: ["/nowhere/libcupti.so"])
    assert "GGML_VIZ_CUPTI=PATH" in cupti_line().text
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    line = llama_cpp_python_line(needed=True)
    assert line.state == FIX and line.text.endswith("pip install 'ggml-viz[python]'")
