"""`pip install ggml-viz` leaves out what only some exports need (the extra `export` brings it):
such an export says so in one line, with the command that installs it, and writes nothing. Run in
a subprocess whose import system refuses those modules, as an installation without them would."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ggml_viz.export.registry import exporter_for
from ggml_viz.runformat.synthetic import write_synthetic_run

BLOCK = """
import sys

class Without:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Without())
from ggml_viz.commands import main
sys.exit(main({arguments!r}))
"""


@pytest.mark.parametrize(
    ("output", "module"),
    [
        ("t.timeline.png", "matplotlib"),
        ("t.pftrace", "perfetto"),
        ("g.dot", "graphviz"),
        ("t.safetensors", "safetensors"),
    ],
)
def test_an_export_without_its_package_says_how_to_get_it(tmp_path, output, module):
    run = write_synthetic_run(tmp_path / "s.ggmlviz", graphs=2, layers=1)
    target = tmp_path / output
    code = BLOCK.format(blocked={module}, arguments=["export", str(run), "-o", str(target)])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    name = exporter_for(None, target).name
    assert f"the {name} export needs {module}, which is not installed: pip install 'ggml-viz[export]'" in lines[0]
    assert not target.exists()


def test_every_export_names_only_modules_of_the_extra():
    from pathlib import Path

    import tomllib

    from ggml_viz.export.registry import all_exporters

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extra = {
        requirement.split(">")[0].split("=")[0].lower()
        for requirement in pyproject["project"]["optional-dependencies"]["export"]
    }
    needed = {module.lower() for exporter in all_exporters().values() for module in exporter.requires}
    assert needed == extra  # (tensorboardX's module is its distribution's name)
    assert all(not exporter.missing() for exporter in all_exporters().values())  # (installed for the tests)
