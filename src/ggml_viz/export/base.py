"""What every exporter shares: its interface, its options, and the node events with their
trace arguments (name, op, type, shape, layer, where the node's sources live)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

import numpy as np
import pandas as pd

from ..runformat.reader import Run
from ..runformat.schema import NO_ID

# Node events are read and written this many graphs at a time: an export of any length
# holds one chunk of events in memory, not the run.
CHUNK_GRAPHS = 2_000
T = TypeVar("T")


@dataclass(frozen=True)
class ExportOptions:
    graph_id: int | None = None  # graph pictures: which graph (default: the first decode graph)
    layer: int | None = None  # graph pictures: one layer open (default: layers collapsed)
    tensors: tuple[str, ...] = ()  # tensor dumps: name globs of the captured tensors to write (default: all)
    graphs: tuple[int, int] | None = None  # event exports: only graphs FIRST..LAST (ids, inclusive)
    time_ms: tuple[float, float] | None = None  # ... only graphs meeting [FROM, TO) ms after the run's start
    progress: Callable[[int, int], None] = field(default=lambda done, total: None)  # long exports report here
    notice: Callable[[str], None] = field(default=lambda text: None)  # said while exporting (a trace too big)


def window_graphs(run: Run, options: ExportOptions) -> pd.DataFrame:
    """The rows of run.graphs an export covers: all, or those in its graph or time window."""
    graphs = run.graphs
    if options.graphs is not None:
        first, last = options.graphs
        graphs = graphs[(graphs["graph_id"] >= first) & (graphs["graph_id"] <= last)]
    if options.time_ms is not None and len(run.graphs):
        origin = int(run.graphs["start_ns"].min())
        t0, t1 = (origin + int(ms * 1e6) for ms in options.time_ms)
        graphs = graphs[(graphs["end_ns"] > t0) & (graphs["start_ns"] < t1)]
    return graphs


def in_chunks(items: Sequence[T]) -> Iterator[Sequence[T]]:
    """`items`, CHUNK_GRAPHS at a time: the graphs an export holds in memory at once."""
    for first in range(0, len(items), CHUNK_GRAPHS):
        yield items[first : first + CHUNK_GRAPHS]


def node_time_chunks(run: Run, graph_ids: Iterable[int]) -> Iterator[pd.DataFrame]:
    """The timed node events of some graphs, CHUNK_GRAPHS graphs at a time and lean: graph_id,
    structure_id, node_index, duration_ns, clock, in graph and node order. For exports that
    sum or bin node times by what a structure says of its nodes (op, layer, ...): join them on
    (structure_id, node_index); a time of a node its structure lacks joins nothing.

    A node the GPU timer timed without a host time carries the GPU's time (its kernels'
    share of the device's busy time, `clock` gpu), as in run.node_totals; else `clock` host."""
    structure_of = run.graphs.set_index("graph_id")["structure_id"]
    gpu = run.has_gpu_times
    for chunk in in_chunks(sorted(int(g) for g in graph_ids)):
        times = run.node_times_of(list(chunk))
        times = times[times["start_ns"].notna() & times["end_ns"].notna()]
        events = _lean_events(structure_of, times["graph_id"], times["node_index"], times["end_ns"] - times["start_ns"])
        events["clock"] = "host"
        if gpu:
            gpu_times = gpu_rows_of(run, "gpu_node_times", chunk)
            on_gpu = ~np.isin(_keys(gpu_times), _keys(times))  # GPU time where the host took none
            gpu_times = gpu_times[on_gpu]
            gpu_events = _lean_events(structure_of, gpu_times["graph_id"], gpu_times["node_index"], gpu_times["gpu_ns"])
            events = pd.concat([events, gpu_events.assign(clock="gpu")], ignore_index=True)
        yield events.sort_values(["graph_id", "node_index"], kind="stable", ignore_index=True)


def _lean_events(
    structure_of: pd.Series, graph_id: pd.Series, node_index: pd.Series, duration: pd.Series
) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "graph_id": graph_id.to_numpy(np.int64),
            "structure_id": structure_of.reindex(graph_id).to_numpy(np.int64),
            "node_index": node_index.to_numpy(np.int64),
            "duration_ns": duration.to_numpy(np.int64),
        }
    )


def _keys(rows: pd.DataFrame) -> np.ndarray:
    """(graph_id, node_index) of each row as one number."""
    return (rows["graph_id"].to_numpy(np.int64) << 32) | rows["node_index"].to_numpy(np.int64)


def gpu_rows_of(run: Run, table: str, graph_ids: Iterable[int]) -> pd.DataFrame:
    """The rows of a GPU table (gpu_kernels, gpu_node_times, gpu_graphs) that belong to some
    graphs, in stored order: of a closed run only the Parquet row groups that can hold them
    are read (the tables are written in graph order)."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    wanted = pa.array(sorted({int(g) for g in graph_ids}), pa.int32())
    return run.dataset(table).to_table(filter=ds.field("graph_id").isin(wanted)).to_pandas()


def node_names(run: Run) -> pd.DataFrame:
    """Per (structure_id, node_index): the node's name, op and layer (<NA> outside layers),
    as run.nodes gives them: what describes the GPU's rows, which name only their node."""
    nodes = run.raw("structure_nodes")[["structure_id", "node_index", "tensor_id", "layer"]]
    nodes = nodes.merge(run.raw("tensors")[["tensor_id", "name", "op"]], on="tensor_id", how="left")
    nodes["layer"] = nodes["layer"].where(nodes["layer"] != NO_ID).astype("Int32")
    return nodes[["structure_id", "node_index", "name", "op", "layer"]]


