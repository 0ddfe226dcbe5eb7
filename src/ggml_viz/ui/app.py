"""The viewer's web app: the page, its assets, and a JSON API over the runs it serves.

Runs are served by id (`r0`, `r1`, … in the order found), never by a path the browser
gives. A live run's stream, `/api/runs/{id}/live` (under --live, or for any run still
recording), re-reads it when its files change
(reading only what is new: see runformat/streams.py) and sends a message (server-sent
events) each time it gains graphs; the other requests answer from the last read.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from .._errors import GgmlVizError
from ..runformat.manifest import STATUS_RECORDING
from ..runformat.schema import MANIFEST_FILE
from .context import json_safe
from .payloads import (
    GraphListPayload,
    LiveUpdate,
    MemoryPayload,
    RunListEntry,
    RunsPayload,
    SearchPayload,
)
from .run_view import RunView
from .security import Guard
from .views.events import EventFilter

MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}
LIVE_POLL_SECONDS = 0.25  # a live run is checked for new graphs this often (a stat of its files)


class RunRegistry:
    """The runs under one path: that run, or every run in that directory."""

    def __init__(self, path: Path, live: bool = False) -> None:
        self.path = path
        self.live = live
        self._lock = threading.Lock()  # the run ids and views
        self._reading = threading.Lock()  # held while a run is read
        self._paths: dict[str, Path] = {}
        self._views: dict[str, tuple[tuple[Any, ...], RunView]] = {}
        self.scan()

    def scan(self) -> dict[str, Path]:
        """Find the runs (again: a live directory gains them)."""
        with self._lock:
            found = [self.path] if (self.path / MANIFEST_FILE).exists() else []
            if not found and self.path.is_dir():
                found = sorted(child for child in self.path.iterdir() if (child / MANIFEST_FILE).exists())
            for candidate in found:
                if candidate not in self._paths.values():
                    self._paths[f"r{len(self._paths)}"] = candidate
            return dict(self._paths)

    def view(self, run_id: str) -> RunView:
        """The run's view, as last read (see `refresh`)."""
        with self._lock:
            cached = self._views.get(run_id)
        return cached[1] if cached is not None else self.refresh(run_id)

    def refresh(self, run_id: str) -> RunView:
        """The run's view, read again if its files changed: a live run's stream calls this
        (every LIVE_POLL_SECONDS, or right after the last read when reading took longer).
        A run is followed so under --live, and without it while its last read says it is
        still recording (a server's run opened by a plain `view` grows; once complete it is
        read no more). One read at a time; the browser's other requests answer from the
        last read meanwhile."""
        paths = self.scan() if run_id not in self._paths else self._paths
        if run_id not in paths:
            raise KeyError(run_id)
        path = paths[run_id]
        with self._reading:
            with self._lock:
                cached = self._views.get(run_id)
            following = self.live or (cached is not None and cached[1].run.status == STATUS_RECORDING)
            if cached is not None and not following:
                return cached[1]
            signature = files_signature(path)
            if cached is not None and cached[0] == signature:
                return cached[1]
            try:
                view = RunView(run_id, path)
            except (GgmlVizError, OSError, ValueError):
                if cached is None or not following:
                    raise
                return cached[1]  # caught between two writes of a live run: the last good read, retried soon
            with self._lock:
                self._views[run_id] = (signature, view)
            return view

    def preload(self) -> None:
        """Read every run and its overview now, so that the page's first requests are quick.
        A damaged run is an error when it is the only one; among others, it is left to show
        its error when opened."""
        runs = self.scan()
        for run_id in runs:
            try:
                self.view(run_id).overview  # noqa: B018 - computed for its cache
            except GgmlVizError:
                if len(runs) == 1:
                    raise

    def listing(self) -> list[RunListEntry]:
        runs: list[RunListEntry] = []
        for run_id, path in self.scan().items():
            try:
                manifest = json.loads((path / MANIFEST_FILE).read_text())
            except (OSError, ValueError):
                continue
            model = manifest.get("model") or {}
            runs.append(
                {
                    "run_id": run_id,
                    "name": path.name,
                    "status": manifest.get("status"),
                    "created": manifest.get("created"),
                    "model": model.get("name") or model.get("description"),
                    "graphs": (manifest.get("counts") or {}).get("graphs"),
                }
            )
        return runs


