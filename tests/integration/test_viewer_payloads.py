"""The declared JSON of every endpoint (ggml_viz.ui.payloads) against a real SmolLM2 run
that has what a synthetic run lacks: captured attention, --values stats, a KV cache, the
rows a token lookup reads, a real manifest."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

import ggml_viz
from ggml_viz.ui import payloads
from ggml_viz.ui.app import RunRegistry, create_app

from ..payload_shapes import shape_problems
from .smollm2 import greedy, load_model

pytestmark = pytest.mark.model

TOKEN = "test-token"


def test_a_real_runs_answers_have_their_declared_keys(tmp_path, model_path):
    # GIVEN a real run with captured attention and --values stats
    path = tmp_path / "real.ggmlviz"
    with ggml_viz.record(path, capture="kq_soft_max-*", values="stats"):
        greedy(load_model(model_path), n_predict=2)
    run = ggml_viz.open(path)
    graph = int(run.graphs["graph_id"].iloc[-1])
    node = run.nodes[(run.nodes["graph_id"] == graph) & (run.nodes["op"] == "MUL_MAT")].iloc[0]
    requests = {
        "/api/runs": payloads.RunsPayload,
        "/api/runs/r0/overview": payloads.OverviewPayload,
        "/api/runs/r0/timeline?width=800": payloads.TimelinePayload,
        f"/api/runs/r0/node?graph={graph}&index={int(node.node_index)}": payloads.NodePayload,
        "/api/runs/r0/event/0": payloads.EventRow,
        "/api/runs/r0/search?q=ffn": payloads.SearchPayload,
        "/api/runs/r0/graphs": payloads.GraphListPayload,
        f"/api/runs/r0/graph/{graph}": payloads.GraphLayout,
        f"/api/runs/r0/graph/{graph}?layer=3": payloads.GraphLayout,
        "/api/runs/r0/memory": payloads.MemoryPayload,
        f"/api/runs/r0/occupancy/{graph}": payloads.OccupancyPayload,
        "/api/runs/r0/stats": payloads.StatsPayload,
        "/api/runs/r0/attention-index": payloads.AttentionIndexPayload,
        f"/api/runs/r0/attention?graph={graph}&layer=3&head=1": payloads.AttentionPayload,
        "/api/runs/r0/events?layer=3&limit=50": payloads.EventsPayload,
        "/api/compare?a=r0&b=r0": payloads.RunComparison,
    }
    _, guard = create_app(RunRegistry(path), host="127.0.0.1", port=8765, token=TOKEN)
    answers = {}
    with TestClient(guard, base_url="http://127.0.0.1:8765") as client:
        for request in requests:
            # WHEN each endpoint answers
            response = client.get(request, headers={"X-GGML-Viz-Token": TOKEN})
            assert response.status_code == 200, (request, response.text)
            answers[request] = response.json()
    # THEN every object in each answer has its TypedDict's required keys and no other
    for request, declared in requests.items():
        assert shape_problems(answers[request], declared) == [], request
    # and what a synthetic run leaves empty was there to check
    assert answers[f"/api/runs/r0/node?graph={graph}&index={int(node.node_index)}"]["values"]
    assert answers["/api/runs/r0/stats"]["activation_by_layer"]
    assert answers["/api/runs/r0/memory"]["buffers"]["kv_cache"]["layers"]
    assert answers["/api/runs/r0/memory"]["disk"]["files"][0]["rows"]["start"]
