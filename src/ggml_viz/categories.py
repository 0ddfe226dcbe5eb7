"""What a tensor is for, from its name alone (model files and the analysis of runs both ask)."""

from __future__ import annotations

import re

from .layers import LAYER_PART

_EMBEDDING = re.compile(r"(?<!un)(?:embd|embed)|^wte$|^wpe$")  # not an unembedding


def category_of(name: str) -> str:
    """input / attention / ffn / norm / output / other, from a tensor's name: GGUF's names
    (`blk.3.attn_q.weight`, `token_embd.weight`) and the checkpoint names kept by older formats
    (whisper's `encoder.blocks.3.attn.query.weight`, `decoder.token_embedding.weight`). Inputs
    are embeddings, and convolutions outside any layer (an audio or image stem)."""
    in_layer = LAYER_PART.search(name)
    base = name[in_layer.end() :] if in_layer else name
    words = [word for word in re.split(r"[._]", base) if word not in ("weight", "bias")]
    if any("norm" in word for word in words) or any(re.fullmatch(r"ln\d*", word) for word in words):
        return "norm"
    if any(word.startswith("attn") or word == "attention" for word in words):
        return "attention"
    if any(word in ("ffn", "mlp", "fc1", "fc2") for word in words):
        return "ffn"
    if any(_EMBEDDING.search(word) for word in words) or words[:2] == ["token", "types"]:
        return "input"
    if not in_layer and any(word.startswith("conv") for word in words):
        return "input"
    if words and words[0] in ("output", "cls", "lm"):
        return "output"
    return "other"
