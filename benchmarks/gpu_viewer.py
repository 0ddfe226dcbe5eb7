"""How the viewer's GPU lane copes with a run of many kernels: a synthetic run on a GPU with
every graph traced (about 843 kernels a graph of a 30-layer model), served by the viewer's
own views (ui/run_view.py, in process, no browser).

Prints, each a median over --repeats (fresh views where it says "first"):
- first open: reading the run and its overview (whose top kernels take one pass over the
  kernels, block by block);
- the whole run's timeline window, and a 400 µs window at a new place (it reads the block of
  kernels holding it) and panned a little (the block kept).

    python benchmarks/gpu_viewer.py                 # 1,500 graphs: 1.26M kernels
    python benchmarks/gpu_viewer.py --graphs 200    # smaller
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ggml_viz.runformat.synthetic import write_synthetic_run
from ggml_viz.ui.run_view import RunView

WIDTH = 1600


def milliseconds_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=1500, help="graphs of a 30-layer model (default 1500)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {
        "first open and overview": [],
        "whole-run window": [],
        "zoomed, new place": [],
        "zoomed, panned": [],
    }
    with tempfile.TemporaryDirectory() as folder:
        path = write_synthetic_run(Path(folder) / "gpu.ggmlviz", graphs=args.graphs, layers=30, gpu_every=1)
        for repeat in range(args.repeats):
            start = time.perf_counter()
            view = RunView("r0", path)
            gpu = view.overview["gpu"]
            figures["first open and overview"].append(milliseconds_since(start))
            start = time.perf_counter()
            view.timeline(0, view.duration_ns, WIDTH)
            figures["whole-run window"].append(milliseconds_since(start))
            at = view.duration_ns * (repeat + 1) // (args.repeats + 2)  # each repeat somewhere else
            for name, shift in [("zoomed, new place", 0), ("zoomed, panned", 20_000)]:
                start = time.perf_counter()
                view.timeline(at + shift, at + shift + 400_000, WIDTH)
                figures[name].append(milliseconds_since(start))
    assert gpu is not None
    print(f"{gpu['kernels'] + gpu['copies']:,} kernels in {args.graphs:,} graphs")
    for name, values in figures.items():
        print(f"{name}: {statistics.median(values):.1f} ms")


if __name__ == "__main__":
    main()