def described_gpu_rows(run: Run, table: str, graph_ids: Iterable[int], names: pd.DataFrame) -> pd.DataFrame:
    """The rows of gpu_kernels or gpu_node_times of some graphs (gpu_rows_of), with their
    graph's phase and their node's name, op and layer (`names`: node_names(run); a kernel's
    own name stays `name`, its node's is `node_name`; none for a kernel without a node).
    Rows of graphs the run does not have (a kernel outside any graph, graph_id -1) are left
    out: an export covers graphs."""
    rows = gpu_rows_of(run, table, graph_ids)
    rows = rows.merge(run.graphs[["graph_id", "structure_id", "phase"]], on="graph_id", sort=False)
    nodes = names.rename(columns={"name": "node_name"}) if table == "gpu_kernels" else names
    rows = rows.merge(nodes, on=["structure_id", "node_index"], how="left", sort=False)
    return rows.drop(columns="structure_id")


def window_note(run: Run, graphs: pd.DataFrame) -> str:
    """' (graphs FIRST-LAST)' when an export covers a window of the run's graphs, else ''."""
    if len(graphs) == len(run.graphs):
        return ""
    if graphs.empty:
        return " (no graphs in the window)"
    return f" (graphs {graphs['graph_id'].min()}-{graphs['graph_id'].max()})"


class Exporter:
    """Base of every export format."""

    name: ClassVar[str] = ""
    extensions: ClassVar[tuple[str, ...]] = ()
    summary: ClassVar[str] = ""
    # modules it needs beyond ggml-viz's own dependencies (the extra `export` brings them)
    requires: ClassVar[tuple[str, ...]] = ()

    def export(self, run: Run, output: Path, options: ExportOptions) -> str:
        raise NotImplementedError

    def missing(self) -> list[str]:
        """The modules of `requires` this installation lacks."""
        import importlib.util

        def found(module: str) -> bool:
            try:
                return importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                return False

        return [module for module in self.requires if not found(module)]


def timed_events(run: Run, graph_ids: Iterable[int] | None = None) -> pd.DataFrame:
    """Timed node events in time order (of some graphs, or all), with their graph's context
    and the trace arguments."""
    return _timed_events(run, run.nodes if graph_ids is None else run.nodes_of(list(graph_ids)))


def _timed_events(run: Run, nodes: pd.DataFrame) -> pd.DataFrame:
    nodes = nodes[nodes["timed"]].merge(run.graphs[["graph_id", "context_id"]], on="graph_id")
    events = pd.DataFrame(
        {
            "graph_id": nodes["graph_id"].to_numpy(np.int64),
            "node_index": nodes["node_index"].to_numpy(np.int64),
            "context_id": nodes["context_id"].to_numpy(np.int64),
            "start_ns": nodes["start_ns"].to_numpy(np.int64),
            "end_ns": nodes["end_ns"].to_numpy(np.int64),
            "wait_ns": nodes["wait_ns"].fillna(-1).to_numpy(np.int64),  # -1: not seen
            "name": nodes["name"].to_numpy(object),
            "op": nodes["op"].to_numpy(object),
            "type": nodes["type"].to_numpy(object),
            "shape": shapes(nodes),
            "layer": nodes["layer"].fillna(-1).to_numpy(np.int64),
            "buffer": nodes["buffer_name"].fillna("").to_numpy(object),
            "reads": _weights_read(run, nodes),
        }
    )
    return events.sort_values(["start_ns", "graph_id", "node_index"], kind="stable", ignore_index=True)


def shapes(frame: pd.DataFrame, prefix: str = "") -> np.ndarray:
    """'576×6' per row, from the ne0..ne3 columns (trailing 1s dropped)."""
    dims = frame[[f"{prefix}ne{d}" for d in range(4)]].to_numpy(np.int64)
    out = []
    for row in dims.tolist():
        while len(row) > 1 and row[-1] == 1:
            row.pop()
        out.append("×".join(map(str, row)))
    return np.asarray(out, dtype=object)


def _weights_read(run: Run, nodes: pd.DataFrame) -> np.ndarray:
    """Per node event: the model-file weights it reads, with their file offsets."""
    edges = run.raw("edges")
    tensors = run.tensors.set_index("tensor_id")
    weights = tensors.index[tensors["buffer_usage"] == "weights"]
    reads = edges[edges["src_tensor_id"].isin(weights)]
    if reads.empty:
        return np.full(len(nodes), "", dtype=object)
    regions = run.memory_map
    offsets = regions[regions["kind"] == "tensor"].drop_duplicates("name").set_index("name")["start"]
    names = tensors["name"].reindex(reads["src_tensor_id"]).to_numpy()
    labels = [f"{name} @ file {int(offsets[name])}" if name in offsets.index else str(name) for name in names]
    per_node = (
        pd.DataFrame(
            {
                "structure_id": reads["structure_id"].to_numpy(),
                "node_index": reads["node_index"].to_numpy(),
                "label": labels,
            }
        )
        .groupby(["structure_id", "node_index"])["label"]
        .agg(", ".join)
    )
    structure = run.graphs.set_index("graph_id")["structure_id"]
    keys = pd.MultiIndex.from_arrays([structure.reindex(nodes["graph_id"]).to_numpy(), nodes["node_index"].to_numpy()])
    return per_node.reindex(keys).fillna("").to_numpy(object)
