"""The runs of a join: which is the head and which a worker, each one's host and clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..._errors import GgmlVizError
from ...runformat.reader import Run
from .clocks import ClockOffset
from .connections import rpc_connections


@dataclass
class Member:
    run: Run
    role: str  # head | worker
    host: str  # the head: its machine's name; a worker: the address it serves on
    pid: int | None
    clock: ClockOffset | None = None
    connections: dict[int, int] = field(default_factory=dict)  # worker's connection -> head's

    @property
    def offset(self) -> int:
        return self.clock.offset_ns if self.clock else 0


def _role(run: Run) -> str:
    roles = {connection.get("role") for connection in rpc_connections(run)}
    if "head" in roles:
        return "head"
    if "worker" in roles:
        return "worker"
    raise GgmlVizError(
        f"{run.path} holds no connection of ggml's RPC protocol: record the head and each worker with "
        "`ggml-viz run` (the worker: `ggml-viz run -o worker.ggmlviz -- ggml-rpc-server ...`)"
    )


def member_of(run: Run) -> Member:
    """The run as a member of a join: its role and host (its clock and connections are set by the join)."""
    role = _role(run)
    program = run.manifest.get("program") or {}
    if role == "worker":
        served = sorted({c["local"] for c in rpc_connections(run) if c.get("role") == "worker"})
        host = ", ".join(served)
    else:
        host = (run.manifest.get("recorder") or {}).get("host") or "head"
    return Member(run, role, host, program.get("pid"))
