"""How long a user waits from installing ggml-viz to a first recorded run, with each installer: a
fresh environment, ggml-viz's wheel installed into it (`make wheel` builds it; the dependencies come
from the package index pip is set up with), and a first `ggml-viz run` of llama.cpp's own
llama-completion (as `make setup` builds it) generating four tokens. Then how fast the installed
command starts: `ggml-viz --version`, and `ggml-viz summary` of that first run (its first summary,
computed and kept in the run; then the kept one, the median of 5).

The installers, each into a fresh environment in a scratch folder, byte-compiling what they install
(pip's and pipx's default; uv's --compile-bytecode) unless --no-compile:
  pip      python -m venv, then its pip install WHEEL
  pipx     pipx install WHEEL (its pip backend, which reads pip's own settings; PIPX_HOME and
           PIPX_BIN_DIR in the scratch folder; its shared pip made once before the repeats)
  uv       uv venv, then uv pip install WHEEL
  uv-tool  uv tool install WHEEL (UV_TOOL_DIR and UV_TOOL_BIN_DIR in the scratch folder)
uv reads none of pip's settings (pip.conf, PIP_*): the index pip uses, its extra indexes, find-links
folders, constraints and certificate bundle are read from pip itself at run time and handed to uv
(--default-index, --index, --find-links, --constraints, SSL_CERT_FILE), with pip's way of choosing
among indexes (--index-strategy unsafe-best-match: the best version on any of them). uv and pipx
come from that index into a scratch virtual environment (--uv, --pipx: ones already installed).
Each installer's cache is used as it is (a repeat after the first finds the wheels it downloaded).

usage: .venv/bin/python benchmarks/install.py [--repeats N] [--installers pip,pipx,uv,uv-tool]
           [--wheel dist/ggml_viz-*.whl] [--no-compile] [--uv PATH] [--pipx PATH]
Prints each repeat's seconds as one JSON line and, per installer, the medians;
tests/integration/test_wheel_install.py runs the same steps once.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
INSTALLERS = ("pip", "pipx", "uv", "uv-tool")
STARTS = 5  # runs of each start-up time, their median reported


def repaired_wheel(folder: Path) -> Path:
    """ggml-viz's wheel, as `make wheel` builds it (scripts/build_wheel.py: from a clean copy of the sources,
    its C for glibc 2.28 where ziglang is installed, repaired by auditwheel to its manylinux tag), into `folder`."""
    built = run([sys.executable, str(REPOSITORY / "scripts" / "build_wheel.py"), str(folder)])
    return Path(built.stdout.strip().splitlines()[-1])


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def clean_environment() -> dict[str, str]:
    """This environment without the checkout's virtual environment, ggml-viz's settings (and the Vulkan
    layer a recording in this process put in its environment), or uv's and pipx's own settings (each
    installer is given what it needs here)."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "LD_PRELOAD", "LLAMA_CPP_LIB_PATH", "VK_ADD_LAYER_PATH",
            "VK_INSTANCE_LAYERS", "GGML_VK_DEBUG_MARKERS")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith(("GGML_VIZ_", "UV_", "PIPX_"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return env


def base_python() -> str:
    """The Python the virtual environment is made from: this one's base interpreter, not the checkout's venv."""
    return str(Path(sys._base_executable).resolve()) if hasattr(sys, "_base_executable") else sys.executable


# pip's own option parser, with its settings files and PIP_* variables read: the options `pip install`
# would use here (pip has no public interface that prints them with its defaults filled in).
_PIP_OPTIONS = """
import json
from pip._internal.commands import create_command
options, _ = create_command("install").parse_args([])
print(json.dumps({"index_url": options.index_url, "extra_index_urls": options.extra_index_urls,
                  "find_links": options.find_links, "constraints": options.constraints,
                  "cert": options.cert, "no_index": options.no_index}))
"""


def pip_settings(python: str | None = None) -> dict:
    """Where pip installs from, as pip itself reads it: its index, extra indexes, find-links, constraints, cert."""
    return json.loads(run([python or sys.executable, "-c", _PIP_OPTIONS], env=clean_environment()).stdout)


def uv_index_arguments(settings: dict) -> tuple[list[str], dict[str, str]]:
    """uv's options and variables for pip's settings: the same indexes, searched as pip does."""
    arguments: list[str] = []
    if settings["no_index"]:
        arguments.append("--no-index")
    elif settings["index_url"]:
        arguments += ["--default-index", settings["index_url"]]
    for url in settings["extra_index_urls"] or []:
        arguments += ["--index", url]
    for place in settings["find_links"] or []:
        arguments += ["--find-links", place]
    for constraints in settings["constraints"] or []:
        arguments += ["--constraints", constraints]
    arguments += ["--index-strategy", "unsafe-best-match"]
    env = {"SSL_CERT_FILE": settings["cert"]} if settings["cert"] and "SSL_CERT_FILE" not in os.environ else {}
    return arguments, env


@dataclass
class Tools:
    """The installers besides pip: uv's and pipx's programs, uv's options for pip's index, pipx's
    shared pip (PIPX_SHARED_LIBS, made once)."""

    uv: str | None = None
    pipx: str | None = None
    uv_arguments: list[str] = field(default_factory=list)
    uv_env: dict[str, str] = field(default_factory=dict)
    pipx_shared: Path | None = None


def scratch_tools(folder: Path, wanted: set[str], uv: str | None = None, pipx: str | None = None) -> Tools:
    """uv and pipx as `wanted` asks (installed from pip's index into folder/tools unless given)."""
    tools = Tools(uv=uv, pipx=pipx)
    missing = [
        name for name in ("uv", "pipx") if (name in wanted or f"{name}-tool" in wanted) and not getattr(tools, name)
    ]
    if missing:
        venv = folder / "tools"
        run([base_python(), "-m", "venv", str(venv)], env=clean_environment())
        run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *missing], env=clean_environment())
        for name in missing:
            setattr(tools, name, str(venv / "bin" / name))
    if tools.uv:
        tools.uv_arguments, tools.uv_env = uv_index_arguments(pip_settings())
    return tools


