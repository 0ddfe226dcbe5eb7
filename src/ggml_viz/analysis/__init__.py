"""Analysis: pure functions over a run's tables (breakdowns, memory, FLOPs, components, findings,
the summary, comparison, the graph view, numerics, the join of a distributed run); reads runs
through runformat, and renders nothing."""
