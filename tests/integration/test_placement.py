"""Other flags predicted from one run of the real llama.cpp: a Qwen 3 MoE model written with gguf's
writer, its experts split between the CPU and an RPC worker standing in for a GPU (`--n-cpu-moe`),
and a Gemma 3 model on the CPU alone at other thread counts. The recorded placement's prediction
is held against the rates of its own steps; the memory of other placements against what llama.cpp
itself reports for them (its memory breakdown, `-v`)."""

from __future__ import annotations

import json
import re
import signal

import pytest

from ..machine_limits import keep_in_run, twice_as_fast_at_two_threads
from .arch_models import write_model
from .moe_models import write_moe_model
from .native import llama_tool, untraced
from .rpc_workers import start_worker
from .smollm2 import ggml_viz_cli

pytestmark = pytest.mark.model

PROMPT = "The history of the printing press begins in the fifteenth century, when the goldsmith of Mainz"
MIB = 2**20


def _completion(model, *flags: str, n_predict: int = 8) -> list[str]:
    return [
        str(llama_tool("llama-completion")),
        "-m",
        str(model),
        *flags,
        "-p",
        PROMPT,
        "-n",
        str(n_predict),
        "--temp",
        "0",
        "--ignore-eos",
        "-no-cnv",
        "-t",
        "1",
        "-c",
        "1024",
    ]


def _buffers(stderr: str) -> dict[str, dict[str, float]]:
    """What llama.cpp says it allocated (`-v`: the last line of each buffer, in MiB): per device
    (the CPU's buffers, CPU_Mapped and the like, as `CPU`; a worker by its name, RPC0), its
    weights, KV cache and compute buffer."""
    last: dict[tuple[str, str], float] = {}  # (a first pass, llama.cpp's fit, says 0.00 for each)
    kinds = {"model": "weights", "KV": "kv_cache", "compute": "compute"}
    for line in stderr.splitlines():
        match = re.search(
            r"(?:load_tensors|llama_kv_cache|sched_reserve):\s+(\S+) (model|KV|compute) buffer size "
            r"=\s+([\d.]+) MiB",
            line,
        )
        if match:
            name, kind, size = match.groups()
            last[(name, kinds[kind])] = float(size)
    devices: dict[str, dict[str, float]] = {}
    for (name, kind), size in last.items():
        device = "CPU" if name.startswith("CPU") else name.split("[")[0]
        held = devices.setdefault(device, {"weights": 0.0, "kv_cache": 0.0, "compute": 0.0})
        held[kind] += size
    return devices


@pytest.fixture(scope="module")
def moe_split(tmp_path_factory):
    """A Qwen 3 MoE model (4 layers of 16 experts, n_embd 512) at `-ngl 99 --n-cpu-moe 2` over a
    recorded worker, joined."""
    folder = tmp_path_factory.mktemp("moe-placement")
    model = folder / "moe.gguf"
    write_moe_model(model, "qwen3moe", n_layers=4, n_embd=512, n_expert=16, n_ff_exp=512)
    worker = start_worker(folder, "worker")
    try:
        head = folder / "head.ggmlviz"
        command = _completion(model, "--rpc", worker.endpoint, "-ngl", "99", "--n-cpu-moe", "2", n_predict=16)
        traced = ggml_viz_cli("run", "-o", str(head), "--", *command)
    finally:
        assert worker.stop() == 128 + signal.SIGTERM, worker.log.read_text()[-2000:]
    assert traced.returncode == 0, traced.stderr[-2000:]
    joined = folder / "split.joined"
    done = ggml_viz_cli("join", str(head), str(worker.output), "-o", str(joined))
    assert done.returncode == 0, done.stderr
    return model, joined, folder


def test_n_cpu_moe_is_predicted_from_a_split_run_with_llama_cpps_own_memory(moe_split):
    model, joined, folder = moe_split
    # WHEN other --n-cpu-moe values are asked for
    result = ggml_viz_cli("whatif", str(joined), "--n-cpu-moe", "0,4", "--json")
    assert result.returncode == 0, result.stderr
    prediction = json.loads(result.stdout)
    # THEN the recorded placement is read from the run: every block on the worker, the first two
    # layers' experts on the CPU
    assert prediction["recorded_placement"]["ngl"] == 5 and prediction["recorded_placement"]["n_cpu_moe"] == 2
    assert "--n-cpu-moe 2" in prediction["recorded"]
    # AND its predicted rates are the rates its own warm steps ran at, within 3 %
    for phase in ("prompt", "decode"):
        assert prediction["check"][phase]["ratio"] == pytest.approx(1, abs=0.03), prediction["check"]
    rows = {row["n_cpu_moe"]: row for row in prediction["predictions"]}
    assert rows[2]["recorded"] and rows[2]["cpu_expert_layers"] == 2 and rows[4]["cpu_expert_layers"] == 4
    # AND experts held apart cost two crossings a layer; all on the worker, only the two of the split
    assert (rows[0]["crossings"], rows[2]["crossings"], rows[4]["crossings"]) == (2, 6, 10)
    # AND each placement's memory is what llama.cpp reports for it, within 5 % per device
    worker = start_worker(folder, "plain", recorded=False)
    try:
        for n_cpu_moe, row in rows.items():
            told = untraced(
                _completion(
                    model, "--rpc", worker.endpoint, "-ngl", "99", "--n-cpu-moe", str(n_cpu_moe), "-v", n_predict=1
                )
            )
            assert told.returncode == 0, told.stderr[-2000:]
            allocated = _buffers(told.stderr)
            predicted = {device.split("[")[0]: memory for device, memory in row["memory"].items()}  # (its port)
            assert set(allocated) == set(predicted), (allocated, predicted)
            for device, theirs in allocated.items():
                ours = {part: n / MIB for part, n in predicted[device].items()}
                said = (n_cpu_moe, device, ours, theirs)
                # weights and KV cache within 5 %; a compute buffer is estimated (a third off on a buffer
                # of 3 MiB here): the total within 10 %
                assert ours["weights"] == pytest.approx(theirs["weights"], rel=0.05, abs=0.05), said
                assert ours["kv_cache"] == pytest.approx(theirs["kv_cache"], rel=0.05, abs=0.05), said
                assert ours["compute"] == pytest.approx(theirs["compute"], rel=0.35), said
                assert ours["total"] == pytest.approx(sum(theirs.values()), rel=0.10), said
    finally:
        worker.stop()
    # AND moving experts to the worker moves their bytes there
    other = next(k for k in rows[0]["memory"] if k != "CPU")
    held = [rows[n]["memory"][other]["weights"] for n in (0, 2, 4)]
    assert held == sorted(held, reverse=True) and held[0] > held[2]


