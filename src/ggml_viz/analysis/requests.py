"""The requests a run served (a server's, each in its sequence): their texts, and their times
measured as llama-server measures them, from the `llama_decode` calls that held their tokens.

A request's tokens are found token by token, as a server batches them (`requests`); its times
come from the decode calls (not the graphs: a call that splits its batch into several graphs
is one step of every request in it):

- arrival: the start of the first call holding any of its tokens (a queued request's wait for a
  slot, and its HTTP arrival, are not in the graphs: they cannot be known from them);
- prompt_ms: from there to the end of the call holding its last prompt token; time to first
  token is the same span (the first token is sampled from that call's logits);
- predicted_ms: from that end to the end of the call holding its last token fed back (the last
  generated token is never fed back: predicted_n is the tokens fed back + 1);
- cache_n: its prompt's first position (the prefix its slot kept from before).

llama-server's own `timings` (tools/server: `server_slot_stats`) start a prompt when the slot's
first tokens go into a batch and end it when its first token is sampled, which brackets the same
calls by the batch's assembly and one sampling: tests/integration/test_served_requests.py holds
ours to the server's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..runformat.reader import Run, token_batch_indexes
from .kv import shifting_calls
from .rows import records_as
from .speculative_batches import fed_tokens

# The phases whose tokens are a rate worth giving: the prompt read, the tokens generated (not
# llama.cpp's warm-up decode, nor a non-LLM program's graphs).
TOKEN_PHASES = ("prompt", "decode")
PERCENTILES = (50, 90, 99)
MS = 1e6


class RequestText(TypedDict):
    """One request a run served, in one sequence (requests)."""

    seq_id: int
    start_ns: int  # from the run's first graph
    prompt: str
    prompt_tokens: int
    generated: str  # the tokens fed back while decoding (all but the last generated)
    generated_tokens: int


class RequestTimes(TypedDict):
    """One request's counts and times, as llama-server's `timings` give them (request_times)."""

    request: int  # its number, in the order the requests began
    seq_id: int
    first_graph_id: int
    last_graph_id: int
    arrival_ns: int  # the start of the first decode call holding its tokens (the recorder's clock)
    prompt_end_ns: int  # the end of the call holding its last prompt token
    end_ns: int  # the end of the call holding its last token fed back (prompt_end_ns: none)
    prompt_n: int  # prompt tokens computed
    cache_n: int  # prompt tokens its slot had cached (its prompt's first position)
    predicted_n: int  # tokens generated: those fed back + 1 (0: its prompt never asked for logits)
    prompt_ms: float
    ttft_ms: float  # time to first token, from arrival (the queue before it is not seen)
    predicted_ms: float
    tpot_ms: float | None  # time per output token: predicted_ms / (predicted_n - 1)
    batches: int  # the decode calls holding its tokens
    shared_batches: int  # of them, those holding other requests' tokens too
    batches_ms: float  # those calls' whole time
    share_ms: float  # its share of it: each call's time × its tokens / the call's tokens


class RequestBatch(TypedDict):
    """A request's tokens in one decode call (request_batches)."""

    request: int
    seq_id: int
    context_id: int
    decode_index: int  # the call (-1: a graph outside any call, its own step)
    first_graph_id: int  # the call's first graph
    start_ns: int
    end_ns: int
    tokens: int  # the request's tokens in the call
    batch_tokens: int  # all the call's tokens
    share: float  # tokens / batch_tokens
    share_ms: float  # the call's time × share


class Percentiles(TypedDict):
    """A figure over the run's requests (None: no request has it)."""

    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


class RequestsSummary(TypedDict):
    """A served run's requests in figures (requests_summary)."""

    n_requests: int
    prompt_tokens: int  # prompt tokens computed, all requests
    cached_tokens: int
    predicted_tokens: int
    shared_batches: float | None  # the share of requests' decode calls holding other requests' tokens
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    prompt_ms: Percentiles
    predicted_ms: Percentiles
    queue_wait: str  # why the wait before a slot took a request is not given


