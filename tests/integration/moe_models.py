"""Tiny Mixture-of-Experts GGUF models for the real llama.cpp to run, a numpy reference of
their routing, and a way to read what llama.cpp routed.

Written like arch_models.py's models (gguf-py's writer, seeded random weights, a tokenizer
copied from one of llama.cpp's vocabulary-only files), with each layer's dense FFN replaced
by experts: a router `ffn_gate_inp` (F32) and the experts' matrices as ggml 3-D tensors
`ffn_{gate,up,down}_exps` (numpy shape (n_expert, rows, columns)) in Q8_0, so the expert
matmuls (MUL_MAT_ID) read a quantized type.

The three architectures route differently in llama.cpp's build_moe_ffn (llama-graph.cpp):

    qwen3moe  softmax over all experts, top-k, the k weights renormalized to sum 1
    qwen2moe  softmax over all experts, top-k, the k probabilities as they are; plus a
              shared expert every token goes through, scaled by sigmoid(ffn_gate_inp_shexp . x)
    gpt-oss   router logits plus a bias, top-k of the logits, softmax over those k only;
              biases on every expert matrix, a clamped SwiGLU

All three use the llama-spm tokenizer (32,000 tokens), not their own families': gguf's
reader, which router_topk reads the model back with, takes ~1.5 s on it and ~11 s on
qwen2's 151,936 (llama.cpp does not care which tokenizer an architecture comes with).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import MODEL_ARCH_NAMES, MODEL_TENSOR, MODEL_TENSORS, TENSOR_NAMES, GGUFReader, GGUFWriter
from gguf import GGMLQuantizationType as GGMLType

from ..vocab_files import require_vocab_file
from .arch_models import CONTEXT_LENGTH, N_HEAD, N_HEAD_KV, RMS_EPS, SEED, _tokenizer, write_gguf

MOE_ARCHITECTURES = ("qwen3moe", "qwen2moe", "gpt-oss")

HEAD_DIM = 16
ROUTER_GAIN = 3.0  # router logits' spread: tokens pick clearly different experts, few near-ties
SOFTMAX_TOPK_NORM = "softmax_topk_norm"
SOFTMAX_TOPK = "softmax_topk"
BIASED_TOPK_SOFTMAX = "biased_topk_softmax"
WEIGHTS_SUM_MIN = 6.103515625e-5  # build_moe_ffn clamps the sum it divides by (F16's smallest normal)

T = MODEL_TENSOR


@dataclass(frozen=True)
class MoeRecipe:
    """How one architecture's tiny MoE model is made; write_moe_model's overrides replace
    these fields."""

    architecture: str
    gating: str  # how the weights are computed: one of the three names above
    router_input: str  # llama.cpp's name (before "-<layer>") of the tensor the router multiplies
    shared_experts: bool
    tied_embeddings: bool
    layer_extras: tuple[tuple[MODEL_TENSOR, str], ...]
    hparams: tuple[tuple[str, Any], ...] = ()  # (GGUFWriter method, value): this architecture's own keys
    vocab: str = "llama-spm"
    n_layers: int = 2
    n_expert: int = 8
    n_expert_used: int = 2
    n_embd: int = 64
    n_ff_exp: int = 32  # each expert's FFN width
    n_ff_shexp: int = 64  # the shared expert's
    expert_type: GGMLType = GGMLType.Q8_0
    matrix_type: GGMLType = GGMLType.F16  # attention and shared-expert matrices
    embedding_type: GGMLType = GGMLType.Q8_0
    output_type: GGMLType = GGMLType.Q8_0
    seed: int = SEED


_ATTENTION = ((T.ATTN_NORM, "weight"), (T.ATTN_Q, "weight"), (T.ATTN_K, "weight"), (T.ATTN_V, "weight"),
              (T.ATTN_OUT, "weight"))  # fmt: skip
_EXPERTS = ((T.FFN_GATE_INP, "weight"), (T.FFN_GATE_EXP, "weight"), (T.FFN_UP_EXP, "weight"),
            (T.FFN_DOWN_EXP, "weight"))  # fmt: skip

RECIPES = {
    # Qwen 3 MoE: q/k norms, the output tied to the embedding, no shared expert.
    "qwen3moe": MoeRecipe(
        architecture="qwen3moe", gating=SOFTMAX_TOPK_NORM, router_input="ffn_norm", shared_experts=False,
        tied_embeddings=True, n_layers=3,
        layer_extras=((T.ATTN_Q_NORM, "weight"), (T.ATTN_K_NORM, "weight"), (T.FFN_NORM, "weight")),
    ),
    # Qwen 2 MoE (Qwen1.5-MoE): biases on q, k and v, one shared expert with a sigmoid gate.
    "qwen2moe": MoeRecipe(
        architecture="qwen2moe", gating=SOFTMAX_TOPK, router_input="ffn_norm", shared_experts=True,
        tied_embeddings=False,
        layer_extras=((T.ATTN_Q, "bias"), (T.ATTN_K, "bias"), (T.ATTN_V, "bias"), (T.FFN_NORM, "weight"),
                      (T.FFN_GATE_INP_SHEXP, "weight"), (T.FFN_GATE_SHEXP, "weight"), (T.FFN_UP_SHEXP, "weight"),
                      (T.FFN_DOWN_SHEXP, "weight")),
    ),
    # gpt-oss: attention sinks and biases, sliding-window attention on every other layer, a
    # biased router and biased experts; the router reads the post-attention norm's output.
    "gpt-oss": MoeRecipe(
        architecture="gpt-oss", gating=BIASED_TOPK_SOFTMAX, router_input="attn_post_norm", shared_experts=False,
        tied_embeddings=False,
        layer_extras=((T.ATTN_Q, "bias"), (T.ATTN_K, "bias"), (T.ATTN_V, "bias"), (T.ATTN_OUT, "bias"),
                      (T.ATTN_SINKS, "weight"), (T.ATTN_POST_NORM, "weight"), (T.FFN_GATE_INP, "bias"),
                      (T.FFN_GATE_EXP, "bias"), (T.FFN_UP_EXP, "bias"), (T.FFN_DOWN_EXP, "bias")),
        hparams=(("add_sliding_window", 16),),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class MoeSpec:
    """A written MoE model: what the tests compare llama.cpp's routing with."""

    path: Path
    architecture: str
    n_layers: int
    n_expert: int
    n_expert_used: int
    n_embd: int
    n_ff_exp: int
    gating: str  # SOFTMAX_TOPK_NORM, SOFTMAX_TOPK or BIASED_TOPK_SOFTMAX
    shared_experts: bool
    router_input: str  # the tensor (llama.cpp's name, before "-<layer>") the router multiplies
    n_vocab: int
    tied_embeddings: bool
    tensor_types: dict[str, str]  # every tensor's name and ggml type name, in file order


