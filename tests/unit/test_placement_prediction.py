"""Other flags predicted from what one run measured, on hand-made measurements: where llama.cpp's
flags put each part of a model, what a step then costs, the memory each device needs, and the
placements `advise` picks."""

from __future__ import annotations

import argparse

import pandas as pd
import pytest

from ggml_viz._errors import GgmlVizError
from ggml_viz.analysis.devices.advise import advice_finding, advise, candidates, shown
from ggml_viz.analysis.devices.placement import (
    DENSE,
    EXPERTS,
    INPUT,
    RECORDED,
    Line,
    Placement,
    PlacementModel,
    _fit,
    boundaries_of,
    devices_of,
    experts_matching,
)
from ggml_viz.analysis.devices.prediction import memory_of, predict_one, recorded_check
from ggml_viz.commands.advise import memory_budget

MIB = 2**20


def _model(**overrides) -> PlacementModel:
    """Two layers with experts: layer 0 all on the CPU, layer 1 and the output on GPU0; per step
    (a + b × tokens) each dense layer costs 10 + 1/token on the CPU and 2 + 0.5/token on GPU0,
    layer 0's experts 6 on the CPU, layer 1's 3 on GPU0; the input 1, the output 4 on GPU0."""
    parts = {
        (INPUT, DENSE, "CPU"): Line(1.0, 0.0),
        (0, DENSE, "CPU"): Line(10.0, 1.0),
        (0, EXPERTS, "CPU"): Line(6.0, 0.0),
        (1, DENSE, "GPU0"): Line(2.0, 0.5),
        (1, EXPERTS, "GPU0"): Line(3.0, 0.0),
        (2, DENSE, "GPU0"): Line(4.0, 0.0),
    }
    weights = pd.DataFrame(
        [
            (INPUT, DENSE, "embd", 100 * MIB),
            (0, DENSE, "attn0", 10 * MIB),
            (0, EXPERTS, "exps0", 40 * MIB),
            (1, DENSE, "attn1", 10 * MIB),
            (1, EXPERTS, "exps1", 40 * MIB),
            (2, DENSE, "embd", 100 * MIB),
        ],
        columns=["block", "group", "name", "bytes"],
    )
    values = dict(
        n_layer=2,
        others=("GPU0",),
        recorded=Placement(2, 0, 1, 1, 512),
        parts={RECORDED: parts},
        crossing=Line(3.0, 0.0),
        fixed=Line(5.0, 0.0),
        measured={"decode": {"steps": 10.0, "tokens": 10.0, "ns": 10 * 45.5}},
        prompt_steps=[8],
        cold_prompt=False,
        weights=weights,
        logits_bytes_per_token=1000,
        output_device="GPU0",
        kv_bytes_per_layer_cell=1.0,
        n_ctx=512,
        n_ubatch=512,
        compute_bytes={"CPU": 7 * MIB, "GPU0": 9 * MIB},
        has_experts=True,
        threads={"decode": 1, "prompt": 1},
        activation_bytes={
            (INPUT, DENSE): 1 * MIB,
            (0, DENSE): 2 * MIB,
            (0, EXPERTS): 4 * MIB,
            (1, DENSE): 2 * MIB,
            (1, EXPERTS): 4 * MIB,
            (2, DENSE): 8 * MIB,
        },
        recorded_devices={
            (INPUT, DENSE): "CPU",
            (0, DENSE): "CPU",
            (0, EXPERTS): "CPU",
            (1, DENSE): "GPU0",
            (1, EXPERTS): "GPU0",
            (2, DENSE): "GPU0",
        },
    )
    values.update(overrides)
    return PlacementModel(**values)


