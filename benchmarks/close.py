"""Stopping a recording that outran the conversion of its segments: the close, with the backlog in.

A synthetic run (`ggml_viz.runformat.synthetic`: decode graphs of a 30-layer model, 572 nodes
each) is written at full speed, as a recorder that outruns the background conversion of its
full segments into Parquet parts writes it, and closed with no wait between: the close then
finds a backlog of segments. Two ways, paired (the same run written each way, alternately,
in fresh processes):

- `pending` (the close now): the backlog left pending, converted after the close by the
  detached converter at idle priority (runformat/conversion.py);
- `converted` (the close before): the backlog converted before the close returns (the
  close leaving it, then `conversion.convert_pending` in the same process, timed together:
  the work the close used to do, the worker's backlog and the last segments).

A backlog builds where the recording outruns the worker (a billion events at full speed on
two cores; at 30M events the worker keeps up). `--backlog all` makes it at any size: every
full segment is left to the close (`parts_while_recording = False`), as if the worker had
converted none.

For each: the close's seconds; then, at once, `ggml-viz summary --json` in a fresh process
(the run opened and summed while the converter works: `pending`), its seconds; after the
conversion (`pending`: its seconds too), the summary again, which must give the same figures.
Medians over the repeats, and the ratio pending / converted per repeat.

    python benchmarks/close.py                          # 10M events, 1 repeat
    python benchmarks/close.py --events 30 --backlog all
    python benchmarks/close.py --events 50 --repeats 3
    python benchmarks/close.py --events 1000 --repeats 1   # a billion (about 12 GB of disk, an hour)
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
WRITE_AND_CLOSE = """
import json, sys, time
from pathlib import Path
from ggml_viz.runformat.synthetic import SyntheticRecording
from ggml_viz.runformat.conversion import convert_pending
path, graphs, mode, backlog = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
recording = SyntheticRecording(path, layers=30)
recording.writer.parts_while_recording = backlog != "all"
recording.writer.detached_converter = mode == "pending"
for first in range(0, graphs, 10_000):
    recording.append_graphs(min(10_000, graphs - first))
recording.writer.flush_graphs()
recorded = time.perf_counter()
recording.close()
if mode == "converted":
    convert_pending(path)
closed = time.perf_counter()
manifest = recording.writer.manifest
print(json.dumps({"close_s": closed - recorded, "pending": len(manifest.get("pending_parts") or []),
                  "events": int(manifest["counts"]["node_times_rows"])}))
"""


def manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def summary(run: Path) -> tuple[float, dict]:
    """`ggml-viz summary --json` in a fresh process: its seconds and its figures."""
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ggml_viz", "summary", "--json", str(run)], check=True, capture_output=True, text=True
    )
    return time.perf_counter() - began, json.loads(done.stdout)


def figures(summarized: dict) -> dict:
    """The summary's figures that come from the run's events (not its path or when it was read)."""
    return {key: value for key, value in summarized.items() if key not in ("path", "run", "manifest")}


def one(folder: Path, graphs: int, mode: str, backlog: str) -> dict:
    run = folder / f"{mode}.ggmlviz"
    command = [sys.executable, "-c", WRITE_AND_CLOSE, str(run), str(graphs), mode, backlog]
    written = subprocess.run(command, check=True, capture_output=True, text=True)
    result = json.loads(written.stdout)
    closed = time.perf_counter()
    result["summary_after_close_s"], first = summary(run)
    while manifest(run).get("conversion") == "pending":
        time.sleep(0.2)
    result["converted_after_s"] = time.perf_counter() - closed if mode == "pending" and result["pending"] else 0.0
    result["summary_converted_s"], second = summary(run)
    result["same_summary"] = figures(first) == figures(second)
    result["disk_gb"] = sum(f.stat().st_size for f in run.iterdir()) / 1e9
    shutil.rmtree(run)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=float, default=10, help="millions of node events (default 10)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--backlog", choices=("natural", "all"), default="natural", help="all: every full segment left to the close"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where to write the runs (default: a temp folder)")
    args = parser.parse_args()
    graphs = int(args.events * 1e6 / NODES_PER_GRAPH)
    rows: dict[str, list[dict]] = {"pending": [], "converted": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        for repeat in range(args.repeats):
            for mode in ("pending", "converted") if repeat % 2 == 0 else ("converted", "pending"):
                rows[mode].append(one(Path(folder), graphs, mode, args.backlog))
                print(mode, json.dumps(rows[mode][-1]), file=sys.stderr)
    events = rows["pending"][0]["events"]
    print(f"\n{events:,} node events ({graphs:,} graphs), {args.repeats} repeat(s), medians:\n")
    print(
        "| close | close s | segments left pending | summary right after, s | conversion done after, s "
        "| summary after it, s | same summary |"
    )
    print("|---|---|---|---|---|---|---|")
    for mode, label in (("converted", "converting the backlog (before)"), ("pending", "leaving it pending (now)")):
        r = rows[mode]

        def med(key: str, r: list[dict] = r) -> float:
            return statistics.median(x[key] for x in r)

        same = all(x["same_summary"] for x in r)
        print(
            f"| {label} | {med('close_s'):.2f} | {med('pending'):.0f} | {med('summary_after_close_s'):.2f} "
            f"| {med('converted_after_s'):.1f} | {med('summary_converted_s'):.2f} | {same} |"
        )
    ratios = [p["close_s"] / c["close_s"] for p, c in zip(rows["pending"], rows["converted"], strict=True)]
    print(
        f"\nclose, pending / converted: median {statistics.median(ratios):.3f} (per repeat: "
        f"{', '.join(f'{x:.3f}' for x in ratios)})"
    )


if __name__ == "__main__":
    main()
