"""The rules kept twice, in C and in Python, run through the same tests: the graph recorder
(core/recorder.c through the extension, and llama_cpp_python/python_recorder.py), the decode
bracket (tracers.py: CContextTracer, PythonContextTracer), and the decoder's layers_of and
DescriptionIds (graph_decoder.py). Each test takes one implementation from a fixture
parametrized over both, on graphs made in memory as llama.cpp's are (tests/tensor_graphs.py):
no model, no llama.cpp computing anything."""

from __future__ import annotations

import contextlib
import ctypes
import threading
from typing import Any

import numpy as np
import pytest

from ggml_viz.capture.contract.constants import (
    NODE_ANSWERED,
    NODE_CAPTURE,
    NODE_ROUTING,
    NODE_SELECTED,
    NODE_TIMED,
    NODE_VALUES,
    ROUTING_READ,
)
from ggml_viz.capture.core import graph_decoder
from ggml_viz.capture.core.extension import extension
from ggml_viz.capture.core.ggml_api import TENSOR_DTYPE, TENSOR_SIZE, buffer_info, field_bytes, raw_bytes
from ggml_viz.capture.core.raw_graph import Mode, RepeatedGraph
from ggml_viz.capture.settings import CaptureSettings, NodeSelection, ValueSettings
from ggml_viz.layers import layer_of

pytest.importorskip("llama_cpp", reason="the recorders take their callback types from llama-cpp-python")

from tests.tensor_graphs import F16, F32, NAMES, Callbacks, Model, TensorMemory, compute, struct_at  # noqa: E402

IMPLEMENTATIONS = ["c", "python"]


def _needs_c(kind: str) -> None:
    if kind == "c" and extension is None:
        pytest.skip("the C recorder's extension was not built")


@pytest.fixture(params=IMPLEMENTATIONS)
def make_recorder(request):
    """The C recorder or its Python twin, as llama_cpp_python/session.py makes them."""
    _needs_c(request.param)
    from ggml_viz.capture.llama_cpp_python.c_recorder import CGraphRecorder
    from ggml_viz.capture.llama_cpp_python.python_recorder import PythonGraphRecorder

    return CGraphRecorder if request.param == "c" else PythonGraphRecorder


@pytest.fixture
def model():
    made = Model()
    yield made
    made.free()


# -- what a recorder should give --------------------------------------------------------------


def _copy_as_recorded(addresses: list[int]) -> np.ndarray:
    """The structs at these addresses, names cut at their NUL (as both recorders copy them)."""
    structs = np.frombuffer(b"".join(ctypes.string_at(a, TENSOR_SIZE) for a in addresses), np.uint8).copy()
    names = structs.reshape(-1, TENSOR_SIZE)[:, field_bytes("name")]
    names[np.cumsum(names == 0, axis=1) > 0] = 0
    return structs


def expected_graph(nodes: list[int]) -> dict[str, Any]:
    """A graph as a recorder should copy it now: its nodes; the sources that are no node of it
    (leaves), in the order nodes bring them (slots, then the view source); every buffer, in the
    order first seen."""
    known, leaves, buffers = set(nodes) | {0}, [], []
    seen_nodes: set[int] = set()
    for node in nodes:
        struct = struct_at(node)
        seen_nodes.add(node)
        for tensor in [node, *struct["src"].tolist(), int(struct["view_src"])]:
            if tensor != node and (tensor in seen_nodes or tensor in leaves or not tensor):
                continue
            if tensor != node:
                assert tensor not in known or tensor in seen_nodes, "a source computed later"
                leaves.append(tensor)
            buffer = int(struct_at(tensor)["buffer"])
            if buffer and buffer not in buffers:
                buffers.append(buffer)
    return {
        "node_ptrs": nodes,
        "nodes": _copy_as_recorded(nodes).tobytes(),
        "leaf_ptrs": leaves,
        "leaves": _copy_as_recorded(leaves).tobytes(),
        "buffers": [(buffer, buffer_info(buffer)) for buffer in buffers],
    }


