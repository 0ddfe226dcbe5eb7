from __future__ import annotations

import os
import tempfile

import pytest

# The tests' own cache folder: a machine's measured limits (`ggml-viz limits`) would otherwise
# go into the runs the tests record, and the tests' into the user's cache.
os.environ["GGML_VIZ_LIMITS_DIR"] = tempfile.mkdtemp(prefix="ggml-viz-test-limits-")


@pytest.fixture(autouse=True)
def no_recording_left_active():
    """Every test must leave no recording active and llama-cpp-python unpatched."""
    yield
    import sys

    from ggml_viz.capture.llama_cpp_python.session import active_recording

    assert active_recording() is None, "a test left a recording active"
    core = sys.modules.get("llama_cpp.llama_cpp")
    if core is not None:
        for name in ("llama_init_from_model", "llama_decode", "llama_free"):
            assert not getattr(getattr(core, name), "__ggml_viz_wrapper__", False), f"{name} is still wrapped"
