"""Download a project's source distribution through pip, from the package index pip is set up
to use (its config files, PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, --find-links: a mirror works),
checked against the hash the index gives (pip checks it).

`pip download --no-binary PROJECT`, not `--no-binary :all:`: the latter would also build the
sdist's build requirements (scikit-build-core, cmake, ...) from source to read its metadata,
minutes for llama-cpp-python; wheels of those take seconds. No dependency is downloaded.

usage: python scripts/download_sdist.py PROJECT VERSION FOLDER
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def sdist_name(project: str, version: str) -> re.Pattern[str]:
    """The sdist's file name, normalized as older and newer tools write it (llama_cpp_python, llama-cpp-python)."""
    return re.compile(rf"^{re.sub(r'[-_.]+', '[-_.]+', project)}-{re.escape(version)}\.tar\.gz$", re.IGNORECASE)


def main(project: str, version: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    name = sdist_name(project, version)
    partial = folder / ".partial"  # pip writes here; the sdist is moved into FOLDER once whole
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", project,
               "--dest", str(partial), f"{project}=={version}"]  # fmt: skip
    result = subprocess.run(command, check=False)
    found = sorted(path for path in partial.glob("*") if name.match(path.name)) if partial.is_dir() else []
    if result.returncode != 0 or not found:
        sys.exit(f"pip could not download the sdist of {project} {version} (exit status {result.returncode}): "
                 f"{' '.join(command)}")  # fmt: skip
    target = folder / found[0].name
    found[0].replace(target)
    for leftover in partial.iterdir():
        leftover.unlink()
    partial.rmdir()
    return target


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
