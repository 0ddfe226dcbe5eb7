"""scripts/docs_pictures.py makes every picture the documentation shows: run into a folder of
its own (SmolLM2 generating few tokens), it saves each picture a doc refers to, as a PNG of the
viewport, and no view it photographed named a local path (the script fails if one did)."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ..browser import chromium

pytestmark = [pytest.mark.model, pytest.mark.browser]

CHECKOUT = Path(__file__).resolve().parents[2]
SCRIPT = CHECKOUT / "scripts" / "docs_pictures.py"
DOCS = [*sorted((CHECKOUT / "docs").glob("*.md")), CHECKOUT / "README.md"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VIEWPORT = (1440, 900)


def pictures_the_docs_show() -> set[str]:
    """Every file name a doc's image or link reaches under screenshots/."""
    found = set()
    for doc in DOCS:
        found |= set(re.findall(r"screenshots/([\w.-]+\.png)", doc.read_text(encoding="utf-8")))
    return found


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height, from its header (its first chunk, IHDR)."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_SIGNATURE and head[12:16] == b"IHDR", f"{path.name} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    with chromium():  # skipped (or failed, GGML_VIZ_REQUIRE_BROWSER) without Debian's Chromium
        pass
    out = tmp_path_factory.mktemp("pictures")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--tokens", "6"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return out, done


def test_the_script_makes_every_picture_the_docs_show(made):
    out, done = made
    assert done.returncode == 0, done.stdout + done.stderr
    shown = pictures_the_docs_show()
    assert {"overview.png", "experts.png", "whatif.png", "roofline.png"} <= shown
    missing = sorted(name for name in shown if not (out / name).exists())
    assert missing == [], f"docs refer to pictures the script does not make: {missing}"
    for name in sorted(shown):
        assert png_size(out / name) == VIEWPORT, name


def test_every_picture_kept_in_the_docs_is_one_a_doc_shows():
    kept = {path.name for path in (CHECKOUT / "docs" / "screenshots").glob("*.png")}
    assert kept == pictures_the_docs_show()


def test_a_page_naming_a_local_path_fails_the_script(tmp_path):
    # GIVEN the script's check, on a page whose text names the home folder
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import docs_pictures
    finally:
        sys.path.remove(str(SCRIPT.parent))

    class Page:
        def wait_for_timeout(self, _: int) -> None:
            pass

        def evaluate(self, _: str) -> str:
            return f"file {Path.home()}/models/model.gguf"

        def screenshot(self, path: str) -> None:
            raise AssertionError("a page naming a local path was saved")

    camera = docs_pictures.Photographer(Page(), tmp_path, docs_pictures.private_paths(tmp_path))
    # WHEN a picture of it is to be saved, THEN the script stops, naming the path
    with pytest.raises(SystemExit, match="shows a local path"):
        camera.save("overview.png")
