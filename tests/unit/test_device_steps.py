"""Where a step's time goes per device, on hand-made intervals: each moment of a step is a device's
busy time, its wait for another device, for transfers, for the scheduler, or the host's."""

from __future__ import annotations

import pandas as pd
import pytest

from ggml_viz.analysis.devices.activity import ACTIVITY_COLUMNS
from ggml_viz.analysis.devices.placement import INPUT, block_of_nodes
from ggml_viz.analysis.devices.steps import device_parts, phase_breakdown


def _activity(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=ACTIVITY_COLUMNS)


def _steps(*windows: tuple[int, int, int, int, int]) -> pd.DataFrame:
    return pd.DataFrame(
        [(g, "decode", s, e, cs, ce) for g, s, e, cs, ce in windows],
        columns=["graph_id", "phase", "start_ns", "end_ns", "compute_start_ns", "compute_end_ns"],
    )


def test_each_devices_parts_add_up_to_the_step_and_name_their_cause():
    # GIVEN a step of 100 ns: its compute call 5..95, the CPU busy 10..40 (two nodes, one inside
    # the other), the GPU 40..80, a copy 80..90
    steps = _steps((7, 0, 100, 5, 95))
    activity = _activity(
        [
            (7, 0, "CPU", "compute", 0, "MUL_MAT", 10, 40),
            (7, 1, "CPU", "compute", 0, "ADD", 20, 30),
            (7, 2, "CUDA0", "compute", 1, "MUL_MAT", 40, 80),
            (7, -1, "CUDA0", "transfer", None, "memcpy", 80, 90),
        ]
    )
    # WHEN the step is broken down
    parts = device_parts(steps, activity).set_index(["device", "part"])["ns"]
    # THEN each device's parts are exactly its busy time, its wait for the other, the copy, the
    # scheduler's time inside the compute call and the host's outside it
    assert parts["CUDA0"].to_dict() == {
        "busy": 40,
        "waiting for CPU": 30,
        "waiting for transfers": 10,
        "launches and scheduling": 10,
        "host": 10,
    }
    assert parts["CPU"].to_dict() == {
        "busy": 30,
        "waiting for CUDA0": 40,
        "waiting for transfers": 10,
        "launches and scheduling": 10,
        "host": 10,
    }


def test_overlapping_devices_wait_for_the_busiest_and_the_mean_step_is_kept():
    # GIVEN two steps where both devices compute at once for a while, and an interval past the step
    steps = _steps((1, 0, 100, 0, 100), (2, 1000, 1050, 1000, 1050))
    activity = _activity(
        [
            (1, 0, "CPU", "compute", 0, "X", 0, 60),
            (1, 1, "GPU", "compute", 1, "X", 50, 100),
            (2, 0, "CPU", "compute", 0, "X", 1000, 1010),
            (2, 1, "GPU", "compute", 1, "X", 1010, 1200),
        ]
    )
    parts = device_parts(steps, activity)
    # THEN a moment both computed is each device's busy time, and intervals are clipped to the step
    per_step = parts.groupby(["graph_id", "device"])["ns"].sum()
    assert per_step[(1, "CPU")] == per_step[(1, "GPU")] == 100
    assert per_step[(2, "CPU")] == per_step[(2, "GPU")] == 50
    busy = parts[parts["part"] == "busy"].set_index(["graph_id", "device"])["ns"]
    assert busy[(1, "CPU")] == 60 and busy[(1, "GPU")] == 50 and busy[(2, "GPU")] == 40
    # AND the phase's mean step is the mean of its steps, each device's parts adding up to it
    (decode,) = phase_breakdown(parts, steps)
    assert decode["step_ns"] == 75
    for device in decode["devices"]:
        assert device["busy_ns"] + sum(device["parts"].values()) == pytest.approx(75)


def test_a_step_without_activity_is_left_out():
    steps = _steps((1, 0, 100, 0, 100), (2, 200, 300, 200, 300))
    activity = _activity([(1, 0, "CPU", "compute", 0, "X", 0, 50), (1, 1, "GPU", "compute", 1, "X", 50, 90)])
    assert set(device_parts(steps, activity)["graph_id"]) == {1}


def test_blocks_are_the_layers_with_the_input_before_and_the_output_after():
    nodes = pd.DataFrame({"graph_id": [0] * 5, "node_index": range(5), "layer": [None, 0, 1, 1, None]})
    assert block_of_nodes(nodes).tolist() == [INPUT, 0, 1, 1, 2]


def test_a_buffer_s_device_is_one_answer_for_every_analysis():
    from ggml_viz.analysis.buffer_device import device_of_buffer
    from ggml_viz.analysis.roofline import Limits, _devices

    from ..machine_limits import limits_of, row

    # GIVEN buffer names as ggml's backends give them: the CPU's kinds, pinned host memory a GPU
    # backend hands out (the CPU computes there), a GPU's own and a kind of it, a worker's
    names = [
        "CPU",
        "CPU_Mapped",
        "CPU_REPACK",
        "CUDA_Host",
        "CUDA0_Host",
        "CUDA0",
        "CUDA0_Split",
        "RPC0[127.0.0.1:50052]",
        "RPC1[my_host:50052]",
        None,
    ]
    # THEN each one's device, for the devices side by side
    assert [device_of_buffer(n) for n in names] == [
        "CPU",
        "CPU",
        "CPU",
        "CPU",
        "CPU",
        "CUDA0",
        "CUDA0",
        "RPC0[127.0.0.1:50052]",
        "RPC1[my_host:50052]",
        None,
    ]
    # AND the roofline, judging nodes by CUDA0's limits, says the same of CUDA0's (the rest: the CPU's roofs)
    limits = Limits.from_json(limits_of(row("memory_read", None, None, gb=3000.0, device="CUDA0")))
    judged = _devices(pd.DataFrame({"buffer_name": names}), limits).tolist()
    assert judged == ["CPU"] * 5 + ["CUDA0", "CUDA0"] + ["CPU"] * 3
