"""The state of one kernel's search: states are LEIR programs identified by their canonical
text (a renaming is the same state), actions are catalog rewrites. A policy
(``steptp.search.policies``) drives a :class:`Search`; ``steptp.search.kernel.search_kernel``
puts the two together (this module imports no policy).

Every child a policy chooses is verified against the ORIGINAL kernel (with the loosest
exactness class along its path), then timed. Each evaluation is one ``StepRecord`` row, kept
whatever its outcome (``improved``, ``not_improved``, ``failed_verify``, ``failed_build``,
``timeout``, ``crashed``): failed and non-improving candidates are useful negatives.

Rows of one search share a ``trajectory_id`` (a hash of kernel id, policy and seed);
``step_index`` is the step's depth (0 = a rewrite of the unscheduled kernel). The rows form a
tree: a row's ``before_leir`` is its parent row's ``after_leir`` (each state is evaluated once,
so after texts of verified rows are unique within a search). The texts keep the names the
strategies gave (the root is canonically renamed; a split adds ``i_o``/``i_i``, a reorder moves
loops with their names), so a row's site and reasoning name the loops of its own programs.
``before`` of a row is the parent's measured timing (the same object), so
``step_speedup = before / after``, ``cumulative_speedup = baseline / after``, and along any path
the product of step speedups equals the cumulative speedup.

Budget: ``measurements`` (timings of candidates; the baseline is not counted; a candidate that
fails verification is not timed, so it costs wall time but no measurement) and ``seconds`` of
wall time per kernel.

Early stop: an evaluator that can (``early_stop``) ends a candidate's timing after its first
repeats when even the fastest of them is slower than its PARENT's time beyond the margin
(``SignificanceRule.clearly_slower``); its row keeps that short timing (``repeats`` says how
many). The parent is the row's ``before``, so a stopped row is one whose ``not_improved`` the
rule already decided (the median of the full repeats could not be below the fastest of the
first ones), and it is clearly slower than the best state too (the best is never slower than
the parent). A child that beats its parent but not the best is timed in full: its
``improved`` rests on every repeat. A policy that will expand a child at once (``may_stop``
False) has it timed in full. Such a timing is only ever an ``after``: before a policy expands
that state, it is timed again in full (calibrated from its own short timing) and its row
updated, so no ``before`` (and no "faster" label of a child) rests on a stopped timing, and a
wrong stop can only cost the state its own "improved".
"""

from __future__ import annotations

import hashlib
import itertools
import math
import time as _time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from ..leir import ast as A
from ..leir.canon import canonical_hash, canonical_text, canonicalize
from ..leir.printer import format_program
from ..records import StepRecord, Timing, TrajectoryRecord
from ..exactness import worse
from ..strategies import Candidate, get
from ..measure.significance import SignificanceRule
from ..analysis.cost_model import potential, predict
from .ranker import Ranker
from .evaluator import Evaluator
from .space import actions

#: a step's ``improved`` outcome: significantly faster than its parent, by the one rule (the
#: release's roles re-decide with the params' rule and any interleaved re-timing)
IMPROVE_RULE = SignificanceRule()


@dataclass(frozen=True)
class Budget:
    measurements: int = 64
    seconds: float = 120.0


#: The finishing moves a lookahead tries after a candidate (``Search.lookahead``): the
#: moves of MetaSchedule's parallel-vectorize-unroll rule and the loop order beneath them.
LOOKAHEAD_STRATEGIES = ("loop_vectorization", "loop_parallelization", "loop_unrolling",
                        "loop_reorder")


#: How much of the cost model's predicted finishing gain a beam state is credited with: a
#: register tile measures slow until it is vectorized, unrolled and parallelized, and must
#: survive in the beam until then.
KEY_POTENTIAL_WEIGHT = 1.0


#: How many of the fastest states ``Search.settle`` re-times side by side (plus one of the
#: other kind, parallel or serial, when none of them is)
SETTLE_FINALISTS = 3


def has_loop_kind(program: A.Program, kind: str) -> bool:
    return any(isinstance(n, A.Loop) and n.kind == kind for n in A.walk(program))


def _is_parallel(program: A.Program) -> bool:
    return has_loop_kind(program, "parallel")


def trajectory_id(kernel_id: str, policy: str, seed: int) -> str:
    return hashlib.sha256(f"{kernel_id}|{policy}|{seed}".encode()).hexdigest()[:16]