def files_signature(path: Path) -> tuple[Any, ...]:
    """What changes when a run gains data: its files' names, sizes and modification times."""
    try:
        return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in path.iterdir()))
    except OSError:
        return ()


def create_app(registry: RunRegistry, *, host: str, port: int, token: str) -> tuple[Starlette, Guard]:
    """The app, wrapped in its Guard (whose address the caller may update once bound)."""

    assets = static_assets()

    def view_of(request: Request) -> RunView:
        try:
            return registry.view(request.path_params["run_id"])
        except KeyError:
            raise _NotFound("no such run") from None

    def page(request: Request) -> Response:
        return _static("index.html")

    def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in assets:
            return _text(404, "not found")
        return _static(name)

    def runs(request: Request) -> Response:
        answer: RunsPayload = {"runs": registry.listing(), "live": registry.live}
        return _json(answer)

    def comparison(request: Request) -> Response:
        from ..analysis.compare import compare

        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        try:
            left, right = registry.view(a), registry.view(b)
        except KeyError:
            raise _NotFound("no such run") from None
        return _json(compare(left.run, right.run))

    def overview(request: Request) -> Response:
        return _json(view_of(request).overview)

    def timeline(request: Request) -> Response:
        view = view_of(request)
        query = request.query_params
        t0 = _int(query, "t0", 0)
        t1 = _int(query, "t1", max(view.duration_ns, 1))
        return _json(view.timeline(t0, t1, _int(query, "width", 1000)))

    def node(request: Request) -> Response:
        view = view_of(request)
        event = view.event_index(_int(request.query_params, "graph"), _int(request.query_params, "index"))
        if event is None:
            raise _NotFound("no such node")
        return _json(view.node(event))

    def event(request: Request) -> Response:
        view = view_of(request)
        index = int(request.path_params["event"])
        if not 0 <= index < view.n_events:
            raise _NotFound("no such event")
        return _json(view.event_row(index))

    def search(request: Request) -> Response:
        answer: SearchPayload = {"hits": view_of(request).search(request.query_params.get("q", "")[:200])}
        return _json(answer)

    def graph_list(request: Request) -> Response:
        answer: GraphListPayload = {"graphs": view_of(request).graph_list()}
        return _json(answer)

    def graph(request: Request) -> Response:
        view = view_of(request)
        layer = request.query_params.get("layer")
        try:
            return _json(view.graph(int(request.path_params["graph_id"]), None if layer in (None, "") else int(layer)))
        except KeyError:
            raise _NotFound("no such graph") from None
        except ValueError:
            raise _BadRequest("layer must be a whole number") from None

    def memory(request: Request) -> Response:
        view = view_of(request)
        answer: MemoryPayload = {"disk": view.disk_track, "buffers": view.buffer_track}
        return _json(answer)

    def compute_occupancy(request: Request) -> Response:
        view = view_of(request)
        graph_id = int(request.path_params["graph_id"])
        if graph_id not in set(view.graphs["graph_id"].tolist()):
            raise _NotFound("no such graph")
        return _json(view.compute_occupancy(graph_id))

    def attention_index(request: Request) -> Response:
        return _json(view_of(request).attention_index)

    def attention(request: Request) -> Response:
        view = view_of(request)
        query = request.query_params
        try:
            return _json(view.attention(_int(query, "graph"), _int(query, "layer"), _int(query, "head", 0)))
        except KeyError:
            raise _NotFound("no captured attention for that graph, layer and head") from None

    def experts(request: Request) -> Response:
        return _json(view_of(request).experts)

    def served_requests(request: Request) -> Response:
        return _json(view_of(request).requests)

    def whatif(request: Request) -> Response:
        return _json(view_of(request).whatif)

    def slots(request: Request) -> Response:
        return _json(view_of(request).slots)

    def statistics(request: Request) -> Response:
        return _json(view_of(request).statistics)

    def events(request: Request) -> Response:
        view = view_of(request)
        query = request.query_params
        layer = query.get("layer", "")
        where = EventFilter(
            op=query.get("op", "")[:64],
            name=query.get("name", "")[:200],
            layer=None if layer == "" else _int(query, "layer"),
            t0=_optional_int(query, "t0"),
            t1=_optional_int(query, "t1"),
            file_lo=_optional_int(query, "file_lo"),
            file_hi=_optional_int(query, "file_hi"),
        )
        return _json(view.events(where, max(0, _int(query, "offset", 0)), _int(query, "limit", 100)))

    async def live(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        await asyncio.to_thread(view_of, request)  # 404 before the stream starts

        async def stream() -> Any:
            last: tuple[int, str] | None = None
            while True:
                began = time.monotonic()
                view = await asyncio.to_thread(registry.refresh, run_id)
                now = (len(view.graphs), view.run.status)
                if now != last:
                    last = now
                    update: LiveUpdate = {
                        "graphs": now[0],
                        "status": now[1],
                        "duration_ns": view.duration_ns,
                        "ops": view.ops,
                    }
                    yield f"data: {json.dumps(update)}\n\n"
                else:
                    yield ": still here\n\n"
                if await request.is_disconnected():
                    return
                await asyncio.sleep(max(0.05, LIVE_POLL_SECONDS - (time.monotonic() - began)))  # a poll per period

        return StreamingResponse(stream(), media_type="text/event-stream")

    prefix = "/api/runs/{run_id:str}"
    routes = [
        Route("/", page),
        Route("/static/{name:path}", asset),
        Route("/api/runs", runs),
        Route("/api/compare", comparison),
        Route(f"{prefix}/overview", overview),
        Route(f"{prefix}/timeline", timeline),
        Route(f"{prefix}/node", node),
        Route(f"{prefix}/event/{{event:int}}", event),
        Route(f"{prefix}/search", search),
        Route(f"{prefix}/graphs", graph_list),
        Route(f"{prefix}/graph/{{graph_id:int}}", graph),
        Route(f"{prefix}/memory", memory),
        Route(f"{prefix}/occupancy/{{graph_id:int}}", compute_occupancy),
        Route(f"{prefix}/stats", statistics),
        Route(f"{prefix}/experts", experts),
        Route(f"{prefix}/requests", served_requests),
        Route(f"{prefix}/whatif", whatif),
        Route(f"{prefix}/slots", slots),
        Route(f"{prefix}/attention-index", attention_index),
        Route(f"{prefix}/attention", attention),
        Route(f"{prefix}/events", events),
        Route(f"{prefix}/live", live),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            _NotFound: lambda request, error: _text(404, str(error)),
            _BadRequest: lambda request, error: _text(400, str(error)),
            GgmlVizError: lambda request, error: _text(422, str(error)),
            404: lambda request, error: _text(404, "not found"),
        },
    )
    guard = Guard(app, host=host, port=port, token=token)
    return app, guard


