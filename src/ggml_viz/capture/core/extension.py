"""The C recorder's Python extension (_recorder.c, declared in _recorder.pyi), loaded once.

`extension` is the module, or None where it was not built or does not fit this Python (then
ggml-viz says so once and records with its Python recorder, and decodes with the Python twins
of its functions). The extension was built from the contract's declarations (capture/contract/):
one built from other declarations (an install out of step with its sources) is refused here,
by the digest it carries, rather than have its records misread.
"""

from __future__ import annotations

from ..contract import digest

IMPORT_ERROR: str | None = None
try:
    from . import _recorder as extension
except ImportError as error:  # pragma: no cover - exercised when the build failed
    extension = None  # type: ignore[assignment]
    IMPORT_ERROR = str(error)
else:
    if getattr(extension, "CONTRACT_DIGEST", None) != digest():
        IMPORT_ERROR = (
            f"it was built from other record layouts (contract {getattr(extension, 'CONTRACT_DIGEST', 'unknown')}, "
            f"this Python's {digest()}): install ggml-viz again"
        )
        extension = None  # type: ignore[assignment]


def extension_available() -> bool:
    return extension is not None
