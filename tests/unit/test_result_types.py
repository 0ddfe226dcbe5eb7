"""Each analysis result matches the type its producer declares: run on recorded runs (a plain
one, a server's, one on a GPU, one holding this machine's limits), every object in it holds its
TypedDict's required keys and no key it does not declare, however deep. The type checked is the
function's own return annotation, so a result and its declaration cannot drift apart unseen (the
viewer's API and the terminal read these same declarations)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, get_type_hints

import pytest

import ggml_viz
from ggml_viz.analysis.breakdowns import node_waits, requests, weight_reads
from ggml_viz.analysis.devices import placement_advice, run_devices
from ggml_viz.analysis.gpu import gpu_summary
from ggml_viz.analysis.memory import kv_cache_extremes
from ggml_viz.analysis.moe import moe_summary
from ggml_viz.analysis.roofline import roofline_summary
from ggml_viz.analysis.summary import RunSummary, summarize
from ggml_viz.runformat.reader import Run
from ggml_viz.runformat.synthetic import write_synthetic_run

from ..gpu_runs import write_gpu_run
from ..machine_limits import keep_in_run, twice_as_fast_at_two_threads
from ..payload_shapes import declared_types, shape_problems

# each producer, and how it is called on a run: the type checked is its return annotation
PRODUCERS: dict[str, tuple[Callable[..., Any], Callable[[Run], tuple[Any, ...]]]] = {
    "summarize": (summarize, lambda run: (run,)),
    "node_waits": (node_waits, lambda run: (run,)),
    "weight_reads": (weight_reads, lambda run: (run,)),
    "requests": (requests, lambda run: (run,)),
    "gpu_summary": (gpu_summary, lambda run: (run,)),
    "roofline_summary": (roofline_summary, lambda run: (run, weight_reads(run))),
    "moe_summary": (moe_summary, lambda run: (run,)),
    "kv_cache_extremes": (kv_cache_extremes, lambda run: (run,)),
    "placement_advice": (placement_advice, lambda run: (run, run_devices(run))),
}


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
    result = function(*arguments(runs[run_name]))
    # THEN every object in its result has its TypedDict's required keys and no other
    assert shape_problems(result, declared) == []


def test_the_summary_is_checked_down_to_its_deepest_records(runs):
    # GIVEN the summaries of a GPU run, a server's and a run holding this machine's limits
    gpu, server, limits = (summarize(runs[name]) for name in ("gpu", "server", "limits"))
    # THEN their records are there to be checked: the GPU timer's, the requests', the roofline's
    assert gpu["gpu"] and gpu["gpu"]["top_kernels"] and gpu["gpu"]["decode_step"]
    assert len(server["requests"]) == server["n_requests"] > 1
    assert limits["roofline"]["limits"] and limits["roofline"]["by_op"] and limits["placement"]
    assert {"RequestText", "GpuTimerSummary", "GpuKernelRow", "RooflineSummary", "LimitMeasurement",
            "PlacementCheck", "DeviceSummary", "MoeLayerBalance"} <= declared_types(RunSummary)  # fmt: skip
    # AND a key the producer adds without declaring it is seen
    limits["roofline"]["by_op"][0]["spare"] = 1  # type: ignore[typeddict-unknown-key]
    assert shape_problems(limits, RunSummary) == ["$.roofline.by_op[0]: 'spare' undeclared (RooflineOp)"]
