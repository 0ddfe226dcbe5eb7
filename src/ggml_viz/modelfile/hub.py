"""Models by name, as llama.cpp's `-hf` takes them: `org/repo[@revision][:QUANT|:FILE]`.

A name is looked up in the local Hugging Face cache (the layout `huggingface_hub` writes,
under `HF_HUB_CACHE` or `HF_HOME/hub`), read with `huggingface_hub.scan_cache_dir`; with
`download=True` a file not cached is fetched with `huggingface_hub` (its progress bars on
standard error). Nothing here touches the network unless asked to download.

What a name picks, among the GGUF files of the repository:
  - `org/repo`: the only one (mmproj files and later parts of split files aside);
  - `org/repo:Q4_K_M`: the one whose name holds the quant, case-insensitively (a split model's
    first part, `-00001-of-0000N.gguf`; every part is fetched);
  - `org/repo:path/in/repo.gguf`: that file.

huggingface_hub is imported only when a name is resolved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from .._errors import ModelNotFoundError

if TYPE_CHECKING:
    from huggingface_hub import HFCacheInfo
    from huggingface_hub.utils import CachedRepoInfo, CachedRevisionInfo

# Hub repository ids: a namespace and a name of letters, digits, '-', '_' and '.'.
_NAME = re.compile(
    r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[^:@\s]+))?(?::(?P<selector>[^\s]+))?"
)
_SPLIT = re.compile(r"-(?P<part>\d{5})-of-(?P<count>\d{5})(?P<suffix>\.gguf)$", re.IGNORECASE)
DOWNLOAD_HINT = "add --download to fetch it with huggingface_hub"


@dataclass(frozen=True)
class HubName:
    """A model named on the Hugging Face Hub: a repository, maybe a revision, maybe a quant or file."""

    repo_id: str
    revision: str | None = None
    selector: str | None = None  # a quant (Q4_K_M) or a file in the repository (ending in .gguf)

    def __str__(self) -> str:
        revision = f"@{self.revision}" if self.revision else ""
        selector = f":{self.selector}" if self.selector else ""
        return f"{self.repo_id}{revision}{selector}"

    @property
    def names_file(self) -> bool:
        return self.selector is not None and self.selector.lower().endswith(".gguf")


@dataclass(frozen=True)
class HubModel:
    """A named model's file in the cache, and where it came from."""

    path: Path  # the file in the cache's snapshot folder (a link to its blob)
    repo_id: str
    filename: str  # its path in the repository
    commit: str

    @property
    def source(self) -> str:
        return f"hf://{self.repo_id}/{self.filename}@{self.commit}"


def parse_hub_name(text: str) -> HubName | None:
    """The Hub name `text` spells, or None when it is not shaped like one.

    A bare `dir/file.gguf` is taken for a file path (a repository's name does not end in .gguf).
    """
    match = _NAME.fullmatch(text)
    if match is None or (match["selector"] is None and text.lower().endswith(".gguf")):
        return None
    return HubName(match["repo"], match["revision"], match["selector"])


def pick_gguf(files: Iterable[str], selector: str | None, where: str) -> str | None:
    """The GGUF file among `files` (paths in a repository) that `selector` picks, or None.

    ModelNotFoundError, listing them, when it picks several.
    """
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf"))
    if selector is not None and selector.lower().endswith(".gguf"):
        return selector if selector in ggufs else None
    candidates = [f for f in ggufs if not _later_part(f) and not PurePosixPath(f).name.lower().startswith("mmproj")]
    if selector is not None:
        candidates = _holding_quant(candidates, selector)
    if len(candidates) > 1:
        asked = f" match {selector!r}" if selector else ""
        raise ModelNotFoundError(
            f"{len(candidates)} GGUF files in {where}{asked}: {', '.join(candidates)}; "
            "add :QUANT or :FILE to the name to choose one (org/repo:Q4_K_M, org/repo:file.gguf)"
        )
    return candidates[0] if candidates else None


def split_parts(filename: str) -> list[str]:
    """Every part of a split model given its first part (`x-00001-of-00003.gguf`); else the file alone."""
    match = _SPLIT.search(filename)
    if match is None:
        return [filename]
    stem, count = filename[: match.start()], int(match["count"])
    return [f"{stem}-{part:05d}-of-{count:05d}{match['suffix']}" for part in range(1, count + 1)]


def _later_part(filename: str) -> bool:
    match = _SPLIT.search(filename)
    return match is not None and int(match["part"]) != 1


def _holding_quant(files: list[str], quant: str) -> list[str]:
    """The files whose name holds `quant` as a whole word (Q4_0 is not Q4_0_4_4); else those
    holding it as any part (Q4_K: Q4_K_M and Q4_K_S)."""
    word = re.compile(rf"(?<![A-Za-z0-9]){re.escape(quant)}(?![A-Za-z0-9_])", re.IGNORECASE)
    whole = [f for f in files if word.search(PurePosixPath(f).name)]
    return whole or [f for f in files if quant.lower() in PurePosixPath(f).name.lower()]