def test_the_flags_place_the_last_blocks_on_the_device_and_the_first_layers_experts_on_the_cpu():
    model = _model()
    where = devices_of(model, Placement(ngl=2, n_cpu_moe=0))
    assert where[(INPUT, DENSE)] == "CPU" and where[(0, DENSE)] == "CPU" and where[(0, EXPERTS)] == "CPU"
    assert where[(1, DENSE)] == where[(1, EXPERTS)] == where[(2, DENSE)] == "GPU0"
    where = devices_of(model, Placement(ngl=3, n_cpu_moe=1))
    assert where[(0, DENSE)] == "GPU0" and where[(0, EXPERTS)] == "CPU" and where[(1, EXPERTS)] == "GPU0"
    # two crossings to the device and back, two more for the experts held apart
    assert boundaries_of(model, where) == 4
    assert boundaries_of(model, devices_of(model, Placement(ngl=0))) == 0


def test_a_step_is_its_parts_on_their_devices_its_crossings_and_the_fixed_time():
    model = _model()
    row = predict_one(model, model.recorded)
    # recorded: 1 + (11 + 6) on the CPU, (2.5 + 3) + 4 on GPU0, 2 crossings × 3, fixed 5
    assert row["recorded"] and row["decode_step_ns"] == pytest.approx(1 + 17 + 9.5 + 6 + 5)
    assert row["decode_parts"] == pytest.approx({"CPU": 18, "GPU0": 9.5, "crossings": 6, "fixed": 5})
    assert recorded_check(model, row)["decode"]["ratio"] == pytest.approx(45.5 / 38.5)
    # everything on GPU0: layer 0's dense part at the dense ratio GPU0/CPU (2.5 / 11), its experts
    # at the experts' ratio (3 / 6)
    row = predict_one(model, Placement(ngl=3))
    assert row["decode_parts"]["GPU0"] == pytest.approx(11 * 2.5 / 11 + 6 * 3 / 6 + 9.5)
    assert row["decode_parts"]["CPU"] == pytest.approx(1)


def test_a_prompt_is_its_ubatches_each_a_step_at_its_tokens():
    model = _model()
    one = predict_one(model, model.recorded, prompt_tokens=100)
    split = predict_one(model, Placement(2, 0, ubatch=32), prompt_tokens=100)

    def step(tokens: int) -> float:
        return 1 + (10 + tokens) + 6 + (2 + 0.5 * tokens) + 3 + 4 + 6 + 5

    assert one["prompt_ns"] == pytest.approx(step(100))
    assert split["prompt_ns"] == pytest.approx(3 * step(32) + step(4))
    assert split["prompt_tokens_per_s"] == pytest.approx(100 / (split["prompt_ns"] / 1e9))


def test_a_part_never_measured_anywhere_like_it_is_refused():
    parts = {
        (INPUT, DENSE, "CPU"): Line(1, 0),
        (0, DENSE, "CPU"): Line(5, 0),
        (1, DENSE, "CPU"): Line(5, 0),
        (2, DENSE, "CPU"): Line(1, 0),
    }
    model = _model(parts={RECORDED: parts}, has_experts=False)
    with pytest.raises(GgmlVizError, match="no layer's dense part ran on GPU0"):
        predict_one(model, Placement(ngl=1))


def test_other_thread_counts_are_the_lines_measured_for_them_or_refused():
    model = _model()
    with pytest.raises(GgmlVizError, match="measured at none"):
        predict_one(model, Placement(2, 0, threads=4))
    faster = {
        key: Line(line.a / 2, line.b / 2) if key[2] == "CPU" else line for key, line in model.parts[RECORDED].items()
    }
    model = _model(parts={RECORDED: model.parts[RECORDED], 1: model.parts[RECORDED], 2: faster})
    assert predict_one(model, Placement(2, 0, threads=2))["decode_parts"]["CPU"] == pytest.approx(9)