def recorded(graphs: list[Any]) -> list[dict[str, Any]]:
    """What each graph taken says, alike for both recorders: a graph the C recorder gives as a
    repeat of the one before (without its structs, or as a RepeatedGraph) is that graph again."""
    result: list[dict[str, Any]] = []
    for graph in graphs:
        if isinstance(graph, RepeatedGraph):
            result.append({**result[-1], "flags": [0] * graph.n_nodes, "values": [], "captures": [], "routing": []})
            continue
        if graph.same_as_previous:
            structure = {key: result[-1][key] for key in ("node_ptrs", "nodes", "leaf_ptrs", "leaves")}
        else:
            structure = {
                "node_ptrs": graph.node_ptrs.tolist(),
                "nodes": raw_bytes(graph.nodes).tobytes(),
                "leaf_ptrs": graph.leaf_ptrs.tolist(),
                "leaves": raw_bytes(graph.leaves).tobytes(),
            }
        values = [] if graph.values is None else graph.values.tolist()
        routing = [(r.node, r.n_expert, r.experts.tolist(), r.weights.tolist(), r.status) for r in graph.routing]
        result.append(
            {
                **structure,
                "buffers": list(graph.buffers.items()),
                "flags": graph.flags.tolist(),
                "values": values,
                "captures": graph.captures,
                "routing": routing,
            }
        )
    return result


def structure(graph: dict[str, Any]) -> dict[str, Any]:
    return {key: graph[key] for key in ("node_ptrs", "nodes", "leaf_ptrs", "leaves", "buffers")}


def run(recorder: Any, model: Model, *graphs: list[int]) -> list[dict[str, Any]]:
    """Compute these graphs one after the other (as one llama_decode computes its ubatches),
    then take them; with what each should be, copied right after it ran."""
    callbacks, expected = Callbacks.of(recorder), []
    for nodes in graphs:
        compute(callbacks, nodes, model.ops)
        expected.append(expected_graph(nodes))
    taken = recorded(recorder.take_graphs(0))
    assert [structure(graph) for graph in taken] == expected
    return taken


# -- the graph recorder -----------------------------------------------------------------------


def test_a_graph_is_copied_node_for_node_with_its_leaves_and_buffers(make_recorder, model):
    # GIVEN a llama-like graph: weights (one unnamed), a KV cache view, views of nodes, a
    # mixture of experts; one node renamed shorter (stale bytes after its name's NUL)
    graph = model.graph()
    graph.memory.set_name(graph["attn_norm-0"], b"norm-0\0stale-7\0")
    recorder = make_recorder(inline_timing=True)
    # WHEN ggml computes it in one piece, the recorder timing its nodes by ticks
    (taken,) = run(recorder, model, graph.nodes)
    # THEN every node's struct is copied as it was (op, name, type, shape, strides, sources,
    # view source and offset, flags) in order, with the leaves it read and every buffer
    # (checked in run); the stale bytes are cleared
    nodes = np.frombuffer(taken["nodes"], TENSOR_DTYPE)
    assert nodes["name"][graph.nodes.index(graph["attn_norm-0"])] == b"norm-0"
    reshaped = graph.nodes.index(graph["Qcur-0 (reshaped)"])
    assert int(nodes["view_src"][reshaped]) == graph["Qcur-0"] and int(nodes["view_offs"][reshaped]) == 0
    leaves = np.frombuffer(taken["leaves"], TENSOR_DTYPE)
    first_leaves = ["token_embd.weight", "inp_tokens", "blk.0.attn_norm.weight"]
    assert [name.decode() for name in leaves["name"]][:3] == first_leaves
    assert [info.usage for _, info in taken["buffers"]] == ["compute", "weights", "any"]
    # AND every node is selected, none answered (inline) but the first MUL_MAT_ID of the experts
    # (its routing is read after it), and every node is timed
    flags = np.array(taken["flags"])
    assert (flags & NODE_SELECTED).all()
    assert np.flatnonzero(flags & NODE_ANSWERED).tolist() == [graph.nodes.index(graph["ffn_moe_up-1"])]
    assert (flags & NODE_TIMED).all()  # the ticks fit the nodes that work; views sit between them