def resolve_hub_name(name: HubName, *, download: bool = False, cache_dir: str | Path | None = None) -> HubModel:
    """The cached file `name` picks; downloaded first when it is not cached and `download` is set.

    ModelNotFoundError saying what is cached, and how to download, when it cannot be had.
    """
    from huggingface_hub import constants

    cache = Path(cache_dir or constants.HF_HUB_CACHE)
    cache_info = _scan(cache)
    found = _find_cached(cache_info, name)
    if found is not None:
        return found
    missing = f"{name} is not in the Hugging Face cache at {cache}"
    if not download:
        raise ModelNotFoundError(f"{missing}; {describe_cache(cache_info, cache)}; {DOWNLOAD_HINT}")
    if constants.is_offline_mode():
        raise ModelNotFoundError(
            f"{missing} and HF_HUB_OFFLINE is set, so it cannot be downloaded; {describe_cache(cache_info, cache)}"
        )
    filename = _download(name, cache)
    found = _find_cached(_scan(cache), HubName(name.repo_id, name.revision, filename))
    if found is None:  # the library wrote elsewhere than it reads: not expected
        raise ModelNotFoundError(f"{name} was downloaded but is not in the cache at {cache}")
    return found


def describe_cache(cache_info: HFCacheInfo | None, cache: Path) -> str:
    """What the cache holds, on one line: each model repository with its GGUF files."""
    if cache_info is None:
        return f"there is no cache at {cache}"
    held = []
    for repo in sorted(cache_info.repos, key=lambda r: r.repo_id):
        files = sorted({_in_repo(f.file_path, rev) for rev in repo.revisions for f in rev.files})
        ggufs = [f for f in files if f.lower().endswith(".gguf")]
        if repo.repo_type == "model" and ggufs:
            held.append(f"{repo.repo_id} ({', '.join(ggufs)})")
    return f"cached GGUF models: {'; '.join(held)}" if held else "the cache holds no GGUF model"


def _scan(cache: Path) -> HFCacheInfo | None:
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        return scan_cache_dir(cache)
    except CacheNotFound:
        return None


def _find_cached(cache_info: HFCacheInfo | None, name: HubName) -> HubModel | None:
    found = _cached_revision(cache_info, name) if cache_info is not None else None
    if found is None:
        return None
    repo, revision = found
    files = {_in_repo(f.file_path, revision): f.file_path for f in revision.files}
    filename = pick_gguf(files, name.selector, f"the cached {repo.repo_id}")
    if filename is None or any(part not in files for part in split_parts(filename)):
        return None
    return HubModel(files[filename], repo.repo_id, filename, revision.commit_hash)


def _cached_revision(cache_info: HFCacheInfo, name: HubName) -> tuple[CachedRepoInfo, CachedRevisionInfo] | None:
    """The cached revision the name asks for: its branch or tag, a commit (or its prefix), else main."""
    repo = next(
        (r for r in cache_info.repos if r.repo_type == "model" and r.repo_id.lower() == name.repo_id.lower()), None
    )
    if repo is None:
        return None
    wanted = name.revision or "main"
    by_commit = [r for r in repo.revisions if len(wanted) >= 7 and r.commit_hash.startswith(wanted)]
    if wanted in repo.refs:
        return repo, repo.refs[wanted]
    if by_commit:
        return repo, by_commit[0]
    if name.revision is None and repo.revisions:  # fetched by commit only: the newest snapshot
        return repo, max(repo.revisions, key=lambda r: r.last_modified)
    return None


def _in_repo(file_path: Path, revision: CachedRevisionInfo) -> str:
    return file_path.relative_to(revision.snapshot_path).as_posix()


def _download(name: HubName, cache: Path) -> str:
    """Fetch the file `name` picks (every part of a split model) into `cache`; its path in the repository."""
    from huggingface_hub import HfApi, constants, hf_hub_download
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        files = HfApi().list_repo_files(name.repo_id, revision=name.revision)
        filename = pick_gguf(files, name.selector, f"{name.repo_id} on the Hub")
        if filename is None:
            ggufs = [f for f in files if f.lower().endswith(".gguf")]
            raise ModelNotFoundError(
                f"{name.repo_id} on the Hub has no GGUF file matching {name.selector!r}: it holds "
                + (", ".join(sorted(ggufs)) or "no GGUF file")
            )
        for part in split_parts(filename):
            hf_hub_download(name.repo_id, part, revision=name.revision, cache_dir=cache)
    except RepositoryNotFoundError:
        raise ModelNotFoundError(f"no model repository {name.repo_id} on {constants.ENDPOINT}") from None
    except RevisionNotFoundError:
        raise ModelNotFoundError(f"{name.repo_id} has no revision {name.revision!r}") from None
    except ModelNotFoundError:
        raise
    except Exception as error:  # the Hub's HTTP errors, and the connection errors of its HTTP client
        raise ModelNotFoundError(f"cannot download {name} from {constants.ENDPOINT}: {error}") from None
    return filename
