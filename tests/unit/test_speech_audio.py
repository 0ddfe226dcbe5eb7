"""The whisper tests' audio: resampling to whisper's 16 kHz and 16-bit WAV files, and espeak-ng's
speech as whisper-cli will read it."""

from __future__ import annotations

import wave

import numpy as np

from ..speech import WHISPER_SAMPLE_RATE, read_wav, resample, speech_wav, write_wav


def test_resampling_keeps_a_tone_and_drops_what_the_new_rate_cannot_hold():
    # GIVEN a second of 440 Hz plus 10 kHz at espeak-ng's 22,050 Hz
    t = np.arange(22050) / 22050
    samples = 0.5 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 10000 * t)
    # WHEN it is resampled to 16 kHz
    resampled = resample(samples, 22050, WHISPER_SAMPLE_RATE)
    # THEN the 440 Hz tone is kept exactly and the 10 kHz one, above 8 kHz, is gone (not folded to 6 kHz)
    t16 = np.arange(WHISPER_SAMPLE_RATE) / WHISPER_SAMPLE_RATE
    assert resampled.dtype == np.float32 and len(resampled) == WHISPER_SAMPLE_RATE
    assert np.abs(resampled - 0.5 * np.sin(2 * np.pi * 440 * t16)).max() < 1e-4


def test_wav_files_round_trip(tmp_path):
    samples = np.linspace(-1, 1, 1000, dtype=np.float32)
    write_wav(tmp_path / "ramp.wav", samples)
    read, rate = read_wav(tmp_path / "ramp.wav")
    assert rate == WHISPER_SAMPLE_RATE and np.abs(read - samples).max() < 1e-4


def test_speech_is_16_khz_mono_16_bit(tmp_path):
    path = speech_wav(tmp_path / "speech.wav", "Hello from ggml-viz.")
    with wave.open(str(path), "rb") as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (WHISPER_SAMPLE_RATE, 1, 2)
        assert wav.getnframes() > WHISPER_SAMPLE_RATE // 2
    samples, _ = read_wav(path)
    assert 0.1 < np.abs(samples).max() <= 1.0
