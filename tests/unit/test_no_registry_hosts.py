"""Packages come from where the machine is set up to get them (apt's sources, pip's index, npm's
registry: a mirror, a proxy, a local copy), never from an address written into the repository: no
tracked text file names the host of a package registry."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# The registries' host names, each as its dot-separated labels. They are spelled in parts, never
# whole, because this file is in the repository too: written out, every name would be found here.
REGISTRY_HOSTS = [
    ".".join(labels)
    for labels in [
        ("deb", "debian", "org"),
        ("security", "debian", "org"),
        ("archive", "ubuntu", "com"),
        ("security", "ubuntu", "com"),
        ("pypi", "org"),
        ("files", "pythonhosted", "org"),
        ("pythonhosted", "org"),
        ("registry", "npmjs", "org"),
        ("registry", "yarnpkg", "com"),
        ("conda", "anaconda", "org"),
        ("repo", "anaconda", "com"),
        ("download", "pytorch", "org"),
        ("crates", "io"),
        ("proxy", "golang", "org"),
    ]
]
# A host name, or one of its subdomains, as a whole name (the same letters inside a longer name are another host)
HOST_PATTERN = re.compile(
    r"(?<![\w-])(?:[\w-]+\.)*(" + "|".join(re.escape(host) for host in REGISTRY_HOSTS) + r")(?![\w-])",
    re.IGNORECASE,
)


def registry_hosts_in(text: str) -> list[tuple[int, str]]:
    """(line number, host name) of each registry host, or host under one, named in the text."""
    return [
        (number, match.group(0).lower())
        for number, line in enumerate(text.splitlines(), start=1)
        for match in HOST_PATTERN.finditer(line)
    ]


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout.decode()
    files = []
    for name in filter(None, listed.split("\0")):
        path = REPO / name
        # (a submodule, a link, or a file deleted in this working tree is no text file to read)
        if path.is_file() and not path.is_symlink():
            files.append(path)
    return files


def test_the_finder_finds_each_host_in_an_address_and_no_look_alike():
    for host in REGISTRY_HOSTS:
        assert registry_hosts_in(f"see\n  https://{host.upper()}/simple/x") == [(2, host)]
    assert registry_hosts_in("mirror." + REGISTRY_HOSTS[0]) == [(1, "mirror." + REGISTRY_HOSTS[0])]
    for host in REGISTRY_HOSTS:
        assert registry_hosts_in(f"{host}x {host}-y") == []
    assert registry_hosts_in("not" + ".".join(("pypi", "org"))) == []


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="not a git checkout")
def test_no_tracked_file_names_a_registry_host():
    # GIVEN every text file git tracks in the repository (this one too)
    found = []
    for path in tracked_text_files():
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        text = data.decode("utf-8", errors="replace")
        found += [f"{path.relative_to(REPO)}:{number}: {host}" for number, host in registry_hosts_in(text)]
    # THEN none names a registry's host: the machine's own configuration says where packages come from
    assert not found, "registry host names in the repository:\n" + "\n".join(found)