def write_moe_model(path: Path, architecture: str, **overrides: Any) -> MoeSpec:
    """Write `architecture`'s tiny MoE model to `path` (overrides: MoeRecipe fields, e.g.
    n_expert=16); skips the test where llama.cpp's vocabulary files are missing."""
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
        recipe.seed,
    )
    return MoeSpec(
        path,
        architecture,
        recipe.n_layers,
        recipe.n_expert,
        recipe.n_expert_used,
        recipe.n_embd,
        recipe.n_ff_exp,
        recipe.gating,
        recipe.shared_experts,
        recipe.router_input,
        n_vocab,
        recipe.tied_embeddings,
        types,
    )


def _add_hparams(writer: GGUFWriter, recipe: MoeRecipe) -> None:
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(recipe.n_embd)
    writer.add_block_count(recipe.n_layers)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_expert_count(recipe.n_expert)
    writer.add_expert_used_count(recipe.n_expert_used)
    writer.add_expert_feed_forward_length(recipe.n_ff_exp)
    if recipe.shared_experts:
        writer.add_expert_shared_feed_forward_length(recipe.n_ff_shexp)
    for method, value in recipe.hparams:
        getattr(writer, method)(value)


def _tensors(recipe: MoeRecipe, n_vocab: int) -> list[tuple[str, tuple[int, ...], GGMLType]]:
    """(name, numpy shape, type) of every tensor, in the order they are written. A numpy
    shape (experts, rows, columns) is ggml's {ne0 = columns, ne1 = rows, ne2 = experts}."""
    arch = next(arch for arch, name in MODEL_ARCH_NAMES.items() if name == recipe.architecture)
    n_embd, n_expert, n_ff, n_shexp = recipe.n_embd, recipe.n_expert, recipe.n_ff_exp, recipe.n_ff_shexp
    q_width, kv_width = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    shapes = {
        T.TOKEN_EMBD: (n_vocab, n_embd),
        T.OUTPUT: (n_vocab, n_embd),
        T.OUTPUT_NORM: (n_embd,),
        T.ATTN_NORM: (n_embd,),
        T.ATTN_Q: (q_width, n_embd),
        T.ATTN_K: (kv_width, n_embd),
        T.ATTN_V: (kv_width, n_embd),
        T.ATTN_OUT: (n_embd, q_width),
        T.ATTN_Q_NORM: (HEAD_DIM,),
        T.ATTN_K_NORM: (HEAD_DIM,),
        T.ATTN_POST_NORM: (n_embd,),
        T.ATTN_SINKS: (N_HEAD,),
        T.FFN_NORM: (n_embd,),
        T.FFN_GATE_INP: (n_expert, n_embd),
        T.FFN_GATE_EXP: (n_expert, n_ff, n_embd),
        T.FFN_UP_EXP: (n_expert, n_ff, n_embd),
        T.FFN_DOWN_EXP: (n_expert, n_embd, n_ff),
        T.FFN_GATE_INP_SHEXP: (n_embd,),
        T.FFN_GATE_SHEXP: (n_shexp, n_embd),
        T.FFN_UP_SHEXP: (n_shexp, n_embd),
        T.FFN_DOWN_SHEXP: (n_embd, n_shexp),
    }
    outputs = [(T.OUTPUT_NORM, "weight")] + ([] if recipe.tied_embeddings else [(T.OUTPUT, "weight")])
    tensors = [(T.TOKEN_EMBD, "weight", None)] + [(kind, suffix, None) for kind, suffix in outputs]
    for layer in range(recipe.n_layers):
        tensors += [(kind, suffix, layer) for kind, suffix in (*_ATTENTION, *recipe.layer_extras, *_EXPERTS)]
    result = []
    for kind, suffix, layer in tensors:
        assert kind in MODEL_TENSORS[arch], f"gguf has no {kind.name} in {recipe.architecture}"
        name = f"{TENSOR_NAMES[kind].format(bid=layer)}.{suffix}"
        # a bias has the rows of its matrix, per expert for the experts' ({ne0 = rows, ne1 = experts})
        shape = shapes[kind][:-1] if suffix == "bias" else shapes[kind]
        result.append((name, shape, _type_of(recipe, kind, suffix, shape)))
    return result


