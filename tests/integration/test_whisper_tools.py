"""whisper.cpp 1.8.5's own whisper-cli, untraced, on the tests' random-weight whisper model and
speech from espeak-ng: the model file the tests write is one whisper.cpp loads and runs, and
whisper.cpp reads it as ggml-viz's reader maps it."""

from __future__ import annotations

import re

import pytest

from ggml_viz.modelfile.layout import read_layout

from ..speech import WHISPER_SAMPLE_RATE, speech_wav
from ..whisper_models import RUNNABLE, write_whisper_model
from .native import untraced, whisper_tool

SEGMENT = re.compile(r"^\[(\d\d:\d\d:\d\d\.\d{3}) --> (\d\d:\d\d:\d\d\.\d{3})\]\s+(\S.*)$", re.MULTILINE)


@pytest.fixture(scope="module")
def transcription(tmp_path_factory):
    """whisper-cli's run: the model, the audio, and the finished process."""
    cli = whisper_tool("whisper-cli")
    folder = tmp_path_factory.mktemp("whisper")
    model = folder / "ggml-random.bin"
    write_whisper_model(model, RUNNABLE)
    audio = speech_wav(folder / "speech.wav")
    # -nf: no temperature fallback, so that the nonsense of random weights is decoded once
    result = untraced([str(cli), "-m", str(model), "-f", str(audio), "-t", "2", "-nf"])
    return model, audio, result


def test_whisper_cli_transcribes_speech_with_the_random_model(transcription):
    _, audio, result = transcription
    # THEN it finishes and prints the transcript on stdout, each segment with its times
    assert result.returncode == 0, result.stderr[-3000:]
    segments = SEGMENT.findall(result.stdout)
    assert segments, result.stdout
    assert all(text.strip() for _, _, text in segments)
    # AND it heard the whole clip at whisper's rate: 16 kHz mono, as the audio helper writes it
    samples = re.search(r"processing '.*speech\.wav' \((\d+) samples, ([\d.]+) sec\)", result.stderr)
    assert samples, result.stderr[-3000:]
    assert int(samples.group(1)) > 2 * WHISPER_SAMPLE_RATE
    assert float(samples.group(2)) == pytest.approx(int(samples.group(1)) / WHISPER_SAMPLE_RATE, abs=0.05)
    # AND it reports its timings on stderr
    assert re.search(r"whisper_print_timings:\s+encode time =\s+[\d.]+ ms /\s+1 runs", result.stderr)


def test_whisper_cpp_reads_the_model_as_ggml_viz_maps_it(transcription):
    model, _, result = transcription
    layout = read_layout(model)
    # THEN whisper.cpp read the hyperparameters ggml-viz read, and every tensor's bytes: its
    # "model size" is the sum of the tensors' data, in MB
    for name in ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_layer", "n_text_layer", "n_mels"):
        assert re.search(rf"whisper_model_load: {name}\s+= {layout.metadata[f'whisper.{name}']}\n", result.stderr)
    tensor_bytes = sum(tensor.nbytes for tensor in layout.tensors)
    assert f"whisper_model_load: model size    = {tensor_bytes / 1e6:7.2f} MB" in result.stderr


def test_the_tools_folder_keeps_ggml_for_other_programs():
    # GIVEN whisper-cli built by scripts/build-whisper-tools.sh (a link to it where make linked it)
    folder = whisper_tool("whisper-cli").resolve().parent.parent
    # THEN ggml 0.13's shared libraries and headers lie beside it, for a plain ggml program to build against
    assert sorted(path.name for path in (folder / "lib").glob("libggml*.so.0.13*"))
    assert (folder / "include" / "ggml.h").exists() and (folder / "include" / "ggml-cpu.h").exists()
    assert "#define GGML_FILE_MAGIC   0x67676d6c" in (folder / "include" / "ggml.h").read_text()
