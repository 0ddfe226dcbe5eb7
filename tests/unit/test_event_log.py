"""The viewer's event log answers from each node's place in its structure and the times of
the graphs it needs: the same pages as filtering every node event, without building them."""

from __future__ import annotations

import numpy as np
import pytest

import ggml_viz
from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.ui import context
from ggml_viz.ui.run_view import RunView
from ggml_viz.ui.views.events import EventFilter


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    path = write_synthetic_run(tmp_path_factory.mktemp("log") / "log.ggmlviz", graphs=9, layers=2)
    return RunView("r", path)


def expected(view: RunView, where: EventFilter) -> list[tuple[int, int]]:
    """(graph_id, node_index) of the events passing `where`, filtering every event in pandas."""
    nodes = ggml_viz.open(view.path).nodes
    keep = np.ones(len(nodes), dtype=bool)
    if where.op:
        keep &= (nodes["op"] == where.op.upper()).to_numpy()  # the op filter ignores case
    if where.name:
        keep &= nodes["name"].str.lower().str.contains(where.name.lower(), regex=False).to_numpy()
    if where.layer is not None:
        keep &= (nodes["layer"] == where.layer).fillna(False).to_numpy()
    origin = view.origin_ns
    if where.t0 is not None:
        keep &= (nodes["timed"] & (nodes["end_ns"] - origin > where.t0)).fillna(False).to_numpy()
    if where.t1 is not None:
        keep &= (nodes["timed"] & (nodes["start_ns"] - origin < where.t1)).fillna(False).to_numpy()
    chosen = nodes[keep]
    return list(zip(chosen["graph_id"].tolist(), chosen["node_index"].tolist(), strict=True))


@pytest.mark.parametrize("chunk", [256, 2])  # a chunk of graphs, or many small ones
@pytest.mark.parametrize(
    "where",
    [
        EventFilter(),
        EventFilter(op="MUL_MAT"),
        EventFilter(name="ffn_"),
        EventFilter(layer=1),
        EventFilter(op="mul_mat", layer=0),
        EventFilter(t0=3_000_000, t1=6_000_000),
        EventFilter(name="qcur", t0=2_500_000),
    ],
)
def test_every_page_is_the_events_filtering_all_of_them_gives(view, where, chunk, monkeypatch):
    monkeypatch.setattr(context, "EVENT_CHUNK_GRAPHS", chunk)
    view.event_log._filter_cache = None
    view._chunks.clear()
    wanted = expected(view, where)
    got: list[tuple[int, int]] = []
    offset = 0
    while True:
        page = view.events(where, offset, 37)
        assert page["total"] == len(wanted)
        if not page["rows"]:
            break
        got += [(row["graph_id"], row["node_index"]) for row in page["rows"]]
        offset += len(page["rows"])
    assert got == wanted


def test_a_row_carries_the_nodes_description_and_times(view):
    nodes = ggml_viz.open(view.path).nodes
    node = nodes[(nodes["graph_id"] == 4) & (nodes["name"] == "Qcur-1")].iloc[0]
    event = view.event_index(4, int(node["node_index"]))
    row = view.event_row(event)
    assert row["name"] == "Qcur-1" and row["op"] == "MUL_MAT" and row["layer"] == 1
    assert row["start_ns"] == node["start_ns"] - view.origin_ns and row["duration_ns"] == node["duration_ns"]
    assert row["wait_ns"] == node["wait_ns"]
    assert view.node(event)["name"] == "Qcur-1"
    assert [hit["name"] for hit in view.search("kq_soft")][:2] == ["kq_soft_max-0", "kq_soft_max-1"]
