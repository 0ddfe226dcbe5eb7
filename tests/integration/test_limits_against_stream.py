"""`ggml-viz limits`' memory read bandwidth (its own read kernel, capture/memory_read.c) checked
against independent readers run on the same machine:

- stream_read (tests/native/stream_read.c): a STREAM-like sum in plain C, OpenMP, built here with
  gcc -O3 -march=native (the compiler's own vectorization for this very CPU);
- likwid-bench's load_avx (Debian's likwid): hand-written assembly, AVX loads, where installed;
- sysbench's sequential memory read, where installed: a plain word loop, a floor only (its loop
  may not reach the memory's limit: 17.9 GB/s where the others read 21 on an AMD EPYC).

The truth is at least the fastest honest reader's rate (no reader reads memory faster than it can
be read), so ggml-viz's kernel must read within 15 % of the fastest of the first two, above or
below. The machine may be shared: each side is measured a few times, interleaved, and the best of
each compared, as STREAM takes its best run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ggml_viz.capture.limits import cpu_memory_read

SOURCE = Path(__file__).parent.parent / "native" / "stream_read.c"
SIZE_MIB = 512  # far larger than the last-level cache (32 MiB where this was written)
ROUNDS = 3
TOLERANCE = 0.15
# 2 threads only where they leave cores to spare: on a 2-core machine shared with other jobs, a
# thread descheduled stalls the whole pass, in any program (best of 3 moved between 21 and 26 GB/s).
THREADS = (1, 2) if (os.cpu_count() or 1) >= 4 else (1,)


def build_stream(folder: Path) -> Path:
    """stream_read.c built with gcc -O3 -march=native -fopenmp; skips without gcc or OpenMP."""
    compiler = shutil.which("gcc")
    if compiler is None:
        pytest.skip("no gcc to build the STREAM-like read benchmark")
    program = folder / "stream_read"
    built = subprocess.run(
        [compiler, "-O3", "-march=native", "-fopenmp", "-o", str(program), str(SOURCE)], capture_output=True, text=True
    )
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


def likwid_load_gb_per_s(threads: int) -> float | None:
    """likwid-bench's AVX load kernel over SIZE_MIB on the machine's first NUMA domain (its mean
    over the iterations it chose), or None where it is not installed or does not run here (an
    unknown CPU, no AVX)."""
    if shutil.which("likwid-bench") is None:
        return None
    result = subprocess.run(
        ["likwid-bench", "-t", "load_avx", "-w", f"N:{SIZE_MIB}MB:{threads}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r"^MByte/s:\s+([\d.]+)", result.stdout, re.MULTILINE)
    return float(found.group(1)) / 1e3 if result.returncode == 0 and found else None


def ggml_viz_gb_per_s(threads: int) -> float:
    measurement = cpu_memory_read(threads, SIZE_MIB, repeats=5, say=lambda _: None)
    assert measurement.note and "read kernel" in measurement.note, measurement.note
    assert measurement.gb_per_s is not None
    return measurement.gb_per_s


@pytest.fixture(scope="module")
def best_of_each(tmp_path_factory) -> dict[str, dict[int, float]]:
    """The best read bandwidth of each reader at each of THREADS, over interleaved rounds."""
    program = build_stream(tmp_path_factory.mktemp("stream"))
    best: dict[str, dict[int, float]] = {"c": {}, "likwid": {}, "ggml-viz": {}}
    for _ in range(ROUNDS):
        for threads in THREADS:
            rates = {
                "c": stream_read_gb_per_s(program, threads),
                "likwid": likwid_load_gb_per_s(threads),
                "ggml-viz": ggml_viz_gb_per_s(threads),
            }
            for reader, rate in rates.items():
                if rate is not None:
                    best[reader][threads] = max(best[reader].get(threads, 0.0), rate)
    print(f"best read GB/s: {best}")
    return best


def fastest_independent(best: dict[str, dict[int, float]], threads: int) -> tuple[str, float]:
    return max(
        ((reader, best[reader][threads]) for reader in ("c", "likwid") if threads in best[reader]),
        key=lambda pair: pair[1],
    )


def test_memory_read_at_one_thread_agrees_with_the_fastest_independent_reader(best_of_each):
    # GIVEN plain C (OpenMP, the compiler's SIMD for this CPU) and, where installed, likwid-bench's
    # assembly load kernel, each reading 512 MiB at 1 thread
    reader, independent = fastest_independent(best_of_each, 1)
    # WHEN ggml-viz measures the memory's read bandwidth with its own read kernel
    ours = best_of_each["ggml-viz"][1]
    # THEN it reads within 15% of the fastest of them
    assert independent > 1.0 and ours > 1.0, best_of_each
    assert abs(ours - independent) <= TOLERANCE * independent, (
        f"ggml-viz {ours:.2f} GB/s against {reader} {independent:.2f} GB/s at 1 thread: {best_of_each}"
    )


@pytest.mark.skipif(2 not in THREADS, reason="fewer than 4 CPU cores: 2 threads leave none to spare (see THREADS)")
def test_memory_read_at_two_threads_agrees_with_the_fastest_independent_reader(best_of_each):
    reader, independent = fastest_independent(best_of_each, 2)
    ours = best_of_each["ggml-viz"][2]
    assert abs(ours - independent) <= TOLERANCE * independent, (reader, independent, ours)
    assert ours > best_of_each["ggml-viz"][1]


@pytest.mark.skipif(shutil.which("sysbench") is None, reason="sysbench is not installed")
def test_memory_read_is_no_slower_than_sysbench_s_sequential_read(best_of_each):
    # GIVEN sysbench's sequential memory read at 1 thread, over blocks of 512 MiB
    result = subprocess.run(
        [
            "sysbench",
            "memory",
            "--memory-oper=read",
            "--memory-access-mode=seq",
            f"--memory-block-size={SIZE_MIB}M",
            f"--memory-total-size={20 * SIZE_MIB}M",
            "--threads=1",
            "run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found = re.search(r"\(([\d.]+) MiB/sec\)", result.stdout)
    assert found is not None, result.stdout
    sysbench = float(found.group(1)) * 2**20 / 1e9
    # WHEN ggml-viz's measurement is set beside it
    ours = best_of_each["ggml-viz"][1]
    # THEN ggml-viz's kernel reads at least as fast, within 15% (sysbench reads words in a plain
    # loop: no faster than the memory allows; not compared above it)
    assert ours >= (1 - TOLERANCE) * sysbench, (ours, sysbench)