QUEUE_WAIT = (
    "not seen: a request's HTTP arrival and its wait for a slot happen before any of its tokens reach "
    "llama.cpp, so the graphs cannot show them (its arrival here is its first decode call)"
)

REQUEST_COLUMNS = list(RequestTimes.__annotations__)
BATCH_COLUMNS = list(RequestBatch.__annotations__)


def requests(run: Run, limit: int | None = None) -> list[RequestText]:
    """Each request the run served, per sequence, in the order they began: the prompt it fed
    and the text it generated (the tokens fed back while decoding: all but the last generated
    token, which no graph reads). Read token by token, as a server batches them: a sequence's
    tokens in one batch are prompt when there are several, or while its prompt has not ended
    (its last token asks for logits); a lone token after that is a generated one fed back. A
    request begins with a sequence's first tokens, where its positions go back (a slot's next
    request, whose prompt may start past a cached prefix), and with a prompt after generating.
    The warm-up is no request, nor are tokens of no sequence (a plain program's, read from its
    graphs' inputs: whisper.cpp's decoder steps). limit: only the first ones, with their texts."""
    return requests_and_count(run, limit)[0]


def requests_and_count(run: Run, limit: int | None = None) -> tuple[list[RequestText], int]:
    """The first `limit` requests (all: None), as `requests` gives them, and how many there are.

    Over the graphs' token lists as stored (Arrow), with numpy: no Python object per token,
    the texts joined by Arrow for the requests listed only."""
    split = _split(run)
    if split is None:
        return [], 0
    tokens, by_seq, request, generated = split.tokens, split.by_seq, split.request, split.generated
    count = len(split.heads)
    listed = split.order if limit is None else split.order[:limit]
    generated_tokens = np.bincount(request, weights=generated, minlength=count).astype(np.int64)
    all_tokens = np.bincount(request, minlength=count).astype(np.int64)
    rank = np.empty(count, np.int64)
    rank[listed] = np.arange(len(listed))
    chosen = np.isin(request, listed)  # the listed requests' tokens, joined into their texts
    side = generated[chosen].astype(np.int64)  # 0: prompt, 1: generated
    group = rank[request[chosen]] * 2 + side
    tokens_order = np.lexsort((by_seq[chosen], group))  # per (request, side), in reading order
    lengths = np.bincount(group, minlength=2 * len(listed))
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    picked = tokens.texts.take(pa.array(tokens.text_index[by_seq[chosen][tokens_order]]))
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), picked), "").to_pylist()
    origin = int(pc.min(run.arrow("graphs").column("start_ns")).as_py())
    found: list[RequestText] = []
    for place, r in enumerate(listed.tolist()):
        head = split.heads[r]
        found.append(
            {
                "seq_id": int(split.seq[head]),
                "start_ns": int(tokens.start_ns[by_seq[head]]) - origin,
                "prompt": joined[2 * place] or "",
                "prompt_tokens": int(all_tokens[r] - generated_tokens[r]),
                "generated": joined[2 * place + 1] or "",
                "generated_tokens": int(generated_tokens[r]),
            }
        )
    return found, count


