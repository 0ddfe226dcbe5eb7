"""What part of a transformer block each node belongs to: input, norm, attention, ffn,
output or other.

From the graph first: a node that reads a model weight takes the part GGUF's name for
that weight says (`blk.N.attn_q.weight`: attention; `blk.N.ffn_down.weight`: ffn;
`blk.N.attn_norm.weight`: norm; `token_embd`: input; `output`: output), the same names
for every architecture (gguf-py's TENSOR_NAMES). Else its name, where llama.cpp's
graph-building names say (`Qcur-3`, `kq_soft_max-3`, `ffn_up-3`, `attn_norm-3`). Else
the part of the node it reads first (an unnamed scaling of Q is attention)."""

from __future__ import annotations

import re

import pandas as pd

from ..categories import category_of
from ..runformat.reader import Run

COMPONENTS = ("input", "norm", "attention", "ffn", "output", "other")

_RULES = (
    ("norm", re.compile(r"norm")),  # attn_norm, ffn_norm, result_norm: before attention/ffn
    ("attention", re.compile(r"^(Qcur|Kcur|Vcur|kq|kqv|attn|cache_[kv]|q-|k-|v-|wo|Kcur_|Vcur_)")),
    ("ffn", re.compile(r"^ffn")),
    ("output", re.compile(r"^(result_output|output)")),
    ("input", re.compile(r"^(inp_|embd|token_embd)")),
)
# GGUF's weight names, past their `blk.N.` (or `enc.blk.N.`, ...) prefix
_WEIGHT_RULES = (
    ("norm", re.compile(r"norm")),
    ("attention", re.compile(r"^(attn|cross_attn|self_attn)")),
    ("ffn", re.compile(r"^ffn")),
    ("embedding", re.compile(r"^token_embd")),  # input where it is looked up; output where tied to it
    ("output", re.compile(r"^output")),
)
_WEIGHT = re.compile(r"^(?:.*\.)?blk\.\d+\.(?P<rest>.+)$")


def component_of(name: str) -> str:
    """input, norm, attention, ffn, output or other, from a node's name."""
    for component, pattern in _RULES:
        if pattern.search(name):
            return component
    return "other"


# a token embedding under the names checkpoints keep (whisper's decoder.token_embedding, HF's embed_tokens)
_TOKEN_EMBEDDING = re.compile(r"(^|\.)(token_embedding|embed_tokens)(\.|$)")


def component_of_weight(name: str) -> str | None:
    """The part a model weight serves, from its GGUF name, or from the checkpoint name an
    older format keeps (whisper.cpp's `encoder.blocks.3.attn.query.weight`: the model file's
    category). None: a tensor of no part; "embedding": the token embedding, input or output
    by the node reading it."""
    match = _WEIGHT.match(name)
    if name.endswith((".weight", ".bias")):
        rest = match.group("rest") if match else name
        for component, pattern in _WEIGHT_RULES:
            if pattern.search(rest):
                return component
    if match:  # a GGUF name no rule knows
        return None
    if _TOKEN_EMBEDDING.search(name):
        return "embedding"
    category = category_of(name)
    return None if category == "other" else category


def components(names: pd.Series) -> pd.Series:
    """component_of for a column of names (each distinct name looked at once)."""
    unique = names.drop_duplicates()
    mapping = dict(zip(unique, [component_of(str(name)) for name in unique], strict=True))
    return names.map(mapping)


def node_components(run: Run, nodes: pd.DataFrame) -> pd.Series:
    """The component of each of `nodes` (rows of run.nodes: graph_id, node_index), from
    the graph: the weight it reads, else its name, else the node it reads first."""
    per_structure = structure_components(run)
    graphs = run.graphs[["graph_id", "structure_id"]]
    keyed = nodes[["graph_id", "node_index"]].merge(graphs, on="graph_id", how="left")
    keyed = keyed.merge(per_structure, on=["structure_id", "node_index"], how="left")
    return pd.Series(keyed["component"].fillna("other").to_numpy(), index=nodes.index, name="component")


def structure_components(run: Run) -> pd.DataFrame:
    """Per (structure_id, node_index): the node's component (see node_components)."""
    tensors = run.raw("tensors")
    structure = run.raw("structure_nodes").sort_values(["structure_id", "node_index"])
    edges = run.raw("edges").sort_values(["structure_id", "node_index", "src_slot"])
    # plain dicts and sets, not Series lookups: the loop below asks once per node
    ids, names = tensors["tensor_id"].tolist(), tensors["name"].astype(str)
    leaves = (tensors["name"].notna() & (tensors["op"] == "NONE")).tolist()
    weight_part = {
        tensor: component_of_weight(name)
        for tensor, name, leaf in zip(ids, names.tolist(), leaves, strict=True)
        if leaf
    }
    lookup = set(tensors.loc[tensors["op_base"] == "GET_ROWS", "tensor_id"].tolist())
    name_part = dict(zip(ids, components(names).tolist(), strict=True))
    rows = []
    for structure_id, nodes in structure.groupby("structure_id", sort=False):
        node_of = dict(zip(nodes["tensor_id"].tolist(), nodes["node_index"].tolist(), strict=True))
        reads: dict[int, list[int]] = {}
        wiring = edges[edges["structure_id"] == structure_id]
        for node, source in zip(wiring["node_index"].tolist(), wiring["src_tensor_id"].tolist(), strict=True):
            reads.setdefault(node, []).append(source)
        part: dict[int, str] = {}
        for node, tensor in zip(nodes["node_index"].tolist(), nodes["tensor_id"].tolist(), strict=True):
            sources = reads.get(node, [])
            from_weight = next((weight_part[s] for s in sources if weight_part.get(s)), None)
            if from_weight == "embedding":  # a lookup of the token embedding, or the output tied to it
                from_weight = "input" if tensor in lookup else "output"
            from_source = (part.get(node_of[s], "other") for s in sources if s in node_of)
            named = name_part.get(tensor, "other")
            part[node] = from_weight or (named if named != "other" else next(from_source, "other"))
        rows.append(
            pd.DataFrame({"structure_id": structure_id, "node_index": list(part), "component": list(part.values())})
        )
    if not rows:
        return pd.DataFrame(columns=["structure_id", "node_index", "component"])
    return pd.concat(rows, ignore_index=True)
