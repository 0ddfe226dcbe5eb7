"""A Python program's llama contexts on a GPU (llama-cpp-python built with CUDA, Vulkan, ...).

Such a context gets no eval callback (with one, ggml-cuda gives up its CUDA graphs and
synchronizes after every split): the C extension reads each graph at the scheduler's
compute call instead, redirecting libllama's call of it, and on CUDA and Vulkan the GPU
timer traces windows of computes (with CUPTI; with ggml-viz's Vulkan layer, which must be
in the process before llama.cpp creates its Vulkan instance: `ggml-viz run` puts it there,
and so does recording begun before the model loads), as the preload library does in a
native program. The layers such a context keeps on the CPU are timed node by node, as on a
CPU: our abort callback on its CPU backend ticks, and each split the scheduler computes says
where the CPU's ticks end (GpuReading.cpu_ticks); an RPC server's devices count as GPUs here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...log import say_once
from ..contract.constants import GPU_TRACE_EVERY, GPU_TRACE_OFF, GPU_TRACE_WINDOWS
from ..core import ggml_api
from ..core.extension import extension
from ..settings import CaptureSettings

_hooked: int | None = None  # GOT slots redirected to the graph reader (once per process)
CUDA, VULKAN = 1, 2  # gpu_timer.h's GPU_DEVICE_*


@dataclass(frozen=True)
class GpuReading:
    """How a context's graphs are recorded: read at the compute call; timed on CUDA (CUPTI)
    and Vulkan (the layer): `timed_device` 1 CUDA, 2 Vulkan, 0 none (gpu_timer.h's GPU_DEVICE_*).
    `cpu_ticks`: the splits computed on the CPU beside a GPU or RPC device are timed node by node
    by the CPU backend's ticks (our abort callback), as the preload library times a native program's."""

    timed_device: int
    cpu_ticks: bool = False


def gpu_reading(settings: CaptureSettings) -> GpuReading | None:
    """A context's GPU reading, if its graphs should be read at the compute call: a GPU
    device (or GGML_VIZ_READ_GRAPHS=compute), the C recorder, and no node that must be
    answered (inline timing, no values or captures). None: the eval callback, as on a CPU.
    ggml's GPU devices include an RPC server's (ggml-rpc gives its devices the GPU type): a program
    registers them before it loads its model, so before its first context asks here."""
    if extension is None or settings.timing != "inline" or settings.values.wanted:
        return None
    devices = ggml_api.gpu_devices()
    if not devices and os.environ.get("GGML_VIZ_READ_GRAPHS") != "compute":
        return None
    if not _hook_graph_compute():
        say_once(
            "cannot reach llama.cpp's graph compute call (a static build?): GPU graphs are recorded with the "
            "eval callback, which costs a GPU its CUDA graphs"
        )
        return None
    timed_device = timed_device_of(devices)
    # nodes timed (not graph detail; sync timing never reads at the compute call), and a device beside the
    # CPU: GGML_VIZ_READ_GRAPHS=compute on a CPU build keeps graph times, as a native program's do
    cpu_ticks = bool(devices) and settings.detail != "graph"
    if devices and not timed_device:
        on_cpu = "; its nodes computed on the CPU are timed here" if cpu_ticks else ""
        if all(device.startswith("RPC") for device in devices):
            say_once(
                f"this program computes on {', '.join(devices)}: its nodes there are timed where they run (record "
                f"the worker with `ggml-viz run -- ggml-rpc-server ...`), here they keep graph times{on_cpu}"
            )
        else:
            say_once(
                f"this program computes on {', '.join(devices)}: ggml-viz times GPU nodes on CUDA (with CUPTI) "
                f"and Vulkan (with its layer) only; its nodes there keep graph times{on_cpu}"
            )
    return GpuReading(timed_device=timed_device, cpu_ticks=cpu_ticks)


def timed_device_of(devices: Iterable[str]) -> int:
    """The device kind the GPU timer times among ggml's GPU devices (the first CUDA or Vulkan one)."""
    for device in devices:
        if device.startswith("CUDA"):
            return CUDA
        if device.startswith("Vulkan"):
            return VULKAN
    return 0


def configure_gpu_timer(settings: CaptureSettings) -> None:
    """The GPU timer's settings, as the preload library reads them from the environment."""
    if extension is None:
        return
    modes = {"off": GPU_TRACE_OFF, "windows": GPU_TRACE_WINDOWS, "every": GPU_TRACE_EVERY}
    mode = modes["off" if settings.detail == "graph" else settings.gpu]
    detach = os.environ.get("GGML_VIZ_GPU_DETACH", "1").strip().lower() not in ("0", "false", "no", "off")
    extension.configure_gpu(
        mode, settings.gpu_window, settings.gpu_period, detach, os.environ.get("GGML_VIZ_CUPTI") or None
    )


def begin_call(recorder_address: int, context_id: int, gpu: GpuReading) -> None:
    """A llama_decode of this context begins on this thread: its graphs go to that recorder."""
    extension.gpu_begin_call(recorder_address, context_id, gpu.timed_device)


def end_call() -> bool:
    """The call ended: whether a GPU trace window closed with it (take_window takes it)."""
    return bool(extension.gpu_end_call())


def finish() -> bool:
    """The recording ends: the window open, if any, closes (whether one waits)."""
    return bool(extension is not None and extension.gpu_finish())


def take_window() -> bytes | None:
    """A closed window's records (as the spool's GPU frame holds them), or None."""
    return extension.gpu_take() if extension is not None else None


def timer_state() -> dict[str, Any]:
    """What the GPU timer used, or why it timed nothing (for the run's manifest)."""
    path, version, own_clock, problem, timer, layer = extension.gpu_state()
    return {
        "timer": timer,
        "vulkan_layer": layer,
        "cupti": path,
        "cupti_version": version,
        "clock": "recorder" if own_clock else "offset",
        "problem": problem,
    }


def _hook_graph_compute() -> bool:
    global _hooked
    if _hooked is None:
        lib = ggml_api.libggml()
        _hooked = extension.hook_graph_compute(
            ggml_api.address_of(lib.ggml_graph_n_nodes),
            ggml_api.address_of(lib.ggml_graph_node),
            ggml_api.field_bytes("buffer").start,
            ggml_api.field_bytes("data").start,
            ggml_api.address_of(lib.ggml_backend_sched_synchronize),
            ggml_api.address_of(lib.ggml_backend_sched_set_eval_callback),
        )
    return bool(_hooked and _hooked > 0)
