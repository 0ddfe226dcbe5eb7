"""`ggml-viz limits`' read kernel (capture/memory_read.c): every word read, at any thread count."""

from __future__ import annotations

import numpy as np
import pytest

from ggml_viz.capture import _memory_read


@pytest.mark.parametrize("threads", [1, 2, 3, 5, 7, 16])
@pytest.mark.parametrize("extra_words", [0, 13])
def test_each_pass_reads_every_word_once(threads, extra_words):
    # GIVEN a buffer whose shares do not fall on whole steps of the kernel (3 or 7 threads, 13 words more)
    words = np.arange(((4 << 20) // 8) + extra_words, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    # WHEN the kernel reads it with `threads` threads
    elapsed_ns, checksum = _memory_read.read_pass(words.ctypes.data, words.nbytes, threads)
    # THEN its sum is the words' (wrapping at 64 bits), and the pass took some time
    assert checksum == int(words.sum(dtype=np.uint64))
    assert elapsed_ns > 0


@pytest.mark.parametrize(("size", "threads"), [(64, 2), (100, 1), (1 << 20, 0), (1 << 20, 5000)])
def test_a_wrong_argument_is_one_clear_error(size, threads):
    words = np.zeros(1 << 17, dtype=np.uint64)
    with pytest.raises(ValueError, match="read_pass: 1 to 1024 threads"):
        _memory_read.read_pass(words.ctypes.data, size, threads)
