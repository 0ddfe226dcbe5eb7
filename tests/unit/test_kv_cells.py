"""Slots' KV cells over time, read from a server's synthetic run (three sequences taking turns,
one token a call: graph g feeds sequence g % 3 at position g // 3): each sequence holds its
positions so far, carried between the calls that feed it, and their sum is the cells in all. The
real server's cells, shifts, reuses and reads are checked against llama-server itself in
tests/integration/test_served_kv.py."""

from __future__ import annotations

import numpy as np

import ggml_viz
from ggml_viz.analysis.kv import cells_by_call, cells_over_time, kv_event_table, kv_reads, kv_use
from ggml_viz.runformat.synthetic import write_synthetic_run

SEQUENCES = 3
GRAPHS = 24


def test_each_sequence_holds_its_positions_so_far(tmp_path):
    # GIVEN a server's run: 24 calls, three sequences in turn
    run = ggml_viz.open(write_synthetic_run(tmp_path / "server.ggmlviz", graphs=GRAPHS, layers=2, sequences=SEQUENCES))
    # WHEN its cells are read per call
    cells = cells_over_time(run)
    # THEN after call g each sequence seen holds the positions it fed: g // 3 + 1 for the one fed,
    # and what it held before for the others
    for call in range(GRAPHS):
        held = cells[cells["decode_index"] == call].set_index("seq_id")["cells"].to_dict()
        expected = {seq: (call - seq) // SEQUENCES + 1 for seq in range(min(call + 1, SEQUENCES))}
        assert held == expected, call
    # AND the calls' ends are the graphs' decode ends, from the run's first graph
    ends = run.graphs["decode_end_ns"].to_numpy() - run.graphs["start_ns"].min()
    assert np.array_equal(cells_by_call(run)["time_ns"].to_numpy(), ends)


def test_the_summary_s_part_of_a_run_without_a_cache_says_what_it_can(tmp_path):
    run = ggml_viz.open(write_synthetic_run(tmp_path / "server.ggmlviz", graphs=GRAPHS, layers=2, sequences=SEQUENCES))
    use = kv_use(run)
    # THEN the cells are there: each sequence's last positions, and at most their sum at once
    assert use is not None and use["peak_cells_by_sequence"] == {"0": 8, "1": 8, "2": 8}
    assert use["peak_cells"] == 24
    # AND without KV cache tensors no capacity, no bytes per token; no shift nor reuse
    assert use["capacity"] is None and use["decode_kv_bytes_per_token"] is None
    assert (use["context_shifts"], use["cache_reuses"]) == (0, 0) and kv_event_table(run).empty
    assert (kv_reads(run)["kv_bytes"] == 0).all()
