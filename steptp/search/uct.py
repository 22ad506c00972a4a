"""The UCT core shared by the two tree searches: the trajectory search's ``MCTS`` policy
(``steptp.search.policies``: a tree over registry actions, progressive widening, mean and best
reward) and ``steptp eval``'s ``mcts`` mode (``steptp.eval.mcts``: a tree over the states a
proposer's verified steps reach, best-reward backup). Both value a state by its log speedup over
the unscheduled kernel and explore by the same bonus; what differs (which children exist, how
values back up, how ties break) stays with each."""

from __future__ import annotations

import math


def exploration(c: float, parent_visits: int, child_visits: int) -> float:
    """UCB1's bonus ``c * sqrt(ln N / n)``; a child never visited is infinitely worth a look.
    A parent seen once (``ln 1 = 0``) gives no bonus: its children are ranked by value alone."""
    if child_visits <= 0:
        return math.inf
    return c * math.sqrt(math.log(max(parent_visits, 1)) / child_visits)


def log_speedup(baseline_s: float, seconds: float) -> float:
    """A state's reward: the natural log of its speedup over the unscheduled kernel."""
    return math.log(baseline_s / seconds)


__all__ = ["exploration", "log_speedup"]
