"""A server's requests followed call by call, as the decode calls close: their tokens, time to
first token and time per output token, and the KV cells their sequences hold.

The definitions are analysis/requests.py's, read online: a request begins with a sequence's first
tokens, where its positions go back (a slot's next request), or with a prompt (several tokens of
the sequence in one call) after it generated; a token is generated (fed back) once its request's
prompt asked for logits, alone in its call. Its arrival is the start of its first call; its first
token comes at the end of the call holding its prompt's token that asks for logits (time to first
token); each token fed back after that comes one step after the previous one (time per output
token: the time between the ends of their calls). The run's request table differs where a prompt
goes on after asking for logits (the table ends the prompt at its last token, known only later)
and where a call shifted the context (--context-shift: positions going back without a new request).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NS = 1e9


@dataclass
class _Request:
    """The request a sequence is serving now."""

    arrival_ns: int
    last_position: int
    highest_position: int
    asked: bool = False  # its prompt asked for logits: its first token came
    fed_back: int = 0  # tokens generated and fed back since
    last_token_ns: int = 0  # the end of the call that gave its latest token


@dataclass
class CallOutcome:
    """What one decode call did for the requests in it."""

    prompt_tokens: int = 0
    generated_tokens: int = 0  # first tokens of prompts that asked for logits, and tokens fed back
    requests_begun: int = 0
    first_token_seconds: list[float] = field(default_factory=list)  # per request whose first token came
    token_step_seconds: list[float] = field(default_factory=list)  # per token fed back: since its previous


class ServedRequests:
    """The requests of one llama context, fed its decode calls in the order they ran (only the
    tokens of requests: not the warm-up's, not those of no sequence)."""

    def __init__(self) -> None:
        self.requests: dict[int, _Request] = {}  # by sequence

    def read_call(
        self, start_ns: int, end_ns: int, seq_ids: np.ndarray, positions: np.ndarray, outputs: np.ndarray
    ) -> CallOutcome:
        """One call's tokens (in its batch's order): what it did for each request."""
        outcome = CallOutcome()
        kept = seq_ids >= 0
        seq_ids, positions, outputs = seq_ids[kept], positions[kept], outputs[kept]
        sequences, counts = np.unique(seq_ids, return_counts=True)
        several = dict(zip(sequences.tolist(), (counts > 1).tolist(), strict=True))
        for seq, position, output in zip(seq_ids.tolist(), positions.tolist(), outputs.tolist(), strict=True):
            request = self.requests.get(seq)
            if request is None or position <= request.last_position or (several[seq] and request.fed_back):
                request = self.requests[seq] = _Request(start_ns, position, position)
                outcome.requests_begun += 1
            if request.asked and not several[seq]:  # a generated token fed back
                request.fed_back += 1
                outcome.generated_tokens += 1
                outcome.token_step_seconds.append((end_ns - request.last_token_ns) / NS)
                request.last_token_ns = end_ns
            else:
                outcome.prompt_tokens += 1
                if output and not request.asked:  # its first token is sampled from this call's logits
                    request.asked = True
                    request.last_token_ns = end_ns
                    outcome.generated_tokens += 1
                    outcome.first_token_seconds.append((end_ns - request.arrival_ns) / NS)
            request.last_position = position
            request.highest_position = max(request.highest_position, position)
        return outcome

    @property
    def cells_used(self) -> int:
        """The KV cells the sequences hold: each its highest position since its request began, + 1."""
        return sum(request.highest_position + 1 for request in self.requests.values())
