"""The byte layout of a whisper.cpp model file in ggml's legacy format (`ggml-tiny.en.bin`, ...),
as whisper.cpp 1.8.5's `whisper_model_load` reads it. All little-endian, nothing aligned:

  magic 0x67676d6c ("ggml" as a uint32); 11 int32 hyperparameters (HPARAMS)
  mel filters: int32 n_mel, int32 n_fft, then n_mel × n_fft float32
  vocabulary: int32 count, then per token a uint32 length and its bytes
  tensor records up to the end of the file, each: int32 n_dims, int32 name length, int32 ggml
  type, n_dims × int32 ne (ne0 first), the name, then the tensor's data

The format has no version and no tensor count: whisper.cpp reads records until the file ends
and then wants every tensor of its model (none, in its own test files). Other programs of the
ggml examples wrote files with the same magic but their own hyperparameters; those fail this
reader's checks with an error saying which.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from ..categories import category_of
from ..layers import layer_of
from .model_layout import BoundedReader, ModelLayout, Region, TensorLayout

MAGIC = struct.pack("<I", 0x67676D6C)
HPARAMS = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer", "n_text_ctx",
           "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype")  # fmt: skip
QUANTIZATION_VERSION_FACTOR = 1000  # ftype = quantization version × 1000 + ggml file type (GGML_QNT_VERSION_FACTOR)
MAX_DIMS = 4
TENSOR_HEADER_BYTES = 12  # n_dims, name length, type
# Bounds that no real file comes near (whisper's vocabulary has 51,865 tokens, its longest
# tensor name 40 bytes): a count beyond them is a lie, refused before any long loop.
MAX_VOCABULARY = 1 << 20
MAX_NAME_BYTES = 1024


def read_ggml_legacy_layout(handle: BinaryIO, path: Path, file_size: int) -> ModelLayout:
    """The validated layout of the whisper.cpp model file open in `handle`; ModelFileError if it
    is malformed."""
    return _Parser(handle, path, file_size).parse()


def whisper_tensor_count(n_audio_layer: int, n_text_layer: int) -> int:
    """How many tensors whisper.cpp's model has: 7 outside the encoder's layers and 15 in each,
    4 outside the decoder's layers and 24 in each (with cross-attention)."""
    return 7 + 15 * n_audio_layer + 4 + 24 * n_text_layer


