"""Where the Makefile keeps what it builds and installs outside the checkout: its GGML_VIZ_CACHE
(~/.cache/ggml-viz unless set), so that tests find llama.cpp's, whisper.cpp's and the bindings'
builds wherever `make` put them."""

from __future__ import annotations

import os
from pathlib import Path


def cache_folder() -> Path:
    return Path(os.environ.get("GGML_VIZ_CACHE", Path.home() / ".cache/ggml-viz"))
