"""The findings' comparisons say "slower" where a ratio is below 1, never "0.7× faster"."""

from __future__ import annotations

import re

import pytest

from ggml_viz.analysis.findings import how_fast, prompt_against_decode


@pytest.mark.parametrize(
    ("prompt", "decode", "said"),
    [
        (96.0, 145.2, "Prompt processing runs 1.5× slower than decoding per token (96.0 vs 145.2 tokens/s)."),
        (1_450.0, 14.5, "Prompt processing runs 100.0× faster than decoding per token (1,450.0 vs 14.5 tokens/s)."),
        (100.0, 98.0, "Prompt processing runs about as fast as decoding per token (100.0 vs 98.0 tokens/s)."),
        (98.0, 100.0, "Prompt processing runs about as fast as decoding per token (98.0 vs 100.0 tokens/s)."),
    ],
)
def test_prompt_against_decode(prompt: float, decode: float, said: str) -> None:
    assert prompt_against_decode(prompt, decode) == said


@pytest.mark.parametrize("ratio", [0.01, 0.1, 0.5, 0.7, 0.9, 0.96, 1.0, 1.04, 1.06, 1.5, 2.0, 10.0, 250.0])
def test_no_ratio_below_one_is_called_faster(ratio: float) -> None:
    """Whichever side of 1 the ratio is, the factor said is at least 1 and the word matches its side."""
    words = how_fast(ratio, "decoding")
    factor = re.match(r"([\d,.]+)× (faster|slower) than decoding$", words)
    if factor is None:
        assert words == "about as fast as decoding"
        assert 1 / 1.05 < ratio < 1.05
        return
    assert float(factor[1].replace(",", "")) >= 1.0
    assert factor[2] == ("faster" if ratio > 1 else "slower")