@pytest.mark.parametrize("time_nodes", [True, False], ids=["op-detail", "graph-detail"])
def test_graphs_end_where_the_next_begins_whole_or_part_repeated(make_recorder, model, time_nodes):
    # GIVEN graphs computed back to back, as one llama_decode computes its ubatches: a graph,
    # the same graph again (a repeat, whole), the same graph with its KV cache view grown
    # (repeats the one before for its first nodes only), a graph built in other memory (no
    # node pointer repeats: it begins with the first graph's first op and name); then, in the
    # next call, a graph whose first node has no name, twice
    recorder = make_recorder(inline_timing=True)
    recorder.time_nodes = time_nodes
    first = model.graph(n_cached=4)
    other_memory = model.graph(n_cached=4, memory=TensorMemory())
    unnamed = model.graph(first_name="", memory=TensorMemory())
    callbacks = Callbacks.of(recorder)
    expected = []
    for nodes, change in (
        (first.nodes, None),
        (first.nodes, None),
        (first.nodes, "grow"),
        (other_memory.nodes, None),
        (unnamed.nodes, None),
        (unnamed.nodes, None),
    ):
        if change == "grow":
            first.memory.struct(first["k-0"])["ne"][1] = 5
        if nodes is unnamed.nodes and len(expected) == 4:
            assert recorder.close_graph(0) == 4  # the call ends (the decode bracket)
        compute(callbacks, nodes, model.ops)
        expected.append(expected_graph(nodes))
    # WHEN the graphs are taken
    taken = recorded(recorder.take_graphs(0))
    # THEN each is a graph of its own, copied as it was when it ran
    assert [structure(graph) for graph in taken] == expected
    n = len(first.nodes)
    selected = NODE_SELECTED if time_nodes else 0
    assert [{flag & NODE_SELECTED for flag in graph["flags"]} for graph in taken] == [{selected}] * 6
    assert [len(graph["flags"]) for graph in taken] == [n] * 6


SELECTIONS = {
    "op": (NodeSelection(ops=("MUL_MAT",)), {"Qcur-0", "kq-0", "ffn_up-0", "ffn_moe_probs-1", "result_output"}),
    "specific op": (NodeSelection(ops=("SILU",)), {"ffn_silu-0"}),
    "layer": (NodeSelection(layers=((1, 1),)),
              {"ffn_moe_probs-1", "ffn_moe_topk-1", "ffn_moe_weights-1", "ffn_moe_weights_norm-1", "ffn_moe_up-1",
               "ffn_moe_down-1"}),
    "no layer": (NodeSelection(no_layer=True), {"inp_embd", "result_output"}),
    "names in layers": (NodeSelection(layers=((0, 0),), names=("ffn_*",)), {"ffn_up-0", "ffn_silu-0"}),
}  # fmt: skip


@pytest.mark.parametrize("selection", SELECTIONS, ids=list(SELECTIONS))
def test_filters_select_nodes_and_sync_timing_computes_each_alone(make_recorder, model, selection):
    # GIVEN a selection, timed by computing each selected node alone (sync)
    chosen, names = SELECTIONS[selection]
    recorder = make_recorder(selection=chosen, inline_timing=False, routing=False)
    graph = model.graph()
    # WHEN the graph runs twice: the second time, the node before each selected one is
    # answered too (a fence, learned from the first), so that the selected one runs alone
    first, second = run(recorder, model, graph.nodes, graph.nodes)
    node_names = [name.decode() for name in np.frombuffer(first["nodes"], TENSOR_DTYPE)["name"]]
    # THEN exactly the nodes the filters name are selected
    for taken in (first, second):
        assert {name for name, flag in zip(node_names, taken["flags"], strict=True) if flag & NODE_SELECTED} == names
    # AND the second time, each selected node and each node before one is answered, and a
    # selected node is timed where the node before it ended a slice
    flags = second["flags"]
    selected = [bool(flag & NODE_SELECTED) for flag in flags]
    answered = [s or (i + 1 < len(flags) and selected[i + 1]) for i, s in enumerate(selected)]
    assert [bool(flag & NODE_ANSWERED) for flag in flags] == answered
    timed = [s and (i == 0 or answered[i - 1]) for i, s in enumerate(selected)]
    assert [bool(flag & NODE_TIMED) for flag in flags] == timed
    assert sum(timed) == len(names) and all(first["flags"][i] & NODE_ANSWERED for i in np.flatnonzero(selected))


