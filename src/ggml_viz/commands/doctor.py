from __future__ import annotations

import argparse
import ctypes.util
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._errors import CommandError
from .._version import __version__
from .base import Command
from .common import add_config_argument

OK, FIX, NOTE = "ok", "fix", "note"  # fine; needed for the use asked about and not fine; not needed, not there
PYTHON_EXTRA = "pip install 'ggml-viz[python]'"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
_GGML_LIBRARY = re.compile(r"^\s*(lib(?:ggml|llama|whisper)[\w.+-]*\.so[\w.]*)\s+=>\s+(.*?)\s*(?:\(0x[0-9a-f]+\))?$")


@dataclass(frozen=True)
class Line:
    """One thing checked: its state (ok, fix or note), what it is, and what was found or what to do."""

    topic: str
    state: str
    text: str
    facts: dict[str, Any] | None = None  # for --json: versions, paths

    @property
    def failed(self) -> bool:
        return self.state == FIX


class DoctorCommand(Command):
    """Say what this machine can record, and what to do where it cannot.

    Checks the C extension and the preload library, llama-cpp-python and its ggml, a native
    program's ggml (-- PROGRAM or --program PATH: the ggml libraries it loads, their version, and
    whether ggml-viz reads them), CUPTI and an NVIDIA GPU for GPU times, Vulkan, Chromium and
    Graphviz, this machine's measured limits and the settings in effect. Each line says "ok", or
    what to do. Exit status 0 where everything the use asked about needs is there (recording
    llama-cpp-python, or recording PROGRAM), 1 otherwise.

    example:
      ggml-viz doctor
      ggml-viz doctor -- ./llama-server
      ggml-viz doctor --json --program ~/llama.cpp/build/bin/llama-cli
    """

    name = "doctor"

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--program", metavar="PATH", help="a native program to check (its path, or a name on PATH)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        add_config_argument(parser)
        parser.add_argument("command", nargs=argparse.REMAINDER, help="-- PROGRAM [ARGS]: the program to check")

    def run(self, args: argparse.Namespace) -> int:
        command = [part for part in args.command if part != "--"][:1]
        if args.program and command:
            raise CommandError("give the program once: --program PATH or -- PROGRAM")
        program = args.program or (command[0] if command else None)
        program_path = find_program(program) if program else None
        lines = [extension_line(), preload_line(needed=program_path is not None)]
        lines.append(llama_cpp_python_line(needed=program_path is None or _is_python(program_path)))
        if program_path is not None:
            lines.extend(program_lines(program_path))
        lines.extend(
            [
                gpu_line(),
                cupti_line(),
                vulkan_line(),
                chromium_line(find_chromium()),
                dot_line(),
                limits_line(),
                settings_line(args),
            ]
        )
        failed = any(line.failed for line in lines)
        if args.json:
            print(
                json.dumps(
                    {
                        "version": __version__,
                        "program": str(program_path) if program_path else None,
                        "ok": not failed,
                        "checks": [asdict(line) for line in lines],
                    },
                    indent=2,
                )
            )
        else:
            print(
                f"ggml-viz {__version__}, Python {platform.python_version()}, {platform.system()} {platform.machine()}"
            )
            width = max(len(line.topic) for line in lines)
            for line in lines:
                print(f"  {line.state:<4}  {line.topic:<{width}}  {line.text}")
            what = f"record {program_path.name}" if program_path else "record llama-cpp-python"
            print(f"ready to {what}" if not failed else f"not ready to {what}: see the lines marked fix")
        return 1 if failed else 0


def find_program(program: str) -> Path:
    """The program's file (a path, or a name on PATH); one clear error where there is none."""
    found = shutil.which(program) or (program if os.path.isfile(program) else None)
    if found is None:
        raise CommandError(f"{program}: no such program (not a file, nor a name on PATH)")
    return Path(found)


def _is_python(program: Path) -> bool:
    from ..capture.preload.program import ProgramKind, program_kind

    return program_kind(str(program)) is ProgramKind.PYTHON


def extension_line() -> Line:
    from ..capture.core.extension import IMPORT_ERROR, extension

    if extension is not None:
        return Line("C extension", OK, f"loaded ({Path(str(extension.__file__)).name})")
    return Line(
        "C extension",
        NOTE,
        f"not loaded ({IMPORT_ERROR}): ggml-viz records with its slower Python "
        "recorder; reinstall ggml-viz with a C compiler (pip install --force-reinstall --no-binary "
        "ggml-viz ggml-viz)",
    )


