"""What recording a program that finds ggml with dlsym costs (ctypes, cffi, plugins): the preload
library interposes dlsym and hands back an entry point of its own for the few ggml functions it
records through. Measured in fresh Python processes, alternating, paired in one run:

1. a lookup: `ctypes.CDLL(...)[name]` calls dlsym each time; the time per lookup of a function
   ggml-viz wraps (ggml_graph_compute_with_ctx) and of one it does not (ggml_add), with the preload
   library in the process (recording on) and without it. Every dlsym of the process passes
   through the preload's: the unwrapped name's ratio is what every other library's lookups pay.
2. a call: a small graph (a 256x256 matrix times a vector, then an add) computed with
   ggml_graph_compute_with_ctx through ctypes, untraced and under `ggml-viz run` (every graph
   recorded, its nodes timed by ticks): the time per compute.

Prints the median time of each and the ratios (preload/without; above 1: slower with ggml-viz).

    python benchmarks/dlsym_lookup.py                # 7 rounds
    python benchmarks/dlsym_lookup.py --rounds 11
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ggml_viz.capture.preload.library import preload_path

LOOKUPS = 200_000
COMPUTES = 2_000

# The child (argv: llama-cpp-python's lib folder, lookups, computes): times the lookups of each
# name, then the computes; prints the three times per item, in ns.
CHILD = r"""
import ctypes, sys, time
lib_dir, lookups, computes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base = ctypes.CDLL(lib_dir + "/libggml-base.so")
cpu = ctypes.CDLL(lib_dir + "/libggml-cpu.so")
def per_lookup(library, name):
    start = time.perf_counter_ns()
    for _ in range(lookups):
        library[name]
    return (time.perf_counter_ns() - start) / lookups
wrapped = per_lookup(cpu, "ggml_graph_compute_with_ctx")
plain = per_lookup(base, "ggml_add")
class Params(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]
p, i64 = ctypes.c_void_p, ctypes.c_int64
for name, restype, argtypes in [
    ("ggml_init", p, [Params]), ("ggml_new_tensor_2d", p, [p, ctypes.c_int, i64, i64]),
    ("ggml_mul_mat", p, [p, p, p]), ("ggml_add", p, [p, p, p]), ("ggml_new_graph", p, [p]),
    ("ggml_build_forward_expand", None, [p, p]),
]:
    getattr(base, name).restype, getattr(base, name).argtypes = restype, argtypes
cpu.ggml_graph_compute_with_ctx.argtypes = [p, p, ctypes.c_int]
ctx = base.ggml_init(Params(64 << 20, None, False))
weight = base.ggml_new_tensor_2d(ctx, 0, 256, 256)
vector = base.ggml_new_tensor_2d(ctx, 0, 256, 1)
graph = base.ggml_new_graph(ctx)
base.ggml_build_forward_expand(graph, base.ggml_add(ctx, base.ggml_mul_mat(ctx, weight, vector), vector))
compute = cpu.ggml_graph_compute_with_ctx
compute(ctx, graph, 1)
start = time.perf_counter_ns()
for _ in range(computes):
    compute(ctx, graph, 1)
print(wrapped, plain, (time.perf_counter_ns() - start) / computes)
"""


def measure(traced: bool, lib_dir: str, folder: Path) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_") and k != "LD_PRELOAD"}
    command = [sys.executable, "-c", CHILD, lib_dir, str(LOOKUPS), str(COMPUTES)]
    if traced:
        run = folder / "run.ggmlviz"
        command = [sys.executable, "-m", "ggml_viz", "run", "--force", "-o", str(run), "--", *command]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return [float(x) for x in result.stdout.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    import llama_cpp

    lib_dir = str(Path(llama_cpp.__file__).parent / "lib")
    if not preload_path().exists():
        sys.exit("the preload library is not built (pip install -e . builds it)")
    without: list[list[float]] = []
    traced: list[list[float]] = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.rounds):
            without.append(measure(False, lib_dir, Path(folder)))
            traced.append(measure(True, lib_dir, Path(folder)))
    print(f"{args.rounds} rounds; medians (preload/without)")
    for column, label in enumerate(["lookup, wrapped name", "lookup, other name", "compute (1 thread)"]):
        a = statistics.median(row[column] for row in without)
        b = statistics.median(row[column] for row in traced)
        ratios = statistics.median(t[column] / w[column] for w, t in zip(without, traced, strict=True))
        print(f"  {label:22} without {a:10.0f} ns   with ggml-viz {b:10.0f} ns   ratio {ratios:5.2f}")


if __name__ == "__main__":
    main()
