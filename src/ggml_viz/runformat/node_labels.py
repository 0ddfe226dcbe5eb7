"""What to call a node the program left unnamed.

llama.cpp names its nodes (`Qcur-3`, `ffn_out-12`, `result_output`); a program that does not
(whisper.cpp, most ggml code) leaves ggml's `node_N`, numbered by the node's place in its own
graph: node_191 of the decoder is not node_191 of the encoder, and summing time "by tensor"
under such names would add unrelated nodes up. Such a node is called by its op and the weight
it reads (`MUL_MAT · decoder.token_embedding.weight`: the same computation in every graph that
does it), or, reading none, by its op and layer.
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
