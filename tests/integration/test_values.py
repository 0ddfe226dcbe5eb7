"""Tensor values on the real SmolLM2 model: statistics against numpy, captured attention,
the capture byte cap, and the first NaN of a model with a poisoned weight."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import ggml_viz
from ggml_viz.commands import main
from ggml_viz.modelfile.layout import read_layout

from .conftest import RECORDERS
from .smollm2 import PROMPT, greedy, load_model

pytestmark = pytest.mark.model


@pytest.fixture(scope="module", params=RECORDERS)
def values_run(request, tmp_path_factory, model_path):
    path = tmp_path_factory.mktemp("values") / f"{request.param}.ggmlviz"
    with ggml_viz.record(path, recorder=request.param, values="stats", capture=["kq_soft_max-0", "ffn_out-3"]):
        text = greedy(load_model(model_path), n_predict=3)
    return ggml_viz.open(path), text


def test_statistics_match_numpy_on_the_captured_tensors(values_run):
    run, _ = values_run
    # every node's output was read, but views' (they share their source's bytes)
    assert len(run.values) == int(run.nodes["view_src_id"].isna().sum())
    values = run.values.set_index(["graph_id", "node_index"])
    assert set(run.captures["name"]) == {"kq_soft_max-0", "ffn_out-3"}
    for row in run.captures.itertuples():
        tensor = run.captured(row.graph_id, row.node_index).astype(np.float64)
        stats = values.loc[(row.graph_id, row.node_index)]
        assert stats["nan"] == 0 and stats["inf"] == 0 and stats["n"] == tensor.size
        for name, expected in (
            ("min", tensor.min()),
            ("max", tensor.max()),
            ("mean", tensor.mean()),
            ("std", tensor.std()),
            ("mean_abs", np.abs(tensor).mean()),
        ):
            assert stats[name] == pytest.approx(expected, rel=1e-5, abs=1e-7), name


def test_captured_softmax_sums_to_one_over_keys_with_the_causal_mask(values_run):
    run, _ = values_run
    prompt = run.captures[(run.captures["name"] == "kq_soft_max-0") & (run.captures["graph_id"] == 0)].iloc[0]
    weights = run.captured(0, int(prompt["node_index"]))[0]  # heads, queries, keys
    positions = run.tokens[run.tokens["graph_id"] == 0]["pos"].to_numpy()
    assert weights.shape[1] == len(positions) and weights.shape[0] == 9
    assert np.allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    for query, position in enumerate(positions):
        assert np.all(weights[:, query, position + 1 :] == 0)  # no query sees a later key
        assert np.all(weights[:, query, : position + 1] > 0)


def test_values_and_captures_never_change_the_text(values_run, recorded_run):
    _, text = values_run
    assert recorded_run.text.startswith(text)


def test_the_capture_byte_cap_is_kept_and_reported(tmp_path, model_path, recorded_run):
    path = tmp_path / "capped.ggmlviz"
    with ggml_viz.record(path, capture="kq_soft_max-*", capture_bytes=100_000):
        text = greedy(load_model(model_path))
    assert text == recorded_run.text
    run = ggml_viz.open(path)
    counts = run.manifest["counts"]
    assert 0 < counts["captured_bytes"] <= 100_000 == run.manifest["capture"]["values"]["capture_bytes"]
    assert counts["captured_bytes"] == int(run.captures["nbytes"].sum())
    assert counts["captures_skipped"] > 0 and counts["capture_bytes_skipped"] > 0
    path_npz = tmp_path / "attention.npz"
    assert main(["export", str(path), "-o", str(path_npz), "--tensors", "kq_soft_max-*"]) == 0
    archive = np.load(path_npz)
    meta = json.loads(str(archive["__meta__"]))
    assert set(meta) == {k for k in archive.files if k != "__meta__"} and len(meta) == counts["captured_tensors"]


def test_numerics_names_the_first_node_a_poisoned_weight_turns_into_nan(tmp_path, model_path, capsys):
    # GIVEN a copy of the model with one NaN in layer 5's attention norm weight (f32)
    poisoned = tmp_path / "poisoned.gguf"
    shutil.copyfile(model_path, poisoned)
    weight = next(t for t in read_layout(poisoned).tensors if t.name == "blk.5.attn_norm.weight")
    with open(poisoned, "r+b") as file:
        file.seek(weight.start + 4 * 7)
        file.write(np.array([np.nan], dtype="<f4").tobytes())
    # WHEN it runs with --values stats
    with ggml_viz.record(tmp_path / "poisoned.ggmlviz", values="stats"):
        greedy(load_model(poisoned), PROMPT, n_predict=1)
    # THEN numerics names the node that multiplied by it, and the weight it read
    assert main(["numerics", str(tmp_path / "poisoned.ggmlviz"), "--json"]) == 1
    found = json.loads(capsys.readouterr().out)
    assert (found["graph_id"], found["name"], found["op"]) == (0, "attn_norm-5", "MUL")
    assert found["nan"] > 0
    weight_source = next(s for s in found["sources"] if s["name"] == "blk.5.attn_norm.weight")
    assert weight_source["nan"] == 1 and weight_source["from"] == "model file"
    norm_source = next(s for s in found["sources"] if s["name"] == "norm-5")
    assert norm_source["nan"] == 0
