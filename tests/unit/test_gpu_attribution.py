"""Kernels mapped to ggml nodes by ggml-viz's own code, on the CUPTI records of a real run:
llama-completion on an NVIDIA H200 (tests/data/h200-q4_0, its README says how it was made).

The records come from a probe, not from ggml-viz's recorder: the test turns them into the
records the GPU timer hands over (one compute per pass of ggml-cuda's CUDA-graph check,
which reaches every node of every compute; nodes numbered by that pass), then checks what
the H200 measurements say (../shared/gpu/README.md in the project's history): every eager
kernel maps through its launch, all 62 CUDA-graph launches run the 424 kernels of the eager
pass of their structure, in order, overlapping their predecessor 378 times in the median.
"""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ggml_viz.capture.gpu.attribution import AttributionState, attribute, busy_shares
from ggml_viz.capture.gpu.kernel_names import kernel_function
from ggml_viz.capture.gpu.records import ACTIVITY_DTYPE, API_DTYPE, COMPUTE_DTYPE, KERNEL, NODE_CALL_DTYPE, GpuWindow

DATA = Path(__file__).parents[1] / "data" / "h200-q4_0"


def _lines(name: str) -> list[str]:
    with gzip.open(DATA / name, "rt") as file:
        return [line.rstrip("\n") for line in file]


class H200Run:
    """The records as one trace window, with each compute's node ops and structure."""

    def __init__(self) -> None:
        calls = []
        for line in _lines("node-calls.csv.gz"):
            head, site = line.rsplit(",", 1)
            _, ns, tensor, op, _name = head.split(",", 4)
            calls.append((int(ns), int(tensor, 16), op, int(site, 16)))
        # the CUDA-graph check: the site calling for every node of every compute, first
        check_site = Counter(site for *_, site in calls).most_common(1)[0][0]
        passes: list[list[tuple[int, int, str]]] = []
        for ns, tensor, op, site in calls:
            if site != check_site:
                continue
            if not passes or tensor in {t for _, t, _ in passes[-1]}:
                passes.append([])
            passes[-1].append((ns, tensor, op))
        api = np.array(
            [tuple(int(v) for v in line.split(",")[1:]) + (0,) for line in _lines("runtime-api.csv.gz")], API_DTYPE
        )
        thread = int(api["thread"][0])
        computes = np.zeros(len(passes), COMPUTE_DTYPE)
        computes["start_ns"] = [p[0][0] for p in passes]
        computes["end_ns"] = np.append(computes["start_ns"][1:], np.iinfo(np.int64).max)
        computes["compute"] = np.arange(len(passes))
        computes["thread"] = thread
        computes["n_nodes"] = [len(p) for p in passes]
        index = [{tensor: i for i, (_, tensor, _) in enumerate(p)} for p in passes]
        self.ops = [[op for *_, op in p] for p in passes]
        keys: dict[tuple[int, ...], int] = {}
        self.structures = np.array([keys.setdefault(tuple(t for _, t, _ in p), len(keys)) for p in passes])
        node_calls = []
        for ns, tensor, _op, site in calls:
            c = int(np.searchsorted(computes["start_ns"], ns, side="right")) - 1
            if c >= 0 and tensor in index[c]:
                node_calls.append((ns, site, c, index[c][tensor], thread, 0))
        names: dict[str, int] = {}
        kernels = []
        for line in _lines("kernels.csv.gz"):
            _, start, end, graph_id, graph_node, correlation, stream, name = line.split(",", 7)
            name_id = names.setdefault(name, len(names) + 1)
            kernels.append(
                (
                    int(start),
                    int(end),
                    0,
                    int(graph_node),
                    int(correlation),
                    int(graph_id),
                    0,
                    int(stream),
                    name_id,
                    KERNEL,
                    0,
                    (0, 0),
                )
            )
        self.window = GpuWindow(
            computes,
            np.array(node_calls, NODE_CALL_DTYPE),
            api,
            np.array(kernels, ACTIVITY_DTYPE),
            {i: n for n, i in names.items()},
        )


@pytest.fixture(scope="module")
def h200() -> H200Run:
    return H200Run()


@pytest.fixture(scope="module")
def mapped(h200: H200Run):
    return attribute(h200.window, h200.structures, AttributionState())


def _op_of(h200: H200Run, mapped, rows: np.ndarray) -> np.ndarray:
    return np.array([h200.ops[mapped.compute[r]][mapped.node[r]] for r in rows])


