"""whisper.cpp recorded as it is: its own whisper-cli under `ggml-viz run`, and a Python program
on pywhispercpp (another ggml binding than llama-cpp-python), on the tests' random-weight whisper
model and espeak-ng's speech. Every graph in the phase whisper itself counts it in (encode:
the convolutions, the encoder, the cross-attention's keys and values; decode: the decoder's
steps), each weight under its name in the model file and read from its bytes there, the
decoder's tokens, and times that agree with whisper.cpp's own."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys

import pytest

import ggml_viz
from ggml_viz.analysis.breakdowns import graphs_by_computation

from ..speech import speech_wav
from ..whisper_models import RUNNABLE, whisper_timing, write_whisper_model
from .native import untraced, whisper_tool
from .smollm2 import ggml_viz_cli

pytestmark = pytest.mark.model

# whisper.cpp's start-of-transcript token for an English model (its special tokens follow the text ones)
SOT = 50257
TRANSCRIBE = """
import sys
from pywhispercpp.model import Model

model = Model(sys.argv[1], n_threads=2, print_progress=False, print_realtime=False, redirect_whispercpp_logs_to=None)
for segment in model.transcribe(sys.argv[2], temperature_inc=0.0):
    print(segment.text)
"""


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    """whisper-cli on the model and the speech, untraced and under ggml-viz run."""
    cli = whisper_tool("whisper-cli")
    folder = tmp_path_factory.mktemp("whisper")
    model = folder / "ggml-random.bin"
    layout = write_whisper_model(model, RUNNABLE)
    audio = speech_wav(folder / "speech.wav")
    command = [str(cli), "-m", str(model), "-f", str(audio), "-t", "2", "-nf"]  # -nf: decoded once
    output = folder / "whisper.ggmlviz"
    traced = ggml_viz_cli("run", "-o", str(output), "--", *command)
    return {
        "layout": layout,
        "model": model,
        "audio": audio,
        "untraced": untraced(command),
        "traced": traced,
        "run": ggml_viz.open(output),
        "path": output,
    }


def test_whisper_cli_is_recorded_and_left_as_it_is(whisper):
    traced, expected, run = whisper["traced"], whisper["untraced"], whisper["run"]
    # THEN its transcript on stdout is byte for byte what it prints untraced, its status its own
    assert traced.returncode == expected.returncode == 0, traced.stderr[-3000:]
    assert expected.stdout.strip() and traced.stdout == expected.stdout
    # AND the run is complete, recorded by the preload library, every node timed
    assert run.status == "complete", run.manifest.get("incomplete_reason")
    assert run.manifest["capture"]["recorder"] == "preload"
    assert run.nodes["timed"].all()
    # AND its model is the file whisper read, as the file describes it (whisper.cpp has no llama model)
    model = run.manifest["model"]
    assert model["path"] == str(whisper["model"].resolve()) and model["architecture"] == "whisper"
    assert model["layers"] == RUNNABLE.n_audio_layer


def test_each_graph_is_in_the_phase_whisper_counts_it_in(whisper):
    run, stderr = whisper["run"], whisper["traced"].stderr
    graphs = run.graphs.sort_values("start_ns")
    # THEN one encoding is three graphs (convolutions, encoder, cross-attention), then the decoder's steps
    encode_ms, encodes = whisper_timing(stderr, "encode")
    assert graphs["phase"].tolist() == ["encode"] * 3 * encodes + ["decode"] * (len(graphs) - 3 * encodes)
    computes = graphs_by_computation(run).set_index("label")
    assert computes.loc["encoder: conv1, conv2", "phase"] == "encode"
    assert computes.loc[f"decoder.blocks 0-{RUNNABLE.n_text_layer - 1}.cross_attn: key, value", "phase"] == "encode"
    decoder = computes.loc[computes["phase"] == "decode"]
    assert len(decoder) == 1 and decoder.index[0].startswith("decoder: token_embedding")
    # AND its times agree with whisper's own: the encode graphs take most of its encode time; the
    # decoder's graphs part of its decode and batched-decode times (which also sample on the host)
    took = (graphs["end_ns"] - graphs["start_ns"]).groupby(graphs["phase"]).sum() / 1e6
    assert 0.75 * encode_ms <= took["encode"] <= 1.02 * encode_ms, (took["encode"], encode_ms)
    decode_ms = whisper_timing(stderr, "decode")[0] + whisper_timing(stderr, "batchd")[0]
    assert 0.4 * decode_ms <= took["decode"] <= 1.02 * decode_ms, (took["decode"], decode_ms)


def test_every_weight_has_its_file_name_and_its_bytes_there(whisper):
    run, layout = whisper["run"], whisper["layout"]
    # THEN the weights whisper.cpp left unnamed were each found in the file by their bytes
    counts = [context["weights_named_from_file"] for context in run.manifest["contexts"]]
    assert sum(count["named"] for count in counts) == len(layout.tensors)
    assert all(count["ambiguous"] == count["unmatched"] == 0 for count in counts)
    # AND every weight a graph reads is read from its very bytes in the file (a view of a weight
    # from its place in them)
    weights = run.edges[run.edges["src_usage"] == "weights"]
    assert (weights["memory"] == "disk").all()
    expected = {tensor.name: (tensor.start, tensor.end) for tensor in layout.tensors}
    read = weights[weights["src_op"] == "NONE"].drop_duplicates("src_name")
    assert {
        name: (int(start), int(end))
        for name, start, end in zip(read["src_name"], read["file_offset"], read["file_end"], strict=True)
    } == expected
    # AND the nodes have the layers of the blocks they compute, encoder and decoder
    assert set(run.nodes["layer"].dropna().astype(int)) == set(range(RUNNABLE.n_audio_layer))
    assert ggml_viz_cli("validate", str(whisper["path"])).returncode == 0


def test_the_decoder_s_tokens_are_those_whisper_decoded(whisper):
    run, stderr, transcript = whisper["run"], whisper["traced"].stderr, whisper["untraced"].stdout
    tokens = run.tokens.merge(run.graphs[["graph_id", "start_ns"]], on="graph_id")
    tokens = tokens.sort_values(["start_ns", "batch_index"])
    # THEN each decoder step carries the tokens it was fed, the first its start-of-transcript token at 0
    assert tokens["token_id"].iloc[0] == SOT and tokens["pos"].iloc[0] == 0
    assert len(tokens) == whisper_timing(stderr, "decode")[1] + whisper_timing(stderr, "batchd")[1]
    # AND their text, from the model file's vocabulary: the transcript's words were fed back to it
    fed = "".join(tokens["text"])
    for text in re.findall(r"\]\s+(\S.*)$", transcript, re.MULTILINE):
        assert text.strip() in fed, (text, fed)


def test_the_summary_speaks_of_whisper_as_it_is(whisper):
    summary = json.loads(ggml_viz_cli("summary", str(whisper["path"]), "--json").stdout)
    phases = {row["phase"]: row for row in summary["phases"]}
    # THEN encode has no rate of tokens, decode its tokens; no request, no prompt
    assert set(phases) == {"encode", "decode"} and phases["encode"]["tokens_per_s"] is None
    assert summary["n_requests"] == 0 and not summary["prompt"]
    # AND time by tensor names what unnamed nodes compute, not ggml's node_N
    names = [row["name"] for row in summary["top_tensors"]]
    assert not any(re.fullmatch(r"node_\d+", name) for name in names)
    assert any(name.startswith("MUL_MAT · decoder.") for name in names), names
    assert {row["kind"] for row in summary["memory_by_buffer"]} == {"weights", "compute", "kv_cache"}


def test_a_python_program_on_pywhispercpp_is_recorded_like_whisper_cli(whisper, tmp_path):
    if importlib.util.find_spec("pywhispercpp") is None:
        message = "pywhispercpp is not installed (the test extra installs it)"
        pytest.fail(message) if os.environ.get("GGML_VIZ_REQUIRE_NATIVE_TOOLS") else pytest.skip(message)
    script = tmp_path / "transcribe.py"
    script.write_text(TRANSCRIBE)
    program = [sys.executable, str(script), str(whisper["model"]), str(whisper["audio"])]
    expected = untraced(program)
    # WHEN ggml-viz runs it
    output = tmp_path / "python.ggmlviz"
    result = ggml_viz_cli("run", "-o", str(output), "--", *program)
    # THEN its output is its own, and the preload library recorded its ggml (not llama-cpp-python's)
    assert result.returncode == expected.returncode == 0, result.stderr[-3000:]
    assert expected.stdout.strip() and result.stdout == expected.stdout
    run = ggml_viz.open(output)
    assert run.status == "complete" and run.manifest["capture"]["recorder"] == "preload"
    # AND as whisper-cli's: the same encoding graphs, the weights named from the file, the decoder's tokens
    cli = whisper["run"]
    labels = {run_: set(graphs_by_computation(run_)["label"]) for run_ in (run, cli)}
    assert labels[run] == labels[cli]
    assert (run.edges.loc[run.edges["src_usage"] == "weights", "memory"] == "disk").all()
    assert run.tokens["token_id"].iloc[0] == SOT


def test_the_viewer_answers_a_whisper_run_as_declared(whisper):
    from starlette.testclient import TestClient

    from ggml_viz.ui import payloads
    from ggml_viz.ui.app import RunRegistry, create_app

    from ..payload_shapes import shape_problems

    run = whisper["run"]
    encoder = int(run.graphs.sort_values("start_ns")["graph_id"].iloc[1])
    requests = {
        "/api/runs/r0/overview": payloads.OverviewPayload,
        "/api/runs/r0/timeline?width=800": payloads.TimelinePayload,
        "/api/runs/r0/graphs": payloads.GraphListPayload,
        f"/api/runs/r0/graph/{encoder}?layer=1": payloads.GraphLayout,
        "/api/runs/r0/memory": payloads.MemoryPayload,
        "/api/runs/r0/stats": payloads.StatsPayload,
        "/api/runs/r0/events?limit=50": payloads.EventsPayload,
    }
    _, guard = create_app(RunRegistry(whisper["path"]), host="127.0.0.1", port=8765, token="t")
    with TestClient(guard, base_url="http://127.0.0.1:8765") as client:
        answers = {request: client.get(request, headers={"X-GGML-Viz-Token": "t"}) for request in requests}
    for request, declared in requests.items():
        assert answers[request].status_code == 200, (request, answers[request].text)
        assert shape_problems(answers[request].json(), declared) == [], request
    # AND a graph without tokens is called by what it computes
    labels = {graph["graph_id"]: graph["label"] for graph in answers["/api/runs/r0/graphs"].json()["graphs"]}
    assert labels[encoder].startswith("encoder: ")


@pytest.mark.browser
def test_a_whisper_run_in_the_browser(whisper):
    from ggml_viz.ui.server import make_viewer

    from ..browser import chromium, collect_errors

    viewer = make_viewer(whisper["path"], port=0)
    viewer.serve_in_background()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        errors = collect_errors(page)
        try:
            # WHEN its overview opens
            page.goto(viewer.url + "#overview")
            page.wait_for_selector("body[data-ready='1']")
            # THEN it shows whisper's model and phases, no LLM speed it does not have
            assert "whisper" in page.inner_text("[data-testid=model-card]")
            assert page.inner_text("[data-testid=phase-legend]").split() == ["encode", "decode"]
            assert page.locator("[data-testid=computations] [data-testid=computation]").count() == 4
            assert "encoder: conv1, conv2" in page.inner_text("[data-testid=computations]")
            # AND each view draws
            for tab, ready in (
                ("timeline", "[data-testid=timeline-canvas][data-drawn]"),
                ("graph", "[data-testid=graph-svg] g"),
                ("stats", "[data-testid=stats-op] td"),
                ("memory", "#view-memory [data-testid=event-table] .vrow"),
            ):
                page.click(f"#tabs button[data-tab={tab}]")
                page.wait_for_selector(ready)
        finally:
            page.close()
            viewer.stop()
    assert not errors, errors
