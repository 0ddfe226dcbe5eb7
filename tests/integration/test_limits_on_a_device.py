"""`ggml-viz limits` on a device other than the CPU, run here on ggml's RPC backend: a worker on
loopback is a GPU to ggml (its device type), computing with this machine's CPU at one thread. The
device's read bandwidth must be one this machine's memory can give: at most its CPU's own, measured
in the same process by ggml-viz's read kernel at one thread, with room for noise."""

from __future__ import annotations

import json
import subprocess
import sys

from .native import llama_cpp_lib_dir, missing
from .rpc_workers import REGISTER_WORKER, start_worker

MEASURE = (
    REGISTER_WORKER
    + """
import json, sys

register_worker(sys.argv[1])

from ggml_viz.capture import limits
from ggml_viz.capture.core import ggml_api

rows = [limits.cpu_memory_read(1, 256, 3, lambda _: None)]
for name, device in ggml_api.gpu_device_handles().items():
    with limits._backend(device) as backend:
        bench = limits._Bench(backend, name, None, 3, limits.GPU_NODES, lambda _: None, ["Q4_0"])
        rows += [bench.memory_read(64), bench.matvec("Q4_0", 64)]
print(json.dumps([{"device": r.device, "what": r.what, "gb_per_s": r.gb_per_s} for r in rows]))
"""
)


def test_a_devices_read_bandwidth_is_one_its_memory_can_give(tmp_path):
    if not (llama_cpp_lib_dir() / "libggml-rpc.so").exists():
        missing("llama-cpp-python has no libggml-rpc.so (make setup builds it with the RPC backend)")
    worker = start_worker(tmp_path, "worker", recorded=False)
    try:
        result = subprocess.run(
            [sys.executable, "-c", MEASURE, worker.endpoint], capture_output=True, text=True, timeout=600
        )
    finally:
        worker.stop()
    assert result.returncode == 0, result.stderr[-2000:]
    rows = {(row["device"], row["what"]): row["gb_per_s"] for row in json.loads(result.stdout)}
    cpu = rows[("CPU", "memory_read")]
    # the worker's device, measured by limits' device path (a GPU's), reads no faster than this
    # machine's memory at one thread (before its computes were timed to their end: 300,000 GB/s)
    assert 0 < rows[("RPC0", "memory_read")] < 2 * cpu
    assert 0 < rows[("RPC0", "matvec")] < 2 * cpu
