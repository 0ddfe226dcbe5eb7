"""The requests view (GET .../requests): a server's requests, each with its prompt and decode
phases on the run's time axis and its figures as llama-server's timings count them."""

from __future__ import annotations

from ...analysis.requests import request_times, requests, requests_summary
from ...analysis.rows import records_as
from ..context import RunContext
from ..payloads import RequestBar, RequestsPayload

PROMPT_SHOWN = 80  # characters of a request's prompt in its row


def requests_view(context: RunContext) -> RequestsPayload:
    """Every request the run served, in the order they began, and their summary."""
    run = context.run
    times = request_times(run)
    if times.empty:
        return {"requests": [], "summary": None}
    texts = requests(run)
    shifted = times.assign(
        start_ns=times["arrival_ns"] - context.origin_ns,
        prompt_end_ns=times["prompt_end_ns"] - context.origin_ns,
        end_ns=times["end_ns"] - context.origin_ns,
        prompt=[text["prompt"][:PROMPT_SHOWN] for text in texts],
    )
    bars = records_as(shifted[list(RequestBar.__annotations__)], RequestBar)
    return {"requests": bars, "summary": requests_summary(run, times)}
