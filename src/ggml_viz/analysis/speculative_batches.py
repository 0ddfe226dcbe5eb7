"""Speculative decoding told apart in a run, from its graphs' batches alone (no tensor name, no
model): which context drafts for which, which target batches verify drafts, how many drafted
tokens each request had accepted, and where its time went.

A **verification** is a target batch holding, for one sequence after its prompt, several tokens at
consecutive positions that all ask for logits: the token sampled last and the drafts after it
(llama-server's `handle_last_sampled_token`; a prompt asks for logits at its last token only). The
next batch of that sequence starts right after the tokens the target accepted: `accepted` = its
first position − the verification's first position − 1 (the server's `n_draft_accepted`).
A **draft context** is a second context that re-reads each of the target's batches right after
the target computed it (the same tokens at the same positions: llama.cpp's
`common_speculative_process`) and, between them, decodes tokens alone (the drafts). Draftless
drafts (n-grams, lookup) have verifications and no draft context.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ..runformat.reader import Run

# The phases whose batches serve requests (llama.cpp's warm-up is none)
_SERVING_PHASES = ("prompt", "decode")
_CALL_KEYS = ["context_id", "call"]
_STEP_KEYS = ["context_id", "call", "seq_id"]


@dataclass(frozen=True)
class Speculation:
    """What speculative decoding did in a run (find_speculation).

    steps: one row per (context, llama_decode call, sequence) of the serving phases: its tokens
    (n), first position, time share (share_ns: the call's graph time by its tokens), start, and
    for the targets' verifications `drafted`, `accepted`, `assumed`; for the draft contexts'
    steps `reread` (a re-read of a target batch). dropped, verified: per token of the graphs table
    as stored (its token lists flattened), a draft context's token or a rejected draft; a token of
    a verification the target kept."""

    draft_of: dict[int, int]  # draft context -> its target context
    steps: pd.DataFrame
    dropped: np.ndarray
    verified: np.ndarray

    @property
    def verifications(self) -> pd.DataFrame:
        return self.steps[self.steps["verification"]]

    @property
    def draft_steps(self) -> pd.DataFrame:
        return self.steps[self.steps["context_id"].isin(list(self.draft_of))]

    @property
    def plain_steps(self) -> pd.Series:
        """The targets' calls that decoded one token alone after a sequence's prompt: their times."""
        steps = self.steps
        targets = steps["context_id"].isin(self.verifications["context_id"].unique())
        alone = (steps["n"] == 1) & (steps["call_tokens"] == 1) & (steps["outputs"] == 1)
        return steps.loc[targets & alone & _same_as_before(steps, 1), "call_ns"]


def find_speculation(run: Run) -> Speculation | None:
    """The run's speculative decoding, or None where no batch verifies drafts."""
    tokens = _tokens(run)
    if tokens is None:
        return None
    steps = _steps(tokens)
    steps["verification"] = _verifications(steps)
    if not steps["verification"].any():
        return None
    draft_of = _draft_contexts(tokens, steps)
    steps.loc[steps["context_id"].isin(list(draft_of)), "verification"] = False
    _acceptance(steps)
    steps["reread"] = (
        _rereads(tokens, draft_of).reindex(pd.MultiIndex.from_frame(steps[_CALL_KEYS]), fill_value=False).to_numpy()
    )
    dropped, verified = _token_roles(run, tokens, steps, draft_of)
    return Speculation(draft_of, steps, dropped, verified)


def fed_tokens(run: Run) -> tuple[np.ndarray, np.ndarray] | None:
    """For the requests (breakdowns): per token of the graphs table as stored, whether it is no
    request's (a draft context's, or a draft the target rejected) and whether it was fed back in a
    verification (a generated token, though not alone in its batch); None without speculation."""
    found = find_speculation(run)
    return None if found is None else (found.dropped, found.verified)


def _tokens(run: Run) -> pd.DataFrame | None:
    """The serving phases' tokens of a sequence, each with its call (context, llama_decode call),
    the call's start, graph time and tokens; None where no graph asks for logits at two tokens of
    one sequence (no verification: the common case, told apart without a table of the tokens)."""
    graphs = run.arrow("graphs")
    row = pc.list_parent_indices(graphs.column("token_ids").combine_chunks()).to_numpy()  # each token's graph
    outputs = pc.fill_null(pc.list_flatten(graphs.column("token_outputs").combine_chunks()), False)
    outputs = outputs.to_numpy(zero_copy_only=False).astype(bool)
    seq = pc.list_flatten(graphs.column("token_seq_ids").combine_chunks()).to_numpy(zero_copy_only=False)
    asking = np.flatnonzero(outputs)
    pairs = row[asking].astype(np.int64) * (np.int64(1) << 32) + seq[asking].astype(np.int64)
    if len(pairs) < 2 or np.unique(pairs, return_counts=True)[1].max() < 2:
        return None
    present = [
        c for c in ("graph_id", "context_id", "decode_index", "phase", "start_ns", "end_ns") if c in graphs.column_names
    ]
    table = graphs.select(present).to_pandas()
    table["context_id"] = table["context_id"].fillna(-1).astype(np.int64)
    decode_index = table["decode_index"] if "decode_index" in table else pd.Series(-1, index=table.index)
    # a graph outside any call is a call of its own
    table["call"] = decode_index.where(decode_index >= 0, -2 - table["graph_id"])
    table["duration_ns"] = table["end_ns"] - table["start_ns"]

    def flat(column: str) -> np.ndarray:
        return pc.list_flatten(graphs.column(column).combine_chunks()).to_numpy(zero_copy_only=False)

    tokens = pd.DataFrame(
        {
            "index": np.arange(len(row)),
            "context_id": table["context_id"].to_numpy()[row],
            "call": table["call"].to_numpy()[row],
            "seq_id": seq.astype(np.int64),
            "pos": flat("token_positions").astype(np.int64),
            "token_id": flat("token_ids").astype(np.int64),
            "output": outputs,
        }
    )
    serving = table["phase"].isin(_SERVING_PHASES).to_numpy()[row] & (tokens["seq_id"].to_numpy() >= 0)
    tokens = tokens[serving]
    calls = table[table["phase"].isin(_SERVING_PHASES)].groupby(_CALL_KEYS)
    call_times = calls.agg(call_start_ns=("start_ns", "min"), call_ns=("duration_ns", "sum"))
    tokens = tokens.join(call_times, on=_CALL_KEYS)
    return tokens.assign(call_tokens=tokens.groupby(_CALL_KEYS)["pos"].transform("size"))


def _steps(tokens: pd.DataFrame) -> pd.DataFrame:
    """Per (context, call, sequence): its tokens, those asking for logits, first and last position,
    the call's start, and its share of the call's time (by tokens), in order of start per context
    and sequence."""
    steps = (
        tokens.groupby(_STEP_KEYS)
        .agg(
            n=("pos", "size"),
            outputs=("output", "sum"),
            first_pos=("pos", "min"),
            last_pos=("pos", "max"),
            start_ns=("call_start_ns", "first"),
            call_ns=("call_ns", "first"),
            call_tokens=("call_tokens", "first"),
        )
        .reset_index()
    )
    steps["share_ns"] = steps["call_ns"] * steps["n"] / steps["call_tokens"]
    return steps.sort_values(["context_id", "seq_id", "start_ns"], ignore_index=True)


def _same_as_before(steps: pd.DataFrame, shift: int) -> np.ndarray:
    """Whether the step `shift` rows away is of the same context and sequence."""
    keys = steps[["context_id", "seq_id"]]
    return (keys.shift(shift) == keys).all(axis=1).to_numpy()


def _verifications(steps: pd.DataFrame) -> np.ndarray:
    """Steps that verify drafts: several tokens at consecutive positions all asking for logits,
    past the previous step of their sequence's first position (after its prompt)."""
    after = _same_as_before(steps, 1) & (steps["first_pos"] > steps["first_pos"].shift(1)).to_numpy()
    several = (steps["n"] >= 2) & (steps["outputs"] == steps["n"])
    consecutive = steps["last_pos"] - steps["first_pos"] == steps["n"] - 1
    return np.asarray(several & consecutive) & after


def _acceptance(steps: pd.DataFrame) -> None:
    """A verification's drafts and those accepted, from where the next step of its sequence starts
    (a step generating: one token, or a verification); where none follows (the request ended, or a
    prompt came next), every draft is counted accepted and `assumed` says how many were so."""
    has_next = _same_as_before(steps, -1)
    next_first = steps["first_pos"].shift(-1).to_numpy()
    next_generates = ((steps["n"] == 1) & (steps["outputs"] == 1)) | steps["verification"]
    known = has_next & np.asarray(next_generates.shift(-1), dtype=bool) & (next_first > steps["first_pos"].to_numpy())
    verification = steps["verification"].to_numpy()
    drafted = np.where(verification, steps["n"] - 1, 0)
    seen = np.clip(np.nan_to_num(next_first - steps["first_pos"].to_numpy() - 1), 0, drafted).astype(np.int64)
    steps["drafted"] = drafted
    steps["accepted"] = np.where(known, seen, drafted)
    steps["assumed"] = np.where(verification & ~known, drafted, 0)
    steps["verify_ns"] = np.where(verification, steps["share_ns"], 0.0)
    rejected = (steps["drafted"] - steps["accepted"]) / steps["n"]
    steps["rejected_ns"] = steps["verify_ns"] * rejected


def _call_signatures(tokens: pd.DataFrame) -> pd.DataFrame:
    """Per call: its start and what identifies its batch (tokens, positions, sequences), sorted by start."""
    tokens = tokens.assign(weighted=tokens["pos"] * tokens["token_id"] + tokens["seq_id"])
    signature = tokens.groupby(_CALL_KEYS).agg(
        start_ns=("call_start_ns", "first"),
        n=("pos", "size"),
        first_pos=("pos", "min"),
        last_pos=("pos", "max"),
        token_sum=("token_id", "sum"),
        weighted=("weighted", "sum"),
    )
    return signature.reset_index().sort_values("start_ns", ignore_index=True)


_SIGNATURE = ["n", "first_pos", "last_pos", "token_sum", "weighted"]


def _replays(calls: pd.DataFrame, context: int, target: int) -> pd.Series:
    """Per call of `context` (by call): whether it computes the batch `target` computed last before it."""
    mine = calls[calls["context_id"] == context]
    theirs = calls[calls["context_id"] == target][["start_ns", *_SIGNATURE]]
    paired = pd.merge_asof(mine, theirs, on="start_ns", allow_exact_matches=False, suffixes=("", "_target"))
    same = np.ones(len(paired), bool)
    for column in _SIGNATURE:
        same &= (paired[column] == paired[f"{column}_target"]).to_numpy()
    return pd.Series(same, index=paired["call"].to_numpy())


def _draft_contexts(tokens: pd.DataFrame, steps: pd.DataFrame) -> dict[int, int]:
    """Draft context -> target: a context that re-reads at least half of a verifying context's calls
    right after it computed them, and computes tokens alone between (its drafts)."""
    calls = _call_signatures(tokens)
    verifying = set(steps.loc[steps["verification"], "context_id"].tolist())
    counts = calls.groupby("context_id").size()
    draft_of: dict[int, int] = {}
    for context in counts.index.tolist():
        best, best_count = None, 0
        for target in verifying - {context}:
            replays = int(_replays(calls, context, target).sum())
            if replays * 2 >= counts[target] and replays > best_count:
                best, best_count = target, replays
        alone = (steps["context_id"] == context) & (steps["n"] == 1)  # a sequence's token alone in its call
        if best is not None and alone.any():
            draft_of[int(context)] = int(best)
    return draft_of


def _rereads(tokens: pd.DataFrame, draft_of: dict[int, int]) -> pd.Series:
    """Per draft context's call (by context, call): whether it re-reads its target's last batch."""
    if not draft_of:
        return pd.Series(dtype=bool, index=pd.MultiIndex.from_arrays([[], []], names=_CALL_KEYS))
    calls = _call_signatures(tokens)
    parts = [_replays(calls, draft, target) for draft, target in draft_of.items()]
    index = pd.MultiIndex.from_arrays(
        [np.repeat(list(draft_of), [len(part) for part in parts]), np.concatenate([p.index for p in parts])],
        names=_CALL_KEYS,
    )
    return pd.Series(np.concatenate([p.to_numpy() for p in parts]), index=index)


def _token_roles(
    run: Run, tokens: pd.DataFrame, steps: pd.DataFrame, draft_of: dict[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Per token of the graphs as stored: no request's (a draft context's, or a rejected draft), and
    kept by a verification."""
    count = int(pc.sum(pc.list_value_length(run.arrow("graphs").column("token_ids")).fill_null(0)).as_py() or 0)
    dropped, verified = np.zeros(count, bool), np.zeros(count, bool)
    dropped[tokens.loc[tokens["context_id"].isin(list(draft_of)), "index"].to_numpy()] = True
    checked = steps.loc[steps["verification"], [*_STEP_KEYS, "first_pos", "accepted"]]
    within = tokens.merge(checked, on=_STEP_KEYS)
    kept = within["pos"] <= within["first_pos"] + within["accepted"]
    verified[within.loc[kept, "index"].to_numpy()] = True
    dropped[within.loc[~kept, "index"].to_numpy()] = True
    return dropped, verified
