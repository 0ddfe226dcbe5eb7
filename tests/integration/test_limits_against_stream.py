"""`ggml-viz limits`' memory read bandwidth, checked against an independent STREAM-like read kernel
(tests/native/stream_read.c: plain C with OpenMP, no ggml), built and run on the same machine.

The machine the tests run on may be shared: each side is measured a few times, the two
interleaved (C, ggml, C, ggml, ...), and the best of each compared, as STREAM takes its best run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ggml_viz.capture.limits import measure

SOURCE = Path(__file__).parent.parent / "native" / "stream_read.c"
SIZE_MIB = 512  # per array: far larger than the last-level cache (32 MiB where this was written)
ROUNDS = 3
TOLERANCE = 0.15
# 2 threads only where they leave cores to spare: on a 2-core machine shared with other jobs both
# sides' best of 3 rounds at 2 threads moved between 21 and 26 GB/s from one run to the next
# (C 21.0-24.3, ggml 21.1-25.8; once ggml 25.8 against C 21.0): a thread descheduled stalls the
# whole parallel loop, in either program. At 1 thread they stayed within 10% of each other.
THREADS = (1, 2) if (os.cpu_count() or 1) >= 4 else (1,)


def build_stream(folder: Path) -> Path:
    """stream_read.c built with gcc -O3 -march=native -fopenmp; skips without gcc or OpenMP."""
    compiler = shutil.which("gcc")
    if compiler is None:
        pytest.skip("no gcc to build the STREAM-like read benchmark")
    program = folder / "stream_read"
    built = subprocess.run([compiler, "-O3", "-march=native", "-fopenmp", "-o", str(program), str(SOURCE)],
                           capture_output=True, text=True)  # fmt: skip
    if built.returncode != 0:
        pytest.skip(f"gcc could not build with OpenMP (-fopenmp): {built.stderr.strip()[-300:]}")
    return program


def stream_read_gb_per_s(program: Path, threads: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_PROC_BIND": "false"}
    result = subprocess.run([str(program), str(SIZE_MIB), "10"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    found = re.search(r"read_gb_per_s=([\d.]+) threads=(\d+)", result.stdout)
    assert found is not None, result.stdout
    assert int(found.group(2)) == threads
    return float(found.group(1))


def ggml_memory_read_gb_per_s(threads: list[int]) -> dict[int, float]:
    limits = measure(threads, ["F32"], size_mib=SIZE_MIB, repeats=5, gpus=False)
    return {row["threads"]: row["gb_per_s"] for row in limits["measurements"] if row["what"] == "memory_read"}


@pytest.fixture(scope="module")
def best_of_both(tmp_path_factory) -> dict[str, dict[int, float]]:
    """The best read bandwidth of each side at each of THREADS, over interleaved rounds."""
    program = build_stream(tmp_path_factory.mktemp("stream"))
    best: dict[str, dict[int, float]] = {"c": dict.fromkeys(THREADS, 0.0), "ggml": dict.fromkeys(THREADS, 0.0)}
    for _ in range(ROUNDS):
        for threads in THREADS:
            best["c"][threads] = max(best["c"][threads], stream_read_gb_per_s(program, threads))
        for threads, gb_per_s in ggml_memory_read_gb_per_s(list(THREADS)).items():
            best["ggml"][threads] = max(best["ggml"][threads], gb_per_s)
    print(f"best read GB/s: C {best['c']}, ggml {best['ggml']}")
    return best


def test_memory_read_at_one_thread_agrees_with_a_stream_read_kernel(best_of_both):
    # GIVEN a plain C read kernel (OpenMP, SIMD, 8 bytes per double) over a 512 MiB array, at 1 thread
    c = best_of_both["c"][1]
    # WHEN ggml-viz measures the memory's read bandwidth through ggml's own F32 matrix-vector kernel
    ggml = best_of_both["ggml"][1]
    # THEN the two agree within 15%: ggml's kernel reads the memory as fast as plain C does
    assert c > 1.0 and ggml > 1.0, (c, ggml)
    assert abs(ggml - c) <= TOLERANCE * c, f"ggml {ggml:.2f} GB/s against C {c:.2f} GB/s at 1 thread"


@pytest.mark.skipif(2 not in THREADS, reason="fewer than 4 CPU cores: 2 threads leave none to spare (see THREADS)")
def test_memory_read_at_two_threads_agrees_with_a_stream_read_kernel(best_of_both):
    # GIVEN the same C read kernel at 2 threads, on a machine with cores to spare
    c = best_of_both["c"][2]
    # WHEN ggml-viz measures through ggml's kernel at 2 threads
    ggml = best_of_both["ggml"][2]
    # THEN they agree within 15%, and both read faster than at 1 thread
    assert abs(ggml - c) <= TOLERANCE * c, f"ggml {ggml:.2f} GB/s against C {c:.2f} GB/s at 2 threads"
    assert ggml > best_of_both["ggml"][1] and c > best_of_both["c"][1]


@pytest.mark.skipif(shutil.which("sysbench") is None, reason="sysbench is not installed")
def test_memory_read_is_no_slower_than_sysbench_s_sequential_read(best_of_both):
    # GIVEN sysbench's sequential memory read at 1 thread, over blocks of 512 MiB
    result = subprocess.run(["sysbench", "memory", "--memory-oper=read", "--memory-access-mode=seq",
                             f"--memory-block-size={SIZE_MIB}M", f"--memory-total-size={20 * SIZE_MIB}M",
                             "--threads=1", "run"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    found = re.search(r"\(([\d.]+) MiB/sec\)", result.stdout)
    assert found is not None, result.stdout
    sysbench = float(found.group(1)) * 2**20 / 1e9
    # WHEN ggml-viz's measurement is set beside it
    ggml = best_of_both["ggml"][1]
    # THEN ggml's kernel reads at least as fast, within 15% (sysbench reads words in a plain loop:
    # no faster than the memory allows; not compared above it, as its loop may not reach the memory's limit)
    assert ggml >= (1 - TOLERANCE) * sysbench, (ggml, sysbench)
