"""Speech for the whisper tests, spoken by Debian's espeak-ng and kept as whisper's own audio:
16 kHz, mono, 16-bit PCM WAV (whisper-cli would resample other WAV files itself, but Python
callers of whisper.cpp hand it 16 kHz float samples).

espeak-ng writes 22,050 Hz WAV; the samples are resampled here with numpy (band-limited, by
the FFT), so neither sox nor ffmpeg is needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np
import pytest

WHISPER_SAMPLE_RATE = 16000
SENTENCE = "The quick brown fox jumps over the lazy dog. A profiler shows where the time goes."
MISSING = "espeak-ng is not installed (apt-get install espeak-ng; make system-packages does it as root)"


def require_espeak() -> str:
    """espeak-ng's path, or the test skips (fails where GGML_VIZ_REQUIRE_NATIVE_TOOLS says every
    tool must be there)."""
    path = shutil.which("espeak-ng")
    if path is None:
        if os.environ.get("GGML_VIZ_REQUIRE_NATIVE_TOOLS"):
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    return path


def speech_wav(path: Path, text: str = SENTENCE) -> Path:
    """`text` spoken into `path` as a 16 kHz mono 16-bit WAV file; `path`."""
    write_wav(path, speech_samples(text))
    return path


def speech_samples(text: str = SENTENCE) -> np.ndarray:
    """`text` spoken, as float32 samples in [-1, 1] at 16 kHz (what whisper_full takes)."""
    espeak = require_espeak()
    with tempfile.TemporaryDirectory() as folder:
        spoken = Path(folder) / "spoken.wav"
        subprocess.run([espeak, "-v", "en", "-w", str(spoken), text], check=True, capture_output=True, timeout=60)
        samples, sample_rate = read_wav(spoken)
    return resample(samples, sample_rate, WHISPER_SAMPLE_RATE)


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A 16-bit PCM WAV file's samples as float32 in [-1, 1] (channels averaged) and its rate."""
    with wave.open(str(path), "rb") as wav:
        if wav.getsampwidth() != 2:
            raise ValueError(f"{path}: {8 * wav.getsampwidth()}-bit samples, not 16-bit")
        frames = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
        channels, sample_rate = wav.getnchannels(), wav.getframerate()
    samples = frames.reshape(-1, channels).mean(axis=1) / 32768.0
    return samples.astype(np.float32), sample_rate


def write_wav(path: Path, samples: np.ndarray, sample_rate: int = WHISPER_SAMPLE_RATE) -> None:
    """float samples in [-1, 1] as a mono 16-bit PCM WAV file."""
    pcm = np.clip(np.round(np.asarray(samples, dtype=np.float64) * 32767.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm.tobytes())


def resample(samples: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """Band-limited resampling through the FFT: the spectrum cut (or zero-padded) to the new
    rate's band, so that nothing above its Nyquist frequency folds back into speech."""
    if rate == target_rate or len(samples) == 0:
        return samples.astype(np.float32)
    target_length = max(1, round(len(samples) * target_rate / rate))
    spectrum = np.fft.rfft(samples.astype(np.float64))
    kept = np.zeros(target_length // 2 + 1, dtype=complex)
    n = min(len(kept), len(spectrum))
    kept[:n] = spectrum[:n]
    return (np.fft.irfft(kept, target_length) * (target_length / len(samples))).astype(np.float32)
