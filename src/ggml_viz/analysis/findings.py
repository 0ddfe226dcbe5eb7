"""The top bottlenecks of a run, in words: each kind of finding one Finding object.

The built-in findings are in BUILTIN_FINDINGS; installed packages add theirs through the
entry-point group ggml_viz.findings (finding_plugins; ggml_viz.plugins loads them), with the same
interface.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..plugins import BUILT_IN, PluginGroup, call_plugin, load_group
from ..runformat.reader import Run
from ..runformat.totals import GRAPH_OP_TOTALS
from .breakdowns import WeightReads, phase_stats, timed_totals, untimed_reason, weight_reads
from .components import structure_components
from .gpu import GpuTimerSummary
from .moe import MoeSummary
from .op_codes import op_codes
from .roofline import RooflineSummary, median_decode_step_ns

_LAYER_PART = r"(blk|blocks|layers|h)\.\d+\."  # a layer in a weight's name
_LAYER_SUFFIX = re.compile(r"-\d+(?=$|[\s(])")


@dataclass(frozen=True)
class FindingContext:
    """What the summary has computed already, for findings to use rather than compute again."""

    phases: pd.DataFrame  # phase_stats(run): graphs, tokens, time and tokens/s per phase
    reads: WeightReads  # weight_reads(run): the weight bytes a graph and a decode step read
    components: pd.DataFrame  # structure_components(run): each node's component (attention, ffn, ...)
    gpu: GpuTimerSummary | None  # gpu_summary(run): None for a run without GPU times
    roofline: RooflineSummary  # roofline_summary(run): the run against this machine's limits

    @classmethod
    def of(
        cls,
        run: Run,
        *,
        phases: pd.DataFrame | None = None,
        reads: WeightReads | None = None,
        components: pd.DataFrame | None = None,
        gpu: GpuTimerSummary | None = None,
        roofline: RooflineSummary | None = None,
    ) -> FindingContext:
        """The context of `run`, computing whatever the caller does not have yet."""
        from .gpu import gpu_summary
        from .roofline import roofline_summary

        reads_ = weight_reads(run) if reads is None else reads
        return cls(
            phases=phase_stats(run) if phases is None else phases,
            reads=reads_,
            components=structure_components(run) if components is None else components,
            gpu=gpu_summary(run, 10) if gpu is None else gpu,
            roofline=roofline_summary(run, reads_) if roofline is None else roofline,
        )


class Finding:
    """One kind of finding: it looks at a run and says what it sees, in sentences.

    `name`: short and unique (`ggml-viz plugins` lists it); `summary`: one line on what it
    looks for; `title`: empty, its sentences join the summary's findings; set, they are a
    section of `ggml-viz summary` of their own under that title."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def find(self, run: Run, context: FindingContext) -> list[str]:
        raise NotImplementedError


class NonFiniteValues(Finding):
    name = "non-finite"
    summary = "node outputs holding NaN or Inf (runs recorded with --values stats); said first"

    def find(self, run: Run, context: FindingContext) -> list[str]:
        return _non_finite(run)


class NodeTime(Finding):
    name = "node-time"
    summary = (
        "the costliest op and the components of each phase, ops slowing with the context, "
        "prompt against decode speed, the weight traffic of a decode step"
    )

    def find(self, run: Run, context: FindingContext) -> list[str]:
        return _time_findings(run, context.phases, context.reads, context.components)


class MachineLimits(Finding):
    name = "limits"
    summary = (
        "the run against this machine's limits (ggml-viz limits): decode against the read bandwidth, "
        "the prompt against the peak, the op furthest from its limit"
    )

    def find(self, run: Run, context: FindingContext) -> list[str]:
        from .roofline import limit_findings

        return limit_findings(context.roofline)


class GpuFindings(Finding):
    name = "gpu"
    summary = "decode steps bound by kernel launches, GPU work besides the ops' own"

    def find(self, run: Run, context: FindingContext) -> list[str]:
        from .gpu import gpu_findings

        return gpu_findings(context.gpu)


