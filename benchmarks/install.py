"""How long a user waits from `pip install ggml-viz` to a first recorded run: a fresh virtual
environment (python -m venv), `pip install` of the wheel (`make wheel` builds it; the
dependencies come from the package index pip is set up with), and a first `ggml-viz run` of
llama.cpp's own llama-completion (as `make setup` builds it) generating four tokens. What pipx
does is the same: a venv, pip install, the console script called directly.

usage: .venv/bin/python benchmarks/install.py [--repeats N] [--wheel dist/ggml_viz-*.whl] [--no-compile]
Prints each repeat's seconds and the medians; tests/integration/test_wheel_install.py runs the
same steps once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


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
    """This environment without the checkout's virtual environment or ggml-viz's settings."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "LD_PRELOAD", "LLAMA_CPP_LIB_PATH")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("GGML_VIZ_")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    return env


def base_python() -> str:
    """The Python the virtual environment is made from: this one's base interpreter, not the checkout's venv."""
    return str(Path(sys._base_executable).resolve()) if hasattr(sys, "_base_executable") else sys.executable


@dataclass
class Timing:
    venv_s: float
    install_s: float
    first_run_s: float

    @property
    def total_s(self) -> float:
        return self.venv_s + self.install_s + self.first_run_s


def completion(tool: Path, model: Path) -> list[str]:
    return [str(tool), "-m", str(model), "-p", "hi", "-n", "4", "-no-cnv", "--no-warmup", "-t", "2", "-c", "512"]


def install_and_run(
    wheel: Path, work: Path, program: list[str], no_compile: bool = False, python: str | None = None
) -> tuple[Timing, Path]:
    """Fresh venv in work/venv (of `python`, or this one's base interpreter), the wheel installed, `ggml-viz run`
    of the program into work/first.ggmlviz."""
    env = clean_environment()
    venv, output = work / "venv", work / "first.ggmlviz"
    start = time.perf_counter()
    run([python or base_python(), "-m", "venv", str(venv)], env=env)
    made = time.perf_counter()
    run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            *(["--no-compile"] if no_compile else []),
            str(wheel),
        ],
        env=env,
    )
    installed = time.perf_counter()
    run([str(venv / "bin" / "ggml-viz"), "run", "-o", str(output), "--", *program], env=env, cwd=work)
    ran = time.perf_counter()
    return Timing(made - start, installed - made, ran - installed), output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wheel", type=Path, help="the wheel (default: built now, as make wheel does)")
    parser.add_argument("--no-compile", action="store_true", help="pip install --no-compile (no .pyc files)")
    parser.add_argument("--tool", type=Path, default=Path(sys.executable).parent / "llama-completion")
    args = parser.parse_args()
    sys.path.insert(0, str(REPOSITORY / "src"))
    from ggml_viz.modelfile.locate import default_model_path

    program = completion(args.tool, default_model_path())
    with tempfile.TemporaryDirectory(prefix="ggml-viz-install-") as scratch:
        wheel = args.wheel or repaired_wheel(Path(scratch) / "wheel")
        print(f"wheel: {wheel.name} ({wheel.stat().st_size / 2**20:.2f} MiB)")
        timings = []
        for repeat in range(args.repeats):
            work = Path(scratch) / f"repeat-{repeat}"
            work.mkdir()
            timing, _ = install_and_run(wheel, work, program, args.no_compile)
            timings.append(timing)
            print(json.dumps({k: round(v, 2) for k, v in {**vars(timing), "total_s": timing.total_s}.items()}))
            shutil.rmtree(work)
    medians = {
        name: statistics.median(getattr(t, name) for t in timings)
        for name in ("venv_s", "install_s", "first_run_s", "total_s")
    }
    print("median: " + ", ".join(f"{name} {value:.1f}" for name, value in medians.items()))


if __name__ == "__main__":
    main()
