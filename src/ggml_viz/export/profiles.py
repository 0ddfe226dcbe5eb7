"""Profiles for tools that read timings: speedscope's flame graph and TensorBoard's event files.

Both hold bounded memory at any run length. A speedscope profile is node time summed per
stack (layer > component > op > tensor), and every node of a structure has one stack: the
whole run's profile is the run's node totals, read without its events; a window of graphs
is summed a chunk of graphs at a time. TensorBoard's per-graph histograms and layer times
are written a chunk of graphs at a time.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.breakdowns import TOKEN_PHASES
from ..analysis.components import structure_components
from ..runformat.reader import Run
from ..runformat.schema import NO_ID
from .base import Exporter, ExportOptions, node_time_chunks, window_graphs, window_note

NODE = ["structure_id", "node_index"]


def layer_label(layer: object) -> str:
    return "outside layers" if pd.isna(layer) else f"layer {int(layer)}"  # type: ignore[call-overload]


def node_descriptions(run: Run) -> pd.DataFrame:
    """Per (structure_id, node_index): what a profile names the node by — its layer's label,
    its component, its op and its tensor's name (as run.nodes and node_components say)."""
    nodes = run.raw("structure_nodes")[[*NODE, "tensor_id", "layer"]]
    nodes = nodes.merge(run.tensors[["tensor_id", "op", "name"]], on="tensor_id", how="left")
    nodes = nodes.merge(structure_components(run), on=NODE, how="left")
    layers = nodes["layer"].where(nodes["layer"] != NO_ID).astype("Int32")
    return pd.DataFrame(
        {
            "structure_id": nodes["structure_id"].to_numpy(np.int64),
            "node_index": nodes["node_index"].to_numpy(np.int64),
            "layer": layers.map(layer_label).to_numpy(object),
            "component": nodes["component"].fillna("other").to_numpy(object),
            "op": nodes["op"].to_numpy(object),
            "tensor": nodes["name"].to_numpy(object),
        }
    )


def node_times_of_run(run: Run) -> pd.DataFrame | None:
    """Per (structure_id, node_index) timed in the run: its time (`time_ns`), the first graph
    that timed it (`first_graph`) and whether the GPU timed it (`gpu`: its time is the GPU's),
    from the run's totals alone; None where they cannot say.

    The first graph that timed a node is the first of its structure that timed the node's op
    (graph_op_totals), wherever the node was timed in every graph that timed its op: graphs are
    timed whole or not at all (--sample), or by op, layer or name, the same in each graph. Only
    a graph timed in part (--max-events cut it) breaks that."""
    totals = run.node_totals
    totals = totals.loc[totals["timed"] > 0, [*NODE, "op", "timed", "time_ns"]].assign(gpu=totals["clock"] == "gpu")
    totals = totals.groupby([*NODE, "op"], as_index=False).agg(
        timed=("timed", "sum"), time_ns=("time_ns", "sum"), gpu=("gpu", "any")
    )  # over phases
    graph_ops = run.graph_op_totals[["graph_id", "op"]]  # (the GPU's time in the graphs it traced too)
    graph_ops = graph_ops.merge(run.graphs[["graph_id", "structure_id"]], on="graph_id")
    per_op = graph_ops.groupby(["structure_id", "op"], as_index=False)["graph_id"].agg(["min", "size"])
    times = totals.merge(per_op.rename(columns={"min": "first_graph", "size": "graphs"}), on=["structure_id", "op"])
    if len(times) != len(totals) or (times["timed"] != times["graphs"]).any():
        return None
    return times[[*NODE, "time_ns", "first_graph"]].astype("int64").assign(gpu=times["gpu"].to_numpy(bool))


def node_times_of_graphs(run: Run, graph_ids: pd.Series, options: ExportOptions) -> pd.DataFrame:
    """node_times_of_run for some graphs only, summed from their events a chunk at a time
    (what is held: one chunk's events and a row per node of the structures seen)."""
    summed: pd.DataFrame | None = None
    done = 0
    for events in node_time_chunks(run, graph_ids):
        events = events.assign(gpu=events["clock"] == "gpu")
        chunk = events.groupby(NODE).agg(
            time_ns=("duration_ns", "sum"), first_graph=("graph_id", "min"), gpu=("gpu", "any")
        )
        if summed is not None:
            chunk = (
                pd.concat([summed, chunk])
                .groupby(level=NODE)
                .agg({"time_ns": "sum", "first_graph": "min", "gpu": "any"})
            )
        summed = chunk
        done += events["graph_id"].nunique()
        options.progress(done, len(graph_ids))
    options.progress(len(graph_ids), len(graph_ids))
    if summed is None:
        empty = {column: pd.Series(dtype="int64") for column in [*NODE, "time_ns", "first_graph"]}
        return pd.DataFrame({**empty, "gpu": pd.Series(dtype=bool)})
    return summed.reset_index()


def node_time_name(gpu: pd.Series) -> str:
    """What a profile calls its node time: the GPU's where the GPU timer timed every node
    (`gpu`: per node, whether it did), the host's where it timed none; where both, which is which."""
    if not gpu.any():
        return "node time"
    if gpu.all():
        return "GPU node time"
    return "node time (GPU time for the nodes the GPU timer timed, host time for the others)"


def stacks(node_times: pd.DataFrame, descriptions: pd.DataFrame) -> pd.DataFrame:
    """Node time summed per stack (layer, component, op, tensor), stacks in the order their
    first node event ran (graph, then node)."""
    nodes = node_times.merge(descriptions, on=NODE).sort_values(["first_graph", "node_index"], kind="stable")
    nodes = nodes.rename(columns={"time_ns": "time"})
    return nodes.groupby(["layer", "component", "op", "tensor"], sort=False)["time"].sum().reset_index()


