"""Write a random-weight Mixture-of-Experts model (GGUF, quantized experts) for the GPU check, in seconds.

    python benchmarks/moe_model.py OUT.gguf --vocab ggml-vocab-qwen2.gguf \
        [--arch qwen3moe --layers 24 --experts 64 --used 8 --embd 1024 --ff-exp 512 --type q4_0]

A qwen3moe (or qwen2moe, with a shared expert) of a realistic MoE shape by default: 24 layers,
64 experts of which 8 route each token, n_embd 1024, each expert's FFN 512 wide (about 2.4 B
expert weights, 1.4 GB in Q4_0), attention heads of 128. The experts (3-D ggml tensors
ffn_{gate,up,down}_exps), the embedding and any separate output matrix are written as
random quantized blocks (Q4_0 or Q8_0) with one fixed scale per matrix, so no numpy
quantization runs: the scale makes each weight's spread 1/sqrt(input width), which keeps
activations near unit size. The router (ffn_gate_inp, F32) is random enough that tokens
pick different experts; attention matrices are F16, norms 1. The tokenizer is copied from a
GGUF vocabulary file such as llama.cpp's `models/ggml-vocab-qwen2.gguf`. Tensors are
streamed to the file one at a time. Deterministic (--seed, 11 by default); the text is noise.

Prints how long the write took and the file's size.
"""

from __future__ import annotations

import argparse
import struct
import time
from pathlib import Path
from typing import Any

import gguf
import numpy as np

