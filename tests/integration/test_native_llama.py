"""llama.cpp's own programs, recorded unchanged through the preload library: llama-completion
beside llama-cpp-python, llama-server answering the openai client, llama-bench."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import ggml_viz

from .native import llama_tool, untraced
from .servers import server_log, start_server
from .smollm2 import ggml_viz_cli

pytestmark = pytest.mark.model

PROMPT = "The capital of France is"
N_PREDICT = 8


def tokens_of(run, phase: str):
    """The tokens the graphs of one phase (prompt, decode) processed, in order."""
    tokens = run.tokens.merge(run.graphs[["graph_id", "phase", "start_ns"]], on="graph_id")
    return tokens[tokens.phase == phase].sort_values(["start_ns", "batch_index"])


def completion_command(model_path: Path, n_predict: int = N_PREDICT) -> list[str]:
    return [
        str(llama_tool("llama-completion")),
        "-m",
        str(model_path),
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
        "2",
        "-c",
        "512",
        "-fa",
        "off",
    ]


def test_llama_completion_records_the_graphs_llama_cpp_python_runs(tmp_path, model_path):
    # GIVEN the same model, prompt and greedy settings through llama-completion and llama-cpp-python
    output = tmp_path / "completion.ggmlviz"
    expected = untraced(completion_command(model_path))
    # WHEN ggml-viz runs llama-completion
    result = ggml_viz_cli("run", "-o", str(output), "--", *completion_command(model_path))
    assert result.returncode == 0, result.stderr
    # THEN the program says what it says untraced (greedy: the same text), byte for byte: ggml-viz
    # speaks on stderr
    assert expected.stdout.strip() and result.stdout == expected.stdout
    native = ggml_viz.open(output)
    assert native.status == "complete", native.manifest["incomplete_reason"]
    with ggml_viz.record(tmp_path / "python.ggmlviz"):
        from llama_cpp import Llama

        llm = Llama(str(model_path), n_ctx=512, n_threads=2, verbose=False)
        llm(PROMPT, max_tokens=N_PREDICT, temperature=0.0)
        del llm
    python = ggml_viz.open(tmp_path / "python.ggmlviz")
    # AND both ran one prompt graph and the same decode graphs: the same node count and op sequence
    assert native.graphs.phase.tolist() == python.graphs.phase.tolist()
    assert native.graphs.n_nodes.tolist() == python.graphs.n_nodes.tolist()
    last = {name: run.graphs.graph_id.iloc[-1] for name, run in (("native", native), ("python", python))}
    ops = {
        name: run.nodes[run.nodes.graph_id == last[name]].op.tolist()
        for name, run in (("native", native), ("python", python))
    }
    assert ops["native"] == ops["python"]
    # AND the prompt's tokens are the same tokens, with their text
    prompt = {name: tokens_of(run, "prompt") for name, run in (("native", native), ("python", python))}
    assert prompt["native"].token_id.tolist() == prompt["python"].token_id.tolist()
    assert "".join(prompt["native"].text).strip().endswith(PROMPT)
    # AND the nodes carry real time, the weights their file offsets
    assert native.nodes.timed.all() and native.nodes.duration_ns.sum() > 0
    assert ggml_viz_cli("validate", str(output)).returncode == 0


def test_llama_cpp_s_warm_up_decode_is_a_phase_of_its_own(tmp_path, model_path):
    # GIVEN llama-completion with its warm-up (the default), and without
    runs = {}
    for name, flags in (("warm", []), ("cold", ["--no-warmup"])):
        command = [flag for flag in completion_command(model_path, 3) if flag != "--no-warmup"] + flags
        output = tmp_path / f"{name}.ggmlviz"
        assert ggml_viz_cli("run", "-o", str(output), "--", *command).returncode == 0
        runs[name] = ggml_viz.open(output)
    warm, cold = runs["warm"], runs["cold"]
    # THEN the warm-up is one graph of its own phase before the prompt: BOS then EOS, at 0 and 1
    assert warm.graphs.phase.tolist() == ["warmup", *cold.graphs.phase.tolist()]
    warmup = tokens_of(warm, "warmup")
    assert warmup.pos.tolist() == [0, 1] and warmup.token_id.iloc[0] != warmup.token_id.iloc[1]
    # AND the prompt is the prompt alone: its tokens and text as without the warm-up
    assert tokens_of(warm, "prompt").token_id.tolist() == tokens_of(cold, "prompt").token_id.tolist()
    summary = json.loads(ggml_viz_cli("summary", str(tmp_path / "warm.ggmlviz"), "--json").stdout)
    assert summary["prompt"].strip().endswith(PROMPT) and "".join(warmup.text) not in summary["prompt"]
    # AND it counts in no per-token figure
    phases = {row["phase"]: row for row in summary["phases"]}
    assert phases["warmup"]["tokens_per_s"] is None and phases["prompt"]["tokens"] == len(tokens_of(cold, "prompt"))


def _ask(port: int, question: str, stream: bool = False) -> tuple[str, int]:
    """One chat request through the openai client: the answer, and how many tokens the server
    fed to llama.cpp for it (the prompt tokens it computed, not those it had cached, and each
    generated token but the last, which is never fed back)."""
    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=120)
    request = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 12,
        "temperature": 0,
    }
    if not stream:
        answer = client.chat.completions.create(**request)
        text, timings = answer.choices[0].message.content or "", (answer.model_extra or {})["timings"]
    else:
        pieces, timings = [], {}
        for chunk in client.chat.completions.create(**request, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            timings = (chunk.model_extra or {}).get("timings") or timings
        text = "".join(pieces)
    return text, timings["prompt_n"] + timings["predicted_n"] - 1


QUESTIONS = ["What is the capital of France?", "Name a primary color.", "Count to three.", "What is 2 + 2?"]


def test_llama_server_answering_the_openai_client_is_recorded(tmp_path, model_path):
    # GIVEN llama-server with two slots under ggml-viz run
    output = tmp_path / "server.ggmlviz"
    server, port = start_server(output, model_path)
    try:
        # WHEN the openai client asks four questions: two at once, then one streamed, then one more
        asked_ns = time.monotonic_ns()  # the recorder's clock: what the server ran before is its own
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda question: _ask(port, question), QUESTIONS[:2]))
        answers.append(_ask(port, QUESTIONS[2], stream=True))
        answers.append(_ask(port, QUESTIONS[3]))
        # AND Ctrl-C reaches the wrapper
        server.send_signal(signal.SIGINT)
        stdout, _ = server.communicate(timeout=120)
        stderr = server_log(server)
    finally:
        if server.poll() is None:
            server.kill()
    # THEN the run is complete
    run = ggml_viz.open(output)
    assert run.status == "complete", (run.manifest["incomplete_reason"], stderr[-3000:])
    assert "run written to" in stderr and "run written to" not in stdout
    graphs = run.graphs
    # AND it holds every token the server fed, in prompt graphs and decode graphs of both slots
    for_requests = run.tokens[run.tokens.graph_id.isin(graphs[graphs.start_ns >= asked_ns].graph_id)]
    assert len(for_requests) == sum(fed for _, fed in answers)
    assert set(graphs.phase) == {"warmup", "prompt", "decode"} and set(run.tokens.seq_id) == {0, 1}
    # the warm-up (BOS, EOS) and the server's probe of its context (0, 0), before any request
    assert len(graphs[graphs.phase == "warmup"]) == 2 and graphs.phase.iloc[:2].tolist() == ["warmup"] * 2
    # AND the text of each answer, token by token, in its slot's sequence (all but its last
    # token, never fed back: here, all but its last word)
    tokens = run.tokens.merge(graphs[["graph_id", "start_ns"]], on="graph_id").sort_values(["start_ns", "batch_index"])
    sequences = ["".join(tokens[tokens.seq_id == seq].text) for seq in (0, 1)]
    for answer, _ in answers:
        fed = answer.rsplit(maxsplit=1)[0]
        assert any(fed in sequence for sequence in sequences), (answer, sequences)
    # AND the summary gives each request apart: its question in its prompt, its answer generated
    served = json.loads(ggml_viz_cli("summary", str(output), "--json").stdout)
    assert served["n_requests"] == len(QUESTIONS) and {r["seq_id"] for r in served["requests"]} == {0, 1}
    for question, (answer, _) in zip(QUESTIONS, answers, strict=True):
        # the prompt it computed: past what the slot had cached ("What is" of the question before)
        request = next(r for r in served["requests"] if question[-6:] in r["prompt"])
        assert answer.rsplit(maxsplit=1)[0] in request["generated"], (answer, request)
        assert "<|im_start|><|im_end|>" not in request["prompt"]  # no warm-up in it
    # AND real node times, and weights mapped to the model file
    assert run.nodes.timed.any() and run.nodes.duration_ns.sum() > 0
    assert run.manifest["model"]["path"] == str(model_path.resolve())
    assert ggml_viz_cli("validate", str(output)).returncode == 0


def test_a_killed_server_keeps_every_graph_closed_before_the_kill(tmp_path, model_path):
    # GIVEN llama-server under ggml-viz run, after two answers and a pause
    output = tmp_path / "killed.ggmlviz"
    server, port = start_server(output, model_path)
    try:
        asked_ns = time.monotonic_ns()
        answers = [_ask(port, question) for question in QUESTIONS[:2]]
        time.sleep(1.5)
        # WHEN the server is killed outright
        spool = next((output / "spool").glob("*.spool"))
        server_pid = int(spool.stem)
        subprocess.run(["kill", "-9", str(server_pid)], check=True)
        stdout, _ = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    # THEN the wrapper reports the signal, the run is incomplete and holds both answers' graphs
    assert server.returncode == 128 + signal.SIGKILL
    run = ggml_viz.open(output)
    assert run.status == "incomplete" and "killed by signal 9" in run.manifest["incomplete_reason"]
    graphs = run.graphs[run.graphs.start_ns >= asked_ns]
    assert run.tokens.graph_id.isin(graphs.graph_id).sum() == sum(fed for _, fed in answers)
    assert (graphs.phase == "prompt").sum() == 2


def test_llama_bench_gets_a_per_op_breakdown_of_pp_and_tg(tmp_path, model_path):
    # GIVEN llama-bench's prompt-processing and text-generation tests
    output = tmp_path / "bench.ggmlviz"
    command = [
        str(llama_tool("llama-bench")),
        "-m",
        str(model_path),
        "-p",
        "16",
        "-n",
        "16",
        "-r",
        "3",
        "-t",
        "2",
        "-o",
        "json",
    ]
    # WHEN ggml-viz runs it
    result = ggml_viz_cli("run", "-o", str(output), "--", *command)
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)  # its stdout is its JSON, nothing after it
    run = ggml_viz.open(output)
    graphs = run.graphs
    # THEN its pp graphs hold 16 tokens; its tg graphs one, the first of each run at position 0
    # (it starts a sequence: a prompt), the others decode steps
    prompt = graphs[graphs.phase == "prompt"]
    assert set(prompt.n_tokens) == {1, 16} and set(graphs[graphs.phase == "decode"].n_tokens) == {1}
    first_tokens = run.tokens[run.tokens.graph_id.isin(prompt[prompt.n_tokens == 1].graph_id)]
    assert set(first_tokens.pos) == {0}
    # AND each phase has its time by op, matrix multiplication first
    nodes = run.nodes.merge(graphs[["graph_id", "phase"]], on="graph_id")
    by_op = nodes.groupby(["phase", "op"]).duration_ns.sum()
    for phase in ("prompt", "decode"):
        assert by_op[phase].idxmax() == "MUL_MAT"
    # AND the generation rate the run shows is within the spread of llama-bench's own
    tg = next(figure for figure in figures if figure["n_gen"] > 0)
    decode = graphs[graphs.phase == "decode"]
    recorded = len(decode) / ((decode.end_ns - decode.start_ns).sum() / 1e9)
    spread = max(3 * tg["stddev_ts"], 0.15 * tg["avg_ts"])
    assert abs(recorded - tg["avg_ts"]) <= spread, (recorded, tg["avg_ts"], tg["stddev_ts"])


def test_a_python_program_with_the_preload_library_too_is_recorded_once(tmp_path, model_path):
    # GIVEN a llama-cpp-python program run with the preload library and GGML_VIZ_OUTPUT by hand
    script = tmp_path / "app.py"
    script.write_text(
        "import sys\nfrom llama_cpp import Llama\n"
        "llm = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False)\n"
        "llm(sys.argv[2], max_tokens=3, temperature=0.0)\n"
    )
    output = tmp_path / "app.ggmlviz"
    preload = ggml_viz_cli("preload-path").stdout.strip()
    env = {**os.environ, "LD_PRELOAD": preload, "GGML_VIZ_OUTPUT": str(output)}
    # WHEN it runs
    result = subprocess.run([sys.executable, str(script), str(model_path), PROMPT], env=env, timeout=300)
    # THEN the start-up hook recorded it, once: the preload library stood aside (no spool)
    assert result.returncode == 0
    run = ggml_viz.open(output)
    assert len(run.graphs) == 3 and run.manifest["capture"]["recorder"] == "c"
    assert not (output / "spool").exists() and not list(tmp_path.glob("app-*.ggmlviz"))


def test_a_running_server_can_be_read_while_it_runs(tmp_path, model_path):
    # GIVEN llama-server under ggml-viz run, after one answer
    output = tmp_path / "live.ggmlviz"
    server, port = start_server(output, model_path)
    try:
        _, fed = _ask(port, QUESTIONS[0])
        # WHEN the run is read while the server still runs, as `ggml-viz view --live` reads it
        deadline, tokens = time.monotonic() + 10, 0
        while time.monotonic() < deadline and tokens < fed:
            run = ggml_viz.open(output)
            tokens = len(run.tokens)
            time.sleep(0.2)
        # THEN the answer's graphs are there within seconds, and the run says it is being recorded
        assert server.poll() is None
        assert tokens >= fed and run.status == "recording"
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=120)
