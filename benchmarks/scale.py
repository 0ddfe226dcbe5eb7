"""Runs of any length: what reading a long run costs, at 1M, 10M and 100M node events.

Synthetic runs (`ggml_viz.runformat.synthetic`: decode graphs of a 30-layer model, 572
nodes each, as the recorder writes them, node totals included) are generated once and
kept in a cache folder outside the checkout (100M events take a while to write). For each
size, in fresh processes:

- `ggml-viz summary` (the whole summary, as a user runs it): wall time and peak RSS,
  median over the repeats;
- its analysis alone (`ggml_viz.analysis.summary.summarize`, the run opened, nothing printed):
  seconds and peak RSS, and `ggml-viz summary --json` (no text rendering) beside it;
- the same on a copy of the run without its stored totals (as a run from an older
  ggml-viz is first opened): the streaming path that computes and stores them;
- the viewer's server side: seconds from start to the first whole-run timeline (run
  opened, overview), then a whole-run window, a zoomed one at a new place and a panned one
  (ms, medians), and its peak RSS;
- a Perfetto export of a 10-graph window from the middle of the run;
- first, the same view figures for a run of 20,000 graphs (11.4M events: a long recording
  with --ignore-eos) and one of 100, side by side: a long run should open as fast;
- whole-run speedscope and TensorBoard exports: seconds and peak RSS (TensorBoard once per
  size, and only up to TENSORBOARD_UP_TO million events: tensorboardX's writer alone takes
  about two minutes per 10M events).

Targets (issue "Runs of any length"): summary of 1M events <= 1 s, of 100M <= 30 s, peak
RSS <= 1.5 GB at any size; view: first timeline <= 3 s after start at 100M, whole-run
window <= 200 ms, zoomed <= 50 ms, RSS <= 2 GB; a 10-graph Perfetto export <= 5 s. The
profile exports hold bounded memory: their peak RSS must not grow with the run's events.
Noisy shared machines: read medians, and compare sizes with each other, not single times.

    python benchmarks/scale.py                        # 1M and 10M
    python benchmarks/scale.py --sizes 1 10 100 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NODES_PER_GRAPH = 572  # the synthetic 30-layer graph
CACHE = Path.home() / ".cache" / "ggml-viz" / "scale-runs"
TENSORBOARD_UP_TO = 10  # millions of node events (see the docstring)
# ggml_viz.runformat.totals.TOTALS_SCHEMAS's names (not imported: see synthetic_run)
TOTALS = ("node_totals", "graph_op_totals")
WRITE_RUN = """
import sys
from ggml_viz.runformat.synthetic import write_synthetic_run
write_synthetic_run(sys.argv[1], graphs=int(sys.argv[2]), layers=30)
"""

# Runs `ggml-viz ARGS...` in this interpreter and reports its own peak RSS (KiB) last.
MEASURED_COMMAND = """
import resource, sys, io, contextlib
from ggml_viz.commands import main
with contextlib.redirect_stdout(io.StringIO()):
    status = main(sys.argv[1:])
if status:
    sys.exit(status)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


# The summary's analysis alone: seconds of summarize(run) (the run opened first), peak RSS (MB).
MEASURED_SUMMARIZE = """
import json, resource, sys, time
from ggml_viz.analysis.summary import summarize
from ggml_viz.runformat.reader import open_run
run = open_run(sys.argv[1])
start = time.perf_counter()
summarize(run)
print(json.dumps({"seconds": time.perf_counter() - start,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


# The viewer's server side, as `ggml-viz view` answers the browser: open the run, the
# overview, the first whole-run timeline (seconds since start), then whole-run and zoomed
# windows (a zoomed window at a new place reads its graphs' row groups; a pan reuses them).
MEASURED_VIEW = """
import json, resource, statistics, sys, time
start = time.perf_counter()
from pathlib import Path
from ggml_viz.ui.run_view import RunView
view = RunView("r", Path(sys.argv[1]))
view.overview
view.timeline(0, view.duration_ns, 1600)
first = time.perf_counter() - start
def ms(t0, t1):
    began = time.perf_counter()
    view.timeline(int(t0), int(t1), 1600)
    return (time.perf_counter() - began) * 1000
