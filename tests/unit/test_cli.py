"""The command line: every command listed and helped, and each one importing only what it uses.

Import checks run in a fresh interpreter: this test process has imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ggml_viz
from ggml_viz.commands import COMMANDS, main
from ggml_viz.runformat.synthetic import write_synthetic_run

# Libraries no command needs before it runs; the viewer's, the exporters', DuckDB, llama.cpp's.
HEAVY = {"pandas", "numpy", "pyarrow", "rich", "duckdb", "starlette", "uvicorn", "anyio", "gguf", "playwright",
         "llama_cpp", "yaml", "huggingface_hub"}  # fmt: skip
NOT_FOR_SUMMARY = HEAVY - {"pandas", "numpy", "pyarrow", "rich"}
# Parts of ggml-viz that `summary` has no use for.
NOT_FOR_SUMMARY_PARTS = ("ggml_viz.ui", "ggml_viz.export", "ggml_viz.modelfile", "ggml_viz.capture.core",
                         "ggml_viz.capture.llama_cpp_python", "ggml_viz.capture.preload.collector",
                         "ggml_viz.capture.gpu", "ggml_viz.runformat.sql")  # fmt: skip


def imported_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)"
    env = {**os.environ, "PYTHONPATH": str(Path(ggml_viz.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def top_level(modules: set[str]) -> set[str]:
    return {module.split(".")[0] for module in modules}


def parts(modules: set[str], prefixes: tuple[str, ...]) -> set[str]:
    return {module for module in modules if module.startswith(prefixes)}


def test_building_the_parser_imports_no_heavy_library():
    # WHEN a fresh interpreter builds the parser of every command
    modules = imported_after("from ggml_viz.commands import build_parser\nbuild_parser()")
    # THEN no heavy library and no analysis, reader or viewer code came with it
    assert top_level(modules) & HEAVY == set()
    assert parts(modules, ("ggml_viz.analysis", "ggml_viz.runformat", *NOT_FOR_SUMMARY_PARTS)) == set()


@pytest.mark.parametrize("options", [[], ["--json"]], ids=["tables", "json"])
def test_summary_imports_only_what_it_uses(tmp_path, options):
    # GIVEN a closed run
    run = write_synthetic_run(tmp_path / "s.ggmlviz", graphs=4, layers=2)
    # WHEN a fresh interpreter summarizes it
    argv = ["summary", str(run), *options]
    modules = imported_after(
        f"import contextlib, io\nfrom ggml_viz.commands import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main({argv!r}) == 0"
    )
    # THEN neither the viewer, the exporters, DuckDB nor llama.cpp was imported; JSON needs no rich
    assert top_level(modules) & NOT_FOR_SUMMARY == set()
    assert parts(modules, NOT_FOR_SUMMARY_PARTS) == set()
    if options == ["--json"]:
        assert "rich" not in top_level(modules)


def test_help_lists_every_command_with_its_one_line_help(capsys):
    # WHEN the top-level help is asked for
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    # THEN it lists every command beside the first line of its docstring
    assert exited.value.code == 0
    listing = " ".join(capsys.readouterr().out.split())  # argparse wraps long lines
    for command in COMMANDS:
        one_line = " ".join((command.__doc__ or "").strip().splitlines()[0].split())
        assert f"{command.name} {one_line}" in listing


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command.name)
def test_every_command_has_its_help(capsys, command):
    # WHEN a command's help is asked for
    with pytest.raises(SystemExit) as exited:
        main([command.name, "--help"])
    # THEN it shows the command's usage and its whole docstring
    out = capsys.readouterr().out
    assert exited.value.code == 0
    assert out.startswith(f"usage: ggml-viz {command.name}")
    assert " ".join((command.__doc__ or "").split()[:6]) in " ".join(out.split())
