"""Tiny GGUF models of architectures other than SmolLM2's, for the real llama.cpp to run, and a
tiny llama for the llama.cpp of mid-2024 that gpt4all bundles.

Each is written with gguf-py's own writer: random weights (a seeded generator), tensor names
from gguf's tables for the architecture, hyperparameters as llama.cpp's loader for it reads
them, and the tokenizer of a fitting family copied from one of llama.cpp's vocabulary-only
files (see tests/vocab_files.py). Small dimensions keep a model's layers a few kilobytes;
the vocabulary makes the embedding, and so the file, megabytes (gemma3 3 MB, qwen2 16 MB).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import MODEL_ARCH_NAMES, MODEL_TENSOR, MODEL_TENSORS, TENSOR_NAMES, GGUFReader, GGUFWriter
from gguf import GGMLQuantizationType as GGMLType
from gguf.quants import quantize

from ..vocab_files import require_vocab_file
from .smollm2 import PROMPT, THREADS

ARCHITECTURES = ("gemma3", "qwen2")

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
RMS_EPS = 1e-6
CONTEXT_LENGTH = 2048
SEED = 0
N_PREDICT = 4  # the prompt's graph, then three decode steps

T = MODEL_TENSOR
# Each layer's tensors that every architecture here has: (kind, suffix). (The norm before the
# FFN is FFN_NORM in qwen2, FFN_PRE_NORM in gemma3: both `ffn_norm`.)
_LAYER_TENSORS = (
    (T.ATTN_NORM, "weight"), (T.ATTN_Q, "weight"), (T.ATTN_K, "weight"), (T.ATTN_V, "weight"),
    (T.ATTN_OUT, "weight"), (T.FFN_GATE, "weight"), (T.FFN_UP, "weight"), (T.FFN_DOWN, "weight"),
)  # fmt: skip


@dataclass(frozen=True)
class Recipe:
    """How one architecture's tiny model is made."""

    architecture: str
    vocab: str  # the family of llama.cpp's vocabulary file the tokenizer is copied from
    n_layers: int
    head_dim: int
    tied_embeddings: bool  # no output.weight: llama.cpp multiplies by token_embd.weight
    embedding_type: GGMLType
    matrix_type: GGMLType
    output_type: GGMLType  # output.weight's type, where it is not tied
    layer_extras: tuple[tuple[MODEL_TENSOR, str], ...]
    hparams: tuple[tuple[str, Any], ...] = ()  # (GGUFWriter method, value): this architecture's own keys
    n_embd: int = N_EMBD
    n_ff: int = N_FF