def request_times(run: Run) -> pd.DataFrame:
    """Per request, in the order they began, RequestTimes' columns: its counts and times from the
    decode calls that held its tokens (the module's docstring says how each is measured)."""
    split = _split(run)
    if split is None:
        return _empty(REQUEST_COLUMNS)
    calls = split.tokens.calls
    call = split.tokens.call[split.by_seq]  # per token, in `by_seq` order
    start, end = calls.start_ns[call], calls.end_ns[call]
    generated, heads = split.generated, split.heads
    prompt = ~generated
    ever = np.iinfo(np.int64).min
    arrival = np.minimum.reduceat(start, heads)
    prompt_end = np.maximum.reduceat(np.where(prompt, end, ever), heads)
    fed_back_end = np.maximum.reduceat(np.where(generated, end, ever), heads)
    prompt_n = np.add.reduceat(prompt.astype(np.int64), heads)
    fed_back = np.add.reduceat(generated.astype(np.int64), heads)
    asked = np.add.reduceat((prompt & split.output).astype(np.int64), heads) > 0  # the prompt asked for logits
    predicted_n = fed_back + asked
    end_ns = np.maximum(fed_back_end, prompt_end)  # (its last call's end: a fed-back token's, or its prompt's)
    predicted_ms = (end_ns - prompt_end) / MS
    graph_id = split.tokens.graph_id[split.by_seq]
    per_request = _request_batches(split, call, calls)
    table = pd.DataFrame(
        {
            "request": np.empty(len(heads), np.int64),
            "seq_id": split.seq[heads],
            "first_graph_id": np.minimum.reduceat(graph_id, heads),
            "last_graph_id": np.maximum.reduceat(graph_id, heads),
            "arrival_ns": arrival,
            "prompt_end_ns": prompt_end,
            "end_ns": end_ns,
            "prompt_n": prompt_n,
            "cache_n": split.pos[heads],
            "predicted_n": predicted_n,
            "prompt_ms": (prompt_end - arrival) / MS,
            "ttft_ms": (prompt_end - arrival) / MS,
            "predicted_ms": predicted_ms,
            "tpot_ms": np.where(predicted_n > 1, predicted_ms / np.maximum(predicted_n - 1, 1), np.nan),
            "batches": per_request["batches"],
            "shared_batches": per_request["shared_batches"],
            "batches_ms": per_request["batches_ms"],
            "share_ms": per_request["share_ms"],
        }
    )
    table = table.iloc[split.order].reset_index(drop=True)
    table["request"] = np.arange(len(table))
    table["tpot_ms"] = table["tpot_ms"].astype(object).where(table["tpot_ms"].notna(), None)
    return table[REQUEST_COLUMNS]


def request_batches(run: Run) -> pd.DataFrame:
    """Per request and decode call holding its tokens, RequestBatch's columns: the call, the
    request's tokens in it and its share of the call's time; by request, then call."""
    split = _split(run)
    if split is None:
        return _empty(BATCH_COLUMNS)
    calls = split.tokens.calls
    call = split.tokens.call[split.by_seq]
    request, pair_call, tokens = _pairs(split, call, calls)
    rank = np.empty(len(split.heads), np.int64)
    rank[split.order] = np.arange(len(split.heads))
    batch_tokens = calls.tokens[pair_call]
    share = tokens / np.maximum(batch_tokens, 1)
    table = pd.DataFrame(
        {
            "request": rank[request],
            "seq_id": split.seq[split.heads][request],
            "context_id": calls.context_id[pair_call],
            "decode_index": calls.decode_index[pair_call],
            "first_graph_id": calls.first_graph_id[pair_call],
            "start_ns": calls.start_ns[pair_call],
            "end_ns": calls.end_ns[pair_call],
            "tokens": tokens,
            "batch_tokens": batch_tokens,
            "share": share,
            "share_ms": (calls.end_ns[pair_call] - calls.start_ns[pair_call]) * share / MS,
        }
    )
    return table.sort_values(["request", "start_ns"], kind="stable", ignore_index=True)[BATCH_COLUMNS]


def requests_summary(run: Run, times: pd.DataFrame | None = None) -> RequestsSummary:
    """The run's requests in figures: how many, their tokens, and the percentiles of their times
    (`times`: request_times(run), when the caller has it)."""
    times = request_times(run) if times is None else times
    batches = int(times["batches"].sum())
    return {
        "n_requests": len(times),
        "prompt_tokens": int(times["prompt_n"].sum()),
        "cached_tokens": int(times["cache_n"].sum()),
        "predicted_tokens": int(times["predicted_n"].sum()),
        "shared_batches": float(times["shared_batches"].sum() / batches) if batches else None,
        "ttft_ms": percentiles(times["ttft_ms"]),
        "tpot_ms": percentiles(times["tpot_ms"]),
        "prompt_ms": percentiles(times["prompt_ms"]),
        "predicted_ms": percentiles(times["predicted_ms"][times["predicted_n"] > 1]),
        "queue_wait": QUEUE_WAIT,
    }


def request_rows(run: Run) -> list[RequestTimes]:
    """request_times' rows as records (the viewer's and JSON's form)."""
    return records_as(request_times(run), RequestTimes)


