"""The GPU timer's C side (capture/gpu/) on a machine without a GPU: driven by a small
program as a CUDA program drives it, against a stand-in libcupti (tests/native/fake_cupti.c)
whose records are laid out as CUPTI's; its declarations of CUPTI compared with the CUDA
toolkit's headers; CUPTI records the test builds turned into ggml-viz's."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ggml_viz.capture.gpu.attribution import AttributionState, attribute
from ggml_viz.capture.gpu.records import ACTIVITY_DTYPE, API_DTYPE, GpuWindow, parse_window

NATIVE_TESTS = Path(__file__).parents[1] / "native"
CAPTURE = Path(__file__).parents[2] / "src" / "ggml_viz" / "capture"
CORE = ["core/recorder.c", "core/got_hook.c", "gpu/cupti_activity.c", "gpu/gpu_tracer.c"]


def _compiler() -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    return compiler


@pytest.fixture(scope="module")
def timer_program(tmp_path_factory) -> tuple[Path, Path]:
    """The program and the stand-in libcupti, built once."""
    folder = tmp_path_factory.mktemp("gpu-timer")
    compiler = _compiler()
    fake = folder / "libfake_cupti.so"
    subprocess.run(
        [compiler, "-O1", "-shared", "-fPIC", "-o", str(fake), str(NATIVE_TESTS / "fake_cupti.c")], check=True
    )
    program = folder / "gpu_timer_program"
    subprocess.run([compiler, "-O1", "-std=c11", "-D_GNU_SOURCE", f"-I{CAPTURE}", "-o", str(program),
                    str(NATIVE_TESTS / "gpu_timer_program.c"), *(str(CAPTURE / c) for c in CORE), "-ldl",
                    "-lpthread", "-lm"], check=True)  # fmt: skip
    return program, fake


def run_timer(timer_program, tmp_path: Path, mode: str, computes: int, cupti: str | None = None,
              **env: str) -> tuple[str, list[GpuWindow]]:  # fmt: skip
    program, fake = timer_program
    out = tmp_path / f"{mode}.windows"
    command = [str(program), str(fake), str(out), mode, str(computes), cupti or str(fake)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ, **env}, check=True)
    data, windows, position = out.read_bytes(), [], 0
    while position < len(data):
        (size,) = struct.unpack_from("<Q", data, position)
        windows.append(parse_window(data[position + 8 : position + 8 + size]))
        position += 8 + size
    return result.stdout, windows


def test_windows_open_for_a_new_structure_and_then_periodically(timer_program, tmp_path):
    # GIVEN windows of 2 computes every 6 computes, a graph new at compute 0
    stdout, windows = run_timer(timer_program, tmp_path, "windows", 20)
    traced, counts = stdout.splitlines()
    # THEN its first two computes are traced (eager, then captured), then 2 after each 6 untraced
    assert traced == "11000000110000001100"
    assert [w.reason for w in windows] == ["new structure", "periodic", "periodic"]
    assert [w.computes["compute"].tolist() for w in windows] == [[0, 1], [8, 9], [16, 17]]
    # ... and CUPTI is attached for each window (4 record kinds on) and detached after it
    assert counts == "enables 12 finalizes 3 problem none"
    assert all(w.overhead_ns > 0 for w in windows)


def test_every_kernel_of_a_window_finds_its_node(timer_program, tmp_path):
    _, windows = run_timer(timer_program, tmp_path, "windows", 20)
    state = AttributionState()
    mapped = [attribute(w, np.zeros(len(w.computes), dtype=np.int64), state) for w in windows]
    # eager, then the CUDA graph captured; later windows replay it by position
    assert [m.mapping.tolist() for m in mapped] == [["eager", "capture"], ["replay", "replay"], ["replay", "replay"]]
    first = windows[0]
    eager = (first.activities["graph_id"] == 0) & (first.activities["bytes"] != 4096)
    # node 1 launched two kernels, node 2 copied, node 3 is a view (reached, no kernel), nodes 4
    # and 5 ran fused
    assert mapped[0].node[eager].tolist() == [0, 1, 1, 2, 4]
    assert mapped[0].group_end[eager].tolist() == [0, 1, 1, 2, 5]
    assert first.activities["kind"][eager].tolist() == [1, 1, 1, 2, 1]
    kernels = first.activities["name_id"][eager & (first.activities["kind"] == 1)]
    assert [first.names[i] for i in kernels] == [
        "_Z8rms_normPKf", "_Z13quantize_q8_1PKf", "_Z13mul_mat_vec_qPKv", "_Z9fused_addPKf",
    ]  # fmt: skip
    names = {i: name for w in windows for i, name in w.names.items()}
    for window, m in zip(windows, mapped, strict=True):
        # the split's input copy is no node's; the rest is each its node's
        inputs = window.activities["bytes"] == 4096
        assert (m.node[inputs] == -1).all() and (m.node[~inputs] >= 0).all()
        # in the CUDA graph the copy ran as a kernel of the driver's, and is node 2's
        driver_copy = np.array([names.get(i) == "memcpy32_post" for i in window.activities["name_id"].tolist()])
        assert driver_copy.sum() == 2 * (window is not first) + (window is first) and (m.node[driver_copy] == 2).all()
        # what ran on the GPU lies within the host's view of its compute, on one clock
        assert (window.activities["start_ns"] >= window.computes["start_ns"].min()).all()


def test_every_graph_traced_hands_over_every_period(timer_program, tmp_path):
    stdout, windows = run_timer(timer_program, tmp_path, "every", 14)
    traced, counts = stdout.splitlines()
    assert traced == "1" * 14
    assert [len(w.computes) for w in windows] == [6, 6, 2]  # handed over every 6 computes, the rest at the end
    assert counts.startswith("enables 4 finalizes 1 ")  # attached once, detached at the end


def test_cupti_on_its_own_clock_is_brought_to_the_recorders(timer_program, tmp_path):
    # GIVEN a CUPTI that refuses the recorder's clock and stamps records a second ahead
    _, windows = run_timer(timer_program, tmp_path, "windows", 4, FAKE_CUPTI_OWN_CLOCK="1")
    window = windows[0]
    # THEN the offset is measured, said, and taken off every record
    assert abs(window.clock_offset_ns - 1_000_000_000) <= max(window.clock_uncertainty_ns, 1000)
    lag = window.activities["start_ns"] - window.computes["start_ns"].min()
    assert (lag >= 0).all() and (lag < 1_000_000_000 // 2).all()


def test_no_usable_cupti_leaves_graph_times_and_one_reason(timer_program, tmp_path):
    # GIVEN a CUPTI path that loads nothing usable (here: a file that is no library; the
    # toolkit's real libcupti, found next, cannot attach without a GPU)
    bogus = tmp_path / "libcupti.so"
    bogus.write_text("not a library")
    stdout, windows = run_timer(timer_program, tmp_path, "windows", 6, cupti=str(bogus), CUDA_HOME=str(tmp_path))
    traced, counts = stdout.splitlines()
    # THEN nothing is traced, the program ran to its end, and the timer says why
    assert traced == "000000" and windows == []
    assert "problem none" not in counts and ("CUPTI" in counts or "libcupti" in counts)


def test_cupti_declarations_match_the_cuda_toolkit(tmp_path):
    include = _toolkit_include()
    if include is None:
        pytest.skip("no CUDA toolkit headers (cupti.h) on this machine")
    result = subprocess.run([_compiler(), "-fsyntax-only", "-std=c11", f"-I{include}", f"-I{CAPTURE}",
                             str(NATIVE_TESTS / "cupti_abi_check.c")], capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr


def _toolkit_include() -> Path | None:
    nvcc = shutil.which("nvcc")
    homes = [os.environ.get("CUDA_HOME"), str(Path(nvcc).resolve().parents[1]) if nvcc else None, "/usr/local/cuda"]
    for home in filter(None, homes):
        if (Path(home) / "include" / "cupti.h").exists():
            return Path(home) / "include"
    return None


def _kernel_record(name: bytes, start: int, end: int, correlation: int, graph_id: int = 0) -> tuple[bytes, bytes]:
    record = bytearray(216)
    struct.pack_into("<I", record, 0, 10)  # CONCURRENT_KERNEL
    struct.pack_into("<QQ", record, 16, start, end)
    struct.pack_into("<I", record, 40, 0)
    struct.pack_into("<I", record, 48, 13)
    struct.pack_into("<I", record, 92, correlation)
    text = name + b"\0"
    import ctypes

    buffer = ctypes.create_string_buffer(text)
    struct.pack_into("<Q", record, 104, ctypes.addressof(buffer))
    struct.pack_into("<Q", record, 144, 5)
    struct.pack_into("<I", record, 156, graph_id)
    _kept.append(buffer)
    return bytes(record), text


_kept: list = []  # the names' buffers, alive while the records point at them


def test_the_record_layouts_are_the_c_sides():
    extension = pytest.importorskip("ggml_viz.capture.core._recorder")
    from ggml_viz.capture.gpu.records import COMPUTE_DTYPE, NODE_CALL_DTYPE

    assert (COMPUTE_DTYPE.itemsize, NODE_CALL_DTYPE.itemsize, API_DTYPE.itemsize, ACTIVITY_DTYPE.itemsize) == (
        extension.GPU_COMPUTE_RECORD_SIZE, extension.GPU_NODE_CALL_SIZE, extension.GPU_API_RECORD_SIZE,
        extension.GPU_ACTIVITY_RECORD_SIZE,
    )  # fmt: skip


def test_cupti_records_become_ggml_vizs():
    extension = pytest.importorskip("ggml_viz.capture.core._recorder")
    # GIVEN a kernel, a runtime API call, a memcpy, a record of another kind, and a kernel never completed
    kernel, _ = _kernel_record(b"_Z13quantize_q8_1PKf", 1_000, 1_500, 42, graph_id=3)
    api = bytearray(40)
    struct.pack_into("<II", api, 0, 5, 211)
    struct.pack_into("<QQ", api, 8, 900, 950)
    struct.pack_into("<II", api, 28, 77, 42)
    copy = bytearray(96)
    struct.pack_into("<IB", copy, 0, 1, 2)  # MEMCPY, device to host
    struct.pack_into("<QQQ", copy, 8, 4096, 2_000, 2_300)
    struct.pack_into("<I", copy, 44, 43)
    other = struct.pack("<I", 4) + bytes(60)  # DRIVER: not kept
    unfinished, _ = _kernel_record(b"_Z13quantize_q8_1PKf", 0, 0, 44)
    # WHEN converted as CUPTI's buffers are, CUPTI's clock 100 ns ahead of the recorder's
    activities, calls, lengths, names, invalid = extension.convert_cupti_records(
        [kernel, bytes(api), bytes(copy), other, unfinished], 100
    )
    activities = np.frombuffer(activities, ACTIVITY_DTYPE)
    calls = np.frombuffer(calls, API_DTYPE)
    # THEN each kept record holds its fields, on the recorder's clock; the name stored once
    assert activities[["start_ns", "end_ns", "correlation_id", "graph_id", "stream", "kind"]].tolist() == [
        (900, 1400, 42, 3, 13, 1), (1900, 2200, 43, 0, 0, 2)]  # fmt: skip
    assert activities["bytes"].tolist() == [0, 4096] and activities["copy_kind"].tolist() == [0, 2]
    assert calls[["start_ns", "end_ns", "correlation_id", "cbid", "thread"]].tolist() == [(800, 850, 42, 211, 77)]
    assert invalid == 1
    assert np.frombuffer(lengths, np.uint32).tolist() in ([], [len(b"_Z13quantize_q8_1PKf")])
    assert names in (b"", b"_Z13quantize_q8_1PKf")
