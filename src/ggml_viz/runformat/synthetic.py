"""Synthetic runs: plausible transformer traces of any size, written in the run format.

For the viewer's benchmark (a million node events without recording for hours) and for
tests that need a run of a given shape. Each graph is one decode step of a small
llama-like model: per layer a norm, attention (three projections, rope, scores, softmax,
weighted sum, output projection) and a gated feed-forward block, reading per-layer
weights from one CPU_Mapped buffer; times follow the ops' usual proportions with some
noise. Nothing here pretends to be a measurement.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .manifest import new_manifest
from .writer import RunWriter, prepare_run_dir

# (name pattern, op, relative time, weight read or None)
_LAYER_NODES: list[tuple[str, str, int, str | None]] = [
    ("norm-{l}", "RMS_NORM", 2, None), ("attn_norm-{l}", "MUL", 1, "blk.{l}.attn_norm.weight"),
    ("Qcur-{l}", "MUL_MAT", 30, "blk.{l}.attn_q.weight"), ("Kcur-{l}", "MUL_MAT", 12, "blk.{l}.attn_k.weight"),
    ("Vcur-{l}", "MUL_MAT", 12, "blk.{l}.attn_v.weight"), ("Qcur-{l} (rope)", "ROPE", 2, None),
    ("Kcur-{l} (rope)", "ROPE", 2, None), ("kq-{l}", "MUL_MAT", 8, None), ("kq_soft_max-{l}", "SOFT_MAX", 4, None),
    ("kqv-{l}", "MUL_MAT", 6, None), ("kqv_out-{l}", "CONT", 1, None),
    ("attn_out-{l}", "MUL_MAT", 30, "blk.{l}.attn_output.weight"), ("ffn_inp-{l}", "ADD", 1, None),
    ("ffn_norm-{l}", "RMS_NORM", 2, "blk.{l}.ffn_norm.weight"),
    ("ffn_gate-{l}", "MUL_MAT", 60, "blk.{l}.ffn_gate.weight"),
    ("ffn_up-{l}", "MUL_MAT", 60, "blk.{l}.ffn_up.weight"), ("ffn_swiglu-{l}", "SWIGLU", 3, None),
    ("ffn_out-{l}", "MUL_MAT", 60, "blk.{l}.ffn_down.weight"), ("l_out-{l}", "ADD", 1, None),
]  # fmt: skip


# A synthetic GPU run's kernels: each op's, with a MUL_MAT's activations quantized first
_KERNELS = {"MUL_MAT": ("quantize_q8_1", "mul_mat_vec_q"), "RMS_NORM": ("rms_norm_f32",), "MUL": ("k_bin_bcast",),
            "ROPE": ("rope_norm",), "SOFT_MAX": ("soft_max_f32",), "CONT": ("cpy_flt",), "ADD": ("k_bin_bcast",),
            "SWIGLU": ("unary_gated_op_kernel",), "GET_ROWS": ("k_get_rows_float",)}  # fmt: skip


def write_synthetic_run(
    path: str | Path,
    *,
    graphs: int,
    layers: int,
    seed: int = 0,
    gpu_every: int = 0,
    sequences: int = 1,
    cpu_layers: int = 0,
) -> Path:
    """Write a closed run of `graphs` decode graphs of a `layers`-layer model; returns its path.
    Node events: graphs * (layers * 19 + 2). gpu_every > 0: a run on a CUDA device, recorded
    as the GPU timer records it (graphs read at their compute call, no host node times; every
    gpu_every-th graph traced, its kernels in gpu_kernels). sequences > 1: a server's run, its
    graphs taking turns among that many sequences (requests). cpu_layers (with gpu_every): a
    partial offload, the first cpu_layers layers (and the embedding) computed on the CPU, their
    nodes timed by the host in every graph, the others on the GPU."""
    recording = SyntheticRecording(
        path, layers=layers, seed=seed, gpu_every=gpu_every, sequences=sequences, cpu_layers=cpu_layers
    )
    recording.append_graphs(graphs)
    recording.close()
    return recording.run_dir


class SyntheticRecording:
    """A synthetic run being recorded: its model's tables written at once, then graphs
    appended as a recorder appends them (journal first, streams every few graphs), until
    `close()`. Left open, it is a live run for the viewer's `--live` benchmarks and tests."""

    def __init__(
        self,
        path: str | Path,
        *,
        layers: int,
        seed: int = 0,
        gpu_every: int = 0,
        sequences: int = 1,
        cpu_layers: int = 0,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.cpu_layers = cpu_layers if gpu_every else 0
        self.gpu_every = gpu_every
        self.sequences = sequences
        experiment_id = f"{seed:032x}"
        self.run_dir = prepare_run_dir(Path(path))
        self.writer = writer = RunWriter(self.run_dir, experiment_id, new_manifest(experiment_id))
        node_names, node_ops, costs = ["embd"], ["GET_ROWS"], [3.0]
        weights_read: list[str | None] = ["token_embd.weight"]
        for layer in range(layers):
            for name, op, cost, weight in _LAYER_NODES:
                node_names.append(name.format(l=layer))
                node_ops.append(op)
                weights_read.append(weight.format(l=layer) if weight else None)
                costs.append(float(cost))
        node_names.append("result_output")
        node_ops.append("MUL_MAT")
        weights_read.append("output.weight")
        costs.append(120.0)
        node_index = self._write_structure(node_names, node_ops, weights_read, gpu_every)
        self.node_index = node_index
        # a partial offload's nodes on the CPU: the embedding and the first cpu_layers layers'
        self.on_cpu = np.array(self._nodes_on_cpu(len(node_names)))
        self.node_ops = node_ops
        self.base_costs = np.array(costs) * 1_000.0  # ns
        self.clock = 1_000_000_000
        self.graphs = 0
        writer.update_manifest(
            model={
                "name": "synthetic",
                "description": f"synthetic {layers}-layer model",
                "layers": layers,
                "architecture": "llama",
                "path": "synthetic.gguf",
            },
            contexts=[{"context_id": 0, "model": {"path": "synthetic.gguf"}}],
            capture={"recorder": "synthetic", "detail": "op", "timing": "inline"},
        )
        if gpu_every:
            writer.update_manifest(gpu={"mode": "windows", "cupti": "synthetic", "clock": "recorder", "problem": None})

    def _nodes_on_cpu(self, n_nodes: int) -> list[bool]:
        return [self.cpu_layers > 0 and i < 1 + len(_LAYER_NODES) * self.cpu_layers for i in range(n_nodes)]

    def _write_structure(
        self, node_names: list[str], node_ops: list[str], weights_read: list[str | None], gpu_every: int
    ) -> np.ndarray:
        """The model's buffers, tensors, its one graph structure and its edges, and its weights'
        places in the model file; the nodes' indexes."""
        writer = self.writer
        weight_names = sorted({w for w in weights_read if w})
        n_nodes, n_weights = len(node_names), len(weight_names)
        weight_size = 1 << 16
        names = weight_names + node_names
        n_tensors = len(names)
        layer_of = [_layer(name) for name in names]
        compute = "CUDA0" if gpu_every else "CPU"
        writer.append(
            "buffers",
            {
                "buffer_id": [0, 1, 2],
                "context_id": [0, 0, 0],
                "name": ["CPU_Mapped", compute, "CPU"],
                "buffer_type": ["CPU_Mapped", compute, "CPU"],
                "usage": ["weights", "compute", "compute"],
                "size": [n_weights * weight_size, 1 << 24, 1 << 24],
                "base": [1 << 32, 1 << 40, 1 << 41],
                "first_graph_id": [0, 0, 0],
            },
        )
        writer.append(
            "tensors",
            {
                "tensor_id": np.arange(n_tensors, dtype=np.int32),
                "name": names,
                "op": ["NONE"] * n_weights + node_ops,
                "op_base": ["NONE"] * n_weights + node_ops,
                "type": ["q4_0"] * n_weights + ["f32"] * n_nodes,
                "ne0": [576] * n_tensors,
                "ne1": [256] * n_weights + [1] * n_nodes,
                "ne2": [1] * n_tensors,
                "ne3": [1] * n_tensors,
                "nbytes": [weight_size] * n_weights + [2304] * n_nodes,
                "flags": [0] * n_tensors,
                "buffer_id": [0] * n_weights + [2 if on_cpu else 1 for on_cpu in self._nodes_on_cpu(n_nodes)],
                "buffer_offset": [i * weight_size for i in range(n_weights)]
                + [(i % 64) * 4096 for i in range(n_nodes)],
                "layer": layer_of,
                "view_src_id": [-1] * n_tensors,
                "view_offs": [0] * n_tensors,
            },
        )
        node_index = np.arange(n_nodes, dtype=np.int32)
        writer.append(
            "structure_nodes",
            {
                "structure_id": np.zeros(n_nodes, np.int32),
                "node_index": node_index,
                "tensor_id": node_index + n_weights,
                "layer": np.array(layer_of[n_weights:], np.int32),
            },
        )
        edge_nodes, edge_sources, edge_slots = [], [], []
        weight_id = {name: i for i, name in enumerate(weight_names)}
        for index, weight in enumerate(weights_read):
            if index > 0:  # the chain: each node reads the one before it
                edge_nodes.append(index)
                edge_sources.append(n_weights + index - 1)
                edge_slots.append(0)
            if weight:
                edge_nodes.append(index)
                edge_sources.append(weight_id[weight])
                edge_slots.append(1)
        writer.append(
            "edges",
            {
                "structure_id": np.zeros(len(edge_nodes), np.int32),
                "node_index": edge_nodes,
                "src_slot": np.array(edge_slots, np.int8),
                "src_tensor_id": edge_sources,
            },
        )
        memory_map_rows(writer, weight_names, weight_size, layer_of[:n_weights])
        return node_index

    def append_graphs(self, count: int) -> None:
        """`count` more decode graphs (the first graph of the run is its prompt)."""
        n_nodes = len(self.node_index)
        for graph in range(self.graphs, self.graphs + count):
            durations = np.maximum(100, self.base_costs * self.rng.lognormal(0.0, 0.15, n_nodes)).astype(np.int64)
            ends = self.clock + np.cumsum(durations)
            starts = ends - durations
            if self.gpu_every:  # the host launches, the GPU computes; the step ends when the GPU is done
                # (a GPU computes a node in an eighth of the host's time; beside a CPU split, as long)
                gpu_durations = np.where(self.on_cpu, 0, durations // (1 if self.cpu_layers else 8))
                traced = graph % self.gpu_every == 0
                gpu_end = self._gpu_graph(graph, gpu_durations) if traced else self.clock + int(gpu_durations.sum())
                cpu = self.on_cpu  # (a partial offload's CPU nodes: their host times, every graph)
                host_times = {
                    "node_index": self.node_index[cpu],
                    "start_ns": starts[cpu],
                    "end_ns": ends[cpu],
                    "wait_ns": durations[cpu] // 20,
                }
                self.writer.append_graph(self._graph_row(graph, n_nodes, gpu_end + 20_000, "graph"), host_times)
                self.clock = gpu_end + 220_000
                continue
            self.writer.append_graph(
                self._graph_row(graph, n_nodes, int(ends[-1]), "op"),
                {"node_index": self.node_index, "start_ns": starts, "end_ns": ends, "wait_ns": durations // 20},
            )
            self.clock = int(ends[-1]) + 200_000
        self.graphs += count

    def append_batch(
        self,
        context_id: int,
        decode_index: int,
        tokens: list[tuple[int, int, int, bool]],
        phase: str,
        duration_ns: int,
    ) -> int:
        """One graph computing a batch of (token id, position, sequence, asks for logits), as a llama
        context's `decode_index`-th call, taking `duration_ns` (its nodes in their usual proportions);
        returns its graph_id. For runs of several contexts and sequences of a test's own making."""
        graph = self.graphs
        durations = np.maximum(1, self.base_costs * duration_ns / self.base_costs.sum()).astype(np.int64)
        ends = self.clock + np.cumsum(durations)
        row = self._graph_row(graph, len(self.node_index), int(ends[-1]), "op")
        ids, positions, seq_ids, outputs = (list(column) for column in zip(*tokens, strict=True))
        row.update(
            context_id=context_id,
            decode_index=decode_index,
            n_tokens=len(tokens),
            token_ids=ids,
            token_positions=positions,
            token_seq_ids=seq_ids,
            token_outputs=outputs,
            token_texts=[f" t{token}" for token in ids],
            token_batch_indexes=list(range(len(tokens))),
            phase=phase,
        )
        times = {
            "node_index": self.node_index,
            "start_ns": ends - durations,
            "end_ns": ends,
            "wait_ns": durations // 20,
        }
        self.writer.append_graph(row, times)
        self.clock = int(ends[-1]) + 50_000
        self.graphs += 1
        return graph

    def _graph_row(self, graph: int, n_nodes: int, end_ns: int, detail: str) -> dict:
        """A graph of one token: graph g of sequence g % sequences, at position g // sequences
        (each sequence's first graph is its prompt)."""
        seq, pos = graph % self.sequences, graph // self.sequences
        return {
            "graph_id": graph,
            "context_id": 0,
            "decode_index": graph,
            "ubatch_index": 0,
            "structure_id": 0,
            "start_ns": self.clock,
            "end_ns": end_ns,
            "decode_start_ns": self.clock - 20_000,
            "decode_end_ns": end_ns + 20_000,
            "return_code": 0,
            "n_nodes": n_nodes,
            "n_tokens": 1,
            "token_ids": [graph % 50_000],
            "token_positions": [pos],
            "token_seq_ids": [seq],
            "token_outputs": [True],
            "token_texts": [f" t{graph}"],
            "first_batch_index": 0,
            "token_batch_indexes": [0],
            "phase": "prompt" if pos == 0 else "decode",
            "detail": detail,
        }

    def _gpu_graph(self, graph: int, durations: np.ndarray) -> int:
        """A traced graph's kernels, node by node, each starting a little before the one before it
        ends (programmatic dependent launch), as the GPU timer writes them; when the last ended."""
        rows: dict[str, list] = {key: [] for key in ("node_index", "kernel", "start_ns", "end_ns", "busy_ns")}
        at, covered = self.clock + 15_000, 0  # the first launch reaches the GPU
        for node, (op, duration) in enumerate(zip(self.node_ops, durations.tolist(), strict=True)):
            if self.on_cpu[node]:
                continue
            names = _KERNELS.get(op, ("kernel",))
            for part, name in enumerate(names):
                length = max(duration // len(names), 600) if part == len(names) - 1 else max(duration // 5, 600)
                start = at - 300 if rows["end_ns"] else at
                rows["node_index"].append(node)
                rows["kernel"].append(name)
                rows["start_ns"].append(start)
                rows["end_ns"].append(start + length)
                rows["busy_ns"].append(start + length - max(start, covered))
                covered = start + length
                at = start + length + 1_500  # the next kernel's launch gap
        n = len(rows["kernel"])
        node_index = np.array(rows["node_index"], np.int32)
        starts, finish, busy = (np.array(rows[k], np.int64) for k in ("start_ns", "end_ns", "busy_ns"))
        self.writer.append(
            "gpu_kernels",
            {
                "graph_id": np.full(n, graph, np.int32),
                "node_index": node_index,
                "group_end": node_index,
                "device": np.zeros(n, np.int32),
                "stream": np.full(n, 7, np.int32),
                "kind": ["kernel"] * n,
                "kernel": rows["kernel"],
                "name": [f"void {k}<float>(float const*, float*, int)" for k in rows["kernel"]],
                "start_ns": starts,
                "end_ns": finish,
                "busy_ns": busy,
                "bytes": np.zeros(n, np.int64),
                "correlation_id": np.full(n, 1000 + graph, np.int64),
            },
        )
        nodes, first = np.unique(node_index, return_index=True)
        last = np.append(first[1:], n) - 1
        self.writer.append(
            "gpu_node_times",
            {
                "graph_id": np.full(len(nodes), graph, np.int32),
                "node_index": nodes,
                "group_end": nodes,
                "device": np.zeros(len(nodes), np.int32),
                "start_ns": starts[first],
                "end_ns": finish[last],
                "gpu_ns": np.add.reduceat(busy, first),
                "kernels": (last - first + 1).astype(np.int32),
            },
        )
        self.writer.append(
            "gpu_graphs",
            {
                "graph_id": [graph],
                "device": [0],
                "start_ns": [int(starts[0])],
                "end_ns": [int(finish[-1])],
                "busy_ns": [int(busy.sum())],
                "kernels": [n],
                "attributed": [n],
                "mapping": ["replay" if graph else "eager"],
            },
        )
        return int(finish[-1])

    def close(self) -> None:
        self.writer.close()


def memory_map_rows(writer: RunWriter, weight_names: list[str], weight_size: int, layers: list[int]) -> None:
    header = 4096
    starts = [header + i * weight_size for i in range(len(weight_names))]
    n = len(weight_names) + 1
    writer.append(
        "memory_map",
        {
            "model_path": ["synthetic.gguf"] * n,
            "kind": ["header"] + ["tensor"] * (n - 1),
            "name": [""] + weight_names,
            "start": [0] + starts,
            "end": [header] + [s + weight_size for s in starts],
            "type": [""] + ["q4_0"] * (n - 1),
            "ne0": [0] + [576] * (n - 1),
            "ne1": [0] + [256] * (n - 1),
            "ne2": [0] + [1] * (n - 1),
            "ne3": [0] + [1] * (n - 1),
            "n_elements": [0] + [576 * 256] * (n - 1),
            "layer": [-1] + layers,
            "category": [""] + ["other"] * (n - 1),
            "padding_after": [0] * n,
        },
    )


def _layer(name: str) -> int:
    from ..layers import layer_of

    return layer_of(name)