def prepare_pipx(tools: Tools, wheel: Path, folder: Path) -> float:
    """pipx's shared pip, made once (as on a machine where pipx was used before), by a first
    install into a throwaway home; its seconds."""
    tools.pipx_shared = folder / "pipx-shared"
    start = time.perf_counter()
    pipx_install(tools, wheel, folder / "pipx-warm-up", compile_=True)
    shutil.rmtree(folder / "pipx-warm-up")
    return time.perf_counter() - start


@dataclass
class Timing:
    installer: str = "pip"
    venv_s: float = 0.0  # the environment made (pipx and uv tool make theirs inside install_s)
    install_s: float = 0.0
    first_run_s: float = 0.0
    version_s: float | None = None  # ggml-viz --version, median of STARTS
    summary_first_s: float | None = None  # ggml-viz summary of the first run: computed, and kept in it
    summary_s: float | None = None  # ggml-viz summary again: the kept summary, median of STARTS
    # The processor time the installer's processes and the first run's took (user + system, all
    # their threads): what a busy machine inflates least. And the machine's load when the repeat began.
    install_cpu_s: float = 0.0
    first_run_cpu_s: float = 0.0
    load: float = 0.0

    @property
    def total_s(self) -> float:
        return self.venv_s + self.install_s + self.first_run_s


def completion(tool: Path, model: Path) -> list[str]:
    return [str(tool), "-m", str(model), "-p", "hi", "-n", "4", "-no-cnv", "--no-warmup", "-t", "2", "-c", "512"]


