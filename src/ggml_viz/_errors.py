"""Errors a user can cause and read: each carries one clear line."""

from __future__ import annotations


class GgmlVizError(Exception):
    """Base class of every error ggml-viz raises on purpose."""


class RunFormatError(GgmlVizError):
    """A run directory is missing, foreign, of another version, or mixed from two recordings."""


class CaptureError(GgmlVizError):
    """Recording cannot start (no llama-cpp-python, an unexpected ggml layout, bad output path)."""


class LlamaCppPythonMissing(CaptureError):
    """llama-cpp-python, an extra since `pip install ggml-viz` stopped compiling llama.cpp, is not
    importable: the one line says how to get it (the ImportError it got follows in brackets)."""

    INSTALL = "pip install 'ggml-viz[python]'"

    def __init__(self, error: BaseException | str, needed_for: str = "this", instead: str | None = None) -> None:
        instead = instead or "`ggml-viz run -- PROGRAM` records native llama.cpp programs without it"
        super().__init__(
            f"{needed_for} needs llama-cpp-python, which is not installed ({error}): {self.INSTALL} "
            f"(it compiles llama.cpp: minutes); {instead}"
        )


class ModelNotFoundError(GgmlVizError):
    """The model file is missing (on disk or, named org/repo, in the Hugging Face cache), a name
    picks several files, or the file is not a GGUF file."""


class ModelFileError(GgmlVizError):
    """A model file is malformed: its header lies about counts, lengths, types or offsets."""


class CommandError(GgmlVizError):
    """A command-line mistake; `exit_code` becomes the process's exit status."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