class ExpertRouting(Finding):
    name = "moe-routing"
    summary = (
        "mixtures of experts: layers whose tokens crowd onto few experts, experts never chosen, the "
        "share of tokens the experts on each device carry"
    )

    def find(self, run: Run, context: FindingContext) -> list[str]:
        from .moe import moe_summary

        return _routing_findings(moe_summary(run))


class SpeculationCost(Finding):
    name = "speculation"
    summary = (
        "speculative decoding whose drafting and verifying took longer than the run's own single-token "
        "decode steps would have taken for the same tokens"
    )

    def find(self, run: Run, context: FindingContext) -> list[str]:
        from .speculative import speculation_findings, speculative_summary

        return speculation_findings(speculative_summary(run))


# In the order they are said; plugins' findings come after these.
BUILTIN_FINDINGS: list[Finding] = [
    NonFiniteValues(),
    NodeTime(),
    MachineLimits(),
    ExpertRouting(),
    GpuFindings(),
    SpeculationCost(),
]
FINDINGS_GROUP = "ggml_viz.findings"


@functools.cache
def finding_plugins() -> PluginGroup[Finding]:
    """The installed packages' findings (loaded once per process, when first asked for)."""
    return load_group(FINDINGS_GROUP, Finding, taken={finding.name for finding in BUILTIN_FINDINGS})


@dataclass(frozen=True)
class FoundSection:
    """A titled finding's sentences, shown as a section of the summary."""

    title: str
    lines: list[str]
    source: str  # "built-in", or the plugin's package and version


def find_all(run: Run, context: FindingContext) -> tuple[list[str], list[FoundSection]]:
    """Every finding's sentences, built-in and plugins': the untitled ones' as one list, the
    titled ones' as sections. A plugin that raises, or answers anything but a list of
    sentences, is named in one warning and left out."""
    plugins = finding_plugins()
    plugins.warn_failures()
    said: list[str] = []
    sections: list[FoundSection] = []
    for finding in BUILTIN_FINDINGS + [plugin.value for plugin in plugins.loaded]:
        origin = plugins.origin_of(finding)
        lines: list[str] = call_plugin(origin, functools.partial(_sentences_of, finding, run, context), [])
        if finding.title and lines:
            sections.append(FoundSection(finding.title, lines, origin.distribution if origin else BUILT_IN))
        elif not finding.title:
            said.extend(lines)
    return said, sections


def _sentences_of(finding: Finding, run: Run, context: FindingContext) -> list[str]:
    lines = finding.find(run, context)
    if not isinstance(lines, (list, tuple)) or not all(isinstance(line, str) for line in lines):
        raise TypeError(f"find() returned {type(lines).__name__}, not a list of sentences (str)")
    return list(lines)


def findings(
    run: Run,
    *,
    phases: pd.DataFrame | None = None,
    reads: WeightReads | None = None,
    components: pd.DataFrame | None = None,
    gpu: GpuTimerSummary | None = None,
) -> list[str]:
    """The findings (those without a section of their own), in words. phases, reads,
    components, gpu: as in FindingContext, where the caller has them already."""
    context = FindingContext.of(run, phases=phases, reads=reads, components=components, gpu=gpu)
    return find_all(run, context)[0]


def _non_finite(run: Run) -> list[str]:
    """--values stats: say so first when some output held a NaN or an Inf."""
    values = run.raw("node_values")
    bad = values[(values["nan"] > 0) | (values["inf"] > 0)]
    if bad.empty:
        return []
    first = bad.sort_values(["graph_id", "node_index"]).iloc[0]
    node = run.nodes_of(int(first["graph_id"]))
    name = node.loc[node["node_index"] == first["node_index"], "name"].iloc[0]
    return [
        f"{len(bad):,} node outputs hold NaN or Inf values; the first is {name} (graph {first['graph_id']}, "
        f"node {first['node_index']}): `ggml-viz numerics` says what it read."
    ]


