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

from ggml_viz.capture.c_header import write_header
from ggml_viz.capture.contract.constants import NODE_CALL_CPU, NODE_CALL_SPLIT, NODE_CALL_SPLIT_END
from ggml_viz.capture.gpu.attribution import AttributionState, attribute
from ggml_viz.capture.gpu.records import (
    ACTIVITY_DTYPE,
    API_DTYPE,
    COPY_CBIDS,
    DRIVER,
    GRAPH_LAUNCH_CBIDS,
    LAUNCH_CBIDS,
    RUNTIME,
    GpuWindow,
    parse_window,
    split_spans,
)

NATIVE_TESTS = Path(__file__).parents[1] / "native"
CAPTURE = Path(__file__).parents[2] / "src" / "ggml_viz" / "capture"
# The C the extension and the preload library build on (setup.py: CORE): util, the GPU timer, the recorder.
CORE = [
    path.relative_to(CAPTURE)
    for folder in ("util", "gpu", "core")
    for path in sorted((CAPTURE / folder).glob("*.c"))
    if not path.name.startswith(("vulkan_layer", "_recorder"))
]


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
    contract = write_header(folder).parent
    subprocess.run(
        [
            compiler,
            "-O1",
            "-std=c11",
            "-D_GNU_SOURCE",
            f"-I{CAPTURE}",
            f"-I{contract}",
            "-o",
            str(program),
            str(NATIVE_TESTS / "gpu_timer_program.c"),
            *(str(CAPTURE / c) for c in CORE),
            "-ldl",
            "-lpthread",
            "-lm",
        ],
        check=True,
    )
    return program, fake


def run_timer(
    timer_program, tmp_path: Path, mode: str, computes: int, cupti: str | None = None, **env: str
) -> tuple[str, list[GpuWindow]]:
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
    traced, counts, kept = stdout.splitlines()
    # THEN its first two computes are traced (eager, then captured), then 2 after each 6 untraced
    assert traced == "11000000110000001100"
    assert [w.reason for w in windows] == ["new structure", "periodic", "periodic"]
    assert [w.computes["compute"].tolist() for w in windows] == [[0, 1], [8, 9], [16, 17]]
    # ... and CUPTI is attached for each window (5 record kinds on) and detached after it
    assert counts == "enables 15 finalizes 3 problem none"
    assert kept.startswith("kinds on 0, takes 3, at exit 0")
    assert all(w.overhead_ns > 0 for w in windows)


# windows: kernels launched through the runtime; driver: one launched by the driver alone
# (cuLaunchKernelEx), one runtime launch making a driver call of its own, CUDA graphs launched
# with cudaGraphLaunch_ptsz; splits: the scheduler's split markers among ggml-cuda's node calls
@pytest.mark.parametrize("mode", ["windows", "driver", "splits"])
def test_every_kernel_of_a_window_finds_its_node(timer_program, tmp_path, mode):
    _, windows = run_timer(timer_program, tmp_path, mode, 20)
    state = AttributionState()
    mapped = [attribute(w, np.zeros(len(w.computes), dtype=np.int64), state) for w in windows]
    # eager, then the CUDA graph captured; later windows replay it by position
    assert [m.mapping.tolist() for m in mapped] == [["eager", "capture"], ["replay", "replay"], ["replay", "replay"]]
    first = windows[0]
    scheduler_copies = np.isin(first.activities["bytes"], [4096, 2048])  # a split's inputs
    eager = (first.activities["graph_id"] == 0) & ~scheduler_copies
    # node 1 launched two kernels, node 2 copied, node 3 is a view (reached, no kernel), nodes 4
    # and 5 ran fused
    assert mapped[0].node[eager].tolist() == [0, 1, 1, 2, 4]
    assert mapped[0].group_end[eager].tolist() == [0, 1, 1, 2, 5]
    assert first.activities["kind"][eager].tolist() == [1, 1, 1, 2, 1]
    kernels = first.activities["name_id"][eager & (first.activities["kind"] == 1)]
    assert [first.names[i] for i in kernels] == [
        "_Z8rms_normPKf",
        "_Z13quantize_q8_1PKf",
        "_Z13mul_mat_vec_qPKv",
        "_Z9fused_addPKf",
    ]
    names = {i: name for w in windows for i, name in w.names.items()}
    for window, m in zip(windows, mapped, strict=True):
        # the splits' input copies are no node's; the rest is each its node's
        inputs = np.isin(window.activities["bytes"], [4096, 2048])
        assert (m.node[inputs] == -1).all() and (m.node[~inputs] >= 0).all()
        # with the splits marked, they are transfers, each with the split it feeds (the CUDA split
        # at node 0, the CPU split at node 5); and the rest ran in the CUDA split
        if mode == "splits":
            assert m.transfer[inputs].all() and not m.transfer[~inputs].any()
            assert m.split[window.activities["bytes"] == 4096].tolist() == [0, 0]
            assert m.split[window.activities["bytes"] == 2048].tolist() == [5, 5]
            assert (m.split[~inputs] == 0).all()
        else:
            assert not m.transfer.any() and (m.split == -1).all()
        # in the CUDA graph the copy ran as a kernel of the driver's, and is node 2's
        driver_copy = np.array([names.get(i) == "memcpy32_post" for i in window.activities["name_id"].tolist()])
        assert driver_copy.sum() == 2 * (window is not first) + (window is first) and (m.node[driver_copy] == 2).all()
        # what ran on the GPU lies within the host's view of its compute, on one clock
        assert (window.activities["start_ns"] >= window.computes["start_ns"].min()).all()


