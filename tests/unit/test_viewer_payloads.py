"""The JSON each endpoint answers matches its declaration in ggml_viz.ui.payloads: every
endpoint of a synthetic run is fetched, and each object in the answer, however deep, must
hold the keys its TypedDict requires and no key it does not declare. Every API route is
in the table below (the attention endpoint, which needs captured tensors, is checked on a
real run in tests/integration/test_viewer_payloads.py), and every TypedDict declared is
reached by one of them."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any, get_type_hints, is_typeddict

import pytest
from starlette.testclient import TestClient

from ggml_viz.runformat.manifest import load_manifest, write_manifest
from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.ui import payloads
from ggml_viz.ui.app import RunRegistry, create_app
from ggml_viz.ui.server import make_viewer

from ..gpu_runs import write_gpu_run
from ..machine_limits import keep_in_run, twice_as_fast_at_two_threads
from ..payload_shapes import declared_types, reachable_typeddicts, shape_problems

PORT = 8765
TOKEN = "test-token"
PREFIX = "/api/runs/{run_id:str}"

# (route, a request to it, what it answers); r0 has 40 graphs of 6 layers: 4,640 node
# events, so that the whole run's timeline sums narrow nodes per pixel column. r2 is a run
# on a GPU with every graph traced (7,000 kernels: its whole-run GPU lane sums them per pixel
# column): its timeline's GPU lanes, its overview's, a node's and the statistics' GPU parts.
ENDPOINTS: list[tuple[str, str, Any]] = [
    ("/api/runs", "/api/runs", payloads.RunsPayload),
    ("/api/compare", "/api/compare?a=r0&b=r1", payloads.RunComparison),
    (f"{PREFIX}/overview", "/api/runs/r0/overview", payloads.OverviewPayload),
    (f"{PREFIX}/timeline", "/api/runs/r0/timeline?width=300", payloads.TimelinePayload),
    (f"{PREFIX}/timeline", "/api/runs/r0/timeline?t0=0&t1=2000000&width=1000", payloads.TimelinePayload),
    (f"{PREFIX}/node", "/api/runs/r0/node?graph=3&index=3", payloads.NodePayload),
    (f"{PREFIX}/event/{{event:int}}", "/api/runs/r0/event/5", payloads.EventRow),
    (f"{PREFIX}/search", "/api/runs/r0/search?q=qcur", payloads.SearchPayload),
    (f"{PREFIX}/graphs", "/api/runs/r0/graphs", payloads.GraphListPayload),
    (f"{PREFIX}/graph/{{graph_id:int}}", "/api/runs/r0/graph/2", payloads.GraphLayout),
    (f"{PREFIX}/graph/{{graph_id:int}}", "/api/runs/r0/graph/2?layer=1", payloads.GraphLayout),
    (f"{PREFIX}/memory", "/api/runs/r0/memory", payloads.MemoryPayload),
    (f"{PREFIX}/occupancy/{{graph_id:int}}", "/api/runs/r0/occupancy/2", payloads.OccupancyPayload),
    (f"{PREFIX}/stats", "/api/runs/r0/stats", payloads.StatsPayload),
    (f"{PREFIX}/attention-index", "/api/runs/r0/attention-index", payloads.AttentionIndexPayload),
    (f"{PREFIX}/experts", "/api/runs/r0/experts", payloads.ExpertsPayload),
    (f"{PREFIX}/requests", "/api/runs/r0/requests", payloads.RequestsPayload),
    (f"{PREFIX}/requests", "/api/runs/r4/requests", payloads.RequestsPayload),
    (f"{PREFIX}/whatif", "/api/runs/r0/whatif", payloads.WhatifPayload),
    (f"{PREFIX}/whatif", "/api/runs/r3/whatif", payloads.WhatifPayload),
    (f"{PREFIX}/slots", "/api/runs/r0/slots", payloads.SlotsPayload),
    (f"{PREFIX}/slots", "/api/runs/r4/slots", payloads.SlotsPayload),
    (f"{PREFIX}/events", "/api/runs/r0/events?op=MUL_MAT&offset=10&limit=5", payloads.EventsPayload),
    (
        f"{PREFIX}/events",
        "/api/runs/r0/events?name=ffn&layer=2&t0=0&file_lo=0&file_hi=100000000",
        payloads.EventsPayload,
    ),
    (f"{PREFIX}/overview", "/api/runs/r2/overview", payloads.OverviewPayload),
    (f"{PREFIX}/timeline", "/api/runs/r2/timeline?width=300", payloads.TimelinePayload),
    (f"{PREFIX}/timeline", "/api/runs/r2/timeline?t0=0&t1=400000&width=1000", payloads.TimelinePayload),
    (f"{PREFIX}/node", "/api/runs/r2/node?graph=8&index=3", payloads.NodePayload),
    (f"{PREFIX}/stats", "/api/runs/r2/stats", payloads.StatsPayload),
    (f"{PREFIX}/live", "(first message of the stream)", payloads.LiveUpdate),
]
CHECKED_ON_A_REAL_RUN = {f"{PREFIX}/attention": payloads.AttentionPayload}


@pytest.fixture(scope="module")
def runs_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("payloads") / "runs"
    write_synthetic_run(folder / "a.ggmlviz", graphs=40, layers=6, seed=1)
    write_synthetic_run(folder / "b.ggmlviz", graphs=10, layers=4, seed=2)
    write_gpu_run(folder / "c-gpu.ggmlviz", graphs=40, layers=6, gpu_every=1, seed=3)
    # r3: a run on one thread holding this machine's limits at two thread counts, whose other
    # threads are predicted
    with_limits = write_synthetic_run(folder / "d-limits.ggmlviz", graphs=12, layers=4, seed=4)
    manifest = load_manifest(with_limits)
    manifest["contexts"][0].update(n_threads=1, n_threads_batch=1)
    write_manifest(with_limits, manifest)
    keep_in_run(with_limits, twice_as_fast_at_two_threads())
    # r4: a server's run, its graphs taking turns among three sequences
    write_synthetic_run(folder / "e-server.ggmlviz", graphs=24, layers=4, seed=5, sequences=3)
    return folder


@pytest.fixture(scope="module")
def answers(runs_folder) -> dict[str, Any]:
    """Each request of ENDPOINTS and the JSON it got."""
    app, guard = create_app(RunRegistry(runs_folder), host="127.0.0.1", port=PORT, token=TOKEN)
    got: dict[str, Any] = {}
    with TestClient(guard, base_url=f"http://127.0.0.1:{PORT}") as client:
        for _, request, _ in ENDPOINTS[:-1]:
            response = client.get(request, headers={"X-GGML-Viz-Token": TOKEN})
            assert response.status_code == 200, (request, response.text)
            got[request] = response.json()
    got[ENDPOINTS[-1][1]] = first_live_message(runs_folder / "a.ggmlviz")
    return got


def first_live_message(run_path) -> Any:
    """The live stream's first message, from a real server (the test client waits for a
    response to end, and this one never does)."""
    viewer = make_viewer(run_path, port=0, live=True)
    viewer.serve_in_background()
    try:
        url = viewer.url.replace("/?token=", "/api/runs/r0/live?token=")
        with urllib.request.urlopen(url, timeout=30) as stream:
            for line in stream:
                if line.startswith(b"data: "):
                    return json.loads(line[len(b"data: ") :])
    finally:
        viewer.stop()
    raise AssertionError("the live stream sent no message")


@pytest.mark.parametrize(("route", "request_", "declared"), ENDPOINTS, ids=[request for _, request, _ in ENDPOINTS])
def test_each_answer_has_the_keys_its_declaration_names(answers, route, request_, declared):
    # GIVEN the answer the endpoint gave for a synthetic run
    answer = answers[request_]
    # THEN every object in it has its TypedDict's required keys and no other
    assert shape_problems(answer, declared) == []


def test_the_check_sees_a_missing_and_an_undeclared_key(answers):
    # GIVEN an event row with one key taken away and one added
    row = dict(answers["/api/runs/r0/event/5"])
    del row["wait_ns"]
    row["colour"] = "red"
    # THEN the check names both, and it looks inside lists and nested objects too
    assert shape_problems(row, payloads.EventRow) == [
        "$: no 'wait_ns' (EventRow)",
        "$: 'colour' undeclared (EventRow)",
    ]
    overview = json.loads(json.dumps(answers["/api/runs/r0/overview"]))
    overview["summary"]["phases"][0]["tokens_per_step"] = 1
    assert shape_problems(overview, payloads.OverviewPayload) == [
        "$.summary.phases[0]: 'tokens_per_step' undeclared (PhaseRow)"
    ]


def test_the_answers_fill_what_the_declarations_leave_optional(answers):
    # the wide window summed narrow nodes per pixel column, the narrow one drew each node
    wide, narrow = (
        answers["/api/runs/r0/timeline?width=300"],
        answers["/api/runs/r0/timeline?t0=0&t1=2000000&width=1000"],
    )
    assert wide["lanes"][0]["columns"]["px"] and narrow["lanes"][0]["nodes"]["start"]
    # collapsed layers and nodes, and leaves once a layer is open: each kind's optional keys
    kinds = {
        item["kind"]
        for request in ("/api/runs/r0/graph/2", "/api/runs/r0/graph/2?layer=1")
        for item in answers[request]["items"]
    }
    assert {"layer", "node", "weight"} <= kinds
    assert answers["/api/compare?a=r0&b=r1"]["per_graph_time_by"]["layer"]
    # a GPU run: kernels one by one in a narrow window, summed per pixel column in a wide one
    (narrow_gpu,) = answers["/api/runs/r2/timeline?t0=0&t1=400000&width=1000"]["lanes"][0]["gpu"]
    (wide_gpu,) = answers["/api/runs/r2/timeline?width=300"]["lanes"][0]["gpu"]
    assert narrow_gpu["bars"]["start"] and narrow_gpu["traced"]["graph_id"] and wide_gpu["columns"]["px"]
    assert answers["/api/runs/r2/overview"]["gpu"]["steps"] and answers["/api/runs/r2/node?graph=8&index=3"]["gpu"]
    assert answers["/api/runs/r0/overview"]["gpu"] is None
    assert answers["/api/runs/r0/node?graph=3&index=3"]["gpu"] is None
    # other flags: none for a run on one device without limits at several thread counts, the
    # recorded placement and another thread count where they were measured
    assert answers["/api/runs/r0/whatif"]["reason"] and not answers["/api/runs/r0/whatif"]["rows"]
    rows = answers["/api/runs/r3/whatif"]["rows"]
    assert rows[0]["recorded"] and len(rows) >= 2 and rows[0]["memory"]["CPU"]["total"] > 0
    assert "-t 2" in rows[1]["flags"] and rows[1]["decode_tokens_per_s"] > rows[0]["decode_tokens_per_s"]


def test_every_api_route_and_every_declaration_is_checked(runs_folder):
    app, _ = create_app(RunRegistry(runs_folder), host="127.0.0.1", port=PORT, token=TOKEN)
    routes = {route.path for route in app.routes if route.path.startswith("/api")}
    checked = {route for route, _, _ in ENDPOINTS} | set(CHECKED_ON_A_REAL_RUN)
    assert routes == checked
    declared = {
        name: value for name, value in vars(payloads).items() if is_typeddict(value) and not name.startswith("_")
    }
    reached = set().union(
        *(declared_types(t) for t in [*(t for _, _, t in ENDPOINTS), *CHECKED_ON_A_REAL_RUN.values()])
    )
    # a declaration that only other declarations extend (LaneBars) is checked as part of them
    fields = {name: get_type_hints(value).items() for name, value in declared.items()}
    unchecked = [name for name in declared if not any(fields[name] <= fields[other] for other in reached)]
    assert unchecked == []


def test_every_declaration_has_its_twin_in_the_page_s_api_with_the_same_fields():
    # GIVEN the page's JSDoc typedefs (static/js/api.js), each with its @property names
    api = (Path(payloads.__file__).parents[1] / "static" / "js" / "api.js").read_text()
    typedefs: dict[str, set[str]] = {}
    current = None
    for line in api.splitlines():
        if found := re.search(r"@typedef \{Object\} (\w+)", line):
            current = found.group(1)
            typedefs[current] = set()
        elif current and (found := re.search(r"@property \{[^}]*\} \[?(\w+)", line)):
            typedefs[current].add(found.group(1))
        elif line.strip() == "*/":
            current = None
    # THEN every TypedDict the server declares or answers with, wherever it is declared (the
    # summary's records in ggml_viz.analysis, beside the functions that make them), has a typedef
    # of its name, with its keys exactly
    declared = {
        name: value for name, value in vars(payloads).items() if is_typeddict(value) and not name.startswith("_")
    }
    for answer in [*(t for _, _, t in ENDPOINTS), *CHECKED_ON_A_REAL_RUN.values()]:
        declared |= reachable_typeddicts(answer)
    from_analysis = {name for name, value in declared.items() if value.__module__.startswith("ggml_viz.analysis.")}
    assert {
        "RunSummary",
        "GpuTimerSummary",
        "RooflineSummary",
        "MoeSummary",
        "PlacementCheck",
        "RunComparison",
        "TimeDeltas",
        "OpDelta",
        "LayerDelta",
        "TensorDelta",
        "GraphLayout",
        "GraphItem",
        "GraphLink",
    } <= from_analysis
    missing = sorted(set(declared) - set(typedefs))
    differing = {
        name: sorted(set(get_type_hints(value)) ^ typedefs[name])
        for name, value in declared.items()
        if name in typedefs and set(get_type_hints(value)) != typedefs[name]
    }
    assert missing == [] and differing == {}
