"""Capture settings as the API, the command line and the environment give them."""

from __future__ import annotations

import pytest

from ggml_viz._errors import CaptureError
from ggml_viz.capture.settings import (
    CaptureSettings,
    ValueSettings,
    parse_layers,
    parse_names,
    selection_from,
    settings_from_environment,
)


def test_layer_ranges_parse():
    assert parse_layers("0-3, 29,none") == (((0, 3), (29, 29)), True)
    assert parse_layers("") == ((), False)


@pytest.mark.parametrize("text", ["3-1", "a", "1-", "-2", "0..3"])
def test_bad_layer_ranges_are_refused(text):
    with pytest.raises(CaptureError, match="layers"):
        parse_layers(text)


def test_names_are_comma_separated_in_text_and_in_lists():
    assert parse_names("attn*, ffn_*,") == ("attn*", "ffn_*")
    assert parse_names(["attn*,ffn_*", " kq-3 "]) == ("attn*", "ffn_*", "kq-3")
    assert parse_names(None) == parse_names([]) == ()


def test_selection_combines_filters():
    selection = selection_from("mul_mat, rope", "0-1", "attn*,ffn_*")
    assert selection.ops == ("MUL_MAT", "ROPE")
    assert selection.layers == ((0, 1),)
    assert selection.names == ("attn*", "ffn_*")
    assert not selection.is_everything
    assert selection_from(None, None, None).is_everything


def test_environment_gives_every_setting():
    env = {
        "GGML_VIZ_RECORDER": "python",
        "GGML_VIZ_DETAIL": "graph",
        "GGML_VIZ_TIMING": "sync",
        "GGML_VIZ_SAMPLE": "8",
        "GGML_VIZ_OPS": "MUL_MAT",
        "GGML_VIZ_LAYERS": "0-3,29",
        "GGML_VIZ_NAMES": "attn*",
        "GGML_VIZ_MAX_EVENTS": "1000",
        "GGML_VIZ_POLICY": "keep-last",
        "GGML_VIZ_VALUES": "stats",
        "GGML_VIZ_CAPTURE": "kq_soft_max-*,ffn_out-3",
        "GGML_VIZ_CAPTURE_BYTES": "1000",
    }
    settings = settings_from_environment(env)
    assert settings == CaptureSettings(
        recorder="python",
        detail="graph",
        timing="sync",
        sample=8,
        selection=selection_from("MUL_MAT", "0-3,29", "attn*"),
        max_events=1000,
        policy="keep-last",
        values=ValueSettings(stats=True, captures=("kq_soft_max-*", "ffn_out-3"), capture_bytes=1000),
    )
    assert settings_from_environment({}) == CaptureSettings()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GGML_VIZ_SAMPLE": "often"}, "not a whole number"),
        ({"GGML_VIZ_SAMPLE": "0"}, "sample must be 1 or more"),
        ({"GGML_VIZ_DETAIL": "everything"}, "unknown detail"),
        ({"GGML_VIZ_TIMING": "later"}, "unknown timing"),
        ({"GGML_VIZ_VALUES": "all"}, "unknown values"),
        ({"GGML_VIZ_CAPTURE_BYTES": "-1"}, "capture_bytes"),
        ({"GGML_VIZ_POLICY": "keep-middle"}, "unknown policy"),
        ({"GGML_VIZ_RECORDER": "rust"}, "unknown recorder"),
        ({"GGML_VIZ_MAX_EVENTS": "-5"}, "positive"),
    ],
)
def test_bad_settings_are_refused_clearly(env, message):
    with pytest.raises(CaptureError, match=message):
        settings_from_environment(env)
