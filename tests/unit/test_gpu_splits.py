"""A graph split between a GPU and the CPU, as the GPU timer records it, mapped to its nodes.

The window is built here as ggml's scheduler and ggml-cuda make it for a partial offload: ten
nodes in three splits, nodes 0-3 on CUDA, 4-5 on the CPU, 6-9 on CUDA. Before each split the
scheduler copies its inputs (host to device before a CUDA split, device to host before the CPU's);
each split's compute call is marked where it began and returned. ggml-cuda reaches each node of
its splits (nodes 7 and 8 fused: 8 is never reached) and launches their work; node 3, the last
of its split, copies (a CPY as cudaMemcpyAsync), right where the scheduler's next copy follows.
The first compute runs eagerly, the second is captured (one CUDA graph per split, launched at the
end of the split), the others replay those graphs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from ggml_viz.capture.contract.constants import NODE_CALL_CPU, NODE_CALL_SPLIT, NODE_CALL_SPLIT_END
from ggml_viz.capture.gpu.attribution import AttributionState, attribute
from ggml_viz.capture.gpu.gpu_times import GpuTimes
from ggml_viz.capture.gpu.records import (
    ACTIVITY_DTYPE,
    API_DTYPE,
    COMPUTE_DTYPE,
    KERNEL,
    MEMCPY,
    NODE_CALL_DTYPE,
    GpuWindow,
    split_spans,
)

LOOP, CHECK, THREAD = 0x1000, 0x2000, 5
LAUNCH, COPY, GRAPH_LAUNCH = 211, 41, 311  # CUPTI's runtime callback ids
HTOD, DTOH, DTOD = 1, 2, 8
# (first node, last node, on the CPU, bytes of the inputs the scheduler copies first, their direction)
SPLITS = [(0, 3, False, 4096, HTOD), (4, 5, True, 2048, DTOH), (6, 9, False, 1024, HTOD)]
# per node on CUDA, its work: kernel names (or "copy"); nodes 8 fused into 7
WORK = {0: ["rms_norm"], 1: ["quantize", "mul_mat"], 2: ["rope"], 3: ["copy"], 6: ["mul_mat"], 7: ["fused_add"],
        9: ["soft_max"]}  # fmt: skip
NAMES = {"rms_norm": 1, "quantize": 2, "mul_mat": 3, "rope": 4, "fused_add": 5, "soft_max": 6, "memcpy32_post": 7}


@dataclass
class Recorder:
    """Builds one window's records, on one clock that only moves forward."""

    t: int = 1_000_000
    correlation: int = 100
    rows: dict[str, list[tuple]] = field(default_factory=lambda: defaultdict(list))

    def tick(self, ns: int = 1000) -> int:
        self.t += ns
        return self.t

    def api(self, cbid: int) -> int:
        self.correlation += 1
        start = self.tick()
        self.rows["api"].append((start, start + 300, self.correlation, cbid, THREAD, 0))
        return self.correlation

    def activity(self, correlation: int, kind: int, name: str = "", graph: int = 0, node: int = 0, **copy: int) -> None:
        start = self.tick(50)
        self.rows["activities"].append(
            (start, start + 40, copy.get("bytes", 0), node, correlation, graph, 0, 7, NAMES.get(name, 0), kind,
             copy.get("direction", 0), (0, 0))
        )  # fmt: skip

    def marker(self, compute: int, node: int, flags: int, site: int = 0) -> None:
        self.rows["node_calls"].append((self.tick(), site, compute, node, THREAD, flags))

    def window(self, n_computes: int) -> GpuWindow:
        return GpuWindow(
            np.array(self.rows["computes"], COMPUTE_DTYPE),
            np.array(self.rows["node_calls"], NODE_CALL_DTYPE),
            np.array(self.rows["api"], API_DTYPE),
            np.array(self.rows["activities"], ACTIVITY_DTYPE),
            {i: n for n, i in NAMES.items()},
        )


