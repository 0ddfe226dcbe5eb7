"""The run's count of graphs and node events, and the bound on them (--max-events, --policy).

keep-first: once a graph would pass the bound, it and every later graph are dropped as they come.
keep-last: every graph is written, and the run keeps, when it closes, the last whole graphs within
the bound. Either way what is dropped is counted, and the manifest says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EventBound:
    max_events: int | None = None  # None: no bound
    policy: str = "keep-first"
    graphs: int = 0  # written
    events: int = 0  # node events written
    dropped_graphs: int = 0
    dropped_events: int = 0
    reached: bool = False  # keep-first: every graph from now on is dropped
    graph_sizes: list[int] = field(default_factory=list)  # nodes of each written graph, by graph id

    def drops(self, n_nodes: int, unwritten_events: int = 0) -> bool:
        """keep-first: whether a graph of `n_nodes` is dropped (and counted), with the events of
        graphs kept but not yet written; from the first graph dropped on, every one is."""
        over = self.max_events is not None and self.events + unwritten_events + n_nodes > self.max_events
        if self.policy != "keep-first" or not (self.reached or over):
            return False
        self.reached = True
        self.count_dropped(n_nodes)
        return True

    def count_written(self, graph_sizes: list[int]) -> None:
        self.graphs += len(graph_sizes)
        self.events += sum(graph_sizes)
        self.graph_sizes.extend(graph_sizes)

    def count_dropped(self, n_nodes: int) -> None:
        self.dropped_graphs += 1
        self.dropped_events += n_nodes

    def kept_graphs(self) -> set[int] | None:
        """keep-last: the ids of the last whole graphs within the bound, the others counted as
        dropped (None: every graph is kept)."""
        if self.max_events is None or self.policy != "keep-last" or self.events <= self.max_events:
            return None
        kept: set[int] = set()
        total = 0
        for graph_id in range(len(self.graph_sizes) - 1, -1, -1):
            total += self.graph_sizes[graph_id]
            if total > self.max_events:
                break
            kept.add(graph_id)
        self.dropped_graphs += len(self.graph_sizes) - len(kept)
        self.dropped_events += sum(self.graph_sizes) - sum(self.graph_sizes[g] for g in kept)
        return kept
