"""How soon a live viewer shows a graph the recorder just finished, early in a run and late.

A synthetic recording (`ggml_viz.runformat.synthetic.SyntheticRecording`: decode graphs of a
30-layer model, 572 nodes each, written as the recorder writes them: each graph journaled at
once, the streams every 64 graphs, segments rolled at 8M rows) runs in a child process. It
first writes `--events` node events as fast as it can, then one more graph every
`--interval` seconds, printing the wall-clock time at which each graph was on disk.

`ggml-viz view --live` serves the run (in this process) to headless Chromium (Debian's,
driven by Playwright) on the timeline tab (or `--tab overview`), as a user follows a
recording. The page notes the wall-clock time at which each graph first appears in the
timeline's data (the overview's per-graph bars), polled every 5 ms. Printed: per graph, the
seconds from "on disk" to "in the browser";
median and maximum over `--graphs` graphs; and the CPU the viewer's server spent meanwhile
(a share of one core: what following a recording takes from the machine that records).

Target (issue "Runs of any length"): a finished graph visible <= 1 s later, at the start of
a run and after 10M node events.

    python benchmarks/live.py --events 0           # a run that just started
    python benchmarks/live.py --events 10000000    # after 10M node events (writes ~1 GB)
    python benchmarks/live.py --events 10000000 --tab overview --interval 0.05 --graphs 300
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ui import CHROMIUM_ARGS  # benchmarks/ui.py: the browser both benchmarks launch

from ggml_viz.ui.server import make_viewer

NODES_PER_GRAPH = 572

# The child: the recording. Prints "ready" once the prefill is on disk; once told to go on (a
# line on its stdin), appends graphs, printing "<graphs> <time>" for each; stops when its
# stdin closes.
RECORDER = """
import sys, time
from ggml_viz.runformat.synthetic import SyntheticRecording
path, prefill, interval, count = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
recording = SyntheticRecording(path, layers=30)
while recording.graphs < prefill:
    recording.append_graphs(min(1000, prefill - recording.graphs))
recording.writer.flush_graphs()
print("ready", flush=True)
sys.stdin.readline()  # the browser shows the run: go on
for _ in range(count):
    time.sleep(interval)
    recording.append_graphs(1)
    print(recording.graphs, time.time(), flush=True)
sys.stdin.read()
"""

# In the page: the wall-clock time each graph id first appears in the timeline's data, or
# (the overview tab) in the overview's per-graph bars.
GRAPH_WATCHERS = {
    "timeline": """() => { window.__seen = {}; setInterval(() => {
  const data = window.ggmlViz.timeline && window.ggmlViz.timeline.data;
  if (!data) return;
  const now = Date.now();
  for (const lane of data.lanes)
    for (const id of lane.graphs.graph_id) if (!(id in window.__seen)) window.__seen[id] = now;
}, 5); }""",
    "overview": """() => { window.__seen = {}; setInterval(() => {
  const bars = window.ggmlViz.overview && window.ggmlViz.overview.graph_bars;
  if (!bars) return;
  const now = Date.now();
  for (const id of bars.graph_id) if (!(id in window.__seen)) window.__seen[id] = now;
}, 5); }""",
}
READY = {"timeline": "() => window.ggmlViz.timeline && window.ggmlViz.timeline.data",
         "overview": "() => document.body.dataset.ready === '1'"}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=0, help="node events written before measuring (default 0)")
    parser.add_argument("--graphs", type=int, default=20, help="graphs measured (default 20)")
    parser.add_argument("--interval", type=float, default=0.77, help="seconds between them (default 0.77)")
    parser.add_argument(
        "--tab",
        choices=sorted(GRAPH_WATCHERS),
        default="timeline",
        help="the tab the page shows (default timeline; overview: its summary is fetched each update)",
    )
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    prefill = max(1, args.events // NODES_PER_GRAPH)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "live.ggmlviz"
        started = time.perf_counter()
        command = [sys.executable, "-c", RECORDER, str(path), str(prefill), str(args.interval), str(args.graphs)]
        recorder = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert recorder.stdout is not None and recorder.stdin is not None
        if recorder.stdout.readline().strip() != "ready":
            sys.exit("the recording did not start")
        print(
            f"{prefill * NODES_PER_GRAPH:,} node events in {prefill:,} graphs written in "
            f"{time.perf_counter() - started:.1f} s"
        )
        viewer = make_viewer(path, port=0, live=True)
        viewer.serve_in_background()
        written: dict[int, float] = {}
        try:
            cpu, wall = process_cpu_s(), time.perf_counter()
            seen = follow_in_browser(viewer.url, args.tab, args.chromium, recorder, written, args.graphs)
            cpu, wall = process_cpu_s() - cpu, time.perf_counter() - wall
        finally:
            recorder.stdin.close()
            recorder.wait()
            viewer.stop()
    delays = [seen[graph_id] / 1000 - written[graph_id] for graph_id in written if graph_id in seen]
    missing = len(written) - len(delays)
    print(
        f"graph on disk -> in the browser's {args.tab}, {len(delays)} graphs after "
        f"{prefill * NODES_PER_GRAPH:,} events: median {statistics.median(delays):.2f} s, "
        f"max {max(delays):.2f} s (target <= 1 s)" + (f"; {missing} never shown" if missing else "")
    )
    print("each: " + " ".join(f"{delay:.2f}" for delay in delays))
    print(
        f"the viewer's server (this process) meanwhile: {cpu:.1f} s of CPU in {wall:.1f} s ({cpu / wall:.0%} of a core)"
    )


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def follow_in_browser(
    url: str, tab: str, chromium: str, recorder: subprocess.Popen[str], written: dict[int, float], count: int
) -> dict[int, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        page.goto(f"{url}#{tab}")
        page.wait_for_function(READY[tab], timeout=120_000)
        page.evaluate(GRAPH_WATCHERS[tab])
        assert recorder.stdin is not None and recorder.stdout is not None
        recorder.stdin.write("go\n")
        recorder.stdin.flush()
        for line in recorder.stdout:
            graphs, at = line.split()
            written[int(graphs) - 1] = float(at)  # graph ids count from 0
            if len(written) == count:
                break
        page.wait_for_timeout(3000)  # the last graph's update
        seen = page.evaluate("() => window.__seen")
        browser.close()
    return {int(graph_id): float(at) for graph_id, at in seen.items()}


if __name__ == "__main__":
    main()
