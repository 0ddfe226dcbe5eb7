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
    settings_from_options,
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


def test_a_renamed_value_is_still_read_under_its_new_name():
    from ggml_viz.runformat.manifest import recorder_of

    # GIVEN the C recorder's old name, `native`, as scripts and runs of before say it
    # THEN the API, the environment and the run's manifest read it as `c`
    assert settings_from_options({"recorder": "native"}).recorder == "c"
    assert settings_from_environment({"GGML_VIZ_RECORDER": "native"}).recorder == "c"
    assert recorder_of({"capture": {"recorder": "native"}}) == "c"
    assert recorder_of({"capture": {"recorder": "native-preload"}}) == "preload"
    assert recorder_of({"capture": {"recorder": "python"}}) == "python"
    # AND a value that never was one is still refused
    with pytest.raises(CaptureError, match="unknown recorder 'cpp'"):
        settings_from_options({"recorder": "cpp"})


@pytest.mark.parametrize(
    ("policy", "sizes", "written", "kept", "dropped"),
    [
        # keep-first: the third graph would pass 25 events: it and every later one are dropped
        ("keep-first", [10, 10, 10, 1], [10, 10], None, (2, 11)),
        # keep-last: every graph is written; the last whole graphs within 25 events are kept
        ("keep-last", [10, 10, 10, 1], [10, 10, 10, 1], {1, 2, 3}, (1, 10)),
    ],
)
def test_the_event_bound_drops_and_keeps_whole_graphs_by_its_policy(policy, sizes, written, kept, dropped):
    from ggml_viz.capture.core.event_bound import EventBound

    bound = EventBound(max_events=25, policy=policy)
    for size in sizes:
        if not bound.drops(size):
            bound.count_written([size])
    assert bound.graph_sizes == written
    assert bound.kept_graphs() == kept
    assert (bound.dropped_graphs, bound.dropped_events) == dropped