AS_FAST = 1.05  # speeds within this factor of each other are said to be about the same


def how_fast(ratio: float, other: str) -> str:
    """A speed ratio (this one's speed over `other`'s) in words: "2.5× faster than decoding",
    "1.5× slower than decoding" (never "0.7× faster"), or "about as fast as decoding" within AS_FAST."""
    if 1 / AS_FAST < ratio < AS_FAST:
        return f"about as fast as {other}"
    return f"{ratio:,.1f}× faster than {other}" if ratio >= AS_FAST else f"{1 / ratio:,.1f}× slower than {other}"


def prompt_against_decode(prompt_tokens_per_s: float, decode_tokens_per_s: float) -> str:
    """The finding that compares prompt processing's speed per token with decoding's."""
    return (
        f"Prompt processing runs {how_fast(prompt_tokens_per_s / decode_tokens_per_s, 'decoding')} per token "
        f"({prompt_tokens_per_s:,.1f} vs {decode_tokens_per_s:,.1f} tokens/s)."
    )


def _time_findings(run: Run, phases: pd.DataFrame, reads: WeightReads, components: pd.DataFrame) -> list[str]:
    totals = timed_totals(run)
    if totals.empty:
        why = untimed_reason(run.manifest)
        return [f"No node was timed on its own in this run ({why}): only graph times are known."]
    totals = totals.merge(components, on=["structure_id", "node_index"], how="left")
    said = []
    for phase in ("decode", "prompt", "encode"):
        part = totals[totals["phase"] == phase]
        if part.empty:
            continue
        # shares over the run, as the tables give them: a GPU's nodes are timed in the graphs its
        # timer traced, each structure's weighted by how many of its graphs ran (`est_ns`), while a
        # CPU split's nodes are timed in every graph
        total = part["est_ns"].sum()
        # the same tensor in every layer ("ffn_out" for ffn_out-0 … ffn_out-29, a weight's blocks.*)
        kind = (
            part["label"]
            .str.replace(_LAYER_SUFFIX, "", regex=True)
            .str.replace(_LAYER_PART, r"\1.*.", regex=True)
            .str.replace(r" · layer \d+$", " · every layer", regex=True)
        )
        top = part.assign(kind=kind).groupby(["op", "kind"])["est_ns"].sum().sort_values(ascending=False)
        (op, kind), time = next(iter(top.items()))
        what = kind if kind.startswith(f"{op} · ") else f"{op} in {kind}"  # a label made of its op already
        said.append(f"{what} takes {time / total:.0%} of {phase} node time.")
        by_component = part.groupby(part["component"].fillna("other"))["est_ns"].sum().sort_values(ascending=False)
        shares = ", ".join(f"{name} {value / total:.0%}" for name, value in by_component.head(4).items())
        said.append(f"By component ({phase}): {shares}.")
    said.extend(_growth_with_context(run))
    phases = phases.set_index("phase")
    if {"prompt", "decode"} <= set(phases.index) and phases.loc["decode", "tokens_per_s"]:
        said.append(prompt_against_decode(phases.loc["prompt", "tokens_per_s"], phases.loc["decode", "tokens_per_s"]))
    step_bytes = reads.get("weight_bytes_per_decode_step")
    median_ns = median_decode_step_ns(run)
    if step_bytes and median_ns:
        seconds = median_ns / 1e9
        if seconds > 0:
            routed = reads.get("routed_decode_steps")
            experts = (
                " (at most: every expert of a mixture counted where the experts a token chose were not recorded)"
                if reads.get("all_experts_counted")
                else f" (the {routed} decode steps whose routing was read)"
                if routed
                else ""
            )
            said.append(
                f"Each decode step reads {step_bytes / 2**20:,.1f} MiB of weights{experts}: "
                f"{step_bytes / seconds / 1e9:,.2f} GB/s at the median step."
            )
    return said


