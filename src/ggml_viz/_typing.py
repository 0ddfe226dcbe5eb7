"""Typing names newer than the oldest Python ggml-viz runs on (3.10): imported from here, so that
each module that needs one does not choose between typing and typing_extensions itself."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from typing import Required
else:  # Python 3.10: typing_extensions, a dependency there only
    from typing_extensions import Required

__all__ = ["Required"]
