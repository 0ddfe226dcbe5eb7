"""Models by name (`-m org/repo[:QUANT|:FILE]`): read from a Hugging Face cache that
huggingface_hub itself lays out, downloading from a stand-in Hub on 127.0.0.1; never the real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_download

import ggml_viz
from ggml_viz._errors import ModelNotFoundError
from ggml_viz.modelfile.hub import HubName, parse_hub_name, resolve_hub_name
from ggml_viz.modelfile.locate import find_model_file, locate_model

from ..fake_hub import FakeHub, serve_fake_hub, small_gguf

SINGLE = "org/single-GGUF"
SEVERAL = "org/several-GGUF"
SEVERAL_FILES = ["m-Q4_0.gguf", "m-Q4_0_4_4.gguf", "m-Q8_0.gguf", "sub/m-F16.gguf", "mmproj-m-f16.gguf",
                 "big/m-Q2_K-00001-of-00002.gguf", "big/m-Q2_K-00002-of-00002.gguf"]  # fmt: skip


def publish(hub: FakeHub, folder: Path) -> dict[str, str]:
    """The stand-in Hub's repositories, each file a distinct small GGUF; their commits."""
    names = ["model-Q4_K_M.gguf", *SEVERAL_FILES]
    ggufs = {name: small_gguf(folder / f"{seed}.gguf", seed) for seed, name in enumerate(names)}
    return {
        SINGLE: hub.add(SINGLE, {"model-Q4_K_M.gguf": ggufs["model-Q4_K_M.gguf"], "README.md": b"# one model\n"}),
        SEVERAL: hub.add(SEVERAL, {name: ggufs[name] for name in SEVERAL_FILES}),
    }


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with serve_fake_hub() as hub:
        publish(hub, tmp_path_factory.mktemp("published"))
        yield hub


@pytest.fixture(scope="module")
def hf_home(hub, tmp_path_factory) -> Path:
    """An HF_HOME whose cache huggingface_hub filled from the stand-in Hub with every published file."""
    home = tmp_path_factory.mktemp("hf_home")
    for repo_id, repo in hub.repos.items():
        for filename in repo.files:
            hf_hub_download(repo_id, filename, endpoint=hub.url, cache_dir=home / "hub")
    return home


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """ggml-viz in a fresh interpreter: huggingface_hub reads HF_HOME, HF_ENDPOINT and HF_HUB_OFFLINE at import."""
    pythonpath = str(Path(ggml_viz.__file__).parents[1])
    return subprocess.run(
        [sys.executable, "-m", "ggml_viz", *args],
        env={**os.environ, "PYTHONPATH": pythonpath, "HF_HUB_DISABLE_TELEMETRY": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("org/repo", HubName("org/repo")),
        ("org/repo:Q4_K_M", HubName("org/repo", selector="Q4_K_M")),
        ("org/repo@v1.0:sub/x.gguf", HubName("org/repo", "v1.0", "sub/x.gguf")),
        ("models/x.gguf", None),  # a path, even when missing
        ("x.gguf", None),
        ("/abs/org/repo", None),
        ("a/b/c", None),
        ("./org/repo", None),
    ],
)
def test_what_is_shaped_like_a_name(text, name):
    assert parse_hub_name(text) == name


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{SEVERAL}:sub/m-F16.gguf", "sub/m-F16.gguf"),  # an exact file
        (f"{SEVERAL}:q8_0", "m-Q8_0.gguf"),  # a quant, whatever its case
        (f"{SEVERAL}:Q4_0", "m-Q4_0.gguf"),  # the whole quant, not Q4_0_4_4
        (f"{SEVERAL}:Q2_K", "big/m-Q2_K-00001-of-00002.gguf"),  # a split model: its first part
        (SINGLE, "model-Q4_K_M.gguf"),  # the repository's only GGUF
        (f"{SINGLE}@main", "model-Q4_K_M.gguf"),
    ],
)
def test_a_name_picks_its_file_in_the_cache(hub, hf_home, text, expected):
    # WHEN a name is resolved offline against the cache huggingface_hub laid out
    model = resolve_hub_name(parse_hub_name(text), cache_dir=hf_home / "hub")
    # THEN it is that file of the cached snapshot, with the same bytes the Hub served
    repo_id = text.split(":")[0].split("@")[0]
    commit = hub.repos[repo_id].commit
    assert model.path == hf_home / "hub" / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit / expected
    assert model.path.read_bytes() == hub.repos[repo_id].files[expected]
    assert model.source == f"hf://{repo_id}/{expected}@{commit}"


def test_a_commit_prefix_is_a_revision(hub, hf_home):
    commit = hub.repos[SINGLE].commit
    model = resolve_hub_name(HubName(SINGLE, commit[:10]), cache_dir=hf_home / "hub")
    assert model.commit == commit


