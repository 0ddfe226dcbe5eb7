"""A served run's requests in counts and times, from the decode calls that held their tokens (as
llama-server's timings count them): a run of two slots written here, call by call, and the
same figures read token by token from randomized server runs as the reference."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import ggml_viz
from ggml_viz.analysis.requests import (
    QUEUE_WAIT,
    RequestTimes,
    request_batches,
    request_rows,
    request_times,
    requests_summary,
)
from ggml_viz.commands import main
from ggml_viz.runformat.synthetic import write_synthetic_run

from .test_summary_at_scale import server_graphs, with_graphs

MS = 1_000_000
ORIGIN = 5 * MS  # the run's first graph, before any request: the warm-up

# decode calls: (start, end, [(seq, first position, tokens, last asks for logits)], graphs it ran as)
# call 1: two prompts at once (slot 0: 4 tokens, slot 1: 2), run as two graphs, one per sequence
# (as llama.cpp splits a batch by sequence), or all the tokens on the first (as runs recorded before
# the graphs' own tokens were kept hold them); calls 2 and 3: the tokens fed back; call 4: slot 1's
# next request, its first position cached.
CALLS = [
    (10, 20, [(0, 0, 4, True), (1, 0, 2, True)], 2),
    (21, 24, [(0, 4, 1, True), (1, 2, 1, True)], 1),
    (25, 28, [(0, 5, 1, True)], 1),
    (30, 40, [(1, 1, 3, True)], 1),
    (41, 44, [(1, 4, 1, True)], 1),
]


def two_slots(by_sequence: bool = True) -> pa.Table:
    rows: dict[str, list] = {key: [] for key in COLUMNS}

    def graph(phase: str, start: int, end: int, tokens: list, call: int, ubatch: int, call_times: tuple) -> None:
        rows["graph_id"].append(len(rows["graph_id"]))
        rows["phase"].append(phase)
        rows["start_ns"].append(start)
        rows["end_ns"].append(end)
        rows["first_batch_index"].append(4 * ubatch)  # (slot 0's four tokens before slot 1's)
        rows["token_ids"].append([7] * len(tokens))
        rows["token_positions"].append([pos for _, pos, _ in tokens])
        rows["token_seq_ids"].append([seq for seq, _, _ in tokens])
        rows["token_outputs"].append([output for _, _, output in tokens])
        rows["token_texts"].append([f" s{seq}p{pos}" for seq, pos, _ in tokens])
        rows["structure_id"].append(0)
        rows["n_tokens"].append(len(tokens))
        rows["context_id"].append(0)
        rows["decode_index"].append(call)
        rows["ubatch_index"].append(ubatch)
        rows["decode_start_ns"].append(call_times[0])
        rows["decode_end_ns"].append(call_times[1])

    graph("warmup", ORIGIN, ORIGIN + MS, [(0, 0, False), (0, 1, True)], 0, 0, (ORIGIN, ORIGIN + MS))
    for index, (start, end, batch, n_graphs) in enumerate(CALLS, start=1):
        tokens = [(seq, first + k, output and k == n - 1) for seq, first, n, output in batch for k in range(n)]
        phase = "prompt" if len(tokens) > 2 else "decode"
        times = (start * MS, end * MS)
        for ubatch in range(n_graphs):  # the graphs inside the call, a little after it began
            if n_graphs == 1:
                mine = tokens
            else:
                mine = [t for t in tokens if t[0] == ubatch] if by_sequence else (tokens if not ubatch else [])
            graph(phase, times[0] + MS // 2 + ubatch * MS, times[0] + (ubatch + 1) * MS, mine, index, ubatch, times)
    return pa.table({key: pa.array(values, TYPES.get(key)) for key, values in rows.items()})


COLUMNS = ["graph_id", "phase", "start_ns", "end_ns", "first_batch_index", "token_ids", "token_positions",
           "token_seq_ids", "token_outputs", "token_texts", "structure_id", "n_tokens", "context_id",
           "decode_index", "ubatch_index", "decode_start_ns", "decode_end_ns"]  # fmt: skip
TYPES = {"graph_id": pa.int32(), "structure_id": pa.int32(), "n_tokens": pa.int32(), "context_id": pa.int32(),
         "first_batch_index": pa.int32(), "decode_index": pa.int32(), "ubatch_index": pa.int32(),
         "token_ids": pa.list_(pa.int32()), "token_positions": pa.list_(pa.int32()),
         "token_seq_ids": pa.list_(pa.int32())}  # fmt: skip


@pytest.fixture(scope="module")
def blank(tmp_path_factory) -> Any:
    return write_synthetic_run(tmp_path_factory.mktemp("requests") / "one.ggmlviz", graphs=4, layers=1)


@pytest.mark.parametrize("by_sequence", [True, False], ids=["graphs-by-sequence", "tokens-on-the-first-graph"])
def test_each_request_s_counts_and_times_come_from_its_decode_calls(blank, by_sequence):
    # GIVEN two slots' requests, batched together in decode calls
    run = with_graphs(ggml_viz.open(blank), two_slots(by_sequence))
    # WHEN their times are read
    times = request_times(run).set_index("request")
    # THEN three requests, in the order they began, with the server's counts: prompt tokens
    # computed, cached (slot 1's second request starts at position 1), generated (fed back + 1)
    assert times["seq_id"].tolist() == [0, 1, 1]
    assert times["prompt_n"].tolist() == [4, 2, 3]
    assert times["cache_n"].tolist() == [0, 0, 1]
    assert times["predicted_n"].tolist() == [3, 2, 2]
    # AND their times from the calls (not the graphs): prompt from its first call's start to the
    # end of the call holding its last prompt token, decode from there to its last token's call
    assert times["arrival_ns"].tolist() == [10 * MS, 10 * MS, 30 * MS]
    assert times["prompt_ms"].tolist() == [10.0, 10.0, 10.0] and times["ttft_ms"].equals(times["prompt_ms"])
    assert times["predicted_ms"].tolist() == [8.0, 4.0, 4.0]
    assert times["tpot_ms"].tolist() == [4.0, 4.0, 4.0]
    assert times["first_graph_id"].tolist() == [1, 2 if by_sequence else 1, 5]
    assert times["last_graph_id"].tolist() == [4, 3, 6]
    # AND the calls they held tokens in, shared with the other slot's or not, and their share
    assert times["batches"].tolist() == [3, 2, 2] and times["shared_batches"].tolist() == [2, 2, 0]
    assert times["batches_ms"].tolist() == [16.0, 13.0, 13.0]
    assert times["share_ms"].to_numpy() == pytest.approx([10 * 4 / 6 + 1.5 + 3, 10 * 2 / 6 + 1.5, 13.0])


def test_a_request_s_batches_give_its_share_of_each_call(blank):
    run = with_graphs(ggml_viz.open(blank), two_slots())
    batches = request_batches(run)
    first = batches[batches["request"] == 0]
    assert first["decode_index"].tolist() == [1, 2, 3] and first["first_graph_id"].tolist() == [1, 3, 4]
    assert first["tokens"].tolist() == [4, 1, 1] and first["batch_tokens"].tolist() == [6, 2, 1]
    assert first["share"].to_numpy() == pytest.approx([4 / 6, 0.5, 1.0])
    assert first["share_ms"].to_numpy() == pytest.approx([10 * 4 / 6, 1.5, 3.0])
    assert batches.groupby("request")["share_ms"].sum().to_numpy() == pytest.approx(
        request_times(run)["share_ms"].to_numpy()
    )


def test_the_run_s_requests_in_percentiles(blank):
    run = with_graphs(ggml_viz.open(blank), two_slots())
    summary = requests_summary(run)
    assert (summary["n_requests"], summary["prompt_tokens"], summary["cached_tokens"]) == (3, 9, 1)
    assert summary["predicted_tokens"] == 7 and summary["shared_batches"] == pytest.approx(4 / 7)
    assert summary["ttft_ms"] == {"p50": 10.0, "p90": 10.0, "p99": 10.0, "max": 10.0}
    assert summary["predicted_ms"]["p50"] == 4.0 and summary["predicted_ms"]["max"] == 8.0
    assert summary["predicted_ms"]["p90"] == pytest.approx(7.2)
    assert summary["queue_wait"] == QUEUE_WAIT and "not seen" in QUEUE_WAIT
    # AND the rows as records hold what RequestTimes declares
    assert [set(row) for row in request_rows(run)] == [set(RequestTimes.__annotations__)] * 3


def test_a_run_of_no_requests_has_none(blank):
    run = with_graphs(ggml_viz.open(blank), two_slots().slice(0, 1))  # the warm-up alone
    assert request_times(run).empty and request_batches(run).empty
    assert requests_summary(run)["n_requests"] == 0 and requests_summary(run)["ttft_ms"]["p50"] is None


# ---- the reference: token by token, over every graph and token in pandas


def reference_times(run: Any) -> pd.DataFrame:
    graphs = run.arrow("graphs").to_pandas()
    graphs["call"] = np.where(
        graphs["decode_index"] >= 0,
        graphs["context_id"].fillna(-1).astype(int).astype(str) + ":" + graphs["decode_index"].astype(str),
        "g" + graphs["graph_id"].astype(str),
    )
    in_call = graphs["decode_index"] >= 0
    graphs["call_start"] = graphs["decode_start_ns"].where(in_call, graphs["start_ns"])
    graphs["call_end"] = graphs["decode_end_ns"].where(in_call, graphs["end_ns"])
    starts = graphs.groupby("call")["call_start"].min()
    ends = graphs.groupby("call")["call_end"].max()
    tokens = graphs.explode(["token_positions", "token_seq_ids", "token_outputs"]).dropna(subset=["token_seq_ids"])
    tokens["batch_index"] = tokens["first_batch_index"] + tokens.groupby(level=0).cumcount()
    tokens = tokens[tokens["phase"].isin(["prompt", "decode"]) & (tokens["token_seq_ids"] >= 0)]
    # in reading order: by decode call's start, place in its batch, then call (by its first graph)
    tokens["call_start"] = tokens["call"].map(starts)
    tokens["call_first"] = tokens["call"].map(graphs.groupby("call")["graph_id"].min())
    tokens = tokens.sort_values(["call_start", "batch_index", "call_first"], kind="stable")
    in_batch = tokens.groupby(["call", "token_seq_ids"])["token_positions"].transform("size").to_numpy()
    found: list[dict[str, Any]] = []
    current: dict[int, dict[str, Any]] = {}
    columns = [tokens[name] for name in ("token_seq_ids", "token_positions", "token_outputs", "call")]
    for several, seq, pos, output, call in zip(in_batch > 1, *columns, strict=True):
        request = current.get(int(seq))
        if request is None or pos <= request["last_pos"] or (several and request["fed_back"]):
            request = current[int(seq)] = {"seq_id": int(seq), "cache_n": int(pos), "prompt_n": 0, "fed_back": 0,
                                           "asked": False, "calls": [], "prompt_calls": [], "last_pos": -1}  # fmt: skip
            found.append(request)
        fed_back = request["asked"] and not several
        request["fed_back" if fed_back else "prompt_n"] += 1
        request["calls"].append(call)
        if not fed_back:
            request["prompt_calls"].append(call)
            request["asked"] = request["asked"] or bool(output)
        request["last_pos"] = int(pos)
    rows = []
    for request in found:
        prompt_end = ends[request["prompt_calls"]].max()
        end = ends[request["calls"]].max()
        predicted_n = request["fed_back"] + request["asked"]
        rows.append(
            {
                "seq_id": request["seq_id"],
                "prompt_n": request["prompt_n"],
                "cache_n": request["cache_n"],
                "predicted_n": predicted_n,
                "prompt_ms": (prompt_end - starts[request["calls"]].min()) / MS,
                "predicted_ms": (end - prompt_end) / MS,
                "batches": len(set(request["calls"])),
            }
        )
    return pd.DataFrame(rows)


def with_calls(graphs: pa.Table, seed: int) -> pa.Table:
    """`graphs` (by start) grouped into decode calls of 1 to 3 graphs each, the calls' times theirs;
    a few graphs outside any call."""
    rng = np.random.default_rng(seed)
    table = graphs.sort_by([("start_ns", "ascending"), ("graph_id", "ascending")])
    n = table.num_rows
    call = np.cumsum(rng.random(n) < 0.5) - 1
    outside = rng.random(n) < 0.03
    start, end = table.column("start_ns").to_numpy(), table.column("end_ns").to_numpy()
    call_start = pd.Series(start).groupby(call).transform("min").to_numpy()
    call_end = pd.Series(end).groupby(call).transform("max").to_numpy() + 50
    return (
        table.append_column("decode_index", pa.array(np.where(outside, -1, call), pa.int32()))
        .append_column("ubatch_index", pa.array(np.zeros(n), pa.int32()))
        .append_column("decode_start_ns", pa.array(np.where(outside, -1, call_start)))
        .append_column("decode_end_ns", pa.array(np.where(outside, -1, call_end)))
    )


@pytest.mark.parametrize("seed", range(4))
def test_request_times_are_those_read_token_by_token(blank, seed):
    # GIVEN randomized server graphs: several sequences, prompts after generating, calls of
    # several graphs (one context, as one server's)
    graphs = server_graphs(seed)
    graphs = graphs.set_column(graphs.schema.get_field_index("context_id"), "context_id",
                               pa.array(np.zeros(graphs.num_rows), pa.int32()))  # fmt: skip
    run = with_graphs(ggml_viz.open(blank), with_calls(graphs, seed))
    # WHEN the request times are read
    times = request_times(run)
    # THEN they are the token-by-token reference's
    expected = reference_times(run)
    assert len(expected) > 10
    columns = list(expected.columns)
    pd.testing.assert_frame_equal(times[columns], expected, check_dtype=False)


# ---- where they are shown: the summary (text and JSON) and the query views


def test_the_summary_says_a_server_s_requests_in_words_and_gives_them_in_json(tmp_path, monkeypatch):
    # GIVEN a server's run (three sequences taking turns)
    path = write_synthetic_run(tmp_path / "server.ggmlviz", graphs=12, layers=1, sequences=3)
    monkeypatch.setenv("COLUMNS", "2000")
    # WHEN it is summarized
    text, as_json = command_output("summary", str(path)), json.loads(command_output("summary", str(path), "--json"))
    # THEN a Requests section gives the counts and the percentiles, and says why no queue wait
    section = text[text.index("\nRequests\n") + 1 :].splitlines()[1:8]
    assert section[0].strip() == "3 requests: 3 prompt tokens computed, 0 found cached, 12 generated"
    assert section[1].strip().startswith("time to first token: p50 0.5, p90 0.5, p99 0.5, max 0.5 ms")
    assert section[2].strip().startswith("time per output token: p50 1.")
    assert any(line.strip().startswith("queue wait: not seen") for line in section)
    # AND the JSON holds the same figures
    figures = as_json["request_times"]
    assert figures["n_requests"] == as_json["n_requests"] == 3 and figures["predicted_tokens"] == 12
    assert figures == json.loads(json.dumps(requests_summary(ggml_viz.open(path))))


def test_the_query_views_are_computed_from_the_run_when_asked_for(tmp_path):
    # GIVEN a server's run and a run beside it in one folder
    folder = tmp_path / "runs"
    server = write_synthetic_run(folder / "a-server.ggmlviz", graphs=12, layers=1, sequences=3)
    write_synthetic_run(folder / "b-one.ggmlviz", graphs=4, layers=1)
    # WHEN the requests and their decode calls are asked for over the folder
    sql = "select * from requests order by run, request"
    rows = json.loads(command_output("query", str(folder), sql, "-o", "json"))
    batches = json.loads(command_output("query", str(server), "select * from request_batches", "-o", "json"))
    # THEN each run's requests, each row naming its run, with request_times' columns
    runs = [("a-server.ggmlviz", request) for request in range(3)] + [("b-one.ggmlviz", 0)]
    assert [(row["run"], row["request"]) for row in rows] == runs
    expected = request_times(ggml_viz.open(server))
    assert [row["prompt_ms"] for row in rows[:3]] == pytest.approx(expected["prompt_ms"].tolist())
    assert set(rows[0]) == {"run", *RequestTimes.__annotations__}
    assert len(batches) == expected["batches"].sum() and {row["share"] for row in batches} == {1.0}
    # AND the stored run holds no such table: the views are made by the package, on the fly
    assert not any("request" in part.name for part in server.rglob("*"))


def command_output(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()
