"""One experiment across hosts: a head's run joined with the runs of its RPC workers.

llama.cpp's distributed inference: `rpc-server` on each worker, `--rpc host:port` on the head,
whose scheduler sends each split of a graph that runs on a worker as a graph of its own
(GRAPH_COMPUTE, or GRAPH_RECOMPUTE when the worker still holds it), sets the split's inputs there
(SET_TENSOR) and reads its results back (GET_TENSOR). Recorded with `ggml-viz run`, each side
holds the protocol's messages as they passed it (`rpc_messages`, capture/preload/rpc.py), numbered on
their connection in the same order, and the worker holds each graph it computed, node by node.

The join:
- connections: a head's connection and a worker's are the same one when their addresses mirror
  each other (the head's local address is the worker's peer); where none does (addresses
  translated between the hosts), when their requests are the same commands of the same sizes;
- clocks: the hosts' clocks differ by an offset θ (worker = head + θ). Every message bounds it:
  a request reached the worker after the head began sending it (θ <= worker's first byte −
  head's send), a response reached the head after the worker began sending it (θ >= worker's
  send − head's first byte). The tightest bounds over every message are the interval θ lies in;
  the offset used is its middle, and its half width the uncertainty (as NTP bounds a clock,
  with every message of the run as a sample). Worker times are stated on the head's clock.
- splits: each graph a worker computed follows the GRAPH_(RE)COMPUTE request it received last;
  that request, found on the head by its number, lies in one of the head's graphs;
- nodes: the worker's graph is the head's split, node for node: its nodes are matched to the
  head graph's nodes of the same name, in order.

`write_joined()` writes the experiment as one run (runformat/merge.py: the members' contexts
side by side, a lane per host in the viewer, on the head's clock), the joined tables as Parquet
beside it and a `join.json` naming the member runs (which stay where they are); `ggml-viz query`
over the folder reads the joined tables with the member runs' own views.

The modules, each using only those above it: `clocks.py` (the offset), `connections.py` (which
connection is which, the paired messages), `members.py` (which run is the head, each one's host),
`tables.py` (hosts, splits, transfers), `remote_nodes.py`, `joined.py` (`join_runs`), `summary.py`
(`summarize_joined`), `folder.py` (the joined run on disk). Its one trace across hosts is an export
(export/joined_trace.py); its summary's tables on a terminal are rendered with the other renderers
(commands/render.py).
"""

from __future__ import annotations

from .clocks import ClockOffset, clock_offset
from .connections import match_connections, paired_messages
from .folder import JOIN_FILE, JOINED_TABLES, is_joined, joined_table, open_joined, write_joined
from .joined import Joined, join_runs
from .members import Member
from .remote_nodes import RemoteNodes
from .summary import JoinedSummary, summarize_joined

__all__ = [
    "JOINED_TABLES",
    "JOIN_FILE",
    "ClockOffset",
    "Joined",
    "Member",
    "RemoteNodes",
    "clock_offset",
    "is_joined",
    "join_runs",
    "match_connections",
    "joined_table",
    "open_joined",
    "paired_messages",
    "summarize_joined",
    "JoinedSummary",
    "write_joined",
]
