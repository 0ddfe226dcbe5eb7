"""Reading back what the profile exports write: a speedscope file as (stack, weight) pairs, a
TensorBoard folder as its events or its values per tag; and the flame graph as it was computed
from all of a run's node events at once, to compare the exporter's with."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ggml_viz.analysis.components import node_components
from ggml_viz.export import ExportOptions, base, exporter_for, profiles
from ggml_viz.runformat.reader import Run


def exported_whole_and_in_chunks(run: Run, folder: Path, name: str, monkeypatch, format_name: str | None = None):
    """A run exported at once and a graph at a time (the chunked path every long run takes):
    the two outputs' paths, for the caller to compare."""
    exporter = exporter_for(format_name, folder / name)
    whole, chunked = folder / f"whole-{name}", folder / f"chunked-{name}"
    exporter.export(run, whole, ExportOptions())
    monkeypatch.setattr(base, "CHUNK_GRAPHS", 1)
    exporter.export(run, chunked, ExportOptions())
    return whole, chunked


def profile_of_all_events(run: Run, graph_ids: list[int] | None = None) -> list[tuple[tuple[str, ...], int]]:
    """(stack, time) as computed from every timed node event at once, stacks in the order they
    first ran: what the speedscope exporter wrote before it read totals."""
    nodes = run.nodes[run.nodes["timed"]]
    if graph_ids is not None:
        nodes = nodes[nodes["graph_id"].isin(graph_ids)]
    stacks = pd.DataFrame(
        {
            "layer": nodes["layer"].map(profiles.layer_label),
            "component": node_components(run, nodes),
            "op": nodes["op"],
            "tensor": nodes["name"],
            "time": nodes["duration_ns"].astype("int64"),
        }
    )
    totals = stacks.groupby(["layer", "component", "op", "tensor"], sort=False)["time"].sum()
    return [(tuple(stack), int(time)) for stack, time in totals.items()]


def exported_profile(run: Run, output: Path, options: ExportOptions | None = None) -> list[tuple[tuple[str, ...], int]]:
    """Export a speedscope profile and read it back: (stack, weight), in the file's order."""
    exporter_for("speedscope", output).export(run, output, options or ExportOptions())
    document = json.loads(output.read_text())
    names = [frame["name"] for frame in document["shared"]["frames"]]
    (profile,) = document["profiles"]
    samples = [tuple(names[i] for i in sample) for sample in profile["samples"]]
    return list(zip(samples, profile["weights"], strict=True))


def tensorboard_events(folder: Path) -> list[bytes]:
    """The events of a TensorBoard folder, without their wall-clock stamps."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    (file,) = folder.glob("events.out.tfevents.*")
    events = []
    for event in EventFileLoader(str(file)).Load():
        event.ClearField("wall_time")
        events.append(event.SerializeToString(deterministic=True))
    return events


def tensorboard_steps(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Per tag: (step, value) of its scalars, (step, sum) of its histograms."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "histograms": 0})
    events.Reload()
    steps = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    for tag in events.Tags()["histograms"]:
        steps[tag] = [(e.step, e.histogram_value.sum) for e in events.Histograms(tag)]
    return steps
