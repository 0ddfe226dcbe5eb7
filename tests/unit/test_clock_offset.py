"""The clock offset between a head and a worker, bounded by the messages both recorded."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ggml_viz.analysis.join.clocks import clock_offset
from ggml_viz.analysis.join.remote_nodes import _match_in_order


def exchanged(offset_ns: int, n: int = 200, seed: int = 0) -> pd.DataFrame:
    """Requests and responses on a link with random latencies and processing delays: the head's
    times on its clock, the worker's (w_*) on a clock `offset_ns` ahead."""
    rng = np.random.default_rng(seed)
    rows = []
    now = 1_000_000_000
    for sequence in range(n):
        latency = int(rng.integers(20_000, 400_000))  # the message's time on the wire
        read_late = int(rng.integers(0, 50_000))  # the receiver reads it this long after it arrived
        response = bool(sequence % 3 == 2)
        sent, received = now, now + latency + read_late
        if response:  # the worker sent it: its start on its clock, the head's first byte on the head's
            rows.append(
                {"sequence": sequence, "is_response": True, "start_ns": received, "w_start_ns": sent + offset_ns}
            )
        else:
            rows.append(
                {"sequence": sequence, "is_response": False, "start_ns": sent, "w_start_ns": received + offset_ns}
            )
        now = received + int(rng.integers(10_000, 2_000_000))
    return pd.DataFrame(rows)


def test_the_offset_found_holds_the_true_one_within_its_uncertainty():
    for true_offset in (0, 3_210_987, -987_654_321_000):
        # GIVEN messages between two clocks `true_offset` apart
        found = clock_offset(exchanged(true_offset))
        # THEN the interval the messages bound holds the true offset, and is stated as ± uncertainty
        assert found is not None and found.consistent
        assert found.lower_ns <= true_offset <= found.upper_ns
        assert abs(found.offset_ns - true_offset) <= found.uncertainty_ns + 1
        # AND is no wider than the fastest round trip allows (here under a millisecond)
        assert found.uncertainty_ns < 400_000


def test_bounds_that_cross_are_said():
    # GIVEN a worker whose clock jumped mid-run (the bounds then contradict each other)
    messages = exchanged(0)
    messages.loc[messages.index[100:], "w_start_ns"] += 50_000_000
    found = clock_offset(messages)
    # THEN the result says so rather than giving a confident offset
    assert found is not None and not found.consistent


def test_no_message_no_offset():
    assert clock_offset(exchanged(0).iloc[0:0]) is None


def test_nodes_match_in_order_by_name():
    # each worker node: the next head node of its name (names may repeat: views)
    head = ["inp_embd", "norm-0", "x (view)", "attn-0", "x (view)", "out"]
    assert _match_in_order(["norm-0", "x (view)", "x (view)", "out"], head) == [1, 2, 4, 5]
    assert _match_in_order(["missing", "out"], head) == [-1, 5]
