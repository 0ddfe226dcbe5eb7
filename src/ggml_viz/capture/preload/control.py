"""The window control: a small file in a dormant recording that `ggml-viz run` writes and the
preload library maps read-only (GGML_VIZ_CONTROL). Its layout is preload.h's WindowControl: a
generation number, and which spool the generation writes, with graphs (a window) or without (dormant:
each llama call's batch only). The traced process compares the generation with its own at each call,
one load, and switches spools when it changed."""

from __future__ import annotations

import os
import struct
from pathlib import Path

CONTROL_FILE = "control"
DORMANT_FILE = "dormant.json"  # a dormant recording's description (windows.py), in place of a manifest
CONTROL_MAGIC = b"GVIZCTL1"
CONTROL_BYTES = 4096
_HEAD = struct.Struct("<8sQII")  # magic, generation, graphs, unused
_FOLDER_BYTES = CONTROL_BYTES - _HEAD.size


class WindowControl:
    """The control file of one dormant recording, written in place (the process maps it: a file
    put in its place would not be seen)."""

    def __init__(self, path: Path, spool_dir: Path) -> None:
        self.path = path
        self.generation = 0
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        os.write(self._fd, _HEAD.pack(CONTROL_MAGIC, 0, 0, 0) + self._folder(spool_dir))

    @staticmethod
    def _folder(spool_dir: Path) -> bytes:
        encoded = os.fsencode(spool_dir)
        if len(encoded) >= _FOLDER_BYTES:
            raise ValueError(f"the spool folder's path is too long for the window control: {spool_dir}")
        return encoded.ljust(_FOLDER_BYTES, b"\0")

    def switch(self, spool_dir: Path, graphs: bool) -> int:
        """Ask for the next generation: a spool in `spool_dir` (made here), with graphs or not.
        The folder and the flag are written before the generation, which the process reads first."""
        spool_dir.mkdir(parents=True, exist_ok=True)
        os.pwrite(self._fd, struct.pack("<II", int(graphs), 0) + self._folder(spool_dir), 16)
        self.generation += 1
        os.pwrite(self._fd, struct.pack("<Q", self.generation), 8)
        return self.generation

    def close(self) -> None:
        os.close(self._fd)