class SpeedscopeExporter(Exporter):
    name = "speedscope"
    extensions = (".speedscope.json",)
    summary = "a flame graph of time by layer > component (attention, FFN, norm, output) > op > tensor"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        graphs = window_graphs(run, options)
        window = window_note(run, graphs)
        node_times = None if window else node_times_of_run(run)
        if node_times is None:  # a window, or a run its totals cannot order: its events, a chunk at a time
            node_times = node_times_of_graphs(run, graphs["graph_id"], options)
        totals = stacks(node_times, node_descriptions(run))
        time_name = node_time_name(node_times["gpu"])
        frames: list[dict[str, str]] = []
        index: dict[str, int] = {}

        def frame(name: str) -> int:
            if name not in index:
                index[name] = len(frames)
                frames.append({"name": name})
            return index[name]

        samples = [[frame(r.layer), frame(r.component), frame(r.op), frame(r.tensor)] for r in totals.itertuples()]
        weights = totals["time"].tolist()
        document = {
            "$schema": "https://www.speedscope.app/file-format-schema.json",
            "name": run.path.name,
            "exporter": "ggml-viz",
            "shared": {"frames": frames},
            "profiles": [
                {
                    "type": "sampled",
                    "name": f"{run.path.name}: {time_name}{window}",
                    "unit": "nanoseconds",
                    "startValue": 0,
                    "endValue": int(sum(weights)),
                    "samples": samples,
                    "weights": weights,
                }
            ],
        }
        output.write_text(json.dumps(document), encoding="utf-8")
        return f"{len(samples):,} stacks, {sum(weights) / 1e6:,.1f} ms of {time_name.split(' (')[0]}{window}"


class TensorBoardExporter(Exporter):
    name = "tensorboard"
    requires = ("tensorboardX",)
    extensions = (".tensorboard", ".tb")
    summary = "TensorBoard event files: per-token latency, per-op time histograms, per-layer times (GPU time apart)"

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        from tensorboardX import SummaryWriter

        output.mkdir(parents=True, exist_ok=True)
        graphs = window_graphs(run, options)
        step_of = {int(g): step for step, g in enumerate(run.graphs["graph_id"])}  # a window keeps the run's steps
        descriptions = node_descriptions(run)
        # TensorBoard tags take no spaces
        descriptions = descriptions.assign(layer=descriptions["layer"].str.replace(" ", "_"))[[*NODE, "op", "layer"]]
        gpu_busy = run.gpu_graphs.groupby("graph_id")["busy_ns"].sum()  # the graphs the GPU timer traced
        writer = SummaryWriter(logdir=str(output))
        try:
            for row in graphs.itertuples():
                step = step_of[int(row.graph_id)]
                seconds = (row.end_ns - row.start_ns) / 1e9
                writer.add_scalar(f"latency_ms/{row.phase}", seconds * 1e3, step)
                if row.n_tokens and row.phase in TOKEN_PHASES:
                    writer.add_scalar(f"tokens_per_s/{row.phase}", row.n_tokens / seconds if seconds else 0.0, step)
                if row.graph_id in gpu_busy.index:
                    writer.add_scalar(f"gpu_busy_ms/{row.phase}", gpu_busy[row.graph_id] / 1e6, step)
            done = 0
            for events in node_time_chunks(run, graphs["graph_id"]):
                # a left join keeps the events' order; a time of a node its structure lacks is dropped
                described = events.merge(descriptions, on=NODE, how="left").dropna(subset=["layer"])
                # the GPU's node times under tags of their own: op_gpu_time_us/..., layer_gpu_time_us/...
                prefix = described["clock"].map({"host": "", "gpu": "gpu_"})
                described = described.assign(
                    op_tag="op_" + prefix + "time_us/" + described["op"],
                    layer_tag="layer_" + prefix + "time_us/" + described["layer"],
                )
                write_graph_times(writer, described, step_of)
                done += events["graph_id"].nunique()
                options.progress(done, len(graphs))
            options.progress(len(graphs), len(graphs))
        finally:
            writer.close()
        return f"{output}/: {len(graphs):,} steps (one per graph){window_note(run, graphs)}"


def write_graph_times(writer: Any, events: pd.DataFrame, step_of: dict[int, int]) -> None:
    """Per graph of `events` (timed node events, in graph and node order, with their op's tag
    and their layer's), at its step: a histogram of each op's node times and each layer's
    time (us)."""
    durations = events["duration_ns"].to_numpy(np.int64)
    by_op = events.groupby(["graph_id", "op_tag"]).indices  # positions in node order
    ops = {
        graph: [(tag, by_op[(graph, tag)]) for _, tag in keys]
        for graph, keys in itertools.groupby(sorted(by_op), key=lambda key: key[0])
    }
    by_layer = events.groupby(["graph_id", "layer_tag"])["duration_ns"].sum()
    layers = {
        graph: [(tag, total) for (_, tag), total in items]
        for graph, items in itertools.groupby(by_layer.items(), key=lambda item: item[0][0])
    }
    for graph in sorted(ops.keys() | layers.keys()):
        step = step_of[int(graph)]
        for tag, positions in ops.get(graph, []):
            writer.add_histogram(tag, durations[positions].astype(np.float64) / 1e3, step)
        for tag, total in layers.get(graph, []):
            writer.add_scalar(tag, float(total) / 1e3, step)
