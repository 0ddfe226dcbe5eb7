"""What llama.cpp says about a model, a context and a batch (read through llama-cpp-python)."""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

import numpy as np

from ..core.context_tracer import BatchCopy
from ..core.extension import extension
from ..core.models import described_size

FLASH_ATTN = {-1: "auto", 0: "off", 1: "on"}


def _lib() -> Any:
    import llama_cpp.llama_cpp as llama_cpp

    return llama_cpp


def model_info(model: int, path: str | None) -> dict[str, Any]:
    llama = _lib()
    buffer = ctypes.create_string_buffer(256)
    llama.llama_model_desc(model, buffer, len(buffer))
    info: dict[str, Any] = {
        "path": os.path.abspath(path) if path else None,
        "file_size": os.path.getsize(path) if path and os.path.exists(path) else None,
        "description": described_size(buffer.value.decode(errors="replace"), llama.llama_model_n_params(model)),
        "architecture": _meta(model, b"general.architecture"),
        "name": _meta(model, b"general.name"),
        "layers": int(llama.llama_model_n_layer(model)),
        "parameters": int(llama.llama_model_n_params(model)),
        "tensor_bytes": int(llama.llama_model_size(model)),
        "n_ctx_train": int(llama.llama_model_n_ctx_train(model)),
        "n_embd": int(llama.llama_model_n_embd(model)),
    }
    return info


def _meta(model: int, key: bytes) -> str | None:
    buffer = ctypes.create_string_buffer(256)
    length = _lib().llama_model_meta_val_str(model, key, buffer, len(buffer))
    return buffer.value.decode(errors="replace") if length >= 0 else None


def context_info(ctx: int, params: Any) -> dict[str, Any]:
    llama = _lib()
    return {
        "n_ctx": int(llama.llama_n_ctx(ctx)),
        "n_batch": int(llama.llama_n_batch(ctx)),
        "n_ubatch": int(llama.llama_n_ubatch(ctx)),
        "n_seq_max": int(params.n_seq_max),
        "n_threads": int(params.n_threads),
        "n_threads_batch": int(params.n_threads_batch),
        "flash_attn": FLASH_ATTN.get(int(params.flash_attn_type), str(params.flash_attn_type)),
        "type_k": int(params.type_k),
        "type_v": int(params.type_v),
        "offload_kqv": bool(params.offload_kqv),
        "embeddings": bool(params.embeddings),
    }


def system_info() -> str:
    return (_lib().llama_print_system_info() or b"").decode(errors="replace").strip()


def bos_eos(model: int) -> tuple[int | None, int | None]:
    """The vocabulary's BOS and EOS tokens (None where this llama.cpp cannot say)."""
    llama = _lib()
    if not hasattr(llama, "llama_vocab_bos"):
        return None, None
    vocab = llama.llama_model_get_vocab(model)
    return int(llama.llama_vocab_bos(vocab)), int(llama.llama_vocab_eos(vocab))


class TokenText:
    """Token id -> its text piece, cached per vocabulary."""

    def __init__(self, model: int) -> None:
        self._vocab = _lib().llama_model_get_vocab(model)
        self._cache: dict[int, str] = {}
        self._buffer = ctypes.create_string_buffer(256)

    def __call__(self, token: int) -> str:
        text = self._cache.get(token)
        if text is None:
            length = _lib().llama_token_to_piece(self._vocab, token, self._buffer, len(self._buffer), 0, True)
            text = self._buffer.raw[: max(length, 0)].decode("utf-8", "replace")
            self._cache[token] = text
        return text


def read_batch(batch: Any) -> BatchCopy:
    """Copy a llama_batch, cheaply: this runs before every llama_decode."""
    offsets = batch_offsets()
    if extension is not None and offsets is not None and isinstance(batch, ctypes.Structure):
        return extension.read_batch(ctypes.addressof(batch), offsets)
    return read_batch_in_python(batch)


def read_batch_in_python(batch: Any) -> BatchCopy:
    """read_batch without the C extension (and its test oracle)."""
    n = max(int(batch.n_tokens), 0)

    def read(pointer: Any, dtype: type) -> np.ndarray:
        address = ctypes.cast(pointer, ctypes.c_void_p).value
        if not n or not address:
            return np.full(n, -1, dtype=dtype)
        return np.frombuffer(ctypes.string_at(address, n * np.dtype(dtype).itemsize), dtype=dtype)

    seq_ids = np.full(n, -1, dtype=np.int32)
    if n and batch.seq_id and batch.n_seq_id:
        seq_ids = np.array([batch.seq_id[i][0] if batch.n_seq_id[i] > 0 else -1 for i in range(n)], dtype=np.int32)
    outputs = read(batch.logits, np.int8) > 0
    if n and not batch.logits:
        outputs[-1] = True  # llama.cpp's default: logits for the last token only
    positions = read(batch.pos, np.int32)
    lowest = int(positions.min()) if n else -1
    return n, lowest, read(batch.token, np.int32).tobytes(), positions.tobytes(), seq_ids.tobytes(), outputs.tobytes()


@functools.cache
def batch_offsets() -> tuple[int, int, int, int, int] | None:
    """Where llama_batch keeps its columns, as llama-cpp-python declares the struct."""
    batch_type = _lib().llama_batch
    names = ("token", "pos", "n_seq_id", "seq_id", "logits")
    if batch_type._fields_[0][0] != "n_tokens" or not all(hasattr(batch_type, name) for name in names):
        return None
    return tuple(getattr(batch_type, name).offset for name in names)  # type: ignore[return-value]