def children_cpu_s() -> float:
    """The processor time of the finished child processes so far (and theirs that they waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], env: dict[str, str], **kwargs) -> float:
    start = time.perf_counter()
    run(command, env=env, **kwargs)
    return time.perf_counter() - start


def pipx_install(tools: Tools, wheel: Path, work: Path, compile_: bool) -> Path:
    env = {
        **clean_environment(),
        "PIPX_HOME": str(work / "pipx"),
        "PIPX_BIN_DIR": str(work / "bin"),
        "PIPX_MAN_DIR": str(work / "man"),
    }
    if tools.pipx_shared:
        env["PIPX_SHARED_LIBS"] = str(tools.pipx_shared)
    assert tools.pipx, "pipx is not installed"
    command = [tools.pipx, "install", "--backend", "pip", "--python", base_python(), str(wheel)]
    run(command + ([] if compile_ else ["--pip-args=--no-compile"]), env=env)
    return work / "bin" / "ggml-viz"


def ggml_viz_command(installer: str, work: Path) -> Path:
    """Where install() puts the ggml-viz command: in the venv pip and uv make, in the bin folder of
    pipx and uv tool."""
    return work / ("venv/bin" if installer in ("pip", "uv") else "bin") / "ggml-viz"


def install(
    installer: str, wheel: Path, work: Path, tools: Tools, compile_: bool, python: str | None = None
) -> tuple[float, float, Path]:
    """The wheel installed by `installer` into a fresh environment under work (pip's of `python`, or
    this one's base interpreter): (seconds making the environment, seconds installing, the ggml-viz
    command)."""
    env = clean_environment()
    venv = work / "venv"
    start = time.perf_counter()
    if installer == "pip":
        run([python or base_python(), "-m", "venv", str(venv)], env=env)
        made = time.perf_counter()
        run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                *([] if compile_ else ["--no-compile"]),
                str(wheel),
            ],
            env=env,
        )
        return made - start, time.perf_counter() - made, venv / "bin" / "ggml-viz"
    if installer == "pipx":
        command = pipx_install(tools, wheel, work, compile_)
        return 0.0, time.perf_counter() - start, command
    assert tools.uv, "uv is not installed"
    uv_env = {**env, **tools.uv_env}
    compile_option = ["--compile-bytecode"] if compile_ else []
    if installer == "uv":
        run([tools.uv, "venv", "--quiet", "--python", base_python(), str(venv)], env=uv_env)
        made = time.perf_counter()
        python = str(venv / "bin" / "python")
        run(
            [
                tools.uv,
                "pip",
                "install",
                "--quiet",
                "--python",
                python,
                *compile_option,
                *tools.uv_arguments,
                str(wheel),
            ],
            env=uv_env,
        )
        return made - start, time.perf_counter() - made, venv / "bin" / "ggml-viz"
    if installer == "uv-tool":
        uv_env.update({"UV_TOOL_DIR": str(work / "tools"), "UV_TOOL_BIN_DIR": str(work / "bin")})
        command = [tools.uv, "tool", "install", "--quiet", "--python", base_python(), *compile_option]
        run([*command, *tools.uv_arguments, str(wheel)], env=uv_env)
        return 0.0, time.perf_counter() - start, work / "bin" / "ggml-viz"
    raise ValueError(f"unknown installer {installer!r}: one of {', '.join(INSTALLERS)}")


def install_and_run(
    wheel: Path,
    work: Path,
    program: list[str],
    no_compile: bool = False,
    installer: str = "pip",
    tools: Tools | None = None,
    starts: int = 0,
    python: str | None = None,
) -> tuple[Timing, Path]:
    """A fresh environment under work (pip's and uv's: work/venv) with the wheel installed by
    `installer`, `ggml-viz run` of the program into work/first.ggmlviz; with starts > 0, the
    start-up times too (the median of `starts` runs each)."""
    env = clean_environment()
    output = work / "first.ggmlviz"
    load, cpu = os.getloadavg()[0], children_cpu_s()
    venv_s, install_s, ggml_viz = install(installer, wheel, work, tools or Tools(), not no_compile, python)
    installed_cpu = children_cpu_s()
    first_run_s = timed([str(ggml_viz), "run", "-o", str(output), "--", *program], env, cwd=work)
    timing = Timing(installer, venv_s, install_s, first_run_s)
    timing.install_cpu_s, timing.first_run_cpu_s = installed_cpu - cpu, children_cpu_s() - installed_cpu
    timing.load = load
    if starts:
        timing.version_s = statistics.median(timed([str(ggml_viz), "--version"], env) for _ in range(starts))
        timing.summary_first_s = timed([str(ggml_viz), "summary", str(output)], env)
        timing.summary_s = statistics.median(timed([str(ggml_viz), "summary", str(output)], env) for _ in range(starts))
    return timing, output


MEDIANS = ("venv_s", "install_s", "first_run_s", "total_s", "version_s", "summary_first_s", "summary_s",
           "install_cpu_s", "first_run_cpu_s", "load")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--installers", default=",".join(INSTALLERS), help="comma-separated, of " + ", ".join(INSTALLERS)
    )
    parser.add_argument("--wheel", type=Path, help="the wheel (default: built now, as make wheel does)")
    parser.add_argument(
        "--no-compile", action="store_true", help="install no .pyc files (pip --no-compile; uv's default)"
    )
    parser.add_argument("--tool", type=Path, default=Path(sys.executable).parent / "llama-completion")
    parser.add_argument("--uv", help="a uv program to use (default: installed into a scratch venv)")
    parser.add_argument("--pipx", help="a pipx program to use (default: installed into a scratch venv)")
    args = parser.parse_args()
    installers = [name for name in args.installers.split(",") if name]
    unknown = set(installers) - set(INSTALLERS)
    if unknown:
        parser.error(f"unknown installers {sorted(unknown)}: choose among {', '.join(INSTALLERS)}")
    sys.path.insert(0, str(REPOSITORY / "src"))
    from ggml_viz.modelfile.locate import default_model_path

    program = completion(args.tool, default_model_path())
    with tempfile.TemporaryDirectory(prefix="ggml-viz-install-") as scratch:
        wheel = args.wheel or repaired_wheel(Path(scratch) / "wheel")
        print(f"wheel: {wheel.name} ({wheel.stat().st_size / 2**20:.2f} MiB)", flush=True)
        tools = scratch_tools(Path(scratch), set(installers), args.uv, args.pipx)
        if tools.uv:
            print("uv is given pip's index: " + " ".join(tools.uv_arguments), flush=True)
        if "pipx" in installers:
            print(
                f"pipx's shared pip made in {prepare_pipx(tools, wheel, Path(scratch)):.1f} s (not counted)", flush=True
            )
        timings: dict[str, list[Timing]] = {name: [] for name in installers}
        for repeat in range(args.repeats):
            for installer in installers:  # taking turns, so that a busy moment of the machine is shared
                work = Path(scratch) / f"{installer}-{repeat}"
                work.mkdir()
                timing, _ = install_and_run(wheel, work, program, args.no_compile, installer, tools, STARTS)
                timings[installer].append(timing)
                row = {"installer": installer, **{k: v for k, v in vars(timing).items() if k != "installer"}}
                row["total_s"] = timing.total_s
                print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
                shutil.rmtree(work)
    for installer, rows in timings.items():
        medians = {name: statistics.median(getattr(t, name) for t in rows) for name in MEDIANS}
        print(f"median {installer}: " + ", ".join(f"{name} {value:.2f}" for name, value in medians.items()))


if __name__ == "__main__":
    main()