def _growth_with_context(run: Run) -> list[str]:
    """Ops whose time per decode step grows with the context (attention over more cells).

    Over the per-graph op totals as Arrow, with numpy (a billion node events: some twenty million
    rows): each op's rows picked out by its code, in the order they are stored."""
    graphs = run.arrow("graphs").select(["graph_id", "phase", "token_positions"])
    lists = graphs.column("token_positions").combine_chunks()
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy()
    with_tokens = lengths > 0
    graph_ids = graphs.column("graph_id").to_numpy().astype(np.int64)
    if len(graph_ids) < 2 or (graph_ids[1:] > graph_ids[:-1]).all():  # as stored: in order, each once
        keys, graph_place = graph_ids, np.arange(len(graph_ids))
    else:
        keys = np.unique(graph_ids)
        graph_place = _places(keys, graph_ids)
    # per graph id: the last position its tokens reached (the steps whose tokens are known: a
    # non-LLM program's may have none), and whether it is a decode step
    context_of = np.full(len(keys), np.iinfo(np.int64).min, np.int64)
    if with_tokens.any():
        values = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
        starts = (np.cumsum(lengths) - lengths)[with_tokens]
        np.maximum.at(context_of, graph_place[with_tokens], np.maximum.reduceat(values, starts))
    decode = pc.equal(graphs.column("phase"), "decode").fill_null(False).to_numpy(zero_copy_only=False)
    usable = np.zeros(len(keys) + 1, bool)  # (the last: no graph)
    usable[graph_place[decode]] = True
    usable[:-1] &= context_of > np.iinfo(np.int64).min
    # The per-graph op totals a batch of rows at a time (as stored: a million rows each): each
    # row's graph place kept, every other array a batch's size, and each op's rows gathered into
    # arrays of its own (a few full-length arrays of twenty million rows cost more in fresh
    # memory than the arithmetic over them).
    per_graph = _graph_op_totals(run)
    names, all_codes = op_codes(per_graph)  # (-1: no op)
    pieces = []  # per batch: its rows' graph places, op codes (-1 too: a row left out) and times
    steps = np.zeros(len(keys) + 1, bool)
    at = 0
    batches = per_graph.to_batches()
    for batch, (run_place, run_rows) in zip(batches, _graph_runs(batches, keys), strict=True):
        codes = all_codes[at : at + batch.num_rows]
        at += batch.num_rows
        run_kept = usable[run_place]
        steps[run_place[run_kept]] = True
        if not run_kept.all():
            codes = np.where(np.repeat(run_kept, run_rows), codes, -1)
        times = batch.column("time_ns").to_numpy(zero_copy_only=False)
        pieces.append((np.repeat(run_place, run_rows), codes, times))
    if steps.sum() < 8:  # the steps with rows
        return []
    said = []
    for op in sorted(names):  # each op's rows, in the order they are stored
        code = names.index(op)
        rows_of = [np.flatnonzero(codes == code) for _, codes, _ in pieces]
        n_rows = sum(len(rows) for rows in rows_of)
        if not n_rows:
            continue
        context, time = np.empty(n_rows, np.float64), np.empty(n_rows, np.float64)
        at = 0
        for (place, _, times), rows in zip(pieces, rows_of, strict=True):
            context[at : at + len(rows)] = context_of[place[rows]]
            time[at : at + len(rows)] = times[rows]
            at += len(rows)
        if np.std(context) == 0 or np.std(time) == 0:
            continue
        correlation = float(np.corrcoef(context, time)[0, 1])
        if not correlation > 0.6:  # (the fit, the costlier part, only where it can matter)
            continue
        slope, intercept = np.polyfit(context, time, 1)
        start, end = slope * context.min() + intercept, slope * context.max() + intercept
        if start > 0 and end / start > 1.25:
            said.append(
                f"{op} time grows with context length: {end / start:.1f}× from position "
                f"{int(context.min())} to {int(context.max())} (correlation {correlation:.2f})."
            )
    return said