def test_advise_says_which_flags_and_refuses_what_does_not_fit(moe_split):
    _, joined, _ = moe_split
    # WHEN advise is asked, with no limit but the CPU's
    result = ggml_viz_cli("advise", str(joined), "--json", "--top", "3")
    assert result.returncode == 0, result.stderr
    advice = json.loads(result.stdout)
    # THEN it prints flags as llama.cpp spells them, fastest decode first
    best = advice["best"]
    assert best and all(row["flags"].startswith("-ngl ") and "--n-cpu-moe" in row["flags"] for row in best)
    rates = [row["decode_tokens_per_s"] for row in best]
    assert rates == sorted(rates, reverse=True)
    # AND with the worker given less than every expert needs, nothing it picks needs more
    other = next(k for k in advice["recorded"]["memory"] if k != "CPU")
    full = max(row["memory"][other]["total"] for row in best)
    tight = ggml_viz_cli("advise", str(joined), "--json", "--memory", f"{other}={full - MIB}B")
    assert tight.returncode == 0, tight.stderr
    limited = json.loads(tight.stdout)
    assert limited["not_fitting"] >= 1
    assert all(row["memory"][other]["total"] <= full - MIB for row in limited["best"])
    # AND the table says what is left out
    text = ggml_viz_cli("advise", str(joined))
    assert text.returncode == 0 and "left out:" in text.stdout and "the recorded placement:" in text.stdout


def test_threads_are_predicted_from_the_limits_at_them(tmp_path):
    # GIVEN a Gemma 3 model (sliding-window attention) recorded on the CPU at one thread, with limits
    # at one and two threads kept in the run (made by hand: two threads twice as fast at everything)
    model = tmp_path / "gemma3.gguf"
    write_model(model, "gemma3", n_layers=6, n_embd=256, n_ff=1024)
    run = tmp_path / "cpu.ggmlviz"
    done = ggml_viz_cli("run", "-o", str(run), "--", *_completion(model, n_predict=12))
    assert done.returncode == 0, done.stderr[-2000:]
    keep_in_run(run, twice_as_fast_at_two_threads())
    # WHEN two threads and smaller prompt steps are asked for
    result = ggml_viz_cli("whatif", str(run), "-t", "1,2", "-ub", "4,512", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["predictions"]
    one = next(r for r in rows if r["threads"] == 1 and r["ubatch"] == 512)
    two = next(r for r in rows if r["threads"] == 2 and r["ubatch"] == 512)
    # THEN each CPU node takes half its time at two threads (its step the same at both), the host's the same
    assert two["decode_parts"]["CPU"] == pytest.approx(one["decode_parts"]["CPU"] / 2, rel=0.01)
    assert two["decode_parts"]["fixed"] == pytest.approx(one["decode_parts"]["fixed"])
    # AND a prompt cut into steps of 4 tokens is predicted slower than in one step
    small = next(r for r in rows if r["threads"] == 1 and r["ubatch"] == 4)
    assert small["prompt_tokens_per_s"] < one["prompt_tokens_per_s"]
    # AND threads the limits were not measured at are refused with the command that measures them
    refused = ggml_viz_cli("whatif", str(run), "-t", "3")
    assert refused.returncode == 1 and "ggml-viz limits --threads" in refused.stderr
    # AND the summary carries the check of the recorded placement, and the best found: two threads
    summary = json.loads(ggml_viz_cli("summary", str(run), "--json").stdout)
    placement = summary["placement"]
    assert placement["check"]["decode"]["ratio"] == pytest.approx(1, abs=0.03)
    assert placement["best_flags"].startswith("-t 2 -tb 2")
    assert any("`-t 2 -tb 2" in finding for finding in summary["findings"])