class _Parser(BoundedReader):
    format_name = "whisper.cpp (legacy ggml) model"

    def parse(self) -> ModelLayout:
        magic = self.read(4, "the magic number")
        if magic != MAGIC:
            raise self.fail(f"it starts with {magic!r}, not {MAGIC!r}")
        hparams = self.hyperparameters()
        header_end = self.position
        n_mel, n_fft = self.mel_filters()
        mel_filters_end = self.position
        n_tokens = self.vocabulary()
        vocabulary_end = self.position
        regions = [
            Region("header", 0, header_end),
            Region("mel_filters", header_end, mel_filters_end),
            Region("vocabulary", mel_filters_end, vocabulary_end),
        ]
        tensors: list[TensorLayout] = []
        seen: set[str] = set()
        while self.remaining():
            record_start = self.position
            tensor = self.tensor_record(len(tensors))
            if tensor.name in seen:
                raise self.fail(f"tensor {tensor.name!r} appears twice (again at byte {record_start})")
            seen.add(tensor.name)
            tensors.append(tensor)
            regions.append(Region("tensor_header", record_start, tensor.start, tensor.name))
            regions.append(Region("tensor", tensor.start, tensor.end, tensor.name))
        expected = whisper_tensor_count(hparams["n_audio_layer"], hparams["n_text_layer"])
        # whisper.cpp loads a file with no tensors as an empty model (its own test files).
        if tensors and len(tensors) != expected:
            raise self.fail(
                f"it holds {len(tensors)} tensors, but whisper.cpp's model with {hparams['n_audio_layer']} audio"
                f" and {hparams['n_text_layer']} text layers has {expected}"
            )
        problems = []
        if n_mel != hparams["n_mels"]:
            problems.append(f"{n_mel} mel filters, but hyperparameter n_mels is {hparams['n_mels']}")
        metadata = {
            "general.architecture": "whisper",
            "general.file_type": hparams["ftype"] % QUANTIZATION_VERSION_FACTOR,
            "general.quantization_version": hparams["ftype"] // QUANTIZATION_VERSION_FACTOR,
            **{f"whisper.{name}": value for name, value in hparams.items() if name != "ftype"},
            "whisper.mel_filters.n_mel": n_mel,
            "whisper.mel_filters.n_fft": n_fft,
            "whisper.vocabulary.tokens": n_tokens,
        }
        return ModelLayout(
            format="ggml",
            path=self.path,
            file_size=self.file_size,
            version=0,
            alignment=1,
            data_offset=vocabulary_end,
            metadata=metadata,
            tensors=tensors,
            regions=regions,
            problems=problems,
        )

    def hyperparameters(self) -> dict[str, int]:
        hparams = {}
        for name in HPARAMS:
            position = self.position
            value = self.unpack("<i", f"hyperparameter {name}")
            lowest = 0 if name == "ftype" else 1
            if value < lowest:
                raise self.fail(f"hyperparameter {name} (at byte {position}) is {value}, not {lowest} or more")
            hparams[name] = value
        return hparams

    def mel_filters(self) -> tuple[int, int]:
        position = self.position
        n_mel = self.unpack("<i", "the mel filter count")
        n_fft = self.unpack("<i", "the mel filter length")
        if n_mel < 0 or n_fft < 0:
            raise self.fail(f"the mel filters (at byte {position}) claim {n_mel} × {n_fft} values")
        self.skip(4 * n_mel * n_fft, f"the {n_mel} × {n_fft} mel filter values")
        return n_mel, n_fft

    def vocabulary(self) -> int:
        position = self.position
        n_tokens = self.unpack("<i", "the vocabulary size")
        # Every token takes at least its 4-byte length.
        if n_tokens < 0 or n_tokens > MAX_VOCABULARY or 4 * n_tokens > self.remaining():
            raise self.fail(
                f"the vocabulary (at byte {position}) claims {n_tokens} tokens: not 0 to {MAX_VOCABULARY}"
                f" tokens that the file's remaining {self.remaining()} bytes can hold"
            )
        for index in range(n_tokens):
            length = self.unpack("<I", f"the length of token {index}")
            self.skip(length, f"token {index} ({length} bytes)")
        return n_tokens

    def tensor_record(self, index: int) -> TensorLayout:
        record = f"tensor record {index}"
        where = f"{record} (at byte {self.position})"
        header = self.read(TENSOR_HEADER_BYTES, f"the header of {record}")
        n_dims, name_length, ggml_type = struct.unpack("<3i", header)
        if not 1 <= n_dims <= MAX_DIMS:
            raise self.fail(f"{where} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
        if not 1 <= name_length <= MAX_NAME_BYTES:
            raise self.fail(f"{where} has a name of {name_length} bytes (1 to {MAX_NAME_BYTES} allowed)")
        shape = struct.unpack(f"<{n_dims}i", self.read(4 * n_dims, f"the dimensions of {record}"))
        name = self.read(name_length, f"the name of {record}").decode("utf-8", "replace")
        type_name, nbytes, n_elements = self.tensor_size(name, shape, ggml_type)
        start = self.position
        self.skip(nbytes, f"the data of tensor {name!r} ({nbytes} bytes)")
        return TensorLayout(
            name, type_name, shape, n_elements, start, start + nbytes, 0, layer_of(name), category_of(name)
        )


def vocabulary_tokens(layout: ModelLayout) -> list[bytes]:
    """The token texts of a legacy file's vocabulary (whisper's text tokens; the special and
    timestamp tokens whisper.cpp adds after them are not in the file), read from the region the
    layout checked: its count, then each token's length and bytes."""
    region = next((r for r in layout.regions if r.kind == "vocabulary"), None)
    if region is None:
        return []
    with Path(layout.path).open("rb") as handle:
        handle.seek(region.start)
        data = handle.read(region.end - region.start)
    (count,) = struct.unpack_from("<i", data, 0)
    tokens, at = [], 4
    for _ in range(count):
        (length,) = struct.unpack_from("<I", data, at)
        tokens.append(data[at + 4 : at + 4 + length])
        at += 4 + length
    return tokens
