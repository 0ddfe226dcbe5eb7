"""Checking an answer of the viewer's API against its declaration in ggml_viz.ui.payloads (or an
analysis result against the type its producer declares): every TypedDict in it, however deep,
must hold its required keys and no key it does not declare."""

from __future__ import annotations

import types
import typing
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict


def shape_problems(value: Any, declared: Any, where: str = "$") -> list[str]:
    """What in `value` differs from the type `declared`: missing and undeclared keys of each
    TypedDict, and lists or objects where the declaration has the other."""
    if declared is Any or value is None:
        return []
    if is_typeddict(declared):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not an object ({declared.__name__})"]
        problems = [
            f"{where}: no {key!r} ({declared.__name__})" for key in sorted(declared.__required_keys__ - set(value))
        ]
        problems += [
            f"{where}: {key!r} undeclared ({declared.__name__})" for key in sorted(set(value) - _keys(declared))
        ]
        hints = get_type_hints(declared)
        for key in sorted(set(value) & set(hints)):
            problems += shape_problems(value[key], hints[key], f"{where}.{key}")
        return problems
    origin, args = get_origin(declared), get_args(declared)
    if origin in (typing.Union, types.UnionType):
        containers = [arg for arg in args if is_typeddict(arg) or get_origin(arg) in (list, dict)]
        return shape_problems(value, containers[0], where) if len(containers) == 1 else []
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__}, not a list"]
        return [problem for i, item in enumerate(value) for problem in shape_problems(item, args[0], f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not an object"]
        return [problem for key, item in value.items() for problem in shape_problems(item, args[1], f"{where}.{key}")]
    return []


def _keys(declared: Any) -> frozenset[str]:
    return declared.__required_keys__ | declared.__optional_keys__


def declared_types(payload: Any) -> set[str]:
    """The names of every TypedDict reachable from `payload` (to see what a check covered)."""
    return set(reachable_typeddicts(payload))


def reachable_typeddicts(payload: Any) -> dict[str, Any]:
    """Every TypedDict reachable from `payload` through its fields, by name, wherever it is
    declared (the summary's records are declared in ggml_viz.analysis, where they are made)."""
    found: dict[str, Any] = {}
    pending = [payload]
    while pending:
        current = pending.pop()
        if is_typeddict(current):
            if current.__name__ in found:
                continue
            found[current.__name__] = current
            pending.extend(get_type_hints(current).values())
        else:
            pending.extend(get_args(current))
    return found
