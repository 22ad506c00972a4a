"""Search policies behind one interface: ``Policy.run(search)``.

A policy only decides WHICH (node, action) to evaluate next; ``Search.evaluate`` verifies,
times, records the row and counts the budget, and ``Search.ranked`` gives each node's actions
best-predicted first (the cost model). All choices are deterministic given the seed and the
measured times.

* :class:`Greedy` — from the current state, measure the ``top_k`` best-ranked actions and move
  to the fastest child; a non-improving move is allowed ``patience`` times in a row (enabling
  steps such as a split rarely pay on their own); when stuck, continue from the best state found.
* :class:`Beam` — ``width`` states per level; each level measures the ``per_level`` actions
  with the best expected time over the whole frontier (the state's measured time times the
  model's predicted ratio child/state), then keeps the ``width`` best states (children and the
  previous frontier, by measured time adjusted by the cost model's remaining potential), to
  ``depth`` levels; then keeps measuring the best open states until the budget is spent. With
  ``lookahead`` k, the k best-ranked untried actions of each frontier state are re-ranked by
  the best score the cost model expects after up to ``lookahead_depth - 1`` finishing moves
  (``Search.lookahead``), so an enabling step is measured before a look-alike dead end; at
  most ``lookahead_limit`` states are expanded that way per search (a count, not a clock, so
  a rerun decides the same). An enabling move (``ENABLING``: ``loop_collapse``) whose best
  register tile, vectorized, the cost model scores ``PROMOTE_MARGIN`` better than the state's
  own best is measured first, followed by that tile and its vectorization (each a recorded
  step): alone it measures slower than its parent and would never stay in the beam. With
  ``explore`` e, the first e levels of at least two slots give their last slot to the
  best-ranked action of a strategy family the search has not tried yet (else of a strategy it
  has not tried): the model ranks loop moves first nearly everywhere, and a dataset of steps
  needs the inlinings, fusions, stagings and rewrites of the arithmetic measured too. With
  ``variants`` v, a state's actions are taken at most v variants of one move (a strategy on
  one top-level statement) at a time (``Beam._diversify``; 0, the default: rank order). With
  ``recall`` (off by default), an action that rewrites the same statements the same way as a step
  already measured elsewhere in the tree is expected to change the time as that step did
  (``Beam._recall``): a parallelization of a nest measured slower at the root is not measured
  again, unchanged, at each child.
* :class:`MCTS` — UCT (the bonus shared with ``steptp eval``'s tree: ``.uct``) over measured
  states with progressive widening (a node with ``n`` visits
  has at most ``ceil(widen * n ** alpha)`` children, opened in rank order). Reward: log speedup
  over the unscheduled kernel, normalized by the best so far; a failed or timed-out candidate is
  a visit with reward 0.
* :class:`RandomWalk` — seeded random walks of ``length`` steps from the root (uniform over
  strategies, then over that strategy's actions), moving on whatever the speedup: diversity and
  negative examples.
"""

from __future__ import annotations

import itertools
import math
import random
import zlib
from collections import Counter
from typing import Any, Optional

from ..leir import ast as A
from .run import Node, Search, has_loop_kind
from ..analysis.cost_model import score
from ..strategies import get as get_strategy
from .space import finished_tilings, stages_tile_accumulators, unrolls_tile_rows, unrolls_window
from .uct import exploration, log_speedup


class Policy:
    name = ""

    def run(self, s: Search) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in fields.items())})"


class Greedy(Policy):
    name = "greedy"

    def __init__(self, top_k: int = 4, patience: int = 3):
        self.top_k = top_k
        self.patience = patience

    def run(self, s: Search) -> None:
        cur: Node = s.root
        strikes = 0
        while not s.done:
            batch = []
            while len(batch) < self.top_k and not s.done:
                c = s.pop(cur)
                if c is None:
                    break
                ch = s.evaluate(cur, c)
                if ch is not None:
                    batch.append(ch)
            pool = [ch for ch in cur.children]
            if not pool or (not batch and s.pop(cur) is None and cur is s.best):
                # nothing left here: continue from the best state that still has actions
                nxt = _best_open(s)
                if nxt is None or nxt is cur:
                    return
                cur, strikes = nxt, 0
                continue
            best = min(pool, key=lambda n: (n.seconds, n.depth))
            if best.seconds < cur.seconds * (1 - 0.01):
                strikes = 0
            else:
                strikes += 1
            if strikes > self.patience:
                nxt = _best_open(s, exclude=cur)
                if nxt is None:
                    return
                cur, strikes = nxt, 0
                continue
            cur = best