def test_values_are_read_after_each_node_and_captures_within_the_budget(make_recorder, model):
    # GIVEN value statistics of every node, and copies of some nodes' outputs: one too large
    # for what is left of the budget, one not contiguous
    graph = model.graph()
    wanted = ("Qcur-*", "kq-0*", "ffn_up-0", "result_output")
    recorder = make_recorder(values=ValueSettings(stats=True, captures=wanted, capture_bytes=300), routing=False)
    # WHEN the graph runs
    (taken,) = run(recorder, model, graph.nodes)
    structs = np.frombuffer(taken["nodes"], TENSOR_DTYPE)
    names = [name.decode() for name in structs["name"]]
    # THEN every node that is not a view is read after it ran (answered): f32 and f16 ones with
    # their statistics, over the finite values (NaN and Inf counted apart); others unreadable
    flags = np.array(taken["flags"])
    not_views = [i for i, s in enumerate(structs) if not int(s["view_src"])]
    assert np.flatnonzero(flags & NODE_VALUES).tolist() == not_views
    assert (flags[not_views] & NODE_ANSWERED).all()
    assert [row[0] for row in taken["values"]] == not_views
    for node, readable, n, nan, inf, low, high, total, squares, absolute in taken["values"]:
        struct = structs[node]
        if int(struct["type"]) not in (F32, F16):
            assert (readable, n) == (0, 0), names[node]
            continue
        values = _elements(struct)
        finite = values[np.isfinite(values)]
        assert (readable, n, nan, inf) == (1, len(finite), np.isnan(values).sum(), np.isinf(values).sum()), names[node]
        assert (total, squares, absolute) == (finite.sum(), (finite**2).sum(), np.abs(finite).sum()), names[node]
        extremes = [finite.min(), finite.max()] if len(finite) else [np.nan, np.nan]
        assert np.array_equal([low, high], extremes, equal_nan=True), names[node]
    # AND the outputs wanted are copied whole, in order, as long as the budget lasts
    captured = [(c.node, c.name, c.ggml_type, c.ne) for c in taken["captures"]]
    copies = ["Qcur-0", "Qcur-0 (reshaped)", "kq-0", "ffn_up-0"]  # 192 bytes; result_output's 256 are too many
    assert captured == [
        (names.index(n), n, int(structs[names.index(n)]["type"]), tuple(structs[names.index(n)]["ne"].tolist()))
        for n in copies
    ]
    assert [c.data for c in taken["captures"]] == [_elements(structs[names.index(n)]).tobytes() for n in copies]
    assert recorder.captures_skipped == (2, 32 + 256)  # kq-0 (transposed), not contiguous; result_output
    assert [names[i] for i in np.flatnonzero(flags & NODE_CAPTURE)] == [
        *copies[:3],
        "kq-0 (transposed)",
        *copies[3:],
        "result_output",
    ]


def _elements(struct: np.void) -> np.ndarray:
    """A tensor's elements in order, read where it lies (any strides)."""
    dtype = np.dtype({F32: np.float32, F16: np.float16, 26: np.int32}[int(struct["type"])])
    shape, strides = tuple(struct["ne"][::-1].tolist()), tuple(struct["nb"][::-1].tolist())
    span = sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + dtype.itemsize
    memory = (ctypes.c_char * span).from_address(int(struct["data"]))
    return np.ndarray(shape, dtype, memory, strides=strides).ravel()


@pytest.mark.parametrize("inline_timing", [True, False], ids=["inline", "sync"])
def test_each_mixture_of_experts_layer_has_its_routing_read_once(make_recorder, model, inline_timing):
    # GIVEN a layer of experts: GET_ROWS of the router's probabilities by the chosen ids, their
    # weights normalized, then two MUL_MAT_IDs by the same ids
    graph = model.graph()
    recorder = make_recorder(inline_timing=inline_timing)
    # WHEN the graph runs
    (taken,) = run(recorder, model, graph.nodes)
    # THEN the routing is read after the first MUL_MAT_ID (answered): each token's experts, and
    # their weights from the last tensor computed from the GET_ROWS with as many elements
    up = graph.nodes.index(graph["ffn_moe_up-1"])
    norm = struct_at(graph["ffn_moe_weights_norm-1"])
    experts = _elements(struct_at(graph["ffn_moe_topk-1"])).reshape(model.n_tokens, model.N_USED).tolist()
    weights = _elements(norm).reshape(model.n_tokens, model.N_USED).tolist()
    assert taken["routing"] == [(up, model.N_EXPERT, experts, weights, ROUTING_READ)]
    assert [i for i, flag in enumerate(taken["flags"]) if flag & NODE_ROUTING] == [up]
    assert recorder.routing_reads == (1, 0, 0)