def percentiles(values: pd.Series) -> Percentiles:
    """p50, p90, p99 and the max of `values` (those not missing; all None if none)."""
    known = pd.to_numeric(values, errors="coerce").dropna().to_numpy(np.float64)
    if not len(known):
        return {"p50": None, "p90": None, "p99": None, "max": None}
    p50, p90, p99 = (float(value) for value in np.percentile(known, PERCENTILES))
    return {"p50": p50, "p90": p90, "p99": p99, "max": float(known.max())}


# -- the split into requests, token by token ----------------------------------------------------


@dataclass(frozen=True)
class _ServedTokens:
    """The tokens of requests (of a prompt or decode graph, of a sequence), in the order they were
    read (by their graph's start, then place in the batch), one entry each."""

    seq: np.ndarray
    pos: np.ndarray
    output: np.ndarray  # it asked for logits
    several: np.ndarray  # its sequence had several tokens in its batch (decode call)
    start_ns: np.ndarray  # its graph's start
    graph_id: np.ndarray
    graph_row: np.ndarray  # its graph's row in the graphs table
    call: np.ndarray  # its decode call (in `calls`)
    calls: _DecodeCalls
    text_index: np.ndarray  # its place in `texts`
    texts: pa.Array  # every token's text, as stored


@dataclass(frozen=True)
class _Split:
    """The served tokens split into requests: per token in `by_seq` order (a sequence's tokens side
    by side, in reading order), its request (numbered in that order) and whether it is generated."""

    tokens: _ServedTokens
    by_seq: np.ndarray  # each token's place in reading order
    seq: np.ndarray
    pos: np.ndarray
    output: np.ndarray
    request: np.ndarray
    generated: np.ndarray
    heads: np.ndarray  # each request's first token
    order: np.ndarray  # the requests in the order they began


def _split(run: Run) -> _Split | None:
    tokens = _served_tokens(run)
    if tokens is None:
        return None
    n = len(tokens.seq)
    # per sequence, in the order the tokens were read: a sequence's tokens side by side
    by_seq = np.argsort(tokens.seq, kind="stable")
    seq, pos = tokens.seq[by_seq], tokens.pos[by_seq]
    output, several = tokens.output[by_seq], tokens.several[by_seq]
    first_of_seq = np.ones(n, bool)
    first_of_seq[1:] = seq[1:] != seq[:-1]
    starts = first_of_seq.copy()
    # positions going back: a new request, but where the call shifted the context (llama-server's
    # --context-shift: a generating slot's positions moved back, one token on as before)
    shifted = _in_shifting_call(run, tokens)[by_seq] & ~several & (pos > 0)
    starts[1:] |= (pos[1:] <= pos[:-1]) & ~shifted[1:]
    while True:  # a prompt after generating: the first such token of each request begins a new one
        generated = _generated(starts, output, several)
        request = np.cumsum(starts) - 1
        before = _count_before(starts, request, generated)
        candidates = np.flatnonzero(several & (before > 0) & ~starts)
        if not len(candidates):
            break
        _, first = np.unique(request[candidates], return_index=True)
        starts[candidates[first]] = True
    request = np.cumsum(starts) - 1
    heads = np.flatnonzero(starts)
    order = np.argsort(by_seq[heads], kind="stable")  # the requests in the order they began
    return _Split(tokens, by_seq, seq, pos, output, request, generated, heads, order)


def _in_shifting_call(run: Run, tokens: _ServedTokens) -> np.ndarray:
    """Per token, whether its decode call shifted the KV cache's positions (kv.shifting_calls)."""
    shifting = shifting_calls(run)
    if not shifting:
        return np.zeros(len(tokens.seq), bool)
    calls = tokens.calls
    in_call = np.array(
        [
            (int(c), int(d)) in shifting
            for c, d in zip(calls.context_id.tolist(), calls.decode_index.tolist(), strict=True)
        ],
        bool,
    )
    return in_call[tokens.call]