def test_memory_is_each_devices_weights_once_its_layers_kv_and_its_compute_buffer():
    model = _model()
    memory = memory_of(model, devices_of(model, model.recorded), ctx=1000, ubatch=512)
    # the tied embedding held on both devices (the input's and the output's copy); 1000 cells round up to 1024
    assert memory["CPU"]["weights"] == 150 * MIB and memory["GPU0"]["weights"] == 150 * MIB
    assert memory["CPU"]["kv_cache"] == 1024 and memory["GPU0"]["kv_cache"] == 1024
    # GPU0 held the output: its layers' part is its buffer less the logits of a ubatch (larger than them)
    assert memory["GPU0"]["compute"] == 9 * MIB - 1000 * 512 and memory["CPU"]["compute"] == 7 * MIB
    everything = memory_of(model, devices_of(model, Placement(ngl=0)), ctx=512, ubatch=512)
    assert everything["CPU"]["weights"] == 200 * MIB and everything["GPU0"]["total"] == 0
    assert everything["CPU"]["compute"] == 7 * MIB  # larger than the logits (512 000 bytes)
    small = memory_of(model, devices_of(model, model.recorded), ctx=512, ubatch=64)
    assert small["CPU"]["compute"] == 7 * MIB // 8
    # the CPU left with the input alone: its buffer scaled by the input's activation against the
    # experts' it held (1 MiB against 4)
    input_only = memory_of(model, devices_of(model, Placement(ngl=3)), ctx=512, ubatch=512)
    assert input_only["CPU"]["compute"] == 7 * MIB // 4


def test_a_line_runs_through_the_mean_at_each_token_count():
    steps = pd.DataFrame({"x": [10.0, 12.0, 30.0], "y": [4.0, 4.0, 4.0]}, index=[1, 2, 3])
    tokens = pd.Series([1.0, 1.0, 11.0], index=[1, 2, 3])
    lines = _fit(steps, tokens)
    assert lines["x"].at(1) == pytest.approx(11) and lines["x"].at(11) == pytest.approx(30)
    assert lines["y"] == Line(pytest.approx(4.0), pytest.approx(0.0))
    # one token count: a decode-only run costs per step, a prompt-only one per token
    assert _fit(steps.iloc[:2], tokens.iloc[:2])["x"] == Line(11.0, 0.0)
    assert _fit(steps.iloc[2:], tokens.iloc[2:])["x"].at(22) == pytest.approx(60)


