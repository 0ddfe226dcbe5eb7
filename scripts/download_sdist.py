"""Download a project's source distribution from PyPI's index, checked against its sha256.

`pip download --no-binary :all:` would do it too, but it first builds the sdist's build
requirements from source to read its metadata (minutes for llama-cpp-python; pywhispercpp's
setup.py fails outright): the file alone is what the builds need.

usage: python scripts/download_sdist.py PROJECT VERSION FOLDER
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import urllib.request
from pathlib import Path

INDEX = "https://pypi.org/simple/{project}/"


def main(project: str, version: str, folder: Path) -> None:
    request = urllib.request.Request(
        INDEX.format(project=project), headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    # the sdist's name, normalized as older and newer tools write it (llama_cpp_python, llama-cpp-python)
    name = re.compile(rf"^{re.sub(r'[-_.]+', '[-_.]+', project)}-{re.escape(version)}\.tar\.gz$", re.IGNORECASE)
    entry = next((file for file in files if name.match(file["filename"])), None)
    if entry is None:
        sys.exit(f"PyPI lists no sdist of {project} {version}")
    digest = hashlib.sha256()
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / (entry["filename"] + ".partial")
    with urllib.request.urlopen(entry["url"], timeout=300) as response, partial.open("wb") as out:
        size, done, shown = int(response.headers.get("Content-Length") or 0), 0, -1
        while chunk := response.read(1 << 20):
            out.write(chunk)
            digest.update(chunk)
            done += len(chunk)
            if size and done * 10 // size != shown:  # progress in tenths
                shown = done * 10 // size
                print(f"   {entry['filename']}: {done / 2**20:.0f} of {size / 2**20:.0f} MiB", file=sys.stderr)
    if digest.hexdigest() != entry["hashes"]["sha256"]:
        partial.unlink()
        sys.exit(f"{entry['filename']}: sha256 {digest.hexdigest()}, but PyPI's index says {entry['hashes']['sha256']}")
    partial.rename(folder / entry["filename"])


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