def test_every_eager_kernel_maps_through_its_launch(h200, mapped):
    # GIVEN kernels launched one by one (the eager passes: prompt, first decode steps)
    eager = np.flatnonzero(h200.window.activities["graph_id"] == 0)
    # THEN each found its node: 1,633 of 1,633
    assert len(eager) == 1633
    assert (mapped.node[eager] >= 0).all()
    # (the capture's launches cannot be told from the calls around it here: the records give
    # no compute's end, so it maps, as the replays do, from the eager pass of its structure)
    assert Counter(mapped.mapping.tolist()) == {"eager": 3, "replay": 62}


def test_cuda_graph_launches_replay_the_eager_pass_in_order(h200, mapped):
    activities = h200.window.activities
    launched = np.flatnonzero(activities["graph_id"] > 0)
    per_launch = Counter(activities["correlation_id"][launched].tolist())
    assert len(per_launch) == 62 and set(per_launch.values()) == {424}
    assert (mapped.node[launched] >= 0).all()
    # every launch's kernels ran the same nodes in the same order
    orders = set()
    for correlation in per_launch:
        rows = launched[activities["correlation_id"][launched] == correlation]
        rows = rows[np.argsort(activities["graph_node_id"][rows])]
        orders.add(tuple(mapped.node[rows].tolist()))
    assert len(orders) == 1


def test_programmatic_dependent_launch_overlap_is_counted_once(h200, mapped):
    activities = h200.window.activities
    overlaps, summed, spans, busy = [], [], [], []
    for correlation in np.unique(activities["correlation_id"][activities["graph_id"] > 0]):
        rows = np.flatnonzero(activities["correlation_id"] == correlation)
        rows = rows[np.argsort(activities["start_ns"][rows])]
        start, end = activities["start_ns"][rows], activities["end_ns"][rows]
        overlaps.append(int((start[1:] < end[:-1]).sum()))
        summed.append(int((end - start).sum()))
        spans.append(int(end.max() - start.min()))
        busy.append(int(mapped.busy_ns[rows].sum()))
    assert np.median(overlaps) == 378  # of 424 kernels: they start before the one before them ends
    assert round(np.median(summed) / 1e6, 2) == 1.51 and round(np.median(spans) / 1e6, 2) == 1.01  # ms per step
    # counted once: the busy time of a step lies within its span, and the summed durations exceed it
    assert all(b <= s for b, s in zip(busy, spans, strict=True))
    assert round(np.median(busy) / 1e6, 3) == 1.007


def test_decode_time_by_op(h200, mapped):
    """GPU time of the decode steps (the CUDA-graph replays) by op. Overlapped time goes to the
    kernel that was running first: under programmatic dependent launch the next kernel starts
    early and waits for it. Counting it to the later kernel instead ("clip each kernel at the
    next one's start") gives the figures the H200 README printed: MUL_MAT 85.7 %."""
    activities = h200.window.activities
    replays = np.flatnonzero(activities["graph_id"] > 0)
    ops = _op_of(h200, mapped, replays)
    shares = {op: 100 * mapped.busy_ns[replays][ops == op].sum() / mapped.busy_ns[replays].sum() for op in set(ops)}
    assert {op: round(share, 2) for op, share in shares.items()} == {
        "MUL_MAT": 68.17,
        "RMS_NORM": 13.45,
        "FLASH_ATTN_EXT": 9.26,
        "ROPE": 6.15,
        "SET_ROWS": 2.60,
        "GET_ROWS": 0.28,
        "ADD": 0.09,
    }
    clipped = np.zeros(len(replays), dtype=np.int64)
    for correlation in np.unique(activities["correlation_id"][replays]):
        rows = np.flatnonzero(activities["correlation_id"][replays] == correlation)
        rows = rows[np.argsort(activities["start_ns"][replays][rows])]
        start, end = activities["start_ns"][replays][rows], activities["end_ns"][replays][rows]
        clipped[rows] = np.minimum(end, np.append(start[1:], end[-1])) - start
    readme = {op: round(100 * clipped[ops == op].sum() / clipped.sum(), 1) for op in set(ops)}
    assert readme["MUL_MAT"] == 85.7 and readme["ROPE"] == 5.3 and readme["RMS_NORM"] == 3.4


def test_activation_quantization_is_a_fifth_of_kernel_time(h200):
    activities = h200.window.activities
    functions = np.array([kernel_function(h200.window.names[i]) for i in activities["name_id"].tolist()])
    duration = activities["end_ns"] - activities["start_ns"]
    assert round(100 * duration[functions == "quantize_q8_1"].sum() / duration.sum()) == 21


def test_busy_shares_count_each_moment_once():
    # GIVEN three activities on one device: b starts inside a, c on another device
    activities = np.zeros(3, ACTIVITY_DTYPE)
    activities["start_ns"], activities["end_ns"], activities["device"] = [0, 5, 0], [10, 15, 4], [0, 0, 1]
    # THEN b has only what came after a, c its own device's time
    assert busy_shares(activities).tolist() == [10, 5, 4]
