"""Each analysis result matches the type its producer declares: run on recorded runs (a plain
one, a server's, one on a GPU, one holding this machine's limits), every object in it holds its
TypedDict's required keys and no key it does not declare, however deep. The type checked is the
function's own return annotation, so a result and its declaration cannot drift apart unseen (the
viewer's API and the terminal read these same declarations)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, get_type_hints

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ggml_viz
from ggml_viz.analysis.breakdowns import node_waits, requests, weight_reads
from ggml_viz.analysis.compare import clocks, compare, settings
from ggml_viz.analysis.devices import placement_advice, run_advice, run_devices
from ggml_viz.analysis.devices.advise import advise
from ggml_viz.analysis.gpu import gpu_summary
from ggml_viz.analysis.graph_view import graph_view_of
from ggml_viz.analysis.kv import kv_capacity, kv_events, kv_use
from ggml_viz.analysis.memory import kv_cache_extremes
from ggml_viz.analysis.moe import moe_summary
from ggml_viz.analysis.numerics import first_non_finite
from ggml_viz.analysis.requests import request_rows, requests_summary
from ggml_viz.analysis.roofline import roofline_summary
from ggml_viz.analysis.speculative import speculative_summary
from ggml_viz.analysis.summary import RunSummary, summarize
from ggml_viz.runformat.reader import Run
from ggml_viz.runformat.synthetic import write_synthetic_run

from ..gpu_runs import write_gpu_run
from ..machine_limits import keep_in_run, twice_as_fast_at_two_threads
from ..payload_shapes import declared_types, shape_problems
from ..speculative_runs import write_server_run

# each producer, and how it is called on a run (`other`: another run, for those comparing two):
# the type checked is its return annotation
PRODUCERS: dict[str, tuple[Callable[..., Any], Callable[[Run, Run], tuple[Any, ...]]]] = {
    "summarize": (summarize, lambda run, other: (run,)),
    "node_waits": (node_waits, lambda run, other: (run,)),
    "weight_reads": (weight_reads, lambda run, other: (run,)),
    "requests": (requests, lambda run, other: (run,)),
    "request_rows": (request_rows, lambda run, other: (run,)),
    "requests_summary": (requests_summary, lambda run, other: (run,)),
    "gpu_summary": (gpu_summary, lambda run, other: (run,)),
    "roofline_summary": (roofline_summary, lambda run, other: (run, weight_reads(run))),
    "moe_summary": (moe_summary, lambda run, other: (run,)),
    "speculative_summary": (speculative_summary, lambda run, other: (run,)),
    "kv_cache_extremes": (kv_cache_extremes, lambda run, other: (run,)),
    "kv_use": (kv_use, lambda run, other: (run,)),
    "kv_capacity": (kv_capacity, lambda run, other: (run,)),
    "kv_events": (kv_events, lambda run, other: (run,)),
    "placement_advice": (placement_advice, lambda run, other: (run, run_devices(run))),
    "compare": (compare, lambda run, other: (other, run)),
    "settings": (settings, lambda run, other: (run,)),
    "clocks": (clocks, lambda run, other: (other, run)),
    "graph_view_of collapsed": (graph_view_of, lambda run, other: (run, int(run.graphs["graph_id"].iloc[2]), None)),
    "graph_view_of a layer": (graph_view_of, lambda run, other: (run, int(run.graphs["graph_id"].iloc[2]), 1)),
}
OTHER = {"plain": "gpu", "server": "plain", "gpu": "plain", "limits": "server"}  # compared with


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    folder = tmp_path_factory.mktemp("results")
    with_limits = write_synthetic_run(folder / "limits.ggmlviz", graphs=12, layers=4, seed=4)
    keep_in_run(with_limits, twice_as_fast_at_two_threads())
    paths = {
        "plain": write_synthetic_run(folder / "plain.ggmlviz", graphs=20, layers=4, seed=1),
        "server": write_synthetic_run(folder / "server.ggmlviz", graphs=24, layers=4, seed=2, sequences=3),
        "gpu": write_gpu_run(folder / "gpu.ggmlviz", graphs=20, layers=4, gpu_every=1, seed=3),
        "limits": with_limits,
    }
    return {name: ggml_viz.open(Path(path)) for name, path in paths.items()}


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
@pytest.mark.parametrize("run_name", ["plain", "server", "gpu", "limits"])
def test_each_result_has_the_keys_its_producer_declares(runs, run_name, producer):
    # GIVEN a producer and the type it declares it returns
    function, arguments = PRODUCERS[producer]
    declared = get_type_hints(function)["return"]
    # WHEN it runs on a recorded run
    result = function(*arguments(runs[run_name], runs[OTHER[run_name]]))
    # THEN every object in its result has its TypedDict's required keys and no other
    assert shape_problems(result, declared) == []


def test_the_summary_is_checked_down_to_its_deepest_records(runs):
    # GIVEN the summaries of a GPU run, a server's and a run holding this machine's limits
    gpu, server, limits = (summarize(runs[name]) for name in ("gpu", "server", "limits"))
    # THEN their records are there to be checked: the GPU timer's, the requests', the roofline's
    assert gpu["gpu"] and gpu["gpu"]["top_kernels"] and gpu["gpu"]["decode_step"]
    assert len(server["requests"]) == server["n_requests"] > 1
    assert limits["roofline"]["limits"] and limits["roofline"]["by_op"] and limits["placement"]
    assert {
        "RequestText",
        "RequestsSummary",
        "Percentiles",
        "GpuTimerSummary",
        "GpuKernelRow",
        "RooflineSummary",
        "LimitMeasurement",
        "PlacementCheck",
        "DeviceSummary",
        "MoeLayerBalance",
    } <= declared_types(RunSummary)
    # AND a key the producer adds without declaring it is seen
    limits["roofline"]["by_op"][0]["spare"] = 1  # type: ignore[typeddict-unknown-key]
    assert shape_problems(limits, RunSummary) == ["$.roofline.by_op[0]: 'spare' undeclared (RooflineOp)"]


def test_a_speculative_run_s_summary_has_the_keys_it_declares(tmp_path):
    # GIVEN a server's run whose target verified a draft model's drafts
    run = ggml_viz.open(write_server_run(tmp_path / "speculative.ggmlviz"))
    # WHEN it is summed up, alone and in the summary
    alone, summary = speculative_summary(run), summarize(run)
    # THEN both hold what they declare, down to each request's
    assert alone and alone["requests"] and summary["speculative"] == alone
    assert shape_problems(alone, get_type_hints(speculative_summary)["return"]) == []
    assert shape_problems(summary, RunSummary) == []
    assert {"SpeculativeSummary", "SpeculativeRequest"} <= declared_types(RunSummary)


def test_the_comparison_and_the_layout_fill_what_they_declare(runs):
    # a run timed on the GPU against one timed on the host: settings, speeds and every key's changes
    comparison = compare(runs["plain"], runs["gpu"])
    assert comparison["settings_that_differ"]["node time clock"] == {"a": "host", "b": "GPU"}
    assert all(comparison["per_graph_time_by"][key] for key in ("op", "layer", "name"))
    assert clocks(runs["plain"], runs["gpu"])["note"]
    # a graph with a layer open: nodes, leaves and stubs of other layers, placed
    kinds = {item["kind"] for item in graph_view_of(runs["plain"], 2, 1)["items"]}
    assert {"node", "weight", "external"} <= kinds


def test_advice_has_the_keys_advise_declares(runs):
    # GIVEN a run whose limits were measured at two thread counts
    model, advice = run_advice(runs["limits"], run_devices(runs["limits"]), top=3)
    # THEN its advice, and advice under a memory budget, hold the declared keys, the recorded
    # placement's rates and memory among them
    assert advice["best"] and advice["recorded"]["memory"] and "decode_tokens_per_s" in advice["recorded"]
    for result in (advice, advise(model, {"CPU": 2**40}, goal="prompt", top=2)):
        assert shape_problems(result, get_type_hints(advise)["return"]) == []


def test_the_first_non_finite_output_has_the_keys_it_declares(runs, tmp_path):
    # GIVEN a run with --values stats whose node 5 of graphs 2 onwards holds NaNs
    path = write_synthetic_run(tmp_path / "values.ggmlviz", graphs=6, layers=2, seed=5)
    graphs = ggml_viz.open(path).graphs
    rows = [
        {
            "graph_id": graph,
            "node_index": index,
            "n": 100,
            "nan": 3 if graph >= 2 and index == 5 else 0,
            "inf": 0,
            "min": -1.0,
            "max": 2.0,
            "mean": 0.5,
            "std": None if index % 2 else 0.1,
            "mean_abs": 0.7,
        }
        for graph, nodes in zip(graphs["graph_id"], graphs["n_nodes"], strict=True)
        for index in range(nodes)
    ]
    table = path / "node_values.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(table)), table)
    # WHEN its first non-finite output is found
    found = first_non_finite(ggml_viz.open(path))
    # THEN it is that node, described by the keys its type declares, its sources too
    assert found is not None and (found["graph_id"], found["node_index"], found["nan"]) == (2, 5, 3)
    assert {"node_index", "note"} <= {key for source in found["sources"] for key in source}
    assert shape_problems(found, get_type_hints(first_non_finite)["return"]) == []
