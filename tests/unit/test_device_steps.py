"""Where a step's time goes per device, on hand-made intervals: each moment of a step is a device's
busy time, its wait for another device, for transfers, for the scheduler, or the host's."""

from __future__ import annotations

import pandas as pd
import pytest

from ggml_viz.analysis.devices.activity import ACTIVITY_COLUMNS
from ggml_viz.analysis.devices.placement import INPUT, PlacementModel, block_of_nodes, predict
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
    activity = _activity([
        (7, 0, "CPU", "compute", 0, "MUL_MAT", 10, 40), (7, 1, "CPU", "compute", 0, "ADD", 20, 30),
        (7, 2, "CUDA0", "compute", 1, "MUL_MAT", 40, 80), (7, -1, "CUDA0", "transfer", None, "memcpy", 80, 90),
    ])  # fmt: skip
    # WHEN the step is broken down
    parts = device_parts(steps, activity).set_index(["device", "part"])["ns"]
    # THEN each device's parts are exactly its busy time, its wait for the other, the copy, the
    # scheduler's time inside the compute call and the host's outside it
    assert parts["CUDA0"].to_dict() == {"busy": 40, "waiting for CPU": 30, "waiting for transfers": 10,
                                        "launches and scheduling": 10, "host": 10}  # fmt: skip
    assert parts["CPU"].to_dict() == {"busy": 30, "waiting for CUDA0": 40, "waiting for transfers": 10,
                                      "launches and scheduling": 10, "host": 10}  # fmt: skip


def test_overlapping_devices_wait_for_the_busiest_and_the_mean_step_is_kept():
    # GIVEN two steps where both devices compute at once for a while, and an interval past the step
    steps = _steps((1, 0, 100, 0, 100), (2, 1000, 1050, 1000, 1050))
    activity = _activity([
        (1, 0, "CPU", "compute", 0, "X", 0, 60), (1, 1, "GPU", "compute", 1, "X", 50, 100),
        (2, 0, "CPU", "compute", 0, "X", 1000, 1010), (2, 1, "GPU", "compute", 1, "X", 1010, 1200),
    ])  # fmt: skip
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


def test_a_placement_is_the_sum_of_its_blocks_costs_and_crossings():
    # GIVEN 4 layers costing 10 on the CPU and 2 on the other device, the output 8 there, the input 1
    cost = {(INPUT, "CPU"): 1.0, (0, "CPU"): 10.0, (1, "CPU"): 10.0, (2, "GPU"): 2.0, (3, "GPU"): 2.0, (4, "GPU"): 8.0}
    model = PlacementModel(n_layer=4, other="GPU", recorded_ngl=3, cost={"decode": cost},
                           boundary_ns={"decode": 3.0}, host_ns={"decode": 5.0}, tokens={"decode": 1.0},
                           weight_bytes={INPUT: 100, 0: 10, 1: 10, 2: 10, 3: 10, 4: 50}, kv_bytes_per_layer=4.0,
                           compute_bytes={"CPU": 7, "GPU": 9})  # fmt: skip
    table = predict(model, [0, 3, 5]).set_index("ngl")
    # THEN the recorded placement is its measured parts: 1 + 10 + 10 + 2 + 2 + 8 + 2 crossings × 3 + 5
    assert table.loc[3, "decode_step_ns"] == 44
    # AND every block on the CPU: the layers at 10, the output at the layers' speed ratio (8 × 10/2), no crossing
    assert table.loc[0, "decode_step_ns"] == 1 + 4 * 10 + 40 + 5
    # AND every layer on the other device: the layers at 2, crossings both ways
    assert table.loc[5, "decode_step_ns"] == 1 + 4 * 2 + 8 + 6 + 5
    # AND the memory: weights of the blocks on the device, the KV of its layers, its compute buffer
    assert table.loc[3, "CPU_bytes"] == 100 + 20 + 2 * 4 + 7 and table.loc[3, "GPU_bytes"] == 70 + 2 * 4 + 9
    assert table.loc[0, "GPU_bytes"] == 0