def _all_nodes(s: Search) -> list[Node]:
    out, stack = [], [s.root]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children)
    return out


def _unexplored(s: Search, frontier: list[Node], planned) -> Optional[tuple[Node, Any]]:
    """Beam exploration: the best-ranked untried action, over the frontier in beam order, of a
    strategy family no step of this search has tried and the level does not plan (else of such
    a strategy); None when every one has been. The cost model ranks the loop moves first on
    nearly every state, so without a slot of its own an inlining, a fusion, a staging or a
    rewrite of the arithmetic is never measured, and a dataset never learns when it pays."""
    tried = [get_strategy(st.strategy) for st in s.steps] + [get_strategy(c.strategy) for c in planned]
    families = {t.family for t in tried}
    names = {t.name for t in tried}
    for test in (lambda c: get_strategy(c.strategy).family not in families,
                 lambda c: c.strategy not in names):
        for n in frontier:
            for c in s.untried(n):
                if test(c):
                    return n, c
    return None


def _best_open(s: Search, exclude: Optional[Node] = None) -> Optional[Node]:
    """The fastest measured state that still has untried actions."""
    nodes = sorted(_all_nodes(s), key=lambda n: (n.seconds, n.depth))
    for n in nodes:
        if n is exclude:
            continue
        if s.untried(n):
            return n
    return None


#: moves that pay only through what they enable; ``Beam`` measures them early when the cost
#: model expects the register tiles after them to beat those before them
ENABLING = ("loop_collapse",)
PROMOTE_MARGIN = 0.1   # log-score: the finished tiles after the move must be ~10% faster
FOLLOW_THROUGH = ("loop_tiling", "loop_vectorization")   # measured after a promoted move
#: moves that bring a producer and its consumer into one nest: measured, each is followed by
#: the unrolling of the small windows it leaves (``UNROLL_WINDOW``), which is what makes the
#: fusion pay (max_pool2d's padding computed at each output, 160-190 us rolled, 45 unrolled)
FUSING = ("compute_at", "reverse_compute_at")
#: a register tile's accumulators staged in a local buffer (``cache_read_write``, see
#: ``space.stages_tile_accumulators``): inside a parallel loop, LLVM may leave a global buffer's
#: accumulators in memory (3 interleaved rounds on 2 cores: conv1d's 4x15 tile 7.4-7.7 ms
#: parallel, 2.4-2.6 serial, 2.1-2.4 parallel and staged; a 512^3 matmul's 4x16 tile 1.9-2.1
#: parallel, 1.8-1.9 parallel and staged), so the stage comes before the parallelization
STAGE = "stage_accumulators"
#: a cache tile over the register tile (``space._cache_tilings``), between the tile's
#: vectorization and its stage: staged or parallel, the band it tiles is gone. Measured when the
#: cost model expects it to pay (a 4x64 matmul tile streaming B from L2 per 4 rows: 1.67 ms, with
#: blocks of 64 of k shared by 8 row tiles 1.14)
CACHE_TILE = "cache_tile"
#: measured right after a state's first register tile: a tile's accumulators only stay in
#: registers once its column loop is a vector (alone, a stride-2 conv's 8x14 tile took 78 ms
#: against 22 ms for smaller tiles, and the beam dropped it before vectorizing), and, once the
#: program is parallel, only in a local buffer
FINISH_TILE = ("loop_vectorization", CACHE_TILE, STAGE, "loop_parallelization")
#: follow-through moves skipped, not ending the follow-through, when they have no candidate
#: or the model does not expect them to pay
OPTIONAL = (STAGE, CACHE_TILE)
#: A small inner window (a pooling's reduction over its 2x2 or 3x3 taps, the padding copy
#: computed at each output) unrolled with every loop inside it (``loop_unrolling`` with
#: ``inner``), as MetaSchedule's auto-unroll does to every trial: a rolled 3x3 window with its
#: guard is several times slower (max_pool2d's fused nest 160-190 us rolled, 45 unrolled,
#: MetaSchedule's 40; avg_pool2d's 38 against 27), and the cost model does not see it.
UNROLL_WINDOW = "unroll_window"
#: a staged register tile's row loop unrolled (``space.unrolls_tile_rows``): MetaSchedule's
#: auto-unroll writes a tile's rows out on every trial, and LLVM leaves a 16-row loop rolled
#: (conv2d_grouped's 16x14 tile 347 us rolled, 239 unrolled; elsewhere within 3%)
UNROLL_TILE = "unroll_tile"
#: an elementwise epilogue moved into its producer's nest (``reverse_compute_at`` at the
#: deepest loop it allows), or the two nests merged over the loops they share
#: (``operator_fusion``, also of two parallel loops: an epilogue the search had already
#: collapsed and parallelized no longer matches the producer's loops below them): one
#: parallel region instead of two (avg_pool2d's division as a second parallel nest timed
#: 77-116 us and varied 2x between runs, fused 23-27)
FUSE_EPILOGUE = "fuse_epilogue"
#: every top-level nest is parallelized in the finish, not only the first, while the analytic
#: model expects one more parallel nest to gain this much (log-score). A held-out run's grouped
#: conv ended with its padding copy serial beside the parallel conv nest: 298 us, 226 with the
#: copy parallel (5 interleaved rounds); a layernorm's 768-element division is not worth a fork
REPEAT_MARGIN = 0.02
#: the beam's last measurements: the best state's missing finishing moves, in this order, each
#: from the one before (a MetaSchedule trial is always vectorized and parallel, its tiles'
#: accumulators in a local cache-write stage, its small inner loops unrolled; a beam that found
#: its best state at its last measurement never tried to parallelize it). A kind is missing per
#: top-level nest: a program whose first nest is parallel still has its second parallelized.
#: A window's accumulator is staged again after the window's unroll (a pooling's max into
#: a local scalar pays only with its taps unrolled: the held-out maxpool2d ended at 96 us when
#: the search had measured the stage before the unroll and the finish could not take it again,
#: 55 us when the search happened to take both). The moves that pay most widely come first: a
#: small budget keeps one in 8 of its measurements for the finish (2 of a release's 16), and
#: the window and the epilogue fusion (a move is skipped where it has no candidate) apply to
#: fewer kernels. The tile's rows come last: unrolled, 1 of 10 held-out tiles ran 1.45x faster
#: and the rest within 3%, while in a release build placed before the epilogue fusion it took
#: the depthwise conv's last measurement (1.53x against 2.22x with the fusion).
FINISH = (("loop_vectorization", "vectorized"), (STAGE, None), ("loop_parallelization", "parallel"),
          (UNROLL_WINDOW, None), (STAGE, None), (FUSE_EPILOGUE, None), (UNROLL_WINDOW, None),
          (UNROLL_TILE, None))


