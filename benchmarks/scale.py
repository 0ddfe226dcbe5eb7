"""Runs of any length: what recording and reading a long run costs, at 1M to 1,000M node events.

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

Recording: each synthetic run is written as the recorder writes (graph by graph, streams
rolled into Parquet parts as they fill), its folder's size sampled while it writes, and its
close timed (the seconds `ggml-viz run` spends on the run after the program exits); kept
beside the cached run. Goals (issue "A day of a busy server"): at a billion events, the close
<= 10 s, <= 12 bytes an event on disk while recording, `summary --json` <= 5 s and <= 1.5 GB,
the viewer's first timeline <= 5 s and <= 2 GB. The last table prints each figure beside its goal.

Disk: the 1,000M run takes about 6 GB in the cache (and 25-30 minutes to write, once);
whole-run exports and the first open without stored totals read every event, so they are
measured up to 100M only.

    python benchmarks/scale.py                        # 1M and 10M
    python benchmarks/scale.py --sizes 1 10 100 --repeats 3
    python benchmarks/scale.py --sizes 1000 --repeats 1 --long-short 2000 100
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
# Whole-run measures that read every event (minutes at a billion): up to this size only.
SPEEDSCOPE_UP_TO = 100
WITHOUT_TOTALS_UP_TO = 100
# (figure, the most it may be, the sizes it applies to (millions; None: every size))
GOALS = (
    ("summary s", 1.0, (1,)),
    ("summary s", 30.0, (100,)),
    ("summary --json s", 5.0, (1000,)),
    ("summary --json peak MB", 1536, None),
    ("view first_timeline_s", 3.0, (100,)),
    ("view first_timeline_s", 5.0, (1000,)),
    ("view whole_ms", 200, None),
    ("view zoomed_new_place_ms", 50, None),
    ("view peak_mb", 2048, None),
    ("export of 10 graphs s", 5.0, None),
    ("close s", 10.0, None),
    ("bytes an event while recording", 12.0, (1000,)),
)
# ggml_viz.runformat.totals.TOTALS_SCHEMAS's names (not imported: see synthetic_run)
TOTALS = ("node_totals", "graph_op_totals")
# Records the run as the recorder does, sampling the run folder's size while it writes (a
# run in progress: streams and the parts full segments became), and times its close: the
# seconds `ggml-viz run` spends on the run after the program exits. Prints them as JSON.
WRITE_RUN = """
import json, os, sys, threading, time
from pathlib import Path
from ggml_viz.runformat.synthetic import SyntheticRecording
path, graphs = Path(sys.argv[1]), int(sys.argv[2])
peak, done = [0], threading.Event()
def sample():
    while not done.wait(0.5):
        try:
            peak[0] = max(peak[0], sum(f.stat().st_size for f in path.iterdir()))
        except OSError:
            pass
threading.Thread(target=sample, daemon=True).start()
start = time.perf_counter()
recording = SyntheticRecording(path, layers=30)
for first in range(0, graphs, 10_000):
    recording.append_graphs(min(10_000, graphs - first))