def test_a_kernel_launched_by_the_driver_alone_is_its_nodes(timer_program, tmp_path):
    # GIVEN node 1's second kernel launched by cuLaunchKernelEx alone (no runtime call), node 0's
    # cudaLaunchKernel making its own cuLaunchKernel under the same correlation id, and the CUDA
    # graph launched with cudaGraphLaunch_ptsz
    _, windows = run_timer(timer_program, tmp_path, "driver", 20)
    first = windows[0]
    calls, activities = first.api_calls, first.activities
    # THEN the driver's launch is kept, as the driver's, and its kernel finds node 1
    driver = calls[calls["domain"] == DRIVER]
    assert driver["cbid"].tolist() == [LAUNCH_CBIDS[DRIVER]["cuLaunchKernelEx"]] * 2  # eager, capture
    state = AttributionState()
    mapped = attribute(first, np.zeros(len(first.computes), dtype=np.int64), state)
    launched = np.isin(activities["correlation_id"], driver["correlation_id"]) & (activities["graph_id"] == 0)
    assert launched.sum() == 1 and mapped.node[launched].tolist() == [1]
    # AND a runtime launch's own driver call (cuLaunchKernel) is dropped: each correlation id has
    # one call, the runtime's
    assert len(np.unique(calls["correlation_id"])) == len(calls)
    node_0 = activities["correlation_id"][(activities["graph_id"] == 0) & (mapped.node == 0)]
    assert calls[np.isin(calls["correlation_id"], node_0)][["cbid", "domain"]].tolist() == [(211, RUNTIME)]
    # AND the replays launched with cudaGraphLaunch_ptsz map
    for window in windows[1:]:
        replays = attribute(window, np.zeros(len(window.computes), dtype=np.int64), state)
        assert replays.mapping.tolist() == ["replay", "replay"]
        assert set(window.api_calls["cbid"].tolist()) >= {GRAPH_LAUNCH_CBIDS[RUNTIME]["cudaGraphLaunch_ptsz_v10000"]}


def test_split_markers_say_where_each_split_began_and_ended(timer_program, tmp_path):
    # GIVEN a scheduler computing two splits in each traced compute: at node 0 on CUDA, at node 5 on the CPU
    _, windows = run_timer(timer_program, tmp_path, "splits", 20)
    end = NODE_CALL_SPLIT | NODE_CALL_SPLIT_END
    for window in windows:
        calls = window.node_calls
        markers = calls[calls["flags"] != 0]
        # THEN each compute's node calls hold where both began and returned, in order, from no
        # call site of ggml-cuda's
        for compute in window.computes["compute"].tolist():
            mine = markers[markers["compute"] == compute]
            assert mine[["node_index", "flags"]].tolist() == [
                (0, NODE_CALL_SPLIT),
                (0, end),
                (5, NODE_CALL_SPLIT | NODE_CALL_CPU),
                (5, end | NODE_CALL_CPU),
            ]
            assert (mine["return_address"] == 0).all()
        assert (calls["return_address"][calls["flags"] == 0] != 0).all()
        # AND they read as spans, each ending after it began and before the next begins
        spans = split_spans(calls)
        assert spans[["first_node", "on_cpu"]].tolist() == [(0, False), (5, True)] * len(window.computes)
        assert (spans["end_ns"] >= spans["start_ns"]).all()
        assert (spans["start_ns"][1::2] >= spans["end_ns"][0::2]).all()


