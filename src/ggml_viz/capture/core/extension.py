"""The C recorder's Python extension (_recorder.c, declared in _recorder.pyi), loaded once.

`extension` is the module, or None where it was not built or does not fit this build (then
ggml-viz says so once and records with its Python recorder, and decodes with the Python twins
of its functions). The records' layouts come from C: the dtypes that read them are checked here.
"""

from __future__ import annotations

from .raw_graph import BUFFER_DTYPE, CAPTURE_DTYPE, DECODE_DTYPE, VALUES_DTYPE

IMPORT_ERROR: str | None = None
try:
    from . import _recorder as extension
except ImportError as error:  # pragma: no cover - exercised when the build failed
    extension = None  # type: ignore[assignment]
    IMPORT_ERROR = str(error)
else:
    for _dtype, _size in ((BUFFER_DTYPE, "BUFFER_RECORD_SIZE"), (DECODE_DTYPE, "DECODE_RECORD_SIZE"),
                          (VALUES_DTYPE, "STATS_RECORD_SIZE"), (CAPTURE_DTYPE, "CAPTURE_RECORD_SIZE")):  # fmt: skip
        if _dtype.itemsize != getattr(extension, _size):  # pragma: no cover - a build out of step with its Python
            IMPORT_ERROR = f"its {_size} is {getattr(extension, _size)}, not {_dtype.itemsize}"
            extension = None  # type: ignore[assignment]
            break


def extension_available() -> bool:
    return extension is not None
