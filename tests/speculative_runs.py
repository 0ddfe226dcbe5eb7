"""A server's run with speculative decoding, batch by batch as llama-server computes it: a target
context verifying drafts, a draft context re-reading each target batch and drafting tokens alone
between (or, draftless, drafts from the text itself: no draft context)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ggml_viz.runformat.synthetic import SyntheticRecording

TARGET, DRAFT = 0, 1
STEP_NS, VERIFY_NS, DRAFT_NS = 1_000_000, 1_400_000, 500_000


@dataclass
class Server:
    """A server's batches written into a run: each context's calls counted, the tokens of each
    sequence kept as the target accepted them."""

    recording: SyntheticRecording
    draft_model: bool
    calls: dict[int, int] = field(default_factory=lambda: {TARGET: 0, DRAFT: 0})

    def compute(self, context: int, batch: list[tuple[int, int, int, bool]], phase: str, duration_ns: int) -> None:
        self.recording.append_batch(context, self.calls[context], batch, phase, duration_ns)
        self.calls[context] += 1

    def target(self, batch: list[tuple[int, int, int, bool]], phase: str, duration_ns: int) -> None:
        """A target batch, then (with a draft model) the draft context re-reading it, logits at its last token."""
        self.compute(TARGET, batch, phase, duration_ns)
        if self.draft_model:
            last = len(batch) - 1
            self.compute(DRAFT, [(t, p, s, i == last) for i, (t, p, s, _) in enumerate(batch)], "prompt", DRAFT_NS)

    def prompt(self, seq: int, tokens: list[int], at: int = 0) -> int:
        self.target([(t, at + i, seq, i == len(tokens) - 1) for i, t in enumerate(tokens)], "prompt", 2 * STEP_NS)
        return at + len(tokens)

    def speculate(self, seq: int, pos: int, drafted: int, accepted: int) -> int:
        """The draft context drafts `drafted` tokens (decoding the sampled one, then each draft but the
        last, alone), the target verifies them with the sampled token, and keeps `accepted`: where the
        sequence's next token goes."""
        return self.speculate_together({seq: pos}, drafted, {seq: accepted})[seq]

    def speculate_together(self, positions: dict[int, int], drafted: int, accepted: dict[int, int]) -> dict[int, int]:
        """Several slots drafting in the same calls (a token of each sequence per draft call), verified
        in one target batch; where each sequence's next token goes."""
        if self.draft_model:
            for i in range(drafted):
                batch = [(500 + i, pos + i, seq, True) for seq, pos in positions.items()]
                self.compute(DRAFT, batch, "decode", DRAFT_NS)
        batch = [(600 + i, pos + i, seq, True) for seq, pos in positions.items() for i in range(drafted + 1)]
        self.target(batch, "prompt", VERIFY_NS * len(positions))
        return {seq: pos + accepted[seq] + 1 for seq, pos in positions.items()}

    def plain(self, seq: int, pos: int) -> int:
        self.target([(700, pos, seq, True)], "decode", STEP_NS)
        return pos + 1


def write_server_run(path: Path, draft_model: bool = True) -> Path:
    """Two requests of sequence 0: the first verifying 4 drafts thrice (3, 0 then 4 accepted: the
    last at the request's end, so counted accepted), the second after a plain step, 2 drafts of which
    1 accepted, then one more plain step."""
    recording = SyntheticRecording(path, layers=1, seed=3)
    server = Server(recording, draft_model)
    server.compute(TARGET, [(1, 0, 0, False), (2, 1, 0, True)], "warmup", STEP_NS)
    pos = server.prompt(0, [10, 11, 12, 13, 14])
    for accepted in (3, 0, 4):
        pos = server.speculate(0, pos, drafted=4, accepted=accepted)
    pos = server.prompt(0, [20, 21, 22])
    pos = server.plain(0, pos)
    pos = server.speculate(0, pos, drafted=2, accepted=1)
    server.plain(0, pos)
    recording.close()
    return recording.run_dir


def write_two_slot_run(path: Path) -> Path:
    """Two slots (sequences 0 and 1) whose prompts came apart, then drafting and verifying together:
    3 drafts each, twice; sequence 0 keeping 2 then (at its end) 3, sequence 1 none then (at its end:
    counted accepted) 3."""
    recording = SyntheticRecording(path, layers=1, seed=4)
    server = Server(recording, draft_model=True)
    positions = {0: server.prompt(0, [10, 11, 12, 13, 14]), 1: server.prompt(1, [20, 21, 22])}
    positions = server.speculate_together(positions, drafted=3, accepted={0: 2, 1: 0})
    server.speculate_together(positions, drafted=3, accepted={0: 3, 1: 3})
    recording.close()
    return recording.run_dir
