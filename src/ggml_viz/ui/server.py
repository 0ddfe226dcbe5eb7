"""Running the viewer: bind a socket, serve the app with uvicorn, print (and open) the URL."""

from __future__ import annotations

import errno
import socket
import threading
import webbrowser
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from .._errors import CommandError, GgmlVizError
from .app import RunRegistry, create_app
from .defaults import DEFAULT_PORT
from .security import is_loopback, new_token


@dataclass
class Viewer:
    """A viewer bound to its address, ready to serve."""

    server: uvicorn.Server
    sock: socket.socket
    url: str
    registry: RunRegistry
    _thread: threading.Thread | None = None

    def serve(self) -> None:
        """Serve until interrupted (Ctrl-C)."""
        self.server.run(sockets=[self.sock])

    def serve_in_background(self) -> None:
        self._thread = threading.Thread(target=self.serve, name="ggml-viz-viewer", daemon=True)
        self._thread.start()

    def thread_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        self.server.should_exit = True


def make_viewer(
    path: Path,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    live: bool = False,
    token: str | None = None,
    allow_remote: bool = False,
) -> Viewer:
    """Bind `host:port` (a free port if the default is taken) and prepare the app. An
    address beyond loopback needs `allow_remote` (the command's explicit --host)."""
    if not is_loopback(host) and not allow_remote:
        raise CommandError(f"{host} is not a loopback address: serving beyond this machine needs an explicit --host")
    token = token or new_token()
    registry = RunRegistry(path, live=live)
    sock = _bind(host, port)
    if not live:
        try:
            registry.preload()
        except GgmlVizError:
            sock.close()
            raise
    bound_port = sock.getsockname()[1]
    _, guard = create_app(registry, host=host, port=bound_port, token=token)
    config = uvicorn.Config(guard, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    url_host = "127.0.0.1" if host in ("0.0.0.0", "::") else (f"[{host}]" if ":" in host else host)
    return Viewer(server, sock, f"http://{url_host}:{bound_port}/?token={token}", registry)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for candidate in [port] + ([0] if port == DEFAULT_PORT else []):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, candidate))
        except OSError as error:
            sock.close()
            if error.errno == errno.EADDRINUSE and candidate != 0 and port == DEFAULT_PORT:
                continue
            raise CommandError(f"cannot listen on {host}:{candidate}: {error.strerror}") from None
        sock.listen(128)
        sock.set_inheritable(True)
        return sock
    raise CommandError(f"cannot listen on {host}")  # pragma: no cover - the loop returns or raises


def remote_warning(host: str) -> str | None:
    """What to print when serving beyond this machine, or None on loopback."""
    if is_loopback(host):
        return None
    return (
        f"warning: serving on {host}: anyone who can reach this address and learns the URL's token can read "
        "the runs served; use this only on a network you trust"
    )


def open_browser(url: str) -> None:
    try:
        webbrowser.open(url)
    except webbrowser.Error:
        pass
