from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from .._errors import CommandError
from .base import Command


class LimitsCommand(Command):
    """Measure what this machine can do, with ggml's own kernels, and keep it: the limits the
    summary, the viewer and the report judge runs against.

    Measures, at each thread count: the memory's read bandwidth (threads summing a 512 MiB buffer;
    on a GPU, an F32 matrix-vector product of that size), and for each weight type the
    matrix-vector product's GB/s (decode's kernel) and the matrix product's GFLOP/s (a prompt's:
    the compute roof); then the first read of a mapped file from the page cache and from the disk;
    on each GPU ggml has, the same.
    About three seconds per type and thread count. Kept per machine in ~/.cache/ggml-viz/limits:
    measured once, shown again without --again.

    --for RUN measures the thread counts and weight types that run used (besides the defaults)
    and writes the limits into its manifest: a run recorded once limits exist gets them then.

    example:
      ggml-viz limits                           # measure (once) and show this machine's limits
      ggml-viz limits --for france.ggmlviz      # ... and judge that run against them
      ggml-viz limits --threads 1 4 8 --types F16 Q4_K --again
    """

    name = "limits"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--for",
            dest="runs",
            nargs="+",
            default=[],
            metavar="RUN",
            help="runs recorded on this machine: measure what they used, keep the limits in them",
        )
        parser.add_argument(
            "--threads",
            type=int,
            nargs="+",
            metavar="N",
            help="CPU thread counts (default: 1 and every core, and the runs')",
        )
        parser.add_argument(
            "--types",
            nargs="+",
            metavar="TYPE",
            help="weight types (default: F32 F16 Q8_0 Q4_0 Q4_K Q6_K, and the runs')",
        )
        parser.add_argument("--again", action="store_true", help="measure even where this machine's limits are kept")
        parser.add_argument(
            "--size-mib",
            type=int,
            default=512,
            help="the matrix read to measure bandwidth, MiB (default 512: far above the caches)",
        )
        parser.add_argument("--repeats", type=int, default=5, help="runs of each measurement; the best counts")
        parser.add_argument("--file-dir", type=Path, help="where the file read from disk is written (default: /tmp)")
        parser.add_argument("--no-gpu", action="store_true", help="measure the CPU only")
        parser.add_argument(
            "--ggml",
            type=Path,
            metavar="DIR",
            help="measure with the ggml libraries in DIR (a llama.cpp build's libggml-base.so, "
            "libggml.so, ...) rather than llama-cpp-python's",
        )
        parser.add_argument("--json", action="store_true", help="print the limits as one JSON object")

    def run(self, args: argparse.Namespace) -> int:
        from ..runformat.limits import store_limits, stored_limits

        if min(args.threads or [1]) < 1 or args.size_mib < 16 or args.repeats < 1:
            raise CommandError("--threads takes counts of 1 or more, --size-mib 16 or more, --repeats 1 or more")
        if args.ggml is not None:
            if not any(args.ggml.glob("libggml-base.*")):
                raise CommandError(f"{args.ggml} holds no libggml-base: give the folder of a ggml build's libraries")
            # (read by ggml-viz's ggml loader and by llama-cpp-python's alike)
            os.environ["LLAMA_CPP_LIB_PATH"] = str(args.ggml.resolve())
        runs = [_open_here(path) for path in args.runs]
        threads, types = _wanted(args, runs)
        limits = stored_limits()
        if args.again or limits is None or not _covers(limits, threads, types):
            limits = _measure(args, threads, types, limits)
            store_limits(limits)
        for run in runs:
            _keep_in_run(run, limits)
        if args.json:
            print(json.dumps(limits, indent=1))
        else:
            _show(limits, [str(run.path) for run in runs])
        return 0


def _open_here(path: str) -> Any:
    """A closed run recorded on this machine (limits measured here say nothing of another)."""
    from ..capture.preload.opening import collect_and_open
    from ..runformat.limits import recorded_on, same_machine, this_machine

    run = collect_and_open(path)
    if run.status == "recording":
        raise CommandError(f"{path} is still being recorded: give it its limits once it is closed")
    machine = recorded_on(run.manifest)
    here = this_machine()
    if not same_machine(machine, here):
        raise CommandError(
            f"{path} was recorded on {machine.get('host')} ({machine.get('cpu_model')}, "
            f"{machine.get('cpu_cores')} cores), not on this machine, {here['host']} "
            f"({here['cpu_model']}, {here['cpu_cores']} cores): measure its limits there"
        )
    return run


