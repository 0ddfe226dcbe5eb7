"""Speculative decoding in a run, in all and per request: drafts verified and accepted, and the time
of drafting, verifying and of the drafts rejected (speculative_batches.py tells the batches apart),
against what plain single-token decode steps would have cost for the same tokens."""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..runformat.reader import Run
from .breakdowns import requests
from .speculative_batches import find_speculation


class SpeculationTotals(TypedDict):
    """Verifications, drafts and their time, summed (over a request, or the run)."""

    verifications: int
    drafted: int  # the server's draft_n
    accepted: int  # the server's draft_n_accepted (with accepted_assumed)
    accepted_assumed: int  # of accepted: the last verifications' drafts, which no later batch confirms
    draft_ns: int  # the draft context's time (its drafts and its re-reads)
    draft_reread_ns: int  # of draft_ns: re-reading the target's batches
    verify_ns: int  # the share of the target's verification batches
    rejected_ns: int  # of verify_ns: the share of the drafts the target rejected


class SpeculativeRequest(SpeculationTotals):
    """One request's speculative decoding (speculative_summary)."""

    seq_id: int
    start_ns: int  # from the run's first graph, as breakdowns.requests gives it


class SpeculativeSummary(SpeculationTotals):
    """A run's speculative decoding, in all and per request (speculative_summary)."""

    method: str  # "draft model", or "draftless" (drafts from the text itself: n-grams, lookup)
    target_contexts: list[int]
    draft_contexts: list[int]
    draft_graphs: int
    acceptance: float | None  # accepted / drafted
    tokens_fed: int  # the tokens the verifications fed: each one's sampled token and accepted drafts
    plain_steps: int  # the target's single-token decode steps
    plain_step_ns: int | None  # their median time (None: none)
    plain_estimate_ns: int | None  # tokens_fed at that time each (None: no plain step to go by)
    requests: list[SpeculativeRequest]


def speculative_summary(run: Run) -> SpeculativeSummary | None:
    """The run's speculative decoding in all and per request (None: it has none). The time of a
    llama_decode call is its graphs' time, shared among its sequences by their tokens."""
    found = find_speculation(run)
    if found is None:
        return None
    verifications, drafts = found.verifications, found.draft_steps
    plain = found.plain_steps
    fed = int(verifications["accepted"].sum() + len(verifications))
    plain_ns = int(plain.median()) if len(plain) else None
    totals = _totals(verifications, drafts)
    drafted = totals["drafted"]
    return {
        "method": "draft model" if found.draft_of else "draftless",
        "target_contexts": sorted({int(c) for c in verifications["context_id"]}),
        "draft_contexts": sorted(found.draft_of),
        "draft_graphs": _graphs_of(run, list(found.draft_of)),
        **totals,
        "acceptance": totals["accepted"] / drafted if drafted else None,
        "tokens_fed": fed,
        "plain_steps": int(len(plain)),
        "plain_step_ns": plain_ns,
        "plain_estimate_ns": None if plain_ns is None else fed * plain_ns,
        "requests": _per_request(run, verifications, drafts),
    }


def _totals(verifications: pd.DataFrame, drafts: pd.DataFrame) -> SpeculationTotals:
    """Verifications, drafted and accepted tokens and the times, summed."""
    return {
        "verifications": int(len(verifications)),
        "drafted": int(verifications["drafted"].sum()),
        "accepted": int(verifications["accepted"].sum()),
        "accepted_assumed": int(verifications["assumed"].sum()),
        "draft_ns": int(round(drafts["share_ns"].sum())),
        "draft_reread_ns": int(round(drafts.loc[drafts["reread"], "share_ns"].sum())),
        "verify_ns": int(round(verifications["verify_ns"].sum())),
        "rejected_ns": int(round(verifications["rejected_ns"].sum())),
    }


def _graphs_of(run: Run, contexts: list[int]) -> int:
    graphs = run.arrow("graphs").column("context_id")
    return int(pc.sum(pc.is_in(graphs, value_set=pa.array(contexts, pa.int32()))).as_py() or 0)


def _per_request(run: Run, verifications: pd.DataFrame, drafts: pd.DataFrame) -> list[SpeculativeRequest]:
    """Each request's verifications and draft steps (those of its sequence from its start until the
    sequence's next request), summed; the requests with speculation, in the order they began."""
    listed = pd.DataFrame(requests(run), columns=["seq_id", "start_ns"])
    if listed.empty:
        return []
    origin = int(pc.min(run.arrow("graphs").column("start_ns")).as_py())
    listed = listed.assign(request=np.arange(len(listed))).sort_values("start_ns")
    steps = pd.concat([verifications, drafts], ignore_index=True)
    steps = steps.assign(start_ns=steps["start_ns"] - origin).sort_values("start_ns")
    steps = steps.astype({"seq_id": "int64", "start_ns": "int64"})
    listed = listed.astype({"seq_id": "int64", "start_ns": "int64"})
    steps = pd.merge_asof(steps, listed, on="start_ns", by="seq_id").dropna(subset=["request"])
    found: list[SpeculativeRequest] = []
    for request, group in steps.groupby("request", sort=True):
        row = listed.set_index("request").loc[request]
        mine = group[group["verification"].astype(bool)]
        theirs = group[~group["verification"].astype(bool)]
        totals = _totals(mine, theirs.assign(reread=theirs["reread"].astype(bool)))
        if totals["verifications"]:
            found.append({"seq_id": int(row["seq_id"]), "start_ns": int(row["start_ns"]), **totals})
    return found


def speculation_findings(summary: SpeculativeSummary | None) -> list[str]:
    """Speculative decoding that cost more than the plain decode steps it replaced would have, at the
    run's own single-token decode time."""
    if summary is None or summary["plain_estimate_ns"] is None or summary["plain_step_ns"] is None:
        return []
    cost = summary["draft_ns"] + summary["verify_ns"]
    estimate, step = summary["plain_estimate_ns"], summary["plain_step_ns"]
    if cost <= estimate:
        return []
    return [
        f"Speculative decoding cost more than it saved: drafting {summary['draft_ns'] / 1e6:,.1f} ms and "
        f"verifying {summary['verify_ns'] / 1e6:,.1f} ms for {summary['tokens_fed']:,} tokens, which single-token "
        f"decode steps ({step / 1e6:,.2f} ms each at this run's median) would have given in "
        f"{estimate / 1e6:,.1f} ms; {summary['accepted']:,} of {summary['drafted']:,} drafted tokens were accepted."
    ]