def _ranked_first(s: Search, cands: list):
    """The candidate the search's ranker scores lowest (the first on ties), and its score."""
    sc = s.ranker.scores([c.program for c in cands])
    k = min(range(len(cands)), key=lambda i: (sc[i], i))
    return cands[k], sc[k]


def _moves(s: Search, n: Node, move: str) -> list:
    """The untried actions of ``n`` that make ``move``: a strategy's name (register tiles only,
    for ``loop_tiling``), ``STAGE``, ``CACHE_TILE``, ``UNROLL_TILE``, ``UNROLL_WINDOW`` or
    ``FUSE_EPILOGUE`` (the deepest ``at`` of each epilogue, and every operator fusion)."""
    if move == STAGE:
        return [c for c in s.untried(n) if stages_tile_accumulators(n.program, c)]
    if move == UNROLL_WINDOW:
        return [c for c in s.untried(n) if unrolls_window(n.program, c)]
    if move == UNROLL_TILE:
        return [c for c in s.untried(n) if unrolls_tile_rows(n.program, c)]
    if move == CACHE_TILE:
        return [c for c in s.untried(n) if c.strategy == "loop_tiling" and c.params.get("above")]
    if move == FUSE_EPILOGUE:
        deepest: dict[tuple, object] = {}
        fused = []
        for c in s.untried(n):
            if c.strategy == "reverse_compute_at":
                deepest[tuple(c.site.path)] = c   # ``at`` is offered outermost first
            elif c.strategy == "operator_fusion":
                fused.append(c)
        return list(deepest.values()) + fused
    return [c for c in s.untried(n) if c.strategy == move
            and (move != "loop_tiling" or (c.params.get("point") == "inner"
                                           and not c.params.get("above")))]


def _nest_has(program: A.Program, path, kind: str) -> bool:
    """Does the top-level statement holding ``path`` have a loop of ``kind``?"""
    top = program.body[path[0]] if path else None
    return top is not None and any(isinstance(x, A.Loop) and x.kind == kind for x in A.walk(top))


def _finished_score(s: Search, program) -> float:
    """The best cost-model score of ``program`` and its finished register tiles."""
    progs = [program] + finished_tilings(program)
    return min(s.ranker.scores(progs))


