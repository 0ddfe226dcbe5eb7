"""llama.cpp's distributed inference (its RPC backend) over loopback: ggml-rpc-server workers and a
llama-completion / llama-server head, each recorded by `ggml-viz run`, joined into one experiment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import get_type_hints

import pandas as pd
import pytest

import ggml_viz
from ggml_viz.analysis.join import join_runs, match_connections, paired_messages, summarize_joined

from ..browser import chromium, collect_errors, serving
from ..payload_shapes import shape_problems
from .arch_models import write_model
from .native import llama_cpp_lib_dir, llama_tool, missing, untraced
from .rpc_workers import REGISTER_WORKER, Worker, free_port, start_worker, wait_for_port
from .smollm2 import ggml_viz_cli

pytestmark = pytest.mark.model

PROMPT = "The capital of France is"
N_PREDICT = 8


def head_command(model: Path, workers: list[Worker], n_predict: int = N_PREDICT) -> list[str]:
    return [
        str(llama_tool("llama-completion")),
        "-m",
        str(model),
        "--rpc",
        ",".join(w.endpoint for w in workers),
        "-ngl",
        "99",
        "-p",
        PROMPT,
        "-n",
        str(n_predict),
        "--temp",
        "0",
        "--ignore-eos",
        "-no-cnv",
        "--no-warmup",
        "-t",
        "1",
        "-c",
        "512",
    ]


@dataclass
class DistributedRun:
    head: Path
    workers: list[Worker]
    traced_text: str
    untraced_text: str


@pytest.fixture(scope="module")
def distributed(tmp_path_factory, model_path) -> DistributedRun:
    """SmolLM2 split over two recorded workers: the head run untraced once, then recorded."""
    folder = tmp_path_factory.mktemp("distributed")
    workers = [start_worker(folder, "w1"), start_worker(folder, "w2")]
    try:
        plain = untraced(head_command(model_path, workers))
        assert plain.returncode == 0, plain.stderr[-2000:]
        head = folder / "head.ggmlviz"
        traced = ggml_viz_cli("run", "-o", str(head), "--", *head_command(model_path, workers))
        assert traced.returncode == 0, traced.stderr[-2000:]
    finally:
        statuses = [worker.stop() for worker in workers]
    assert statuses == [128 + signal.SIGTERM] * 2, [w.log.read_text()[-2000:] for w in workers]
    return DistributedRun(head, workers, traced.stdout, plain.stdout)


def test_the_head_says_what_it_says_untraced_and_every_run_is_complete(distributed):
    # GIVEN SmolLM2 split over two workers, greedy, the head run untraced and then recorded
    # THEN the text is the same, byte for byte
    assert PROMPT in distributed.traced_text and distributed.traced_text == distributed.untraced_text
    # AND the head's run and both workers' (stopped with SIGTERM once idle) are complete
    for path in [distributed.head, *(w.output for w in distributed.workers)]:
        run = ggml_viz.open(path)
        assert run.status == "complete", (path, run.manifest.get("incomplete_reason"))
    # AND each worker's graphs have every node timed on the worker (its CPU backend's ticks)
    for worker in distributed.workers:
        run = ggml_viz.open(worker.output)
        assert [c["kind"] for c in run.manifest["contexts"]] == ["backend"]
        nodes = run.nodes
        assert len(nodes) > 0 and nodes["start_ns"].notna().all()


def test_every_remote_node_has_its_workers_time(distributed):
    # GIVEN the head's run joined with its two workers'
    runs = [ggml_viz.open(distributed.head), *(ggml_viz.open(w.output) for w in distributed.workers)]
    joined = join_runs(runs)
    head = runs[0]
    remote = joined.remote_nodes()
    splits = joined.tables["splits"]
    # THEN every graph of the recorded head had its splits computed on both workers
    assert set(splits["host"]) == {w.endpoint for w in distributed.workers}
    assert set(splits["head_graph_id"]) == set(head.graphs["graph_id"])
    # AND every node the head ran on a worker (its output in an RPC buffer) has that worker's time
    head_nodes = head.nodes_of(head.graphs["graph_id"], times=False)
    on_workers = head_nodes[head_nodes["buffer_name"].fillna("").str.startswith("RPC")]
    timed = remote[remote["duration_ns"].notna() & (remote["head_node_index"] >= 0)]
    matched = on_workers.merge(timed, left_on=["graph_id", "node_index"], right_on=["head_graph_id", "head_node_index"])
    assert len(on_workers) > 0 and len(matched) == len(on_workers)
    # AND on its own host: the buffer the head put the node in names the worker that computed it
    for host, rows in matched.groupby("host"):
        assert rows["buffer_name"].str.endswith(f"[{host}]").all()
    # AND the clocks (one clock here: loopback) are found equal within the stated uncertainty
    for worker in joined.workers:
        assert worker.clock is not None and worker.clock.consistent
        assert worker.clock.lower_ns <= 0 <= worker.clock.upper_ns
        assert worker.clock.messages > 100
    # AND a worker's compute lies within the head's wait for it, on the head's clock (give or take
    # the offset's uncertainty)
    slack = splits["host"].map({w.host: w.clock.uncertainty_ns for w in joined.workers if w.clock})
    assert (splits["head_wait_ns"] > 0).all()
    assert (splits["compute_start_ns"] >= splits["sent_ns"] - slack).all()
    assert (splits["compute_end_ns"] <= splits["sent_ns"] + splits["head_wait_ns"] + slack).all()


def test_transfers_carry_exactly_the_tensors_sent(distributed):
    # GIVEN the traced head's messages, as each worker received them
    runs = [ggml_viz.open(distributed.head), *(ggml_viz.open(w.output) for w in distributed.workers)]
    joined = join_runs(runs)
    transfers = joined.tables["transfers"]
    during = transfers[transfers["head_graph_id"] >= 0]
    # THEN each input a split was sent (SET_TENSOR) is exactly the bytes of that tensor in the
    # graph the worker computed next
    for worker, run in zip(joined.workers, runs[1:], strict=True):
        splits = joined.tables["splits"]
        graphs = splits[splits["host"] == worker.host].sort_values("sequence")
        sets = during[(during["host"] == worker.host) & (during["command"] == "SET_TENSOR")]
        assert len(sets) > 0
        for message in sets.itertuples():
            graph = graphs[graphs["sequence"] > message.sequence].iloc[0]
            sources = run.edges_of_graphs([int(graph["worker_graph_id"])])
            sizes = set(sources.loc[sources["src_name"] == message.tensor_name, "src_nbytes"])
            assert sizes == {message.data_bytes}, (message.tensor_name, sizes, message.data_bytes)
    # AND each result read back (GET_TENSOR) is the bytes of the head's node of that name
    head = runs[0]
    gets = during[(during["command"] == "GET_TENSOR") & (during["direction"] == "to_head")]
    assert len(gets) > 0
    for message in gets.itertuples():
        nodes = head.nodes_of([int(message.head_graph_id)], times=False)
        assert set(nodes.loc[nodes["name"] == message.tensor_name, "nbytes"]) == {message.data_bytes}
    # AND every message the head recorded, its worker recorded too, of the same command and size
    messages = head.raw("rpc_messages")
    for worker, run in zip(joined.workers, runs[1:], strict=True):
        theirs = messages[messages["connection"].isin(list(worker.connections.values()))]
        assert len(theirs) > 0 and len(paired_messages(head, run, worker.connections)) == len(theirs)


def test_recording_the_head_keeps_graph_recompute(distributed):
    # GIVEN what the workers received from the head run untraced and from the head recorded
    runs = [ggml_viz.open(w.output) for w in distributed.workers]
    head = ggml_viz.open(distributed.head)
    for run in runs:
        messages = run.raw("rpc_messages")
        connections = pd.DataFrame(run.manifest["rpc"]["connections"])
        # the recorded head's connections (ports may have been reused between the two sessions)
        traced = set(match_connections(head, run))
        assert len(traced) == len(head.manifest["rpc"]["connections"]) // len(runs)
        # the graphs and the tensors they move (a buffer's life at the program's exit may end
        # before its last requests are sent: those are left out)
        moving = messages["command"].isin(["GRAPH_COMPUTE", "GRAPH_RECOMPUTE", "SET_TENSOR", "GET_TENSOR"])
        requests = messages[~messages["is_response"] & moving]
        by_session = {
            name: requests[requests["connection"].isin(chosen)].groupby("command")["bytes"].agg(["count", "sum"])
            for name, chosen in (("traced", traced), ("untraced", set(connections["connection"]) - traced))
        }
        # THEN the head sent the same requests of the same sizes either way: recording it turned
        # no GRAPH_RECOMPUTE into a full GRAPH_COMPUTE
        assert by_session["traced"].loc["GRAPH_RECOMPUTE", "count"] >= N_PREDICT - 2
        pd.testing.assert_frame_equal(by_session["traced"], by_session["untraced"])


def test_join_command_writes_the_experiment_that_query_and_summary_read(distributed, tmp_path):
    # GIVEN `ggml-viz join` over the head and its workers, with a trace
    output, trace = tmp_path / "france.joined", tmp_path / "france.json"
    paths = [str(distributed.head), *(str(w.output) for w in distributed.workers)]
    result = ggml_viz_cli("join", *paths, "-o", str(output), "--trace", str(trace), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    # THEN its summary gives the time per host, the head's waits and the slowest worker
    hosts = {host["host"]: host for host in summary["hosts"]}
    assert {w.endpoint for w in distributed.workers} <= set(hosts)
    workers = [host for host in summary["hosts"] if host["role"] == "worker"]
    assert all(host["compute_ns"] > 0 and host["head_wait_ns"] >= host["compute_ns"] for host in workers)
    assert summary["slowest_worker"] == max(workers, key=lambda host: host["compute_ns"])["host"]
    assert 0 < summary["head_wait_ns"] <= summary["head"]["time_ns"]
    assert (
        summary["remote_nodes"]["nodes"]
        == summary["remote_nodes"]["timed"]
        == summary["remote_nodes"]["matched_to_head"]
    )
    # AND where one step's time goes, per phase: the head's own part, each worker's compute and
    # the wire make up the step (exactly for the one prompt graph; medians of the decode steps are
    # each within a step)
    steps = {step["phase"]: step for step in summary["steps"]}
    assert steps["decode"]["graphs"] == N_PREDICT - 1 and steps["prompt"]["graphs"] == 1
    for phase, step in steps.items():
        assert set(step["worker_compute_ns"]) == {w.endpoint for w in distributed.workers}
        parts = [step["head_own_ns"], *step["worker_compute_ns"].values(), step["wire_and_protocol_ns"]]
        assert all(0 <= part <= step["step_ns"] for part in parts)
        if phase == "prompt":
            assert abs(sum(parts) - step["step_ns"]) <= 1000
    # AND `summary` prints it again from the folder
    again = ggml_viz_cli("summary", str(output), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["experiment_id"] == summary["experiment_id"]
    # AND SQL over the folder: joined tables beside every member run's views, rows knowing host and process
    query = ggml_viz_cli(
        "query",
        str(output),
        "select h.rpc_role as role, n.pid, count(*) as nodes from nodes n join runs h using (run) group by all",
        "-o",
        "json",
    )
    assert query.returncode == 0, query.stderr
    rows = json.loads(query.stdout)
    assert sorted(row["role"] for row in rows) == ["head", "worker", "worker"]
    assert len({row["pid"] for row in rows}) == 3 and all(row["nodes"] > 0 for row in rows)
    per_host = ggml_viz_cli(
        "query",
        str(output),
        "select host, count(*) n from remote_nodes where duration_ns is not null group by host",
        "-o",
        "json",
    )
    assert {row["host"] for row in json.loads(per_host.stdout)} == {w.endpoint for w in distributed.workers}
    # AND the Parquet files read without ggml-viz
    assert len(pd.read_parquet(output / "transfers.parquet")) == summary["wire"]["messages"]
    # AND the trace has one process per host, all on the head's clock
    events = json.loads(trace.read_text())["traceEvents"]
    processes = {event["args"]["name"].split()[0] for event in events if event.get("name") == "process_name"}
    assert processes == {"head", "worker"} and sum(event.get("name") == "process_name" for event in events) == 3


def test_whatif_splits_the_layers_between_two_workers_as_tensor_split_does(distributed, tmp_path):
    # GIVEN SmolLM2 split over two recorded workers (-ngl 99, llama.cpp's default split), joined
    paths = [str(distributed.head), *(str(w.output) for w in distributed.workers)]
    joined = tmp_path / "two.joined"
    assert ggml_viz_cli("join", *paths, "-o", str(joined)).returncode == 0
    # WHEN other splits between the two are asked for
    result = ggml_viz_cli("whatif", str(joined), "-ts", "3/1,1/3", "--json")
    assert result.returncode == 0, result.stderr
    prediction = json.loads(result.stdout)
    # THEN the recorded split is read from where the blocks ran: every block on a worker, each its share
    recorded = prediction["recorded_placement"]
    assert recorded["ngl"] == 31 and len(recorded["split"]) == 2 and min(recorded["split"]) > 0
    assert sum(recorded["split"]) == pytest.approx(1)
    # AND its predicted rates are those of its own steps, within 3 %
    for phase in ("prompt", "decode"):
        assert prediction["check"][phase]["ratio"] == pytest.approx(1, abs=0.03), prediction["check"]
    # AND 3/1 gives the first worker three layers in four, 1/3 the second, each with their weights
    first, second = prediction["others"]
    rows = {tuple(row["split"]): row for row in prediction["predictions"] if not row["recorded"]}
    more, less = rows[(3.0, 1.0)], rows[(1.0, 3.0)]
    assert more["flags"].endswith("-ts 3,1") and more["layers_on"][first] > 2 * more["layers_on"][second]
    assert less["layers_on"][second] > 2 * less["layers_on"][first]
    assert more["memory"][first]["weights"] > less["memory"][first]["weights"]
    assert more["crossings"] == less["crossings"] == 3  # to the first worker, to the second, back


def test_joining_runs_that_do_not_belong_together_says_so(distributed, tmp_path):
    # GIVEN a worker's run alone, and a head's run given twice
    result = ggml_viz_cli("join", str(distributed.workers[0].output), "-o", str(tmp_path / "j"))
    # THEN one clear line each
    assert result.returncode != 0 and "exactly one head" in result.stderr and "Traceback" not in result.stderr
    twice = ggml_viz_cli("join", str(distributed.head), str(distributed.head), "-o", str(tmp_path / "j"))
    assert twice.returncode != 0 and "exactly one head" in twice.stderr


def test_llama_server_over_rpc_with_a_written_model(tmp_path):
    # GIVEN a qwen2 model the test writes, served by llama-server on one recorded worker
    spec = write_model(tmp_path / "qwen2.gguf", "qwen2")
    worker = start_worker(tmp_path, "worker")
    port = free_port()
    server_command = [
        str(llama_tool("llama-server")),
        "-m",
        str(spec.path),
        "--rpc",
        worker.endpoint,
        "-ngl",
        "99",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        "512",
        "-t",
        "1",
        "-np",
        "1",
    ]
    head = tmp_path / "server.ggmlviz"
    server = subprocess.Popen(
        [sys.executable, "-m", "ggml_viz", "run", "-o", str(head), "--", *server_command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        answer = _complete(port, server)
        assert answer
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
        worker.stop()
    # WHEN joined
    joined = join_runs([ggml_viz.open(head), ggml_viz.open(worker.output)])
    summary = summarize_joined(joined)
    # THEN every node the worker computed for the server has its time, matched to the server's graph
    nodes = summary["remote_nodes"]
    assert nodes["nodes"] > 0 and nodes["nodes"] == nodes["timed"] == nodes["matched_to_head"]
    assert summary["slowest_worker"] == worker.endpoint
    # AND it holds the keys summarize_joined declares, however deep (tests/unit/test_result_types.py
    # checks the other producers on synthetic runs; a join needs a recorded head and worker)
    assert summary["steps"] and shape_problems(summary, get_type_hints(summarize_joined)["return"]) == []


def _complete(port: int, server: subprocess.Popen) -> str:
    import urllib.request

    deadline = time.monotonic() + 120
    request = json.dumps({"prompt": PROMPT, "n_predict": 4, "temperature": 0}).encode()
    while time.monotonic() < deadline:
        assert server.poll() is None, server.stderr.read() if server.stderr else ""
        try:
            with urllib.request.urlopen(
                urllib.request.Request(
                    f"http://127.0.0.1:{port}/completion", request, {"Content-Type": "application/json"}
                ),
                timeout=60,
            ) as r:
                return str(json.loads(r.read())["content"])
        except OSError:
            time.sleep(0.25)
    raise AssertionError("llama-server did not answer")


def test_a_worker_killed_mid_run_leaves_both_runs_readable(tmp_path, model_path):
    # GIVEN a long greedy generation on one recorded worker
    worker = start_worker(tmp_path, "worker")
    head = tmp_path / "head.ggmlviz"
    generation = subprocess.Popen(
        [sys.executable, "-m", "ggml_viz", "run", "-o", str(head), "--", *head_command(model_path, [worker], 2000)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while (
            not list(worker.output.glob("spool/*.spool"))
            or os.path.getsize(next(worker.output.glob("spool/*.spool"))) < 2_000_000
        ):
            assert time.monotonic() < deadline and generation.poll() is None
            time.sleep(0.2)
        # WHEN the worker is killed mid-run
        os.kill(worker.server_pid(), signal.SIGKILL)
        status = generation.wait(timeout=120)
    finally:
        if generation.poll() is None:
            generation.kill()
        worker.stop()
    # THEN the head fails as llama.cpp does without its worker
    assert status != 0
    # AND both runs open, each marked incomplete, with the graphs recorded before
    for path in (head, worker.output):
        run = ggml_viz.open(path)
        assert run.status == "incomplete" and run.manifest["incomplete_reason"]
        assert len(run.graphs) > 0


def test_the_viewer_shows_a_lane_per_host(distributed, tmp_path):
    # GIVEN the joined experiment, opened in the viewer (a real browser)
    output = tmp_path / "joined"
    paths = [str(distributed.head), *(str(w.output) for w in distributed.workers)]
    assert ggml_viz_cli("join", *paths, "-o", str(output)).returncode == 0
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        errors = collect_errors(page)
        with serving(page, output) as viewer:
            page.goto(viewer.url)
            page.wait_for_selector("[data-testid=time-by-op]")
            page.click("#tabs button[data-tab=timeline]")
            page.wait_for_function("() => window.ggmlViz.timeline && window.ggmlViz.timeline.data")
            # THEN the timeline has the head's lane and one per worker, named by host
            labels = page.evaluate("() => window.ggmlViz.timeline.data.lanes.map(lane => lane.label)")
            assert labels[0].startswith("head ") and sorted(labels[1:]) == sorted(
                f"worker {w.endpoint} · CPU" for w in distributed.workers
            )
            # AND each worker's graphs (one per head graph here) are drawn on the head's clock,
            # inside the head's graphs
            counts = page.evaluate("() => window.ggmlViz.timeline.data.lanes.map(lane => lane.graphs.start.length)")
            assert counts[1:] == [counts[0]] * len(distributed.workers)
            spans = page.evaluate(
                """() => window.ggmlViz.timeline.data.lanes.map(lane =>
                     [Math.min(...lane.graphs.start), Math.max(...lane.graphs.end)])"""
            )
            head_start, head_end = spans[0]
            assert all(head_start <= start and end <= head_end for start, end in spans[1:])
            # AND the messages on the wire go between the head's lane and a worker's, sent before received,
            # as many as the join found during the run
            wire = page.evaluate("() => window.ggmlViz.timeline.data.transfers")
            assert wire["total"] == len(wire["start"]) > 0
            pairs = set(zip(wire["source"], wire["target"], strict=True))
            assert pairs <= {(0, w) for w in (1, 2)} | {(w, 0) for w in (1, 2)} and len(pairs) == 4
            assert all(s <= e for s, e in zip(wire["start"], wire["end"], strict=True))
            transfers = pd.read_parquet(output / "transfers.parquet")
            origin = pd.read_parquet(output / "graphs.parquet")["start_ns"].min()
            t0, t1 = page.evaluate("() => [window.ggmlViz.timeline.data.t0, window.ggmlViz.timeline.data.t1]")
            sent, received = transfers["sent_ns"] - origin, transfers["received_ns"] - origin
            assert wire["total"] == int(((sent < t1) & (received > t0)).sum())
        assert errors == []


def test_a_worker_recorded_by_the_preload_library_alone(tmp_path, model_path):
    # GIVEN a worker with ggml-viz's preload library alone (no `ggml-viz run`), and a recorded head
    preload = ggml_viz_cli("preload-path").stdout.strip()
    port = free_port()
    environment = {**os.environ, "LD_PRELOAD": preload, "GGML_VIZ_OUTPUT": str(tmp_path / "worker.ggmlviz")}
    server = subprocess.Popen(
        [str(llama_tool("ggml-rpc-server")), "-t", "1", "-H", "127.0.0.1", "-p", str(port)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker = Worker(port, tmp_path / "worker.ggmlviz", server, tmp_path / "unused.log")
    try:
        wait_for_port(port, server)
        head = tmp_path / "head.ggmlviz"
        traced = ggml_viz_cli("run", "-o", str(head), "--", *head_command(model_path, [worker], 4))
        assert traced.returncode == 0, traced.stderr[-2000:]
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == -signal.SIGTERM  # it ends by the signal, as untraced
    # WHEN joined (the worker's spool is collected into its run as it is opened)
    result = ggml_viz_cli("join", str(head), str(worker.output), "-o", str(tmp_path / "joined"), "--json")
    # THEN the worker's run is complete and every node it computed for the head has its time
    assert result.returncode == 0, result.stderr
    assert ggml_viz.open(worker.output).status == "complete"
    nodes = json.loads(result.stdout)["remote_nodes"]
    assert nodes["nodes"] > 0 and nodes["nodes"] == nodes["timed"] == nodes["matched_to_head"]


def _cpu_nodes_timed_and_remote_ones_not(run) -> pd.Series:
    """Checks that every node the head computed on its CPU has its own time (the CPU splits' ticks)
    and no node a worker computed has one, over a thousand of each; the remote nodes' mask."""
    nodes = run.nodes
    on_cpu = nodes["buffer_name"] == "CPU"
    remote = nodes["buffer_name"].fillna("").str.startswith("RPC")
    assert on_cpu.sum() > 1000 and remote.sum() > 1000
    assert nodes.loc[on_cpu, "start_ns"].notna().all()
    assert nodes.loc[remote, "start_ns"].isna().all()
    return remote


def test_a_head_computing_layers_itself_has_its_cpu_nodes_timed(tmp_path, model_path):
    # GIVEN SmolLM2 with 12 of its 30 layers on a recorded worker, the rest on the head's CPU
    worker = start_worker(tmp_path, "worker")
    command = [*head_command(model_path, [worker]), "-ngl", "12"]  # the last -ngl counts
    try:
        plain = untraced(command)
        head = tmp_path / "head.ggmlviz"
        traced = ggml_viz_cli("run", "-o", str(head), "--", *command)
    finally:
        worker.stop()
    assert plain.returncode == 0 and traced.returncode == 0, traced.stderr[-2000:]
    # THEN the text is the same untraced and traced
    assert traced.stdout == plain.stdout
    # AND every node the head computed on its CPU has its own time (the CPU splits' ticks), and no
    # node the worker computed has a time on the head
    run = ggml_viz.open(head)
    remote = _cpu_nodes_timed_and_remote_ones_not(run)
    # AND each remote node has its time on the worker, once joined
    summary = summarize_joined(join_runs([run, ggml_viz.open(worker.output)]))
    counts = summary["remote_nodes"]
    assert counts["nodes"] == remote.sum() == counts["timed"] == counts["matched_to_head"]


# A Python head: llama-cpp-python with the worker's device registered before the model loads, as
# llama.cpp's --rpc registers it (common/arg.cpp, add_rpc_devices); recorded with ggml_viz.record where
# an output is given. It prints the generated text as JSON.
PYTHON_HEAD = (
    """
import json, sys

import llama_cpp

model, endpoint, output, prompt, n_predict = sys.argv[1:]
"""
    + REGISTER_WORKER
    + """
register_worker(endpoint)


def generate():
    llm = llama_cpp.Llama(model, n_ctx=512, n_threads=2, n_gpu_layers=12, seed=0, verbose=False)
    text = llm(prompt, max_tokens=int(n_predict), temperature=0.0)["choices"][0]["text"]
    del llm
    return text


if output:
    import ggml_viz

    with ggml_viz.record(output):
        text = generate()
else:
    text = generate()
print(json.dumps(text))
"""
)


def test_a_python_head_computing_layers_itself_has_its_cpu_nodes_timed(tmp_path, model_path):
    if not (llama_cpp_lib_dir() / "libggml-rpc.so").exists():
        missing("llama-cpp-python has no libggml-rpc.so (make setup builds it with the RPC backend)")
    # GIVEN a Python program with SmolLM2's 12 of 30 layers on a worker (a GPU device to ggml), the rest
    # on its CPU: its graphs are read at the compute call, as on a GPU
    script = tmp_path / "head.py"
    script.write_text(PYTHON_HEAD)
    worker = start_worker(tmp_path, "worker", recorded=False)
    head = tmp_path / "head.ggmlviz"

    def generate(output: str) -> subprocess.CompletedProcess:
        arguments = [str(model_path), worker.endpoint, output, PROMPT, str(N_PREDICT)]
        return untraced([sys.executable, str(script), *arguments])

    try:
        plain = generate("")
        traced = generate(str(head))
    finally:
        worker.stop()
    assert plain.returncode == 0 and traced.returncode == 0, (plain.stderr + traced.stderr)[-2000:]
    # THEN the text is the same untraced and recorded
    assert json.loads(traced.stdout) == json.loads(plain.stdout)
    # AND every node the program computed on its CPU has its own time (the CPU splits' ticks), and no
    # node the worker computed has one
    run = ggml_viz.open(head)
    assert run.status == "complete"
    _cpu_nodes_timed_and_remote_ones_not(run)


def test_a_split_model_says_where_each_device_waits_and_predicts_other_splits(tmp_path, model_path):
    # GIVEN SmolLM2 with its last 15 blocks (14 layers and the output) on a recorded worker, joined
    worker = start_worker(tmp_path, "worker")
    command = [*head_command(model_path, [worker], n_predict=12), "-ngl", "15"]
    try:
        traced = ggml_viz_cli("run", "-o", str(tmp_path / "head.ggmlviz"), "--", *command)
    finally:
        worker.stop()
    assert traced.returncode == 0, traced.stderr[-2000:]
    joined = tmp_path / "split.joined"
    assert ggml_viz_cli("join", str(tmp_path / "head.ggmlviz"), str(worker.output), "-o", str(joined)).returncode == 0
    # WHEN its summary is asked for
    result = ggml_viz_cli("summary", str(joined), "--json")
    assert result.returncode == 0, result.stderr
    devices = json.loads(result.stdout)["devices"]
    # THEN each phase's mean step is every device's busy time plus its idle time by cause, exactly
    decode = {phase["phase"]: phase for phase in devices["phases"]}["decode"]
    assert decode["steps"] == 11
    names = {device["device"] for device in decode["devices"]}
    assert names == {"CPU", f"RPC0[{worker.endpoint}]"}
    for device in decode["devices"]:
        assert device["busy_ns"] > 0
        assert device["busy_ns"] + sum(device["parts"].values()) == pytest.approx(decode["step_ns"], rel=1e-9)
        assert any(part.startswith("waiting for ") and part != "waiting for transfers" for part in device["parts"])
    # AND the finding names the wait in words, with the layers on the other side
    assert "waits for" in devices["finding"] and "layers computed there" in devices["finding"]
    # AND `whatif` predicts the recorded split as it ran (its parts, measured: within 3 % of the
    # rates of its own steps), and the others with every layer on one side
    result = ggml_viz_cli("whatif", str(joined), "--ngl", "0,31", "--json")
    assert result.returncode == 0, result.stderr
    prediction = json.loads(result.stdout)
    assert prediction["recorded_placement"]["ngl"] == 15 and prediction["n_layer"] == 30
    for phase in ("prompt", "decode"):
        assert prediction["check"][phase]["ratio"] == pytest.approx(1, abs=0.03)
    rows = {row["ngl"]: row for row in prediction["predictions"]}
    assert rows[15]["recorded"] and (rows[15]["cpu_layers"], rows[15]["other_layers"]) == (16, 14)
    assert rows[15]["decode_step_ns"] == pytest.approx(decode["step_ns"], rel=0.05)
    other = f"RPC0[{worker.endpoint}]"
    assert rows[0]["other_layers"] == 0 and rows[0]["memory"][other]["total"] == 0
    assert rows[31]["cpu_layers"] == 0 and rows[31]["output_on"] == other
    assert rows[31]["memory"]["CPU"]["total"] < rows[15]["memory"]["CPU"]["total"] < rows[0]["memory"]["CPU"]["total"]
    # AND the head's run alone, its worker's nodes untimed there, is refused with the way out
    alone = ggml_viz_cli("whatif", str(tmp_path / "head.ggmlviz"), "--ngl", "4")
    assert alone.returncode == 1 and "ggml-viz join" in alone.stderr