def test_recording_stops_counts_and_forgets_as_its_mode_says(make_recorder, model):
    # GIVEN a recorder told to count (over the event bound), then to stop
    graph = model.graph()
    recorder = make_recorder()
    callbacks = Callbacks.of(recorder)
    recorder.mode = Mode.COUNT
    # WHEN graphs run
    compute(callbacks, graph.nodes, model.ops)
    counted = recorder.take_counted()
    recorder.mode = Mode.OFF
    compute(callbacks, graph.nodes, model.ops)
    # THEN the nodes are counted while counting, and nothing is recorded
    assert counted == len(graph.nodes) and recorder.take_counted() == 0
    assert recorder.open_nodes == 0 and recorder.take_graphs(0) == []
    # AND recording again, a graph left open can be dropped, a closed one is kept
    recorder.mode = Mode.RECORD
    compute(callbacks, graph.nodes, model.ops)
    assert recorder.open_nodes == len(graph.nodes) and recorder.close_graph(0) == 1
    compute(callbacks, graph.nodes, model.ops)
    recorder.drop_open()
    assert recorder.open_nodes == 0 and len(recorder.take_graphs(0)) == 1


SCENARIOS = {
    "op inline": {},
    "op sync": {"inline_timing": False},
    "graph": {"time_nodes": False},
    "selected sync, values": {"inline_timing": False, "selection": NodeSelection(names=("*-0",)),
                              "values": ValueSettings(stats=True, captures=("kq*",))},
}  # fmt: skip


@pytest.mark.parametrize("scenario", SCENARIOS, ids=list(SCENARIOS))
def test_both_recorders_record_the_same_graphs(model, scenario):
    # GIVEN the C recorder and its Python twin, set alike
    _needs_c("c")
    from ggml_viz.capture.llama_cpp_python.c_recorder import CGraphRecorder
    from ggml_viz.capture.llama_cpp_python.python_recorder import PythonGraphRecorder

    settings = dict(SCENARIOS[scenario])
    time_nodes = settings.pop("time_nodes", True)
    first = model.graph(n_cached=4)
    other = model.graph(n_cached=6, memory=TensorMemory())
    results = []
    for make in (CGraphRecorder, PythonGraphRecorder):
        first.memory.struct(first["k-0"])["ne"][1] = 4
        recorder = make(**settings)
        recorder.time_nodes = time_nodes
        callbacks = Callbacks.of(recorder)
        # WHEN each records the same graphs: new, repeated, repeated part way, in other memory
        for nodes, grow in (
            (first.nodes, False),
            (first.nodes, False),
            (first.nodes, True),
            (other.nodes, False),
            (other.nodes, False),
        ):
            if grow:
                first.memory.struct(first["k-0"])["ne"][1] = 5
            compute(callbacks, nodes, model.ops)
        results.append(recorded(recorder.take_graphs(0)))
    # THEN they record the same graphs: structs, leaves, buffers, flags, values, routing
    c, python = results
    assert len(c) == len(python) == 5
    for c_graph, python_graph in zip(c, python, strict=True):
        # (but where a graph repeats the one before under inline timing: the C recorder reads its
        # routing at the tick that ends the MUL_MAT_ID, not answering for it; Python answers)
        for node, *_ in c_graph["routing"]:
            if not c_graph["flags"][node] & NODE_ROUTING:
                python_graph["flags"][node] &= ~(NODE_ROUTING | NODE_ANSWERED)
        assert c_graph.keys() == python_graph.keys()
        for key in c_graph:
            assert repr(c_graph[key]) == repr(python_graph[key]), key


