"""A table's rows as plain records: the form a result that lists a table's rows gives them in
(the summary's breakdowns, the roofline's, the GPU's kernels, the experts' balance), as JSON and
rich take them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import pandas as pd

Row = TypeVar("Row", bound=Mapping[str, Any])


def plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds; anything else as it is."""
    if hasattr(value, "item"):
        return value.item()
    return value


def records(table: pd.DataFrame, value: Callable[[Any], Any] = plain) -> list[dict[str, Any]]:
    """A table's rows as dicts of plain Python values (`value` makes each one plain)."""
    return [{k: value(v) for k, v in row.items()} for row in table.to_dict(orient="records")]


def records_as(table: pd.DataFrame, row: type[Row], value: Callable[[Any], Any] = plain) -> list[Row]:
    """A table's rows as the TypedDict `row` that their producer declares, whose keys are the
    table's columns (tests/unit/test_result_types.py holds each result to its type on recorded
    runs, so the two cannot drift apart)."""
    del row  # for mypy: the rows are the table's as they are
    return cast(list[Row], records(table, value))