#: moves that pay through what they make possible (a tile's or a split's loops, a reorder's
#: innermost loop): measured slower alone, the same move elsewhere may still prepare a gain,
#: so ``Beam._recall`` does not hold it back
PREPARING = ("loop_split", "loop_tiling", "loop_collapse", "loop_reorder")


def _statements(text: str) -> Counter:
    """A program text's top-level statements and declarations, each as its lines (a line
    indented by one space opens one; deeper lines belong to it)."""
    out: list[str] = []
    for line in text.splitlines()[1:]:
        if line.startswith(" ") and not line.startswith("  "):
            out.append(line)
        elif out:
            out[-1] += "\n" + line
    return Counter(out)


def rewrite_key(strategy: str, before: str, after: str) -> tuple:
    """What a step did, independent of the rest of the program: its strategy, the top-level
    statements it replaced and those it wrote (canonical texts). Two steps with one key made
    the same change to the same statements, so they change the time alike (nests run one
    after another; a program's other nests only add their own time)."""
    b, a = _statements(before), _statements(after)
    return strategy, tuple(sorted((b - a).elements())), tuple(sorted((a - b).elements()))


class Beam(Policy):
    name = "beam"

    def __init__(self, width: int = 4, depth: int = 16, per_level: Optional[int] = None,
                 per_node: Optional[int] = None, lookahead: int = 0, lookahead_depth: int = 2,
                 lookahead_limit: int = 48, finish: int = len(FINISH), finish_share: int = 8,
                 root: Optional[int] = None, explore: int = 0, variants: int = 0,
                 recall: bool = False):
        self.recall = recall     # same rewrite of the same statements: expect the measured change
        self.variants = variants   # per state, at most this many of one move at a time (0: off)
        self.explore = explore   # levels whose last slot goes to a family (strategy) not measured
        self.finish = finish   # measurements kept for the best state's finishing moves ...
        self.finish_share = finish_share   # ... at most one in this many of the budget
        self.root = root       # actions measured from the unscheduled kernel (None: per_level)
        self.width = width
        self.depth = depth
        self.per_level = per_level or 2 * width
        self.per_node = per_node or max(2, self.per_level // 2)
        self.lookahead = lookahead
        self.lookahead_depth = lookahead_depth
        self.lookahead_limit = lookahead_limit

    def _look(self, s: Search, n: Node) -> None:
        """Re-rank the first ``lookahead`` untried actions of ``n`` by their lookahead score
        (once per state)."""
        if self.lookahead <= 0 or n.lookahead is not None \
                or s.lookahead_expansions >= self.lookahead_limit:
            return
        n.lookahead = {}
        r = s.ranked(n)
        head_at = n.next_untried
        head = [c for c in r[head_at:head_at + self.lookahead]]
        if len(head) < 2:
            return
        vals = s.lookahead(head, self.lookahead_depth)
        order = sorted(range(len(head)), key=lambda i: (vals[i], i))
        r[head_at:head_at + len(head)] = [head[i] for i in order]
        n.lookahead = {head[i].text: vals[i] for i in range(len(head))}

    def _diversify(self, s: Search, n: Node) -> None:
        """Reorder the untried actions of ``n`` (once per state) so that each run of them holds
        at most ``variants`` of one move (a strategy on one top-level statement), in rank
        order otherwise: the first of a move's variants are taken first, then the next of
        each. Variants of one move (a tiling's factors, a reduction factor, the loops one nest
        could parallelize) score alike and err alike, so measuring many of them at one level
        tells little more than two do; with 16 measurements a layer norm's root level measured
        12 reduction factors and nothing else, and a matmul's 12 tilings, 11 of them
        unvectorized. The later variants stay, ranked behind: a larger budget still reaches
        them (``_widen`` takes the best open state's next action)."""
        if self.variants <= 0 or n.text in self._diversified:
            return
        self._diversified.add(n.text)
        r = s.ranked(n)
        at = n.next_untried
        seen: dict[tuple[str, int], int] = {}
        keyed = []
        for pos, c in enumerate(r[at:]):
            key = (c.strategy, c.site.path[0] if c.site.path else -1)
            j = seen.get(key, 0)
            seen[key] = j + 1
            keyed.append((j // self.variants, pos, c))
        keyed.sort(key=lambda t: (t[0], t[1]))
        r[at:] = [c for _, _, c in keyed]

    def _known_changes(self, s: Search) -> dict[tuple, float]:
        """``rewrite_key`` -> the mean change in seconds its measured steps made (child minus
        parent), over every measured step of the tree so far."""
        deltas: dict[tuple, list[float]] = {}
        for m in _all_nodes(s):
            if m.parent is None or m.step is None or not math.isfinite(m.seconds) \
                    or not math.isfinite(m.parent.seconds):
                continue
            key = self._edge_keys.get(m.text)
            if key is None:
                key = self._edge_keys[m.text] = rewrite_key(m.step.strategy, m.parent.text, m.text)
            deltas.setdefault(key, []).append(m.seconds - m.parent.seconds)
        return {k: sum(v) / len(v) for k, v in deltas.items()}

    def _recall(self, s: Search, n: Node, known: dict[tuple, float]) -> dict[str, float]:
        """Reorder the untried actions of ``n`` by what the tree already measured: an action
        that makes a change already measured elsewhere (``rewrite_key``: the same strategy
        replacing the same statements by the same statements) goes first when that change
        made its program faster, last when it made it slower, rank order otherwise (the
        moves in ``PREPARING`` are never held back). Returns each such action's expected
        log time (``n``'s time plus the measured change), by its text. With 16 measurements
        a group norm's root measured five parallelizations of single nests, all slower, and
        its best child measured four of them again, unchanged, and nothing else."""
        if not self.recall or not known:
            return {}
        r = s.ranked(n)
        at = n.next_untried
        first, rest, last = [], [], []
        expect: dict[str, float] = {}
        for c in r[at:]:
            d = known.get(rewrite_key(c.strategy, n.text, c.text))
            if d is None or (d >= 0 and c.strategy in PREPARING):
                rest.append(c)
                continue
            expect[c.text] = math.log(max(n.seconds + d, 0.05 * n.seconds, 1e-12))
            (first if d < 0 else last).append(c)
        r[at:] = first + rest + last
        return expect

    def _promote(self, s: Search, n: Node) -> None:
        """Move the enabling moves of ``n`` (``ENABLING``) that the cost model expects to pay
        two steps on to the front of its untried actions (once per state): a collapse is
        worth what the register tiles it makes possible are worth, and measured alone it
        looks like a no-op. Kept only when its best finished tile beats the best finished
        tile of ``n`` itself by ``PROMOTE_MARGIN``."""
        if n.text in self._promoted:
            return
        self._promoted.add(n.text)
        r = s.ranked(n)
        at = n.next_untried
        idx = [i for i in range(at, len(r)) if r[i].strategy in ENABLING]
        if not idx:
            return
        base = _finished_score(s, n.program)
        wins = []
        for i in idx:
            sc = _finished_score(s, r[i].program)
            if sc < base - PROMOTE_MARGIN:
                wins.append((sc, i))
        if not wins:
            return
        wins.sort()
        moved = [r[i] for _, i in wins]
        self._enablers.update(c.text for c in moved)
        won = {i for _, i in wins}
        keep = [c for k, c in enumerate(r[at:], at) if k not in won]
        r[at:] = moved + keep

    def _follow_through(self, s: Search, n: Node, strategies: tuple[str, ...] = FOLLOW_THROUGH,
                        beat: Optional[float] = None) -> list[Node]:
        """After a promoted enabling move: measure the cost model's best register tile of the
        new state, then the best vectorization of that (``FOLLOW_THROUGH``), each an ordinary
        recorded step; the states measured on the way. With ``beat`` (a score), a step is
        measured only when the model scores it below that."""
        out: list[Node] = []
        skip = False
        for k, strategy in enumerate(strategies):
            if s.done:
                break
            if skip:
                skip = False
                continue
            cands = _moves(s, n, strategy)
            if not cands:
                # no reduction tile to stage, no band to cache-tile, a tile (a cache tile)
                # already vectorized: the next move is still due
                if strategy in OPTIONAL or (strategy == "loop_vectorization"
                                            and has_loop_kind(n.program, "vectorized")):
                    continue
                break
            best, best_score = _ranked_first(s, cands)
            if beat is not None and best_score >= beat:
                if strategy in OPTIONAL:
                    continue
                break
            ch = s.evaluate(n, best, may_stop=False)   # expanded next, or the move's payoff
            if ch is None:
                if strategy in OPTIONAL:
                    continue
                break
            out.append(ch)
            if strategy == CACHE_TILE and ch.seconds > n.seconds:
                # a cache tile is judged with its block of accumulators staged, when the stage
                # comes next: unstaged, its row tiles reload them every block of the reduction
                # (a 256x1024x512 matmul's 4x64 tile 4.5 ms cache-tiled against 3.0, 1.9 once
                # staged; see ``space.stages_tile_accumulators``). Slower staged too, it is
                # skipped, not built on (a 512^3 matmul's 4x16 tile timed 3x slower
                # cache-tiled, and the stage and parallel loop after it went to a state the
                # beam then dropped). Not the stage alone: it pays only once the loop around it
                # is parallel, and serially it may time the same or slower
                staged = self._staged(s, ch) if strategies[k + 1:k + 2] == (STAGE,) else None
                if staged is not None:
                    out.append(staged)
                    if staged.seconds < n.seconds:
                        n, skip = staged, True
                continue
            n = ch
        return out

    @staticmethod
    def _staged(s: Search, n: Node) -> Optional[Node]:
        """``n`` with its tile's accumulators staged (the cost model's pick), measured; None
        when there is no stage to take or it fails."""
        cands = _moves(s, n, STAGE)
        if not cands or s.done:
            return None
        return s.evaluate(n, _ranked_first(s, cands)[0], may_stop=False)

    def _unfinished_tile(self, n: Node, c, ch: Node) -> bool:
        """Is ``ch`` (measured from ``n`` by ``c``) the first register tile measured from
        ``n`` (its best-ranked)? Its vectorization is then measured right away
        (``FINISH_TILE``), when the cost model expects it to beat ``n``: measured alone, the
        tile competes with its siblings unvectorized and may leave the beam."""
        return (c.strategy == "loop_tiling" and c.params.get("point") == "inner"
                and ch.parent is n and n.text not in self._tiles_finished)

    @staticmethod
    def _best_like(s: Search, n: Node) -> float:
        """The fastest measured time among states as parallel as ``n`` (serial ones when
        ``n`` is serial, all of them otherwise)."""
        serial = not has_loop_kind(n.program, "parallel")
        return min((m.seconds for m in _all_nodes(s)
                    if not (serial and has_loop_kind(m.program, "parallel"))), default=math.inf)

    @staticmethod
    def _new_best_tile(s: Search, c, ch: Node, best_s: float) -> bool:
        """Is ``ch`` a register tile just vectorized (by ``c``) into the fastest state so far
        among those as parallel as its parent (``_best_like``), with a cache tile or a stage
        still to take? Its finish (``FINISH_TILE`` after the vectorization) is measured at once:
        only a state's first tile was finished so, and a transposed matmul's best tile, its
        third, ended in its rows' loop, uncached and unstaged (0.90-1.02 ms against
        MetaSchedule's 0.71 with blocks of k shared by 12 row tiles). Serial states compete
        with serial ones: the first tile, finished, is parallel and 2x ahead of any serial
        tile."""
        return (c.strategy == "loop_vectorization" and ch.seconds < best_s
                and bool(_moves(s, ch, CACHE_TILE) or _moves(s, ch, STAGE)))

    def _finish(self, s: Search) -> None:
        """The best state's missing finishing moves (``FINISH``: no loop of that kind yet; a
        register tile whose accumulators are not staged), the analytic cost model's best of
        each (of parallelizations, one per nest while the model expects a gain:
        ``REPEAT_MARGIN``), measured from the previous one whatever its time (on a busy machine
        a parallel program may time slow here; ``Search.settle`` re-times it side by side with
        the serial best)."""
        n = s.best
        for move, kind in FINISH:
            for again in range(len(n.program.body) if move == "loop_parallelization" else 1):
                if s.done:
                    break
                cands = _moves(s, n, move)
                if kind is not None:
                    cands = [c for c in cands if not _nest_has(n.program, c.site.path, kind)]
                if not cands:
                    break
                # the analytic model's pick: the learned one is fitted to this search's few
                # timings, and parallel programs timed on a busy machine taught it that
                # parallel work does not pay (conv1d's finish parallelized its input copy, not
                # its conv nest)
                sc = [score(c.program, s.ranker.cores) for c in cands]
                k_best = min(range(len(cands)), key=lambda k: (sc[k], k))
                if again and sc[k_best] > score(n.program, s.ranker.cores) - REPEAT_MARGIN:
                    break
                pick = cands[k_best]
                s.plan_one(n, pick)   # verify ahead exactly this one: no guess from n's ranking
                ch = s.evaluate(n, pick, may_stop=False)
                if ch is None:
                    break
                n = ch
        s.plan([])

    def run(self, s: Search) -> None:
        # the last ``finish`` measurements are the best state's finishing moves; a small budget
        # keeps fewer (one in 8 at most: with 4 measurements, a reserve of 3 left the search
        # one, and a small release found no step beyond the noise)
        s.reserve = min(self.finish, s.budget.measurements // max(1, self.finish_share))
        try:
            self._search(s)
            self._widen(s)
        finally:
            s.reserve = 0
        if s.root is not None and s.best is not None:
            self._finish(s)
        self._widen(s)

    def _search(self, s: Search) -> None:
        self._promoted: set[str] = set()
        self._diversified: set[str] = set()
        self._edge_keys: dict[str, tuple] = {}
        self._enablers: set[str] = set()
        self._tiles_finished: set[str] = set()
        frontier: list[Node] = [s.root]
        explored = 0
        for _level in range(self.depth):
            if s.done:
                return
            known = self._known_changes(s) if self.recall else {}
            expect: dict[str, float] = {}
            for n in frontier:
                self._diversify(s, n)
                self._promote(s, n)
                self._look(s, n)
                expect.update(self._recall(s, n, known))
            # the best-ranked untried actions over the frontier, at most per_node per state so
            # that every state of the beam is explored
            # Actions of different states are compared by their expected time: the state's
            # MEASURED log time plus the model's predicted change (child score - state score).
            # Absolute model scores would let a poor state's optimistic children outrank the
            # obvious next move (e.g. parallelizing) of the best measured state.
            pool: list[tuple[float, int, int, Node]] = []
            level_cands: dict[tuple[int, int], Any] = {}
            at_root = _level == 0 and self.root is not None
            level = self.root if at_root else self.per_level
            per_node = 1 if at_root else self.per_node
            for fi, n in enumerate(frontier):
                # a narrow frontier (the root) spends the whole level on its own actions
                cands = s.untried(n)[:max(per_node, level // len(frontier))]
                if not cands:
                    continue
                scores = s.ranker.scores([n.program] + [c.program for c in cands])
                base = math.log(max(n.seconds, 1e-12)) - scores[0]
                look = n.lookahead or {}
                for ci, (c, sc) in enumerate(zip(cands, scores[1:])):
                    # a change measured elsewhere is expected to do what it did there
                    pool.append((expect.get(c.text, base + min(sc, look.get(c.text, sc))), fi, ci, n))
                    level_cands[(fi, ci)] = c
            if not pool:
                break
            pool.sort(key=lambda t: (t[0], t[1], t[2]))
            # no more than the budget has left before the reserve: what the level plans is
            # verified ahead, and a plan cut short by the reserve was verified for nothing
            left = s.budget.measurements - s.reserve - s.measurements
            chosen = pool[:max(1, min(level, left))]
            explore = None
            if explored < self.explore and len(chosen) >= 2:
                planned = [level_cands[fi, ci] for _, fi, ci, _ in chosen[:-1]]
                explore = _unexplored(s, frontier, planned)
                if explore is not None:
                    chosen = chosen[:-1]
                    explored += 1
            # evaluate in frontier order, each node's actions in rank order
            by_node: dict[int, int] = {}
            for _, fi, _, _ in chosen:
                by_node[fi] = by_node.get(fi, 0) + 1
            new: list[Node] = []
            if explore is not None and not s.done:
                # the level's last slot, measured first (a tile's follow-through may spend the
                # rest of the level): out of rank order, an ordinary recorded step
                n, c = explore
                s.plan_one(n, c)
                ch = s.evaluate(n, c)
                if ch is not None:
                    new.append(ch)
            s.plan([(frontier[fi], k) for fi, k in sorted(by_node.items())])
            for fi, k in sorted(by_node.items()):
                n = frontier[fi]
                for _ in range(k):
                    if s.done:
                        break
                    c = s.pop(n)
                    if c is None:
                        break
                    # what a vectorized tile must beat (``_new_best_tile``), asked before the
                    # child joins the tree; only vectorizations need it
                    best_s = (self._best_like(s, n) if c.strategy == "loop_vectorization"
                              else math.inf)
                    # a promoted enabling move is expanded at once (``_follow_through``)
                    ch = s.evaluate(n, c, may_stop=c.text not in self._enablers)
                    if ch is not None:
                        new.append(ch)
                        if c.text in self._enablers:
                            new.extend(self._follow_through(s, ch))
                        elif c.strategy in FUSING:
                            new.extend(self._follow_through(s, ch, (UNROLL_WINDOW,) * 2))
                        elif self._unfinished_tile(n, c, ch):
                            # once per state: its best-ranked tile
                            self._tiles_finished.add(n.text)
                            beat = s.ranker.scores([n.program])[0] - PROMOTE_MARGIN
                            new.extend(self._follow_through(s, ch, FINISH_TILE, beat))
                        elif self._new_best_tile(s, c, ch, best_s):
                            new.extend(self._follow_through(s, ch, FINISH_TILE[1:]))
            s.plan([])
            cand_nodes = list(dict.fromkeys(new + frontier))
            cand_nodes.sort(key=lambda n: (n.key, n.depth))
            # lazily: ``untried`` expands and ranks a state's actions (seconds on a large
            # band), so only states that can still enter the beam are asked
            frontier = list(itertools.islice((n for n in cand_nodes if s.untried(n)), self.width))
            if not frontier:
                break

    @staticmethod
    def _widen(s: Search) -> None:
        """Depth exhausted with budget left: keep widening around the best states."""
        while not s.done:
            n = _best_open(s)
            if n is None:
                return
            c = s.pop(n)
            if c is not None:
                s.evaluate(n, c)


class MCTS(Policy):
    name = "mcts"

    def __init__(self, c: float = 1.0, widen: float = 2.0, alpha: float = 0.5,
                 max_depth: int = 16):
        self.c = c
        self.widen = widen
        self.alpha = alpha
        self.max_depth = max_depth

    def _reward(self, s: Search, node: Optional[Node]) -> float:
        if node is None:
            return 0.0
        return max(0.0, log_speedup(s.root.seconds, node.seconds))

    def run(self, s: Search) -> None:
        root = s.root
        while not s.done:
            # selection
            node, path = root, [root]
            while True:
                limit = math.ceil(self.widen * max(1, node.visits) ** self.alpha)
                opened = len(node.children) + node.failures
                if (opened < limit and s.untried(node)) or not node.children \
                        or node.depth >= self.max_depth:
                    break
                scale = max(math.log(s.root.seconds / s.best.seconds), 1e-3)

                def uct(ch: Node, parent: Node = node) -> float:
                    if ch.visits == 0:
                        return math.inf
                    q = 0.5 * (ch.value / ch.visits) + 0.5 * max(ch.best_reward, 0.0)
                    return q / scale + exploration(self.c, parent.visits, ch.visits)

                node = max(node.children, key=lambda ch: (uct(ch), -ch.seconds))
                path.append(node)
            # expansion (one measured child)
            child = None
            if node.depth < self.max_depth:
                c = s.pop(node)
                if c is None and not node.children:
                    # a dead end: mark it visited so UCT turns away
                    reward = self._reward(s, node)
                    self._backup(path, reward)
                    if node is root:
                        return
                    continue
                if c is not None:
                    child = s.evaluate(node, c)
                    if child is not None:
                        path.append(child)
            reward = self._reward(s, child) if child is not None else 0.0
            self._backup(path, reward)
            if child is None and node.depth >= self.max_depth and not s.untried(root) \
                    and all(not s.untried(n) for n in _all_nodes(s)):
                return

    @staticmethod
    def _backup(path: list[Node], reward: float) -> None:
        for n in path:
            n.visits += 1
            n.value += reward
            n.best_reward = max(n.best_reward, reward)


class RandomWalk(Policy):
    name = "random"

    def __init__(self, length: int = 8, restart_from_best: bool = False):
        self.length = length
        self.restart_from_best = restart_from_best

    def run(self, s: Search) -> None:
        rng = random.Random((int(s.seed) << 32) ^ zlib.crc32(s.kernel_id.encode()))
        cur, steps, stale = s.root, 0, 0
        while not s.done:
            cands = s.untried(cur)
            if not cands or steps >= self.length:
                if cur is s.root and not cands:
                    return
                cur, steps = (s.best if self.restart_from_best else s.root), 0
                stale += 1
                if stale > 4 * self.length + 8 and not s.untried(s.root):
                    return
                continue
            by_strategy: dict[str, list] = {}
            for c in cands:
                by_strategy.setdefault(c.strategy, []).append(c)
            strat = rng.choice(sorted(by_strategy))
            c = rng.choice(by_strategy[strat])
            ch = s.evaluate(cur, c)
            steps += 1
            if ch is not None:
                cur, stale = ch, 0


POLICIES = {"beam": Beam, "mcts": MCTS, "greedy": Greedy, "random": RandomWalk}


def make_policy(name: str, **kwargs) -> Policy:
    try:
        return POLICIES[name](**kwargs)
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; use one of {', '.join(POLICIES)}") from None


__all__ = ["Policy", "Greedy", "Beam", "MCTS", "RandomWalk", "POLICIES", "make_policy"]