def test_a_forked_child_has_no_gpu_timer_and_nothing_of_the_parents(timer_program, tmp_path):
    # GIVEN a program forking a child while its first window is open
    stdout, windows = run_timer(timer_program, tmp_path, "fork", 20)
    traced, counts, kept = stdout.splitlines()
    # THEN the child's timer was off and it held no record to hand over (its exit status: 0)
    assert kept.endswith("child 0")
    # AND the parent's windows are whole, as without the fork
    assert traced == "11000000110000001100" and counts == "enables 15 finalizes 3 problem none"
    assert [w.computes["compute"].tolist() for w in windows] == [[0, 1], [8, 9], [16, 17]]
    assert len(windows[0].activities) > 0


def test_every_graph_traced_hands_over_every_period(timer_program, tmp_path):
    stdout, windows = run_timer(timer_program, tmp_path, "every", 14)
    traced, counts, _ = stdout.splitlines()
    assert traced == "1" * 14
    assert [len(w.computes) for w in windows] == [6, 6, 2]  # handed over every 6 computes, the rest at the end
    assert counts.startswith("enables 5 finalizes 1 ")  # attached once, detached at the end


def test_a_graph_changing_structure_all_the_time_is_traced_within_the_cap(timer_program, tmp_path):
    # GIVEN the default policy (windows of 4 computes, every 256), a graph whose structure changes
    # every 2 computes, 5,000 computes in calls of 1 to 6
    stdout, windows = run_timer(timer_program, tmp_path, "churn", 5000)
    traced, _, kept = stdout.splitlines()
    # THEN about a tenth of the computes are traced: new structures open and extend windows
    # only within a tenth of all, plus a window (and the last call's computes)
    assert traced.count("1") <= 5000 // 10 + 2 * 4 + 5
    assert sum(len(w.computes) for w in windows) == traced.count("1")
    # AND the windows are handed over as they close, not held until the end
    takes, at_exit = (int(part.split()[-1]) for part in kept.split(", ")[1:3])
    assert takes == len(windows) > 50 and at_exit == 0
    assert max(len(w.computes) for w in windows) <= 64 + 5  # the bound on a take, and the rest of a call


def test_a_window_is_handed_over_once_it_holds_64_computes(timer_program, tmp_path):
    # GIVEN every compute traced, to be handed over every 100,000 computes, and 200 computes
    stdout, windows = run_timer(timer_program, tmp_path, "bound", 200)
    traced, counts, _ = stdout.splitlines()
    # THEN each take holds at most 64 computes, CUPTI staying attached between them
    assert traced == "1" * 200
    assert [len(w.computes) for w in windows] == [64, 64, 64, 8]
    assert counts.startswith("enables 5 finalizes 1 ")


@pytest.mark.parametrize("refusal", [{"FAKE_CUPTI_REFUSE_KIND": "2"}, {"FAKE_CUPTI_REFUSE_FINALIZE": "1"}])
def test_a_cupti_that_refuses_is_left_recording_nothing(timer_program, tmp_path, refusal):
    # GIVEN a CUPTI that refuses memset records after switching the other kinds on (an attach
    # half done), or refuses to detach after the first window (every kind still on)
    stdout, windows = run_timer(timer_program, tmp_path, "windows", 6, **refusal)
    traced, counts, kept = stdout.splitlines()
    # THEN the timer gives up with one reason, and every record kind it switched on is off again
    assert "problem CUPTI refused" in counts
    assert kept.startswith("kinds on 0,")
    # AND the program went on, untraced from then on
    assert traced == ("000000" if "FAKE_CUPTI_REFUSE_KIND" in refusal else "110000")
    assert len(windows) == (0 if "FAKE_CUPTI_REFUSE_KIND" in refusal else 1)


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
    traced, counts, _ = stdout.splitlines()
    # THEN nothing is traced, the program ran to its end, and the timer says why
    assert traced == "000000" and windows == []
    assert "problem none" not in counts and ("CUPTI" in counts or "libcupti" in counts)


