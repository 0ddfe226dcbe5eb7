"""The viewer's ES modules as one module script, for a page that loads no files: the offline
HTML report (export/report.py) inlines it.

From the entry (static/app.js) the relative imports are followed, and each module is
written after the ones it imports (the order in which the browser runs them), inside a
function scope of its own, so that two modules' top-level names never meet: its imports
become reads of the objects the scopes of those modules returned, its exports the object
its own scope returns. The modules keep to the plain forms read here (anything else is an
error, not a broken report):

    import { a, b as c } from "./x.js";
    import * as x from "./x.js";
    export function name / export async function name / export class Name / export const name = ...

one name per export statement, and no exported `let` (an import of it would not see a change).
"""

from __future__ import annotations

import re
from importlib import resources
from posixpath import dirname, normpath

ENTRY = "app.js"

_IMPORT = re.compile(
    r'^import\s+(?:\{(?P<names>[^}]*)\}|\*\s+as\s+(?P<namespace>\w+))\s+from\s+"(?P<path>[^"]+)";[ \t]*$', re.M
)
_EXPORT = re.compile(r"^export\s+(?P<kind>(?:async\s+)?function\*?|class|const)\s+(?P<name>\w+)", re.M)
_LEFT_OVER = re.compile(r"^[ \t]*(?:import|export)\b.*$", re.M)


def read_module(path: str) -> str:
    """A module's source, by its path under static/."""
    return resources.files("ggml_viz.ui").joinpath("static", *path.split("/")).read_text(encoding="utf-8")


def imports_of(path: str, source: str) -> list[str]:
    """The modules `path` imports, as paths under static/, in the order it imports them."""
    found = []
    for match in _IMPORT.finditer(source):
        target = match["path"]
        if not target.startswith(("./", "../")):
            raise ValueError(f"{path}: only relative imports can be inlined, not {target!r}")
        found.append(normpath(f"{dirname(path) or '.'}/{target}"))
    return found


def exports_of(source: str) -> list[str]:
    """The names a module exports."""
    return [match["name"] for match in _EXPORT.finditer(source)]


def module_order(entry: str = ENTRY) -> list[str]:
    """Every module the entry reaches, each after the modules it imports; the entry last."""
    order: list[str] = []
    visiting: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        if path in visiting:
            raise ValueError(f"the viewer's modules import each other in a circle: {' -> '.join([*visiting, path])}")
        visiting.append(path)
        for target in imports_of(path, read_module(path)):
            visit(target)
        visiting.pop()
        order.append(path)

    visit(entry)
    return order


def inline_modules(entry: str = ENTRY) -> str:
    """The modules as one script, for a `<script type="module">` element."""
    return "\n".join(_scoped(path, read_module(path)) for path in module_order(entry))


def _variable(path: str) -> str:
    return "module_" + re.sub(r"\W", "_", path.removesuffix(".js"))


def _scoped(path: str, source: str) -> str:
    def import_binding(match: re.Match[str]) -> str:
        module = _variable(normpath(f"{dirname(path) or '.'}/{match['path']}"))
        if match["namespace"]:
            return f"const {match['namespace']} = {module};"
        names = [name.split() for name in match["names"].replace("\n", " ").split(",") if name.strip()]
        bindings = [f"{name[0]}: {name[2]}" if len(name) == 3 and name[1] == "as" else name[0] for name in names]
        return f"const {{ {', '.join(bindings)} }} = {module};"

    body = _IMPORT.sub(import_binding, source)
    body = _EXPORT.sub(lambda match: f"{match['kind']} {match['name']}", body)
    left_over = _LEFT_OVER.search(body)
    if left_over:
        raise ValueError(f"{path}: a form of import or export the report cannot inline: {left_over.group().strip()!r}")
    exports = ", ".join(exports_of(source))
    return f"// ---- {path}\nconst {_variable(path)} = (() => {{\n{body}\nreturn {{ {exports} }};\n}})();\n"
