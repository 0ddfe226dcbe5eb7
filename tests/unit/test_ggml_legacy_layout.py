"""The reader of whisper.cpp's legacy ggml model files: exact maps of the files the tests write
(laid out by the format alone) and of whisper.cpp's own test files, and one clear error, fast,
for every malformed file."""

from __future__ import annotations

import json
import struct
from dataclasses import astuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggml_viz._errors import ModelFileError
from ggml_viz.commands import main
from ggml_viz.modelfile.ggml_legacy import MAX_VOCABULARY
from ggml_viz.modelfile.layout import category_of, memory_map_rows, read_layout

from ..hostile_files import read_mutated, refused_fast
from ..whisper_models import RUNNABLE, TINY, WhisperHparams, require_whisper_test_files, write_whisper_model
from .test_gguf_layout import write_small_model


@pytest.fixture(scope="module")
def runnable_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("whisper") / "ggml-random.bin"
    return path, write_whisper_model(path, RUNNABLE)


@pytest.fixture
def tiny_model(tmp_path):
    path = tmp_path / "tiny.bin"
    return path, write_whisper_model(path, TINY)


@pytest.mark.parametrize("hparams", [RUNNABLE, TINY], ids=["runnable", "tiny"])
def test_the_map_is_the_layout_the_format_gives(tmp_path, runnable_model, hparams):
    # GIVEN a whisper model file written by the tests
    path, expected = runnable_model if hparams is RUNNABLE else (tmp_path / "m.bin", None)
    expected = expected or write_whisper_model(path, hparams)
    # WHEN its layout is read
    layout = read_layout(path)
    # THEN every region lies where the format puts it, and the regions tile the file
    assert (layout.format, layout.version, layout.alignment, layout.problems) == ("ggml", 0, 1, [])
    assert layout.file_size == expected.file_size == path.stat().st_size
    assert [(r.kind, r.start, r.end, r.name) for r in layout.regions] == expected.region_bounds
    assert layout.data_offset == expected.vocabulary_end
    # AND every tensor has its name, ggml type, shape and data range
    assert [(t.name, t.type, t.shape, t.start, t.end) for t in layout.tensors] == [
        (t.name, t.type, t.shape, t.start, t.end) for t in expected.tensors
    ]
    assert all(t.n_elements == int(np.prod(t.shape)) and t.padding_after == 0 for t in layout.tensors)
    # AND the hyperparameters are its metadata
    assert layout.metadata["general.architecture"] == "whisper"
    assert layout.metadata["whisper.n_audio_layer"] == hparams.n_audio_layer
    assert layout.metadata["whisper.n_vocab"] == hparams.n_vocab
    assert layout.metadata["general.file_type"] == 1


def test_the_ranges_hold_the_tensors_data(runnable_model):
    # GIVEN the runnable model, whose norms are f32 values near 1 and whose matrices are f16
    path, _ = runnable_model
    content = path.read_bytes()
    layout = read_layout(path)
    # THEN a norm's range holds its 64 values around 1, and a matrix's its random f16 values
    norm = layout.tensor("decoder.blocks.3.cross_attn_ln.weight")
    scales = np.frombuffer(content[norm.start : norm.end], np.float32)
    assert scales.size == 64 and abs(scales.mean() - 1) < 0.03 and 0.03 < scales.std() < 0.07
    query = layout.tensor("encoder.blocks.0.attn.query.weight")
    values = np.frombuffer(content[query.start : query.end], np.float16)
    assert values.size == 64 * 64 and 0.03 < values.std() < 0.07


def test_layers_and_categories(runnable_model):
    layout = read_layout(runnable_model[0])
    by_name = {t.name: (t.layer, t.category) for t in layout.tensors}
    assert by_name["encoder.conv1.weight"] == (-1, "input")
    assert by_name["encoder.positional_embedding"] == (-1, "input")
    assert by_name["decoder.token_embedding.weight"] == (-1, "input")
    assert by_name["encoder.blocks.2.attn.query.weight"] == (2, "attention")
    assert by_name["decoder.blocks.3.cross_attn.key.weight"] == (3, "attention")
    assert by_name["decoder.blocks.1.mlp.0.weight"] == (1, "ffn")
    assert by_name["encoder.blocks.0.attn_ln.weight"] == (0, "norm")
    assert by_name["encoder.ln_post.weight"] == (-1, "norm")
    assert by_name["decoder.ln.bias"] == (-1, "norm")
    assert {row["category"] for row in layout.summary("category")} == {"input", "attention", "ffn", "norm"}


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("model.embed_tokens.weight", "input"),
        ("model.layers.3.self_attn.q_proj.weight", "attention"),
        ("model.layers.3.mlp.gate_proj.weight", "ffn"),
        ("model.norm.weight", "norm"),
        ("lm_head.weight", "output"),
        ("transformer.wte.weight", "input"),
        ("transformer.h.2.ln_1.weight", "norm"),
        ("transformer.h.2.attn.c_attn.weight", "attention"),
        ("enc.blk.1.attn_q.weight", "attention"),
        ("blk.0.ssm_conv1d.weight", "other"),
    ],
)
def test_categories_of_checkpoint_names(name, category):
    assert category_of(name) == category


