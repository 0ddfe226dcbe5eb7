"""Do ggml-viz's whisper.cpp figures agree with whisper.cpp's own? whisper-cli under
`ggml-viz run`, each round set beside what whisper_print_timings says of the same process:

- encode: the time of the recorded encode graphs (the convolutions, the encoder, the
  cross-attention's keys and values) against whisper's `encode time`;
- decode: the recorded decoder steps against whisper's `decode` plus `batchd` times (which
  also sample on the host, outside any graph);
- tokens: the tokens the recorded decoder steps were fed against the runs whisper counts for
  decode and batchd (batchd counts tokens);
- weights: how many of the model's tensors were named from the file by their bytes.

By default on the tests' random-weight model (4 encoder and 4 decoder layers) and espeak-ng's
speech; `--model` and `--audio` take a real one. whisper-cli comes from `make setup`
(scripts/build-whisper-tools.sh). Run from the repository's root:

    python benchmarks/whisper_agreement.py                          # 3 rounds
    python benchmarks/whisper_agreement.py --model ggml-base.en.bin --audio speech.wav --rounds 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the tests' model writer and speech

from tests.speech import speech_wav  # noqa: E402
from tests.whisper_models import RUNNABLE, whisper_timing, whisper_tools_folder, write_whisper_model  # noqa: E402


def whisper_cli() -> Path:
    for path in (Path(sys.executable).parent / "whisper-cli", whisper_tools_folder() / "bin" / "whisper-cli"):
        if path.exists():
            return path
    sys.exit("whisper-cli is missing: `make setup` builds whisper.cpp's programs")


def one_round(command: list[str], output: Path) -> dict[str, float]:
    import ggml_viz

    shutil.rmtree(output, ignore_errors=True)
    result = subprocess.run(
        [sys.executable, "-m", "ggml_viz", "run", "-o", str(output), "--", *command],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        sys.exit(f"whisper-cli failed ({result.returncode}): {result.stderr[-2000:]}")
    run = ggml_viz.open(output)
    graphs = run.graphs
    took = ((graphs["end_ns"] - graphs["start_ns"]).groupby(graphs["phase"]).sum() / 1e6).to_dict()
    decode_ms, decode_runs = whisper_timing(result.stderr, "decode")
    batched_ms, batched_runs = whisper_timing(result.stderr, "batchd")
    decoder = graphs.loc[graphs["phase"] == "decode", "graph_id"]
    named = sum(context.get("weights_named_from_file", {}).get("named", 0) for context in run.manifest["contexts"])
    return {
        "encode_ms": took.get("encode", 0.0),
        "whisper_encode_ms": whisper_timing(result.stderr, "encode")[0],
        "decode_ms": took.get("decode", 0.0),
        "whisper_decode_ms": decode_ms + batched_ms,
        "tokens": int(run.tokens["graph_id"].isin(decoder).sum()),
        "whisper_runs": decode_runs + batched_runs,
        "named": named,
        "tensors": len(run.raw("memory_map").query("kind == 'tensor'")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="a whisper.cpp model (default: the tests' random one)")
    parser.add_argument("--audio", type=Path, help="a WAV file (default: espeak-ng's speech)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = args.model or Path(folder) / "ggml-random.bin"
        if args.model is None:
            write_whisper_model(model, RUNNABLE)
        audio = args.audio or speech_wav(Path(folder) / "speech.wav")
        # -nf: no temperature fallback, so that each round decodes the same way
        command = [str(whisper_cli()), "-m", str(model), "-f", str(audio), "-t", str(args.threads), "-nf"]
        print(f"whisper-cli {' '.join(command[1:])}")
        rounds = []
        for index in range(args.rounds):
            r = one_round(command, Path(folder) / "whisper.ggmlviz")
            rounds.append(r)
            encode = f"encode {r['encode_ms']:6.1f} ms of whisper's {r['whisper_encode_ms']:6.1f}"
            decode = f"decode {r['decode_ms']:5.1f} ms of {r['whisper_decode_ms']:5.1f}"
            print(
                f"  round {index + 1}: {encode} ({r['encode_ms'] / r['whisper_encode_ms']:.2f})   {decode} "
                f"({r['decode_ms'] / r['whisper_decode_ms']:.2f})   tokens {r['tokens']} of {r['whisper_runs']} runs"
                f"   weights named {r['named']} of {r['tensors']}"
            )
        ratio = statistics.median(r["encode_ms"] / r["whisper_encode_ms"] for r in rounds)
        print(f"median encode ratio {ratio:.2f} over {args.rounds} rounds")


if __name__ == "__main__":
    main()
