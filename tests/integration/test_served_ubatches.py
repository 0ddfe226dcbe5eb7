"""A batch of several sequences, as llama.cpp splits it into ubatches of its own order (a few
tokens of each sequence, with a memory per sequence): each graph's tokens are those it computed,
for llama-server's slots and for a program that decodes such batches through llama-cpp-python."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pytest

import ggml_viz
from ggml_viz.analysis.kv import kv_reads

from .servers import ask, kv_cell_bytes, running_server, stop_server

pytestmark = pytest.mark.model

# Eight requests of different lengths: arriving together, at four slots, their prompts share
# batches, and the batches are split a few tokens of each sequence at a time.
PROMPTS = [
    "Once upon a time",
    "The quick brown fox jumps over the lazy dog, and then",
    "List three colors:",
    "In the beginning of the twentieth century, the city of Paris was home to many painters who",
    "Water boils at",
    "A haiku about the sea:",
    "The three laws of motion, as Newton stated them in his Principia, say that",
    "Hello",
]
N_PREDICT = 6


def lookup_rows(run) -> pd.Series:
    """Per graph, the rows its token lookup read: the GET_ROWS of a weight by ids that are no
    weight (the token embedding), its output's second dimension."""
    edges = run.edges[(run.edges.src_usage == "weights") & (run.edges.src_slot == 0)]
    nodes = run.nodes[["graph_id", "node_index", "op", "ne1"]]
    lookups = edges.merge(nodes, on=["graph_id", "node_index"])
    lookups = lookups[lookups.op == "GET_ROWS"].drop_duplicates("graph_id")
    return lookups.set_index("graph_id")["ne1"]


def _complete(port: int, prompt: str) -> dict:
    return ask(port, "/completion", {"prompt": prompt, "n_predict": N_PREDICT, "temperature": 0, "cache_prompt": False})


def test_prompts_arriving_together_at_a_server_s_slots_give_each_graph_its_own_tokens(tmp_path, model_path):
    # GIVEN llama-server with four slots under ggml-viz run
    output = tmp_path / "server.ggmlviz"
    with running_server(output, model_path, slots=4, context=4096) as (server, port):
        # WHEN eight requests arrive together
        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            answers = list(pool.map(lambda prompt: _complete(port, prompt), PROMPTS))
        stderr = stop_server(server)
    run = ggml_viz.open(output)
    assert run.status == "complete", stderr[-3000:]
    graphs = run.graphs.set_index("graph_id")
    served = graphs[graphs.phase.isin(["prompt", "decode"])]
    # THEN llama.cpp did split calls into several graphs (else this test shows nothing)
    assert served.groupby(["context_id", "decode_index"]).size().max() > 1
    # AND every graph holds as many tokens as its own token lookup read
    rows = lookup_rows(run)
    assert (served.n_tokens == rows.loc[served.index]).all(), pd.DataFrame(
        {"recorded": served.n_tokens, "looked_up": rows.loc[served.index]}
    )[served.n_tokens != rows.loc[served.index]]
    # AND each sequence's tokens, in the order the graphs ran, go up one position at a time
    # (a request starts again at 0): no token given to a graph that did not compute it
    tokens = run.tokens.merge(graphs[["start_ns"]], left_on="graph_id", right_index=True)
    tokens = tokens[tokens.graph_id.isin(served.index)].sort_values(["start_ns", "batch_index"], kind="stable")
    for seq, of_seq in tokens.groupby("seq_id"):
        positions = of_seq.pos.to_numpy()
        steps = np.diff(positions)
        assert ((steps == 1) | (positions[1:] == 0)).all(), (seq, positions.tolist())
    # AND each decode step read the KV cache of the slots it fed (a stream each), in llama.cpp's
    # windows of 256 cells (every slot here holds fewer), not the cells between their windows
    reads = kv_reads(run)
    steps = reads[reads.phase == "decode"]
    assert len(steps) and (steps.kv_bytes == steps.n_tokens * 256 * kv_cell_bytes(model_path)).all(), steps
    # AND the tokens of the requests are every token the server says it fed: each prompt's,
    # and each generated token but the last (never fed back)
    fed = sum(answer["timings"]["prompt_n"] + answer["timings"]["predicted_n"] - 1 for answer in answers)
    assert len(tokens) == fed


def test_a_batch_of_two_sequences_decoded_through_llama_cpp_python_gives_each_graph_its_own_tokens(
    tmp_path, model_path, recorder
):
    import llama_cpp

    output = tmp_path / "two.ggmlviz"
    first, second = list(range(100, 105)), list(range(200, 212))
    rows = [(token, i, 0) for i, token in enumerate(first)] + [(token, i, 1) for i, token in enumerate(second)]
    # GIVEN a context with a memory per sequence (as llama-server's slots have), recorded
    with ggml_viz.record(output, recorder=recorder):
        model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), llama_cpp.llama_model_default_params())
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_seq_max, params.kv_unified = 1024, 2, False
        params.n_threads = params.n_threads_batch = 2
        context = llama_cpp.llama_init_from_model(model, params)
        batch = llama_cpp.llama_batch_init(len(rows), 0, 1)
        try:
            # WHEN one llama_decode call feeds two sequences' prompts of different lengths
            batch.n_tokens = len(rows)
            for i, (token, position, sequence) in enumerate(rows):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, position, 1
                batch.seq_id[i][0] = sequence
                batch.logits[i] = position == (len(first) if sequence == 0 else len(second)) - 1
            assert llama_cpp.llama_decode(context, batch) == 0
        finally:
            llama_cpp.llama_batch_free(batch)
            llama_cpp.llama_free(context)
            llama_cpp.llama_model_free(model)
    run = ggml_viz.open(output)
    graphs = run.graphs.set_index("graph_id")
    # THEN llama.cpp computed it in several graphs
    assert len(graphs) > 1
    # AND each holds as many tokens as its token lookup read, those of both sequences it computed
    assert (graphs.n_tokens == lookup_rows(run).loc[graphs.index]).all()
    tokens = run.tokens.sort_values(["graph_id", "batch_index"])
    assert sorted(zip(tokens.token_id, tokens.pos, tokens.seq_id, strict=True)) == sorted(rows)
    for _, of_seq in tokens.groupby("seq_id"):
        assert (np.diff(of_seq.pos.to_numpy()) == 1).all()
    first_graph = tokens[tokens.graph_id == graphs.index[0]]
    assert set(first_graph.seq_id) == {0, 1}, first_graph
    # AND each token's place in the call's batch is kept
    assert (
        tokens.batch_index.to_numpy()
        == [rows.index(row) for row in zip(tokens.token_id, tokens.pos, tokens.seq_id, strict=True)]
    ).all()
