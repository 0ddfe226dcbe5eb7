"""The summary of a billion node events reads its graphs' columns with Arrow and numpy, not a
pandas frame or a Python object per graph and token: the requests, the ops slowing with the
context, the phases, the computations and the weight bytes of a step give what the pandas
computations over every graph and token gave (kept here as the reference), on runs made for it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import ggml_viz
from ggml_viz.analysis import breakdowns, findings, memory, summary
from ggml_viz.analysis.breakdowns import TOKEN_PHASES, weight_bytes_per_graph
from ggml_viz.runformat.synthetic import SyntheticRecording, write_synthetic_run

# ---- the reference: the computations as they were, over pandas frames of every graph and token


def reference_requests(run: Any) -> list[dict[str, Any]]:
    tokens = run.tokens.merge(run.graphs[["graph_id", "phase", "start_ns"]], on="graph_id")
    tokens = tokens[tokens["phase"].isin(TOKEN_PHASES) & (tokens["seq_id"] >= 0)]
    tokens = tokens.sort_values(["start_ns", "batch_index"], kind="stable")
    if tokens.empty:
        return []
    in_batch = tokens.groupby(["graph_id", "seq_id"])["pos"].transform("size").to_numpy()
    found: list[dict[str, Any]] = []
    current: dict[int, dict[str, Any]] = {}
    columns = (tokens[c].to_numpy() for c in ("seq_id", "pos", "output", "start_ns", "text"))
    for several, seq_id, pos, output, start_ns, text in zip(in_batch > 1, *columns, strict=True):
        request = current.get(int(seq_id))
        if request is None or pos <= request["last_pos"] or (several and request["generated_tokens"]):
            request = current[int(seq_id)] = {
                "seq_id": int(seq_id),
                "start_ns": int(start_ns),
                "prompt": [],
                "prompt_tokens": 0,
                "generated": [],
                "generated_tokens": 0,
                "last_pos": -1,
                "prompt_ended": False,
            }
            found.append(request)
        side = "generated" if request["prompt_ended"] and not several else "prompt"
        request[side].append(text)
        request[f"{side}_tokens"] += 1
        request["last_pos"] = int(pos)
        request["prompt_ended"] = request["prompt_ended"] or bool(output)
    origin = int(run.graphs["start_ns"].min())
    return [
        {
            "seq_id": r["seq_id"],
            "start_ns": r["start_ns"] - origin,
            "prompt": "".join(r["prompt"]),
            "prompt_tokens": r["prompt_tokens"],
            "generated": "".join(r["generated"]),
            "generated_tokens": r["generated_tokens"],
        }
        for r in found
    ]


def reference_growth(run: Any) -> list[str]:
    decode = run.graphs.loc[run.graphs["phase"] == "decode", "graph_id"]
    positions = run.tokens.groupby("graph_id")["pos"].max()
    per_graph = run.graph_op_totals.rename(columns={"time_ns": "duration_ns"})
    per_graph = per_graph[per_graph["graph_id"].isin(decode) & per_graph["graph_id"].isin(positions.index)]
    if per_graph["graph_id"].nunique() < 8:
        return []
    contexts = positions.reindex(per_graph["graph_id"]).to_numpy(np.float64)
    times = per_graph["duration_ns"].to_numpy(np.float64)
    said = []
    for op, rows in per_graph.groupby("op").indices.items():
        context, time = contexts[rows], times[rows]
        if np.std(context) == 0 or np.std(time) == 0:
            continue
        correlation = float(np.corrcoef(context, time)[0, 1])
        slope, intercept = np.polyfit(context, time, 1)
        start, end = slope * context.min() + intercept, slope * context.max() + intercept
        if correlation > 0.6 and start > 0 and end / start > 1.25:
            said.append(
                f"{op} time grows with context length: {end / start:.1f}× from position "
                f"{int(context.min())} to {int(context.max())} (correlation {correlation:.2f})."
            )
    return said


def reference_graph_times(run: Any) -> pd.DataFrame:
    graphs = run.graphs.copy()
    graphs["duration_ns"] = graphs["end_ns"] - graphs["start_ns"]
    return graphs


def reference_phase_stats(run: Any) -> pd.DataFrame:
    phases = reference_graph_times(run).groupby("phase")
    stats = pd.DataFrame(
        {"graphs": phases.size(), "tokens": phases["n_tokens"].sum(), "time_ns": phases["duration_ns"].sum()}
    )
    rate = stats["tokens"] / (stats["time_ns"] / 1e9)
    stats["tokens_per_s"] = rate.astype(object).where(stats.index.isin(TOKEN_PHASES), None)
    return stats.reset_index()


def reference_computations(run: Any) -> pd.DataFrame:
    graphs = reference_graph_times(run)
    labels = graphs["structure_id"].map(run.structure_labels).fillna("")
    table = graphs.assign(label=labels).groupby(["label", "phase"], as_index=False)
    stats = table.agg(graphs=("graph_id", "size"), time_ns=("duration_ns", "sum"))
    return stats.sort_values("time_ns", ascending=False, ignore_index=True)


def reference_weight_medians(run: Any) -> tuple[int, int]:
    edges = run.structure_edges
    per_graph, _ = weight_bytes_per_graph(run, edges[edges["memory"] == "disk"])
    phases = run.graphs.set_index("graph_id")["phase"].reindex(per_graph.index)
    decode = per_graph[phases == "decode"]
    return (int(per_graph.median()) if len(per_graph) else 0, int(decode.median()) if len(decode) else 0)


# ---- runs made for it


def growing_run(path: Any) -> Any:
    """Decode steps whose softmax and attention product take longer as the context grows, over
    two sequences (a server's): the finding has something to say."""
    recording = SyntheticRecording(path, layers=2, seed=3, sequences=2)
    softmax = [i for i, op in enumerate(recording.node_ops) if op == "SOFT_MAX"]
    for step in range(40):
        recording.base_costs[softmax] = 4_000.0 + 600.0 * step
        recording.append_graphs(1)
    recording.close()
    return ggml_viz.open(recording.run_dir)


def with_graphs(run: Any, graphs: pa.Table) -> Any:
    """`run` reading `graphs` as its graphs table (tokens made from it too)."""
    stored = run.arrow
    run.arrow = lambda table: graphs if table == "graphs" else stored(table)
    return run


def server_graphs(seed: int, n_graphs: int = 300) -> pa.Table:
    """Graphs of a server batching several sequences' tokens: prompts of several tokens, lone tokens
    fed back, positions going back for a slot's next request, prompts after generating with the
    positions going on, the warm-up, tokens of no sequence, graphs starting at the same time."""
    rng = np.random.default_rng(seed)
    last = {seq: 0 for seq in range(4)}
    rows: dict[str, list] = {
        key: []
        for key in (
            "graph_id",
            "phase",
            "start_ns",
            "end_ns",
            "first_batch_index",
            "token_ids",
            "token_positions",
            "token_seq_ids",
            "token_outputs",
            "token_texts",
            "structure_id",
            "n_tokens",
            "context_id",
        )
    }
    for graph in range(n_graphs):
        tokens = []
        for seq in rng.choice(5, size=rng.integers(0, 4), replace=False):
            seq = int(seq) - 1  # -1: no sequence
            n = int(rng.choice([1, 1, 1, 2, 5]))
            start = last.get(seq, 0) if rng.random() < 0.9 else int(rng.integers(0, 5))  # back: a new request
            for k in range(n):
                tokens.append((seq, start + k, bool(k == n - 1 and rng.random() < 0.7)))
            last[seq] = start + n
        rows["graph_id"].append(graph)
        rows["phase"].append(str(rng.choice(["prompt", "decode", "decode", "warmup"])))
        rows["start_ns"].append(int(rng.integers(0, n_graphs // 3)) * 1000)  # ties among graphs
        rows["end_ns"].append(rows["start_ns"][-1] + int(rng.integers(1, 900)))
        rows["first_batch_index"].append(int(rng.integers(0, 3)))
        rows["token_ids"].append([int(rng.integers(0, 100)) for _ in tokens])
        rows["token_positions"].append([pos for _, pos, _ in tokens])
        rows["token_seq_ids"].append([seq for seq, _, _ in tokens])
        rows["token_outputs"].append([output for _, _, output in tokens])
        rows["token_texts"].append([f" w{graph}.{k}" for k in range(len(tokens))])
        rows["structure_id"].append(int(rng.integers(0, 3)))
        rows["n_tokens"].append(len(tokens))
        rows["context_id"].append(None if rng.random() < 0.05 else int(rng.integers(0, 2)))
    types = {
        "graph_id": pa.int32(),
        "structure_id": pa.int32(),
        "n_tokens": pa.int32(),
        "first_batch_index": pa.int32(),
        "token_ids": pa.list_(pa.int32()),
        "context_id": pa.int32(),
        "token_positions": pa.list_(pa.int32()),
        "token_seq_ids": pa.list_(pa.int32()),
    }
    return pa.table({key: pa.array(values, types.get(key)) for key, values in rows.items()})


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("scale")
    return {
        "growing": growing_run(folder / "growing.ggmlviz"),
        "server": ggml_viz.open(write_synthetic_run(folder / "server.ggmlviz", graphs=30, layers=1, sequences=3)),
        "gpu": ggml_viz.open(write_synthetic_run(folder / "gpu.ggmlviz", graphs=24, layers=2, gpu_every=4)),
        "one": ggml_viz.open(write_synthetic_run(folder / "one.ggmlviz", graphs=12, layers=1)),
    }


@pytest.mark.parametrize("name", ["growing", "server", "gpu", "one"])
def test_the_summary_s_graph_figures_are_those_of_the_pandas_computations(runs, name):
    run = runs[name]
    assert breakdowns.requests(run) == reference_requests(run)
    assert findings._growth_with_context(run) == reference_growth(run)
    # (the sums of tokens in int64, where pandas summed an int32 column in int32)
    pd.testing.assert_frame_equal(breakdowns.phase_stats(run), reference_phase_stats(run), check_dtype=False)
    pd.testing.assert_frame_equal(breakdowns.graphs_by_computation(run), reference_computations(run))
    reads = breakdowns.weight_reads(run)
    assert (reads["weight_bytes_per_graph"], reads["weight_bytes_per_decode_step"]) == reference_weight_medians(run)


def test_an_op_slowing_with_the_context_is_said_as_the_fit_over_every_step_says(runs):
    said = findings._growth_with_context(runs["growing"])
    assert len(said) == 1 and said[0].startswith("SOFT_MAX time grows with context length")


@pytest.mark.parametrize("seed", range(6))
def test_a_server_s_requests_read_token_by_token_or_all_at_once_are_the_same(runs, seed):
    run = with_graphs(ggml_viz.open(runs["one"].path), server_graphs(seed))
    expected = reference_requests(run)
    assert len(expected) > 10 and any(r["generated_tokens"] for r in expected)
    assert breakdowns.requests(run) == expected
    # AND the summary's first ones, with the count of all
    listed, count = breakdowns.requests_and_count(run, 5)
    assert listed == expected[:5] and count == len(expected)


@pytest.mark.parametrize("counts", [[1], [2], [3, 1], [1, 1, 1, 1], [4, 7, 2], [0, 5, 0, 2]])
def test_a_median_from_counts_is_the_median_of_every_value(counts):
    values = np.array([40, 10, 30, 20, 50, 60][: len(counts)], np.int64)
    every = pd.Series(np.repeat(values, counts))
    assert breakdowns._median_of_counts(values, np.array(counts)) == int(every.median())


def with_kv_cache(run: Any, capacities: dict[int, int]) -> Any:
    """`run` with KV cache tensors of these capacities (cells) per layer, k and v."""
    tensors = run.tensors
    rows = [
        {
            **tensors.iloc[0].to_dict(),
            "tensor_id": 10_000 + 2 * layer + part,
            "name": f"cache_{kv}_l{layer}",
            "op": "NONE",
            "layer": layer,
            "ne1": cells,
        }
        for layer, cells in capacities.items()
        for part, kv in enumerate("kv")
    ]
    run.__dict__["tensors"] = pd.concat([tensors, pd.DataFrame(rows).astype(tensors.dtypes.to_dict())])
    return run


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("capacities", [{0: 8, 1: 40, 2: 1000, 3: 40}, {0: 1000, 1: 3000}])
def test_the_kv_cache_s_fill_is_that_of_every_graph_and_layer(runs, seed, capacities):
    run = with_kv_cache(with_graphs(ggml_viz.open(runs["one"].path), server_graphs(seed)), capacities)
    fill = memory.kv_cache_fill(run)
    last = fill[fill["graph_id"] == fill["graph_id"].max()]
    expected = {
        "layers": int(fill["layer"].nunique()),
        "used": int(last["used"].max()),
        "capacity": int(last["capacity"].max()),
        "fill": float(last["fill"].max()),
    }
    assert summary._kv_summary(run) == expected and expected["layers"] == len(capacities)
    kv = memory.kv_cache_extremes(run)
    assert kv is not None and kv["fullest"] == float(fill["fill"].max()) and 0 < kv["fullest"] <= 1


@pytest.mark.parametrize("keys", [[0, 1, 2, 5, 6], [3, 10**9, 2 * 10**9], [-1, 4], []])
def test_graph_ids_are_found_in_a_table_or_by_search(keys):
    ids = np.array([0, 5, 7, -1, 10**9, 4, 2 * 10**9, 3], np.int64)
    expected = [keys.index(i) if i in keys else len(keys) for i in ids.tolist()]
    assert findings._places(np.array(keys, np.int64), ids).tolist() == expected
