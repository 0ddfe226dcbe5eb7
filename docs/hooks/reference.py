"""MkDocs hook: the reference pages, generated from the code at every build (never committed).

- reference/commands.md: every `ggml-viz` command's usage and options, from the argparse parsers
  `ggml_viz.commands.build_parser()` makes (the command classes' docstrings are their descriptions);
- reference/settings.md: the GGML_VIZ_* variables, options and settings-file keys, from the rows
  of `ggml_viz.capture.settings` (the table `settings_markdown_table()` makes) and the file's other
  keys (`ggml_viz.commands.config_file.OTHER_KEYS`);
- reference/tables.md: the run format's stored tables, from `ggml_viz.runformat.schema.TABLES` (each
  column's Arrow type) and the comments beside each column in that module's source.

The checkout's own `src/` is imported first, so the reference is the code being documented even
where an older ggml-viz is installed.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src"
PAGES = ("reference/commands.md", "reference/settings.md", "reference/tables.md")
NOTE = "<!-- generated from the code by docs/hooks/reference.py at build time: do not edit -->\n\n"


def _import_source() -> None:
    if str(SOURCE) not in sys.path:
        sys.path.insert(0, str(SOURCE))
    for name in [name for name in sys.modules if name == "ggml_viz" or name.startswith("ggml_viz.")]:
        if not str(getattr(sys.modules[name], "__file__", "") or "").startswith(str(SOURCE)):
            del sys.modules[name]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps the subcommands' parsers only here
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser) -> str:
    # argparse wraps help at $COLUMNS: fix the width so that the page is the same on every machine.
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        return parser.format_help().rstrip()
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def commands_page() -> str:
    from ggml_viz.commands import build_parser

    parser = build_parser()
    commands = _subparsers(parser)
    lines = [
        "# Commands",
        "",
        NOTE.strip(),
        "",
        "Every `ggml-viz` command with its usage and options, as `ggml-viz COMMAND --help` prints them.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for name, sub in commands.items():
        first = " ".join((sub.description or "").strip().split("\n\n")[0].split())  # its first paragraph
        first = first.replace("|", "\\|")
        lines.append(f"| [`{name}`](#{_anchor(name)}) | {first} |")
    lines += ["", "## ggml-viz", "", "```text", _help(parser), "```", ""]
    for name, sub in commands.items():
        lines += [f"## {name}", "", "```text", _help(sub), "```", ""]
    return "\n".join(lines)


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "", name.lower().replace(" ", "-"))


def settings_page() -> str:
    from ggml_viz.capture.settings import settings_markdown_table
    from ggml_viz.commands.config_file import OTHER_KEYS, OTHER_VARIABLES

    lines = [
        "# Settings",
        "",
        NOTE.strip(),
        "",
        "What a recording can be told, and the three places it can be told: a `GGML_VIZ_*` variable "
        "(read by the start-up hook and the preload library), an option of `ggml-viz run` and `record`, "
        "and a key of `ggml-viz.toml` (or `[tool.ggml-viz]` in `pyproject.toml`). `ggml_viz.record(...)` "
        "takes the same settings as keyword arguments named like the keys. "
        "See [Recording](../recording.md) and [Settings in a file](../recording.md#settings-in-a-file).",
        "",
        settings_markdown_table().rstrip(),
        "",
        "## The settings file's other keys",
        "",
        "| key | variable | accepted | default |",
        "|---|---|---|---|",
    ]
    for key, (_check, default, accepted) in OTHER_KEYS.items():
        lines.append(f"| `{key}` | `{OTHER_VARIABLES.get(key, '—')}` | {accepted} | `{default}` |")
    lines += ["", "`ggml-viz config` shows each effective value and where it came from.", ""]
    return "\n".join(lines)


def _column_comments(source: str) -> dict[str, dict[str, str]]:
    """{table: {column: its comment}} from the source of runformat/schema.py: the comment on a
    column's line, or the comment lines just above it."""
    tree = ast.parse(source)
    lines = source.splitlines()
    comments: dict[str, dict[str, str]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict)):
            continue
        for key, value in zip(node.value.keys, node.value.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(value, ast.Call)):
                continue
            table = comments.setdefault(str(key.value), {})
            above: list[str] = []
            for number in range(value.lineno, (value.end_lineno or value.lineno) + 1):
                line = lines[number - 1]
                column = re.match(r'\s*\("(\w+)",.*?\),?\s*(?:#\s*(.*))?$', line)
                if column:
                    text = " ".join([*above, column.group(2) or ""]).strip()
                    table[column.group(1)] = text
                    above = []
                elif line.strip().startswith("#"):
                    above.append(line.strip().lstrip("#").strip())
    return comments


def tables_page() -> str:
    from ggml_viz.runformat import schema

    comments = _column_comments(Path(schema.__file__).read_text(encoding="utf-8"))
    lines = [
        "# Run format tables",
        "",
        NOTE.strip(),
        "",
        f"The tables a run directory stores (format `{schema.FORMAT_NAME}`, version {schema.FORMAT_VERSION}; "
        f"the reader reads versions {', '.join(map(str, schema.READER_SUPPORTED_VERSIONS))}), column by column, "
        "with the Arrow type each is written as and the comment beside it in `ggml_viz/runformat/schema.py`. "
        "[The run format](../run-format.md) says what they mean, and what the reader derives from them.",
        "",
        "Tables a run of an earlier ggml-viz may lack (read as empty): "
        + ", ".join(f"`{name}`" for name in schema.OPTIONAL_TABLES)
        + ". Written only by a run that has rows for them: "
        + ", ".join(f"`{name}`" for name in schema.SPARSE_TABLES)
        + ".",
        "",
    ]
    for table, table_schema in schema.TABLES.items():
        lines += [f"## `{table}`", "", "| column | Arrow type | note |", "|---|---|---|"]
        for field in table_schema:
            note = comments.get(table, {}).get(field.name, "").replace("|", "\\|")
            lines.append(f"| `{field.name}` | `{field.type}` | {note} |")
        lines.append("")
    return "\n".join(lines)


GENERATORS = {
    "reference/commands.md": commands_page,
    "reference/settings.md": settings_page,
    "reference/tables.md": tables_page,
}


def on_files(files, config):  # MkDocs event: add the generated pages before the nav is built
    from mkdocs.structure.files import File  # here, so that the tests import this module without MkDocs

    _import_source()
    for path, generate in GENERATORS.items():
        files.append(File.generated(config, path, content=generate()))
    return files
