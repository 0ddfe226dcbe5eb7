"""The C extension and Python agree where both read the same thing."""

from __future__ import annotations

import numpy as np
import pytest

from ggml_viz.capture.core.graph_decoder import PythonDescriptionIds, python_layers_of
from ggml_viz.layers import layer_of

extension = pytest.importorskip("ggml_viz.capture.core._recorder", reason="the C recorder's extension was not built")

NAMES = [
    "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "blk.x.weight", "blk.12", "Qcur-12", "Kcur-3 (view)",
    "kqv_out-7 (permuted) (cont)", "cache_k_l4", "cache_v_l17 (view)", "token_embd.weight", "result_output",
    "inp_embd", "norm", "", "a-b-3", "x-12y", "x_l", "x_l5-6", "ffn_out-29", "leaf_3", "node_-1", "-7",
    "a" * 63, "blk.3.x-5", "encoder.blocks.3.attn.query.weight", "decoder.blocks.12.mlp.0.bias", "blocks.2.x",
    "model.layers.7.self_attn.q_proj.weight", "h.4.mlp.c_fc.weight", "transformer.h.11.attn.weight", "xblocks.3.y",
    "blocks.x.3", "h.5", "encoder.blocks.3", "blocks.3.x-5", "a.h.2.blocks.9.x",
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_the_c_recorder_reads_layers_as_python_does(name):
    assert extension.layer_of(name) == layer_of(name)


def test_layers_of_name_fields_in_c_and_python_agree():
    # GIVEN name fields as ggml_tensor holds them: a C string, some with stale bytes after
    # its end (a tensor renamed to a shorter name)
    fields = np.zeros((len(NAMES), 64), dtype=np.uint8)
    for row, name in enumerate(NAMES):
        encoded = name.encode()[:63]
        fields[row, : len(encoded)] = np.frombuffer(encoded, np.uint8)
        if row % 3 == 0 and len(encoded) < 60:
            fields[row, len(encoded) + 1 :] = ord("7")  # "-7" would read as layer 7 if the end were missed
    layers = np.frombuffer(extension.layers_of(fields), np.int32)
    # THEN both read each name up to its end, as layer_of reads the name
    assert np.array_equal(layers, np.frombuffer(python_layers_of(fields), np.int32))
    assert layers.tolist() == [layer_of(name.encode()[:63].decode()) for name in NAMES]
    with pytest.raises(ValueError, match="64 bytes"):
        extension.layers_of(b"x" * 65)


def _descriptions(rng: np.random.Generator, n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """n descriptions of `size` bytes drawn from a few distinct ones (repeats), a third of
    them views of an earlier row or of a row outside the graph (-1)."""
    distinct = rng.integers(0, 256, size=(n // 4, size), dtype=np.uint8)
    distinct[:, size // 2 :] = 0  # trailing zeros, as a struct's unused bytes
    structs = distinct[rng.integers(0, len(distinct), size=n)]
    view_rows = np.full(n, -1, dtype=np.int64)
    views = rng.random(n) < 0.33
    views[0] = False
    view_rows[views] = [rng.integers(-1, row) for row in np.flatnonzero(views)]
    return np.ascontiguousarray(structs), view_rows


def test_description_ids_in_c_and_python_agree():
    # GIVEN the C table and its Python twin, fed the same descriptions over several graphs
    size = 336
    rng = np.random.default_rng(7)
    tables = [extension.DescriptionIds(size), PythonDescriptionIds(size)]
    next_ids = [0, 0]
    for graph in range(4):
        if graph == 2:  # a new buffer: the catalog forgets every description
            for table in tables:
                table.clear()
        structs, view_rows = _descriptions(rng, 3000, size)
        structs = np.concatenate([structs, structs[:500]])  # a graph may hold a description twice
        view_rows = np.concatenate([view_rows, view_rows[:500]])
        results = []
        for index, table in enumerate(tables):
            ids, new_rows, sources, next_ids[index] = table.assign(structs, view_rows, next_ids[index])
            results.append([np.frombuffer(column, np.int32) for column in (ids, new_rows, sources)])
        # THEN they give the same ids, the same new rows and view sources, and count alike
        for c_column, python_column in zip(*results, strict=True):
            assert np.array_equal(c_column, python_column)
        assert next_ids[0] == next_ids[1] and len(tables[0]) == len(tables[1])
        ids, new_rows, _ = results[0]
        # AND a description's id is the one of its first row; rows seen before are not new
        assert len(np.unique(ids)) == len(new_rows) or graph not in (0, 2)
        assert len(set(ids[new_rows].tolist())) == len(new_rows)


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

    from ggml_viz.capture.core.raw_graph import DECODE_DTYPE
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
        calls = np.frombuffer(record.calls, DECODE_DTYPE).tolist()
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
        calls = np.frombuffer(record.calls, DECODE_DTYPE)
        assert calls["index"].tolist() == [8] and np.frombuffer(record.token_ids, np.int32).tolist() == [20]
    finally:
        for batch in batches:
            llama_cpp.llama_batch_free(batch)


def test_the_preload_library_reads_the_settings_the_table_declares_for_it():
    import ctypes

    from ggml_viz.capture.preload.library import preload_path
    from ggml_viz.capture.settings import preload_environment_names

    # GIVEN the preload library's own list of the variables it reads (it holds no Python)
    library = ctypes.CDLL(str(preload_path()))
    declared_in_c = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(library, "ggml_viz_preload_settings")))
    # THEN it is the settings table's list for native programs, name for name
    assert tuple(declared_in_c.decode().split(",")) == preload_environment_names()
