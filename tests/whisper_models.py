"""Small whisper models in whisper.cpp's legacy ggml file format: random weights (a seeded
generator) in every tensor whisper.cpp 1.8.5's `whisper_model_load` expects, for the real
whisper.cpp to load and run, and the layout each file must have, worked out from the format
alone, for the model file reader's tests.

The file, as whisper_model_load reads it (all little-endian):
  magic 0x67676d6c (uint32); 11 int32 hyperparameters (WhisperHparams' fields, in order)
  mel filters: int32 n_mel, int32 n_fft, n_mel × n_fft float32
  vocabulary: int32 count, then per token a uint32 length and its bytes
  tensors up to the end of the file, each: int32 n_dims, int32 name length, int32 ggml type,
  n_dims × int32 ne (ne0 first), the name, then the data (no alignment anywhere)

Random weights make nonsense text; whisper.cpp still encodes, decodes and prints it. The
English vocabulary size (51,864) is the smallest whisper.cpp takes: its special and timestamp
tokens have fixed ids up to 51,863. The file's vocabulary holds the 50,256 text tokens and
<|endoftext|>; whisper.cpp adds the special and timestamp tokens after them itself.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import astuple, dataclass, fields
from pathlib import Path

import numpy as np
import pytest

from .build_cache import cache_folder

GGML_FILE_MAGIC = 0x67676D6C
N_FFT = 201  # whisper's mel filters span the 201 frequency bins of a 400-sample FFT
ENGLISH_VOCABULARY = 51864
TEXT_TOKENS = 50256  # ids below <|endoftext|>
SPACE_TOKEN = 220

# ggml type ids and sizes of the two types whisper's f16 files use
GGML_TYPES = {"f32": (0, 4, np.float32), "f16": (1, 2, np.float16)}


@dataclass(frozen=True)
class WhisperHparams:
    """The hyperparameters in the file's header, in the file's order (whisper_model_load's names)."""

    n_vocab: int = ENGLISH_VOCABULARY
    n_audio_ctx: int = 1500
    n_audio_state: int = 64
    n_audio_head: int = 2
    n_audio_layer: int = 4  # tiny's layer counts; 2 text layers would make whisper.cpp take it for
    n_text_ctx: int = 448  # a distilled model (and turn timestamps off)
    n_text_state: int = 64
    n_text_head: int = 2
    n_text_layer: int = 4
    n_mels: int = 80
    ftype: int = 1  # 1: the large matrices in f16, the rest f32 (whisper.cpp's converter's default)


RUNNABLE = WhisperHparams()
# For the reader's tests only (whisper.cpp would not run it): a file of a few kilobytes.
TINY = WhisperHparams(n_vocab=40, n_audio_ctx=6, n_audio_state=8, n_audio_head=2, n_audio_layer=1, n_text_ctx=5,
                      n_text_state=8, n_text_head=2, n_text_layer=1, n_mels=3, ftype=1)  # fmt: skip


@dataclass(frozen=True)
class ExpectedTensor:
    name: str
    type: str  # ggml's name: f32, f16
    shape: tuple[int, ...]  # ne0 first
    header_start: int  # where its record begins
    start: int  # its first data byte
    end: int  # one past its last data byte


@dataclass(frozen=True)
class ExpectedLayout:
    hparams: WhisperHparams
    header_end: int  # magic and hyperparameters
    mel_filters_end: int
    vocabulary_end: int
    tensors: list[ExpectedTensor]

    @property
    def file_size(self) -> int:
        return self.tensors[-1].end if self.tensors else self.vocabulary_end

    @property
    def region_bounds(self) -> list[tuple[str, int, int, str]]:
        """(kind, start, end, name) of every region, in file order."""
        bounds = [
            ("header", 0, self.header_end, ""),
            ("mel_filters", self.header_end, self.mel_filters_end, ""),
            ("vocabulary", self.mel_filters_end, self.vocabulary_end, ""),
        ]
        for tensor in self.tensors:
            bounds.append(("tensor_header", tensor.header_start, tensor.start, tensor.name))
            bounds.append(("tensor", tensor.start, tensor.end, tensor.name))
        return bounds


def whisper_tensors(hparams: WhisperHparams) -> list[tuple[str, str, tuple[int, ...]]]:
    """(name, type, ne) of every tensor whisper_model_load creates, in its order."""
    wtype = "f32" if hparams.ftype == 0 else "f16"  # the large matrices (whisper.cpp's wtype)
    conv_type = "f32" if hparams.ftype == 0 else "f16"  # the convolutions (its vtype)
    audio, text = hparams.n_audio_state, hparams.n_text_state
    tensors = [
        ("encoder.positional_embedding", "f32", (audio, hparams.n_audio_ctx)),
        ("encoder.conv1.weight", conv_type, (3, hparams.n_mels, audio)),
        ("encoder.conv1.bias", "f32", (1, audio)),
        ("encoder.conv2.weight", conv_type, (3, audio, audio)),
        ("encoder.conv2.bias", "f32", (1, audio)),
        ("encoder.ln_post.weight", "f32", (audio,)),
        ("encoder.ln_post.bias", "f32", (audio,)),
    ]
    for layer in range(hparams.n_audio_layer):
        tensors += _block(f"encoder.blocks.{layer}.", audio, wtype, cross=False)
    tensors += [
        ("decoder.positional_embedding", "f32", (text, hparams.n_text_ctx)),
        ("decoder.token_embedding.weight", wtype, (text, hparams.n_vocab)),
        ("decoder.ln.weight", "f32", (text,)),
        ("decoder.ln.bias", "f32", (text,)),
    ]
    for layer in range(hparams.n_text_layer):
        tensors += _block(f"decoder.blocks.{layer}.", text, wtype, cross=True)
    return tensors


def _block(prefix: str, state: int, wtype: str, *, cross: bool) -> list[tuple[str, str, tuple[int, ...]]]:
    tensors = [
        (f"{prefix}mlp_ln.weight", "f32", (state,)),
        (f"{prefix}mlp_ln.bias", "f32", (state,)),
        (f"{prefix}mlp.0.weight", wtype, (state, 4 * state)),
        (f"{prefix}mlp.0.bias", "f32", (4 * state,)),
        (f"{prefix}mlp.2.weight", wtype, (4 * state, state)),
        (f"{prefix}mlp.2.bias", "f32", (state,)),
    ]
    for attention in ("attn", "cross_attn") if cross else ("attn",):
        tensors += [
            (f"{prefix}{attention}_ln.weight", "f32", (state,)),
            (f"{prefix}{attention}_ln.bias", "f32", (state,)),
            (f"{prefix}{attention}.query.weight", wtype, (state, state)),
            (f"{prefix}{attention}.query.bias", "f32", (state,)),
            (f"{prefix}{attention}.key.weight", wtype, (state, state)),  # whisper's keys have no bias
            (f"{prefix}{attention}.value.weight", wtype, (state, state)),
            (f"{prefix}{attention}.value.bias", "f32", (state,)),
            (f"{prefix}{attention}.out.weight", wtype, (state, state)),
            (f"{prefix}{attention}.out.bias", "f32", (state,)),
        ]
    return tensors


def vocabulary(hparams: WhisperHparams) -> list[bytes]:
    """The file's tokens: printable words, then <|endoftext|> where the vocabulary reaches it.
    Token 220 is a lone space, as in GPT-2's vocabulary: whisper.cpp looks it up by its text."""
    count = min(hparams.n_vocab, TEXT_TOKENS + 1)
    tokens = [b" " if i == SPACE_TOKEN else f" w{i}".encode() for i in range(min(count, TEXT_TOKENS))]
    return tokens + [b"<|endoftext|>"] * (count - len(tokens))


def expected_whisper_layout(hparams: WhisperHparams, tokens: list[bytes]) -> ExpectedLayout:
    """Where every part of the file lies, from the format alone."""
    header_end = 4 + 4 * len(fields(WhisperHparams))
    mel_filters_end = header_end + 8 + 4 * hparams.n_mels * N_FFT
    vocabulary_end = mel_filters_end + 4 + sum(4 + len(token) for token in tokens)
    position = vocabulary_end
    tensors = []
    for name, type_name, shape in whisper_tensors(hparams):
        start = position + 12 + 4 * len(shape) + len(name.encode())
        end = start + int(np.prod(shape)) * GGML_TYPES[type_name][1]
        tensors.append(ExpectedTensor(name, type_name, shape, position, start, end))
        position = end
    return ExpectedLayout(hparams, header_end, mel_filters_end, vocabulary_end, tensors)


def write_whisper_model(path: Path, hparams: WhisperHparams = RUNNABLE, *, seed: int = 0) -> ExpectedLayout:
    """Write a whisper model with random weights to `path`; the layout it must have."""
    rng = np.random.default_rng(seed)
    tokens = vocabulary(hparams)
    with open(path, "wb") as out:
        out.write(struct.pack("<I", GGML_FILE_MAGIC) + struct.pack("<11i", *astuple(hparams)))
        out.write(struct.pack("<ii", hparams.n_mels, N_FFT) + _mel_filters(hparams.n_mels).tobytes())
        out.write(struct.pack("<i", len(tokens)))
        out.write(b"".join(struct.pack("<I", len(token)) + token for token in tokens))
        for name, type_name, shape in whisper_tensors(hparams):
            encoded = name.encode()
            out.write(struct.pack(f"<3i{len(shape)}i", len(shape), len(encoded), GGML_TYPES[type_name][0], *shape))
            out.write(encoded)
            out.write(_weights(rng, name, shape).astype(GGML_TYPES[type_name][2]).tobytes())
    return expected_whisper_layout(hparams, tokens)


def _weights(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    array_shape = tuple(reversed(shape))  # numpy's last axis is ggml's ne0
    # every tensor its own bytes, as in a trained model (layer norms near 1, not exactly 1)
    is_norm = "_ln." in name or name.startswith(("encoder.ln_post.", "decoder.ln."))
    center = 1.0 if is_norm and name.endswith(".weight") else 0.0
    return center + rng.normal(0.0, 0.05, array_shape)


def _mel_filters(n_mel: int) -> np.ndarray:
    """Triangular filters spread evenly over the FFT bins: a plausible filter bank, float32."""
    edges = np.linspace(0, N_FFT - 1, n_mel + 2)
    bins = np.arange(N_FFT)
    rising = (bins[None, :] - edges[:-2, None]) / np.maximum(edges[1:-1, None] - edges[:-2, None], 1e-9)
    falling = (edges[2:, None] - bins[None, :]) / np.maximum(edges[2:, None] - edges[1:-1, None], 1e-9)
    return np.clip(np.minimum(rising, falling), 0.0, None).astype(np.float32)


# -- whisper.cpp's own files, as `make setup` keeps them with its programs ------------------

MISSING_TOOLS = "whisper.cpp's programs are not built (make setup builds them: scripts/build-whisper-tools.sh)"


def whisper_tools_folder() -> Path:
    """Where scripts/build-whisper-tools.sh installed whisper.cpp 1.8.5's programs, libraries,
    headers and test model files (GGML_VIZ_WHISPER_TOOLS overrides the default)."""
    default = cache_folder() / "whisper-tools-1.8.5-portable"
    return Path(os.environ.get("GGML_VIZ_WHISPER_TOOLS", default))


def require_whisper_test_files() -> list[Path]:
    """whisper.cpp's own test model files (for-tests-ggml-*.bin: hyperparameters, mel filters and
    vocabulary, no tensors), or the test skips (fails where GGML_VIZ_REQUIRE_NATIVE_TOOLS says
    every tool must be there)."""
    files = sorted((whisper_tools_folder() / "models").glob("for-tests-ggml-*.bin"))
    if not files:
        if os.environ.get("GGML_VIZ_REQUIRE_NATIVE_TOOLS"):
            pytest.fail(MISSING_TOOLS)
        pytest.skip(MISSING_TOOLS)
    return files


def whisper_timing(stderr: str, what: str) -> tuple[float, int]:
    """whisper.cpp's own figure for `what` (encode, decode, batchd, prompt), as
    whisper_print_timings writes it on stderr: milliseconds, and runs (for batchd and prompt,
    the tokens)."""
    found = re.search(rf"whisper_print_timings:\s+{what} time =\s+([\d.]+) ms /\s+(\d+) runs", stderr)
    if not found:
        raise ValueError(f"no {what} time in whisper's output: {stderr[-2000:]}")
    return float(found.group(1)), int(found.group(2))
