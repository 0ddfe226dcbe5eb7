from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

from .._errors import GgmlVizError
from .base import Command

if TYPE_CHECKING:
    from ..runformat.reader import Run


class ValidateCommand(Command):
    """Check a run: its files, its memory map against the model file, every disk access.

    Checks that every file is present and of one experiment id; that the stored memory map
    covers its model file exactly and matches it (size and content hash); that every weight
    read lies inside its tensor's file range; that node counts, structures and buffers agree.
    Exit status 0 when all holds, 1 with the list of problems otherwise.

    example:
      ggml-viz validate france.ggmlviz
      ggml-viz validate france.ggmlviz --json
    """

    name = "validate"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("run", help="run directory (NAME.ggmlviz)")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")

    def run(self, args: argparse.Namespace) -> int:
        from ..capture.preload.opening import collect_and_open
        from .progress import spinner

        try:
            with spinner(f"validating {args.run}"):
                problems = validate_run(collect_and_open(args.run))
        except GgmlVizError as error:
            problems = [str(error)]
        if args.json:
            print(json.dumps({"run": args.run, "valid": not problems, "problems": problems}, indent=2))
        elif problems:
            print(f"{args.run}: {len(problems)} problem(s)")
            for problem in problems:
                print(f"  - {problem}")
        else:
            print(f"{args.run}: valid")
        return 1 if problems else 0


def validate_run(run: Run) -> list[str]:
    """Every problem found in an opened run (an empty list: the run is consistent)."""
    return [*_model_file_problems(run), *_structure_problems(run), *_disk_access_problems(run)]


def _model_file_problems(run: Run) -> list[str]:
    from ..modelfile.layout import sampled_hash

    problems = []
    memory_map = run.memory_map
    for path, entry in (run.manifest.get("model_files") or {}).items():
        if "error" in entry:
            problems.append(f"no memory map was stored for {path}: {entry['error']}")
            continue
        regions = memory_map[memory_map["model_path"] == path].sort_values("start")
        starts, ends = regions["start"].to_numpy(), regions["end"].to_numpy()
        if len(regions) == 0 or starts[0] != 0 or ends[-1] != entry["size"] or (starts[1:] != ends[:-1]).any():
            problems.append(f"the memory map of {path} does not cover its {entry['size']} bytes exactly once")
        problems += [f"{path}: {problem}" for problem in entry.get("problems", [])]
        if not os.path.exists(path):
            problems.append(f"model file {path} is gone: the memory map cannot be checked against it")
        elif os.path.getsize(path) != entry["size"]:
            problems.append(f"model file {path} is {os.path.getsize(path)} bytes, the run recorded {entry['size']}")
        elif sampled_hash(path, entry["data_offset"]) != entry["content_hash"]:
            problems.append(f"model file {path} changed since the recording (content hash differs)")
    return problems


def _structure_problems(run: Run) -> list[str]:
    problems = []
    graphs = run.graphs
    per_structure = run.raw("structure_nodes").groupby("structure_id").size()
    expected = graphs["structure_id"].map(per_structure).fillna(0).astype(int)
    for graph_id in graphs.loc[expected != graphs["n_nodes"], "graph_id"]:
        problems.append(f"graph {graph_id}: n_nodes disagrees with its structure's nodes")
    tensors = run.raw("tensors")
    known_buffers = set(run.raw("buffers")["buffer_id"])
    unknown = set(tensors.loc[tensors["buffer_id"] >= 0, "buffer_id"]) - known_buffers
    if unknown:
        problems.append(f"tensors refer to buffers that are not recorded: {sorted(unknown)}")
    known_tensors = set(tensors["tensor_id"])
    for table, column in (("structure_nodes", "tensor_id"), ("edges", "src_tensor_id")):
        missing = set(run.raw(table)[column]) - known_tensors
        if missing:
            problems.append(f"{table} refers to {len(missing)} tensor(s) that are not described")
    return problems


def _disk_access_problems(run: Run) -> list[str]:
    """Each weight read must lie inside its tensor's bytes in the file; read from the file
    mapping, its address inside the mapped buffer must be exactly where the file has it."""
    import pandas as pd

    edges = run.edges
    disk = edges[edges["memory"] == "disk"].drop_duplicates(["src_tensor_id", "context_id"])
    problems = []
    too_big = disk[disk["src_nbytes"] > disk["file_end"] - disk["file_offset"]]
    problems += [
        f"{name}: {n} bytes read, more than its {e - s} in the file"
        for name, n, s, e in too_big[["src_name", "src_nbytes", "file_offset", "file_end"]].itertuples(index=False)
    ]
    mapped = disk[disk["mmap"]]
    data_offsets = {path: entry.get("data_offset") for path, entry in (run.manifest.get("model_files") or {}).items()}
    model_paths = {c["context_id"]: (c.get("model") or {}).get("path") for c in run.manifest.get("contexts", [])}
    mapped_at = mapped["context_id"].map(model_paths).map(data_offsets).astype("Int64")
    # In a mapped weight buffer, the buffer starts where tensor data starts in the file.
    misplaced = mapped[pd.notna(mapped_at) & (mapped["buffer_offset"] + mapped_at != mapped["file_offset"])]
    problems += [
        f"{name}: read at file offset {b + d}, but the file has it at {f}"
        for name, b, d, f in zip(
            misplaced["src_name"],
            misplaced["buffer_offset"],
            mapped_at[misplaced.index],
            misplaced["file_offset"],
            strict=True,
        )
    ]
    unresolved = edges[(edges["src_usage"] == "weights") & (edges["memory"] != "disk")]["src_name"].unique()
    if len(unresolved) and len(run.memory_map):
        problems.append(f"{len(unresolved)} weight(s) not found in the model file's map, e.g. {unresolved[0]!r}")
    return problems
