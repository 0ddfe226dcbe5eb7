"""Which tokens of a llama_decode batch each of its graphs computed, from the ids its token lookup
read, for each way llama.cpp splits a batch into ubatches (llama_batch_allocr::split_simple,
split_equal, split_seq)."""

from __future__ import annotations

import numpy as np

from ggml_viz.capture.core.context_tracer import ubatch_places


def _batch(*sequences: list[int]) -> dict[str, np.ndarray]:
    """A batch of these sequences' tokens, one sequence after the other (as llama-server builds it)."""
    token_ids = [token for tokens in sequences for token in tokens]
    seq_ids = [seq for seq, tokens in enumerate(sequences) for _ in tokens]
    return {"token_id": np.array(token_ids, np.int32), "seq_id": np.array(seq_ids, np.int32)}


def _split(batch: dict[str, np.ndarray], ubatches: list[list[int]]) -> list[list[int] | None]:
    """The places each ubatch's ids are read as, in turn."""
    untaken = np.ones(len(batch["token_id"]), bool)
    found: list[list[int] | None] = []
    for ids in ubatches:
        places = ubatch_places(batch, untaken, np.array(ids, np.int32))
        found.append(None if places is None else places.tolist())
        if places is not None:
            untaken[places] = False
    return found


def test_the_next_tokens_in_the_batch_s_order_are_a_simple_split():
    batch = _batch([5, 6, 7], [8, 9])
    assert _split(batch, [[5, 6], [7, 8], [9]]) == [[0, 1], [2, 3], [4]]


def test_equal_runs_of_each_sequence_are_read_as_such_where_a_later_token_repeats_an_earlier_one():
    # GIVEN two sequences, the second's first token also the first's third
    batch = _batch([1, 2, 9, 3], [9, 4, 5, 6])
    # WHEN llama.cpp takes two tokens of each at a time (a memory per sequence)
    # THEN each ubatch holds the first sequence's next two, then the second's
    assert _split(batch, [[1, 2, 9, 4], [9, 3, 5, 6]]) == [[0, 1, 4, 5], [2, 3, 6, 7]]


def test_sequences_alike_are_told_apart_by_their_order():
    batch = _batch([7, 8, 9], [7, 8, 9], [7, 8, 9])
    assert _split(batch, [[7, 7, 7], [8, 8, 8], [9, 9, 9]]) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]


def test_sequences_of_different_lengths_end_in_runs_of_their_own():
    # GIVEN a decode step of one sequence and prompts of two others, in one batch
    batch = _batch([3], [10, 11, 12, 13], [20, 21, 22, 23, 24, 25])
    # WHEN llama.cpp takes a token of each, then runs of the two left, then the last's rest
    assert _split(batch, [[3, 10, 20], [11, 12, 13, 21, 22, 23], [24, 25]]) == [[0, 1, 5], [2, 3, 4, 6, 7, 8], [9, 10]]


def test_ids_not_in_the_batch_are_no_ubatch_of_it():
    batch = _batch([1, 2], [3, 4])
    assert _split(batch, [[1, 5]]) == [None]
