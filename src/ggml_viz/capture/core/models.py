"""How a run's manifest describes a model, whichever path recorded it."""

from __future__ import annotations


def described_size(description: str, parameters: int | None) -> str:
    """llama.cpp's model description ("llama ?B Q4_1") with its unknown size class ("?B", for any
    model whose layer count llama.cpp has no name for) said as the parameter count: "llama 135M Q4_1"."""
    if not parameters or "?B" not in description.split():
        return description
    size = f"{parameters / 1e9:.3g}B" if parameters >= 1e9 else f"{parameters / 1e6:.3g}M"
    return " ".join(size if word == "?B" else word for word in description.split(" "))