def preload_line(needed: bool) -> Line:
    from ..capture.preload.library import PRELOAD_LIBRARY

    if not PRELOAD_LIBRARY.exists():
        return Line(
            "preload library",
            FIX if needed else NOTE,
            f"missing ({PRELOAD_LIBRARY}): native programs cannot be recorded; reinstall ggml-viz with a C compiler",
        )
    try:
        ctypes.CDLL(str(PRELOAD_LIBRARY), mode=os.RTLD_LAZY | os.RTLD_LOCAL)  # type: ignore[attr-defined]
    except OSError as error:
        return Line("preload library", FIX if needed else NOTE, f"does not load ({error}): reinstall ggml-viz")
    return Line("preload library", OK, f"loads ({PRELOAD_LIBRARY})", {"path": str(PRELOAD_LIBRARY)})


def llama_cpp_python_line(needed: bool) -> Line:
    """llama-cpp-python: importable, its version, its ggml's, and whether ggml-viz reads that ggml."""
    topic = "llama-cpp-python"
    state = FIX if needed else NOTE
    try:
        import llama_cpp
    except ImportError as error:
        return Line(topic, state, f"not installed ({error}): {PYTHON_EXTRA}")
    except (OSError, RuntimeError) as error:  # installed, but its llama.cpp libraries do not load
        return Line(topic, state, f"does not load ({error}): reinstall it ({PYTHON_EXTRA})")
    from .._errors import GgmlVizError
    from ..capture.core import ggml_api

    version = getattr(llama_cpp, "__version__", "?")
    try:
        ggml_api.libggml()
        info = ggml_api.ggml_build_info()
        ggml = ggml_api.ggml_description()
        ggml_api.check_tensor_layout()
    except (GgmlVizError, OSError, AttributeError) as error:
        return Line(topic, state, f"{version}, but ggml-viz cannot read its ggml: {error}", {"version": version})
    return Line(
        topic,
        OK,
        f"{version}, on {ggml}: read by ggml-viz",
        {"version": version, "ggml_version": info["version"], "ggml_commit": info["commit"]},
    )


