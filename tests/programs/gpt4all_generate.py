"""A Python program generating text with gpt4all, for the tests: gpt4all's llmodel libraries
bundle a llama.cpp (and ggml) of mid-2024, built into one library per backend variant
(libllamamodel-mainline-*.so) that gpt4all loads at run time. Runs on the CPU, two threads,
greedily, so the text is the same every run.

    python gpt4all_generate.py MODEL.gguf [TOKENS]      (16 tokens by default)

gpt4all is not installed in the virtual environment: run it with its folder on PYTHONPATH
(tests/integration/native.py's gpt4all_folder()). The model is a file of the tests' own
(arch_models.write_model(path, "llama")): nothing is downloaded. Prints the generated text.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpt4all import GPT4All

PROMPT = "The capital of France is"
THREADS = 2


def main(model: Path, tokens: int) -> None:
    llm = GPT4All(model_name=model.name, model_path=model.parent, allow_download=False, device="cpu", n_threads=THREADS)
    with llm:
        print(llm.generate(PROMPT, max_tokens=tokens, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 16)
