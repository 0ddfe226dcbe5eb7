"""A long run's per-graph op totals grouped a batch of rows at a time give what one pass gives:
the growth-with-context finding over totals cut into small batches, the op codes of chunks with
dictionaries of their own, and the whole-run timeline's one graph bar per pixel column."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ggml_viz.analysis import findings
from ggml_viz.analysis.op_codes import op_codes
from ggml_viz.runformat.totals import GRAPH_OP_TOTALS
from ggml_viz.ui.views.timeline import _longest_per_column

from .test_summary_at_scale import growing_run, reference_growth


def test_the_growth_finding_over_totals_in_small_batches_is_that_over_every_row(tmp_path):
    run = growing_run(tmp_path / "growing.ggmlviz")
    expected = reference_growth(run)
    assert expected and findings._growth_with_context(run) == expected
    stored = run.totals_table(GRAPH_OP_TOTALS)
    for rows in (1, 7, 50):  # batches cutting a graph's rows apart
        rebatched = pa.Table.from_batches(stored.to_batches(max_chunksize=rows))
        run.totals_table = lambda name, table=rebatched: table
        assert findings._growth_with_context(run) == expected


def test_op_codes_map_each_chunk_s_dictionary_onto_one_list_of_ops():
    table = pa.table({"op": pa.chunked_array([["MUL", "ADD", None, "MUL"], [], ["ROPE", "ADD"], ["MUL"]])})
    names, codes = op_codes(table)
    assert names == ["MUL", "ADD", "ROPE"]
    assert [names[c] if c >= 0 else None for c in codes.tolist()] == table.column("op").to_pylist()
    assert op_codes(table)[1] is codes  # hashed once while the table lives


def test_a_crowded_window_shows_the_longest_graph_starting_in_each_pixel_column():
    start = np.array([0, 2, 5, 9, 10, 11, 35, 40], np.int64)
    end = np.array([2, 5, 8, 30, 11, 12, 39, 41], np.int64)
    shown = _longest_per_column(start, end, 0, 10.0)  # columns 0, 0, 0, 0, 1, 1, 3, 4
    assert shown.tolist() == [3, 4, 6, 7]  # (of 0..9: the 21 ns from 9; of 10..19: the first of equals)
    assert _longest_per_column(start[:0], end[:0], 0, 10.0).tolist() == []


def test_tokens_already_in_order_are_known_so_as_a_sort_would_find():
    from ggml_viz.analysis.requests import _in_order

    rng = np.random.default_rng(7)
    for _ in range(200):
        keys = tuple(rng.integers(0, 3, 6) for _ in range(3))  # (last, middle, first), many ties
        identity = (np.lexsort(keys) == np.arange(6)).all()
        assert _in_order(*keys) == identity
        ordered = tuple(key[np.lexsort(keys)] for key in keys)
        assert _in_order(*ordered)
