"""Write a random-weight llama model (GGUF, Q4_0 or F16 matrices) for the GPU check, in seconds.

    python benchmarks/gpu_model.py OUT.gguf --vocab ggml-vocab-llama-spm.gguf [--layers 22 --embd 2048 --ff 5632]
        [--type q4_0|f16]

TinyLlama-1.1B's shape by default (22 layers, n_embd 2048, n_ff 5632, 32 heads, 4 KV heads),
the vocabulary (tokens, scores, types) of a GGUF vocabulary file such as llama.cpp's own
`models/ggml-vocab-llama-spm.gguf`. Quantized blocks are written as random bytes with a
small scale (F16 matrices: one block of a million normal values, scaled by 1/sqrt(width),
repeated over each matrix): the model computes what a real one of its shape computes, and its
text is noise. Deterministic (seed 11).
"""

from __future__ import annotations

import argparse

import gguf
import numpy as np

Q4_0 = gguf.GGMLQuantizationType.Q4_0
BLOCK = 32  # weights per Q4_0 block: an f16 scale and 16 bytes of nibbles
F16_TILE = 1 << 20  # F16 matrices repeat one block of this many random values
FILE_TYPES = {"q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "f16": gguf.LlamaFileType.MOSTLY_F16}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--vocab", required=True, help="a GGUF file whose tokenizer.* keys give the vocabulary")
    parser.add_argument("--layers", type=int, default=22)
    parser.add_argument("--embd", type=int, default=2048)
    parser.add_argument("--ff", type=int, default=5632)
    parser.add_argument("--type", choices=sorted(FILE_TYPES), default="q4_0", help="the matrices' type")
    args = parser.parse_args()
    write_model(args.out, args.vocab, args.layers, args.embd, args.ff, args.type)


def write_model(out: str, vocab_path: str, n_layer: int, n_embd: int, n_ff: int, kind: str = "q4_0") -> None:
    n_head, n_head_kv = max(1, n_embd // 64), max(1, n_embd // 512)
    vocab = gguf.GGUFReader(vocab_path)
    n_vocab = len(vocab.fields["tokenizer.ggml.tokens"].data)
    rng = np.random.default_rng(11)
    writer = gguf.GGUFWriter(out, "llama")
    writer.add_name("ggml-viz-gpu-check")
    writer.add_context_length(4096)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_block_count(n_layer)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(FILE_TYPES[kind])
    for key, field in vocab.fields.items():
        if key.startswith("tokenizer."):
            value_type = field.types[0]
            if value_type == gguf.GGUFValueType.ARRAY:
                writer.add_key_value(key, field.contents(), value_type, sub_type=field.types[-1])
            else:
                writer.add_key_value(key, field.contents(), value_type)

    tile = np.random.default_rng(12).standard_normal(F16_TILE, dtype=np.float32) if kind == "f16" else None

    def matrix(name: str, rows: int, cols: int) -> None:
        if tile is not None:
            writer.add_tensor(name, np.resize((tile / np.sqrt(cols)).astype(np.float16), (rows, cols)))
            return
        blocks = rows * cols // BLOCK
        data = rng.integers(0, 256, size=(blocks, 18), dtype=np.uint8)
        data[:, :2] = np.frombuffer(np.float16(0.004).tobytes(), np.uint8)  # every block's scale
        writer.add_tensor(name, data.reshape(rows, cols // BLOCK * 18), raw_dtype=Q4_0)

    def norm(name: str) -> None:
        writer.add_tensor(name, np.ones(n_embd, dtype=np.float32))

    d_kv = n_embd // n_head * n_head_kv
    matrix("token_embd.weight", n_vocab, n_embd)
    for layer in range(n_layer):
        norm(f"blk.{layer}.attn_norm.weight")
        matrix(f"blk.{layer}.attn_q.weight", n_embd, n_embd)
        matrix(f"blk.{layer}.attn_k.weight", d_kv, n_embd)
        matrix(f"blk.{layer}.attn_v.weight", d_kv, n_embd)
        matrix(f"blk.{layer}.attn_output.weight", n_embd, n_embd)
        norm(f"blk.{layer}.ffn_norm.weight")
        matrix(f"blk.{layer}.ffn_gate.weight", n_ff, n_embd)
        matrix(f"blk.{layer}.ffn_up.weight", n_ff, n_embd)
        matrix(f"blk.{layer}.ffn_down.weight", n_embd, n_ff)
    norm("output_norm.weight")
    matrix("output.weight", n_vocab, n_embd)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {out}: llama, {n_layer} layers, n_embd {n_embd}, n_ff {n_ff}, {n_vocab} tokens, {kind.upper()}")


if __name__ == "__main__":
    main()
