"""A stand-in for the Hugging Face Hub, served on 127.0.0.1, for huggingface_hub to download from.

It answers the requests huggingface_hub makes (read from its file_download.py and hf_api.py):
  HEAD/GET /{repo}/resolve/{revision}/{file}   X-Repo-Commit, ETag, Content-Length, the bytes
  GET /api/models/{repo}/tree/{revision}       the repository's files, as JSON
and 404 with the Hub's X-Error-Code for a repository, revision or file it lacks. Point
HF_ENDPOINT (or `endpoint=`) at `hub.url`; the cache is then laid out by huggingface_hub itself.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
from gguf import GGUFWriter


@dataclass
class FakeRepo:
    files: dict[str, bytes]
    commit: str


@dataclass
class FakeHub:
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    url: str = ""
    requests: list[str] = field(default_factory=list)

    def add(self, repo_id: str, files: dict[str, bytes]) -> str:
        """Publish `files` (path in the repository: content) as `repo_id`'s main; its commit hash."""
        commit = hashlib.sha1(json.dumps([repo_id, sorted(files)]).encode()).hexdigest()
        self.repos[repo_id] = FakeRepo(files, commit)
        return commit


def small_gguf(path: Path, seed: int = 0) -> bytes:
    """A tiny valid GGUF written with gguf's own writer; its bytes."""
    writer = GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.random.default_rng(seed).standard_normal((8, 4)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self._answer(with_body=False)

        def do_GET(self) -> None:
            self._answer(with_body=True)

        def _answer(self, with_body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append(f"{self.command} {path}")
            if path.startswith("/api/models/"):
                self._tree(path.removeprefix("/api/models/"))
            elif "/resolve/" in path:
                self._file(path, with_body)
            else:
                self._error(404, "")

        def _repo(self, repo_id: str, revision: str) -> FakeRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound")
            elif revision not in ("main", repo.commit):
                self._error(404, "RevisionNotFound")
            else:
                return repo
            return None

        def _tree(self, rest: str) -> None:
            repo_id, _, revision = rest.partition("/tree/")
            repo = self._repo(repo_id, revision.strip("/") or "main")
            if repo is None:
                return
            listing = [
                {"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                for name, data in sorted(repo.files.items())
            ]
            self._send(200, json.dumps(listing).encode(), {"Content-Type": "application/json"}, True)

        def _file(self, path: str, with_body: bool) -> None:
            repo_id, _, rest = path.lstrip("/").partition("/resolve/")
            revision, _, filename = rest.partition("/")
            repo = self._repo(repo_id, revision)
            if repo is None:
                return
            data = repo.files.get(filename)
            if data is None:
                self._error(404, "EntryNotFound", {"X-Repo-Commit": repo.commit})
                return
            headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{hashlib.sha256(data).hexdigest()}"'}
            self._send(200, data, headers, with_body)

        def _error(self, status: int, code: str, headers: dict[str, str] | None = None) -> None:
            self._send(status, b"{}", {**(headers or {}), **({"X-Error-Code": code} if code else {})}, True)

        def _send(self, status: int, body: bytes, headers: dict[str, str], with_body: bool) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if with_body:
                self.wfile.write(body)

    return Handler


@contextmanager
def serve_fake_hub() -> Iterator[FakeHub]:
    """A FakeHub answering at its `url` (a thread of this process) until the block ends."""
    hub = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="fake hub", daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