@dataclass(eq=False)
class Node:
    """A verified, measured state."""

    program: A.Program
    text: str
    timing: Timing
    parent: Optional["Node"] = None
    step: Optional[StepRecord] = None
    depth: int = 0
    exactness: str = "exact"
    # search bookkeeping
    children: list["Node"] = field(default_factory=list)
    visits: int = 0
    value: float = 0.0
    best_reward: float = -math.inf
    ranked: Optional[list[Candidate]] = None
    next_untried: int = 0
    failures: int = 0
    #: lookahead scores of re-ranked actions (text -> score), set once by a policy
    lookahead: Optional[dict[str, float]] = None
    #: the timing stopped early (clearly slower than the best): re-timed in full before the
    #: state is expanded (``Search.evaluate``)
    partial: bool = False
    #: the program as the trajectory writes it, with the strategies' own names (a split's
    #: ``i_o``/``i_i``, a reorder keeps each loop's name): what the rows record and what their
    #: sites and reasoning refer to. ``text`` (canonically renamed) is the state's identity for
    #: dedup, verification and the caches, which a renaming never changes.
    leir: str = ""
    #: ``canonical_hash`` of the program, recorded on the rows (curation compares programs by it
    #: instead of parsing every row's text again)
    hash: str = ""

    def __post_init__(self) -> None:
        if not self.leir:
            self.leir = format_program(self.program)
        if not self.hash:
            self.hash = canonical_hash(self.program)

    @property
    def seconds(self) -> float:
        return self.timing.median_s

    def path(self) -> list["Node"]:
        out, n = [], self
        while n is not None:
            out.append(n)
            n = n.parent
        return out[::-1]

    @property
    def key(self) -> float:
        """Beam key: log measured time, adjusted by what the cost model thinks the finishing
        moves (vectorize / parallelize) would still gain here."""
        try:
            pred = predict(self.program)
            gain = math.log(potential(self.program, predicted=pred)) - math.log(pred)
        except Exception:  # noqa: BLE001
            gain = 0.0
        return math.log(self.seconds) + KEY_POTENTIAL_WEIGHT * gain


@dataclass
class SearchResult:
    steps: list[StepRecord]
    trajectory: Optional[TrajectoryRecord]
    curve: list[dict[str, float]]
    baseline: Optional[Timing]
    best: Optional[Node]
    measurements: int
    verifications: int
    wall_s: float
    error: str = ""
    #: stopped-early states timed again in full before they were expanded
    retimed: int = 0
    #: the finalists re-timed interleaved at the end (``Search.settle``): text, the search's
    #: median, the re-timed median; empty when the search was not settled
    settled: list[tuple[str, float, float]] = field(default_factory=list)

    def fractions(self, budget: int) -> dict[str, float]:
        """Best speedup reached within 25/50/100% of the budget, as a fraction of the final
        best speedup."""
        if not self.curve or self.baseline is None or self.best is None:
            return {"25%": float("nan"), "50%": float("nan"), "100%": float("nan")}
        final = self.baseline.median_s / self.best.seconds
        out = {}
        for frac in (0.25, 0.5, 1.0):
            lim = frac * budget
            best = self.baseline.median_s
            for pt in self.curve:
                if pt["measurements"] <= lim:
                    best = min(best, pt["best_s"])
            out[f"{int(frac * 100)}%"] = (self.baseline.median_s / best) / final
        return out


