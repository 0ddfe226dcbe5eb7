"""The C extension and Python agree where both read the same thing (the twins that read graphs:
test_recorder_twins.py)."""

from __future__ import annotations

import numpy as np
import pytest

from ggml_viz.layers import layer_of
from tests.tensor_graphs import NAMES

extension = pytest.importorskip("ggml_viz.capture.core._recorder", reason="the C recorder's extension was not built")


@pytest.mark.parametrize("name", NAMES)
def test_the_c_recorder_reads_layers_as_python_does(name):
    assert extension.layer_of(name) == layer_of(name)


def test_description_ids_refuse_sizes_that_do_not_match():
    table = extension.DescriptionIds(16)
    with pytest.raises(ValueError, match="sizes do not match"):
        table.assign(b"\0" * 17, np.zeros(1, np.int64), 0)
    with pytest.raises(ValueError, match="sizes do not match"):
        table.assign(b"\0" * 16, np.zeros(2, np.int64), 0)


def _llama_batch(tokens: list[int], first_position: int, seq_id: int = 0):
    """A real llama_batch (llama.cpp allocates it), as a program fills it before llama_decode."""
    import llama_cpp

    batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
    batch.n_tokens = len(tokens)
    for i, token in enumerate(tokens):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, first_position + i, 1
        batch.seq_id[i][0] = seq_id
        batch.logits[i] = i == len(tokens) - 1
    return batch


@pytest.mark.llama_cpp
def test_the_c_decode_bracket_copies_each_batch_and_samples_calls():
    import ctypes

    import llama_cpp

    from ggml_viz.capture.contract.records import DECODE
    from ggml_viz.capture.llama_cpp_python.c_recorder import CGraphRecorder
    from ggml_viz.capture.llama_cpp_python.llama_info import batch_offsets, read_batch_in_python

    # GIVEN the C decode bracket with --sample 3, and a prompt call then seven decode calls
    recorder = CGraphRecorder().c_recorder
    recorder.set_decode_rules(False, 3, 32, 10**15, batch_offsets())
    batches = [_llama_batch([11, 12, 13, 14], 0)] + [_llama_batch([20 + i], 4 + i, seq_id=2) for i in range(7)]
    timed, write_now = [], []
    try:
        for batch in batches:
            recorder.begin_decode(ctypes.addressof(batch))
            timed.append(recorder.time_nodes)
            write_now.append(recorder.end_decode(0))
        recorder.begin_decode(ctypes.addressof(batches[1]))  # a call still running when Python takes
        record = recorder.take_decodes()
        calls = np.frombuffer(record.calls, DECODE.dtype).tolist()
        token_ids, positions, seq_ids, outputs = record.token_ids, record.positions, record.seq_ids, record.outputs
        # THEN the first prompt call and the 1st, 4th and 7th decode calls time their nodes
        assert timed == [1, 1, 0, 0, 1, 0, 0, 1]
        assert write_now == [0] * 8  # no graph ran: nothing to write
        # AND each finished call comes with its index, token count and a copy of its batch,
        # the same as the Python reading of it
        assert [call[0] for call in calls] == list(range(8)) and [call[4] for call in calls] == [4] + [1] * 7
        for (_, start, end, _, n, lowest, _, first), batch in zip(calls, batches, strict=True):
            expected = read_batch_in_python(batch)
            assert (n, lowest) == expected[:2] and start <= end
            int32s = slice(4 * first, 4 * (first + n))
            assert (token_ids[int32s], positions[int32s], seq_ids[int32s]) == expected[2:5]
            assert outputs[first : first + n] == expected[5]
        # AND the running call stays for the next take, with its tokens
        recorder.end_decode(0)
        record = recorder.take_decodes()
        calls = np.frombuffer(record.calls, DECODE.dtype)
        assert calls["index"].tolist() == [8] and np.frombuffer(record.token_ids, np.int32).tolist() == [20]
    finally:
        for batch in batches:
            llama_cpp.llama_batch_free(batch)
