"""Attaching without code changes, surviving a kill, and the command line's answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import ggml_viz
from ggml_viz._errors import RunFormatError

from .smollm2 import PROMPT, ggml_viz_cli, run_python

pytestmark = pytest.mark.model

PLAIN_SCRIPT = textwrap.dedent(
    """
    import sys
    from llama_cpp import Llama
    llm = Llama(model_path=sys.argv[1], n_ctx=512, n_threads=2, verbose=False)
    out = llm(sys.argv[2], max_tokens=int(sys.argv[3]), temperature=0.0)
    print(out["choices"][0]["text"])
    """
)


def test_environment_variable_records_an_unchanged_program(tmp_path, model_path):
    # GIVEN a plain llama-cpp-python script that knows nothing of ggml-viz
    script = tmp_path / "app.py"
    script.write_text(PLAIN_SCRIPT)
    output = tmp_path / "env.ggmlviz"
    # WHEN it runs with GGML_VIZ_OUTPUT set
    result = subprocess.run(
        [sys.executable, str(script), str(model_path), PROMPT, "3"],
        env={**os.environ, "GGML_VIZ_OUTPUT": str(output), "GGML_VIZ_VERBOSE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    # THEN the program ran as usual and a complete run exists
    assert result.returncode == 0, result.stderr
    assert "recording context 0" in result.stderr
    run = ggml_viz.open(output)
    assert run.status == "complete"
    assert len(run.graphs) == 3
    assert run.manifest["recorder"]["argv"][0] == str(script)


def test_disable_variable_turns_recording_off(tmp_path, model_path):
    script = tmp_path / "app.py"
    script.write_text(PLAIN_SCRIPT)
    output = tmp_path / "off.ggmlviz"
    env = {**os.environ, "GGML_VIZ_OUTPUT": str(output), "GGML_VIZ_DISABLE": "1"}
    result = subprocess.run([sys.executable, str(script), str(model_path), PROMPT, "2"], env=env, timeout=300)
    assert result.returncode == 0
    assert not output.exists()


def test_startup_hook_does_not_import_llama_cpp():
    result = run_python(
        "import sys; import json; print(json.dumps(['llama_cpp' in sys.modules, 'ggml_viz' in sys.modules]))",
        env={"GGML_VIZ_OUTPUT": "/nonexistent/never-written.ggmlviz"},
    )
    assert json.loads(result.stdout) == [False, True]
    result = run_python("import sys; print('ggml_viz' in sys.modules)", env={"GGML_VIZ_OUTPUT": ""})
    assert result.stdout.strip() == "False"


def test_killed_recording_keeps_every_finished_graph(tmp_path, model_path):
    # GIVEN a long generation being recorded through the environment variable
    script = tmp_path / "app.py"
    script.write_text(PLAIN_SCRIPT)
    output = tmp_path / "killed.ggmlviz"
    env = {**os.environ, "GGML_VIZ_OUTPUT": str(output)}
    process = subprocess.Popen([sys.executable, str(script), str(model_path), PROMPT, "400"], env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (output / "manifest.json").exists() and len(ggml_viz.open(output).graphs) >= 3:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the recording never got going")
        # WHEN the process is killed mid-generation
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    # THEN the run opens, says it is incomplete, and every graph in it is whole
    run = ggml_viz.open(output)
    assert run.status == "incomplete"
    assert len(run.graphs) >= 3
    per_graph = run.nodes.groupby("graph_id").size()
    assert (per_graph == run.graphs.set_index("graph_id")["n_nodes"]).all()
    assert set(run.edges["graph_id"]) <= set(run.graphs["graph_id"])


def test_record_command_records_and_summarizes(tmp_path, model_path):
    output = tmp_path / "cli.ggmlviz"
    result = ggml_viz_cli("record", "-p", PROMPT, "-n", "3", "-t", "2", "--seed", "7", "-o", str(output))
    assert result.returncode == 0, result.stderr
    assert f"run written to {output}" in result.stdout
    assert "time by op" in result.stdout and "MUL_MAT" in result.stdout
    run = ggml_viz.open(output)
    assert run.manifest["generation"]["seed"] == 7
    assert run.manifest["generation"]["generated_text"]
    summary = ggml_viz_cli("summary", str(output), "--json")
    assert summary.returncode == 0, summary.stderr
    data = json.loads(summary.stdout)
    assert data["experiment_id"] == run.experiment_id
    assert data["graphs"] == 3
    assert data["prompt"] == PROMPT
    assert {row["phase"] for row in data["phases"]} == {"prompt", "decode"}
    assert data["time_by_op"][0]["op"] == "MUL_MAT"
    assert {row["kind"] for row in data["memory_by_buffer"]} == {"weights", "compute", "kv_cache"}
    assert data["kv_cache"]["layers"] == 30 and data["weight_reads"]["weights_from_mmap"]


def test_run_command_wraps_a_program(tmp_path, model_path):
    script = tmp_path / "app.py"
    script.write_text(PLAIN_SCRIPT)
    output = tmp_path / "wrapped.ggmlviz"
    program = [sys.executable, str(script), str(model_path), PROMPT, "2"]
    expected = subprocess.run(program, capture_output=True, text=True, timeout=300)
    result = ggml_viz_cli("run", "-o", str(output), "--", *program)
    assert result.returncode == 0, result.stderr
    # the program's stdout byte for byte: ggml-viz speaks on stderr
    assert expected.stdout.strip() and result.stdout == expected.stdout
    assert "run written to" in result.stderr
    assert len(ggml_viz.open(output).graphs) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["record", "-m", "/no/such/model.gguf", "-o", "{tmp}/x.ggmlviz"], "model file not found"),
        (["record", "-m", "{tmp}/not-a-model.gguf", "-o", "{tmp}/x.ggmlviz"], "is not a GGUF model file"),
        (["record", "-o", "/proc/forbidden.ggmlviz"], "cannot write the run"),
        (["record", "-n", "zero"], "is not a whole number"),
        (["summary", "{tmp}/nothing-here"], "is not a run directory"),
        (["run", "-o", "{tmp}/x.ggmlviz"], "no program given"),
        (["run", "-o", "{tmp}/x.ggmlviz", "--", "no-such-program-xyz"], "program not found"),
    ],
)
def test_user_mistakes_get_one_clear_line(tmp_path, args, message):
    (tmp_path / "not-a-model.gguf").write_text("this is not a model")
    result = ggml_viz_cli(*[arg.replace("{tmp}", str(tmp_path)) for arg in args], cwd=tmp_path)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0]  # argparse puts a usage text above it


def test_a_run_mixed_from_two_recordings_is_refused(tmp_path, recorded_run):
    import shutil

    mixed = tmp_path / "mixed.ggmlviz"
    shutil.copytree(recorded_run.path, mixed)
    other = tmp_path / "other.ggmlviz"
    with ggml_viz.record(other):
        pass
    shutil.copy(other / "manifest.json", mixed / "manifest.json")
    with pytest.raises(RunFormatError, match="mixes files of different recordings"):
        ggml_viz.open(mixed)


def test_record_command_takes_the_capture_options(tmp_path, model_path):
    output = tmp_path / "options.ggmlviz"
    result = ggml_viz_cli(
        "record", "-n", "3", "--ops", "MUL_MAT", "--layers", "0-1", "--max-events", "5000", "-o", str(output)
    )
    assert result.returncode == 0, result.stderr
    run = ggml_viz.open(output)
    capture = run.manifest["capture"]
    assert capture["selection"] == {"ops": ["MUL_MAT"], "layers": [[0, 1]], "no_layer": False, "names": []}
    assert capture["max_events"] == 5000
    timed = run.nodes[run.nodes["timed"]]
    assert set(timed["op"]) == {"MUL_MAT"} and set(timed["layer"].astype(int)) <= {0, 1}


def test_run_command_passes_the_capture_options_to_the_program(tmp_path, model_path):
    script = tmp_path / "app.py"
    script.write_text(PLAIN_SCRIPT)
    output = tmp_path / "graph.ggmlviz"
    result = ggml_viz_cli(
        "run", "--detail", "graph", "-o", str(output), "--", sys.executable, str(script), str(model_path), PROMPT, "2"
    )
    assert result.returncode == 0, result.stderr
    assert set(ggml_viz.open(output).graphs["detail"]) == {"graph"}


def test_run_command_refuses_bad_capture_options_before_starting(tmp_path):
    result = ggml_viz_cli("run", "--layers", "9-2", "-o", str(tmp_path / "x.ggmlviz"), "--", sys.executable, "-c", "1")
    assert result.returncode == 2
    assert "runs backwards" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x.ggmlviz").exists()