def compute(r: Recorder, c: int, how: str, split_ends: bool = True) -> None:
    """One compute of the split graph; `how`: eager, capture or replay."""
    start = r.tick()
    for first, last, on_cpu, size, direction in SPLITS:
        inputs = r.api(COPY)  # the scheduler copies the split's inputs, outside every split
        r.activity(inputs, MEMCPY, bytes=size, direction=direction)
        cpu = NODE_CALL_CPU if on_cpu else 0
        r.marker(c, first, NODE_CALL_SPLIT | cpu)
        if not on_cpu:
            for node in range(first, last + 1):
                r.marker(c, node, 0, CHECK)  # ggml-cuda's CUDA-graph check reaches every node first
            captured = []
            for node in range(first, last + 1):
                if node not in WORK:
                    continue
                r.marker(c, node, 0, LOOP)
                for work in WORK[node]:
                    if how == "replay":
                        continue
                    launch = r.api(COPY if work == "copy" else LAUNCH)
                    if how == "capture":
                        captured.append(work)
                    elif work == "copy":
                        r.activity(launch, MEMCPY, bytes=512, direction=DTOD)
                    else:
                        r.activity(launch, KERNEL, work)
            if how != "eager":  # the split's CUDA graph launched: its work in launch order
                graph = r.api(GRAPH_LAUNCH)
                work = captured or [w for n in sorted(WORK) if first <= n <= last for w in WORK[n]]
                for k, name in enumerate(work):
                    r.activity(graph, KERNEL, "memcpy32_post" if name == "copy" else name, graph=first + 1, node=k + 1)
        if split_ends:
            r.marker(c, first, NODE_CALL_SPLIT | NODE_CALL_SPLIT_END | cpu)
    r.rows["computes"].append((start, r.tick(), r.tick(), c, 0, THREAD, 10, 0, 0))


def split_window(hows: list[str], split_ends: bool = True) -> GpuWindow:
    r = Recorder()
    for c, how in enumerate(hows):
        compute(r, c, how, split_ends)
    return r.window(len(hows))


HOWS = ["eager", "capture", "replay", "replay"]


def test_the_splits_are_read_from_their_markers():
    spans = split_spans(split_window(["eager"]).node_calls)
    assert spans[["first_node", "on_cpu"]].tolist() == [(0, False), (4, True), (6, False)]
    assert (spans["end_ns"] > spans["start_ns"]).all() and (spans["start_ns"][1:] > spans["end_ns"][:-1]).all()
    assert (split_spans(split_window(["eager"], split_ends=False).node_calls)["end_ns"] == -1).all()


def test_each_split_maps_on_its_own_eager_captured_and_replayed():
    window = split_window(HOWS)
    mapped = attribute(window, np.zeros(len(HOWS), dtype=np.int64), AttributionState())
    assert mapped.mapping.tolist() == HOWS
    activities = window.activities
    is_kernel = activities["kind"] == KERNEL
    # every kernel found its node, in every compute: the replays of both CUDA splits too
    assert (mapped.node[is_kernel] >= 0).all()
    for c in range(len(HOWS)):
        mine = mapped.compute == c
        kernels = mine & is_kernel & (activities["name_id"] != NAMES["memcpy32_post"])
        names = {v: k for k, v in NAMES.items()}
        found = zip(activities["name_id"][kernels].tolist(), mapped.node[kernels].tolist(), strict=True)
        assert [(names[i], n) for i, n in found] == [
            ("rms_norm", 0), ("quantize", 1), ("mul_mat", 1), ("rope", 2), ("mul_mat", 6), ("fused_add", 7),
            ("soft_max", 9),
        ]  # fmt: skip
        # node 7's kernel computed 7 and 8 (fused); each kernel ran in its own split
        assert mapped.group_end[kernels & (mapped.node == 7)].tolist() == [8]
        assert (mapped.split[kernels] == np.where(mapped.node[kernels] < 4, 0, 6)).all()
        # node 3's copy, the last work of its split, is node 3's (eagerly a copy; in a CUDA graph the driver's kernel)
        node_copy = mine & ((activities["bytes"] == 512) | (activities["name_id"] == NAMES["memcpy32_post"]))
        assert mapped.node[node_copy].tolist() == [3]


