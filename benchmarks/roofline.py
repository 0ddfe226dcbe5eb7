"""What judging a run against this machine's limits costs, and what measuring them takes.

- `ggml-viz limits`: seconds to measure (the defaults, on this machine), once.
- The summary's analysis (`summarize`, the run opened first) of the same run, without limits
  and with them (the limits set in the opened run's manifest, in memory: the run is not
  changed), alternated in one process, `--repeats` times each: medians and their ratio. The
  roofline reads the node totals (per structure), so its cost must not grow with the events:
  the ratio at 100M events should be what it is at 1M.

Runs: the synthetic runs `benchmarks/scale.py` keeps (~/.cache/ggml-viz/scale-runs), or any
given with --run. Noisy shared machines: read the ratio, not the seconds.

    python benchmarks/roofline.py                               # the 10M synthetic run
    python benchmarks/roofline.py --run france.ggmlviz --repeats 7
    python benchmarks/roofline.py --sizes 1 10 100 --no-measure
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

CACHE = Path.home() / ".cache" / "ggml-viz" / "scale-runs"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, action="append", help="a run to summarize (repeatable)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10], help="scale.py's runs, millions of events")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-measure", action="store_true", help="take the kept limits rather than measuring")
    args = parser.parse_args()

    limits, seconds = _limits(measure=not args.no_measure)
    if seconds is not None:
        print(f"ggml-viz limits (the defaults, measured): {seconds:.1f} s")
    runs = args.run or [CACHE / f"synthetic-{size}M.ggmlviz" for size in args.sizes]
    print(f"{'run':<40} {'without s':>10} {'with s':>10} {'ratio':>7}")
    for path in runs:
        if not (path / "manifest.json").exists():
            print(f"{str(path):<40} missing (benchmarks/scale.py --sizes N writes it)")
            continue
        without, with_limits = _paired(path, limits, args.repeats)
        print(f"{path.name:<40} {without:>10.2f} {with_limits:>10.2f} {with_limits / without:>7.2f}")
    return 0


def _limits(measure: bool) -> tuple[dict, float | None]:
    if measure:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "ggml_viz", "limits", "--again", "--json"],
            check=True,
            capture_output=True,
            text=True,
        )
        return json.loads(done.stdout), time.perf_counter() - start
    from ggml_viz.runformat.limits import stored_limits

    kept = stored_limits()
    if kept is None:
        raise SystemExit("no limits kept for this machine: run without --no-measure")
    return kept, None


def _paired(path: Path, limits: dict, repeats: int) -> tuple[float, float]:
    """Median seconds of summarize() without and with limits, alternated, in one process."""
    import ggml_viz
    from ggml_viz.analysis.summary import summarize

    run = ggml_viz.open(path)
    summarize(run)  # (the run's tables read once, as a viewer or the summary command would)
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeats):
        for judged in (False, True):
            run.manifest["limits"] = limits if judged else None
            start = time.perf_counter()
            summary = summarize(run)
            times[judged].append(time.perf_counter() - start)
            assert (summary["roofline"]["limits"] is not None) == judged
    return statistics.median(times[False]), statistics.median(times[True])


if __name__ == "__main__":
    sys.exit(main())
