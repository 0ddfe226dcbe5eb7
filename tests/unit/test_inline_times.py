"""How abort-callback ticks become node intervals (inline_times.plan_ticks), on walks
made up here: splits, nodes without work, fused pairs, and ticks that do not fit."""

from __future__ import annotations

import numpy as np

from ggml_viz.capture.core.inline_times import NodeWalk, plan_ticks


def walk(works: list[bool], fused: list[bool] | None = None) -> NodeWalk:
    return NodeWalk(works=np.array(works), fused_second=np.array(fused or [False] * len(works)))


def intervals(node_walk: NodeWalk, ask_ns: list[int], tick_ns: list[int], tick_asked: list[int]):
    plan = plan_ticks(node_walk, np.array(tick_asked, dtype=np.uint32))
    if plan is None:
        return None
    times = np.concatenate((np.array(ask_ns)[plan.split_last_asked], tick_ns))
    return list(zip(times[plan.start_from].tolist(), times[plan.end_from].tolist(), strict=True))


def test_one_split_every_node_ticks():
    # asked at 1, 2, 3; computing starts after the last ask (3); nodes end at 10, 15, 30
    assert intervals(walk([True, True, True]), [1, 2, 3], [10, 15, 30], [3, 3, 3]) == [(3, 10), (10, 15), (15, 30)]


def test_views_sit_where_the_work_before_them_ended():
    # node 0 is a view at the start of the split, node 2 a view between two computed nodes
    got = intervals(walk([False, True, False, True]), [1, 2, 3, 4], [10, 20], [4, 4])
    assert got == [(4, 4), (4, 10), (10, 10), (10, 20)]


def test_a_fused_pair_ticks_once_and_the_first_node_carries_the_time():
    got = intervals(walk([True, True, True], [False, True, False]), [1, 2, 3], [10, 30], [3, 3])
    assert got == [(3, 10), (10, 10), (10, 30)]


def test_unfused_pairs_are_recognized_by_their_tick_count():
    # the walk allows fusing nodes 0 and 1, but the backend ticked for each: no fusion
    got = intervals(walk([True, True, True], [False, True, False]), [1, 2, 3], [10, 20, 30], [3, 3, 3])
    assert got == [(3, 10), (10, 20), (20, 30)]


def test_each_split_starts_when_the_scheduler_finished_asking_about_it():
    # split A = nodes 0-1 (asked at 1, 2), split B = nodes 2-3 (asked at 50, 51)
    got = intervals(walk([True, True, False, True]), [1, 2, 50, 51], [10, 20, 60], [2, 2, 4])
    assert got == [(2, 10), (10, 20), (51, 51), (51, 60)]


def test_ticks_that_do_not_fit_the_walk_give_no_times():
    assert plan_ticks(walk([True, True]), np.array([2], dtype=np.uint32)) is None  # one tick short
    assert plan_ticks(walk([True, True]), np.array([2, 2, 2], dtype=np.uint32)) is None  # one too many
    # two ticks, but both taken before the second node was even asked about
    assert plan_ticks(walk([True, True]), np.array([1, 1], dtype=np.uint32)) is None
    assert plan_ticks(walk([True]), np.array([], dtype=np.uint32)) is None
    assert plan_ticks(walk([True]), np.array([5], dtype=np.uint32)) is None  # more nodes asked than exist
