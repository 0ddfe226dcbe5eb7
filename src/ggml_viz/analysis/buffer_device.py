"""Which device a backend buffer's memory belongs to, from the buffer's name: one answer for every
analysis (the devices side by side, the roofline, placements).

ggml names a buffer by its backend's buffer type: a device's own (CPU, CUDA0, Vulkan0,
RPC0[host:port]), or a device or backend and a kind after an underscore. CPU_Mapped and
CPU_REPACK are the CPU's; CUDA_Host and CUDA0_Host are pinned host memory a GPU backend hands out,
where the CPU computes and from which the GPU copies: the CPU's too; any other kind is the
device's before the underscore (CUDA0_Split: CUDA0's; CUDA_Split, over a backend's GPUs: CUDA's)."""

from __future__ import annotations

import re

CPU = "CPU"
_KIND = re.compile(r"([A-Za-z]+\d*)_(\w+)")  # (an RPC worker's name, RPC0[host:port], has none)


def device_of_buffer(name: object) -> str | None:
    """The device a node's output buffer belongs to (None: none known)."""
    if not isinstance(name, str) or not name:
        return None
    kind = _KIND.fullmatch(name)
    if kind is None:
        return name
    device, what = kind.groups()
    return CPU if device == CPU or what.lower() == "host" else device
