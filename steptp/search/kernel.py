"""Search one kernel with a policy: the entry point that puts a :class:`~.run.Search` and a
:class:`~.policies.Policy` together (``run`` knows no policy, ``policies`` knows ``run``; this
module sits above both, so neither imports the other back).

    steps, traj = search_kernel(program, kernel_id, "beam", Budget(64, 120), seed=0,
                                evaluator=default_evaluator())
"""

from __future__ import annotations

from typing import Any

from ..leir import ast as A
from .evaluator import Evaluator, default_evaluator
from .policies import make_policy
from .ranker import Ranker
from .run import Budget, Search, kernel_id_of


def settler(evaluator: Evaluator, rounds: int = 3, interleave=None):
    """``search_kernel``'s ``settle``: ``interleave`` (default
    :func:`~steptp.measure.significance.interleaved`; the pipeline passes a ``remembered`` one,
    so a rebuild on the same cache settles alike) over the evaluator's uncached timer."""
    from ..measure.significance import interleaved

    inter = interleave or interleaved
    return lambda programs: inter(evaluator.time_fresh, list(programs), rounds)


def search_kernel(program: A.Program | str, kernel_id: str | None = None, policy: Any = "beam",
                  budget: Budget | int = Budget(), seed: int = 0,
                  evaluator: Evaluator | None = None, *, ranker: Ranker | None = None,
                  target: str = "cpu", strategies=None, max_actions: int | None = None,
                  on_progress=None, return_result: bool = False, settle=None):
    """Search one kernel with ``policy`` (a name or a ``Policy``) under ``budget``.

    ``settle``: program texts to their timings re-timed side by side (e.g.
    ``settler(evaluator)``); when given, the final program is chosen among the fastest
    states by that re-timing (``Search.settle``), not by each state's own timing.

    Returns ``(steps, trajectory)`` (``trajectory`` is None when the baseline could not be
    measured), or the full :class:`SearchResult` (with the best-so-far curve) when
    ``return_result``.
    """
    if isinstance(program, str):
        from ..leir import parse

        program = parse(program)
    if isinstance(budget, int):
        budget = Budget(budget)
    pol = make_policy(policy) if isinstance(policy, str) else policy
    own = evaluator is None
    ev = evaluator or default_evaluator()
    try:
        kid = kernel_id or kernel_id_of(program)
        s = Search(program, kid, pol.name, budget, seed, ev, ranker=ranker, target=target,
                   strategies=strategies, max_actions=max_actions, on_progress=on_progress)
        if s.root is not None:
            pol.run(s)
            if settle is not None:
                s.settle(settle)
        res = s.result()
    finally:
        if own:
            ev.close()
    return res if return_result else (res.steps, res.trajectory)


__all__ = ["search_kernel", "settler"]