def test_the_memory_map_rows_of_a_whisper_model(tiny_model):
    path, expected = tiny_model
    rows = memory_map_rows(read_layout(path))
    assert len(rows["kind"]) == len(expected.region_bounds)
    tensors = [i for i, kind in enumerate(rows["kind"]) if kind == "tensor"]
    assert [rows["type"][i] for i in tensors] == [t.type for t in expected.tensors]
    assert rows["kind"][:3] == ["header", "mel_filters", "vocabulary"]


def test_read_layout_tells_the_formats_apart(tmp_path, tiny_model):
    write_small_model(tmp_path / "small.gguf")
    assert read_layout(tmp_path / "small.gguf").format == "gguf"
    assert read_layout(tiny_model[0]).format == "ggml"


def test_whisper_cpps_own_test_files_are_read():
    # GIVEN whisper.cpp's test model files: its real header, mel filters and vocabulary, no tensors
    files = require_whisper_test_files()
    layers = {"tiny": 4, "base": 6, "small": 12, "medium": 24, "large": 32}
    assert len(files) == 9
    for path in files:
        # WHEN each is read
        layout = read_layout(path)
        # THEN it is a model without tensors whose three regions tile the file
        assert layout.tensors == [] and layout.problems == [], path.name
        assert [r.kind for r in layout.regions] == ["header", "mel_filters", "vocabulary"]
        assert layout.regions[-1].end == path.stat().st_size
        # AND its hyperparameters are those of its size and language
        size = path.name.removeprefix("for-tests-ggml-").split(".")[0]
        assert layout.metadata["whisper.n_audio_layer"] == layers[size], path.name
        assert layout.metadata["whisper.n_vocab"] == (51864 if ".en." in path.name else 51865), path.name
        assert (layout.metadata["whisper.mel_filters.n_mel"], layout.metadata["whisper.mel_filters.n_fft"]) == (80, 201)


