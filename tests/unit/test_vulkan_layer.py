"""ggml-viz's Vulkan layer from Python's side: the environment that puts it into a traced process,
and the command numbers its records carry, as the attribution reads them."""

from __future__ import annotations

import numpy as np

from ggml_viz.capture.contract.constants import VULKAN_COPY_BUFFER, VULKAN_DISPATCH, VULKAN_FILL_BUFFER
from ggml_viz.capture.gpu import vulkan_layer
from ggml_viz.capture.gpu.records import API_DTYPE, VULKAN, is_copy, is_launch
from ggml_viz.capture.gpu.vulkan_layer import LAYER_NAME, layer_environment


def test_the_layer_is_added_to_what_the_program_had():
    # GIVEN a program environment with a layer path and an explicit layer of its own
    env = {"VK_ADD_LAYER_PATH": "/opt/layers", "VK_INSTANCE_LAYERS": "VK_LAYER_KHRONOS_validation"}
    # WHEN ggml-viz adds its layer
    added = layer_environment(env)
    # THEN the program's own stay, ggml-viz's manifest folder searched first and its layer enabled last
    assert added["VK_ADD_LAYER_PATH"].split(":") == [str(vulkan_layer.LAYER_MANIFEST.parent), "/opt/layers"]
    assert added["VK_INSTANCE_LAYERS"].split(":") == ["VK_LAYER_KHRONOS_validation", LAYER_NAME]
    # AND ggml-vulkan is asked to name its pipelines, unless the program says otherwise
    assert added["GGML_VK_DEBUG_MARKERS"] == "1"
    assert "GGML_VK_DEBUG_MARKERS" not in layer_environment({"GGML_VK_DEBUG_MARKERS": "0"})
    # AND adding it twice does not list it twice
    again = layer_environment({**env, **added})
    assert again["VK_INSTANCE_LAYERS"].count(LAYER_NAME) == 1


def test_no_layer_no_variables(monkeypatch, tmp_path):
    # GIVEN an installation built without Vulkan's headers (no layer library)
    monkeypatch.setattr(vulkan_layer, "LAYER_LIBRARY", tmp_path / "libggml_viz_vulkan_layer.so")
    # THEN a program runs with its environment untouched
    assert layer_environment({"VK_INSTANCE_LAYERS": "x"}) == {}


def test_the_manifest_names_the_layer_and_its_library():
    import json

    manifest = json.loads(vulkan_layer.LAYER_MANIFEST.read_text())
    assert manifest["layer"]["name"] == LAYER_NAME
    assert manifest["layer"]["library_path"] == "./" + vulkan_layer.LAYER_LIBRARY.name


def test_the_layers_commands_are_read_as_launches_and_copies_by_their_domain():
    # GIVEN API records of the Vulkan domain, numbered as the contract numbers the layer's commands
    calls = np.zeros(4, dtype=API_DTYPE)
    calls["domain"] = VULKAN
    calls["cbid"] = [VULKAN_DISPATCH, VULKAN_COPY_BUFFER, VULKAN_FILL_BUFFER, 99]
    # THEN dispatches are launches and buffer commands are copies
    assert is_launch(calls).tolist() == [True, False, False, False]
    assert is_copy(calls).tolist() == [False, True, True, False]
    # AND a CUDA runtime call of the same number is not taken for a Vulkan one
    calls["domain"] = 0
    assert not is_launch(calls)[0]


def test_enabled_in_this_process_only_where_gpu_times_are_wanted(monkeypatch):
    import os

    # (a copy of the environment, so that nothing leaks into the tests after this one)
    layerless = {k: v for k, v in os.environ.items() if k not in ("VK_INSTANCE_LAYERS", "VK_ADD_LAYER_PATH")}
    monkeypatch.setattr(os, "environ", layerless)

    # GIVEN GPU times off, or graph detail: the process's environment is left alone
    vulkan_layer.enable_in_this_process("off", "op")
    vulkan_layer.enable_in_this_process("windows", "graph")
    assert "VK_INSTANCE_LAYERS" not in os.environ
    # WHEN they are wanted THEN the Vulkan instances made from now on get the layer
    vulkan_layer.enable_in_this_process("windows", "op")
    assert os.environ["VK_INSTANCE_LAYERS"] == LAYER_NAME
