"""Settings in a file: found from the working directory up, checked with one clear error,
and ranked below the command line and the environment (`ggml-viz config` says which won)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz._errors import CommandError
from ggml_viz.capture.settings import CAPTURE_SETTINGS, settings_from_environment
from ggml_viz.commands import main
from ggml_viz.commands.config_file import find_config_file, key_lines, load_config_file, load_configuration

from .test_settings_table import NOT_DEFAULT

SRC = str(Path(ggml_viz.__file__).parents[1])


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder, the home folder above nothing else, and no GGML_VIZ_* variable set."""
    for name in list(os.environ):
        if name.startswith("GGML_VIZ_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    root = tmp_path / "project"
    root.mkdir()
    return root


def config_json(*argv: str, cwd: Path, monkeypatch, capsys) -> dict:
    monkeypatch.chdir(cwd)
    assert main(["config", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def config_error(*argv: str, cwd: Path, monkeypatch, capsys) -> str:
    monkeypatch.chdir(cwd)
    assert main(["config", *argv]) == 2
    return capsys.readouterr().err.strip()


def ggml_viz_cli(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GGML_VIZ_")}
    base.update(PYTHONPATH=SRC, HOME=str(cwd.parents[0]), **(env or {}))
    command = [sys.executable, "-m", "ggml_viz", *argv]
    return subprocess.run(command, cwd=cwd, env=base, capture_output=True, text=True, timeout=120)


# Finding the file


def test_the_file_is_found_from_a_subdirectory(project, monkeypatch, capsys):
    # GIVEN a ggml-viz.toml at the project's root, and a working directory two folders down
    write(project / "ggml-viz.toml", 'detail = "graph"\n')
    below = project / "src" / "deep"
    below.mkdir(parents=True)
    # WHEN the settings are asked for there
    shown = config_json(cwd=below, monkeypatch=monkeypatch, capsys=capsys)
    # THEN the root's file gives its value, and says where it is
    assert shown["file"] == str(project / "ggml-viz.toml")
    assert shown["settings"]["detail"] == {"value": "graph", "source": "ggml-viz.toml:1"}


def test_the_nearest_folder_wins_and_ggml_viz_toml_comes_before_pyproject(project):
    write(project / "ggml-viz.toml", 'detail = "graph"\n')
    write(project / "pyproject.toml", '[tool.ggml-viz]\ndetail = "op"\n')
    write(project / "app" / "pyproject.toml", '[project]\nname = "app"\n')  # no [tool.ggml-viz]: passed over
    write(project / "lib" / "pyproject.toml", "[tool.ggml-viz]\nsample = 2\n")
    assert find_config_file(project, home=project.parent) == project / "ggml-viz.toml"
    assert find_config_file(project / "app", home=project.parent) == project / "ggml-viz.toml"
    assert find_config_file(project / "lib", home=project.parent) == project / "lib" / "pyproject.toml"


def test_the_search_stops_at_the_home_folder(project):
    home = project / "home"
    (home / "work").mkdir(parents=True)
    write(project / "ggml-viz.toml", 'detail = "graph"\n')  # above home: not looked at
    assert find_config_file(home / "work", home=home) is None


def test_pyprojects_tool_table_is_read_with_its_viewer_table(project, monkeypatch, capsys):
    # GIVEN the settings in pyproject.toml, below the project's own tables
    write(
        project / "pyproject.toml",
        """
        [project]
        name = "app"

        [tool.ggml-viz]
        sample = 8
        ops = "MUL_MAT,ROPE"

        [tool.ggml-viz.viewer]
        port = 9000
        """,
    )
    # WHEN the settings are asked for
    settings = config_json(cwd=project, monkeypatch=monkeypatch, capsys=capsys)["settings"]
    # THEN each value names its line in pyproject.toml
    assert settings["sample"] == {"value": 8, "source": "pyproject.toml:5"}
    assert settings["ops"] == {"value": "MUL_MAT,ROPE", "source": "pyproject.toml:6"}
    assert settings["viewer.port"] == {"value": 9000, "source": "pyproject.toml:9"}
    assert settings["viewer.host"] == {"value": "127.0.0.1", "source": "default"}


def test_config_names_the_file_and_overrides_the_search(project, monkeypatch, capsys):
    write(project / "ggml-viz.toml", 'detail = "graph"\nsample = 2\n')
    other = write(project.parent / "ci.toml", "# for CI\n\nsample = 16\n")
    shown = config_json("--config", str(other), cwd=project, monkeypatch=monkeypatch, capsys=capsys)
    assert shown["file"] == str(other)
    assert shown["settings"]["sample"] == {"value": 16, "source": "ci.toml:3"}
    assert shown["settings"]["detail"]["source"] == "default"  # the found file is not read at all


def test_a_missing_config_file_is_one_error(project, monkeypatch, capsys):
    error = config_error("--config", "nowhere.toml", cwd=project, monkeypatch=monkeypatch, capsys=capsys)
    assert error == "ggml-viz: error: settings file nowhere.toml does not exist"


def test_without_a_file_every_value_is_the_default(project, monkeypatch, capsys):
    monkeypatch.chdir(project)
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "settings file: none"
    assert "detail         op" in out and "gpu_window     4" in out and "viewer.port    8765" in out
    assert all(line.endswith("default") for line in out.splitlines()[1:])


# Precedence


def test_command_line_then_environment_then_file_then_default(project, monkeypatch, capsys):
    # GIVEN a file that sets capture settings, output_dir and the viewer's address, variables that
    # set some of them, and options
    write(
        project / "ggml-viz.toml",
        'detail = "graph"\nsample = 2\ntiming = "sync"\ngpu_window = 8\n'
        'output_dir = "runs"\n[viewer]\nport = 9000\nhost = "0.0.0.0"\n',
    )
    for variable, value in [("SAMPLE", "4"), ("TIMING", "inline"), ("VIEWER_PORT", "9200"), ("OUTPUT_DIR", "there")]:
        monkeypatch.setenv(f"GGML_VIZ_{variable}", value)
    # WHEN the settings are asked for with options
    argv = ("--timing", "sync", "--host", "127.0.0.2")
    settings = config_json(*argv, cwd=project, monkeypatch=monkeypatch, capsys=capsys)["settings"]
    # THEN each comes from the first of command line, environment, file, default that has it
    assert settings["timing"] == {"value": "sync", "source": "command line"}
    assert settings["viewer.host"] == {"value": "127.0.0.2", "source": "command line"}
    assert settings["sample"] == {"value": 4, "source": "environment GGML_VIZ_SAMPLE"}
    assert settings["viewer.port"] == {"value": 9200, "source": "environment GGML_VIZ_VIEWER_PORT"}
    # (output_dir from a variable is relative to the working directory, from a file to the file)
    assert settings["output_dir"] == {"value": str(project / "there"), "source": "environment GGML_VIZ_OUTPUT_DIR"}
    assert settings["detail"] == {"value": "graph", "source": "ggml-viz.toml:1"}
    assert settings["gpu_window"] == {"value": 8, "source": "ggml-viz.toml:4"}
    assert settings["policy"] == {"value": "keep-first", "source": "default"}


def test_a_blank_variable_leaves_the_files_value(project):
    write(project / "ggml-viz.toml", 'detail = "graph"\n')
    config = load_configuration({}, None, env={"GGML_VIZ_DETAIL": " "}, start=project)
    assert config.values["detail"].value == "graph"


def test_a_bad_variable_is_named(project, monkeypatch, capsys):
    monkeypatch.setenv("GGML_VIZ_DETAIL", "everything")
    error = config_error(cwd=project, monkeypatch=monkeypatch, capsys=capsys)
    assert (
        error == "ggml-viz: error: GGML_VIZ_DETAIL='everything': unknown detail 'everything'; choose one of op, graph"
    )


def test_run_gives_the_program_the_effective_settings(project):
    # GIVEN a file, a variable and an option, each setting a different value
    write(project / "ggml-viz.toml", 'detail = "graph"\nsample = 2\nops = ["MUL_MAT", "ROPE"]\nmax_events = 100\n')
    show = "import os; print(*(os.environ.get('GGML_VIZ_' + k) for k in ('DETAIL', 'SAMPLE', 'OPS', 'MAX_EVENTS')))"
    # WHEN `run` runs a program that prints its GGML_VIZ_* variables
    result = ggml_viz_cli(
        "run",
        "--max-events",
        "7",
        "-o",
        "out.ggmlviz",
        "--",
        sys.executable,
        "-c",
        show,
        cwd=project,
        env={"GGML_VIZ_SAMPLE": "4"},
    )
    # THEN the program sees the option's, the variable's and the file's values, in that order of rank
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["graph", "4", "MUL_MAT,ROPE", "7"]


def test_runs_go_to_the_files_output_dir_when_no_output_is_given(project):
    # GIVEN output_dir in the project's file, relative to the file, and a working directory below it
    write(project / "ggml-viz.toml", 'output_dir = "runs"\n')
    below = project / "tools"
    below.mkdir()
    # WHEN `run` runs a program without -o (the program prints where its run goes)
    result = ggml_viz_cli("run", "--", "sh", "-c", "echo $GGML_VIZ_OUTPUT", cwd=below)
    # THEN the run directory is in the project's runs/ folder
    assert result.returncode == 0, result.stderr
    run_dir = Path(result.stdout.strip())
    assert run_dir.parent == project / "runs" and run_dir.name.startswith("run-") and run_dir.suffix == ".ggmlviz"
    # AND -o still wins
    result = ggml_viz_cli("run", "-o", "here.ggmlviz", "--", "sh", "-c", "echo $GGML_VIZ_OUTPUT", cwd=below)
    assert Path(result.stdout.strip()) == below / "here.ggmlviz"


def test_the_viewers_address_comes_from_the_file_unless_an_option_gives_it(project):
    write(project / "ggml-viz.toml", '[viewer]\nport = 9000\nhost = "0.0.0.0"\n')
    from_file = load_configuration({}, None, env={}, start=project)
    assert from_file.view_address == ("0.0.0.0", 9000, True)
    from_options = load_configuration({"viewer.port": 9100}, None, env={}, start=project)
    assert from_options.view_address == ("0.0.0.0", 9100, True)
    assert load_configuration({}, None, env={}, start=project.parent).view_address == ("127.0.0.1", 8765, False)


@pytest.mark.parametrize(
    ("variable", "text", "message"),
    [
        ("GGML_VIZ_VIEWER_PORT", "80a", "GGML_VIZ_VIEWER_PORT='80a': viewer.port takes a port number (0-65535)"),
        ("GGML_VIZ_VIEWER_PORT", "70000", "GGML_VIZ_VIEWER_PORT='70000': viewer.port takes a port number (0-65535)"),
    ],
)
def test_a_bad_viewer_variable_is_named(variable, text, message, project, monkeypatch, capsys):
    monkeypatch.setenv(variable, text)
    assert config_error(cwd=project, monkeypatch=monkeypatch, capsys=capsys) == f"ggml-viz: error: {message}"


@pytest.mark.parametrize("setting", CAPTURE_SETTINGS, ids=[setting.key for setting in CAPTURE_SETTINGS])
def test_every_setting_in_a_file_means_what_its_variable_means(setting, project):
    # GIVEN a setting in a file, a number as a TOML number and the rest as text
    text = NOT_DEFAULT[setting.key]
    value = text if setting.kind in ("choice", "list") else int(text)
    write(project / "ggml-viz.toml", f"{setting.key} = {json.dumps(value)}\n")
    # THEN the settings are those its GGML_VIZ_* variable gives
    config = load_configuration({}, None, env={}, start=project)
    assert config.capture_settings() == settings_from_environment({setting.env: text})
    assert config.capture_environment() == {setting.env: text}


def test_lists_may_be_written_as_lists(project):
    write(project / "ggml-viz.toml", 'ops = ["MUL_MAT", "rope"]\nlayers = [0, "2-3", "none"]\nnames = ["attn*"]\n')
    settings = load_configuration({}, None, env={}, start=project).capture_settings()
    assert settings == settings_from_environment(
        {"GGML_VIZ_OPS": "MUL_MAT,ROPE", "GGML_VIZ_LAYERS": "0,2-3,none", "GGML_VIZ_NAMES": "attn*"}
    )


# Mistakes: one line naming the file, the line and the key


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('# settings\ndetail = "graph"\ndetial = "op"\n', "line 3: unknown key 'detial'; did you mean 'detail'?"),
        ("max-events = 10\n", "line 1: unknown key 'max-events'; did you mean 'max_events'?"),
        ("# the viewer\n[viewer]\nprot = 9000\n", "line 3: unknown key 'viewer.prot'; did you mean 'viewer.port'?"),
        ("[capture_settings]\nx = 1\n", "line 1: unknown key 'capture_settings'; did you mean 'capture_bytes'?"),
        ("zzz = 1\n", "line 1: unknown key 'zzz'; the keys are detail, timing, sample,"),
        ("sample = 0\n", "line 1: sample = 0: sample must be 1 or more (time every N-th decode graph)"),
        ('sample = "8"\n', 'line 1: sample = "8": sample takes a whole number, 1 or more'),
        ("detail = true\n", "line 1: detail = true: detail takes one of op, graph (text)"),
        ('detail = "all"\n', "line 1: detail = \"all\": unknown detail 'all'; choose one of op, graph"),
        ('layers = "3-1"\n', "line 1: layers = \"3-1\": layers: the range '3-1' runs backwards"),
        ("ops = [1.5]\n", "line 1: ops = [1.5]: ops takes comma-separated text or a list"),
        ("[viewer]\nport = 70000\n", "line 2: viewer.port = 70000: viewer.port takes a port number (0-65535)"),
        ("output_dir = 3\n", "line 1: output_dir = 3: output_dir takes a folder (text), relative to the file's"),
    ],
)
def test_a_mistake_in_the_file_is_one_line_naming_where(text, message, project, monkeypatch, capsys):
    path = write(project / "ggml-viz.toml", text)
    error = config_error(cwd=project, monkeypatch=monkeypatch, capsys=capsys)
    assert error.startswith(f"ggml-viz: error: {path} {message}") and "\n" not in error


def test_a_toml_syntax_error_names_the_file_and_the_position(project, monkeypatch, capsys):
    path = write(project / "ggml-viz.toml", 'detail = "graph"\nsample = \n')
    error = config_error(cwd=project, monkeypatch=monkeypatch, capsys=capsys)
    assert error == f"ggml-viz: error: {path}: not valid TOML: Invalid value (at line 2, column 10)"


def test_a_pyproject_named_by_config_needs_the_tool_table(project):
    path = write(project / "pyproject.toml", '[project]\nname = "app"\n')
    with pytest.raises(CommandError, match=r"has no \[tool.ggml-viz\] table"):
        load_config_file(path)


def test_every_command_that_uses_the_settings_reports_a_bad_file(project):
    write(project / "ggml-viz.toml", 'detial = "graph"\n')
    for argv in (["run", "--", "true"], ["view", "."], ["config"]):
        result = ggml_viz_cli(*argv, cwd=project)
        assert result.returncode == 2 and "unknown key 'detial'; did you mean 'detail'?" in result.stderr


def test_key_lines_follow_tables_dotted_keys_and_skip_multiline_values():
    text = textwrap.dedent(
        """
        title = \"\"\"
        detail = "not a key"
        \"\"\"
        names = [
          "attn*",  # [not a table]
        ]
        viewer.host = "::1"
        [tool."ggml-viz"]
        sample = 8
        [tool.ggml-viz.viewer]  # the viewer
        port = 9000
        """
    )
    lines = key_lines(text)
    assert lines[("title",)] == 2 and ("detail",) not in lines
    assert lines[("names",)] == 5 and lines[("viewer", "host")] == 8
    assert lines[("tool", "ggml-viz", "sample")] == 10
    assert lines[("tool", "ggml-viz", "viewer", "port")] == 12
