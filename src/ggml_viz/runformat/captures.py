"""Captured tensors (--capture): a tensor's raw bytes, as ggml laid them out, as float32 values."""

from __future__ import annotations

import numpy as np

from .._errors import RunFormatError


def decode_tensor(data: bytes, ggml_type: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor's raw bytes as float32 (f32, f16, bf16 directly; quantized types through gguf)."""
    if ggml_type == "f32":
        values = np.frombuffer(data, dtype="<f4")
    elif ggml_type == "f16":
        values = np.frombuffer(data, dtype="<f2").astype(np.float32)
    elif ggml_type == "bf16":
        values = (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    elif ggml_type in ("i32", "i16", "i8"):
        values = np.frombuffer(data, dtype={"i32": "<i4", "i16": "<i2", "i8": "i1"}[ggml_type]).astype(np.float32)
    else:
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        try:
            quant_type = GGMLQuantizationType[ggml_type.upper()]
        except KeyError:
            raise RunFormatError(f"cannot decode a tensor of type {ggml_type}") from None
        values = dequantize(np.frombuffer(data, dtype=np.uint8), quant_type).astype(np.float32).ravel()
    return values.reshape(shape)
