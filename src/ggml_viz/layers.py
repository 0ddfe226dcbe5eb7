"""The transformer layer of a tensor, and of each node of a graph.

A name only hints at a layer: llama.cpp names weights after the GGUF (`blk.12.attn_q.weight`),
most activations with a `-N` suffix (`Qcur-12`, `ffn_out-29`, `Kcur-3 (view)`) and the KV
cache `cache_k_l12`, but some nodes not at all (`node_34`, `norm`). `layer_of(name)` reads the
hint; `node_layers(wiring)` infers every node's layer from its graph, where the hint is only
the tie-breaker. Nothing here knows an architecture: GGUF names every architecture's layer
weights `blk.N.` (gguf-py's TENSOR_NAMES), and llama.cpp its per-layer caches `cache_*_lN`.
Formats that keep a checkpoint's own names say `blocks.N.` (whisper's `encoder.blocks.3.`; its
encoder and decoder layers share numbers), `layers.N.` (Hugging Face) or `h.N.` (GPT-2).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

_LAYER_PATTERNS = (
    re.compile(r"^blk\.(\d+)\."),
    re.compile(r"(?:^|\.)(?:blocks|layers|h)\.(\d+)\."),
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


# -- what a graph's leaves say -------------------------------------------------------------

LEAF_OTHER = 0  # an input, a constant, or no leaf at all (a node's output)
LEAF_LAYER_WEIGHT = 1  # a weight of one layer (GGUF: `blk.N.`, `enc.blk.N.`, `v.blk.N.`; `blocks.N.`, ...)
LEAF_LAYER_STATE = 2  # per-layer state: the KV cache `cache_k_lN`, recurrent states `cache_s_lN`
LEAF_SHARED_WEIGHT = 3  # a weight of no layer: token_embd, output_norm, output, rope_freqs

# A layer's part of a weight's name: GGUF's `blk.N.` (also after `enc.`, `v.`, ...), and the
# checkpoint namings `blocks.N.` (whisper), `layers.N.` (Hugging Face), `h.N.` (GPT-2).
LAYER_PART = re.compile(r"(?:^|\.)(?:blk|blocks|layers|h)\.(\d+)\.")
_STATE_LAYER = re.compile(r"_l(\d+)(?=$|[\s(])")
_WEIGHT_SUFFIXES = (".weight", ".bias")


def leaf_class(name: str, in_weights_buffer: bool) -> tuple[int, int]:
    """(LEAF_* class, layer) of a leaf a node reads. A weight lives in a weights buffer
    (llama.cpp marks every model buffer so) or is named like one; its layer is its `blk.N.`
    (or `blocks.N.`, `layers.N.`, `h.N.`)."""
    match = LAYER_PART.search(name)
    if match:
        return LEAF_LAYER_WEIGHT, int(match.group(1))
    if in_weights_buffer or name.endswith(_WEIGHT_SUFFIXES):
        return LEAF_SHARED_WEIGHT, NO_LAYER
    match = _STATE_LAYER.search(name)
    if match:
        return LEAF_LAYER_STATE, int(match.group(1))
    return LEAF_OTHER, NO_LAYER


def leaf_classes(names: Iterable[str], in_weights_buffer: Iterable[bool]) -> tuple[np.ndarray, np.ndarray]:
    """leaf_class of each leaf, as two int32 arrays (classes, layers)."""
    pairs = [leaf_class(name, bool(weights)) for name, weights in zip(names, in_weights_buffer, strict=True)]
    classes = np.array([pair[0] for pair in pairs], dtype=np.int32)
    layers = np.array([pair[1] for pair in pairs], dtype=np.int32)
    return classes, layers


# -- a node's layer, from its graph --------------------------------------------------------


@dataclass(frozen=True)
class Wiring:
    """One graph structure as node_layers reads it: per node its name's hint, per edge
    (node, source) the source: a node of the graph, or a leaf and what the leaf is."""

    hints: np.ndarray  # per node (execution order): layer_of(its name)
    edge_node: np.ndarray  # per edge: the reading node's index
    edge_source: np.ndarray  # per edge: the source node's index; -1 when the source is a leaf
    edge_leaf_class: np.ndarray  # per edge: the leaf's LEAF_* class (LEAF_OTHER for a node)
    edge_leaf_layer: np.ndarray  # per edge: the leaf's layer (NO_LAYER if it has none)


_FAR = 1 << 30  # no such layer (or distance) in that direction
_AFTER_LAYERS = _FAR  # "the layer after all layers": what output nodes lead to


def node_layers(wiring: Wiring) -> np.ndarray:
    """Each node's layer (int32, NO_LAYER outside layers), inferred from the graph.

    1. Seeds: a node that reads a layer's weights (`blk.N.`) is in layer N; one that reads
       no layer weight but a layer's state (KV cache `cache_k_lN`) is in layer N.
    2. Every other node lies downstream of the latest layer it depends on (A: none before
       the first layer) and upstream of the earliest layer that depends on it (D: none
       after the last). A == D: that layer. Between two layers (a layer's residual output,
       the next layer's norm), or before or after all layers, the name's hint decides when
       it lies in [A, D]; else the side whose seed is fewer edges away (a tie goes to D, as
       the unnamed norm feeding `blk.N.attn_norm`'s MUL is layer N). Nodes reading only
       layer-less weights (token_embd, output_norm, output) are the seeds of "before" and
       "after": the token embedding and the final norm are outside layers.
    3. Layers are contiguous in execution order: every node between a layer's first and
       last weight reader is that layer; the nodes between two layers are split where they
       best agree with step 2, and so are those before the first and after the last.
       (Where weight readers of layers interleave, step 2's answer stands.)
    """
    n = len(wiring.hints)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    hints = np.asarray(wiring.hints, dtype=np.int64)
    edge_node = np.asarray(wiring.edge_node, dtype=np.int64)
    edge_source = np.asarray(wiring.edge_source, dtype=np.int64)
    leaf = np.asarray(wiring.edge_leaf_class)
    leaf_layer = np.asarray(wiring.edge_leaf_layer, dtype=np.int64)
    weight = _max_per_node(n, edge_node, leaf == LEAF_LAYER_WEIGHT, leaf_layer)
    state = _max_per_node(n, edge_node, leaf == LEAF_LAYER_STATE, leaf_layer)
    seed = np.where(weight >= 0, weight, state)
    shared = np.zeros(n, dtype=bool)
    shared[edge_node[leaf == LEAF_SHARED_WEIGHT]] = True
    outside = shared & (seed < 0)
    sources: list[list[int]] = [[] for _ in range(n)]
    wired = (edge_source >= 0) & (edge_source < edge_node)  # ggml orders a node after its sources
    for node, source in zip(edge_node[wired].tolist(), edge_source[wired].tolist(), strict=True):
        sources[node].append(source)
    seeds, outsides = seed.tolist(), outside.tolist()
    after, after_distance = _upstream(seeds, outsides, sources)
    before, before_distance = _downstream(seeds, outsides, sources)
    tentative = np.empty(n, dtype=np.int64)
    for i, (own, a, d, b, e, hint) in enumerate(
        zip(seeds, after, after_distance, before, before_distance, hints.tolist(), strict=True)
    ):
        tentative[i] = _between(own, a, d, b, e, hint)
    strong = weight if (weight >= 0).any() else tentative
    return _contiguous(tentative, strong).astype(np.int32)


def _max_per_node(n: int, edge_node: np.ndarray, chosen: np.ndarray, layer: np.ndarray) -> np.ndarray:
    result = np.full(n, NO_LAYER, dtype=np.int64)
    np.maximum.at(result, edge_node[chosen], layer[chosen])
    return result


def _upstream(seeds: list[int], outside: list[bool], sources: list[list[int]]) -> tuple[list[int], list[int]]:
    """Per node: the latest seed layer it depends on (NO_LAYER: none) and the fewest edges
    back to a seed of it (to an outside seed, for NO_LAYER; _FAR: no seed)."""
    n = len(seeds)
    layer, distance = [NO_LAYER] * n, [_FAR] * n
    for i in range(n):
        if seeds[i] >= 0:
            layer[i], distance[i] = seeds[i], 0
            continue
        best, steps = NO_LAYER, 0 if outside[i] else _FAR
        for source in sources[i]:
            candidate, far = layer[source], distance[source] + 1
            if candidate > best:
                best, steps = candidate, far
            elif candidate == best and far < steps:
                steps = far
        layer[i], distance[i] = best, min(steps, _FAR)
    return layer, distance


def _downstream(seeds: list[int], outside: list[bool], sources: list[list[int]]) -> tuple[list[int], list[int]]:
    """Per node: the earliest seed layer that depends on it (_AFTER_LAYERS: none) and the
    fewest edges on to a seed of it (to an outside seed, for _AFTER_LAYERS)."""
    n = len(seeds)
    layer, distance = [_AFTER_LAYERS] * n, [_FAR] * n
    for i in reversed(range(n)):  # a node's consumers come after it: they are done
        if seeds[i] >= 0:
            layer[i], distance[i] = seeds[i], 0
        elif outside[i] and layer[i] == _AFTER_LAYERS:
            distance[i] = 0
        own, far = layer[i], distance[i] + 1
        if far > _FAR:
            continue
        for source in sources[i]:
            if own < layer[source] or (own == layer[source] and far < distance[source]):
                layer[source], distance[source] = own, far
    return layer, distance


def _between(seed: int, after: int, after_distance: int, before: int, before_distance: int, hint: int) -> int:
    """Step 2 for one node."""
    if seed >= 0:
        return seed
    if after == before:
        return after
    low, high = min(after, before), max(after, before)
    if hint >= 0 and low <= hint <= high:
        return hint
    if after_distance >= _FAR and before_distance >= _FAR:  # the graph says nothing
        return hint
    if after_distance < before_distance:
        return after
    return before if before != _AFTER_LAYERS else NO_LAYER


def _contiguous(tentative: np.ndarray, strong: np.ndarray) -> np.ndarray:
    """Step 3: the strong nodes' layers as contiguous runs, the rest split between them."""
    present = np.flatnonzero(strong >= 0)
    if not len(present):
        return tentative
    layers, first = np.unique(strong[present], return_index=True)
    last = len(present) - 1 - np.unique(strong[present][::-1], return_index=True)[1]
    first, last = present[first], present[last]
    order = np.argsort(first, kind="stable")
    layers, first, last = layers[order], first[order], last[order]
    if (first[1:] <= last[:-1]).any():  # layers interleave: no runs to draw
        return tentative
    result = tentative.copy()
    for layer, start, end in zip(layers.tolist(), first.tolist(), last.tolist(), strict=True):
        result[start : end + 1] = layer
    bounds = [0, *first.tolist(), len(result)]
    ends = [-1, *last.tolist()]
    sides = [NO_LAYER, *layers.tolist(), NO_LAYER]
    for k in range(len(layers) + 1):
        start, stop = ends[k] + 1, bounds[k + 1]
        if start < stop:
            split = start + _best_split(tentative[start:stop], sides[k], sides[k + 1])
            result[start:split] = sides[k]
            result[split:stop] = sides[k + 1]
    return result


def _best_split(labels: np.ndarray, left: int, right: int) -> int:
    """Where to cut a run of nodes so that most of those before are `left` and most of
    those after are `right` (the earliest such cut: a tie goes to the later layer)."""
    before = np.concatenate([[0], np.cumsum(labels == left)])
    after = np.concatenate([[0], np.cumsum((labels == right)[::-1])])[::-1]
    return int(np.argmax(before + after))
