"""FLOPs, findings and exporter lookup on a synthetic run."""

from __future__ import annotations

from pathlib import Path

import pytest

import ggml_viz
from ggml_viz._errors import CommandError
from ggml_viz.analysis.components import component_of, component_of_weight
from ggml_viz.analysis.findings import BUILTIN_FINDINGS, Finding, FindingContext, findings
from ggml_viz.analysis.flops import node_costs, throughput_by_op
from ggml_viz.analysis.summary import summarize
from ggml_viz.export import exporter_for
from ggml_viz.runformat.synthetic import write_synthetic_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return ggml_viz.open(write_synthetic_run(tmp_path_factory.mktemp("a") / "s.ggmlviz", graphs=12, layers=3))


def test_matmul_flops_are_two_k_n_m_and_bytes_count_sources_and_output(run):
    costs = node_costs(run).set_index("node_index")
    q0 = costs.loc[3]  # Qcur-0: a 576x256 weight (K = 576) times a 576-vector, output 576x1
    assert q0["op"] == "MUL_MAT" and q0["flops"] == 2 * 576 * 576 * 1
    assert q0["bytes"] == (1 << 16) + 2304 + 2304  # the weight, the activation, the output
    add = costs[costs["op"] == "ADD"].iloc[0]
    assert add["flops"] == 576  # one per output element


def test_throughput_is_work_over_time(run):
    table = throughput_by_op(run).set_index("op")
    row = table.loc["MUL_MAT"]
    assert row["gflop_per_s"] == pytest.approx(row["flops"] / 1e9 / (row["time_ns"] / 1e9))
    assert row["flops_per_byte"] == pytest.approx(row["flops"] / row["bytes"])


def test_findings_name_the_costliest_tensor_and_components(run):
    said = findings(run)
    assert any(text.startswith("MUL_MAT in ffn_") for text in said)  # the synthetic FFN matmuls cost most
    assert any(text.startswith("By component (decode): ffn") for text in said)


class DecodeGraphs(Finding):
    name = "decode-graphs"

    def find(self, run, context: FindingContext) -> list[str]:
        decode = context.phases.set_index("phase").loc["decode", "graphs"]
        return [f"{decode} decode graphs."]


class DecodeSection(DecodeGraphs):
    name = "decode-section"
    title = "decode"


def test_the_findings_are_a_list_callers_extend(run, monkeypatch):
    # GIVEN one more finding among the findings and one with a section of its own
    extended = [*BUILTIN_FINDINGS, DecodeGraphs(), DecodeSection()]
    monkeypatch.setattr("ggml_viz.analysis.findings.BUILTIN_FINDINGS", extended)
    # WHEN the findings are made
    said, summary = findings(run), summarize(run)
    # THEN the untitled one follows the built-ins' findings; the titled one is a section
    assert said[-1] == "11 decode graphs." and said[:-1] == findings_before(run)
    assert summary["findings"][-1] == "11 decode graphs."
    assert summary["sections"] == [{"title": "decode", "lines": ["11 decode graphs."], "source": "built-in"}]


def findings_before(run) -> list[str]:
    return [line for finding in BUILTIN_FINDINGS for line in finding.find(run, FindingContext.of(run))]


@pytest.mark.parametrize(
    ("name", "component"),
    [
        ("Qcur-3", "attention"),
        ("kq_soft_max-0", "attention"),
        ("ffn_up-2", "ffn"),
        ("attn_norm-1", "norm"),
        ("result_output", "output"),
        ("embd", "input"),
        ("l_out-4", "other"),
    ],
)
def test_components(name, component):
    assert component_of(name) == component


@pytest.mark.parametrize(
    ("weight", "component"),
    [
        ("blk.3.attn_output.weight", "attention"),
        ("blk.0.attn_q.bias", "attention"),
        ("blk.7.ffn_down.weight", "ffn"),
        ("blk.1.attn_q_norm.weight", "norm"),
        ("blk.2.post_ffw_norm.weight", "norm"),
        ("output.weight", "output"),
        ("token_embd.weight", "embedding"),
        ("enc.blk.0.ffn_up.weight", "ffn"),
        ("rope_freqs.weight", None),
        ("cache_k_l0", None),
    ],
)
def test_a_weights_component_comes_from_its_gguf_name(weight, component):
    assert component_of_weight(weight) == component


def test_exporters_are_found_by_name_or_longest_ending():
    assert exporter_for(None, Path("a.speedscope.json")).name == "speedscope"
    assert exporter_for(None, Path("a.json")).name == "chrome-json"
    assert exporter_for(None, Path("a.timeline.png")).name == "timeline-png"
    assert exporter_for(None, Path("a.png")).name == "png"
    assert exporter_for("perfetto", Path("whatever")).name == "perfetto"
    with pytest.raises(CommandError, match="unknown format"):
        exporter_for("pdf", Path("a.pdf"))
    with pytest.raises(CommandError, match="cannot tell the format"):
        exporter_for(None, Path("a.pdf"))


@pytest.mark.parametrize(
    ("buffer_types", "named"),
    [
        (["CPU", "CPU_Mapped", "CPU_REPACK"], ["CPU"]),
        (["CPU", "CUDA_Host", "CUDA0"], ["CPU", "CUDA0"]),  # the pinned host buffers are no device
        (["CUDA_Host", "CUDA0", "CUDA1", "CUDA_Split"], ["CUDA0", "CUDA1"]),
        (["Vulkan_Host", "Vulkan0", "CPU_Mapped"], ["CPU", "Vulkan0"]),
        (["Metal", "Metal_Mapped"], ["Metal"]),
    ],
)
def test_each_device_is_named_once_by_its_backend(buffer_types, named):
    from ggml_viz.analysis.breakdowns import backend_names

    assert backend_names(buffer_types) == named


def test_a_server_s_requests_are_told_apart_per_sequence(tmp_path):
    from ggml_viz.analysis.breakdowns import requests
    from ggml_viz.analysis.summary import summarize

    # GIVEN graphs taking turns among three sequences (each sequence's first graph its prompt)
    run = ggml_viz.open(write_synthetic_run(tmp_path / "server.ggmlviz", graphs=12, layers=1, sequences=3))
    # THEN each sequence is a request: its prompt token, then the tokens it generated
    served = requests(run)
    assert [(r["seq_id"], r["prompt"], r["generated"]) for r in served] == [
        (0, " t0", " t3 t6 t9"),
        (1, " t1", " t4 t7 t10"),
        (2, " t2", " t5 t8 t11"),
    ]
    summary = summarize(run)
    assert summary["n_requests"] == 3 and summary["prompt"] == "" and summary["generated_text"] is None
    # AND one sequence alone gives the run's prompt and generated text
    single = summarize(ggml_viz.open(write_synthetic_run(tmp_path / "one.ggmlviz", graphs=4, layers=1)))
    assert (single["prompt"], single["generated_text"], single["n_requests"]) == (" t0", " t1 t2 t3", 1)