# -- the decode bracket -----------------------------------------------------------------------


class Written:
    """A recording (InProcessWriter) that keeps what a tracer writes: per write, each graph's
    call, phase, ubatch, tokens and detail."""

    def __init__(self, settings: CaptureSettings) -> None:
        self.settings = settings
        self.lock = threading.Lock()
        self.writes: list[list[tuple[Any, ...]]] = []
        self.dropped = 0

    @contextlib.contextmanager
    def graph_batch(self):
        self.writes.append([])
        yield

    def _row(self, call: Any, ubatch: int, graph: Any) -> tuple[Any, ...]:
        decode = call.decode
        if decode is None:
            return (None, call.return_code, ubatch, graph.n_nodes, graph.detail)
        tokens, _ = decode.tokens_of_graph(ubatch, getattr(graph, "input_ids", None))
        return (
            decode.index,
            decode.phase,
            call.return_code,
            ubatch,
            tokens["token_id"].tolist(),
            tokens["pos"].tolist(),
            graph.n_nodes,
            graph.detail,
        )

    def write_graph(self, tracer: Any, raw: Any, call: Any, ubatch: int) -> None:
        self.writes[-1].append(self._row(call, ubatch, raw))

    def write_repeats(self, tracer: Any, repeats: list[Any]) -> None:
        self.writes[-1] += [self._row(r.call, r.ubatch, r.graph) for r in repeats]

    def count_dropped(self, n_nodes: int) -> None:
        self.dropped += n_nodes

    def fail(self, reason: str) -> None:
        raise AssertionError(reason)

    def take_gpu_window(self) -> None:
        raise AssertionError("no GPU here")


@pytest.fixture(params=IMPLEMENTATIONS)
def make_tracer(request, monkeypatch):
    """The decode bracket in C (with the C recorder) or in Python (with the Python recorder);
    graphs written by threes, never for time."""
    _needs_c(request.param)
    from ggml_viz.capture.llama_cpp_python import tracers
    from ggml_viz.capture.llama_cpp_python.c_recorder import CGraphRecorder
    from ggml_viz.capture.llama_cpp_python.python_recorder import PythonGraphRecorder

    monkeypatch.setattr(tracers, "GRAPHS_PER_WRITE", 3)
    monkeypatch.setattr(tracers, "WRITE_INTERVAL_NS", 10**15)

    def make(settings: CaptureSettings, n_ubatch: int) -> tuple[Any, Written]:
        written = Written(settings)
        if request.param == "c":
            tracer = tracers.CContextTracer(written, 0, str, n_ubatch, CGraphRecorder())
        else:
            tracer = tracers.PythonContextTracer(written, 0, str, n_ubatch, PythonGraphRecorder())
        return tracer, written

    return make


def _batch(tokens: list[int], first_position: int) -> Any:
    return _batch_of([(token, first_position + i, 0, i == len(tokens) - 1) for i, token in enumerate(tokens)])


def _batch_of(rows: list[tuple[int, int, int, bool]]) -> Any:
    """A llama_batch of these (token, position, sequence, logits) rows."""
    import llama_cpp

    batch = llama_cpp.llama_batch_init(len(rows), 0, 1)
    batch.n_tokens = len(rows)
    for i, (token, position, sequence, logits) in enumerate(rows):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, position, 1
        batch.seq_id[i][0] = sequence
        batch.logits[i] = logits
    return batch


