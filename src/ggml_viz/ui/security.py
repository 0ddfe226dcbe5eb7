"""What keeps a local viewer safe from the browser's other tabs.

A page on another site can make the browser send requests to 127.0.0.1, and a DNS name
it controls can resolve to 127.0.0.1 (DNS rebinding). So every request must name this
server in its Host header (the bound address or localhost, with the port), a request
that carries an Origin must come from this server's own pages, and the API needs the
random token the `view` command printed in its URL. Every response forbids framing,
MIME sniffing, referrers (the URL carries the token) and any script, style or
connection not from this server.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_HEADER = "x-ggml-viz-token"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
     b"font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]  # fmt: skip


def new_token() -> str:
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


class Guard:
    """ASGI middleware: Host, Origin and token checks, and the security headers."""

    def __init__(self, app: ASGIApp, *, host: str, port: int, token: str) -> None:
        self.app = app
        self.token = token
        self.set_address(host, port)

    def set_address(self, host: str, port: int) -> None:
        """The address the server listens on (known once it is bound: port 0 picks one)."""
        names = {host if ":" not in host else f"[{host}]", *LOOPBACK_NAMES}
        self.allowed_hosts = {f"{name}:{port}" for name in names}
        self.allowed_origins = {f"http://{name}" for name in self.allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {key.decode("latin-1"): value.decode("latin-1") for key, value in scope["headers"]}
        path: str = scope["path"]
        if headers.get("host", "") not in self.allowed_hosts:
            await _refuse(send, 403, "unknown Host: this viewer answers only to its own address")
            return
        origin = headers.get("origin")
        if origin is not None and origin not in self.allowed_origins:
            await _refuse(send, 403, "foreign Origin")
            return
        if path.startswith("/api/") and not self._has_token(scope, headers):
            await _refuse(send, 401, "missing or wrong token: open the URL the view command printed")
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
                if path.startswith("/api/"):
                    message["headers"].append((b"cache-control", b"no-store"))
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _has_token(self, scope: Scope, headers: dict[str, str]) -> bool:
        given = headers.get(TOKEN_HEADER)
        if given is None:  # EventSource cannot set headers: the stream takes it from the query
            given = (parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token") or [""])[0]
        return hmac.compare_digest(given.encode(), self.token.encode())


async def _refuse(send: Send, status: int, reason: str) -> None:
    body = reason.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + SECURITY_HEADERS})
    await send({"type": "http.response.body", "body": body})