def _served_tokens(run: Run) -> _ServedTokens | None:
    """The run's tokens of requests, in the order they were read; None if there are none."""
    columns = [
        "graph_id",
        "phase",
        "start_ns",
        "first_batch_index",
        "token_batch_indexes",
        "token_ids",
        "token_positions",
        "token_seq_ids",
        "token_outputs",
        "token_texts",
    ]
    graphs = run.arrow("graphs")
    graphs = graphs.select([column for column in columns if column in graphs.schema.names])  # (older runs: fewer)
    lists = graphs.column("token_ids").combine_chunks()
    row = pc.list_parent_indices(lists).to_numpy()  # each token's graph row
    if not len(row):
        return None
    lengths = pc.list_value_length(lists).fill_null(0).to_numpy()
    starts = np.concatenate(([0], np.cumsum(lengths)))

    def flat(column: str) -> np.ndarray:
        return pc.list_flatten(graphs.column(column).combine_chunks()).to_numpy(zero_copy_only=False)

    graph_id = graphs.column("graph_id").to_numpy()[row].astype(np.int64)
    in_list = np.arange(len(row)) - starts[row]  # each token's place in its graph's list
    batch_index = token_batch_indexes(graphs, row, in_list)
    seq, pos = flat("token_seq_ids").astype(np.int64), flat("token_positions").astype(np.int64)
    output = flat("token_outputs")
    phase = pc.is_in(graphs.column("phase"), value_set=pa.array(TOKEN_PHASES)).to_numpy(zero_copy_only=False)
    start_ns = graphs.column("start_ns").to_numpy()[row].astype(np.int64)
    served = phase[row] & (seq >= 0)
    speculation = fed_tokens(run)  # a draft model's tokens and rejected drafts serve no request
    if speculation is not None:
        served &= ~speculation[0]
    keep = np.flatnonzero(served)
    if not len(keep):
        return None
    # by decode call's start, place in its batch, then call (stable; as stored, they are so already: a
    # day's 1.75M tokens are then not sorted again). Not by graph: a call that splits its batch into
    # several graphs need not give each sequence's tokens to them in the batch's order.
    calls = _decode_calls(run)
    call = calls.of_row[row]
    keys = (call[keep], batch_index[keep], calls.start_ns[call[keep]])
    order = keep if _in_order(*keys) else keep[np.lexsort(keys)]
    # a sequence's tokens in one batch (call): only a call of several tokens can have them
    several = np.zeros(len(order), bool)
    multi = np.flatnonzero(np.bincount(call, minlength=len(calls.start_ns))[call[order]] > 1)
    if len(multi):
        pair = call[order[multi]] * (np.int64(1) << 32) + seq[order[multi]]
        _, inverse, counts = np.unique(pair, return_inverse=True, return_counts=True)
        several[multi] = counts[inverse] > 1
    if speculation is not None:  # the tokens a verification kept: generated, though not alone
        several &= ~speculation[1][order]
    texts = pc.fill_null(pc.list_flatten(graphs.column("token_texts").combine_chunks()), "")
    return _ServedTokens(
        seq=seq[order],
        pos=pos[order],
        output=output[order].astype(bool),
        several=several,
        start_ns=start_ns[order],
        graph_id=graph_id[order],
        graph_row=row[order],
        call=call[order],
        calls=calls,
        text_index=order,
        texts=texts,
    )


def _in_order(last: np.ndarray, middle: np.ndarray, first: np.ndarray) -> bool:
    """Whether rows are sorted by (first, middle, last) already (np.lexsort's key order)."""
    if len(first) < 2:
        return True
    after = first[1:] > first[:-1]
    tied = first[1:] == first[:-1]
    after_middle = middle[1:] > middle[:-1]
    tied_middle = middle[1:] == middle[:-1]
    return bool(np.all(after | (tied & (after_middle | (tied_middle & (last[1:] >= last[:-1]))))))