recording.writer.flush_graphs()
recording.writer.wait_for_parts()  # (as a recording the worker kept up with: a backlog is benchmarks/close.py's)
recorded = time.perf_counter()
recording.close()
closed = time.perf_counter()
done.set()
events = int(recording.writer.manifest["counts"]["node_times_rows"])
final = sum(f.stat().st_size for f in path.iterdir())
print(json.dumps({"events": events, "record_s": recorded - start, "close_s": closed - recorded,
                  "peak_bytes_while_writing": peak[0], "final_bytes": final,
                  "peak_bytes_per_event": peak[0] / events, "final_bytes_per_event": final / events}))
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
# overview, the first whole-run timeline, each as the JSON sent (seconds since start; the page
# shows nothing before the overview), then whole-run and zoomed
# windows (a zoomed window at a new place reads its graphs' row groups; a pan reuses them).
MEASURED_VIEW = """
import json, resource, statistics, sys, time
start = time.perf_counter()
from pathlib import Path
from ggml_viz.ui.app import _json
from ggml_viz.ui.run_view import RunView
view = RunView("r", Path(sys.argv[1]))
overview_bytes = len(_json(view.overview).body)  # (as the server sends them: the browser waits for both)
timeline_bytes = len(_json(view.timeline(0, view.duration_ns, 1600)).body)
first = time.perf_counter() - start
def ms(t0, t1):
    began = time.perf_counter()
    view.timeline(int(t0), int(t1), 1600)
    return (time.perf_counter() - began) * 1000
d = view.duration_ns
whole = [ms(0, d) for _ in range(7)]
zoomed = [ms(d * k / 9, d * k / 9 + d / 20000) for k in range(1, 8)]
panned = [ms(d * 0.5 + d * k / 400000, d * 0.5 + d * k / 400000 + d / 20000) for k in range(1, 8)]
print(json.dumps({"first_timeline_s": first, "overview_kb": overview_bytes / 1024, "timeline_kb": timeline_bytes / 1024,
                  "whole_ms": statistics.median(whole),
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
    if not (path / "manifest.json").exists() or not recording_figures(path):
        print(f"writing {path} ({graphs:,} graphs, {graphs * NODES_PER_GRAPH:,} node events) ...", flush=True)
        shutil.rmtree(path, ignore_errors=True)
        CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-c", WRITE_RUN, str(path), str(graphs)], check=True, capture_output=True, text=True
        )
        path.with_name(path.name + ".recording.json").write_text(done.stdout.splitlines()[-1])
        print(f"  recorded: {recording_figures(path)}", flush=True)
    return path


def recording_figures(run: Path) -> dict[str, float]:
    """What writing the cached run measured (WRITE_RUN), kept beside it; {} if not known."""
    kept = run.with_name(run.name + ".recording.json")
    return json.loads(kept.read_text()) if kept.exists() else {}


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
    n_graphs = json.loads((run / "manifest.json").read_text())["counts"]["graphs_rows"]  # (a table may be in parts)
    first = n_graphs // 2
    output = run.parent / "window.pftrace"
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ggml_viz",
            "export",
            str(run),
            "-o",
            str(output),
            "--graphs",
            f"{first}-{first + graphs - 1}",
        ],
        check=True,
        capture_output=True,
    )
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
    pairs = {key: (figures[long][key], figures[short][key]) for key in figures[long]}
    compared = ", ".join(f"{key} {a:.2f} vs {b:.2f} (x{a / b:.2f})" for key, (a, b) in pairs.items())
    print(f"view of {long:,} graphs vs {short:,}: {compared}", flush=True)


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
    parser.add_argument(
        "--long-short",
        type=int,
        nargs=2,
        metavar=("LONG", "SHORT"),
        default=[20_000, 100],
        help="graphs of two runs whose viewer start is compared (default 20000 and 100)",
    )
    args = parser.parse_args()
    compare_long_and_short(*args.long_short, args.repeats)
    results = []
    for millions in args.sizes:
        run = synthetic_run(millions)
        stored = [measure_summary(run) for _ in range(args.repeats)]
        analysis = [measure_summarize(run) for _ in range(args.repeats)]
        as_json = [measure_command("summary", str(run), "--json") for _ in range(args.repeats)]
        streamed = []
        for _ in range(args.repeats if millions <= WITHOUT_TOTALS_UP_TO else 0):
            copy = without_totals(run)
            streamed.append(measure_summary(copy))
            shutil.rmtree(copy)
        views = [measure_view(run) for _ in range(args.repeats)]
        speedscope = [
            measure_profile_export(run, "speedscope")
            for _ in range(args.repeats if millions <= SPEEDSCOPE_UP_TO else 0)
        ]
        recorded = recording_figures(run)
        tensorboard = measure_profile_export(run, "tensorboard") if millions <= TENSORBOARD_UP_TO else None
        row = {
            "node events (M)": millions,
            "summary s": statistics.median(s for s, _ in stored),
            "summary peak MB": statistics.median(m for _, m in stored),
            "summarize s": statistics.median(s for s, _ in analysis),
            "summarize peak MB": statistics.median(m for _, m in analysis),
            "summary --json s": statistics.median(s for s, _ in as_json),
            "summary --json peak MB": statistics.median(m for _, m in as_json),
            "first open, no stored totals s": statistics.median(s for s, _ in streamed) if streamed else None,
            "first open peak MB": statistics.median(m for _, m in streamed) if streamed else None,
            **{f"view {key}": statistics.median(view[key] for view in views) for key in views[0]},
            "export of 10 graphs s": statistics.median(measure_export(run) for _ in range(args.repeats)),
            "speedscope export s": statistics.median(s for s, _ in speedscope) if speedscope else None,
            "speedscope peak MB": statistics.median(m for _, m in speedscope) if speedscope else None,
            "tensorboard export s": tensorboard[0] if tensorboard else None,
            "tensorboard peak MB": tensorboard[1] if tensorboard else None,
            "close s": recorded.get("close_s"),
            "bytes an event while recording": recorded.get("peak_bytes_per_event"),
            "bytes an event, closed": recorded.get("final_bytes_per_event"),
            "disk GB": recorded.get("final_bytes", 0) / 1e9,
        }
        results.append(row)
        print(json.dumps(row), flush=True)
    print(
        "\n| node events | disk | close | bytes an event while recording | summary | its peak RSS | "
        "summary --json (peak RSS) | first open without stored totals (peak RSS) | view: first timeline after "
        "start | whole-run window | zoomed, new place | zoomed, panned | view peak RSS | Perfetto export of 10 "
        "graphs | speedscope export (peak RSS) | TensorBoard export (peak RSS) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in results:
        print(
            f"| {row['node events (M)']}M | {row['disk GB']:.2f} GB | {_cell(row['close s'], '{:.1f} s')} | "
            f"{_cell(row['bytes an event while recording'], '{:.1f} B')} | {row['summary s']:.2f} s | "
            f"{row['summary peak MB']:,.0f} MB | {row['summary --json s']:.2f} s "
            f"({row['summary --json peak MB']:,.0f} MB) | "
            f"{_cell(row['first open, no stored totals s'], '{:.1f} s')} "
            f"({_cell(row['first open peak MB'], '{:,.0f} MB')}) | "
            f"{row['view first_timeline_s']:.2f} s | {row['view whole_ms']:.0f} ms | "
            f"{row['view zoomed_new_place_ms']:.0f} ms | {row['view panned_ms']:.0f} ms | "
            f"{row['view peak_mb']:,.0f} MB | {row['export of 10 graphs s']:.2f} s | "
            f"{_cell(row['speedscope export s'], '{:.2f} s')} "
            f"({_cell(row['speedscope peak MB'], '{:,.0f} MB')}) | "
            f"{_cell(row['tensorboard export s'], '{:.1f} s')} "
            f"({_cell(row['tensorboard peak MB'], '{:,.0f} MB')}) |"
        )
    print("\n| node events | figure | measured | goal | met |")
    print("|---|---|---|---|---|")
    for row in results:
        for figure, goal, sizes in GOALS:
            value = row.get(figure)
            if value is None or (sizes is not None and row["node events (M)"] not in sizes):
                continue
            met = "yes" if value <= goal else "NO"
            print(f"| {row['node events (M)']}M | {figure} | {value:,.2f} | <= {goal:,} | {met} |")


def _cell(value: float | None, form: str) -> str:
    return "not measured" if value is None else form.format(value)


if __name__ == "__main__":
    main()
