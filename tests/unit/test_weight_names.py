"""Weights a program left unnamed, named from the model file by their bytes: the native
recorder's fingerprint and the model file's agree, and only a fingerprint one file tensor has
names a weight."""

from __future__ import annotations

import numpy as np
import pytest

from ggml_viz.capture.contract.records import WEIGHT_PRINT
from ggml_viz.capture.core.extension import extension
from ggml_viz.capture.core.ggml_api import TENSOR_DTYPE
from ggml_viz.capture.core.weight_names import WeightNames
from ggml_viz.modelfile.fingerprints import tensor_fingerprints, weight_fingerprint
from ggml_viz.modelfile.layout import read_layout

from ..whisper_models import TINY, write_whisper_model

pytestmark = pytest.mark.skipif(extension is None, reason="the C recorder's extension is not built")


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 1000, 4096])
def test_the_recorder_and_the_file_side_fingerprint_alike(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    assert extension.weight_fingerprint(data) == weight_fingerprint(data)


def test_a_fingerprint_only_one_tensor_has_names_the_weight(tmp_path):
    # GIVEN a model file, and two weights in memory: one with a tensor's bytes, one with
    # bytes two tensors share (made so), one with bytes of no tensor
    path = tmp_path / "model.bin"
    write_whisper_model(path, TINY)
    layout = read_layout(path)
    content = path.read_bytes()
    tensor = layout.tensors[3]
    prints = np.array(
        [
            (0x1000, tensor.nbytes, weight_fingerprint(content[tensor.start : tensor.end])),
            (0x2000, 8, weight_fingerprint(b"same" * 2)),
            (0x3000, 8, weight_fingerprint(b"nowhere!")),
        ],
        dtype=WEIGHT_PRINT.dtype,
    )
    shared = {(8, weight_fingerprint(b"same" * 2)): ["a.weight", "b.weight"]}
    names = WeightNames(lambda: [tensor_fingerprints(layout), shared])
    names.learn(prints.tobytes())
    # THEN only the first is named; the others are counted
    assert names.counts == {"named": 1, "ambiguous": 1, "unmatched": 1}
    leaves = np.zeros(3, dtype=TENSOR_DTYPE)
    leaves["data"] = [0x1000, 0x2000, 0x3000]
    leaves["name"] = [b"leaf_0", b"leaf_1", b"leaf_2"]
    renamed = np.frombuffer(names.rename(leaves.tobytes()), dtype=TENSOR_DTYPE)
    assert renamed["name"].tolist() == [tensor.name.encode(), b"leaf_1", b"leaf_2"]
