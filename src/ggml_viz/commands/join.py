from __future__ import annotations

import argparse
import json
from pathlib import Path

from .._errors import CommandError
from .base import Command


class JoinCommand(Command):
    """Join a distributed run (llama.cpp's RPC backend): the head's run and its workers' runs as one experiment.

    Record each worker and the head with `ggml-viz run`, then join them: the workers' graphs are
    matched to the head's splits by the protocol's messages (both sides recorded them), each
    worker's clock is set against the head's (offset and uncertainty, from when messages were sent
    and received), and every remote node gets its worker's time. Writes the joined tables
    (hosts, splits, transfers, remote_nodes) as Parquet into OUTPUT beside join.json, prints the
    summary (time per host, on the wire, the head's waits, the slowest worker); `ggml-viz query
    OUTPUT` asks them and the member runs in SQL, `ggml-viz summary OUTPUT` prints it again.

    example:
      ggml-viz run -o w1.ggmlviz -- ggml-rpc-server -H 10.0.0.2 -p 50052        # on each worker
      ggml-viz run -o head.ggmlviz -- llama-cli -m model.gguf --rpc 10.0.0.2:50052 -ngl 99
      ggml-viz join head.ggmlviz w1.ggmlviz -o france.joined --trace france.trace.json
      ggml-viz join runs/ -o france.joined          # every run in runs/
    """

    name = "join"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "runs", nargs="+", help="the head's run and its workers' runs (any order), or a folder of them"
        )
        parser.add_argument("-o", "--output", required=True, help="the joined experiment's folder (written)")
        parser.add_argument(
            "--trace", help="also write one Chrome/Perfetto JSON trace: a process per host, on the head's clock"
        )
        parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")

    def run(self, args: argparse.Namespace) -> int:
        from ..analysis.join import is_joined, join_runs, write_joined
        from ..export.joined_trace import chrome_trace
        from .progress import spinner
        from .query import open_runs
        from .render import render_joined

        paths = [Path(path) for path in args.runs]
        for path in paths:
            if not path.exists():
                raise CommandError(f"{path} does not exist")
        output = Path(args.output)
        with spinner("opening the runs") as step:
            # a folder of runs may hold an earlier join of them (itself a run): not a member
            runs = [run for path in paths for run in open_runs(path) if not is_joined(run.path)]
            if any(run.path.resolve() == output.resolve() for run in runs):
                raise CommandError(f"{output} is one of the runs: give the joined experiment a folder of its own")
            step(f"joining {len(runs)} runs")
            joined = join_runs(runs)
            step(f"writing the joined tables into {output}")
            summary = write_joined(joined, output)
            if args.trace:
                step(f"writing the trace {args.trace}")
                Path(args.trace).write_text(json.dumps(chrome_trace(joined)))
        if args.json:
            print(json.dumps(summary, indent=2, default=str))
        else:
            render_joined(summary)
            print(f"joined into {output}" + (f"; trace in {args.trace}" if args.trace else ""))
        return 0