def test_advise_keeps_what_fits_and_ranks_by_the_goal():
    model = _model()
    assert {(p.ngl, p.n_cpu_moe) for p in candidates(model)} == {(0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (3, 2)}
    advice = advise(model, {})
    rates = [row["decode_tokens_per_s"] for row in advice["best"]]
    assert rates == sorted(rates, reverse=True) and advice["not_fitting"] == 0
    best = advice["best"][0]
    assert best["flags"].startswith("-ngl 3 --n-cpu-moe 0")
    # GPU0 given too little for every layer: the best is one that fits
    tight = advise(model, {"GPU0": best["memory"]["GPU0"]["total"] - 1})
    assert tight["not_fitting"] >= 1 and all(
        row["memory"]["GPU0"]["total"] < best["memory"]["GPU0"]["total"] for row in tight["best"]
    )
    finding = advice_finding(model, advice)
    assert finding and "`-ngl 3 --n-cpu-moe 0`" in finding and "more on GPU0" in finding


def test_the_recorded_placement_is_shown_once_unless_other_settings_serve_it_better():
    # GIVEN advice over every placement, the recorded one among them as it ran (one thread count)
    model = _model()
    advice = advise(model, {}, top=10)
    ranked_again = [row for row in advice["best"] if row["recorded"]]
    assert len(ranked_again) == 1
    # WHEN the rows to show are taken
    rows = shown(advice, top=3)
    # THEN it comes first, as it ran, and is not among the others; they are the fastest
    assert rows[0] is advice["recorded"] and not any(row["recorded"] for row in rows[1:])
    assert [row["flags"] for row in rows[1:]] == [row["flags"] for row in advice["best"] if not row["recorded"]][:3]


def test_a_memory_budget_is_device_equals_size():
    assert memory_budget("CUDA0=8GiB, CPU=24GB") == {"CUDA0": 8 * 2**30, "CPU": 24 * 10**9}
    assert memory_budget("RPC0[127.0.0.1:50052]=512MiB") == {"RPC0[127.0.0.1:50052]": 512 * MIB}
    for bad in ("CUDA0", "CUDA0=lots", "=8GiB", "CUDA0=8XB"):
        with pytest.raises(argparse.ArgumentTypeError):
            memory_budget(bad)


def test_a_split_between_two_devices_gives_each_its_share_of_the_offloaded_blocks_in_order():
    # GIVEN a dense model measured on the CPU and two devices (its layer 1 on GPU1, the rest on GPU0)
    parts = {
        (INPUT, DENSE, "CPU"): Line(1, 0),
        (0, DENSE, "GPU0"): Line(4, 0),
        (1, DENSE, "GPU1"): Line(2, 0),
        (2, DENSE, "GPU0"): Line(4, 0),
        (3, DENSE, "GPU0"): Line(1, 0),
    }
    model = _model(
        n_layer=3,
        others=("GPU0", "GPU1"),
        parts={RECORDED: parts},
        has_experts=False,
        recorded=Placement(4, 0, 1, 1, 512, (0.75, 0.25)),
    )
    # WHEN the four offloaded blocks are split evenly, and 3 to 1 (llama.cpp: block i of n to the first
    # device whose cumulative share exceeds i / n)
    even = devices_of(model, Placement(4, split=(1, 1)))
    assert [even[(b, DENSE)] for b in range(INPUT, 4)] == ["CPU", "GPU0", "GPU0", "GPU1", "GPU1"]
    most = devices_of(model, Placement(4, split=(3, 1)))
    assert [most[(b, DENSE)] for b in range(INPUT, 4)] == ["CPU", "GPU0", "GPU0", "GPU0", "GPU1"]
    # THEN a step crosses at each change of device and back to the CPU
    assert boundaries_of(model, even) == 3
    assert boundaries_of(model, devices_of(model, Placement(2, split=(0, 1)))) == 2
    # AND a block moved to the other device costs there at the devices' ratio (GPU1's layers at half
    # GPU0's): layer 2 and the output on GPU1, layer 1 on GPU0
    row = predict_one(model, Placement(4, split=(1, 1)))
    assert row["decode_parts"]["GPU1"] == pytest.approx(4 * 0.5 + 1 * 0.5)
    assert row["decode_parts"]["GPU0"] == pytest.approx(4 + 2 * 2)
    assert row["flags"] == "-ngl 4 -ts 1,1" and row["layers_on"] == {"CPU": 0, "GPU0": 2, "GPU1": 1}


def test_override_tensor_moves_the_experts_its_pattern_names_and_refuses_anything_else():
    # GIVEN the two-layer model, whose experts' weights are exps0 and exps1
    model = _model()
    # WHEN a pattern names layer 1's experts for the CPU
    moved = experts_matching(model, r"exps1", "CPU")
    assert moved == ((1, "CPU"),)
    where = devices_of(model, Placement(3, experts_on=moved))
    # THEN those experts are on the CPU, the rest of their layer where -ngl put it, two more crossings
    assert where[(1, EXPERTS)] == "CPU" and where[(1, DENSE)] == "GPU0" and where[(0, EXPERTS)] == "GPU0"
    assert boundaries_of(model, where) == 4
    assert Placement(3, experts_on=moved).flags(("GPU0",), True).endswith("-ot <the experts of layers 1>=CPU")
    # AND a pattern naming other weights, none, or a device the run did not have is refused
    for pattern, device, said in (
        (r"attn", "CPU", "moves experts only"),
        (r"nothing", "CPU", "names none"),
        (r"exps", "CUDA7", "devices are"),
        (r"exps(", "CPU", "regular expression"),
    ):
        with pytest.raises(GgmlVizError, match=said):
            experts_matching(model, pattern, device)