def _graph_runs(batches: list[pa.RecordBatch], keys: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per batch of per-graph op totals, its runs of one graph's rows (the rows come a graph at a
    time, some ten a graph): each run's graph place in `keys` (_places) and its number of rows.
    Each run looked up once, those of every batch together (one table of the graph ids)."""
    if not batches:
        return []
    firsts_of, run_ids = [], []
    for batch in batches:
        ids = batch.column("graph_id").to_numpy(zero_copy_only=False)
        firsts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1]))) if len(ids) else np.zeros(0, np.int64)
        firsts_of.append((firsts, len(ids)))
        run_ids.append(ids[firsts].astype(np.int64))
    places = np.split(
        _places(keys, np.concatenate(run_ids or [np.zeros(0, np.int64)])), np.cumsum([len(ids) for ids in run_ids])[:-1]
    )
    return [(place, np.diff(np.append(firsts, n))) for place, (firsts, n) in zip(places, firsts_of, strict=True)]


def _places(keys: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Each id's place in `keys` (sorted, each once), len(keys) where it is none of them."""
    if not len(keys):
        return np.zeros(len(ids), np.int64)
    low, span = int(keys[0]), int(keys[-1]) - int(keys[0]) + 1
    if span <= 4 * len(keys) + 1024:  # graph ids: mostly 0, 1, 2, ... (a table over them)
        table = np.full(span + 1, len(keys), np.int32 if len(keys) < 2**31 - 1 else np.int64)  # (4 bytes a row)
        table[keys - low] = np.arange(len(keys))
        offset = ids - low
        return table[np.where((offset >= 0) & (offset < span), offset, span)]
    place = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
    return np.where(keys[place] == ids, place, len(keys))


def _graph_op_totals(run: Run) -> pa.Table:
    """run.graph_op_totals as Arrow: the host's as stored (its ops Arrow strings, not a Python
    object per row), or, where the GPU timer traced graphs, with the GPU's after them."""
    if not run.has_gpu_times:
        return run.totals_table(GRAPH_OP_TOTALS)
    return pa.Table.from_pandas(run.graph_op_totals, preserve_index=False)


CROWDED = 2.0  # a layer whose busiest expert takes this many times the mean load is said


def _routing_findings(moe: MoeSummary) -> list[str]:
    """A mixture of experts' routing in words (moe.moe_summary)."""
    if not moe.get("layers"):
        return []
    said = []
    if moe["graphs_routed"] < moe["graphs_with_experts"]:
        said.append(
            f"The routing below is that of {moe['graphs_routed']} of the {moe['graphs_with_experts']} graphs that ran "
            "experts: on a GPU it is read in the GPU timer's windows only."
        )
    crowded = [row for row in moe["balance"] if row["max_over_mean"] >= CROWDED]
    if crowded:
        worst = max(crowded, key=lambda row: row["max_over_mean"])
        expert, share = worst["hottest"][0]
        said.append(
            f"{len(crowded)} of {moe['layers']} MoE layers send at least {CROWDED:g}× the mean load to one expert; "
            f"worst: layer {worst['layer']}, where expert {expert} takes {share:.0%} of the tokens "
            f"({worst['max_over_mean']:.1f}× an even share)."
        )
    if moe["never_used"]:
        unused = sorted(((row["never_used"], row["layer"]) for row in moe["balance"]), reverse=True)
        n, layer = unused[0]
        said.append(
            f"{moe['never_used']} experts (counted per layer) were never chosen in the graphs read; layer {layer} "
            f"left {n} of its {moe['n_expert']} unused."
        )
    devices = moe.get("decode_expert_bytes_by_device") or {}
    if len(devices) > 1:
        shares = moe.get("token_share_by_device") or {}
        parts = [
            f"{device}: {shares.get(device, 0):.0%} of the tokens, {size / 2**20:,.1f} MiB read per decode step"
            for device, size in devices.items()
        ]
        said.append("Experts by device — " + "; ".join(parts) + ".")
    return said