class Search:
    """The context a policy drives: ranked untried actions per node, and ``evaluate`` (verify,
    time, record a row, count the budget)."""

    def __init__(self, program: A.Program, kernel_id: str, policy: str, budget: Budget, seed: int,
                 evaluator: Evaluator, ranker: Ranker | None = None, target: str = "cpu",
                 strategies=None, max_actions: int | None = None,
                 on_progress: Callable[["Search"], None] | None = None):
        self.kernel_id = kernel_id
        self.policy = policy
        self.budget = budget
        self.seed = seed
        self.evaluator = evaluator
        self.ranker = ranker if ranker is not None else Ranker.for_evaluator(evaluator, seed=seed)
        self.target = target
        self.strategies = strategies
        self.max_actions = max_actions
        self.on_progress = on_progress
        self.trajectory_id = trajectory_id(kernel_id, policy, seed)
        self.steps: list[StepRecord] = []
        self.curve: list[dict[str, float]] = []
        self.measurements = 0
        self.verifications = 0
        self.t0 = _time.perf_counter()
        self.seen: dict[str, Optional[Node]] = {}
        # lookahead: text -> finishing follow-ups; ``lookahead_expansions`` counts them (each
        # enumerates a state's finishing moves: bounded by the policy, never by the clock)
        self._follow: dict[str, list[A.Program]] = {}
        self.lookahead_expansions = 0
        prog, _ = canonicalize(program)
        self.original_text = canonical_text(prog)
        self.root: Optional[Node] = None
        self.best: Optional[Node] = None
        self.error = ""
        self._fp = ""
        self._early = bool(getattr(evaluator, "early_stop", False))
        self._hints = bool(getattr(evaluator, "hints", False))
        self.retimed = 0   # stopped-early states timed again in full before their expansion
        self.settled: list[tuple[str, float, float]] = []
        #: measurements a policy keeps back for its last moves: ``done`` comes that many early
        self.reserve = 0
        self._settled_root: Optional[Timing] = None   # the last ``settle``'s re-timings
        self._settled_final: Optional[Timing] = None
        self._plan: list[tuple[Node, Candidate]] = []   # the policy's next evaluations (plan)
        # a plan is in force: once it is used up, nothing is guessed (a guess from the last
        # state's ranking was mostly wasted: the next level's states differ)
        self._planning = False
        self._sent: set[str] = set()   # texts an evaluator took to verify ahead (it says which)
        tm = evaluator.time(self.original_text)
        if tm.timing is None:
            self.error = f"baseline could not be measured: {tm.outcome}: {tm.reason}"
            return
        self.root = Node(prog, self.original_text, tm.timing)
        self.best = self.root
        self.seen[self.original_text] = self.root
        self.ranker.observe(prog, tm.timing.median_s)
        try:
            self._fp = evaluator.fingerprint
        except Exception:  # noqa: BLE001
            self._fp = ""

    # ------------------------------------------------------------------ budget
    @property
    def elapsed(self) -> float:
        return _time.perf_counter() - self.t0

    @property
    def done(self) -> bool:
        # a reserve keeps back its share of the wall budget too: a search that runs out of
        # time before measurements (softmax at default size) still has time for its last moves
        share = self.reserve / max(1, self.budget.measurements)
        return (self.root is None
                or self.measurements >= self.budget.measurements - self.reserve
                or self.elapsed >= self.budget.seconds * (1 - share))

    # ------------------------------------------------------------------ actions
    def ranked(self, node: Node) -> list[Candidate]:
        """The actions at ``node``, best predicted first (computed once per node)."""
        if node.ranked is None:
            cands = actions(node.program, self.target, self.seed, self.strategies)
            cands = [c for c in cands if c.text not in self.seen]
            order = self.ranker.order([c.program for c in cands])
            node.ranked = [cands[i] for i in order]
            if self.max_actions is not None:
                node.ranked = node.ranked[:self.max_actions]
            if not self._planning:
                # between a beam's levels: verify this state's best while the next are ranked
                self._prefetch(node)
        return node.ranked

    def lookahead(self, cands: list[Candidate], depth: int = 2) -> list[float]:
        """The cost model's best score (lower is better) reachable from each candidate by up to
        ``depth - 1`` finishing moves (``LOOKAHEAD_STRATEGIES``), the candidate's own score
        included: a register tile that only pays once vectorized and unrolled is credited with
        what the model expects of that, and nothing is measured. Each step follows the best
        follow-up greedily; follow-ups are enumerated once per state (memoized by text)."""
        out = []
        for c in cands:
            best = self.ranker.scores([c.program])[0]
            prog, text = c.program, c.text
            for _ in range(max(0, depth - 1)):
                if text not in self._follow:
                    self.lookahead_expansions += 1
                    follow = actions(prog, self.target, self.seed, LOOKAHEAD_STRATEGIES)
                    self._follow[text] = [(f.program, f.text) for f in follow]
                follow = self._follow[text]
                if not follow:
                    break
                sc = self.ranker.scores([f[0] for f in follow])
                i = min(range(len(sc)), key=lambda k: (sc[k], k))
                if sc[i] >= best:
                    break
                best = sc[i]
                prog, text = follow[i]
            out.append(best)
        return out

    def untried(self, node: Node) -> list[Candidate]:
        return [c for c in self.ranked(node)[node.next_untried:] if c.text not in self.seen]

    def pop(self, node: Node) -> Optional[Candidate]:
        """The next untried action of ``node`` in rank order (None when exhausted)."""
        r = self.ranked(node)
        while node.next_untried < len(r):
            c = r[node.next_untried]
            node.next_untried += 1
            if c.text not in self.seen:
                return c
        return None

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, node: Node, cand: Candidate, may_stop: bool = True) -> Optional[Node]:
        """Verify ``cand`` (a child of ``node``) against the original, time it, record the row.
        Returns the new node when it verified and was measured, else None. ``may_stop``: its
        timing may stop early (an evaluator with ``early_stop``); False when the policy will
        expand the child whatever its time (a stop would only be timed again at once)."""
        if cand.text in self.seen:
            return self.seen[cand.text]
        if node.partial and not self._complete(node):
            return None  # the state could not be timed again in full: nothing rests on it
        self.seen[cand.text] = None
        s = get(cand.strategy)
        path_exact = worse(node.exactness, cand.exactness)
        self._prefetch(node, cand, path_exact)
        # a child keeps its parent's names (the canonical renaming would give a reordered loop
        # another loop's name, and the reasoning, which cites the site's names, would not match)
        child_prog = cand.program
        after_text = cand.text
        written = format_program(child_prog)
        after_hash = canonical_hash(child_prog)
        self.verifications += 1
        v = self.evaluator.verify(self.original_text, after_text, path_exact)
        base = dict(trajectory_id=self.trajectory_id, step_index=node.depth,
                    kernel_id=self.kernel_id, before_leir=node.leir, after_leir=written,
                    before_hash=node.hash, after_hash=after_hash,
                    strategy=cand.strategy, family=s.family, exactness=cand.exactness,
                    site=cand.site.to_json(), params=dict(cand.params), before=node.timing,
                    target=getattr(self.evaluator.target, "key", str(self.evaluator.target)),
                    fingerprint=self._fp, policy=self.policy,
                    max_abs_err=v.max_abs_err, max_rel_err=v.max_rel_err)
        if not v.ok:
            self.steps.append(StepRecord(**base, outcome=v.outcome if v.outcome != "ok"
                                         else "failed_verify", verified=False, reason=v.reason[:4000]))
            node.failures += 1
            self._prefetch(node)
            self._progress()
            return None
        self.measurements += 1
        # the parent, not the best: a stopped row's "not_improved" is then already decided
        kw = {"slower_than": node.timing} if self._early and may_stop else {}
        if self._hints:
            kw["hint_s"] = self._hint(node)
        tm = self.evaluator.time(after_text, **kw)
        # the next batch compiles and verifies while this thread records and ranks
        self._prefetch(node)
        if tm.timing is None:
            self.steps.append(StepRecord(**base, outcome=tm.outcome if tm.outcome in
                                         ("timeout", "crashed", "failed_build", "suspect_timing")
                                         else "crashed",
                                         verified=True, reason=tm.reason[:4000]))
            node.failures += 1
            self._record_curve()
            self._progress()
            return None
        after = tm.timing
        rec = StepRecord(**base, verified=True, **self._measured(node.timing, after))
        self.steps.append(rec)
        child = Node(child_prog, after_text, after, node, rec, node.depth + 1, path_exact,
                     partial=tm.stopped_early, leir=written, hash=after_hash)
        node.children.append(child)
        self.seen[after_text] = child
        if after.median_s < self.best.seconds:
            self.best = child
        self.ranker.observe(child_prog, after.median_s)
        self._record_curve()
        self._progress()
        return child

    @staticmethod
    def _hint(node: Node) -> float:
        """About how long one call of a child of ``node`` takes, for its timing's calibration:
        the last timed sibling's time (siblings differ by one rewrite of the same state),
        else the parent's. Only the calibration's starting point: never a result."""
        return node.children[-1].seconds if node.children else node.seconds

    def _measured(self, before, after) -> dict:
        """A timed row's measured fields: the after timing, the speedups, the outcome."""
        step = before.median_s / after.median_s
        cum = self.root.timing.median_s / after.median_s
        return dict(after=after, step_speedup=step, cumulative_speedup=cum,
                    outcome="improved" if IMPROVE_RULE.faster(before, after) else "not_improved",
                    reason=f"{step:.3f}x over the parent, {cum:.3f}x over the unscheduled kernel")

    def _complete(self, node: Node) -> bool:
        """Time a stopped-early state again, in full (its partial timing was never cached), and
        update its row: from now on it may be a ``before``."""
        # its own short timing is the best hint there is (the calibration's start, not a result)
        tm = self.evaluator.time(node.text, **({"hint_s": node.seconds} if self._hints else {}))
        if tm.timing is None or tm.stopped_early:
            node.ranked = []  # never expanded: no policy comes back to it
            return False
        self.retimed += 1
        after = tm.timing
        rec = node.step.model_copy(update=self._measured(node.parent.timing, after))
        i = next(k for k, r in enumerate(self.steps) if r is node.step)
        self.steps[i] = node.step = rec
        node.timing, node.partial = after, False
        if after.median_s < self.best.seconds:
            self.best = node
        self.ranker.observe(node.program, after.median_s)
        return True

    def plan(self, steps: Sequence[tuple[Node, int]]) -> None:
        """What the policy will evaluate next, in order: ``k`` of each node's next untried
        actions (rank order). Verifying ahead then follows the plan across nodes instead of
        guessing from one node's ranking, and once the plan is used up guesses nothing until
        the policy plans again (``plan([])`` ends it: a state ranked then offers its best);
        only when work happens changes, never a result."""
        self._plan = [(n, c) for n, k in steps if n.ranked is not None
                      for c in self.untried(n)[:k]]
        self._planning = bool(self._plan)

    def plan_one(self, node: Node, cand: Candidate) -> None:
        """A plan of one evaluation (``cand`` of ``node``), chosen out of rank order: verifying
        ahead takes it and guesses nothing after it."""
        self._plan = [(node, cand)]
        self._planning = True

    def _prefetch(self, node: Node, cand: Optional[Candidate] = None, exact: str = "") -> None:
        """Let an evaluator that can (``prefetch``) compile and verify ``cand`` (about to be
        verified) together with the next candidates of ``node`` in rank order, on all its
        workers at once; no result depends on it. Only a node whose actions are already ranked
        is asked (ranking it here, earlier than the policy would, could change what it holds)."""
        pre = getattr(self.evaluator, "prefetch", None)
        depth = getattr(self.evaluator, "prefetch_depth", 0)
        if pre is None or depth <= 0 or self.root is None or node.ranked is None:
            return
        items = [(cand.text, exact)] if cand is not None else []
        if cand is None:  # after a timing: ``ahead_after_timing`` of them (default: a batch)
            depth = min(depth, getattr(self.evaluator, "ahead_after_timing", depth))
        # never more than the budget can still time (the one about to be verified is counted)
        depth = min(depth, self.budget.measurements - self.measurements - len(items))
        self._plan = [(n, c) for n, c in self._plan
                      if c.text not in self.seen and (cand is None or c.text != cand.text)]
        # the next ``depth`` the evaluator has not taken yet: a batch is full even when the
        # previous one verified the first of them
        if self._plan:
            nxt = ((c.text, worse(n.exactness, c.exactness)) for n, c in self._plan)
        elif self._planning:
            nxt = iter(())   # the plan is used up: the policy decides what follows
        else:
            nxt = ((c.text, worse(node.exactness, c.exactness)) for c in self.untried(node))
        items += list(itertools.islice((it for it in nxt if it[0] not in self._sent), depth))
        if items:
            took = pre(self.original_text, items)
            if took is not None:
                self._sent.update(took)

    def _record_curve(self) -> None:
        self.curve.append({"measurements": float(self.measurements), "elapsed_s": self.elapsed,
                           "best_s": self.best.seconds,
                           "best_speedup": self.root.seconds / self.best.seconds})

    def _progress(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self)

    # ------------------------------------------------------------------ settling
    def finalists(self, k: int = SETTLE_FINALISTS) -> list[Node]:
        """The states a final choice is made among: the ``k`` fastest fully timed states, and
        the fastest state of the other kind (parallel or not) when none of them is of it."""
        done = [n for n in self.seen.values()
                if n is not None and n is not self.root and not n.partial]
        done.sort(key=lambda n: n.seconds)   # stable: ties keep the order they were measured
        out = done[:max(1, k)]
        kinds = {_is_parallel(n.program) for n in out}
        other = next((n for n in done[len(out):] if _is_parallel(n.program) not in kinds), None)
        return out + ([other] if other is not None else [])

    def settle(self, interleave: Callable[[list[str]], list[Optional[Timing]]],
               k: int = SETTLE_FINALISTS) -> Optional[Node]:
        """Choose the final program by re-timing the finalists (``finalists``) and the
        unscheduled kernel interleaved, A, B, A, B (``interleave``: program texts to timings,
        e.g. :func:`~steptp.measure.significance.interleaved` over an uncached timer).

        Why: each candidate was timed once, at its own moment. A program that runs on every
        core is timed at the mercy of whatever else uses the machine just then; on a shared
        machine it loses to a serial program it beats whenever the cores are free, and the
        trajectory would end on the serial one. Timed side by side, both see the same load.
        The fastest re-timed finalist becomes ``best`` (the trajectory's final program, with
        ``remeasured_speedup`` from the same rounds) when it is significantly faster
        (``IMPROVE_RULE``) than the search's own pick, the fastest by its own timing, or when
        the pick's re-timing is noisy (decides nothing) and a steady finalist (else any) has a
        lower median; a pick significantly slower than the unscheduled kernel (or noisy and no
        faster than it) gives way to the fastest finalist
        that is not, else to the unscheduled kernel itself. Rows and their labels are
        unchanged.
        When no rewrite beat the unscheduled kernel by its own timing, the finalists are
        measured against it the same way. Returns the best, or None (nothing to choose among,
        or a re-timing failed)."""
        if self.root is None:
            return None
        group = self.finalists(k)
        if not group:
            return None
        ts = interleave([self.root.text] + [n.text for n in group])
        if len(ts) != len(group) + 1 or any(t is None for t in ts):
            return None
        base, rest = ts[0], ts[1:]
        self.settled = [(n.text, n.seconds, t.median_s) for n, t in zip(group, rest)]
        # the search's own pick: its fastest state, or the unscheduled kernel when no rewrite
        # beat it (a parallel child timed on busy cores may have lost to it)
        own = (self.root, base) if self.best is self.root else (group[0], rest[0])
        order = sorted(range(len(group)), key=lambda j: (rest[j].median_s, j))
        pick = own
        if IMPROVE_RULE.faster(own[1], rest[order[0]]):
            pick = (group[order[0]], rest[order[0]])
        elif IMPROVE_RULE.noisy(own[1]):
            # the pick's own side-by-side timing decides nothing (fused_conv2d_add's parallel
            # pick re-timed 0.19 -> 0.46 ms beside a steady 0.21): the fastest steady one
            # (max_pool2d's: 0.148 -> 0.344 ms, spread 0.9, beside 0.207), else by the medians
            steady = [j for j in order if not IMPROVE_RULE.noisy(rest[j])]
            j = steady[0] if steady else order[0]
            if rest[j].median_s < own[1].median_s:
                pick = (group[j], rest[j])
        if pick[0] is not self.root and (IMPROVE_RULE.faster(pick[1], base) or (
                IMPROVE_RULE.noisy(pick[1]) and pick[1].median_s >= base.median_s)):
            # significantly slower than the unscheduled kernel side by side (or noisy and no
            # faster): the fastest finalist that is not, else the unscheduled kernel (the
            # trajectory found nothing)
            ok = [j for j in order if rest[j].median_s < base.median_s
                  and not IMPROVE_RULE.faster(rest[j], base)]
            pick = (group[ok[0]], rest[ok[0]]) if ok else (self.root, base)
        if pick[0] is self.root:
            # nothing beats it; no final program to re-time against it
            self.best, self._settled_root, self._settled_final = self.root, None, None
            return self.root
        self._settled_root = base
        self.best, self._settled_final = pick
        return self.best

    # ------------------------------------------------------------------ results
    def trajectory(self) -> Optional[TrajectoryRecord]:
        if self.root is None:
            return None
        path = self.best.path()[1:]
        return TrajectoryRecord(
            trajectory_id=self.trajectory_id, kernel_id=self.kernel_id, policy=self.policy,
            seed=self.seed, n_steps=len(path), strategies=[n.step.strategy for n in path],
            baseline_s=self.root.seconds, best_s=self.best.seconds,
            speedup=self.root.seconds / self.best.seconds, final_leir=self.best.leir,
            target=getattr(self.evaluator.target, "key", str(self.evaluator.target)),
            fingerprint=self._fp, **self._remeasured())

    def _remeasured(self) -> dict:
        if self._settled_root is None:
            return {}
        base, final = self._settled_root, self._settled_final
        return {"remeasured_speedup": base.median_s / final.median_s,
                "remeasured_spread": max(base.spread, final.spread)}

    def result(self) -> SearchResult:
        return SearchResult(self.steps, self.trajectory(), self.curve,
                            self.root.timing if self.root else None, self.best,
                            self.measurements, self.verifications, self.elapsed, self.error,
                            self.retimed, list(self.settled))


def kernel_id_of(program: A.Program) -> str:
    """The dataset's kernel id: the canonical LEIR hash, first 16 hex digits."""
    return canonical_hash(program)[:16]


__all__ = ["Budget", "Node", "Search", "SearchResult", "trajectory_id", "kernel_id_of", "has_loop_kind"]
