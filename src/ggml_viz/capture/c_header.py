"""The C side of the contract between capture's C and its Python (contract/), written from its
declarations and the settings': ggml_viz_contract.h.

The build writes it before compiling (setup.py), into a folder the compiler searches; the C
includes it and holds no copy of a record, a number or a setting of its own. In it:

- every record of records.py as a C struct, each field's offset and the struct's size checked
  by `_Static_assert`, so a compiler that lays one out otherwise fails the build;
- every number of constants.py, and the spool's magic;
- the graph's parts (`PART_*`, GRAPH_PARTS) and the named records' fields with their docs;
- the GGML_VIZ_* variables the preload library reads, with their kinds and choices, from the
  settings' own declarations (settings.py), so the C checks them by the same rule as the Python;
- CONTRACT_DIGEST: a hash of the records and the numbers, which the extension and the preload
  library hand back, so a build made from other declarations is refused at import, not misread.

`python -m ggml_viz.capture.c_header FOLDER` writes it where asked.
"""

from __future__ import annotations

import sys
import typing
from pathlib import Path

from . import settings
from .contract import constants, digest, records

HEADER_NAME = "ggml_viz_contract.h"

# A variable's kind, as the C checks it (settings.Setting.kind, and the hook's own variables').
SETTING_KINDS = ("text", "flag", "choice", "count", "number", "list")


def _comment(text: str) -> str:
    return f"/* {text} */" if text else ""


def _struct(record: records.Record) -> list[str]:
    lines = [_comment(record.doc), "typedef struct {"]
    for field in record.fields:
        array = f"[{field.count}]" if field.count > 1 or field.kind == "S" else ""
        lines.append(f"    {records.C_TYPES[field.kind]} {field.name}{array}; {_comment(field.doc)}".rstrip())
    lines.append(f"}} {record.c_name};")
    name = record.c_name
    lines.append(f'_Static_assert(sizeof({name}) == {record.size}, "{name}: {record.size} bytes by the contract");')
    for field_name, offset in record.offsets().items():
        check = f'offsetof({name}, {field_name}) == {offset}, "{name}.{field_name}: at {offset} by the contract"'
        lines.append(f"_Static_assert({check});")
    return lines


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _named_fields(record: records.NamedRecord) -> list[str]:
    """A named record's fields as PyStructSequence_Field initializers (the extension's types)."""
    hints = typing.get_type_hints(record, include_extras=True)
    name = record.__name__.upper().replace("RECORD", "_RECORD")
    entries = [f"{{{_c_string(field)}, {_c_string(hints[field].__metadata__[0])}}}" for field in record._fields]
    return [
        f"#define {name}_FIELDS {', '.join(entries)}",
        f"#define {name}_FIELD_COUNT {len(record._fields)}",
        f"#define {name}_DOC {_c_string((record.__doc__ or '').strip())}",
    ]


def _settings() -> list[str]:
    variables = settings.preload_variables()
    entries = [
        f"{{{_c_string(env)}, SETTING_{kind.upper()}, {_c_string('|'.join(choices))}}}"
        for env, kind, choices in variables
    ]
    return [
        f"enum {{ DEFAULT_GPU_WINDOW = {settings.DEFAULT_GPU_WINDOW} }};",
        f"enum {{ DEFAULT_GPU_PERIOD = {settings.DEFAULT_GPU_PERIOD} }};",
        f"#define DEFAULT_CAPTURE_BYTES {settings.DEFAULT_CAPTURE_BYTES}LL",
        "/* The GGML_VIZ_* variables the preload library reads (ggml_viz.capture.settings declares them):",
        "   choices are |-separated. */",
        "enum { " + ", ".join(f"SETTING_{kind.upper()} = {i}" for i, kind in enumerate(SETTING_KINDS)) + " };",
        "typedef struct {",
        "    const char *variable;",
        "    int kind;            /* SETTING_* */",
        "    const char *choices; /* SETTING_CHOICE: its values, |-separated */",
        "} SettingDeclaration;",
        f"#define PRELOAD_SETTINGS {{{', '.join(entries)}}}",
        f"#define PRELOAD_SETTINGS_COUNT {len(variables)}",
        "#define PRELOAD_SETTING_NAMES " + _c_string(",".join(env for env, _, _ in variables)),
    ]


def header_text() -> str:
    magic = constants.SPOOL_MAGIC.decode()
    lines = [
        "/* ggml-viz's contract between its C and its Python, written at build time by",
        "   ggml_viz/capture/c_header.py from capture/contract/ (records.py, constants.py) and",
        "   capture/settings.py: edit those. */",
        "#ifndef GGML_VIZ_CONTRACT_H",
        "#define GGML_VIZ_CONTRACT_H",
        "",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
        f'#define CONTRACT_DIGEST "{digest()}"',
        f'#define SPOOL_MAGIC "{magic}"',
        "/* ggml_tensor in ggml 0.9 and later, as a TensorLayout (recorder.h; contract/records.py) */",
        f"#define RECORDER_TENSOR_LAYOUT {{{', '.join(map(str, records.ggml_tensor_layout()))}}}",
        "",
    ]
    lines += [f"enum {{ {name} = {value} }};" for name, value in constants.c_constants().items()]
    parts = ", ".join(f"PART_{name.upper()}" for name in records.GRAPH_PARTS)
    lines += ["", "/* The parts of a graph, in the order the recorder, the extension and the spool give them. */"]
    lines += [f"enum {{ {parts}, GRAPH_PARTS }};", ""]
    for named in records.NAMED_RECORDS:
        lines += _named_fields(named)
    for record in records.RECORDS:
        lines += ["", *_struct(record)]
    lines += ["", *_settings(), "", "#endif", ""]
    return "\n".join(lines)


def write_header(folder: str | Path) -> Path:
    """Write ggml_viz_contract.h into `folder` (made if missing), only if it changed (so that
    a build that found it current compiles nothing again); returns its path."""
    path = Path(folder) / HEADER_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    text = header_text()
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


if __name__ == "__main__":
    print(write_header(sys.argv[1] if len(sys.argv) > 1 else "."))