def test_the_decode_bracket_gives_each_graph_its_call_and_samples_calls(make_tracer, model):
    import llama_cpp

    # GIVEN the decode bracket with --sample 2, ubatches of 2 tokens
    tracer, written = make_tracer(CaptureSettings(sample=2), n_ubatch=2)
    graph = model.graph()
    callbacks = Callbacks.of(tracer.recorder)
    batches = [_batch([7, 8, 9, 10], 0)] + [_batch([11 + i], 4 + i) for i in range(4)]
    timed = []
    try:
        # WHEN a prompt call computes two ubatches' graphs, four decode calls one each, a graph
        # runs outside any call, and a failed call returns
        for index, batch in enumerate(batches):
            tracer.begin_decode(batch)
            timed.append(bool(tracer.recorder.time_nodes))
            for _ in range(2 if index == 0 else 1):
                compute(callbacks, graph.nodes, model.ops)
            tracer.end_decode(0)
        compute(callbacks, graph.nodes, model.ops)
        tracer.begin_decode(batches[1])
        tracer.end_decode(-1)
        tracer.flush()
    finally:
        for batch in batches:
            llama_cpp.llama_batch_free(batch)
    # THEN the prompt call and every second decode call time their nodes
    assert timed == [True, True, False, True, False]
    # AND each graph is written with its call, its ubatch's tokens, by threes of calls' graphs
    n = len(graph.nodes)
    prompt = [(0, "prompt", 0, 0, [7, 8], [0, 1], n, "op"), (0, "prompt", 0, 1, [9, 10], [2, 3], n, "op")]
    decodes = [(1 + i, "decode", 0, 0, [11 + i], [4 + i], n, "op" if i % 2 == 0 else "graph") for i in range(4)]
    assert written.writes == [[*prompt, decodes[0]], decodes[1:4], [(None, 0, 0, n, "graph")]]


def test_each_graph_of_a_batch_llama_cpp_splits_by_sequence_gets_the_tokens_it_looked_up(make_tracer, model):
    import llama_cpp

    # GIVEN a call whose batch holds two sequences' prompts, three tokens each, alike at first
    # (two requests arriving together), in ubatches of two tokens
    tracer, written = make_tracer(CaptureSettings(), n_ubatch=2)
    graph = model.graph()
    callbacks = Callbacks.of(tracer.recorder)
    first, second = [7, 8, 9], [7, 8, 12]
    batch = _batch_of(
        [(token, i, 0, i == 2) for i, token in enumerate(first)]
        + [(token, i, 1, i == 2) for i, token in enumerate(second)]
    )
    try:
        # WHEN llama.cpp computes it as it does with a memory per sequence (split_equal): each
        # ubatch a token of each sequence, its graph looking those tokens up
        tracer.begin_decode(batch)
        ids = ctypes.cast(int(struct_at(graph["inp_tokens"])["data"]), ctypes.POINTER(ctypes.c_int32))
        for place in range(3):
            ids[0], ids[1] = first[place], second[place]
            compute(callbacks, graph.nodes, model.ops)
        tracer.end_decode(0)
        tracer.flush()
    finally:
        llama_cpp.llama_batch_free(batch)
    # THEN each graph is written with the tokens it computed, of both sequences, not the batch's
    # next two in its order
    rows = [row for write in written.writes for row in write]
    assert [(row[3], row[4], row[5]) for row in rows] == [
        (0, [7, 7], [0, 0]),
        (1, [8, 8], [1, 1]),
        (2, [9, 12], [2, 2]),
    ]


def test_the_decode_bracket_counts_the_nodes_it_drops(make_tracer, model):
    import llama_cpp

    # GIVEN a tracer over its event bound: it only counts
    tracer, written = make_tracer(CaptureSettings(), n_ubatch=8)
    graph = model.graph()
    tracer.count_only()
    batch = _batch([1, 2], 0)
    try:
        # WHEN a call computes a graph
        tracer.begin_decode(batch)
        compute(Callbacks.of(tracer.recorder), graph.nodes, model.ops)
        tracer.end_decode(0)
        tracer.flush()
    finally:
        llama_cpp.llama_batch_free(batch)
    # THEN its nodes are counted as dropped, and nothing is written
    assert written.dropped == len(graph.nodes) and written.writes in ([], [[]])


# -- the decoder's twins: layers_of and DescriptionIds ----------------------------------------


@pytest.fixture(params=IMPLEMENTATIONS)
def layers_of(request):
    _needs_c(request.param)
    return extension.layers_of if request.param == "c" else graph_decoder.python_layers_of


@pytest.fixture(params=IMPLEMENTATIONS)
def description_ids(request):
    _needs_c(request.param)
    return extension.DescriptionIds if request.param == "c" else graph_decoder.PythonDescriptionIds