d = view.duration_ns
whole = [ms(0, d) for _ in range(7)]
zoomed = [ms(d * k / 9, d * k / 9 + d / 20000) for k in range(1, 8)]
panned = [ms(d * 0.5 + d * k / 400000, d * 0.5 + d * k / 400000 + d / 20000) for k in range(1, 8)]
print(json.dumps({"first_timeline_s": first, "whole_ms": statistics.median(whole),
                  "zoomed_new_place_ms": statistics.median(zoomed), "panned_ms": statistics.median(panned[1:]),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def synthetic_run(millions: int) -> Path:
    """The cached synthetic run of about `millions` million node events."""
    return synthetic_run_of(round(millions * 1_000_000 / NODES_PER_GRAPH), f"synthetic-{millions}M.ggmlviz")


def synthetic_run_of(graphs: int, name: str) -> Path:
    """The cached synthetic run `name` of `graphs` graphs (written once, in a process of its
    own: Linux hands a parent's peak RSS down to the children it starts, and the measured
    ones must not inherit the writer's)."""
    path = CACHE / name
    if not (path / "manifest.json").exists():
        print(f"writing {path} ({graphs:,} graphs, {graphs * NODES_PER_GRAPH:,} node events) ...", flush=True)
        start = time.perf_counter()
        shutil.rmtree(path, ignore_errors=True)
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-c", WRITE_RUN, str(path), str(graphs)], check=True)
        print(f"  written in {time.perf_counter() - start:,.0f} s", flush=True)
    return path


def measure_command(*args: str) -> tuple[float, float]:
    """Seconds and peak RSS (MB) of `ggml-viz ARGS...` in a fresh process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", MEASURED_COMMAND, *args], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"ggml-viz {' '.join(args)} failed: {done.stderr[-2000:]}")
    return seconds, int(done.stdout.split()[-1]) / 1024


def measure_summary(run: Path) -> tuple[float, float]:
    """Seconds and peak RSS (MB) of `ggml-viz summary RUN` in a fresh process."""
    return measure_command("summary", str(run))


def measure_summarize(run: Path) -> tuple[float, float]:
    """Seconds of the summary's analysis (summarize, the run opened) and the process's peak RSS (MB)."""
    done = subprocess.run([sys.executable, "-c", MEASURED_SUMMARIZE, str(run)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"summarize on {run} failed: {done.stderr[-2000:]}")
    figures = json.loads(done.stdout.splitlines()[-1])
    return figures["seconds"], figures["peak_mb"]


def measure_view(run: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", MEASURED_VIEW, str(run)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the viewer on {run} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def measure_export(run: Path, graphs: int = 10) -> float:
    """Seconds of a Perfetto export of a window of `graphs` graphs from the middle of the run."""
    import pyarrow.parquet as pq

    n_graphs = pq.read_metadata(run / "graphs.parquet").num_rows
    first = n_graphs // 2
    output = run.parent / "window.pftrace"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ggml_viz", "export", str(run), "-o", str(output), "--graphs",
                    f"{first}-{first + graphs - 1}"], check=True, capture_output=True)  # fmt: skip
    seconds = time.perf_counter() - start
    output.unlink()
    return seconds


def measure_profile_export(run: Path, name: str) -> tuple[float, float]:
    """Seconds and peak RSS (MB) of a whole-run export to `name` (speedscope, tensorboard) in a
    fresh process, written to a temporary folder."""
    with tempfile.TemporaryDirectory() as folder:
        return measure_command("export", str(run), "-o", str(Path(folder) / f"run.{name}"), "--format", name)


def compare_long_and_short(long: int, short: int, repeats: int) -> None:
    """A run of `long` graphs should open in the viewer as fast as one of `short`: seconds to
    the first whole-run timeline and the other view figures, medians, side by side."""
    figures = {}
    for graphs in (long, short):
        run = synthetic_run_of(graphs, f"synthetic-{graphs}-graphs.ggmlviz")
        views = [measure_view(run) for _ in range(repeats)]
        figures[graphs] = {key: statistics.median(view[key] for view in views) for key in views[0]}
    print(f"view of {long:,} graphs vs {short:,}: " + ", ".join(
        f"{key} {figures[long][key]:.2f} vs {figures[short][key]:.2f} (x{figures[long][key] / figures[short][key]:.2f})"
        for key in figures[long]), flush=True)  # fmt: skip


def without_totals(run: Path) -> Path:
    """A copy of the run (hard links: no bytes copied) without its stored totals."""
    copy = run.with_name(run.name.replace(".ggmlviz", "-no-totals.ggmlviz"))
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    for file in run.iterdir():
        if file.stem not in TOTALS:
            (copy / file.name).hardlink_to(file)
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10], help="millions of node events")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long-short", type=int, nargs=2, metavar=("LONG", "SHORT"), default=[20_000, 100],
                        help="graphs of two runs whose viewer start is compared (default 20000 and 100)")  # fmt: skip
    args = parser.parse_args()
    compare_long_and_short(*args.long_short, args.repeats)
    results = []
    for millions in args.sizes:
        run = synthetic_run(millions)
        stored = [measure_summary(run) for _ in range(args.repeats)]
        analysis = [measure_summarize(run) for _ in range(args.repeats)]
        as_json = [measure_command("summary", str(run), "--json") for _ in range(args.repeats)]
        streamed = []
        for _ in range(args.repeats):
            copy = without_totals(run)
            streamed.append(measure_summary(copy))
            shutil.rmtree(copy)
        views = [measure_view(run) for _ in range(args.repeats)]
        speedscope = [measure_profile_export(run, "speedscope") for _ in range(args.repeats)]
        tensorboard = measure_profile_export(run, "tensorboard") if millions <= TENSORBOARD_UP_TO else None
        row = {
            "node events (M)": millions,
            "summary s": statistics.median(s for s, _ in stored),
            "summary peak MB": statistics.median(m for _, m in stored),
            "summarize s": statistics.median(s for s, _ in analysis),
            "summarize peak MB": statistics.median(m for _, m in analysis),
            "summary --json s": statistics.median(s for s, _ in as_json),
            "summary --json peak MB": statistics.median(m for _, m in as_json),
            "first open, no stored totals s": statistics.median(s for s, _ in streamed),
            "first open peak MB": statistics.median(m for _, m in streamed),
            **{f"view {key}": statistics.median(view[key] for view in views) for key in views[0]},
            "export of 10 graphs s": statistics.median(measure_export(run) for _ in range(args.repeats)),
            "speedscope export s": statistics.median(s for s, _ in speedscope),
            "speedscope peak MB": statistics.median(m for _, m in speedscope),
            "tensorboard export s": tensorboard[0] if tensorboard else None,
            "tensorboard peak MB": tensorboard[1] if tensorboard else None,
        }
        results.append(row)
        print(json.dumps(row), flush=True)
    print("\n| node events | summary | its peak RSS | first open without stored totals (peak RSS) | view: first "
          "timeline after start | whole-run window | zoomed, new place | zoomed, panned | view peak RSS | "
          "Perfetto export of 10 graphs | speedscope export (peak RSS) | TensorBoard export (peak RSS) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in results:
        speedscope_cell = f"{row['speedscope export s']:.2f} s ({row['speedscope peak MB']:,.0f} MB)"
        tensorboard_cell = (f"{row['tensorboard export s']:.1f} s ({row['tensorboard peak MB']:,.0f} MB)"
                            if row["tensorboard export s"] is not None else "not measured")  # fmt: skip
        print(f"| {row['node events (M)']}M | {row['summary s']:.2f} s | {row['summary peak MB']:,.0f} MB | "
              f"{row['first open, no stored totals s']:.1f} s ({row['first open peak MB']:,.0f} MB) | "
              f"{row['view first_timeline_s']:.2f} s | {row['view whole_ms']:.0f} ms | "
              f"{row['view zoomed_new_place_ms']:.0f} ms | {row['view panned_ms']:.0f} ms | "
              f"{row['view peak_mb']:,.0f} MB | {row['export of 10 graphs s']:.2f} s | "
              f"{speedscope_cell} | {tensorboard_cell} |")  # fmt: skip


if __name__ == "__main__":
    main()
