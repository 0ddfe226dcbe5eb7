"""A worker's clock against the head's: the offset every message both sides recorded bounds
(the package's docstring says how)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass
class ClockOffset:
    """A worker's clock against the head's: worker time = head time + offset_ns."""

    offset_ns: int
    uncertainty_ns: int  # the offset lies within offset_ns ± uncertainty_ns
    lower_ns: int  # the bounds the messages gave
    upper_ns: int
    messages: int  # messages both sides recorded, each one bound
    consistent: bool  # the bounds did not cross (else: the clocks drifted, or a side is not the run it seems)
    method: str = (
        "message bounds: each request reached the worker after the head sent it, "
        "each response the head after the worker sent it"
    )


def clock_offset(pairs: pd.DataFrame) -> ClockOffset | None:
    """The worker's clock offset, bounded by every message both sides recorded (`pairs`:
    connections.paired_messages)."""
    if pairs.empty:
        return None
    difference = (pairs["w_start_ns"] - pairs["start_ns"]).to_numpy(np.int64)
    response = pairs["is_response"].to_numpy(bool)
    upper = int(difference[~response].min()) if (~response).any() else None
    lower = int(difference[response].max()) if response.any() else None
    if upper is None or lower is None:  # one direction only: no interval, the one bound
        bound = upper if upper is not None else lower
        assert bound is not None
        return ClockOffset(bound, abs(bound), bound, bound, len(pairs), consistent=True)
    consistent = lower <= upper
    middle = (lower + upper) // 2
    return ClockOffset(middle, abs(upper - lower) // 2, lower, upper, len(pairs), consistent)
