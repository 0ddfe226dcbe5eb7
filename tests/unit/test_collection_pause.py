"""The recording pauses garbage collection while it writes graphs outside a decode call."""

from __future__ import annotations

import gc
import threading

from ggml_viz.capture.llama_cpp_python.session import collection_paused


def test_overlapping_pauses_keep_collection_off_until_the_last_ends():
    assert gc.isenabled()
    first_in, first_may_end = threading.Event(), threading.Event()
    seen = {}

    def writer():
        with collection_paused():
            first_in.set()
            first_may_end.wait(5)
            seen["writer, after the other ended"] = gc.isenabled()

    thread = threading.Thread(target=writer)
    thread.start()
    first_in.wait(5)
    # GIVEN one pause open (the idle writer), WHEN another opens and ends (stop())
    with collection_paused():
        seen["inside both"] = gc.isenabled()
    first_may_end.set()
    thread.join(5)
    # THEN collection stays off until the last pause ends, and then is on again
    assert seen == {"inside both": False, "writer, after the other ended": False}
    assert gc.isenabled()


def test_a_pause_leaves_collection_off_when_the_program_had_turned_it_off():
    gc.disable()
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
