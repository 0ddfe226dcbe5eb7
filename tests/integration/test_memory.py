"""Where the bytes live, on the real SmolLM2 model: the file map, every weight read traced to
its bytes in the file (mapped or loaded), the KV cache, the compute buffer's allocator."""

from __future__ import annotations

import json
import shutil

import pytest
from gguf import GGUFReader

import ggml_viz
from ggml_viz.analysis.memory import kv_cache_fill, occupancy
from ggml_viz.commands.validate import validate_run
from ggml_viz.modelfile.layout import read_layout
from ggml_viz.runformat.schema import META_EXPERIMENT_ID, SPARSE_TABLES, TABLES

from .smollm2 import ggml_viz_cli, greedy, load_model

pytestmark = pytest.mark.model

REQUIRED_OPS = {"MUL_MAT", "ADD", "MUL", "RMS_NORM", "ROPE", "GET_ROWS", "SET_ROWS", "SOFT_MAX", "SWIGLU"}


def test_the_file_map_is_gguf_s_own(model_path):
    layout = read_layout(model_path)
    reader = GGUFReader(model_path)
    assert len(layout.tensors) == len(reader.tensors) == 272
    assert layout.data_offset == reader.data_offset
    by_name = {t.name: t for t in layout.tensors}
    for tensor in reader.tensors:
        mine = by_name[tensor.name]
        assert (mine.start, mine.nbytes) == (int(tensor.data_offset), int(tensor.n_bytes))
    assert sum(region.nbytes for region in layout.regions) == model_path.stat().st_size
    assert layout.problems == []


@pytest.fixture(scope="module", params=[True, False], ids=["mmap", "loaded"])
def memory_run(request, tmp_path_factory, model_path):
    path = tmp_path_factory.mktemp("memory") / "run.ggmlviz"
    with ggml_viz.record(path):
        greedy(load_model(model_path, use_mmap=request.param))
    return request.param, ggml_viz.open(path)


def test_every_weight_read_is_traced_to_its_bytes_in_the_file(memory_run, model_path):
    use_mmap, run = memory_run
    edges = run.edges
    weights = edges[edges["src_usage"] == "weights"]
    assert len(weights) > 0 and (weights["memory"] == "disk").all()
    assert weights["mmap"].all() == use_mmap and weights["mmap"].any() == use_mmap
    layout = read_layout(model_path)
    for row in weights.drop_duplicates("src_name").itertuples():
        tensor = layout.tensor(row.src_name)
        assert (row.file_offset, row.file_end) == (tensor.start, tensor.end)
        if use_mmap:  # the mapped buffer starts where tensor data starts in the file
            assert row.buffer_offset + layout.data_offset == tensor.start
    others = edges[edges["src_usage"] != "weights"]
    assert (others["memory"] == "buffer").all() and others["file_offset"].isna().all()
    assert validate_run(run) == []


def test_buffers_have_kinds_and_times(memory_run):
    _, run = memory_run
    buffers = run.buffers.set_index("kind")
    assert {"weights", "kv_cache", "compute"} <= set(buffers.index)
    graphs = run.graphs
    assert (run.buffers["first_seen_ns"] == graphs["start_ns"].min()).all()
    assert (run.buffers["last_seen_ns"] == graphs["end_ns"].max()).all()
    assert list(run.buffers["buffer"]) == list(range(len(run.buffers)))  # in order of first appearance


def test_thirty_kv_cache_layers_with_their_buffer_and_fill(memory_run):
    _, run = memory_run
    tensors = run.tensors
    cache = tensors[tensors["name"].str.match(r"^cache_[kv]_l\d+$")]
    assert set(cache["name"]) == {f"cache_{kv}_l{layer}" for kv in "kv" for layer in range(30)}
    assert set(cache["buffer_kind"]) == {"kv_cache"}
    fill = kv_cache_fill(run)
    assert fill["layer"].nunique() == 30
    last = fill[fill["graph_id"] == run.graphs["graph_id"].max()]
    positions = run.tokens["pos"].max() + 1
    assert (last["used"] == positions).all() and (last["capacity"] == 512).all()


def test_live_intermediates_never_share_bytes(memory_run):
    _, run = memory_run
    for graph_id in run.graphs["graph_id"]:
        table = occupancy(run, int(graph_id)).sort_values("start")
        assert len(table) > 500
        rows = list(table.itertuples())
        for index, a in enumerate(rows):
            for b in rows[index + 1 :]:
                if b.start >= a.end:
                    break  # sorted by start: no later tensor overlaps a's bytes
                # Bytes shared: one must be dead (last read) by the time the other is written.
                assert max(a.first_node, b.first_node) >= min(a.last_node, b.last_node), (a, b)


