"""Plugins: what other installed packages add, found by their entry points, for the registries
that own each kind (export/registry.py: exporters; analysis/findings.py: findings).

A package offers them in its pyproject.toml:

    [project.entry-points."ggml_viz.exporters"]
    arrow = "my_package.export:ArrowExporter"      # an Exporter subclass (made with no arguments) or instance

    [project.entry-points."ggml_viz.findings"]
    softmax-share = "my_package.findings:SoftmaxShare"   # a Finding subclass or instance

The built-in exporters and findings have the same interfaces (ggml_viz.export.Exporter,
ggml_viz.analysis.findings.Finding) and come first. Each group is loaded once per process,
when a command first needs it. A plugin that cannot be loaded (an import error, the wrong
type, a name a built-in or an earlier plugin holds) is left out, and so is one that raises
when called: each is named in one warning on stderr, and the command goes on without it.

This module imports only the standard library and knows no kind of plugin: the registries,
above it, call load_group with their own group and base class.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Generic, TypeVar

BUILT_IN = "built-in"  # where a built-in exporter or finding comes from, as `ggml-viz plugins` says

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class PluginOrigin:
    """Where a plugin comes from: its entry point, and the package that declares it."""

    group: str
    entry_point: str
    distribution: str  # "name version", or "an unknown package" when importlib cannot tell

    def __str__(self) -> str:
        return f"plugin {self.entry_point!r} ({self.group}, from {self.distribution})"


@dataclass(frozen=True)
class LoadedPlugin(Generic[T]):
    value: T
    origin: PluginOrigin


@dataclass(frozen=True)
class FailedPlugin:
    origin: PluginOrigin
    error: str


@dataclass(frozen=True)
class PluginGroup(Generic[T]):
    """One entry-point group, loaded: what it adds, and what was left out and why."""

    loaded: list[LoadedPlugin[T]]
    failed: list[FailedPlugin]

    def warn_failures(self) -> None:
        for failure in self.failed:
            warn_once(failure.origin, f"left out: {failure.error}")

    def origin_of(self, value: object) -> PluginOrigin | None:
        """The origin of a plugin's object; None for a built-in."""
        return next((plugin.origin for plugin in self.loaded if plugin.value is value), None)


def load_group(group: str, kind: type[T], taken: Collection[str]) -> PluginGroup[T]:
    """Each entry point of `group` as an instance of `kind` (a subclass is made with no
    arguments), in a stable order; a name in `taken` (or an earlier plugin's) is kept by its holder."""
    loaded: list[LoadedPlugin[T]] = []
    failed: list[FailedPlugin] = []
    names = set(taken)
    # sorted: the order of installed packages on disk must not decide which of two plugins wins a name
    for entry_point in sorted(entry_points(group=group), key=lambda ep: (ep.name, ep.value)):
        origin = PluginOrigin(group, entry_point.name, _distribution_of(entry_point))
        try:
            value = _instance_of(entry_point.load(), kind)
        except Exception as error:  # a plugin's import may raise anything; it must not stop the command
            failed.append(FailedPlugin(origin, describe_error(error)))
            continue
        name = getattr(value, "name", "")
        if not name:
            failed.append(FailedPlugin(origin, f"its {kind.__name__} has no name"))
        elif name in names:
            holder = "a built-in" if name in taken else "another plugin"
            failed.append(FailedPlugin(origin, f"the name {name!r} is {holder}'s, which is kept"))
        else:
            names.add(name)
            loaded.append(LoadedPlugin(value, origin))
    return PluginGroup(loaded, failed)


def _instance_of(loaded: Any, kind: type[T]) -> T:
    if isinstance(loaded, type) and issubclass(loaded, kind):
        return loaded()
    if isinstance(loaded, kind):
        return loaded
    raise TypeError(f"{loaded!r} is not a {kind.__module__}.{kind.__name__} subclass or instance")


def _distribution_of(entry_point: EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)  # set by entry_points() since Python 3.10
    if dist is None:
        return "an unknown package"
    return f"{dist.metadata['Name']} {dist.version}"


def describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


_warned: set[PluginOrigin] = set()


def warn_once(origin: PluginOrigin, what: str) -> None:
    """One line on stderr naming the plugin; a plugin is warned about once per process."""
    if origin in _warned:
        return
    _warned.add(origin)
    print(f"ggml-viz: warning: {origin} {what}", file=sys.stderr)


def call_plugin(origin: PluginOrigin | None, call: Callable[[], R], fallback: R) -> R:
    """call(); a plugin's exception becomes a warning and `fallback` (a built-in's propagates: a bug of ours)."""
    if origin is None:
        return call()
    try:
        return call()
    except Exception as error:
        warn_once(origin, f"raised {describe_error(error)}; left out")
        return fallback
