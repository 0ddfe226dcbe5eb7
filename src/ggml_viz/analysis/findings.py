"""The top bottlenecks of a run, in words."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from ..runformat.reader import Run
from .components import structure_components
from .summary import phase_stats, timed_totals, weight_reads

_LAYER_PART = r"(blk|blocks|layers|h)\.\d+\."  # a layer in a weight's name
_LAYER_SUFFIX = re.compile(r"-\d+(?=$|[\s(])")


def findings(
    run: Run,
    *,
    phases: pd.DataFrame | None = None,
    reads: dict[str, Any] | None = None,
    components: pd.DataFrame | None = None,
) -> list[str]:
    """The findings, in words. phases, reads, components: phase_stats(run),
    weight_reads(run) and structure_components(run), where the caller has them already."""
    phases = phase_stats(run) if phases is None else phases
    reads = weight_reads(run) if reads is None else reads
    components = structure_components(run) if components is None else components
    return _non_finite(run) + _time_findings(run, phases, reads, components)


def _non_finite(run: Run) -> list[str]:
    """--values stats: say so first when some output held a NaN or an Inf."""
    values = run.raw("node_values")
    bad = values[(values["nan"] > 0) | (values["inf"] > 0)]
    if bad.empty:
        return []
    first = bad.sort_values(["graph_id", "node_index"]).iloc[0]
    node = run.nodes_of(int(first["graph_id"]))
    name = node.loc[node["node_index"] == first["node_index"], "name"].iloc[0]
    return [f"{len(bad):,} node outputs hold NaN or Inf values; the first is {name} (graph {first['graph_id']}, "
            f"node {first['node_index']}): `ggml-viz numerics` says what it read."]  # fmt: skip


def _time_findings(run: Run, phases: pd.DataFrame, reads: dict[str, Any], components: pd.DataFrame) -> list[str]:
    totals = timed_totals(run)
    if totals.empty:
        return ["No node was timed on its own in this run (graph detail): only graph times are known."]
    totals = totals.merge(components, on=["structure_id", "node_index"], how="left")
    said = []
    for phase in ("decode", "prompt", "encode"):
        part = totals[totals["phase"] == phase]
        if part.empty:
            continue
        total = part["time_ns"].sum()
        # the same tensor in every layer ("ffn_out" for ffn_out-0 … ffn_out-29, a weight's blocks.*)
        kind = (part["label"].str.replace(_LAYER_SUFFIX, "", regex=True).str.replace(_LAYER_PART, r"\1.*.", regex=True)
                .str.replace(r" · layer \d+$", " · every layer", regex=True))  # fmt: skip
        top = part.assign(kind=kind).groupby(["op", "kind"])["time_ns"].sum().sort_values(ascending=False)
        (op, kind), time = next(iter(top.items()))
        what = kind if kind.startswith(f"{op} · ") else f"{op} in {kind}"  # a label made of its op already
        said.append(f"{what} takes {time / total:.0%} of {phase} node time.")
        by_component = part.groupby(part["component"].fillna("other"))["time_ns"].sum().sort_values(ascending=False)
        shares = ", ".join(f"{name} {value / total:.0%}" for name, value in by_component.head(4).items())
        said.append(f"By component ({phase}): {shares}.")
    said.extend(_growth_with_context(run))
    phases = phases.set_index("phase")
    if {"prompt", "decode"} <= set(phases.index) and phases.loc["decode", "tokens_per_s"]:
        ratio = phases.loc["prompt", "tokens_per_s"] / phases.loc["decode", "tokens_per_s"]
        said.append(
            f"Prompt processing runs {ratio:,.1f}× faster per token than decoding "
            f"({phases.loc['prompt', 'tokens_per_s']:,.0f} vs {phases.loc['decode', 'tokens_per_s']:,.1f} tokens/s)."
        )
    decode = run.graphs[run.graphs["phase"] == "decode"]
    step_bytes = reads.get("weight_bytes_per_decode_step")
    if step_bytes and len(decode):
        seconds = float((decode["end_ns"] - decode["start_ns"]).median()) / 1e9
        if seconds > 0:
            experts = (
                " (at most: every expert of a mixture counted, which ones a token selected is not recorded)"
                if reads.get("all_experts_counted")
                else ""
            )
            said.append(
                f"Each decode step reads {step_bytes / 2**20:,.1f} MiB of weights{experts}: "
                f"{step_bytes / seconds / 1e9:,.2f} GB/s at the median step, the memory "
                "traffic that bounds decode speed."
            )
    return said


def _growth_with_context(run: Run) -> list[str]:
    """Ops whose time per decode step grows with the context (attention over more cells)."""
    decode = run.graphs.loc[run.graphs["phase"] == "decode", "graph_id"]
    positions = run.tokens.groupby("graph_id")["pos"].max()
    per_graph = run.graph_op_totals.rename(columns={"time_ns": "duration_ns"})
    # the steps whose tokens (and so positions) are known: a non-LLM program's may have none
    per_graph = per_graph[per_graph["graph_id"].isin(decode) & per_graph["graph_id"].isin(positions.index)]
    if per_graph["graph_id"].nunique() < 8:
        return []
    contexts = positions.reindex(per_graph["graph_id"]).to_numpy(np.float64)
    times = per_graph["duration_ns"].to_numpy(np.float64)
    said = []
    for op, rows in per_graph.groupby("op").indices.items():  # each op's rows, in order
        context, time = contexts[rows], times[rows]
        if np.std(context) == 0 or np.std(time) == 0:
            continue
        correlation = float(np.corrcoef(context, time)[0, 1])
        slope, intercept = np.polyfit(context, time, 1)
        start, end = slope * context.min() + intercept, slope * context.max() + intercept
        if correlation > 0.6 and start > 0 and end / start > 1.25:
            said.append(
                f"{op} time grows with context length: {end / start:.1f}× from position "
                f"{int(context.min())} to {int(context.max())} (correlation {correlation:.2f})."
            )
    return said
