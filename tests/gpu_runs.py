"""A synthetic GPU run with every kind of GPU activity the viewer draws: the synthetic
recorder's kernels (each attributed to its node), and per traced graph a host-to-device
copy, a memset and a kernel the recorder could not attribute to a node, as CUPTI records
them around a graph's kernels."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ggml_viz.runformat.synthetic import SyntheticRecording

# Before a traced graph's first kernel (15 µs in): (kind, kernel, start, end), ns from the graph's start
EXTRAS = [("memcpy", "HtoD", 4_000, 6_000), ("memset", "memset", 7_000, 7_500), ("kernel", "k_unknown", 9_000, 11_000)]


class GpuRecording(SyntheticRecording):
    def _gpu_graph(self, graph: int, durations: np.ndarray) -> int:
        begin = self.clock
        end = super()._gpu_graph(graph, durations)
        n = len(EXTRAS)
        self.writer.append(
            "gpu_kernels",
            {
                "graph_id": np.full(n, graph, np.int32),
                "node_index": np.full(n, -1, np.int32),
                "group_end": np.full(n, -1, np.int32),
                "device": np.zeros(n, np.int32),
                "stream": np.full(n, 7, np.int32),
                "kind": [kind for kind, *_ in EXTRAS],
                "kernel": [kernel for _, kernel, *_ in EXTRAS],
                "name": ["" if kind != "kernel" else f"void {kernel}<float>(float*)" for kind, kernel, *_ in EXTRAS],
                "start_ns": np.array([begin + start for *_, start, _ in EXTRAS], np.int64),
                "end_ns": np.array([begin + stop for *_, stop in EXTRAS], np.int64),
                "busy_ns": np.array([stop - start for *_, start, stop in EXTRAS], np.int64),
                "bytes": np.array([4096, 512, 0], np.int64),
                "correlation_id": np.full(n, 9000 + graph, np.int64),
            },
        )
        return end


def write_gpu_run(path: str | Path, *, graphs: int, layers: int, gpu_every: int, seed: int = 0) -> Path:
    recording = GpuRecording(path, layers=layers, seed=seed, gpu_every=gpu_every)
    recording.append_graphs(graphs)
    recording.close()
    return recording.run_dir