QTYPES = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q8_0": gguf.GGMLQuantizationType.Q8_0}
FILE_TYPES = {"q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
BLOCK = 32  # weights per Q4_0 / Q8_0 block
BLOCK_BYTES = {"q4_0": 18, "q8_0": 34}  # an f16 scale, then 16 bytes of nibbles / 32 int8
# the spread of a block's quants (uniform random nibbles - 8 / random int8), which the scale divides out
QUANT_STD = {"q4_0": np.sqrt((16**2 - 1) / 12), "q8_0": np.sqrt((256**2 - 1) / 12)}
HEAD_DIM = 128
ROUTER_GAIN = 2.0  # router logits' spread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--vocab", required=True, help="a GGUF file whose tokenizer.* keys give the vocabulary")
    parser.add_argument("--arch", choices=("qwen3moe", "qwen2moe"), default="qwen3moe")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--experts", type=int, default=64)
    parser.add_argument("--used", type=int, default=8, help="experts per token (n_expert_used)")
    parser.add_argument("--embd", type=int, default=1024)
    parser.add_argument("--ff-exp", type=int, default=512, help="each expert's FFN width")
    parser.add_argument("--ff-shexp", type=int, default=2048, help="qwen2moe's shared expert's FFN width")
    parser.add_argument("--type", choices=sorted(QTYPES), default="q4_0", help="experts' and embedding's type")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    start = time.perf_counter()
    write_model(args)
    seconds = time.perf_counter() - start
    size = Path(args.out).stat().st_size
    print(f"wrote {args.out} in {seconds:.1f} s: {size / 1e9:.3f} GB ({size} bytes)")


def write_model(args: argparse.Namespace) -> None:
    n_embd, n_expert, n_ff = args.embd, args.experts, args.ff_exp
    n_head = max(1, n_embd // HEAD_DIM)
    n_head_kv = max(1, n_head // 4)
    shared = args.arch == "qwen2moe"
    tokenizer = read_tokenizer(args.vocab)
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"][0])
    rng = np.random.default_rng(args.seed)

    writer = gguf.GGUFWriter(args.out, args.arch)
    writer.add_name(f"ggml-viz-moe-check {args.arch}")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(args.layers)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_freq_base(1000000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(args.used)
    writer.add_expert_feed_forward_length(n_ff)
    if shared:
        writer.add_expert_shared_feed_forward_length(args.ff_shexp)
    writer.add_file_type(FILE_TYPES[args.type])
    for key, (value, vtype, sub_type) in tokenizer.items():
        writer.add_key_value(key, value, vtype, sub_type)

    # (name, numpy shape, kind): the data is made only when the tensor is written
    tensors: list[tuple[str, tuple[int, ...], str]] = [("token_embd.weight", (n_vocab, n_embd), "quantized")]
    tensors.append(("output_norm.weight", (n_embd,), "norm"))
    if shared:  # qwen2moe has no tied output; qwen3moe multiplies by the embedding
        tensors.append(("output.weight", (n_vocab, n_embd), "quantized"))
    q_width, kv_width = n_head * HEAD_DIM, n_head_kv * HEAD_DIM
    for il in range(args.layers):
        blk = f"blk.{il}"
        tensors += [
            (f"{blk}.attn_norm.weight", (n_embd,), "norm"),
            (f"{blk}.attn_q.weight", (q_width, n_embd), "f16"),
            (f"{blk}.attn_k.weight", (kv_width, n_embd), "f16"),
            (f"{blk}.attn_v.weight", (kv_width, n_embd), "f16"),
            (f"{blk}.attn_output.weight", (n_embd, q_width), "f16"),
            (f"{blk}.ffn_norm.weight", (n_embd,), "norm"),
            (f"{blk}.ffn_gate_inp.weight", (n_expert, n_embd), "router"),
            (f"{blk}.ffn_gate_exps.weight", (n_expert, n_ff, n_embd), "quantized"),
            (f"{blk}.ffn_up_exps.weight", (n_expert, n_ff, n_embd), "quantized"),
            (f"{blk}.ffn_down_exps.weight", (n_expert, n_embd, n_ff), "quantized"),
        ]
        if args.arch == "qwen3moe":
            tensors += [
                (f"{blk}.attn_q_norm.weight", (HEAD_DIM,), "norm"),
                (f"{blk}.attn_k_norm.weight", (HEAD_DIM,), "norm"),
            ]
        else:
            tensors += [
                (f"{blk}.attn_{x}.bias", (width,), "bias")
                for x, width in (("q", q_width), ("k", kv_width), ("v", kv_width))
            ]
            tensors += [
                (f"{blk}.ffn_gate_inp_shexp.weight", (n_embd,), "router"),
                (f"{blk}.ffn_gate_shexp.weight", (args.ff_shexp, n_embd), "f16"),
                (f"{blk}.ffn_up_shexp.weight", (args.ff_shexp, n_embd), "f16"),
                (f"{blk}.ffn_down_shexp.weight", (n_embd, args.ff_shexp), "f16"),
            ]

    qtype = QTYPES[args.type]
    for name, shape, kind in tensors:
        if kind == "quantized":
            byte_shape = (*shape[:-1], shape[-1] // BLOCK * BLOCK_BYTES[args.type])
            writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=qtype)
        else:
            dtype = np.dtype(np.float16 if kind == "f16" else np.float32)
            writer.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for name, shape, kind in tensors:
        writer.write_tensor_data(_values(rng, args.type, shape, kind, name))
    writer.close()
    print(
        f"{args.arch}: {args.layers} layers, {n_expert} experts ({args.used} per token), n_embd {n_embd}, "
        f"expert FFN {n_ff}, {n_vocab} tokens, experts {args.type}"
    )


def _values(rng: np.random.Generator, qname: str, shape: tuple[int, ...], kind: str, name: str) -> np.ndarray:
    if kind == "quantized":
        return random_blocks(rng, qname, shape, 1.0 if name == "token_embd.weight" else 1 / np.sqrt(shape[-1]))
    if kind == "norm":
        return np.ones(shape, dtype=np.float32)
    noise = rng.standard_normal(shape, dtype=np.float32)
    if kind == "bias":
        return 0.1 * noise
    if kind == "router":
        return ROUTER_GAIN * noise / np.float32(np.sqrt(shape[-1]))
    return (noise / np.float32(np.sqrt(shape[-1]))).astype(np.float16)


def random_blocks(rng: np.random.Generator, qname: str, shape: tuple[int, ...], spread: float) -> np.ndarray:
    """Valid Q4_0 / Q8_0 blocks for a tensor of numpy `shape` (rows of shape[-1] weights)
    whose weights spread by `spread`: random bytes (the generator's raw 64-bit output,
    ~1.4 s a GiB) with every block's f16 scale set to one value."""
    block_bytes = BLOCK_BYTES[qname]
    n_blocks = int(np.prod(shape)) // BLOCK
    raw = rng.bit_generator.random_raw((n_blocks * block_bytes + 7) // 8).view(np.uint8)
    blocks = raw[: n_blocks * block_bytes].reshape(n_blocks, block_bytes)
    blocks[:, :2] = np.frombuffer(np.float16(spread / QUANT_STD[qname]).tobytes(), np.uint8)
    return blocks.reshape(*shape[:-1], shape[-1] // BLOCK * block_bytes)


# GGUF value types (gguf.GGUFValueType) a vocabulary file's keys hold, as struct formats
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def read_tokenizer(path: str) -> dict[str, tuple[Any, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """A GGUF file's tokenizer.* keys: (value, type, array element type), read straight from
    its key-value section. gguf's GGUFReader takes ~11 s on qwen2's 151,936 tokens and
    151,387 merges (it maps every array element); this takes well under a second."""
    data = Path(path).read_bytes()
    magic, version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    if magic != b"GGUF" or version < 2:
        raise ValueError(f"{path} is not a GGUF file of version 2 or later")
    pos = 24

    def string(pos: int) -> tuple[bytes, int]:
        (length,) = struct.unpack_from("<Q", data, pos)
        return data[pos + 8 : pos + 8 + length], pos + 8 + length

    def scalar(pos: int, vtype: int) -> tuple[Any, int]:
        if vtype == _STRING:
            return string(pos)
        fmt = "<" + _SCALARS[vtype]
        return struct.unpack_from(fmt, data, pos)[0], pos + struct.calcsize(fmt)

    keys = {}
    for _ in range(n_kv):
        key, pos = string(pos)
        (vtype,) = struct.unpack_from("<I", data, pos)
        pos += 4
        sub_type = None
        if vtype == _ARRAY:
            sub_type, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if sub_type == _STRING:
                value = []
                for _ in range(count):
                    item, pos = string(pos)
                    value.append(item)
            else:
                dtype = np.dtype("<" + _SCALARS[sub_type])
                value = np.frombuffer(data, dtype, count, pos).tolist()
                pos += count * dtype.itemsize
        else:
            value, pos = scalar(pos, vtype)
        if key.startswith(b"tokenizer."):
            keys[key.decode()] = (
                value,
                gguf.GGUFValueType(vtype),
                None if sub_type is None else gguf.GGUFValueType(sub_type),
            )
    return keys


if __name__ == "__main__":
    main()
