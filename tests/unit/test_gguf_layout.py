"""The GGUF layout reader on small files the tests write: exact maps, and one clear error,
fast, for every malformed file."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggml_viz._errors import ModelFileError
from ggml_viz.modelfile.layout import category_of, read_layout

from ..hostile_files import read_mutated, refused_fast
from ..vocab_files import require_vocab_files


def write_small_model(path, *, alignment: int | None = None) -> None:
    """A tiny llama-like GGUF written with gguf's own writer."""
    writer = GGUFWriter(str(path), "llama")
    if alignment:
        writer.add_custom_alignment(alignment)
    writer.add_block_count(2)
    writer.add_token_list([f"tok{i}" for i in range(100)])
    writer.add_token_scores([float(i) for i in range(100)])
    rng = np.random.default_rng(0)
    writer.add_tensor("token_embd.weight", rng.standard_normal((100, 16)).astype(np.float32))
    for layer in range(2):
        writer.add_tensor(f"blk.{layer}.attn_norm.weight", rng.standard_normal(16).astype(np.float32))
        writer.add_tensor(f"blk.{layer}.attn_q.weight", rng.standard_normal((16, 16)).astype(np.float16))
        writer.add_tensor(f"blk.{layer}.ffn_up.weight", rng.standard_normal((40, 16)).astype(np.float32))
    writer.add_tensor("output_norm.weight", rng.standard_normal(13).astype(np.float32))  # 52 bytes: padded
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def small_model(tmp_path):
    path = tmp_path / "small.gguf"
    write_small_model(path)
    return path


@pytest.mark.parametrize("alignment", [None, 64])
def test_the_map_matches_gguf_and_covers_every_byte(tmp_path, alignment):
    # GIVEN a valid file written by gguf
    path = tmp_path / "small.gguf"
    write_small_model(path, alignment=alignment)
    # WHEN its layout is read
    layout = read_layout(path)
    # THEN every tensor sits where gguf's reader says, and the regions tile the file
    reader = GGUFReader(path)
    assert layout.data_offset == reader.data_offset
    assert layout.alignment == (alignment or 32)
    expected = {t.name: (int(t.data_offset), int(t.n_bytes), [int(d) for d in t.shape]) for t in reader.tensors}
    assert {t.name: (t.start, t.nbytes, list(t.shape)) for t in layout.tensors} == expected
    position = 0
    for region in layout.regions:
        assert region.start == position and region.end > region.start
        position = region.end
    assert position == path.stat().st_size
    assert layout.problems == []
    padding = [r for r in layout.regions if r.kind == "padding"]
    assert padding and all(r.nbytes < layout.alignment for r in padding)
    assert layout.tensor("output_norm.weight").padding_after == 12


def test_layers_categories_and_summaries(small_model):
    layout = read_layout(small_model)
    q = layout.tensor("blk.1.attn_q.weight")
    assert (q.layer, q.category, q.type, q.bits_per_weight) == (1, "attention", "f16", 16.0)
    assert layout.tensor("token_embd.weight").layer == -1
    categories = {row["category"]: row for row in layout.summary("category")}
    assert set(categories) == {"input", "attention", "ffn", "norm"}
    assert sum(row["share"] for row in categories.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("token_embd.weight", "input"),
        ("blk.3.attn_k.weight", "attention"),
        ("blk.3.ffn_gate.weight", "ffn"),
        ("blk.3.ffn_norm.weight", "norm"),
        ("output_norm.weight", "norm"),
        ("output.weight", "output"),
        ("rope_freqs.weight", "other"),
    ],
)
def test_categories(name, category):
    assert category_of(name) == category


# -- malformed files ------------------------------------------------------------------


def gguf_bytes(
    *, magic=b"GGUF", version=3, kvs=(), tensors=(), n_tensors=None, n_kv=None, data=b"", pad_to=32
) -> bytes:
    """Raw GGUF bytes from parts, so that a test can make any field lie."""

    def string(text: bytes) -> bytes:
        return struct.pack("<Q", len(text)) + text

    out = magic + struct.pack("<I", version)
    out += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv)
    for key, raw_value in kvs:
        out += string(key) + raw_value
    for name, dims, ggml_type, offset in tensors:
        out += string(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ggml_type, offset)
    out += b"\0" * (-len(out) % pad_to)
    return out + data


