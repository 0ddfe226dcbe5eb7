from __future__ import annotations

import pytest

from ggml_viz.capture.core.models import described_size


@pytest.mark.parametrize(
    ("description", "parameters", "said"),
    [
        ("llama ?B Q4_1", 134_515_008, "llama 135M Q4_1"),  # SmolLM2-135M: 30 layers have no class
        ("qwen2 ?B F16", 1_543_714_304, "qwen2 1.54B F16"),
        ("llama 7B Q4_0", 6_738_415_616, "llama 7B Q4_0"),  # llama.cpp's own class is kept
        ("llama ?B Q4_0", 0, "llama ?B Q4_0"),  # no count known: nothing better to say
        ("gemma3 ?Bx Q8_0", 10**9, "gemma3 ?Bx Q8_0"),  # only the whole word
    ],
)
def test_an_unknown_size_class_is_said_as_the_parameter_count(description, parameters, said):
    assert described_size(description, parameters) == said