@pytest.mark.parametrize("selector", [None, "Q4"])
def test_a_name_that_picks_several_files_lists_them(hf_home, selector):
    # WHEN the name leaves the choice open
    with pytest.raises(ModelNotFoundError) as caught:
        resolve_hub_name(HubName(SEVERAL, selector=selector), cache_dir=hf_home / "hub")
    # THEN the error lists the candidates (not a projector, not a split model's later parts) and how to choose
    message = str(caught.value)
    assert "m-Q4_0.gguf" in message and "m-Q4_0_4_4.gguf" in message
    assert "mmproj" not in message and "00002-of" not in message
    assert ":QUANT or :FILE" in message
    if selector is None:
        assert "m-Q8_0.gguf" in message and "sub/m-F16.gguf" in message


def test_a_name_not_cached_says_what_is(hf_home):
    with pytest.raises(ModelNotFoundError) as caught:
        resolve_hub_name(HubName(SEVERAL, selector="Q6_K"), cache_dir=hf_home / "hub")
    message = str(caught.value)
    assert f"{SEVERAL}:Q6_K is not in the Hugging Face cache at {hf_home / 'hub'}" in message
    assert f"{SINGLE} (model-Q4_K_M.gguf)" in message
    assert "big/m-Q2_K-00002-of-00002.gguf" in message
    assert "--download" in message


def test_an_empty_cache_says_so(tmp_path):
    with pytest.raises(ModelNotFoundError, match="there is no cache at"):
        resolve_hub_name(HubName(SINGLE), cache_dir=tmp_path / "nothing")


def test_an_existing_path_wins_over_a_name(tmp_path, monkeypatch):
    # GIVEN a file whose relative path is shaped like a Hub name
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org").mkdir()
    small_gguf(tmp_path / "org" / "single-GGUF")
    # WHEN it is given as the model
    model = locate_model(SINGLE)
    # THEN it is that file, not a cache lookup
    assert model.path == Path(SINGLE) and model.source is None


def test_a_missing_path_that_is_no_name_is_a_missing_file(tmp_path):
    assert find_model_file(str(tmp_path / "no.gguf")).path == tmp_path / "no.gguf"
    with pytest.raises(ModelNotFoundError, match="model file not found: models/x.gguf"):
        locate_model("models/x.gguf")


def test_the_command_line_reads_the_cache_under_hf_home(hub, hf_home):
    # WHEN memmap is given a name, offline, with HF_HOME pointing at the cache
    done = cli("memmap", f"{SEVERAL}:Q8_0", "--json", env={"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"})
    # THEN it maps the cached file
    assert done.returncode == 0, done.stderr
    commit = hub.repos[SEVERAL].commit
    assert json.loads(done.stdout)["path"].endswith(f"models--org--several-GGUF/snapshots/{commit}/m-Q8_0.gguf")


def test_offline_a_name_not_cached_is_one_error_line(hf_home):
    # WHEN a name that is not cached is asked for offline
    done = cli("memmap", "org/elsewhere:Q4_0", env={"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"})
    # THEN one line says what was asked, where it looked, what is cached and how to download
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"ggml-viz: error: org/elsewhere:Q4_0 is not in the Hugging Face cache at {hf_home / 'hub'}")
    assert f"{SINGLE} (model-Q4_K_M.gguf)" in line and "--download" in line


def test_download_fetches_through_the_hub_then_reads_the_cache(hub, tmp_path):
    # GIVEN an empty HF_HOME and the stand-in Hub
    env = {"HF_HOME": str(tmp_path / "home"), "HF_ENDPOINT": hub.url}
    hub.requests.clear()
    # WHEN a split model is asked for with --download
    done = cli("memmap", f"{SEVERAL}:q2_k", "--download", "--json", env=env)
    # THEN huggingface_hub fetched every part into the cache, and the first part is mapped
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["path"].endswith("big/m-Q2_K-00001-of-00002.gguf")
    fetched = sorted(r for r in hub.requests if r.startswith("GET") and "/resolve/" in r)
    assert fetched == [f"GET /{SEVERAL}/resolve/main/big/m-Q2_K-0000{i}-of-00002.gguf" for i in (1, 2)]
    # AND later the same name is read offline, from the cache alone
    hub.requests.clear()
    again = cli("memmap", f"{SEVERAL}:q2_k", "--json", env={**env, "HF_HUB_OFFLINE": "1"})
    assert again.returncode == 0, again.stderr
    assert hub.requests == []


@pytest.mark.parametrize(
    ("name", "offline", "says"),
    [
        ("org/not-there:Q4_0", "0", "no model repository org/not-there"),
        (f"{SEVERAL}:Q6_K", "0", f"{SEVERAL} on the Hub has no GGUF file matching 'Q6_K'"),
        (f"{SINGLE}", "1", "HF_HUB_OFFLINE is set, so it cannot be downloaded"),
    ],
)
def test_download_that_cannot_be_done_is_one_error_line(hub, tmp_path, name, offline, says):
    env = {"HF_HOME": str(tmp_path / "home"), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": offline}
    done = cli("memmap", name, "--download", env=env)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("ggml-viz: error: ") and says in line