RECIPES = {
    # Gemma 3: q/k norms, norms after attention and after the FFN, the output tied to the
    # embedding; heads wider than n_embd / n_head; sliding-window attention on every other layer.
    "gemma3": Recipe(
        architecture="gemma3", vocab="llama-spm", n_layers=3, head_dim=32, tied_embeddings=True,
        embedding_type=GGMLType.Q8_0, matrix_type=GGMLType.F16, output_type=GGMLType.F16,
        layer_extras=((T.ATTN_Q_NORM, "weight"), (T.ATTN_K_NORM, "weight"), (T.ATTN_POST_NORM, "weight"),
                      (T.FFN_PRE_NORM, "weight"), (T.FFN_POST_NORM, "weight")),
        hparams=(("add_sliding_window", 16), ("add_sliding_window_pattern", 2)),
    ),
    # Qwen 2: biases on q, k and v, a separate output matrix. (On a CPU with AVX2 llama.cpp
    # repacks Q4_0 matrices into a buffer of its own: they are not read from the mapping.)
    "qwen2": Recipe(
        architecture="qwen2", vocab="qwen2", n_layers=2, head_dim=N_EMBD // N_HEAD, tied_embeddings=False,
        embedding_type=GGMLType.Q4_0, matrix_type=GGMLType.Q4_0, output_type=GGMLType.Q8_0,
        layer_extras=((T.ATTN_Q, "bias"), (T.ATTN_K, "bias"), (T.ATTN_V, "bias"), (T.FFN_NORM, "weight")),
    ),
    # Llama, in types and keys a llama.cpp of mid-2024 reads too: the one gpt4all 2.8.2 bundles
    # runs it (tests/programs/gpt4all_generate.py). Not in ARCHITECTURES: llama.cpp's own tests
    # run SmolLM2, a llama.
    "llama": Recipe(
        architecture="llama", vocab="llama-spm", n_layers=2, head_dim=N_EMBD // N_HEAD, tied_embeddings=False,
        embedding_type=GGMLType.Q8_0, matrix_type=GGMLType.F16, output_type=GGMLType.Q8_0,
        layer_extras=((T.FFN_NORM, "weight"),),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class ModelSpec:
    """A written model: what the tests compare a recording with."""

    path: Path
    architecture: str
    n_layers: int
    n_vocab: int
    tied_embeddings: bool
    tensor_types: dict[str, str]  # every tensor's name and ggml type name, in file order


def write_model(path: Path, architecture: str, seed: int = SEED, **overrides: Any) -> ModelSpec:
    """Write `architecture`'s tiny model to `path` (overrides: Recipe fields, e.g. n_layers=12,
    n_embd=512 for a model whose steps take milliseconds; seed: of its random weights); skips the
    test where llama.cpp's vocabulary files are missing."""
    recipe = dataclasses.replace(RECIPES[architecture], **overrides)
    tokenizer = _tokenizer(require_vocab_file(recipe.vocab))
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"][0])
    types = write_gguf(
        path,
        architecture,
        tokenizer,
        lambda writer: _add_hparams(writer, recipe),
        _tensors(recipe, n_vocab),
        _random_values,
        seed,
    )
    return ModelSpec(path, architecture, recipe.n_layers, n_vocab, recipe.tied_embeddings, types)


def write_gguf(
    path: Path,
    architecture: str,
    tokenizer: dict[str, tuple[Any, Any, Any]],
    add_hparams: Callable[[GGUFWriter], None],
    tensors: list[tuple[str, tuple[int, ...], GGMLType]],
    random_values: Callable[[np.random.Generator, str, tuple[int, ...]], np.ndarray],
    seed: int,
) -> dict[str, str]:
    """A tiny model's file: its name, its hyperparameters, the tokenizer's keys, and each tensor
    (name, numpy shape, type) filled with random values in its type. Returns every tensor's name
    and ggml type name, in file order."""
    writer = GGUFWriter(str(path), architecture)
    writer.add_name(f"ggml-viz tiny {architecture}")
    add_hparams(writer)
    for key, (value, vtype, sub_type) in tokenizer.items():
        writer.add_key_value(key, value, vtype, sub_type)
    rng = np.random.default_rng(seed)
    types = {}
    for name, shape, qtype in tensors:
        data = random_values(rng, name, shape)
        if qtype in (GGMLType.F32, GGMLType.F16):
            writer.add_tensor(name, quantize(data, qtype))
        else:
            writer.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)
        types[name] = qtype.name.lower()
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return types


def _add_hparams(writer: GGUFWriter, recipe: Recipe) -> None:
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(recipe.n_embd)
    writer.add_block_count(recipe.n_layers)
    writer.add_feed_forward_length(recipe.n_ff)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_key_length(recipe.head_dim)
    writer.add_value_length(recipe.head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    for method, value in recipe.hparams:
        getattr(writer, method)(value)


def _tensors(recipe: Recipe, n_vocab: int) -> list[tuple[str, tuple[int, ...], GGMLType]]:
    """(name, numpy shape, type) of every tensor, in the order they are written. A numpy
    shape (rows, columns) is ggml's {ne0 = columns, ne1 = rows}."""
    arch = next(arch for arch, name in MODEL_ARCH_NAMES.items() if name == recipe.architecture)
    q_width, kv_width = N_HEAD * recipe.head_dim, N_HEAD_KV * recipe.head_dim
    embd, ff = recipe.n_embd, recipe.n_ff
    shapes = {
        T.TOKEN_EMBD: (n_vocab, embd),
        T.OUTPUT: (n_vocab, embd),
        T.OUTPUT_NORM: (embd,),
        T.ATTN_NORM: (embd,),
        T.ATTN_Q: (q_width, embd),
        T.ATTN_K: (kv_width, embd),
        T.ATTN_V: (kv_width, embd),
        T.ATTN_OUT: (embd, q_width),
        T.ATTN_Q_NORM: (recipe.head_dim,),
        T.ATTN_K_NORM: (recipe.head_dim,),
        T.ATTN_POST_NORM: (embd,),
        T.FFN_NORM: (embd,),
        T.FFN_PRE_NORM: (embd,),
        T.FFN_GATE: (ff, embd),
        T.FFN_UP: (ff, embd),
        T.FFN_DOWN: (embd, ff),
        T.FFN_POST_NORM: (embd,),
    }
    outputs = [(T.OUTPUT_NORM, "weight")] + ([] if recipe.tied_embeddings else [(T.OUTPUT, "weight")])
    tensors = [(T.TOKEN_EMBD, "weight", None)] + [(kind, suffix, None) for kind, suffix in outputs]
    for layer in range(recipe.n_layers):
        tensors += [(kind, suffix, layer) for kind, suffix in (*_LAYER_TENSORS, *recipe.layer_extras)]
    result = []
    for kind, suffix, layer in tensors:
        assert kind in MODEL_TENSORS[arch], f"gguf has no {kind.name} in {recipe.architecture}"
        name = f"{TENSOR_NAMES[kind].format(bid=layer)}.{suffix}"
        shape = shapes[kind][:1] if suffix == "bias" else shapes[kind]
        result.append((name, shape, _type_of(recipe, kind, shape)))
    return result


def _type_of(recipe: Recipe, kind: MODEL_TENSOR, shape: tuple[int, ...]) -> GGMLType:
    if len(shape) == 1:
        return GGMLType.F32  # norms and biases
    if kind == T.TOKEN_EMBD:
        return recipe.embedding_type
    if kind == T.OUTPUT:
        return recipe.output_type
    return recipe.matrix_type


def _random_values(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values that keep activations near unit size: norms near 1, small biases, matrices
    scaled by their input width."""
    noise = rng.standard_normal(shape, dtype=np.float32)
    if name.endswith(".bias"):
        return 0.1 * noise
    if len(shape) == 1:
        return 1.0 + 0.1 * noise
    if name.startswith(TENSOR_NAMES[T.TOKEN_EMBD]):
        return noise
    return noise / np.float32(np.sqrt(shape[1]))


@functools.cache
def _tokenizer(vocab_file: Path) -> dict[str, tuple[Any, Any, Any]]:
    """A vocabulary file's tokenizer.* keys: (value, type, array element type). Read once per
    process: gguf's reader takes seconds on a large vocabulary."""
    reader = GGUFReader(vocab_file)
    keys = {}
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            sub_type = field.types[-1] if len(field.types) > 1 else None
            keys[key] = (field.contents(), field.types[0], sub_type)
    return keys


def load(spec: ModelSpec, **overrides: Any) -> Any:
    """llama.cpp (through llama-cpp-python) with the model: a small context, two threads."""
    from llama_cpp import Llama

    settings = dict(model_path=str(spec.path), n_ctx=256, n_threads=THREADS, seed=SEED, verbose=False)
    return Llama(**{**settings, **overrides})


def generate(llm: Any, prompt: str = PROMPT, n_predict: int = N_PREDICT) -> tuple[str, int]:
    """Greedy text and its token count. End-of-generation tokens are never picked: random
    weights may rank one first, which would end the generation before its decode steps."""
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    ends = np.array([t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)], dtype=np.intc)

    def never_end(input_ids: Any, scores: Any) -> Any:
        scores[ends] = -np.inf
        return scores

    processors = llama_cpp.LogitsProcessorList([never_end])
    completion = llm(prompt, max_tokens=n_predict, temperature=0.0, logits_processor=processors)
    return completion["choices"][0]["text"], completion["usage"]["completion_tokens"]
