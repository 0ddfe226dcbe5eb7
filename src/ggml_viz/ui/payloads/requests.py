"""The requests view's JSON (GET .../requests): a server's requests on the run's time axis."""

from __future__ import annotations

from typing import TypedDict

from ...analysis.requests import RequestsSummary


class RequestBar(TypedDict):
    """One request: its phases on the timeline's axis (ns from the run's first graph) and its figures
    (analysis.requests.RequestTimes')."""

    request: int
    seq_id: int
    first_graph_id: int
    last_graph_id: int
    start_ns: int  # its first decode call's start: the prompt's bar begins
    prompt_end_ns: int  # the prompt's bar ends, the decode's begins
    end_ns: int  # the decode's bar ends
    prompt_n: int
    cache_n: int
    predicted_n: int
    prompt_ms: float
    ttft_ms: float
    predicted_ms: float
    tpot_ms: float | None
    batches: int
    shared_batches: int
    share_ms: float
    prompt: str  # how its prompt (the tokens it computed) begins


class RequestsPayload(TypedDict):
    """GET /api/runs/{id}/requests (an empty `requests`: the run served none)"""

    requests: list[RequestBar]
    summary: RequestsSummary | None  # their counts and percentiles (None: no request)
