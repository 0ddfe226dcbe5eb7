"""What part of a transformer block a node belongs to, read from its tensor name
(llama.cpp's graph-building names: `Qcur-3`, `kq_soft_max-3`, `ffn_up-3`, `attn_norm-3`, ...)."""

from __future__ import annotations

import re

import pandas as pd

COMPONENTS = ("input", "norm", "attention", "ffn", "output", "other")

_RULES = (
    ("norm", re.compile(r"norm")),  # attn_norm, ffn_norm, result_norm: before attention/ffn
    ("attention", re.compile(r"^(Qcur|Kcur|Vcur|kq|kqv|attn|cache_[kv]|q-|k-|v-|wo|Kcur_|Vcur_)")),
    ("ffn", re.compile(r"^ffn")),
    ("output", re.compile(r"^(result_output|output)")),
    ("input", re.compile(r"^(inp_|embd|token_embd)")),
)


def component_of(name: str) -> str:
    """input, norm, attention, ffn, output or other."""
    for component, pattern in _RULES:
        if pattern.search(name):
            return component
    return "other"


def components(names: pd.Series) -> pd.Series:
    """component_of for a column of names (each distinct name looked at once)."""
    unique = names.drop_duplicates()
    mapping = dict(zip(unique, [component_of(str(name)) for name in unique], strict=True))
    return names.map(mapping)