@pytest.mark.parametrize("n_predict", [1, 5])
def test_short_runs_hold_everything_and_validate(tmp_path, model_path, n_predict):
    path = tmp_path / f"run{n_predict}.ggmlviz"
    with ggml_viz.record(path):
        greedy(
            load_model(model_path), prompt="The" if n_predict == 1 else "The capital of France is", n_predict=n_predict
        )
    run = ggml_viz.open(path)
    assert REQUIRED_OPS <= set(run.nodes["op"])
    for _, nodes in run.nodes.groupby("graph_id"):
        assert set(nodes["layer"].dropna().astype(int)) == set(range(30))
    assert run.edges["src_name"].str.startswith("cache_k_l").any()  # KV cache reads
    assert run.memory_map["end"].max() == model_path.stat().st_size
    ids = {run.experiment_id}
    import pyarrow.parquet as pq

    for table in TABLES:
        if table in SPARSE_TABLES:  # a CPU run without RPC has none
            assert not (path / f"{table}.parquet").exists()
            continue
        ids.add(pq.read_schema(path / f"{table}.parquet").metadata[META_EXPERIMENT_ID].decode())
    assert ids == {run.experiment_id}
    result = ggml_viz_cli("validate", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "valid" in result.stdout


def test_validate_refuses_a_run_mixed_from_two_recordings(tmp_path, model_path):
    runs = []
    for name in ("a", "b"):
        with ggml_viz.record(tmp_path / f"{name}.ggmlviz"):
            greedy(load_model(model_path), n_predict=1)
        runs.append(tmp_path / f"{name}.ggmlviz")
    shutil.copy(runs[1] / "node_times.parquet", runs[0] / "node_times.parquet")
    result = ggml_viz_cli("validate", str(runs[0]), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert not report["valid"] and "different recordings" in report["problems"][0]


def test_validate_notices_a_changed_model_file(tmp_path, model_path):
    copy = tmp_path / "model.gguf"
    shutil.copy(model_path, copy)
    with ggml_viz.record(tmp_path / "c.ggmlviz"):
        greedy(load_model(copy), n_predict=1)
    assert ggml_viz_cli("validate", str(tmp_path / "c.ggmlviz")).returncode == 0
    original = copy.read_bytes()
    layout = read_layout(copy)
    metadata = next(region for region in layout.regions if region.kind == "metadata")
    # a changed metadata byte (the header is hashed in full), or changed last bytes of data
    for position in (metadata.start + metadata.nbytes // 2, len(original) - 4):
        changed = bytearray(original)
        changed[position] ^= 0xFF
        copy.write_bytes(bytes(changed))
        result = ggml_viz_cli("validate", str(tmp_path / "c.ggmlviz"))
        assert result.returncode == 1 and "changed since the recording" in result.stdout


def test_memmap_command(tmp_path, model_path):
    result = ggml_viz_cli("memmap", str(model_path), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert len(data["tensors"]) == 272 and data["regions"][-1]["end"] == model_path.stat().st_size
    assert {row["category"] for row in data["summary"]["category"]} == {"input", "attention", "ffn", "norm"}
    csv_file = tmp_path / "tensors.csv"
    result = ggml_viz_cli("memmap", str(model_path), "--csv", "-o", str(csv_file))
    assert result.returncode == 0 and len(csv_file.read_text().splitlines()) == 273
    table = ggml_viz_cli("memmap", str(model_path))
    assert "alignment padding" in table.stdout and "by category" in table.stdout
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(4))
    result = ggml_viz_cli("memmap", str(bad))
    assert result.returncode == 1 and "not a valid GGUF file" in result.stderr and "Traceback" not in result.stderr


def test_views_write_no_bytes_in_the_statistics(recorded_run):
    from ggml_viz.ui.run_view import RunView

    # GIVEN a real run's statistics by op
    by_op = {row["op"]: row for row in RunView("r0", recorded_run.path).statistics["by_op"]}
    # THEN views, reshapes and permutes, which only look at their source's bytes, write none
    views = [op for op in ("VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE") if op in by_op]
    assert views and all(by_op[op]["bytes"] == 0 for op in views)
    # AND the ops that compute write their outputs
    assert by_op["MUL_MAT"]["bytes"] > 0 and by_op["ADD"]["bytes"] > 0
    assert abs(sum(row["bytes_share"] for row in by_op.values()) - 1.0) < 1e-9


def test_bytes_read_are_the_rows_a_get_rows_gathers_and_nothing_for_views(recorded_run):
    from ggml_viz.analysis.breakdowns import weight_reads

    run = recorded_run.run
    edges = run.edges.merge(run.graphs[["graph_id", "n_tokens", "phase"]], on="graph_id")
    nodes = run.nodes[["graph_id", "node_index", "op"]]
    edges = edges.merge(nodes, on=["graph_id", "node_index"])
    # GIVEN the token embedding: a table of one row per vocabulary entry
    layout = read_layout(run.manifest["model"]["path"])
    table = layout.tensor("token_embd.weight")
    row_bytes = table.nbytes // table.shape[1]
    # THEN its GET_ROWS reads one row per token of the graph's batch
    gathers = edges[(edges.op == "GET_ROWS") & (edges.src_name == "token_embd.weight")]
    assert len(gathers) == len(run.graphs)
    assert (gathers.src_bytes_read == gathers.n_tokens * row_bytes).all()
    # AND views read nothing
    assert (edges.loc[edges.op.isin(["VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"]), "src_bytes_read"] == 0).all()
    # AND a decode step reads each weight of the file once, whole, and the embedding tied to the
    # output once more for its one row: the memory traffic of a step is the model's size, not more
    assert weight_reads(run)["weight_bytes_per_graph"] == sum(t.nbytes for t in layout.tensors) + row_bytes


def test_the_disk_track_shows_the_exact_rows_each_lookup_read(recorded_run):
    from ggml_viz.analysis.memory import gathered_rows
    from ggml_viz.ui.run_view import RunView

    run = recorded_run.run
    reader = GGUFReader(run.manifest["model"]["path"])
    table = next(t for t in reader.tensors if t.name == "token_embd.weight")
    row_bytes = int(table.n_bytes) // int(table.shape[1])
    # GIVEN the tokens the run fed (each graph's batch), counted by id
    fed = run.tokens.groupby("token_id").size()
    # THEN the rows gathered are those tokens' rows, each as often as it was fed ...
    rows = gathered_rows(run)
    assert set(rows.name) == {"token_embd.weight"}
    assert rows.set_index("row")["reads"].sort_index().equals(fed.sort_index().rename("reads"))
    # ... at its exact bytes in the file, as gguf's reader places the table
    file_start = int(table.data_offset)  # gguf's reader gives it from the file's start
    assert (rows.start == file_start + rows.row * row_bytes).all() and (rows.end - rows.start == row_bytes).all()
    # AND the memory view's disk track carries them, and the table's row count and bytes
    disk = RunView("r0", recorded_run.path).disk_track["files"][0]
    assert sorted(disk["rows"]["start"]) == disk["rows"]["start"] == sorted(rows.start.tolist())
    regions = disk["regions"]
    embedding = regions["name"].index("token_embd.weight")
    assert regions["rows_read"][embedding] == len(fed)
    assert regions["row_bytes_read"][embedding] == len(fed) * row_bytes
    others = [i for i, kind in enumerate(regions["kind"]) if kind == "tensor" and i != embedding]
    assert all(regions["rows_read"][i] == -1 for i in others)


def test_the_bytes_an_embedding_lookup_moves_are_its_rows_ids_and_output(recorded_run):
    from ggml_viz.analysis.flops import node_costs

    run = recorded_run.run
    layout = read_layout(run.manifest["model"]["path"])
    table = layout.tensor("token_embd.weight")
    row_bytes, n_embd = table.nbytes // table.shape[1], table.shape[0]
    # GIVEN each graph's embedding lookup (the GET_ROWS reading the token embedding)
    lookups = run.edges[run.edges.src_name == "token_embd.weight"].merge(
        run.nodes[["graph_id", "node_index", "op"]], on=["graph_id", "node_index"]
    )
    lookups = lookups[lookups.op == "GET_ROWS"].merge(run.raw("graphs")[["graph_id", "n_tokens"]], on="graph_id")
    costs = node_costs(run).set_index(["structure_id", "node_index"])["bytes"]
    # THEN per token it moves one row of the table read, one int32 id read, one f32 embedding written
    moved = costs.loc[list(zip(lookups.structure_id, lookups.node_index, strict=True))].to_numpy()
    assert len(moved) == len(run.graphs)
    assert (moved == lookups.n_tokens.to_numpy() * (row_bytes + 4 + 4 * n_embd)).all()