def _count_before(starts: np.ndarray, request: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """Per token, how many tokens before it in its request (requests: runs of tokens, each
    beginning where `starts`) have `flags` set."""
    total = np.cumsum(flags, dtype=np.int64)
    at_start = (total - flags)[np.flatnonzero(starts)]  # the count before each request's first token
    return total - flags - at_start[request]


def _generated(starts: np.ndarray, output: np.ndarray, several: np.ndarray) -> np.ndarray:
    """Per token, whether it is a generated one fed back: its request's prompt ended before it (a
    token of the request asked for logits) and it is alone in its batch."""
    request = np.cumsum(starts) - 1
    return (_count_before(starts, request, output) > 0) & ~several


# -- the decode calls ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _DecodeCalls:
    """The run's decode calls (a graph outside any call is a call of its own): per call, its
    context, index, first graph, times and tokens; `of_row`: each graph row's call."""

    of_row: np.ndarray
    context_id: np.ndarray
    decode_index: np.ndarray
    first_graph_id: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    tokens: np.ndarray


def _decode_calls(run: Run) -> _DecodeCalls:
    """The decode calls of the run's graphs. A call's tokens are its graphs' together (however
    the call's graphs share them out), its times the call's own (entered, returned)."""
    graphs = run.arrow("graphs")

    def column(name: str, missing: int = -1) -> np.ndarray:
        if name not in graphs.schema.names:  # (a table made without the decode calls: a graph is one)
            return np.full(graphs.num_rows, missing, np.int64)
        return graphs.column(name).fill_null(missing).to_numpy().astype(np.int64)

    graph_id, context_id, decode_index = column("graph_id"), column("context_id"), column("decode_index")
    in_call = decode_index >= 0
    # a call not seen to return (the program ended in it) ends with its graphs
    start = np.where(in_call & (column("decode_start_ns") >= 0), column("decode_start_ns"), column("start_ns"))
    end = np.where(in_call & (column("decode_end_ns") >= 0), column("decode_end_ns"), column("end_ns"))
    key = np.where(in_call, ((context_id + 1) << 32) | decode_index, -(graph_id + 1))
    unique, of_row = np.unique(key, return_inverse=True)
    n = len(unique)
    first = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(first, of_row, graph_id)
    # the calls numbered by their first graph, as stored
    renumbered = np.empty(n, np.int64)
    renumbered[np.argsort(first, kind="stable")] = np.arange(n)
    of_row, first = renumbered[of_row.ravel()], np.sort(first)
    call_start = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(call_start, of_row, start)
    call_end = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(call_end, of_row, end)
    context = np.zeros(n, np.int64)
    context[of_row] = context_id
    index = np.zeros(n, np.int64)
    index[of_row] = np.where(in_call, decode_index, -1)
    tokens = np.bincount(of_row, weights=column("n_tokens", 0), minlength=n).astype(np.int64)
    return _DecodeCalls(of_row.ravel(), context, index, first, call_start, call_end, tokens)


def _pairs(split: _Split, call: np.ndarray, calls: _DecodeCalls) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each (request, decode call) holding the request's tokens: the request (as `split` numbers
    them), the call and the request's tokens in it."""
    key = split.request * np.int64(len(calls.start_ns)) + call
    unique, counts = np.unique(key, return_counts=True)
    return unique // len(calls.start_ns), unique % len(calls.start_ns), counts


def _request_batches(split: _Split, call: np.ndarray, calls: _DecodeCalls) -> dict[str, np.ndarray]:
    """Per request (as `split` numbers them): its decode calls, those shared with other requests,
    their time and its share of it."""
    request, pair_call, tokens = _pairs(split, call, calls)
    n = len(split.heads)
    duration = (calls.end_ns - calls.start_ns)[pair_call]
    shared = tokens < calls.tokens[pair_call]
    share = tokens / np.maximum(calls.tokens[pair_call], 1)
    return {
        "batches": np.bincount(request, minlength=n).astype(np.int64),
        "shared_batches": np.bincount(request, weights=shared, minlength=n).astype(np.int64),
        "batches_ms": np.bincount(request, weights=duration, minlength=n) / MS,
        "share_ms": np.bincount(request, weights=duration * np.minimum(share, 1.0), minlength=n) / MS,
    }


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({column: pd.Series([], dtype="int64") for column in columns})
