"""The live metrics' requests, read call by call as the collector closes them (capture/metrics/), against
the run's request table (analysis/requests.py) over the same decode calls: a hand-made run of two
slots, and randomized servers batching several slots' prompts and steps; then the metrics a
recording's observer serves, from decode calls as the spool brings them (the warm-up no request)."""

from __future__ import annotations

import socket
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from prometheus_client import generate_latest

import ggml_viz
from ggml_viz.analysis.requests import request_times
from ggml_viz.capture.contract.records import DECODE, DecodesRecord
from ggml_viz.capture.metrics.exporter import RunMetrics, parse_address
from ggml_viz.capture.metrics.served import CallOutcome, ServedRequests
from ggml_viz.commands import main
from ggml_viz.runformat.synthetic import write_synthetic_run

from .test_request_times import COLUMNS, TYPES, two_slots
from .test_summary_at_scale import with_graphs

MS = 1_000_000


@pytest.fixture(scope="module")
def blank(tmp_path_factory) -> Any:
    return write_synthetic_run(tmp_path_factory.mktemp("metrics") / "one.ggmlviz", graphs=4, layers=1)


def calls_of(graphs: pa.Table) -> list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """The decode calls of a graphs table, in the order they began: (start, end, seq_ids, positions,
    outputs), the tokens of requests in the batch's order (what the spool brings of each call)."""
    rows = graphs.to_pylist()
    calls: dict[int, dict[str, Any]] = {}
    for row in rows:
        if row["phase"] not in ("prompt", "decode"):
            continue
        call = calls.setdefault(row["decode_index"], {"start": row["decode_start_ns"], "end": row["decode_end_ns"],
                                                      "tokens": []})  # fmt: skip
        indexes = range(row["first_batch_index"], row["first_batch_index"] + len(row["token_seq_ids"]))
        calls[row["decode_index"]]["tokens"] += zip(
            indexes, row["token_seq_ids"], row["token_positions"], row["token_outputs"], strict=True
        )
    found = []
    for call in sorted(calls.values(), key=lambda call: call["start"]):
        tokens = sorted(call["tokens"])
        found.append((call["start"], call["end"], *(np.array([t[k] for t in tokens]) for k in (1, 2, 3))))
    return found


def read_online(graphs: pa.Table) -> tuple[list[CallOutcome], ServedRequests]:
    served = ServedRequests()
    return [served.read_call(*call) for call in calls_of(graphs)], served


