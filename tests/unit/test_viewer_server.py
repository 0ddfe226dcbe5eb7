"""The viewer's server on a synthetic run: its API, level of detail and filters, and what
keeps it safe (Host, Origin, token, paths, headers, bind address)."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from ggml_viz._errors import CommandError
from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.ui.app import RunRegistry, create_app
from ggml_viz.ui.inline import module_order
from ggml_viz.ui.run_view import RunView
from ggml_viz.ui.server import make_viewer, remote_warning
from ggml_viz.ui.views.events import EventFilter
from ggml_viz.ui.views.timeline import DETAIL_LIMIT

PORT = 8765
TOKEN = "test-token"
BASE = f"http://127.0.0.1:{PORT}"


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    return write_synthetic_run(tmp_path_factory.mktemp("viewer") / "synthetic.ggmlviz", graphs=40, layers=6)


@pytest.fixture(scope="module")
def client(run_path):
    _, guard = create_app(RunRegistry(run_path), host="127.0.0.1", port=PORT, token=TOKEN)
    with TestClient(guard, base_url=BASE) as test_client:
        yield test_client


def get(client, path, token=TOKEN, **headers):
    return client.get(path, headers={"X-GGML-Viz-Token": token, **headers} if token else headers)


# -- the API ---------------------------------------------------------------------------


def test_the_page_and_the_api_answer(client):
    page = client.get("/")
    assert page.status_code == 200 and "app.js" in page.text
    assert client.get("/static/app.js").status_code == 200
    runs = get(client, "/api/runs").json()["runs"]
    assert [run["run_id"] for run in runs] == ["r0"] and runs[0]["status"] == "complete"
    overview = get(client, "/api/runs/r0/overview").json()
    assert overview["summary"]["graphs"] == 40 and "MUL_MAT" in overview["ops"]
    node = get(client, "/api/runs/r0/node?graph=3&index=3").json()
    assert node["name"] == "Qcur-0" and node["op"] == "MUL_MAT" and node["layer"] == 0
    assert {source["name"] for source in node["sources"]} == {"attn_norm-0", "blk.0.attn_q.weight"}
    weight = next(source for source in node["sources"] if source["name"] == "blk.0.attn_q.weight")
    assert weight["memory"] == "disk" and weight["file_offset"] >= 4096
    graph = get(client, "/api/runs/r0/graph/2").json()
    assert {item["kind"] for item in graph["items"]} >= {"layer", "node"} and graph["layers"] == list(range(6))
    layer = get(client, "/api/runs/r0/graph/2?layer=1").json()
    assert {item["name"] for item in layer["items"] if item["kind"] == "weight"} >= {"blk.1.ffn_up.weight"}
    stats = get(client, "/api/runs/r0/stats").json()
    assert stats["by_op"][0]["op"] == "MUL_MAT" and stats["findings"]
    memory = get(client, "/api/runs/r0/memory").json()
    regions = memory["disk"]["files"][0]["regions"]
    assert regions["reads"][regions["name"].index("blk.0.attn_q.weight")] == 40  # read once per graph


def test_every_module_of_the_page_is_served_as_javascript(client):
    for path in module_order():
        response = client.get(f"/static/{path}")
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith("text/javascript"), path
    assert client.get("/static/app.css").headers["content-type"].startswith("text/css")
    for path in ["/static/js/nothing.js", "/static/js/..%2f..%2fapp.py", "/static/js/%2e%2e/inline.py", "/static/js"]:
        assert client.get(path).status_code == 404, path


def test_the_package_ships_every_file_of_the_page():
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["ggml_viz"]
    package = root / "src" / "ggml_viz"
    shipped = {path for pattern in globs for path in package.glob(pattern) if path.is_file()}
    page = {path for path in (package / "ui" / "static").rglob("*") if path.is_file()}
    assert page - shipped == set()


def test_bad_arguments_get_one_clear_error(client):
    assert get(client, "/api/runs/r0/timeline?t0=soon").status_code == 400
    assert "must be a number" in get(client, "/api/runs/r0/timeline?t0=soon").text
    assert get(client, "/api/runs/r0/node?graph=1").status_code == 400
    assert get(client, "/api/runs/r0/node?graph=999&index=0").status_code == 404
    assert get(client, "/api/runs/r0/graph/999").status_code == 404
    assert get(client, "/api/runs/r0/graph/1?layer=x").status_code == 400


def test_a_wide_window_is_summed_per_pixel_and_a_narrow_one_is_exact(run_path):
    view = RunView("r0", run_path)
    assert view.n_events == 40 * (6 * 19 + 2)
    whole = view.timeline(0, view.duration_ns, 300)
    lane = whole["lanes"][0]
    assert len(lane["graphs"]["start"]) == 40
    # every pixel column that holds node time is there, none twice, and the bars are few
    assert len(lane["nodes"]["start"]) + len(lane["columns"]["px"]) > 0
    assert len(set(lane["columns"]["px"])) == len(lane["columns"]["px"]) <= 300
    assert len(lane["nodes"]["start"]) <= DETAIL_LIMIT
    # one graph, zoomed: each of its nodes as its own bar, in order
    graphs = view.graphs
    g0, g1 = int(graphs["start_ns"].iloc[5]) - view.origin_ns, int(graphs["end_ns"].iloc[5]) - view.origin_ns
    narrow = view.timeline(g0, g1, 1000)["lanes"][0]
    assert narrow["columns"]["px"] == []
    inside = [s for s in narrow["nodes"]["start"] if g0 <= s < g1]
    assert len(inside) == 6 * 19 + 2 and inside == sorted(inside)


def test_event_filters_combine(run_path):
    view = RunView("r0", run_path)
    matmuls = view.events(EventFilter(op="MUL_MAT"), 0, 10)
    assert matmuls["total"] == 40 * (6 * 9 + 1)  # per layer: q, k, v, kq, kqv, out, gate, up, down
    ffn_layer_2 = view.events(EventFilter(op="MUL_MAT", name="ffn", layer=2), 0, 500)
    assert ffn_layer_2["total"] == 40 * 3
    assert {row["name"] for row in ffn_layer_2["rows"]} == {"ffn_gate-2", "ffn_up-2", "ffn_out-2"}
    regions = view.run.memory_map
    q0 = regions[regions["name"] == "blk.0.attn_q.weight"].iloc[0]
    readers = view.events(EventFilter(file_lo=int(q0["start"]), file_hi=int(q0["end"])), 0, 500)
    assert readers["total"] == 40 and {row["name"] for row in readers["rows"]} == {"Qcur-0"}
    first = view.graphs["start_ns"].iloc[10] - view.origin_ns
    window = view.events(EventFilter(t0=int(first), t1=int(first) + 1), 0, 5)
    assert window["total"] == 1 and window["rows"][0]["graph_id"] == 10


# -- security ---------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "127.0.0.1:9999", "localhost.evil.com:8765", "127.0.0.1.nip.io:8765"])
def test_a_foreign_host_is_refused(client, host):
    assert get(client, "/api/runs", Host=host).status_code == 403
    assert client.get("/", headers={"Host": host}).status_code == 403


@pytest.mark.parametrize("host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}"])
def test_the_own_host_is_served(client, host):
    assert get(client, "/api/runs", Host=host).status_code == 200


@pytest.mark.parametrize(
    "origin", ["http://localhost.evil.com", "null", "http://evil.example", f"https://127.0.0.1:{PORT}"]
)
def test_a_foreign_origin_is_refused_on_the_stream_and_the_api(client, origin):
    assert get(client, f"/api/runs/r0/live?token={TOKEN}", token=None, Origin=origin).status_code == 403
    assert get(client, "/api/runs/r0/overview", Origin=origin).status_code == 403


def test_the_own_origin_is_served(client):
    assert get(client, "/api/runs/r0/overview", Origin=BASE).status_code == 200


def test_the_api_needs_the_token(client):
    assert get(client, "/api/runs", token=None).status_code == 401
    assert get(client, "/api/runs", token="wrong").status_code == 401
    assert client.get(f"/api/runs?token={TOKEN}").status_code == 200
    assert client.get("/api/runs?token=").status_code == 401


@pytest.mark.parametrize(
    "path",
    [
        "/static/..%2f..%2fapp.py",
        "/static/%2e%2e%2fapp.py",
        "/static/../ui/app.py",
        "/static/%2Fetc%2Fpasswd",
        "/api/runs/..%2f..%2fetc/overview",
        "/api/runs/%2e%2e/overview",
        "/api/runs/%2Fetc%2Fpasswd/overview",
        "/api/runs/r9/overview",
        "/etc/passwd",
        "/static/index.html",
    ],
)
def test_paths_outside_the_served_runs_are_not_found(client, path):
    assert get(client, path).status_code == 404


def test_responses_carry_the_security_headers(client):
    for response in (client.get("/"), get(client, "/api/runs"), get(client, "/api/runs", token="wrong")):
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"


def test_a_non_loopback_bind_needs_the_flag(run_path):
    with pytest.raises(CommandError, match="explicit --host"):
        make_viewer(run_path, host="0.0.0.0", port=0)
    viewer = make_viewer(run_path, host="0.0.0.0", port=0, allow_remote=True)
    viewer.sock.close()
    assert remote_warning("0.0.0.0") and remote_warning("127.0.0.1") is None


def test_a_damaged_run_is_one_clear_error(tmp_path):
    damaged = tmp_path / "damaged.ggmlviz"
    damaged.mkdir()
    (damaged / "manifest.json").write_text("{not json")
    with pytest.raises(Exception, match="manifest"):
        make_viewer(damaged, port=0)


def test_two_runs_compare_through_the_api(tmp_path):
    folder = tmp_path / "runs"
    write_synthetic_run(folder / "a.ggmlviz", graphs=10, layers=3, seed=1)
    write_synthetic_run(folder / "b.ggmlviz", graphs=10, layers=4, seed=2)
    _, guard = create_app(RunRegistry(folder), host="127.0.0.1", port=PORT, token=TOKEN)
    with TestClient(guard, base_url=BASE) as client:
        assert [run["name"] for run in get(client, "/api/runs").json()["runs"]] == ["a.ggmlviz", "b.ggmlviz"]
        result = get(client, "/api/compare?a=r0&b=r1").json()
        by_layer = {(row["phase"], row["layer"]) for row in result["per_graph_time_by"]["layer"]}
        assert ("decode", "3") in by_layer  # a layer only B has
        assert get(client, "/api/compare?a=r0&b=r7").status_code == 404


def test_a_run_still_recording_is_followed_without_live_until_it_completes(tmp_path):
    from ggml_viz.runformat.synthetic import SyntheticRecording

    # GIVEN a plain viewer (no --live) of a run being recorded, showing its first 3 graphs
    recording = SyntheticRecording(tmp_path / "server.ggmlviz", layers=2, seed=4)
    recording.append_graphs(3)
    recording.writer.flush_graphs()
    registry = RunRegistry(recording.run_dir)
    _, guard = create_app(registry, host="127.0.0.1", port=PORT, token=TOKEN)
    with TestClient(guard, base_url=BASE) as client:
        first = get(client, "/api/runs/r0/overview").json()["summary"]
        assert (first["graphs"], first["status"]) == (3, "recording")
        # WHEN the recording gains graphs and the page's live stream polls the run
        recording.append_graphs(5)
        recording.writer.flush_graphs()
        registry.refresh("r0")
        # THEN the endpoints answer with every graph
        assert get(client, "/api/runs/r0/overview").json()["summary"]["graphs"] == 8
        assert len(get(client, "/api/runs/r0/graphs").json()["graphs"]) == 8
        # WHEN the recording completes
        recording.close()
        done = registry.refresh("r0")
        assert done.run.status == "complete" and len(done.graphs) == 8
        # THEN the run is followed no more: its files changing is not read again
        (recording.run_dir / "notes.txt").write_text("changed")
        assert registry.refresh("r0") is done