def test_layers_of_reads_each_name_field_as_layer_of_reads_the_name(layers_of):
    # GIVEN name fields as ggml_tensor holds them: a C string, some with stale bytes after
    # its end (a tensor renamed to a shorter name)
    fields = np.zeros((len(NAMES), 64), dtype=np.uint8)
    for row, name in enumerate(NAMES):
        encoded = name.encode()[:63]
        fields[row, : len(encoded)] = np.frombuffer(encoded, np.uint8)
        if row % 3 == 0 and len(encoded) < 60:
            fields[row, len(encoded) + 1 :] = ord("7")  # "-7" would read as layer 7 if the end were missed
    # THEN each name is read up to its end, as layer_of reads the name
    layers = np.frombuffer(layers_of(fields), np.int32)
    assert layers.tolist() == [layer_of(name.encode()[:63].decode()) for name in NAMES]
    with pytest.raises(ValueError):  # names of 64 bytes each
        layers_of(b"x" * 65)


def test_description_ids_number_each_description_the_first_time_it_comes(description_ids):
    # GIVEN descriptions of 8 bytes: two tensors, a view of the first, the first again, a view
    # of a tensor outside the graph, and the same view bytes looking into the second tensor
    a, b, view = b"A" * 8, b"B" * 8, b"V" * 8
    structs = np.frombuffer(a + b + view + a + view + view, np.uint8)
    view_rows = np.array([-1, -1, 0, -1, -1, 1], dtype=np.int64)
    table = description_ids(8)
    # WHEN they are given ids from 10
    ids, new_rows, sources, next_id = table.assign(structs, view_rows, 10)
    # THEN a description is new the first time, and a view's differs by the tensor it looks into
    assert np.frombuffer(ids, np.int32).tolist() == [10, 11, 12, 10, 13, 14]
    assert np.frombuffer(new_rows, np.int32).tolist() == [0, 1, 2, 4, 5]
    assert np.frombuffer(sources, np.int32).tolist() == [-1, -1, 10, -1, 11] and next_id == 15 and len(table) == 5
    # AND the next graph finds them again, until the table is cleared
    again = table.assign(structs[:8], view_rows[:1], next_id)
    assert np.frombuffer(again[0], np.int32).tolist() == [10] and again[1:] == (b"", b"", 15)
    table.clear()
    assert len(table) == 0 and np.frombuffer(table.assign(structs[:8], view_rows[:1], 15)[0], np.int32).tolist() == [15]


def test_description_ids_agree_on_many_graphs(description_ids):
    # GIVEN thousands of struct-sized descriptions over several graphs, many repeated, a third
    # views, the table cleared once (a new buffer)
    size, rng = TENSOR_SIZE, np.random.default_rng(7)
    table, next_id, seen = description_ids(size), 0, []
    for graph in range(4):
        if graph == 2:
            table.clear()
        distinct = rng.integers(0, 256, size=(750, size), dtype=np.uint8)
        structs = np.ascontiguousarray(distinct[rng.integers(0, len(distinct), size=3000)])
        view_rows = np.where(rng.random(3000) < 0.33, rng.integers(-1, np.maximum(np.arange(3000), 1)), -1)
        view_rows[0] = -1
        ids, new_rows, sources, next_id = table.assign(structs, view_rows.astype(np.int64), next_id)
        seen.append((ids, new_rows, sources, next_id, len(table)))
    # THEN the ids are those of a dict of (bytes, view source's id), given in order
    expected: dict[bytes, int] = {}
    rng = np.random.default_rng(7)
    for graph in range(4):
        if graph == 2:
            expected.clear()
        distinct = rng.integers(0, 256, size=(750, size), dtype=np.uint8)
        structs = distinct[rng.integers(0, len(distinct), size=3000)]
        view_rows = np.where(rng.random(3000) < 0.33, rng.integers(-1, np.maximum(np.arange(3000), 1)), -1)
        view_rows[0] = -1
        ids = []
        for row, view_row in enumerate(view_rows.tolist()):
            key = structs[row].tobytes() + (ids[view_row] if view_row >= 0 else -1).to_bytes(4, "little", signed=True)
            ids.append(expected.setdefault(key, len(expected) + (0 if graph < 2 else seen[1][3])))
        assert np.frombuffer(seen[graph][0], np.int32).tolist() == ids
        assert seen[graph][4] == len(expected)