def ggml_libraries(program: Path) -> dict[str, str | None]:
    """The ggml (and llama, whisper) libraries the dynamic loader would bring into `program`, each
    with the file it resolves to (None: not found), as `ldd` says (on the program's real path: its
    $ORIGIN is where the file is, not where a link to it is)."""
    try:
        listed = subprocess.run(["ldd", os.path.realpath(program)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        raise CommandError(f"cannot list the libraries of {program} ({error}): is `ldd` installed?") from None
    found: dict[str, str | None] = {}
    for row in listed.stdout.splitlines():
        match = _GGML_LIBRARY.match(row)
        if match:
            target = match[2].strip()
            found[match[1]] = None if target == "not found" else os.path.realpath(target)
    return found


_PROBE = """
import json, sys
from ggml_viz.capture.core import ggml_api
ggml_api.use_library(sys.argv[1])
answer = {"overhead": None, "problem": None}
try:
    answer.update(ggml_api.ggml_build_info())
    answer["overhead"] = int(ggml_api.libggml().ggml_tensor_overhead()) - ggml_api.GGML_OBJECT_HEADER_SIZE
    ggml_api.check_tensor_layout()
except Exception as error:
    answer["problem"] = str(error)
print(json.dumps(answer))
"""

_OLDER_LAYOUT_SIZES = (336, 368)  # the 2024 ggml_tensor layouts the preload library also reads (preload_setup.c)


def probe_ggml(library: str) -> dict[str, Any]:
    """A libggml-base's version and whether ggml-viz reads its tensors, asked in a process of its own
    (loaded here, it would stand in for llama-cpp-python's library of the same soname)."""
    try:
        answer = subprocess.run([sys.executable, "-c", _PROBE, library], capture_output=True, text=True, timeout=60)
        return dict(json.loads(answer.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {"problem": f"{library} could not be loaded to check it"}


def program_lines(program: Path) -> list[Line]:
    """What the program loads of ggml, and whether ggml-viz reads it."""
    from ..capture.preload.program import ProgramKind, program_kind

    topic = f"program {program.name}"
    kind = program_kind(str(program))
    if kind is ProgramKind.PYTHON:
        return [
            Line(
                topic,
                OK,
                f"a Python program ({program}): llama-cpp-python is recorded by its start-up hook, "
                "other ggml bindings by the preload library",
            )
        ]
    if kind is ProgramKind.UNKNOWN:
        return [
            Line(
                topic,
                NOTE,
                f"a script or wrapper ({program}): `ggml-viz run` preloads into it; the ggml of "
                "the programs it starts is checked as they start",
            )
        ]
    libraries = ggml_libraries(program)
    missing = sorted(name for name, path in libraries.items() if path is None)
    if missing:
        return [
            Line(
                topic,
                FIX,
                f"its loader does not find {', '.join(missing)}: set LD_LIBRARY_PATH to their "
                "folder, or run it where it was built",
            )
        ]
    if kind is ProgramKind.STATIC or not libraries:
        return [
            Line(
                topic,
                FIX,
                f"{program} loads no ggml shared library (not a ggml program, or ggml linked in "
                "statically): ggml-viz records ggml through its shared libraries; build it with "
                "-DBUILD_SHARED_LIBS=ON",
            )
        ]
    base = next((path for name, path in sorted(libraries.items()) if name.startswith("libggml-base")), None)
    base = base or next((path for name, path in sorted(libraries.items()) if name.startswith("libggml.")), None)
    found = ", ".join(sorted(libraries))
    if base is None:
        return [Line(topic, NOTE, f"loads {found}, no libggml-base: its ggml is checked as it starts")]
    return [Line(topic, OK, f"loads {found}", {"libraries": libraries}), ggml_read_line(base)]


def ggml_read_line(base: str) -> Line:
    answer = probe_ggml(base)
    version = answer.get("version")
    facts = {"library": base, "version": version, "commit": answer.get("commit")}
    what = f"ggml {version}" if version else "a ggml of unknown version (older than 2025)"
    if answer.get("problem") is None:
        return Line("its ggml", OK, f"{what} ({base}): read by ggml-viz", facts)
    if answer.get("overhead") in _OLDER_LAYOUT_SIZES:
        return Line(
            "its ggml",
            OK,
            f"{what} ({base}): not the current tensor layout; the preload library reads "
            "it if it is one of 2024's (it says so as the program starts)",
            facts,
        )
    return Line(
        "its ggml",
        FIX,
        f"{what} ({base}): not read by ggml-viz ({answer['problem']}); update ggml-viz, "
        "or build the program on a newer ggml",
        facts,
    )


def gpu_line() -> Line:
    gpus = sorted(glob.glob("/proc/driver/nvidia/gpus/*"))
    smi = shutil.which("nvidia-smi")
    names: list[str] = []
    if smi:
        try:
            listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
            names = [row.split(" (UUID")[0] for row in listed.splitlines() if row.startswith("GPU ")]
        except (OSError, subprocess.SubprocessError):
            pass
    if names or gpus:
        return Line("NVIDIA GPU", OK, "; ".join(names) or f"{len(gpus)} GPU(s)", {"gpus": names or gpus})
    return Line(
        "NVIDIA GPU",
        NOTE,
        "none found (no NVIDIA driver): GPU times on CUDA need one (on Vulkan, any Vulkan device: see the Vulkan line)",
    )


def cupti_candidates() -> list[str]:
    """Where the GPU timer looks for libcupti (cupti_activity.c's cupti_load, less the folder of
    the program's own CUDA runtime, known only once it runs): GGML_VIZ_CUPTI, a CUDA toolkit's, the
    nvidia-cuda-cupti package's, then the loader's search."""
    paths = [item for item in os.environ.get("GGML_VIZ_CUPTI", "").split(":") if item]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            paths += [f"{home}/extras/CUPTI/lib64/libcupti.so", f"{home}/lib64/libcupti.so"]
    for folder in sys.path:
        paths += sorted(glob.glob(os.path.join(folder, "nvidia", "cuda_cupti", "lib", "libcupti.so*")))
    found = ctypes.util.find_library("cupti")
    return paths + ([found] if found else [])


def cupti_line() -> Line:
    for candidate in cupti_candidates():
        if os.path.isabs(candidate) and not os.path.exists(candidate):
            continue
        version = re.search(r"\.so\.(.+)$", os.path.realpath(candidate) if os.path.isabs(candidate) else candidate)
        said = candidate + (f" (version {version[1]})" if version else "")
        return Line("CUPTI", OK, said, {"path": candidate, "version": version[1] if version else None})
    return Line(
        "CUPTI",
        NOTE,
        "no libcupti found: GPU node times need it (pip install nvidia-cuda-cupti, or the "
        "CUDA toolkit's; or name one with GGML_VIZ_CUPTI=PATH)",
    )


def vulkan_line() -> Line:
    """Whether a Vulkan program's GPU nodes can be timed: ggml-viz's layer built, a Vulkan loader."""
    from ..capture.gpu.vulkan_layer import LAYER_LIBRARY, headers_on_this_machine, layer_available

    loader = ctypes.util.find_library("vulkan")
    facts = {"loader": loader, "layer": str(LAYER_LIBRARY) if layer_available() else None}
    if not layer_available() and headers_on_this_machine():
        return Line(
            "Vulkan",
            NOTE,
            "this ggml-viz was built before Vulkan's headers were installed, and has no "
            "Vulkan layer: install ggml-viz again (pip install --force-reinstall --no-deps ggml-viz, or "
            "from its checkout) to time a Vulkan program's GPU nodes",
            facts,
        )
    if not layer_available():
        return Line(
            "Vulkan",
            NOTE,
            "this ggml-viz was built without Vulkan's headers (Debian's libvulkan-dev): a "
            "Vulkan program's graphs are recorded, its GPU node times not",
            facts,
        )
    if not loader:
        return Line("Vulkan", NOTE, "no Vulkan loader installed (libvulkan): no Vulkan program to time", facts)
    return Line("Vulkan", OK, f"GPU node times through ggml-viz's layer ({LAYER_LIBRARY.name}; loader {loader})", facts)


def find_chromium() -> str | None:
    for candidate in CHROMIUM_CANDIDATES:
        found = candidate if os.path.isabs(candidate) and os.path.exists(candidate) else shutil.which(candidate)
        if found:
            return found
    return None


def chromium_line(path: str | None) -> Line:
    if path:
        return Line("Chromium", OK, path, {"path": path})
    return Line(
        "Chromium",
        NOTE,
        "not found: the viewer's browser tests need it (apt-get install chromium); "
        "`ggml-viz view` opens your own browser",
    )


def dot_line() -> Line:
    found = shutil.which("dot")
    if found:
        return Line("Graphviz", OK, found, {"path": found})
    return Line(
        "Graphviz", NOTE, "no `dot`: graph pictures (export --format svg/png) need it (apt-get install graphviz)"
    )


def limits_line() -> Line:
    from ..runformat.limits import limits_file, stored_limits

    limits = stored_limits()
    if limits is None:
        return Line("machine limits", NOTE, "not measured: `ggml-viz limits` measures them (the roofline's limits)")
    return Line("machine limits", OK, f"measured ({limits_file()})", {"path": str(limits_file())})


def settings_line(args: argparse.Namespace) -> Line:
    """The settings in effect that are not defaults (as `ggml-viz config` shows them), and the
    GGML_VIZ_* variables set."""
    from .common import configuration
    from .config import _shown
    from .config_file import DEFAULT

    config = configuration(args)
    changed = {key: value for key, value in config.values.items() if value.source != DEFAULT}
    variables = sorted(name for name in os.environ if name.startswith("GGML_VIZ_"))
    parts = [f"{key}={_shown(value.value)} ({value.source})" for key, value in changed.items()]
    parts += [f"{name} set" for name in variables if not any(name in value.source for value in changed.values())]
    file = f"settings file {config.file.path}" if config.file else "no settings file"
    text = f"{file}; " + ("; ".join(parts) if parts else "all defaults") + " (`ggml-viz config` shows them all)"
    facts = {
        "file": str(config.file.path) if config.file else None,
        "variables": variables,
        "changed": {key: {"value": _shown(value.value), "source": value.source} for key, value in changed.items()},
    }
    return Line("settings", OK, text, facts)
