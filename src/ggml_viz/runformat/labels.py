"""What to call a node the program left unnamed, and a graph by what it computes.

llama.cpp names its nodes (`Qcur-3`, `ffn_out-12`, `result_output`); a program that does not
(whisper.cpp, most ggml code) leaves ggml's `node_N`, numbered by the node's place in its own
graph: node_191 of the decoder is not node_191 of the encoder, and summing time "by tensor"
under such names would add unrelated nodes up. Such a node is called by its op and the weight
it reads (`MUL_MAT · decoder.token_embedding.weight`: the same computation in every graph that
does it), or, reading none, by its op and layer.

A graph with tokens is told by its tokens; one without (whisper.cpp's encoder, anyone's ggml
code) by the weights it reads, summed up from their names: the part of the model they share,
then what of it (`encoder: blocks 0-3, ln_post`, `decoder.blocks 0-3.cross_attn: key, value`).
"""

from __future__ import annotations

import re

import pandas as pd

# ggml's names for unnamed tensors (node_N, leaf_N, none), and the suffixes its view ops add
_AUTO = re.compile(r"^(node_\d+|leaf_\d+)?( \((view|reshaped|permuted|transposed|cont|copy of [^)]*)\))*$")


def is_auto_name(name: object) -> bool:
    """Whether ggml made this name up (the program named the tensor nothing)."""
    return not isinstance(name, str) or _AUTO.match(name) is not None


def node_labels(structure_nodes: pd.DataFrame, edges: pd.DataFrame, tensors: pd.DataFrame) -> pd.Series:
    """Per row of `structure_nodes` (structure_id, node_index, tensor_id, layer): the node's
    name, or for a node ggml named, its op and the first weight it reads, else its op and layer.
    `tensors`: the reader's (name, op, buffer_usage by tensor_id)."""
    described = tensors.set_index("tensor_id")
    names = described["name"].reindex(structure_nodes["tensor_id"].to_numpy())
    auto = names.map(is_auto_name).to_numpy(dtype=bool)
    labels = pd.Series(names.to_numpy(dtype=object), index=structure_nodes.index)
    if not auto.any():
        return labels
    weights = described.index[described["buffer_usage"].eq("weights").fillna(False).to_numpy(dtype=bool)]
    reads = edges[edges["src_tensor_id"].isin(weights)].sort_values(["structure_id", "node_index", "src_slot"])
    first = reads.drop_duplicates(["structure_id", "node_index"]).set_index(["structure_id", "node_index"])
    keys = pd.MultiIndex.from_frame(structure_nodes[["structure_id", "node_index"]])
    weight = described["name"].reindex(first["src_tensor_id"].reindex(keys).to_numpy()).to_numpy(dtype=object)
    ops = described["op"].reindex(structure_nodes["tensor_id"].to_numpy()).to_numpy(dtype=object)
    layers = structure_nodes["layer"].to_numpy()
    for row in auto.nonzero()[0].tolist():
        if isinstance(weight[row], str):
            labels.iloc[row] = f"{ops[row]} · {weight[row]}"
        else:
            layer = int(layers[row])
            labels.iloc[row] = f"{ops[row]} · layer {layer}" if layer >= 0 else f"{ops[row]} · outside layers"
    return labels


# a numbered container in a checkpoint's names: blocks.3, layers.12, h.0, GGUF's blk.7
_NUMBERED = re.compile(r"(?:^|(?<=\.))(blk|blocks|layers|h)\.(\d+)(?=\.|$)")
_SUFFIXES = (".weight", ".bias")
MAX_LABEL = 100


def structure_labels(edges: pd.DataFrame, tensors: pd.DataFrame) -> dict[int, str]:
    """Per structure_id: what its graphs compute, from the names of the weights they read
    (none for a structure that reads no weight). `tensors`: the reader's (name, buffer_usage)."""
    in_weights = tensors["buffer_usage"].eq("weights").fillna(False).to_numpy(dtype=bool)
    weights = tensors.loc[in_weights, ["tensor_id", "name"]]
    reads = edges[["structure_id", "src_tensor_id"]].drop_duplicates()
    reads = reads.merge(weights.rename(columns={"tensor_id": "src_tensor_id"}), on="src_tensor_id")
    return {int(structure): weights_label(names.tolist()) for structure, names in reads.groupby("structure_id")["name"]}


def weights_label(names: list[str]) -> str:
    """A few words for a set of weight names (in the order a graph reads them): their common
    part, then the parts under it, a numbered container's numbers as a range (`blocks 0-3`)."""
    numbers: dict[str, set[int]] = {}
    paths: dict[tuple[str, ...], None] = {}
    for name in (n for n in names if isinstance(n, str) and not is_auto_name(n)):
        base = next((name[: -len(x)] for x in _SUFFIXES if name.endswith(x)), name)
        for match in _NUMBERED.finditer(base):
            numbers.setdefault(match.group(1), set()).add(int(match.group(2)))
        paths[tuple(_NUMBERED.sub(lambda m: m.group(1) + "[]", base).split("."))] = None
    if not paths:
        return ""
    common: list[str] = []
    for at in zip(*paths, strict=False):
        if any(part != at[0] for part in at):
            break
        common.append(at[0])
    if any(len(path) == len(common) for path in paths):  # one weight, or a prefix of the others
        common = common[:-1]
    parts = list(dict.fromkeys(path[len(common)] for path in paths))

    def words(part: str) -> str:
        container = part[:-2]
        if not part.endswith("[]") or container not in numbers:
            return part
        low, high = min(numbers[container]), max(numbers[container])
        return f"{container} {low}" if low == high else f"{container} {low}-{high}"

    head, tail = ".".join(map(words, common)), ", ".join(map(words, parts))
    label = f"{head}: {tail}" if head else tail
    return label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "…"