def _type_of(recipe: MoeRecipe, kind: MODEL_TENSOR, suffix: str, shape: tuple[int, ...]) -> GGMLType:
    if len(shape) == 1 or suffix == "bias" or kind == T.FFN_GATE_INP:
        # norms, sinks, the router, the shared expert's gate; biases, the experts' too
        # (ggml's CPU ADD_ID adds F32 only)
        return GGMLType.F32
    if len(shape) == 3:
        return recipe.expert_type
    if kind == T.TOKEN_EMBD:
        return recipe.embedding_type
    if kind == T.OUTPUT:
        return recipe.output_type
    return recipe.matrix_type


def _random_values(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Values that keep activations near unit size (norms near 1, small biases, matrices
    scaled by their input width), except the router's: ROUTER_GAIN times wider, so each
    token's experts stand out from the rest."""
    noise = rng.standard_normal(shape, dtype=np.float32)
    kind = name.split(".")[-2]
    if name.endswith(".bias") or kind == "attn_sinks":
        return 0.1 * noise
    if len(shape) == 1:
        return 1.0 + 0.1 * noise
    if name.startswith(TENSOR_NAMES[T.TOKEN_EMBD]):
        return noise
    gain = ROUTER_GAIN if kind == "ffn_gate_inp" else 1.0
    return np.float32(gain) * noise / np.float32(np.sqrt(shape[-1]))


# -- the routing, in numpy --------------------------------------------------------------------


def router_topk(spec: MoeSpec, layer: int, ffn_input: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The experts llama.cpp picks for each token of `ffn_input` (n_tokens, n_embd: the
    layer's `spec.router_input` tensor, ffn_norm-<layer> or attn_post_norm-<layer>) and the
    weights it multiplies their outputs by: (ids (n_tokens, k) int32, best first, as
    build_moe_ffn's descending argsort orders them; weights (n_tokens, k) float32).

    The router is read back from the file. Computed in float64: llama.cpp's float32 agrees
    on the ids unless two experts' scores are within rounding of each other."""
    weight, bias = _router(spec.path, spec.path.stat().st_mtime_ns)[layer]
    logits = np.asarray(ffn_input, dtype=np.float64).reshape(-1, spec.n_embd) @ weight.T.astype(np.float64)
    k = spec.n_expert_used
    if spec.gating == BIASED_TOPK_SOFTMAX:
        # gpt-oss (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT): pick by the biased logits,
        # then a softmax over the k picked
        logits = logits + bias
        ids = _top_k(logits, k)
        weights = _softmax(np.take_along_axis(logits, ids, axis=1))
    else:
        probs = _softmax(logits)
        ids = _top_k(probs, k)
        weights = np.take_along_axis(probs, ids, axis=1)
        if spec.gating == SOFTMAX_TOPK_NORM:
            weights = weights / np.maximum(weights.sum(axis=1, keepdims=True), WEIGHTS_SUM_MIN)
    return ids.astype(np.int32), weights.astype(np.float32)


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@functools.cache
def _router(path: Path, _mtime_ns: int) -> dict[int, tuple[np.ndarray, np.ndarray | None]]:
    """Each layer's router weight (n_expert, n_embd) and bias (or None), as gguf's reader
    reads them from the file (once per file and version: ~1.5 s for the vocabulary's fields)."""
    tensors = {t.name: np.array(t.data) for t in GGUFReader(path).tensors if ".ffn_gate_inp." in t.name}
    layers = sorted({int(name.split(".")[1]) for name in tensors})
    return {il: (tensors[f"blk.{il}.ffn_gate_inp.weight"], tensors.get(f"blk.{il}.ffn_gate_inp.bias")) for il in layers}


# -- what llama.cpp computed: its eval callback -----------------------------------------------


class _GGMLTensor(ctypes.Structure):
    """ggml.h's struct ggml_tensor (ggml 0.25.3, LP64): the fields read here."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


_NUMPY_TYPES = {0: np.float32, 26: np.int32}  # GGML_TYPE_F32, GGML_TYPE_I32
_CALLBACKS: list[Any] = []


@functools.cache
def _ggml() -> ctypes.CDLL:
    """libggml-base as llama-cpp-python loaded it (op names, reading a tensor's bytes)."""
    import llama_cpp

    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
    lib.ggml_op_desc.restype, lib.ggml_op_desc.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    lib.ggml_nbytes.restype, lib.ggml_nbytes.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    lib.ggml_backend_tensor_get.restype = None
    lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    return lib


@dataclass
class GraphCapture:
    """One llama_decode's graph: every node in the order the scheduler computes it (name,
    op), and the values of the nodes asked for (numpy, ggml's dimensions reversed: a
    {n_expert_used, n_tokens} ids tensor is (n_tokens, n_expert_used))."""

    nodes: list[tuple[str, str]] = field(default_factory=list)
    values: dict[str, np.ndarray] = field(default_factory=dict)


# the tensors read by default: each layer's router input, its ids and weights
WATCHED = ("ffn_norm", "attn_post_norm", "ffn_moe_topk", "ffn_moe_weights", "ffn_moe_weights_norm",
           "ffn_moe_weights_softmax", "ffn_moe_probs")  # fmt: skip


@contextlib.contextmanager
def capture_moe(watched: tuple[str, ...] = WATCHED) -> Iterator[list[GraphCapture]]:
    """Inside, every llama.cpp context that llama-cpp-python creates gets an eval callback
    that lists each graph's nodes and copies the F32/I32 values of those named
    `<watched>-<layer>`; one GraphCapture per llama_decode call. (llama-cpp-python builds
    its context params inside Llama(), so llama_init_from_model is wrapped to add it.)"""
    import llama_cpp
    from llama_cpp import llama_cpp as api

    graphs: list[GraphCapture] = []
    lib = _ggml()
    active = True

    def wanted(name: str) -> bool:
        base, _, layer = name.rpartition("-")
        return base in watched and layer.isdigit()

    def on_node(pointer: int, ask: bool, _user_data: Any) -> bool:
        if not active:  # a context made inside, used after: let it compute whole graphs
            return not ask
        tensor = _GGMLTensor.from_address(pointer)
        name = tensor.name.decode(errors="replace")
        graph = graphs[-1] if graphs else GraphCapture()
        if ask:
            graph.nodes.append((name, lib.ggml_op_desc(pointer).decode()))
            return wanted(name)
        if tensor.type in _NUMPY_TYPES:
            graph.values[name] = _read(lib, pointer, tensor)
        return True

    callback = llama_cpp.ggml_backend_sched_eval_callback(on_node)
    _CALLBACKS.append(callback)  # a context may outlive the block: its callback must too
    init, decode = api.llama_init_from_model, api.llama_decode

    def init_with_callback(model: Any, params: Any) -> Any:
        params.cb_eval = callback
        params.cb_eval_user_data = None
        return init(model, params)

    def decode_graph(ctx: Any, batch: Any) -> int:
        graphs.append(GraphCapture())
        return decode(ctx, batch)

    api.llama_init_from_model, api.llama_decode = init_with_callback, decode_graph
    try:
        yield graphs
    finally:
        active = False
        api.llama_init_from_model, api.llama_decode = init, decode


def _read(lib: ctypes.CDLL, pointer: int, tensor: _GGMLTensor) -> np.ndarray:
    """A tensor's values (views too: strided) through ggml_backend_tensor_get, which works
    wherever its buffer is."""
    nbytes = lib.ggml_nbytes(pointer)
    raw = np.empty(nbytes, dtype=np.uint8)
    lib.ggml_backend_tensor_get(pointer, raw.ctypes.data, 0, nbytes)
    n_dims = max([2] + [i + 1 for i in range(4) if tensor.ne[i] > 1])  # (n_tokens, n_embd) even for one token
    shape = tuple(int(tensor.ne[i]) for i in reversed(range(n_dims)))
    strides = tuple(int(tensor.nb[i]) for i in reversed(range(n_dims)))
    dtype = np.dtype(_NUMPY_TYPES[tensor.type])
    return np.lib.stride_tricks.as_strided(raw.view(dtype), shape, strides).copy()
