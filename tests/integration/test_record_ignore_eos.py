"""`ggml-viz record --ignore-eos`: exactly -n tokens, even when the model would stop at once."""

from __future__ import annotations

import pytest

import ggml_viz

from .smollm2 import THREADS, ggml_viz_cli

pytestmark = pytest.mark.model

# A chat turn already answered: SmolLM2-135M-Instruct's greedy next token ends the generation.
ANSWERED = "<|im_start|>user\nSay OK.<|im_end|>\n<|im_start|>assistant\nOK."
SMOLLM2_END_OF_GENERATION = {0, 2, 4}  # <|endoftext|>, <|im_end|>, <reponame>


def record(tmp_path, name: str, *options: str) -> ggml_viz.runformat.reader.Run:
    output = tmp_path / f"{name}.ggmlviz"
    result = ggml_viz_cli("record", "-p", ANSWERED, "-n", "12", "-t", str(THREADS), "-o", str(output), *options)
    assert result.returncode == 0, result.stderr
    return ggml_viz.open(output)


def test_ignore_eos_generates_exactly_n_tokens(tmp_path):
    # GIVEN a prompt that the model answers with end-of-generation: one graph, no text
    stopped = record(tmp_path, "stopped")
    assert list(stopped.graphs["phase"]) == ["prompt"]
    assert stopped.manifest["generation"]["generated_text"] == ""
    assert stopped.manifest["generation"]["ignore_eos"] is False
    # WHEN it is recorded with --ignore-eos -n 12
    run = record(tmp_path, "ignored", "--ignore-eos")
    # THEN all 12 tokens are generated: the prompt graph, then one decode graph per token but the last
    graphs, tokens = run.graphs, run.tokens
    assert list(graphs["phase"]) == ["prompt"] + ["decode"] * 11
    decoded = tokens[tokens["graph_id"].isin(graphs["graph_id"].iloc[1:])]
    assert len(decoded) == 11
    assert not set(decoded["token_id"]) & SMOLLM2_END_OF_GENERATION
    assert run.manifest["generation"]["ignore_eos"] is True
    assert run.manifest["generation"]["generated_text"].startswith("".join(decoded["text"]))
