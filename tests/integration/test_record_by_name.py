"""Recording a real model named on the Hugging Face Hub: SmolLM2 published on a stand-in Hub,
downloaded into the cache by huggingface_hub, then recorded by name offline."""

from __future__ import annotations

import os

import pytest

import ggml_viz

from ..fake_hub import serve_fake_hub
from .smollm2 import PROMPT, ggml_viz_cli

pytestmark = pytest.mark.model

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"


def test_a_model_recorded_by_name_says_where_it_came_from(tmp_path, model_path):
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    with serve_fake_hub() as hub:
        # GIVEN SmolLM2 on the Hub, downloaded into an empty cache by name
        commit = hub.add(REPO, {model_path.name: model_path.read_bytes(), "README.md": b"# SmolLM2\n"})
        fetched = ggml_viz_cli("memmap", f"{REPO}:Q4_1", "--download", "--json", env={**env, "HF_ENDPOINT": hub.url})
        assert fetched.returncode == 0, fetched.stderr
    # WHEN it is recorded by name, offline
    output = tmp_path / "named.ggmlviz"
    env["HF_HUB_OFFLINE"] = "1"
    done = ggml_viz_cli("record", "-m", f"{REPO}:q4_1", "-p", PROMPT, "-n", "4", "-t", "2", "-o", str(output), env=env)
    # THEN the run holds the generation and its manifest names the cached file and its origin
    assert done.returncode == 0, done.stderr
    run = ggml_viz.open(output)
    assert len(run.graphs) >= 4
    model = run.manifest["model"]
    assert model["source"] == f"hf://{REPO}/{model_path.name}@{commit}"
    assert model["path"].startswith(str(tmp_path / "hf_home" / "hub"))
    assert model["path"].endswith(f"snapshots/{commit}/{model_path.name}")