U32, STRING, ARRAY = 4, 8, 9
ONE_F32 = [(b"w", [4], 0, 0)]  # a 4-element f32 tensor at data offset 0


def u32_value(value: int) -> bytes:
    return struct.pack("<II", U32, value)


BAD_FILES = {
    "empty": (b"", "magic number"),
    "bad magic": (b"GGML" + bytes(40), "not b'GGUF'"),
    "truncated header": (gguf_bytes()[:10], "runs past the end"),
    "version 1": (gguf_bytes(version=1), "version 1 is not supported"),
    "version 99": (gguf_bytes(version=99), "version 99"),
    "huge n_kv": (gguf_bytes(n_kv=2**63), "metadata entries"),
    "huge n_tensors": (gguf_bytes(n_tensors=2**40), "tensors, more than"),
    "key past the end": (
        gguf_bytes(kvs=[(b"k", struct.pack("<IQ", STRING, 10) + b"0123456789")] * 2, n_kv=3, pad_to=1),
        "runs past the end",
    ),
    "string past the end": (
        gguf_bytes(kvs=[(b"k", struct.pack("<IQ", STRING, 2**40) + b"abc")]),
        "runs past the end",
    ),
    "array length past the end": (
        gguf_bytes(kvs=[(b"k", struct.pack("<IIQ", ARRAY, U32, 2**61))]),
        "claims 2305843009213693952 elements",
    ),
    "string array length past the end": (
        gguf_bytes(kvs=[(b"k", struct.pack("<IIQ", ARRAY, STRING, 2**50))]),
        "elements, more than the file holds",
    ),
    "unknown value type": (gguf_bytes(kvs=[(b"k", struct.pack("<I", 77))]), "unknown value type 77"),
    "unknown array element type": (
        gguf_bytes(kvs=[(b"k", struct.pack("<IIQ", ARRAY, 99, 1))]),
        "unknown type 99",
    ),
    "deeply nested arrays": (
        gguf_bytes(kvs=[(b"k", struct.pack("<IIQ", ARRAY, ARRAY, 1) + struct.pack("<IQ", ARRAY, 1) * 6)]),
        "nests arrays",
    ),
    "alignment 0": (gguf_bytes(kvs=[(b"general.alignment", u32_value(0))]), "not a power of two"),
    "alignment 48": (gguf_bytes(kvs=[(b"general.alignment", u32_value(48))]), "not a power of two"),
    "alignment a string": (
        gguf_bytes(kvs=[(b"general.alignment", struct.pack("<IQ", STRING, 2) + b"32")]),
        "not a number",
    ),
    "unknown tensor type": (gguf_bytes(tensors=[(b"w", [4], 250, 0)], data=bytes(16)), "unknown type 250"),
    "zero dimension": (gguf_bytes(tensors=[(b"w", [4, 0], 0, 0)], data=bytes(16)), "zero dimension"),
    "five dimensions": (gguf_bytes(tensors=[(b"w", [1, 1, 1, 1, 1], 0, 0)], data=bytes(4)), "5 dimensions"),
    "huge dimension": (gguf_bytes(tensors=[(b"w", [2**40], 0, 0)], data=bytes(16)), "runs past the end"),
    "element count overflow": (
        gguf_bytes(tensors=[(b"w", [2**32, 2**32, 2**32], 0, 0)], data=bytes(16)),
        "more elements than can be addressed",
    ),
    "block size mismatch": (gguf_bytes(tensors=[(b"w", [33], 8, 0)], data=bytes(64)), "not a multiple"),
    "tensor data past the end": (gguf_bytes(tensors=ONE_F32, data=bytes(8)), "runs past the end"),
    "misaligned tensor": (
        gguf_bytes(tensors=[(b"w", [4], 0, 0), (b"v", [4], 0, 16)], data=bytes(64)),
        "not a multiple of 32",
    ),
    "overlapping tensors": (
        gguf_bytes(tensors=[(b"w", [64], 0, 0), (b"v", [4], 0, 32)], data=bytes(256)),
        "overlaps",
    ),
    "duplicate names": (
        gguf_bytes(tensors=[(b"w", [4], 0, 0), (b"w", [4], 0, 32)], data=bytes(64)),
        "appears twice",
    ),
    "tensor info past the end": (gguf_bytes(tensors=ONE_F32, pad_to=1)[:-3], "runs past the end"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_every_malformed_file_gets_one_clear_error_fast(tmp_path, case):
    content, message = BAD_FILES[case]
    refused_fast(content, tmp_path / "bad.gguf", message)


def test_every_truncation_of_a_valid_file_is_refused(small_model):
    content = small_model.read_bytes()
    cut_file = small_model.with_name("cut.gguf")
    for length in range(0, len(content) - 1, max(1, len(content) // 300)):
        cut_file.write_bytes(content[:length])
        with pytest.raises(ModelFileError):
            read_layout(cut_file)


def test_a_gap_that_is_not_padding_is_reported(tmp_path):
    path = tmp_path / "gap.gguf"
    path.write_bytes(gguf_bytes(tensors=[(b"w", [4], 0, 0), (b"v", [4], 0, 64)], data=bytes(96)))
    layout = read_layout(path)
    assert any("belong to no tensor" in problem for problem in layout.problems)
    assert [r.kind for r in layout.regions].count("unexplained") == 1


@settings(max_examples=150, deadline=1000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_files_never_crash_or_hang(tmp_path, data):
    # GIVEN a valid file with a few bytes overwritten and maybe cut, THEN it reads or says what is wrong
    read_mutated(data, _valid_template(tmp_path), tmp_path / "mutated.gguf")


_TEMPLATE: dict[str, bytes] = {}


def _valid_template(tmp_path) -> bytes:
    if "small" not in _TEMPLATE:
        write_small_model(tmp_path / "template.gguf")
        _TEMPLATE["small"] = (tmp_path / "template.gguf").read_bytes()
    return _TEMPLATE["small"]


@pytest.mark.llama_cpp
def test_llama_cpps_own_vocabulary_files_are_read_as_gguf_reads_them():
    # GIVEN the vocabulary-only files llama.cpp ships (their data offset may lie past their end)
    files = require_vocab_files()
    assert len(files) >= 19
    for path in files:
        # WHEN each is read
        layout = read_layout(path)
        # THEN it is read, its regions tiling the file
        assert layout.tensors == [] and layout.problems == [], path.name
        assert layout.regions[-1].end == path.stat().st_size
        # AND where gguf's reader is quick enough for a test (it builds a field per vocabulary
        # entry: 19 s for a 262k vocabulary), with gguf's data offset and metadata
        if path.stat().st_size < 2_000_000:
            reader = GGUFReader(path)
            assert layout.data_offset == reader.data_offset, path.name
            assert len(reader.tensors) == 0
            assert set(layout.metadata) == {name for name in reader.fields if not name.startswith("GGUF.")}


@pytest.mark.llama_cpp
def test_a_cut_vocabulary_file_is_read_exactly_when_gguf_reads_it():
    # GIVEN one of llama.cpp's vocabulary files cut at many lengths
    original = min(require_vocab_files(), key=lambda path: path.stat().st_size).read_bytes()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        cut = Path(folder) / "cut.gguf"
        for length in [*range(0, len(original), max(1, len(original) // 25)), len(original) - 1, len(original)]:
            cut.write_bytes(original[:length])
            # WHEN both readers read it
            try:
                theirs = GGUFReader(cut).data_offset
            except Exception:  # noqa: BLE001 - gguf-py raises several kinds
                theirs = None
            try:
                ours = read_layout(cut).data_offset
            except ModelFileError:
                ours = None
            # THEN ggml-viz reads what gguf reads, at the same offset, and refuses the rest
            assert ours == theirs, length
