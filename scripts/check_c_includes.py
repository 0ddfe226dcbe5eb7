"""The C's layers, as the Python's import contracts hold the Python's (pyproject.toml, import-linter):
each C file of src/ggml_viz/capture includes only files of its own layer or of the layers below it.

    util/       arrays, the clock, the pointer set
    gpu/        the GPU timer (CUPTI, the Vulkan layer's timestamps)
    core/       the recorder (and GOT redirection)
    top         the Python extension (core/_recorder*.c) | the preload library (preload/)

The contract's generated header (ggml_viz_contract.h) is below them all. Run it as a script (exit
status 1 and one line per wrong include), or call `problems(folder)`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

CAPTURE = Path(__file__).resolve().parents[1] / "src" / "ggml_viz" / "capture"
GENERATED = "ggml_viz_contract.h"
# From the bottom: a layer's files include their own layer's and the lower layers'; the two top
# layers, of one rank, do not include each other's.
RANKS = {"util": 0, "gpu": 1, "core": 2, "extension": 3, "preload": 3}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path: Path, capture: Path) -> str | None:
    """The layer a file of capture/ belongs to (None: no layer's, e.g. the memory read kernel)."""
    parts = path.relative_to(capture).parts
    if len(parts) < 2:
        return None
    if parts[0] == "core" and path.name.startswith("_recorder"):
        return "extension"
    return parts[0] if parts[0] in RANKS else None


def allowed(includer: str, included: str) -> bool:
    return included == includer or RANKS[included] < RANKS[includer]


def problems(capture: Path = CAPTURE) -> list[str]:
    """One line per include that goes up or sideways, or names a file that is not there."""
    found = []
    for path in sorted([*capture.rglob("*.c"), *capture.rglob("*.h")]):
        includer = layer_of(path, capture)
        if includer is None:
            continue
        text = path.read_text()
        for match in INCLUDE.finditer(text):
            name = match.group(1)
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(capture)}:{line}"
            if name == GENERATED:
                continue
            target = (path.parent / name).resolve()
            if not target.exists():
                found.append(f"{where}: includes {name}, which is not there")
                continue
            included = layer_of(target, capture.resolve())
            if included is not None and not allowed(includer, included):
                found.append(f"{where}: {includer} includes {name} of {included}, a layer not below it")
    return found


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else CAPTURE
    wrong = problems(folder)
    for line in wrong:
        print(line)
    print(f"C includes against the layers util < gpu < core < extension | preload: {len(wrong)} wrong")
    sys.exit(1 if wrong else 0)