def test_the_schedulers_copies_between_splits_are_transfers_with_the_split_they_feed():
    window = split_window(HOWS)
    mapped = attribute(window, np.zeros(len(HOWS), dtype=np.int64), AttributionState())
    activities = window.activities
    transfers = mapped.transfer
    # three per compute: each split's inputs, none of them a node's work
    assert transfers.sum() == 3 * len(HOWS) and (mapped.node[transfers] == -1).all()
    columns = (activities["bytes"], activities["copy_kind"], mapped.split)
    feeds = list(zip(*(column[transfers].tolist() for column in columns), strict=True))
    assert feeds == [(4096, HTOD, 0), (2048, DTOH, 4), (1024, HTOD, 6)] * len(HOWS)


def test_without_split_ends_a_compute_maps_whole_as_before():
    # GIVEN a window recorded before split ends were marked
    window = split_window(HOWS, split_ends=False)
    mapped = attribute(window, np.zeros(len(HOWS), dtype=np.int64), AttributionState())
    # THEN no copy is known as a transfer, each kernel's split is the one begun last before its
    # launch, and the eager pass charges the copy after node 3 to it
    assert not mapped.transfer.any()
    kernels = (window.activities["kind"] == KERNEL) & (mapped.compute == 0)
    assert (mapped.node[kernels] >= 0).all()
    assert (mapped.split[kernels] == np.where(mapped.node[kernels] < 4, 0, 6)).all()
    assert mapped.mapping[0] == "eager"
    dtoh = (mapped.compute == 0) & (window.activities["bytes"] == 2048)
    assert mapped.node[dtoh].tolist() == [3]


class Tables:
    """What GpuTimes appends, by table."""

    def __init__(self) -> None:
        self.columns: dict[str, dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))

    def append(self, table: str, columns: Any) -> None:
        for name, values in columns.items():
            self.columns[table][name].extend(np.asarray(values).tolist())


@pytest.mark.parametrize("split_ends", [True, False])
def test_the_manifest_counts_each_activity_once(split_ends):
    window = split_window(HOWS, split_ends)
    tables = Tables()
    times = GpuTimes(tables.append)
    for c, start in enumerate(window.computes["start_ns"].tolist()):
        times.graph_written(0, graph_id=c, structure_id=0, start_ns=start)
    times.add_window(window)
    times.finish()
    counts = times.summary()
    is_kernel = window.activities["kind"] == KERNEL
    # kernels and copies add up to the activities; attributed ones are among them
    assert counts["kernels"] == is_kernel.sum() and counts["copies"] == (~is_kernel).sum()
    assert counts["kernels"] + counts["copies"] == len(window.activities) == len(tables.columns["gpu_kernels"]["kind"])
    assert counts["attributed_kernels"] <= counts["kernels"] and counts["attributed_copies"] <= counts["copies"]
    if split_ends:
        assert counts["attributed_kernels"] == counts["kernels"]
        assert counts["transfers"] == 12 and counts["attributed_copies"] == 1  # the eager pass's node copy
        assert counts["unattributed_graphs"] == 0
    else:  # the replays of a split graph map only split by split: without the ends, not at all
        assert counts["transfers"] == 0 and counts["unattributed_graphs"] == 3
    graphs = tables.columns["gpu_graphs"]
    assert sum(graphs["attributed"]) == counts["attributed_kernels"] and sum(graphs["kernels"]) == counts["kernels"]
    rows = tables.columns["gpu_kernels"]
    assert len(rows["split"]) == len(window.activities)