def _wanted(args: argparse.Namespace, runs: list[Any]) -> tuple[list[int], list[str]]:
    from ..analysis.roofline import phase_threads, weight_types_used
    from ..capture.limits import DEFAULT_TYPES

    threads = set(args.threads or {1, os.cpu_count() or 1})
    types = {name.upper() for name in (args.types or DEFAULT_TYPES)}
    for run in runs:
        if not args.threads:
            threads |= {n for n in phase_threads(run).values() if n}
        if not args.types:
            types |= set(weight_types_used(run))
    return sorted(threads), sorted(types)


def _covers(limits: dict[str, Any], threads: list[int], types: list[str]) -> bool:
    """Whether kept limits hold a bandwidth, a node's step and a peak for every thread count and type asked."""
    have = {
        (row.get("what"), row.get("threads"), (row.get("type") or "").upper())
        for row in limits["measurements"]
        if row.get("device") == "CPU"
    }
    read = {count for what, count, _ in have if what == "memory_read"}
    stepped = {count for what, count, _ in have if what == "node_step"}  # (limits kept before it was measured lack it)
    return all(n in read and n in stepped and all(("matmul", n, kind) in have for kind in types) for n in threads)


def _measure(
    args: argparse.Namespace, threads: list[int], types: list[str], kept: dict[str, Any] | None
) -> dict[str, Any]:
    """Measure what is asked, and what the kept limits held besides (one consistent set, all
    measured now: a machine's limits change with its load, its kernel, its ggml)."""
    from rich.console import Console

    from ..capture.limits import measure

    if kept is not None:
        rows = [row for row in kept["measurements"] if row.get("device") == "CPU" and row.get("threads")]
        threads = sorted(set(threads) | {int(row["threads"]) for row in rows})
        types = sorted(set(types) | {row["type"].upper() for row in rows if row.get("what") == "matmul"})
    console = Console(stderr=True)
    with console.status("measuring") as status:
        return measure(
            threads,
            types,
            size_mib=args.size_mib,
            repeats=args.repeats,
            file_dir=args.file_dir,
            gpus=not args.no_gpu,
            progress=lambda what: status.update(f"measuring {what}"),
        )


def _keep_in_run(run: Any, limits: dict[str, Any]) -> None:
    from ..runformat.manifest import write_manifest

    manifest = dict(run.manifest)
    manifest["limits"] = limits
    write_manifest(Path(run.path), manifest)


def _show(limits: dict[str, Any], runs: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    machine = limits.get("machine") or {}
    ggml = limits.get("ggml") or {}
    console.print(
        f"[bold]{machine.get('host')}[/]: {machine.get('cpu_model')}, {machine.get('cpu_cores')} cores, "
        f"{(machine.get('memory_bytes') or 0) / 2**30:,.1f} GiB; measured {limits.get('measured')} with "
        f"ggml {ggml.get('version') or '?'}"
    )
    table = Table(
        "device",
        "threads",
        "measured",
        "type",
        "GB/s",
        "GFLOP/s",
        "note",
        title_justify="left",
        title="limits (the best of each measurement's runs)",
    )
    words = {
        "memory_read": "memory read",
        "matvec": "matrix × vector",
        "matmul": "matrix × matrix",
        "page_cache_read": "mapped file, page cache",
        "disk_read": "mapped file, disk",
        "node_step": "a node's step",
    }
    for row in limits["measurements"]:
        table.add_row(
            row["device"],
            str(row["threads"] or "—"),
            words.get(row["what"], row["what"]),
            row.get("type") or "—",
            _number(row.get("gb_per_s")),
            _number(row.get("gflop_per_s")),
            (row.get("note") or "").lstrip("; "),
        )
    console.print(table)
    from ..analysis.roofline import Limits

    doubts = Limits.from_json(limits, "the limits").slower_with_more_threads()
    if doubts:
        console.print(
            f"slower at more threads ({'; '.join(doubts)}): other work had the cores? "
            "`ggml-viz limits --again` measures again",
            markup=False,
            highlight=False,
        )
    for path in runs:
        console.print(f"kept in {path}: `ggml-viz summary {path}` judges it against them")


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f}"