def test_cupti_declarations_match_the_cuda_toolkit(tmp_path):
    include = _toolkit_include()
    if include is None:
        pytest.skip("no CUDA toolkit headers (cupti.h) on this machine")
    contract = write_header(tmp_path).parent
    result = subprocess.run(
        [
            _compiler(),
            "-fsyntax-only",
            "-std=c11",
            f"-I{include}",
            f"-I{CAPTURE}",
            f"-I{contract}",
            str(NATIVE_TESTS / "cupti_abi_check.c"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_callback_ids_match_the_cuda_toolkit(tmp_path):
    include = _toolkit_include()
    if include is None:
        pytest.skip("no CUDA toolkit headers (cupti.h) on this machine")
    prefixes = {RUNTIME: "CUPTI_RUNTIME_TRACE_CBID_", DRIVER: "CUPTI_DRIVER_TRACE_CBID_"}
    # CUPTI's domains only (the Vulkan layer's numbers: test_vulkan_layer.py)
    checks = [
        f'_Static_assert({prefixes[domain]}{name} == {cbid}, "{name}");'
        for table in (LAUNCH_CBIDS, COPY_CBIDS, GRAPH_LAUNCH_CBIDS)
        for domain, named in table.items()
        if domain in prefixes
        for name, cbid in named.items()
    ]
    source = tmp_path / "cbids.c"
    source.write_text("#include <cupti.h>\n" + "\n".join(checks) + "\n")
    result = subprocess.run(
        [_compiler(), "-fsyntax-only", "-std=c11", f"-I{include}", str(source)], capture_output=True, text=True
    )
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


def test_cupti_records_become_ggml_vizs():
    extension = pytest.importorskip("ggml_viz.capture.core._recorder")
    # GIVEN a kernel, a runtime and a driver API call, a memcpy, a record of another kind, and a
    # kernel never completed
    kernel, _ = _kernel_record(b"_Z13quantize_q8_1PKf", 1_000, 1_500, 42, graph_id=3)
    api = bytearray(40)
    struct.pack_into("<II", api, 0, 5, 211)
    struct.pack_into("<QQ", api, 8, 900, 950)
    struct.pack_into("<II", api, 28, 77, 42)
    driver = bytearray(40)
    struct.pack_into("<II", driver, 0, 4, 652)  # DRIVER, cuLaunchKernelEx
    struct.pack_into("<QQ", driver, 8, 1_000, 1_050)
    struct.pack_into("<II", driver, 28, 77, 45)
    copy = bytearray(96)
    struct.pack_into("<IB", copy, 0, 1, 2)  # MEMCPY, device to host
    struct.pack_into("<QQQ", copy, 8, 4096, 2_000, 2_300)
    struct.pack_into("<I", copy, 44, 43)
    other = struct.pack("<I", 6) + bytes(60)  # EVENT: not kept
    unfinished, _ = _kernel_record(b"_Z13quantize_q8_1PKf", 0, 0, 44)
    # WHEN converted as CUPTI's buffers are, CUPTI's clock 100 ns ahead of the recorder's
    activities, calls, lengths, names, invalid = extension.convert_cupti_records(
        [kernel, bytes(api), bytes(driver), bytes(copy), other, unfinished], 100
    )
    activities = np.frombuffer(activities, ACTIVITY_DTYPE)
    calls = np.frombuffer(calls, API_DTYPE)
    # THEN each kept record holds its fields, on the recorder's clock; the name stored once
    assert activities[["start_ns", "end_ns", "correlation_id", "graph_id", "stream", "kind"]].tolist() == [
        (900, 1400, 42, 3, 13, 1),
        (1900, 2200, 43, 0, 0, 2),
    ]
    assert activities["bytes"].tolist() == [0, 4096] and activities["copy_kind"].tolist() == [0, 2]
    assert calls[["start_ns", "end_ns", "correlation_id", "cbid", "thread", "domain"]].tolist() == [
        (800, 850, 42, 211, 77, RUNTIME),
        (900, 950, 45, 652, 77, DRIVER),
    ]
    assert invalid == 1
    assert np.frombuffer(lengths, np.uint32).tolist() in ([], [len(b"_Z13quantize_q8_1PKf")])
    assert names in (b"", b"_Z13quantize_q8_1PKf")
