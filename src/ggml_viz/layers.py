"""The transformer layer a tensor belongs to, read from its name.

llama.cpp names weights after the GGUF (`blk.12.attn_q.weight`), activations with a
`-N` suffix (`Qcur-12`, `ffn_out-29`, `Kcur-3 (view)`), and the KV cache `cache_k_l12`.
"""

from __future__ import annotations

import functools
import re

_LAYER_PATTERNS = (
    re.compile(r"^blk\.(\d+)\."),
    re.compile(r"-(\d+)(?=$|[\s(])"),
    re.compile(r"_l(\d+)(?=$|[\s(])"),
)

NO_LAYER = -1


@functools.lru_cache(maxsize=16384)  # a model's names recur from graph to graph
def layer_of(name: str) -> int:
    """The layer number in a tensor name, or NO_LAYER (-1) for tensors outside layers."""
    for pattern in _LAYER_PATTERNS:
        match = pattern.search(name)
        if match:
            return int(match.group(1))
    return NO_LAYER