def served_graphs(seed: int, n_calls: int = 120, slots: int = 4, n_batch: int = 8) -> pa.Table:
    """A server's decode calls, one graph each: its slots' requests, a prompt split into calls of at
    most n_batch tokens (the last one asking for logits), then its tokens fed back one per step, all
    the busy slots' together in one call; a slot's next request goes back to a position of its last
    one (a cached prefix) or goes on from where it ended (a prompt after generating)."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {key: [] for key in COLUMNS}
    state = {slot: {"pos": 0, "prompt": 0, "left": 0} for slot in range(slots)}
    clock = 10 * MS
    for call in range(n_calls):
        tokens = []  # (seq, pos, output)
        room = n_batch + slots
        for slot in rng.permutation(slots).tolist():
            s = state[slot]
            if s["prompt"] == 0 and s["left"] == 0 and rng.random() < 0.4:  # a new request on an idle slot
                s["pos"] = int(rng.integers(0, s["pos"] + 1)) if rng.random() < 0.7 else s["pos"]
                # (at least one token fed back: a prompt going on after one that generated a single token,
                # unfed, is one request to the run's table, whose prompt ends only with the second)
                s["prompt"], s["left"] = int(rng.integers(1, 20)), int(rng.integers(2, 6))
            if s["prompt"]:
                n = min(s["prompt"], n_batch, room)
                if n <= 0:
                    continue
                s["prompt"] -= n
                tokens += [(slot, s["pos"] + k, s["prompt"] == 0 and k == n - 1) for k in range(n)]
                s["pos"] += n
                s["left"] -= s["prompt"] == 0
                room -= n
            elif s["left"] > 0:
                tokens.append((slot, s["pos"], True))
                s["pos"] += 1
                s["left"] -= 1
        if not tokens:
            continue
        start, end = clock, clock + int(rng.integers(1, 30)) * MS
        clock = end + int(rng.integers(0, 5)) * MS
        several = len(tokens) != len({seq for seq, _, _ in tokens})
        graph = len(rows["graph_id"])
        for key, value in (("graph_id", graph), ("phase", "prompt" if several else "decode"), ("start_ns", start),
                           ("end_ns", end), ("first_batch_index", 0), ("token_ids", [7] * len(tokens)),
                           ("token_positions", [p for _, p, _ in tokens]), ("token_seq_ids", [s for s, _, _ in tokens]),
                           ("token_outputs", [o for _, _, o in tokens]), ("token_texts", [""] * len(tokens)),
                           ("structure_id", 0), ("n_tokens", len(tokens)), ("context_id", 0), ("decode_index", call),
                           ("ubatch_index", 0), ("decode_start_ns", start), ("decode_end_ns", end)):  # fmt: skip
            rows[key].append(value)
    return pa.table({key: pa.array(values, TYPES.get(key)) for key, values in rows.items()})


def test_two_slots_requests_read_call_by_call_are_the_run_s(blank):
    # GIVEN two slots' requests batched together (analysis' hand-made run)
    graphs = two_slots()
    # WHEN their calls are read one by one, as they close
    outcomes, served = read_online(graphs)
    # THEN the requests, tokens and times are the run's request table's
    times = request_times(with_graphs(ggml_viz.open(blank), graphs))
    assert sum(o.requests_begun for o in outcomes) == len(times) == 3
    assert sum(o.prompt_tokens for o in outcomes) == times["prompt_n"].sum() == 9
    assert sum(o.generated_tokens for o in outcomes) == times["predicted_n"].sum() == 7
    first_tokens = [seconds for o in outcomes for seconds in o.first_token_seconds]
    assert first_tokens == pytest.approx((times["ttft_ms"] / 1e3).tolist())
    steps = [seconds for o in outcomes for seconds in o.token_step_seconds]
    assert steps == pytest.approx([0.004, 0.004, 0.004, 0.004])  # each step: the end of its call since the last's
    assert sum(steps) == pytest.approx(times["predicted_ms"].sum() / 1e3)
    # AND the KV cells: slot 0 up to position 5, slot 1's second request (from position 1) up to 4
    assert served.cells_used == 6 + 5


@pytest.mark.parametrize("seed", range(4))
def test_a_server_s_requests_read_call_by_call_are_the_run_s(blank, seed):
    # GIVEN a server's calls: several slots' prompts split over calls, steps of every busy slot together
    graphs = served_graphs(seed)
    # WHEN they are read call by call
    outcomes, served = read_online(graphs)
    # THEN the requests and their tokens are the run's request table's
    times = request_times(with_graphs(ggml_viz.open(blank), graphs))
    assert len(times) > 10
    assert sum(o.requests_begun for o in outcomes) == len(times)
    assert sum(o.prompt_tokens for o in outcomes) == times["prompt_n"].sum()
    assert sum(o.generated_tokens for o in outcomes) == times["predicted_n"].sum()
    # AND a time to first token per request whose prompt ended, the run's
    first_tokens = sorted(seconds for o in outcomes for seconds in o.first_token_seconds)
    asked = times[times["predicted_n"] > 0]
    assert first_tokens == pytest.approx(sorted(asked["ttft_ms"] / 1e3))
    # AND a step per token fed back, adding up to each request's generation time
    steps = [seconds for o in outcomes for seconds in o.token_step_seconds]
    assert len(steps) == (asked["predicted_n"] - 1).sum()
    assert sum(steps) == pytest.approx(times["predicted_ms"].sum() / 1e3)
    # AND the KV cells the slots hold: each its last request's cached prefix, prompt and tokens fed back
    last = times.sort_values("arrival_ns").groupby("seq_id").last()
    fed_back = np.maximum(last["predicted_n"] - 1, 0)
    assert served.cells_used == (last["cache_n"] + last["prompt_n"] + fed_back).sum()


def decodes_record(calls: list[tuple[int, int, list[tuple[int, int, int, bool]]]]) -> DecodesRecord:
    """A DecodesRecord as the spool brings it: per call (start, end, tokens (token, seq, pos, output))."""
    records, tokens = [], []
    for index, (start, end, batch) in enumerate(calls):
        records.append((index, start, end, 0, len(batch), min(p for _, _, p, _ in batch), 1, len(tokens)))
        tokens += batch
    column = [np.array([t[k] for t in tokens], np.int32).tobytes() for k in range(3)]
    outputs = np.array([t[3] for t in tokens], np.uint8).tobytes()
    return DecodesRecord(np.array(records, DECODE.dtype).tobytes(), column[0], column[2], column[1], outputs)


def test_the_observer_serves_a_server_s_calls_as_metrics():
    # GIVEN a recording's observer told of llama-server's context (BOS 1, EOS 2) and its calls: the
    # warm-up (BOS, EOS), a prompt of three tokens, two steps
    metrics = RunMetrics(["/usr/bin/llama-server", "-m", "model.gguf"])
    metrics.observe_context(0, {"n_ctx": 512, "model": {"description": "llama 135M"}}, ((1, 2), (0, 0)))
    metrics.observe_calls(0, decodes_record([
        (0, 5 * MS, [(1, 0, 0, False), (2, 0, 1, True)]),
        (10 * MS, 30 * MS, [(5, 0, 0, False), (6, 0, 1, False), (7, 0, 2, True)]),
        (31 * MS, 35 * MS, [(8, 0, 3, True)]),
        (36 * MS, 41 * MS, [(9, 0, 4, True)]),
    ]))  # fmt: skip
    metrics.observe_graph(0, {"MUL_MAT": 0.25, "ADD": 0.05})
    metrics.observe_recorder({"dropped_events": 12})
    # WHEN it is scraped
    text = generate_latest(metrics.registry).decode()
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"}
    # THEN the warm-up is no request: one request, its three prompt tokens, three generated
    assert samples["ggml_viz_requests_total"] == 1 and samples["ggml_viz_prompt_tokens_total"] == 3
    assert samples["ggml_viz_generated_tokens_total"] == 3
    assert samples["ggml_viz_time_to_first_token_seconds_sum"] == pytest.approx(0.020)
    assert samples["ggml_viz_time_per_output_token_seconds_count"] == 2
    assert samples["ggml_viz_time_per_output_token_seconds_sum"] == pytest.approx(0.011)
    assert samples['ggml_viz_decode_call_seconds_count{phase="prompt"}'] == 1
    assert samples['ggml_viz_decode_call_seconds_count{phase="decode"}'] == 2
    # AND the KV cells its sequence holds, of the context's, the time by op, the drops and the program
    assert samples['ggml_viz_kv_cells_used{context="0"}'] == 5
    assert samples['ggml_viz_kv_cells_capacity{context="0"}'] == 512
    assert samples['ggml_viz_op_seconds_total{op="MUL_MAT"}'] == 0.25
    assert samples["ggml_viz_dropped_node_events_total"] == 12
    assert samples['ggml_viz_program_info{model="llama 135M",program="llama-server"}'] == 1
    # AND no GPU share without GPU times
    assert "ggml_viz_gpu_busy_ratio" not in text


@pytest.mark.parametrize(
    ("address", "expected"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:80", ("::1", 80)), (":9464", ("0.0.0.0", 9464))],
)
def test_a_metrics_address_is_host_and_port(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["9464", "localhost:", "localhost:http", "h:70000"])
def test_an_address_without_a_port_is_refused(address):
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address(address)


def test_run_refuses_an_address_it_cannot_serve_before_starting_the_program(tmp_path, capsys):
    # GIVEN a port another program holds
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        marker = tmp_path / "ran"
        # WHEN a program is run with its metrics asked there
        status = main(["run", "--metrics", f"127.0.0.1:{port}", "-o", str(tmp_path / "out.ggmlviz"), "--",
                       "sh", "-c", f"touch {marker}"])  # fmt: skip
    # THEN the command says why and ends, the program never started
    assert status != 0
    assert f"cannot serve at 127.0.0.1:{port}" in capsys.readouterr().err
    assert not marker.exists()