class _NotFound(Exception):
    pass


class _BadRequest(Exception):
    pass


def _int(query: Any, name: str, default: int | None = None) -> int:
    text = query.get(name)
    if text is None or text == "":
        if default is None:
            raise _BadRequest(f"'{name}' is required")
        return default
    try:
        return int(float(text))
    except ValueError:
        raise _BadRequest(f"'{name}' must be a number") from None


def _optional_int(query: Any, name: str) -> int | None:
    return None if query.get(name) in (None, "") else _int(query, name)


def _json(content: Any) -> Response:
    try:
        body = json.dumps(content, separators=(",", ":"), allow_nan=False)
    except ValueError:  # a NaN somewhere (an empty mean): JSON has none, send null
        body = json.dumps(json_safe(content), separators=(",", ":"))
    return Response(body, media_type="application/json")


def _text(status: int, message: str) -> Response:
    return Response(message, status_code=status, media_type="text/plain")


def static_assets() -> set[str]:
    """The files the page may load, by path under static/: the style and the script modules
    (`app.js`, the entry, and `js/`). A request for any other path, index.html included, is
    not found: nothing outside this list is ever read."""
    found: set[str] = set()
    pending = [("", resources.files("ggml_viz.ui").joinpath("static"))]
    while pending:
        prefix, folder = pending.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                pending.append((f"{prefix}{entry.name}/", entry))
            elif Path(entry.name).suffix in (".js", ".css"):
                found.add(prefix + entry.name)
    return found


def _static(name: str) -> Response:
    body = resources.files("ggml_viz.ui").joinpath("static", *name.split("/")).read_bytes()
    return Response(body, media_type=MEDIA_TYPES[Path(name).suffix])
