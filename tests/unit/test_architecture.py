"""The shape of the package holds: the layers and contracts pyproject.toml declares (checked by
import-linter over every import, those inside functions and under TYPE_CHECKING too), nothing
importing the package's own front door, and the public names where the README says they are."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]
SOURCE = REPO / "src" / "ggml_viz"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(source_root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter's verdict on the package below `source_root`, with the repository's contracts."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(REPO / "pyproject.toml")],
        cwd=source_root,
        env={"PYTHONPATH": str(source_root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def copy_of_the_package(tmp_path: Path) -> Path:
    shutil.copytree(SOURCE, tmp_path / "ggml_viz", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return tmp_path


def test_every_import_goes_down_the_layers_and_no_module_imports_itself_back():
    # WHEN the contracts are checked over the package as it is
    verdict = lint_imports(SOURCE.parent)
    # THEN each one is kept
    assert verdict.returncode == 0, verdict.stdout[-4000:] + verdict.stderr[-2000:]
    assert "0 broken" in verdict.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # the file format reaching up into the analysis, inside a function
        ("runformat/manifest.py", "def _late():\n    from ..analysis import summary\n    return summary\n", "layers"),
        # one recording path leaning on another
        ("capture/preload/rpc.py", "from ..llama_cpp_python import hooks\n", "capture: each recording path"),
        # the viewer reaching into the recording machinery (a layer below it, but not one it reads runs by)
        ("ui/defaults.py", "from ..capture.core import recording\n", "readers:"),
        # a cycle inside one layer, under TYPE_CHECKING only
        (
            "analysis/memory.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import summary\n",
            "no import cycle",
        ),
    ],
    ids=["upward", "across-paths", "reader-into-capture", "cycle"],
)
def test_a_wrong_import_breaks_its_contract(tmp_path, module, line, broken):
    # GIVEN a copy of the package with one import that goes the wrong way
    root = copy_of_the_package(tmp_path)
    with open(root / "ggml_viz" / module, "a") as file:
        file.write("\n\n" + line)
    # WHEN the contracts are checked over it
    verdict = lint_imports(root)
    # THEN the check fails, naming the contract that import breaks
    assert verdict.returncode != 0
    assert re.search(rf"{re.escape(broken)}[^\n]*\n?[^\n]*BROKEN", verdict.stdout), verdict.stdout[-3000:]


def test_nothing_inside_the_package_imports_its_front_door():
    """`ggml_viz/__init__.py` is the API (`record`, `open`) over every layer: a module inside that
    imported it would make the top depend on itself. (`from .. import layers` imports a module.)"""
    import grimp  # import-linter's import graph

    graph = grimp.build_graph("ggml_viz", cache_dir=None)
    assert graph.find_modules_that_directly_import("ggml_viz") == set()


def test_the_public_names_are_where_the_readme_says():
    # GIVEN every `from ggml_viz... import ...` and `ggml_viz.<function>(` the README and the docs show users
    readme = "\n".join(path.read_text() for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    imports = set(re.findall(r"^from (ggml_viz[\w.]*) import ([\w, ]+)$", readme, flags=re.MULTILINE))
    calls = set(re.findall(r"\bggml_viz\.(\w+)\(", readme))
    assert imports and {"open", "record"} <= calls
    # THEN each resolves: the plugin base classes, the API's functions
    import importlib

    import ggml_viz

    for module, names in imports:
        for name in names.split(","):
            assert hasattr(importlib.import_module(module), name.strip()), f"{module}.{name.strip()}"
    for name in calls:
        assert callable(getattr(ggml_viz, name)), name
    # AND the plugin base classes are defined where the README points (not left behind elsewhere)
    from ggml_viz.analysis.findings import Finding
    from ggml_viz.export import Exporter

    assert (Finding.__module__, Exporter.__module__) == ("ggml_viz.analysis.findings", "ggml_viz.export.base")


# -- the C's layers (scripts/check_c_includes.py) ---------------------------------------------------

C_INCLUDES = Path(__file__).parents[2] / "scripts" / "check_c_includes.py"
CAPTURE_C = Path(__file__).parents[2] / "src" / "ggml_viz" / "capture"


def test_every_c_include_goes_down_the_layers():
    checked = subprocess.run([sys.executable, str(C_INCLUDES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize(
    ("path", "include", "said"),
    [
        ("gpu/gpu_timer.h", "../core/recorder.h", "gpu includes ../core/recorder.h of core"),
        ("util/arrays.c", "../gpu/gpu_timer.h", "util includes ../gpu/gpu_timer.h of gpu"),
        ("core/_recorder.c", "../preload/preload.h", "extension includes ../preload/preload.h of preload"),
        ("core/recorder.c", "nowhere.h", "includes nowhere.h, which is not there"),
    ],
)
def test_a_wrong_c_include_is_found(tmp_path, path, include, said):
    # GIVEN a copy of capture's C with one include that goes up, sideways, or nowhere
    copy = tmp_path / "capture"
    shutil.copytree(CAPTURE_C, copy, ignore=shutil.ignore_patterns("*.py", "*.so", "__pycache__"))
    target = copy / path
    target.write_text(f'#include "{include}"\n' + target.read_text())
    # WHEN the check runs THEN it fails, naming the file, the line and the layers
    checked = subprocess.run([sys.executable, str(C_INCLUDES), str(copy)], capture_output=True, text=True)
    assert checked.returncode == 1
    assert f"{path}:1: {said}" in checked.stdout
