"""Step roles: what each searched step is for a learner, decided from its measurements, and
role confirmation, the search stage's interleaved re-timing of the steps that decide them
(curation and the quality gates read the roles; every stage applies the one ``significance``
rule of the settings).

    steps = assign_roles(steps, SignificanceRule())     # copies with role, log_speedup, ...

A search's rows form a tree (rows share a ``trajectory_id``; ``step_index`` is the depth; a row's
``before_leir`` is its parent row's ``after_leir``). With "significantly faster" as defined by
``steptp.measure.significance.SignificanceRule``:

* ``improving``: the after-program is significantly faster than the before-program;
* ``preparatory``: not by itself, but the fastest program measured in the subtree under the step
  (its *best descendant*, reached through the step) is significantly faster than the step's
  before-program;
* ``regressing``: neither, and the after-program is significantly slower;
* ``neutral``: neither (including comparisons the rule calls noisy);
* ``failed``: did not build, verify, or finish in time, or has no timing (kept as negatives, with
  the reason in ``reason``).

A search times a step's before-program and after-program minutes apart; on a shared machine the
load drifts by tens of percent in that time. So the search stage re-times, interleaved, the
would-be SFT answers and the steps near the margin (:func:`confirm_roles`).

When a step carries an interleaved re-timing (``paired_before``/``paired_after``/``paired_best``,
written by :func:`confirm_roles` during the search), its role is decided on those: they were
timed side by side, so drift hits both programs alike.

Besides ``role``: ``log_speedup`` (ln before/after, the numbers the role was decided on),
``best_descendant_speedup`` (before / best descendant; an RL user's return) and ``role_detail``
(the verdicts, and for a preparatory step the later step that pays off).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable, Optional, Sequence

from ..measure.significance import SignificanceRule, interleaved
from ..records import FAILED_OUTCOMES, StepRecord, Timing, measured, parent_links, step_key

ROLES = ("improving", "preparatory", "neutral", "regressing", "failed")
SFT_ROLES = ("improving", "preparatory")
class Tree:
    """Parent/children links of a set of search rows (by trajectory and program text)."""

    def __init__(self, steps: Sequence[StepRecord]):
        self.steps = list(steps)
        self.keys = [step_key(s) for s in self.steps]
        self.children: dict[int, list[int]] = defaultdict(list)
        self.parent: dict[int, int] = parent_links(self.steps)
        for i, p in sorted(self.parent.items()):
            self.children[p].append(i)

    def best_descendant(self, i: int) -> int:
        """The measured row in the subtree of ``i`` (``i`` included) with the fastest
        after-program; ties go to the shallower, then earlier row."""
        best, stack, seen = i, [i], {i}
        while stack:
            j = stack.pop()
            for c in self.children.get(j, ()):
                if c in seen or not measured(self.steps[c]):
                    continue
                seen.add(c)
                stack.append(c)
                if self.steps[c].after.median_s < self.steps[best].after.median_s:
                    best = c
        return best

    def path(self, i: int, d: int) -> list[int]:
        """Rows from ``i`` down to its descendant ``d`` (both included)."""
        out = [d]
        while out[-1] != i and out[-1] in self.parent:
            out.append(self.parent[out[-1]])
        return out[::-1]


def _pair(s: StepRecord, best: StepRecord) -> tuple[Timing, Timing, Timing]:
    """(before, after, best) timings to decide on: the interleaved ones when present."""
    if s.paired_before is not None and s.paired_after is not None:
        return s.paired_before, s.paired_after, s.paired_best or (
            s.paired_after if best is s else best.after)
    return s.before, s.after, best.after


def _role(s: StepRecord, best: StepRecord, rule: SignificanceRule) -> tuple[str, str]:
    b, a, d = _pair(s, best)
    own = rule.compare(b, a)
    if own == "faster":
        return "improving", f"after {own} than before"
    via = rule.compare(b, d) if best is not s else own
    if best is not s and via == "faster":
        return "preparatory", (f"after {own}; best descendant {via} ({b.median_s / d.median_s:.3g}x, "
                               f"{best.strategy} at depth {best.step_index})")
    if own == "slower":
        return "regressing", f"after {own} than before"
    return "neutral", f"after {own}" + (f"; best descendant {via}" if best is not s else "")


def assign_roles(steps: Sequence[StepRecord], rule: SignificanceRule | None = None) -> list[StepRecord]:
    """Copies of ``steps`` (same order) with ``role``, ``log_speedup``,
    ``best_descendant_speedup`` and ``role_detail`` set from the measurements."""
    rule = rule or SignificanceRule()
    tree = Tree(steps)
    out = []
    for i, s in enumerate(tree.steps):
        if not measured(s):
            why = f"outcome {s.outcome}" if s.outcome in FAILED_OUTCOMES or not s.verified else "no timing"
            out.append(s.model_copy(update={"role": "failed", "log_speedup": None,
                                            "best_descendant_speedup": None, "role_detail": why}))
            continue
        best = tree.steps[tree.best_descendant(i)]
        role, detail = _role(s, best, rule)
        b, a, d = _pair(s, best)
        out.append(s.model_copy(update={
            "role": role, "log_speedup": math.log(b.median_s / a.median_s),
            "best_descendant_speedup": b.median_s / d.median_s, "role_detail": detail}))
    return out


def near_threshold(steps: Sequence[StepRecord], rule: SignificanceRule | None = None) -> list[tuple[int, int]]:
    """(row, best descendant row) of every measured step whose role-deciding comparison lies near
    the margin (``SignificanceRule.near``), closest first."""
    rule = rule or SignificanceRule()
    tree = Tree(steps)
    out = []
    for i, s in enumerate(tree.steps):
        if not measured(s):
            continue
        d = tree.best_descendant(i)
        best = tree.steps[d]
        pairs = [(s.before, s.after)] + ([(s.before, best.after)] if d != i else [])
        closeness = [abs(math.log(b.median_s / a.median_s)) / max(1e-9, math.log1p(rule.margin(b, a)))
                     for b, a in pairs if rule.near(b, a)]
        if closeness:
            out.append((min(abs(math.log(c)) if c > 0 else math.inf for c in closeness), i, d))
    out.sort(key=lambda x: (x[0], tree.keys[x[1]]))
    return [(i, d) for _, i, d in out]


def search_best_s(steps: Sequence[StepRecord]) -> list[Optional[float]]:
    """Per row, the search's own (not re-timed) median of the fastest program measured through
    it. Siblings share their before-program and were timed in one search, so this ranks them
    alike; a re-timed sibling is not favoured or penalized for having been re-timed."""
    tree = Tree(steps)
    return [steps[tree.best_descendant(i)].after.median_s if measured(s) else None
            for i, s in enumerate(tree.steps)]


def to_confirm(steps: Sequence[StepRecord], rule: SignificanceRule | None = None,
               path: Sequence[str] = ()) -> list[tuple[int, int]]:
    """(row, best descendant row) of the steps whose role most needs an interleaved re-timing,
    in order: first the steps on ``path`` (after-program texts of the final program's path,
    when the search settled it by re-timing side by side) whose own timing did not make them
    an SFT answer: re-timing the finalists side by side found that path faster than the
    search's timings said; then the would-be SFT answers (per prompt, the improving or
    preparatory child with the largest gain; their label is what a model learns, and their
    before and after were timed minutes apart), largest gain first; then the steps near the
    margin."""
    rule = rule or SignificanceRule()
    steps = list(steps)
    tree = Tree(steps)
    first = assign_roles(steps, rule)
    on_path = set(path)
    lead = [(i, tree.best_descendant(i)) for i, s in enumerate(first)
            if s.after_leir in on_path and measured(s) and s.role not in SFT_ROLES]
    best_s = search_best_s(steps)
    best_of: dict[str, int] = {}
    for i, s in enumerate(first):
        if s.role in SFT_ROLES:
            j = best_of.get(s.before_leir)
            if j is None or (best_s[i], tree.keys[i]) < (best_s[j], tree.keys[j]):
                best_of[s.before_leir] = i
    out = lead + [(i, tree.best_descendant(i)) for i in sorted(
        best_of.values(), key=lambda i: (-(first[i].best_descendant_speedup or 0), tree.keys[i]))]
    seen = {i for i, _ in out}
    out += [(i, d) for i, d in near_threshold(steps, rule) if i not in seen]
    return out


def confirm_roles(steps: Sequence[StepRecord], time_fn: Callable[[str], Optional[Timing]],
                  rule: SignificanceRule | None = None, rounds: int = 3,
                  max_pairs: int = 6, interleave: Callable = interleaved,
                  path: Sequence[str] = ()) -> tuple[list[StepRecord], int]:
    """Re-time, interleaved, the programs that decide the roles that matter most
    (:func:`to_confirm`, at most ``max_pairs`` steps): before, after and best descendant,
    ``rounds`` times round-robin with ``time_fn`` (uncached) through ``interleave``
    (:func:`~steptp.measure.significance.interleaved`, or a :func:`remembered` one). Returns the steps with ``paired_*``
    set and roles assigned, and the number of steps re-timed. ``path``: see :func:`to_confirm`."""
    rule = rule or SignificanceRule()
    steps = list(steps)
    todo = to_confirm(steps, rule, path)[:max(0, max_pairs)]
    for i, d in todo:
        s = steps[i]
        progs = [s.before_leir, s.after_leir] + ([steps[d].after_leir] if d != i else [])
        ts = interleave(time_fn, progs, rounds)
        if any(t is None for t in ts):
            continue
        steps[i] = s.model_copy(update={"paired_before": ts[0], "paired_after": ts[1],
                                        "paired_best": ts[2] if d != i else None})
    return assign_roles(steps, rule), len(todo)


def confirm_trajectory(traj, time_fn: Callable[[str], Optional[Timing]], baseline_leir: str,
                       rounds: int = 3, interleave: Callable = interleaved):
    """The trajectory with its first and final programs re-timed interleaved
    (``remeasured_speedup``, ``remeasured_spread``); unchanged when either fails."""
    if traj is None or traj.final_leir == baseline_leir or traj.remeasured_speedup is not None:
        return traj   # (a settled search re-timed them already, with its finalists)
    tb, tf = interleave(time_fn, [baseline_leir, traj.final_leir], rounds)
    if tb is None or tf is None:
        return traj
    return traj.model_copy(update={"remeasured_speedup": tb.median_s / tf.median_s,
                                   "remeasured_spread": max(tb.spread, tf.spread)})


def role_counts(steps: Sequence[StepRecord]) -> dict[str, int]:
    c = {r: 0 for r in ROLES}
    for s in steps:
        c[s.role or "unassigned"] = c.get(s.role or "unassigned", 0) + 1
    return c


__all__ = ["ROLES", "SFT_ROLES", "Tree", "assign_roles", "confirm_roles", "confirm_trajectory",
           "near_threshold", "to_confirm", "search_best_s", "measured",
           "role_counts"]
