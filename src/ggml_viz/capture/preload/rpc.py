"""ggml's RPC protocol as the preload library saw it pass (preload_wire.c).

llama.cpp's distributed inference runs `rpc-server` on each worker and `--rpc host:port` on the
head. The preload library follows each connection whose first request is HELLO and records every
message whole; the collector writes them into the run's `rpc_messages` table and the
connections into the manifest's `rpc` section. `ggml-viz join` (analysis/join/) joins a
head's run and its workers' runs on them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..contract.constants import RPC_COMMAND_NAMES
from ..contract.records import WIRE

COMMANDS = RPC_COMMAND_NAMES  # ggml-rpc.cpp's commands (protocol 7), by number: the contract's

WIRE_DTYPE = WIRE.dtype  # one message, as the preload library records it (the contract's WireRecord)


def command_name(number: int) -> str:
    return COMMANDS[number] if 0 <= number < len(COMMANDS) else f"COMMAND_{number}"


def message_columns(payload: bytes, connection_ids: dict[int, int]) -> dict[str, Any]:
    """A SPOOL_WIRE frame's messages as the rpc_messages table's columns. `connection_ids`: the
    process's connection numbers as the run's (a run may hold several processes)."""
    records = np.frombuffer(payload, WIRE_DTYPE, count=len(payload) // WIRE_DTYPE.itemsize)
    names = {number: command_name(number) for number in np.unique(records["command"]).tolist()}
    return {
        "connection": np.array([connection_ids.get(c, c) for c in records["connection"].tolist()], dtype=np.int32),
        "sequence": records["sequence"].astype(np.int64),
        "command": [names[c] for c in records["command"].tolist()],
        "is_response": records["is_response"].astype(bool),
        "sent": records["sent"].astype(bool),
        "start_ns": records["start_ns"],
        "end_ns": records["end_ns"],
        "bytes": records["bytes"].astype(np.int64),
        "data_bytes": records["data_bytes"].astype(np.int64),
        "tensor_id": records["tensor_id"].astype(np.int64),
        "tensor_name": [name.decode("utf-8", "replace") for name in records["name"].tolist()],
    }