def test_memmap_prints_a_whisper_models_layout(runnable_model, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    path, expected = runnable_model
    # WHEN ggml-viz memmap shows the file
    assert main(["memmap", str(path)]) == 0
    table = capsys.readouterr().out
    # THEN its format, every kind of region and the summaries are there
    assert "legacy ggml (whisper" in table and "167 tensors" in table
    for text in ("mel_filters", "vocabulary", "tensor_header ×167", "tensor ×167", "by category", "by layer"):
        assert text in table
    # AND the JSON and CSV give every tensor
    assert main(["memmap", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "ggml" and data["architecture"] == "whisper"
    assert [t["name"] for t in data["tensors"]] == [t.name for t in expected.tensors]
    assert main(["memmap", str(path), "--csv"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1 + len(expected.tensors)


# -- malformed files ------------------------------------------------------------------

ONE_LAYER = WhisperHparams(n_vocab=4, n_audio_ctx=2, n_audio_state=4, n_audio_head=1, n_audio_layer=1, n_text_ctx=2,
                           n_text_state=4, n_text_head=1, n_text_layer=1, n_mels=1, ftype=1)  # fmt: skip


def legacy_bytes(
    *, magic=0x67676D6C, hparams=ONE_LAYER, mel=(1, 2), n_tokens=None, tokens=(b"a", b"bc"), records=()
) -> bytes:
    """Raw legacy bytes from parts, so that a test can make any field lie. A record is
    (n_dims, name length, type, dims, name, data), or (name, dims, type, data) to fill in the rest."""
    out = struct.pack("<I", magic) + struct.pack("<11i", *astuple(hparams))
    out += struct.pack("<ii", *mel) + bytes(4 * max(mel[0], 0) * max(mel[1], 0))
    out += struct.pack("<i", len(tokens) if n_tokens is None else n_tokens)
    out += b"".join(struct.pack("<I", len(token)) + token for token in tokens)
    for record in records:
        if len(record) == 4:
            name, dims, ggml_type, data = record
            record = (len(dims), len(name), ggml_type, dims, name, data)
        n_dims, name_length, ggml_type, dims, name, data = record
        out += struct.pack(f"<3i{len(dims)}i", n_dims, name_length, ggml_type, *dims) + name + data
    return out


F32, Q4_0 = 0, 2
ONE_F32 = (b"w", [4], F32, bytes(16))

BAD_FILES = {
    "empty": (b"", "magic number"),
    "unknown magic": (b"RIFF" + bytes(40), "not b'GGUF' (GGUF) nor b'lmgg'"),
    "llama.cpp's old ggjt": (struct.pack("<I", 0x67676A74) + bytes(40), "old ggjt format"),
    "truncated hyperparameters": (legacy_bytes()[:30], "hyperparameter n_text_state at byte 28 runs past the end"),
    "negative layer count": (
        legacy_bytes(hparams=WhisperHparams(n_audio_layer=-3)),
        "n_audio_layer (at byte 20) is -3",
    ),
    "negative ftype": (legacy_bytes(hparams=WhisperHparams(ftype=-1)), "ftype (at byte 44) is -1"),
    "mel filters past the end": (legacy_bytes(mel=(80, 201))[:1000], "mel filter values at byte 56 runs past"),
    "negative mel filters": (legacy_bytes(mel=(-1, 201)), "claim -1 × 201 values"),
    "huge vocabulary": (legacy_bytes(n_tokens=2**31 - 1), "claims 2147483647 tokens"),
    "vocabulary beyond any real one": (
        legacy_bytes(n_tokens=MAX_VOCABULARY + 1, tokens=[b""] * (MAX_VOCABULARY + 1)),
        f"claims {MAX_VOCABULARY + 1} tokens",
    ),
    "negative vocabulary": (legacy_bytes(n_tokens=-1), "claims -1 tokens"),
    "vocabulary past the end": (legacy_bytes(n_tokens=3, tokens=[b"abcdefgh", b"ij"]), "the length of token 2 at byte"),
    "lying token length": (
        legacy_bytes(n_tokens=2, tokens=[b"a"]) + struct.pack("<I", 2**32 - 1) + b"xyz",
        "token 1 (4294967295 bytes) at byte",
    ),
    "lying n_dims": (legacy_bytes(records=[(2**31 - 1, 1, F32, [], b"w", b"")]), "has 2147483647 dimensions"),
    "five dimensions": (legacy_bytes(records=[(b"w", [1, 1, 1, 1, 1], F32, bytes(4))]), "has 5 dimensions"),
    "no dimensions": (legacy_bytes(records=[(0, 1, F32, [], b"w", bytes(4))]), "has 0 dimensions"),
    "lying name length": (legacy_bytes(records=[(1, 2**31 - 1, F32, [4], b"w", bytes(16))]), "a name of 2147483647"),
    "negative name length": (legacy_bytes(records=[(1, -5, F32, [4], b"w", bytes(16))]), "a name of -5 bytes"),
    "name past the end": (legacy_bytes(records=[(1, 1000, F32, [4], b"w", b"")]), "the name of tensor record 0"),
    "unknown type": (legacy_bytes(records=[(b"w", [4], 99, bytes(16))]), "tensor 'w' has unknown type 99"),
    "zero dimension": (legacy_bytes(records=[(b"w", [4, 0], F32, b"")]), "a zero dimension (4, 0)"),
    "negative dimension": (legacy_bytes(records=[(b"w", [-4], F32, b"")]), "a negative dimension (-4,)"),
    "block size mismatch": (legacy_bytes(records=[(b"w", [33], Q4_0, bytes(64))]), "not a multiple of Q4_0's"),
    "tensor past the end": (legacy_bytes(records=[(b"w", [4], F32, bytes(12))]), "the data of tensor 'w' (16 bytes)"),
    "huge tensor": (legacy_bytes(records=[(b"w", [2**31 - 1, 2**31 - 1], F32, bytes(16))]), "runs past the end"),
    "duplicate names": (legacy_bytes(records=[ONE_F32, ONE_F32]), "tensor 'w' appears twice (again at byte"),
    "tensor header cut short": (legacy_bytes(records=[ONE_F32])[:-25], "the header of tensor record 0 at byte 79"),
    "tensor dimensions cut short": (legacy_bytes(records=[ONE_F32])[:-20], "the dimensions of tensor record 0 at byte"),
    "tensors missing": (legacy_bytes(records=[ONE_F32]), "holds 1 tensors, but whisper.cpp's model with 1 audio"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_every_malformed_file_gets_one_clear_error_fast(tmp_path, case):
    content, message = BAD_FILES[case]
    refused_fast(content, tmp_path / "bad.bin", message)


def test_a_file_cut_anywhere_is_refused_but_where_whisper_cpp_takes_it_for_an_empty_model(tiny_model):
    # GIVEN a valid file, cut at, just before and just after every region's bounds, and between
    path, expected = tiny_model
    content = path.read_bytes()
    cuts = set()
    for _, start, end, _ in expected.region_bounds:
        cuts |= {start - 1, start, start + 1, (start + end) // 2, end - 1}
    cut_file = path.with_name("cut.bin")
    for length in sorted(cut for cut in cuts if 0 <= cut < len(content)):
        cut_file.write_bytes(content[:length])
        if length == expected.vocabulary_end:
            # THEN a file that ends after its vocabulary is whisper.cpp's empty model (its test files)
            assert read_layout(cut_file).tensors == []
            continue
        # THEN any other cut is refused
        with pytest.raises(ModelFileError):
            read_layout(cut_file)


@settings(max_examples=150, deadline=1000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_files_never_crash_or_hang(tmp_path, data):
    # GIVEN a valid file with a few bytes overwritten and maybe cut, THEN it reads or says what is wrong
    read_mutated(data, _valid_template(tmp_path), tmp_path / "mutated.bin")


_TEMPLATE: dict[str, bytes] = {}


def _valid_template(tmp_path) -> bytes:
    if "tiny" not in _TEMPLATE:
        write_whisper_model(tmp_path / "template.bin", TINY)
        _TEMPLATE["tiny"] = (tmp_path / "template.bin").read_bytes()
    return _TEMPLATE["tiny"]
