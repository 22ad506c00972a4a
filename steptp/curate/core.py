"""Curation rules, strategy balancing and workload-level splits (see the package docstring)."""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import polars as pl

from ..records import (KernelRecord, RejectRecord, StepRecord, TrajectoryRecord, read_records, step_key,
                       table, write_table, write_text_atomic)

from ..measure.significance import SignificanceRule
from ..params import Curate
from ..search.roles import FAILED_OUTCOMES
from .reasoning import Note, Texts, notes_of, with_texts

SPLITS = ("train", "validation", "test")

# reason code -> what it means (the card and the rejects table use the codes)
REASONS: dict[str, str] = {
    "unverified": "not verified against the reference, or a failed outcome",
    "unmeasured": "missing timing, or a speedup that is not finite and positive",
    "noisy": "its role-deciding timings are too noisy for the significance rule to decide",
    "no_op": "the after-program prints the same as the before-program",
    "rename_only": "the only change is renaming (equal canonical text)",
    "shortcut": "undoes an earlier step of its trajectory (returns to an ancestor program)",
    "no_cot": "no chain of thought",
    "cot_invalid": "the chain of thought does not parse with the CoT schema",
    "too_long": "the chat example exceeds the token limit",
    "neutral": "not significantly faster, and nothing measured through it is (a negative)",
    "regressing": "significantly slower, and nothing measured through it is faster (a negative)",
    "prediction_disagrees": "the direction its reasoning expects is contradicted by the "
                            "measurement (the re-timing when there is one; a right step for a "
                            "wrong stated reason; pairs/rewards)",
    "incoherent": "its reasoning cannot argue for it: the step answers no limit found at its site "
                  "and prepares no move that does (steptp.cot.coherence; a pair's rejected side "
                  "and rewards only)",
    "duplicate": "the canonical (before, after) pair is already in the release",
    "alternative": "another child of the same program is the SFT answer to this prompt: the one "
                   "through which the fastest program was measured, or among those the rule "
                   "cannot tell apart, the rarer strategy (pairs)",
    "unknown_kernel": "the step's kernel is not in the kernels table",
    "balance": "its strategy is above the balancing cap",
    "repetitive": "its kernel already has the most SFT answers of this strategy allowed "
                  "(curate.max_per_kernel_strategy; the step stays in pairs and all-steps)",
    "family_cap": "its operator family already holds curate.max_family_share of the SFT examples "
                  "(the step stays in pairs and all-steps)",
    "kernel_cap": "its kernel (with the kernels that differ from it only in their shapes) already "
                  "holds curate.max_kernel_share of the SFT examples (the step stays in pairs and "
                  "all-steps)",
}


#: the curate section of the settings (``steptp.params.Curate``: its one definition)
CurateConfig = Curate


@dataclass
class CurateResult:
    steps: list[StepRecord]
    rejects: list[RejectRecord]
    splits: dict[str, str]                       # kernel_id -> split
    groups: list[dict[str, Any]]                 # the workload groups and their split
    report: dict[str, Any] = field(default_factory=dict)
    all_steps: list[StepRecord] = field(default_factory=list)   # every input step, with its role
    pairs: list[dict[str, Any]] = field(default_factory=list)    # preference pairs (step keys)


# ---------------------------------------------------------------------------- helpers
@functools.lru_cache(maxsize=1 << 14)
def _parsed_hash(text: str) -> str:
    """``canonical_hash`` of a text whose row did not record one (a record from before the
    field, a writer other than the search); a hash of the raw text when it does not parse."""
    from ..leir import parse
    from ..leir.canon import canonical_hash

    try:
        return canonical_hash(parse(text))
    except Exception:  # noqa: BLE001 - an unparsable program compares by its text
        return "raw:" + hashlib.sha256(text.encode()).hexdigest()


def _key(text: str, recorded: str) -> str:
    """A program's identity up to renaming (the kernel name ignored): the canonical hash the
    search recorded with the row, else one from parsing the text. Parsing every row again was
    most of curation's time at scale."""
    return recorded or _parsed_hash(text)


def _before_key(s: StepRecord) -> str:
    return _key(s.before_leir, s.before_hash)


def _after_key(s: StepRecord) -> str:
    return _key(s.after_leir, s.after_hash)


def _printed(text: str) -> str:
    """The text as the printer writes it (the raw text when it does not parse)."""
    from ..leir import format_program, parse

    try:
        return format_program(parse(text))
    except Exception:  # noqa: BLE001
        return text


def _hkey(*parts: Any) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def strategy_counts(steps: Iterable[StepRecord]) -> dict[str, int]:
    c = Counter(s.strategy for s in steps)
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def entropy(counts: Mapping[str, int]) -> float:
    """Shannon entropy (bits) of a count distribution."""
    n = sum(counts.values())
    return -sum((c / n) * math.log2(c / n) for c in counts.values() if c) if n else 0.0


def _reject(step: StepRecord, code: str, detail: str = "") -> RejectRecord:
    return RejectRecord(trajectory_id=step.trajectory_id, step_index=step.step_index,
                        kernel_id=step.kernel_id, strategy=step.strategy,
                        reason=f"{code}: {detail}" if detail else code, step_key=step_key(step))


def _spread_problem(step: StepRecord, max_spread: float) -> str | None:
    for name, t in (("before", step.before), ("after", step.after)):
        if t is None:
            continue
        if not math.isfinite(t.spread) or t.spread > max_spread:
            return f"{name} spread {t.spread:.3g} > {max_spread:g}"
    return None


def workload_groups(kernels: Sequence[KernelRecord], max_size: int | None = None) -> list[list[str]]:
    """Kernel ids grouped so that kernels sharing a workload are together (connected components
    of the kernel–workload graph). Groups and their members are sorted.

    ``max_size`` bounds a group's kernels. In a large pool a few kernels (a matmul of a common
    size) occur in dozens of workloads and join them all into one component that holds most of
    the pool, which no split but train can take. With a bound, kernels join their workloads in
    order of how few workloads they occur in (then by id): a join that would make a group larger
    than ``max_size`` is left out, and that kernel stays with the workloads it joined first (or
    alone). Every kernel is still in exactly one group; a workload whose kernels were not all
    joined to it may then span splits."""
    nodes = [k.kernel_id for k in kernels] + sorted({f"\0{o.workload}" for k in kernels for o in k.occurrences})
    parent = {x: x for x in nodes}
    size = {x: (0 if x.startswith("\0") else 1) for x in nodes}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> bool:
        a, b = find(a), find(b)
        if a == b:
            return True
        if max_size is not None and size[a] + size[b] > max_size:
            return False
        lo, hi = min(a, b), max(a, b)
        parent[hi] = lo
        size[lo] += size[hi]
        return True

    order = sorted(kernels, key=lambda k: (len({o.workload for o in k.occurrences}), k.kernel_id))
    for k in order:
        for w in sorted({o.workload for o in k.occurrences}):
            union(k.kernel_id, f"\0{w}")
    comps: dict[str, list[str]] = {}
    for k in kernels:
        comps.setdefault(find(k.kernel_id), []).append(k.kernel_id)
    return sorted(sorted(v) for v in comps.values())


#: the bound curation puts on a workload group's kernels is never below this
MIN_GROUP_BOUND = 12


def group_bound(fractions: Mapping[str, float], n_kernels: int) -> int:
    """The most kernels a workload group holds (``workload_groups``' ``max_size``): the smallest
    split's share of the kernels (a component of shared workloads can hold most of a large
    pool), never below ``MIN_GROUP_BOUND`` (a small release keeps each architecture whole)."""
    total = sum(f for f in fractions.values() if f > 0) or 1.0
    smallest = min((f for f in fractions.values() if f > 0), default=total) / total
    return max(MIN_GROUP_BOUND, int(smallest * n_kernels))


ARCH_SUITES = frozenset({"arch", "archs"})


def _group_kinds(kernels: Sequence[KernelRecord]) -> dict[str, str]:
    """kernel_id -> "arch" (occurs in an architecture) or "ops" (operator suites only)."""
    return {k.kernel_id: "arch" if any(o.suite in ARCH_SUITES for o in k.occurrences) else "ops"
            for k in kernels}


def _anchor(seed: int, group: Sequence[str]) -> float:
    """A group's place in [0, 1): a hash of its first (smallest) kernel id, nothing else."""
    return int(_hkey("split", seed, group[0])[:13], 16) / 16 ** 13


#: a split other than the largest holding fewer than this share of its fraction of the examples
#: takes groups from the largest (``assign_splits``), never past ``SPLIT_CEILING`` of it: a
#: pool's workloads form a few large groups, and an accumulating line's third night held 10 of
#: its 274 examples (from 5 kernels) in a 10% validation split
SPLIT_FLOOR = 0.5
SPLIT_CEILING = 1.5


def assign_splits(groups: Sequence[Sequence[str]], weights: Mapping[str, int], fractions: Mapping[str, float],
                  seed: int = 0, kinds: Mapping[str, str] | None = None,
                  pinned: Mapping[str, str] | None = None) -> dict[str, str]:
    """Assign whole groups to splits, the same way in every build of the same kernels.

    A group's split comes from its anchor (a seeded hash of its first kernel id) falling into
    the splits' ``fractions`` laid end to end, so it depends neither on timings nor on the other
    groups: two nightlies of one params.yaml, or a zoo grown by a model, keep every kernel where
    it was (a model trained on one build's train split never meets those kernels in the next
    build's test split). A group of more kernels than its split's share of all kernels goes to
    the largest split (a connected component of shared workloads can hold a third of a zoo).

    Repairs, the only part that follows the timings (``weights``: SFT steps per kernel): when
    there are at least as many groups with steps as splits, a split without steps takes the
    group with steps whose anchor lies nearest to its interval, from a split that keeps another;
    with ``kinds`` (kernel_id -> "arch" | "ops") and one group with steps to spare, the test split
    likewise takes an architecture group and an operator group when it has none; then a split
    with fewer than ``SPLIT_FLOOR`` of its fraction's share of the steps takes groups with steps
    from the largest split, nearest anchor first, none that would take it past
    ``SPLIT_CEILING`` of its share. A repair never moves a group of more than a third of the
    kernels or of the steps into a split smaller than the largest.

    ``pinned`` (kernel_id -> split; an accumulating nightly passes the previous release's): a
    pinned kernel keeps its split whatever the repairs would do, and the other kernels of its
    group join the split of the group's first pinned kernel, so no kernel moves between
    nights. Repairs move only groups without a pinned kernel."""
    names = [s for s in fractions if fractions[s] > 0]
    if not names:
        raise ValueError("no split has a positive fraction")
    total_f = sum(fractions[s] for s in names)
    frac = {s: fractions[s] / total_f for s in names}
    interval: dict[str, tuple[float, float]] = {}
    lo = 0.0
    for s in names:
        interval[s] = (lo, lo + frac[s])
        lo += frac[s]
    largest = max(names, key=lambda s: (frac[s], s))
    n_kernels = sum(len(g) for g in groups) or 1
    anchors = [_anchor(seed, g) for g in groups]

    def too_large(i: int, s: str) -> bool:
        return len(groups[i]) > frac[s] * n_kernels

    place: list[str] = []
    for i, u in enumerate(anchors):
        s = next((s for s in names if u < interval[s][1]), names[-1])
        place.append(largest if too_large(i, s) else s)
    pinned = {k: v for k, v in (pinned or {}).items() if v in names}
    fixed = set()
    for i, g in enumerate(groups):
        first = next((k for k in g if k in pinned), None)
        if first is not None:
            place[i] = pinned[first]
            fixed.add(i)

    steps_of = [sum(weights.get(k, 0) for k in g) for g in groups]   # per group
    stepped = [i for i in range(len(groups)) if steps_of[i] > 0]

    def held(s: str, pred=lambda i: True) -> list[int]:
        return [i for i in stepped if place[i] == s and pred(i)]

    def distance(i: int, s: str) -> float:
        a, b = interval[s]
        return 0.0 if a <= anchors[i] < b else min(abs(anchors[i] - a), abs(anchors[i] - b))

    total_steps = sum(steps_of)

    def big(i: int) -> bool:
        # a third of the kernels or of the examples: such a group is most of a release (the
        # workloads of a large pool connect into one component); in a small split it would
        # be the release's held-out examples instead of a sample of them
        return 3 * len(groups[i]) > n_kernels or 3 * steps_of[i] > total_steps

    def take_into(s: str, pred=lambda i: True) -> None:
        donors = [i for i in stepped if place[i] != s and pred(i) and len(held(place[i])) >= 2
                  and i not in fixed and not (big(i) and frac[s] < frac[largest])]
        if donors:
            i = min(donors, key=lambda i: (too_large(i, s), distance(i, s), groups[i][0]))
            place[i] = s

    if len(stepped) >= len(names):
        for s in sorted(names, key=lambda s: (frac[s], s)):
            if not held(s):
                take_into(s)
    if kinds and "test" in names and len(stepped) > len(names):
        is_arch = {i: any(kinds.get(k) == "arch" for k in groups[i]) for i in stepped}
        for want_arch in (True, False):
            if not held("test", lambda i: is_arch[i] == want_arch):
                take_into("test", lambda i: is_arch[i] == want_arch)
    if len(stepped) > len(names) and total_steps:
        def steps_in(s: str) -> int:
            return sum(steps_of[i] for i in held(s))

        for s in sorted(names, key=lambda s: (frac[s], s)):
            if s == largest:
                continue
            share = frac[s] * total_steps
            while steps_in(s) < SPLIT_FLOOR * share:
                room = share * SPLIT_CEILING - steps_in(s)
                donors = [i for i in held(largest) if i not in fixed and not big(i)
                          and 0 < steps_of[i] <= room]
                if not donors:
                    break
                place[min(donors, key=lambda i: (distance(i, s), groups[i][0]))] = s
    return {k: pinned.get(k, place[i]) for i, g in enumerate(groups) for k in g}


# ---------------------------------------------------------------------------- the pipeline
def _gain(s: StepRecord) -> float:
    """The measured gain a step leads to (ln of its best-descendant speedup)."""
    v = s.best_descendant_speedup
    return math.log(v) if v and v > 0 and math.isfinite(v) else -math.inf


def _beyond_cap(steps: list[StepRecord], group, cap: int, tag: str, seed: int) -> dict[str, int]:
    """The steps over ``cap`` in their ``group(step)``: step key -> the group's size. Within a
    group the steps with the larger measured gain stay (ties: a seeded hash)."""
    groups: dict[Any, list[StepRecord]] = {}
    for s in steps:
        groups.setdefault(group(s), []).append(s)
    drop: dict[str, int] = {}
    for mine in groups.values():
        if len(mine) > cap:
            mine = sorted(mine, key=lambda s: (-_gain(s), _hkey(tag, seed, step_key(s))))
            drop.update((step_key(s), len(mine)) for s in mine[cap:])
    return drop


def _balance(steps: list[StepRecord], cfg: CurateConfig) -> tuple[list[StepRecord], list[RejectRecord], dict]:
    """Cap each strategy among ``steps`` (the SFT-eligible ones) so that none holds more than
    ``cfg.max_strategy_share`` of them once capped (``share_cap``); within a strategy the steps
    with the larger measured gain stay (ties: a seeded hash). A share, not a multiple of the
    median strategy: with the median, a new strategy of two examples lowered the cap of the
    others (night 20261209 re-curated: 2 split answers cost 9 parallelizations)."""
    counts = strategy_counts(steps)
    info: dict[str, Any] = {"applied": False, "cap": None}
    if len(steps) < cfg.balance_min_steps or len(counts) < cfg.balance_min_strategies:
        info["why_not"] = (f"{len(steps)} steps, {len(counts)} strategies (needs "
                           f">= {cfg.balance_min_steps} steps and >= {cfg.balance_min_strategies} strategies)")
        return steps, [], info
    cap = share_cap(counts, cfg.max_strategy_share)
    if cap is None:
        info["why_not"] = (f"{len(counts)} strategies: a {cfg.max_strategy_share:.0%} share needs at "
                           f"least {groups_needed(cfg.max_strategy_share)}")
        return steps, [], info
    info.update(applied=True, cap=cap, max_strategy_share=cfg.max_strategy_share)
    drop = _beyond_cap(steps, lambda s: s.strategy, cap, "balance", cfg.seed)
    kept = [s for s in steps if step_key(s) not in drop]
    rej = [_reject(s, "balance", f"{s.strategy} above the cap of {cap} steps "
                                 f"({cfg.max_strategy_share:.0%} of the SFT examples; smaller gains go first)")
           for s in steps if step_key(s) in drop]
    return kept, rej, info


def _repetition_cap(steps: list[StepRecord], cfg: CurateConfig) -> tuple[list[StepRecord], list[RejectRecord]]:
    """At most ``cfg.max_per_kernel_strategy`` SFT answers per (kernel, strategy). A search that
    parallelizes the same outer loop at four depths of one trajectory yields four answers a model
    learns as one; the larger measured gains stay (ties: a seeded hash)."""
    cap = cfg.max_per_kernel_strategy
    if cap <= 0:
        return steps, []
    drop = _beyond_cap(steps, lambda s: (s.kernel_id, s.strategy), cap, "repetitive", cfg.seed)
    kept = [s for s in steps if step_key(s) not in drop]
    rej = [_reject(s, "repetitive", f"{drop[step_key(s)]} answers of {s.strategy} on kernel "
                                    f"{s.kernel_id}, cap {cap} (smaller gains go first)")
           for s in steps if step_key(s) in drop]
    return kept, rej


def diversity_keys(kernel: KernelRecord | None, kernel_id: str = "") -> tuple[str, str]:
    """(operator family, shape group) of a kernel for the diversity caps. A kernel whose family
    is unknown (``steptp.search.selection.kernel_family`` says ``other``) is a family of its own
    shape group: unknown kernels are not one family to cap together."""
    from ..search.selection import kernel_family, shape_group

    if kernel is None:
        return f"other:{kernel_id}", kernel_id
    group = shape_group(kernel.leir) if kernel.leir else kernel.kernel_id
    fam = kernel_family(kernel)
    return (f"other:{group}" if fam == "other" else fam), group


def groups_needed(share: float) -> int:
    """The fewest groups of which none can hold more than ``share`` of the total."""
    return math.ceil(1 / share - 1e-9)


def share_cap(counts: Mapping[Any, int], share: float) -> int | None:
    """The largest per-group count ``c`` such that, with every group cut to ``c``, no group holds
    more than ``share`` of the total: ``c <= share * sum(min(n, c))``. The ratio
    ``c / sum(min(n, c))`` does not fall as ``c`` grows, so the feasible counts are ``1..c*``
    (bisection). None when not even ``c = 1`` holds (fewer than ``1 / share`` groups)."""
    sizes = [n for n in counts.values() if n > 0]
    if not sizes:
        return None

    def ok(c: int) -> bool:
        return c <= share * sum(min(n, c) for n in sizes) + 1e-9

    if not ok(1):
        return None
    lo, hi = 1, max(sizes)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def _diversity(steps: list[StepRecord], kernels: Mapping[str, KernelRecord], searched: int,
               cfg: CurateConfig) -> tuple[list[StepRecord], list[RejectRecord], dict]:
    """No operator family above ``cfg.max_family_share`` of the SFT examples and no kernel (with
    the kernels that differ from it only in their shapes: ``shape_group``) above
    ``cfg.max_kernel_share``, once ``searched`` >= ``cfg.diversity_min_kernels``. Within a group
    each kernel's best answers go first (a matmul at two sizes keeps both: shape dependence is
    worth teaching), then the larger measured gain (ties: a seeded hash). Each cut lowers the
    total, so the two caps are applied in turn until both hold."""
    info: dict[str, Any] = {"applied": False, "searched_kernels": searched,
                            "max_family_share": cfg.max_family_share,
                            "max_kernel_share": cfg.max_kernel_share}
    if searched < cfg.diversity_min_kernels:
        info["why_not"] = (f"{searched} searched kernels (the caps apply from "
                           f"{cfg.diversity_min_kernels}: curate.diversity_min_kernels)")
        return steps, [], info
    info["applied"] = True
    kids = sorted({s.kernel_id for s in steps})
    keys = {k: diversity_keys(kernels.get(k), k) for k in kids}
    family = {k: keys[k][0] for k in kids}
    group = {k: keys[k][1] for k in kids}
    order = sorted(steps, key=lambda s: (-_gain(s), _hkey("diversity", cfg.seed, step_key(s))))
    rank: dict[str, int] = {}
    seen: Counter = Counter()
    for s in order:                       # each step's rank among its kernel's answers
        rank[step_key(s)] = seen[s.kernel_id]
        seen[s.kernel_id] += 1
    pos = {step_key(s): i for i, s in enumerate(order)}
    caps = (("kernel_cap", group, cfg.max_kernel_share), ("family_cap", family, cfg.max_family_share))
    kept, rejects = list(steps), []
    cut: dict[str, int | None] = {}
    infeasible: dict[str, str] = {}
    for _ in range(50):
        changed = False
        for code, key, share in caps:
            counts = Counter(key[s.kernel_id] for s in kept)
            c = share_cap(counts, share)
            if c is None:
                infeasible[code] = (f"{len(counts)} groups hold SFT examples; a {share:.0%} cap "
                                    f"needs at least {groups_needed(share)}")
                continue
            cut[code] = c
            if max(counts.values()) <= c:
                continue
            mine: dict[str, list[StepRecord]] = {}
            for s in sorted(kept, key=lambda s: (rank[step_key(s)], pos[step_key(s)])):
                mine.setdefault(key[s.kernel_id], []).append(s)
            drop = {step_key(s): (g, len(v)) for g, v in mine.items() if len(v) > c for s in v[c:]}
            total = len(kept)
            rejects += [_reject(s, code, f"{'family ' + family[s.kernel_id] if code == 'family_cap' else 'kernel group ' + group[s.kernel_id]} "
                                         f"has {drop[step_key(s)][1]} of {total} SFT examples, cap {c} "
                                         f"({share:.0%}; its kernels' best answers stay)")
                        for s in kept if step_key(s) in drop]
            kept = [s for s in kept if step_key(s) not in drop]
            changed = True
        if not changed:
            break
    fam_n = Counter(family[s.kernel_id] for s in kept)
    grp_n = Counter(group[s.kernel_id] for s in kept)
    info.update(family_cap=cut.get("family_cap"), kernel_cap=cut.get("kernel_cap"),
                families=dict(sorted(fam_n.items(), key=lambda kv: (-kv[1], kv[0]))),
                shape_groups=len(grp_n),
                largest_group=max(grp_n.values(), default=0),
                rejected={c: sum(1 for r in rejects if r.reason.startswith(c)) for c, _, _ in caps})
    if infeasible:
        info["cannot_hold"] = infeasible
    return kept, rejects, info


def _content_problem(s: StepRecord, ancestors_of, known: set[str], cfg: CurateConfig,
                     note: Note) -> tuple[str, str] | None:
    """The rules about what a step says (not how it measured): no_op ... too_long."""
    cb, ca = _before_key(s), _after_key(s)
    if s.before_leir == s.after_leir:
        return "no_op", ""
    if cb == ca:    # equal up to renaming: only then is it worth printing both
        return ("no_op", "") if _printed(s.before_leir) == _printed(s.after_leir) else ("rename_only", "")
    if ca in (anc := ancestors_of(s)):
        return "shortcut", f"returns to the program before step {anc[ca]}"
    if cfg.require_cot and note.problem is not None:
        return note.problem
    if s.kernel_id not in known:
        return "unknown_kernel", s.kernel_id
    if note.tokens_over is not None:
        return "too_long", f"{note.tokens_over} tokens > {cfg.max_tokens}"
    return None


def _measured_speedup(s: StepRecord) -> str:
    """The speedup the measured direction comes from (``steptp.cot.validate.measured_direction``)."""
    if s.paired_before and s.paired_after and s.paired_after.median_s > 0:
        return f"{s.paired_before.median_s / s.paired_after.median_s:.3g}x re-timed interleaved"
    return f"{s.step_speedup:.3g}x"


def curate(kernels: Sequence[KernelRecord], steps: Sequence[StepRecord],
           trajectories: Sequence[TrajectoryRecord] = (), config: Curate | None = None,
           hardware: str = "", rule: SignificanceRule | None = None,
           pinned: Mapping[str, str] | None = None,
           search_stats: Mapping[str, Any] | None = None,
           notes: Mapping[str, Note] | None = None) -> CurateResult:
    """Apply the rules to ``steps``; see the package docstring. ``hardware`` is the description
    the chat examples name (used for the token limit); ``rule``: the ``significance`` settings
    (the rule the search confirmed roles with); ``pinned``: kernel splits kept from a previous
    release (``assign_splits``); ``search_stats``: what the search stage cost
    (``steptp.search.stage_stats``), passed on to the report for the card's yield line;
    ``notes``: what each step's reasoning says (``steptp.curate.reasoning``), for rows read
    without it (``read_steps``); computed here for the others."""
    from .pairs import select_pairs
    from ..search.roles import SFT_ROLES, assign_roles, role_counts

    cfg = config or Curate()
    rule = rule or SignificanceRule()
    known = {k.kernel_id for k in kernels}
    notes = notes_of(steps, hardware, cfg.max_tokens, notes)
    ordered = assign_roles(sorted(steps, key=lambda s: (s.trajectory_id, s.step_index, step_key(s))), rule)
    # A search's rows form a tree (rows share a trajectory_id; step_index is the depth; a row's
    # before-program is its parent row's after-program). The ancestors of a row are the programs
    # on its path from the root: its before-program, its parent's before-program, ...
    by_after: dict[tuple[str, str], StepRecord] = {}
    for s in ordered:
        if s.verified:
            by_after.setdefault((s.trajectory_id, _after_key(s)), s)

    def ancestors_of(s: StepRecord) -> dict[str, int]:
        seen: dict[str, int] = {}
        cur: StepRecord | None = s
        while cur is not None and len(seen) <= len(ordered):
            c = _before_key(cur)
            if c in seen:
                break
            seen[c] = cur.step_index
            parent = by_after.get((cur.trajectory_id, c))
            cur = parent if parent is not None and parent.step_index == cur.step_index - 1 else None
        return seen

    rejects: list[RejectRecord] = []
    eligible: list[StepRecord] = []
    content_ok: set[str] = set()
    pairs_seen: dict[tuple[str, str], StepRecord] = {}
    for s in ordered:
        code, detail = None, ""
        if not s.verified or s.outcome in FAILED_OUTCOMES:
            code, detail = "unverified", f"outcome {s.outcome}" + (f": {s.reason[:160]}" if s.reason else "")
        elif s.before is None or s.after is None or s.step_speedup is None \
                or not math.isfinite(s.step_speedup) or s.step_speedup <= 0:
            code, detail = "unmeasured", f"speedup {s.step_speedup}"
        elif (cp := _content_problem(s, ancestors_of, known, cfg, nt := notes[key := step_key(s)])) is not None:
            code, detail = cp
        else:
            content_ok.add(key)
            if s.role not in SFT_ROLES:
                b, a = s.paired_before or s.before, s.paired_after or s.after
                if rule.compare(b, a) == "noisy":
                    code, detail = "noisy", _spread_problem(s, rule.max_spread) or "paired re-timing too noisy"
                else:
                    code, detail = s.role, s.role_detail
            elif nt.coherence:
                # no argument leads to this step (steptp.cot.coherence): its reasoning would
                # teach a conclusion that does not follow; it stays a rejected side and a
                # reward state
                code, detail = "incoherent", "; ".join(nt.coherence)[:300]
            elif nt.prediction_agrees is False:
                # the reasoning states what it expects (no hindsight); an SFT answer
                # whose stated expectation the measurement contradicts would teach the wrong why
                code, detail = "prediction_disagrees", (
                    f"the reasoning predicts {nt.predicted}, the measurement says "
                    f"{nt.direction} ({_measured_speedup(s)})")
            elif (k := (_before_key(s), _after_key(s))) in pairs_seen:
                o = pairs_seen[k]
                code, detail = "duplicate", f"same as {o.trajectory_id}:{o.step_index}"
            else:
                pairs_seen[k] = s
        if code is None:
            eligible.append(s)
        else:
            rejects.append(_reject(s, code, detail))

    # one answer per distinct prompt (the user turn is the before-program): the child through
    # which the search measured the fastest program is the SFT answer (siblings ranked on the
    # search's own timings, see roles.search_best_s); the others go to the preference pairs
    from ..search.roles import Tree

    tree = Tree(ordered)
    best_after = {step_key(s): ordered[tree.best_descendant(i)].after if s.after is not None else None
                  for i, s in enumerate(ordered)}
    fastest = {k: (t.median_s if t is not None else None) for k, t in best_after.items()}
    by_prompt: dict[str, list[StepRecord]] = {}
    for s in eligible:
        by_prompt.setdefault(s.before_leir, []).append(s)
    # among children whose best programs the rule cannot tell apart from the fastest one, the
    # answer is the one of the strategy fewest eligible steps have: the same gain, taught
    # with the move the release would otherwise never show (a compute_at that ties a tile)
    rarity = Counter(s.strategy for s in eligible)
    answer: dict[str, StepRecord] = {}
    for prompt, group in by_prompt.items():
        top = min(group, key=lambda x: (fastest[step_key(x)], step_key(x)))
        tied = [x for x in group if x is top or rule.compare(best_after[step_key(x)],
                                                            best_after[step_key(top)]) == "same"]
        answer[prompt] = min(tied, key=lambda x: (rarity[x.strategy], fastest[step_key(x)], step_key(x)))
    kept: list[StepRecord] = []
    for s in eligible:
        best = answer[s.before_leir]
        if best is s:
            kept.append(s)
        else:
            rejects.append(_reject(s, "alternative", f"step {step_key(best)} ({best.strategy}) "
                                                     f"is the answer to this prompt"))

    kept, rrej = _repetition_cap(kept, cfg)
    rejects += rrej
    before_counts = strategy_counts(kept)
    kept, brej, binfo = _balance(kept, cfg)
    rejects += brej
    kept, drej, dinfo = _diversity(kept, {k.kernel_id: k for k in kernels},
                                   len({s.kernel_id for s in steps if s.kernel_id in known}), cfg)
    rejects += drej
    after_counts = strategy_counts(kept)
    sft = {step_key(s) for s in kept}

    pairs = select_pairs(ordered, sft, content_ok, rule, cfg, notes)
    all_steps = ordered
    sft_steps = [s for s in all_steps if step_key(s) in sft]

    groups = workload_groups(kernels, max_size=group_bound(cfg.splits, len(kernels)))
    weights = Counter(s.kernel_id for s in sft_steps)
    kinds = _group_kinds(kernels)
    splits = assign_splits(groups, weights, cfg.splits, cfg.seed, kinds=kinds, pinned=pinned) if groups else {}
    workloads_of = {k.kernel_id: sorted({o.workload for o in k.occurrences}) for k in kernels}
    group_rows = [{"kernels": g, "workloads": sorted({w for k in g for w in workloads_of[k]}),
                   "kind": kinds.get(g[0], "ops"),
                   "split": splits[g[0]], "steps": sum(weights.get(k, 0) for k in g)} for g in groups]

    rejects.sort(key=lambda r: (r.trajectory_id, r.step_index, r.step_key))
    reason_counts = Counter(r.reason.split(":", 1)[0] for r in rejects)
    split_steps = Counter(splits.get(s.kernel_id, "?") for s in sft_steps)
    split_pairs = Counter(splits.get(p["kernel_id"], "?") for p in pairs)
    report = {
        "input_steps": len(steps), "kept_steps": len(sft_steps), "rejected_steps": len(rejects),
        "rejects_by_reason": dict(sorted(reason_counts.items())),
        "reason_meanings": {k: REASONS.get(k, "") for k in sorted(reason_counts)},
        "roles": role_counts(all_steps),
        "sft_roles": {r: n for r, n in role_counts(sft_steps).items() if n},
        "pairs": len(pairs),
        "strategy_counts_before_balance": before_counts,
        "strategy_counts_after_balance": after_counts,
        "entropy_before_bits": round(entropy(before_counts), 4),
        "entropy_after_bits": round(entropy(after_counts), 4),
        "balance": binfo,
        "diversity": dinfo,
        "search_stage": dict(search_stats) if search_stats else None,
        "splits": {sp: {"kernels": sum(1 for v in splits.values() if v == sp),
                        "groups": sum(1 for g in group_rows if g["split"] == sp),
                        "step_groups": sum(1 for g in group_rows if g["split"] == sp and g["steps"]),
                        "steps": split_steps.get(sp, 0), "pairs": split_pairs.get(sp, 0)}
                   for sp in cfg.splits},
        "groups_with_steps": sum(1 for g in group_rows if g["steps"]),
        # the rule's keys beside curation's: the release card's significance section reads them
        "config": {**cfg.model_dump(), **rule.model_dump()},
    }
    return CurateResult(sft_steps, rejects, splits, group_rows, report, all_steps=all_steps, pairs=pairs)


# ---------------------------------------------------------------------------- files
def write_curated(result: CurateResult, out: str | Path, kernels: Sequence[KernelRecord],
                  trajectories: Sequence[TrajectoryRecord], texts: Texts | None = None) -> Path:
    """``out/``: kernels, steps (SFT), all-steps (every step with its role), trajectories,
    rejects (parquet), pairs.json, splits.json, report.json. ``texts``: the reasoning of rows
    read without it (``steptp.curate.reasoning.read_steps``), joined back."""
    out = Path(out)

    def steps_table(rows: Sequence[StepRecord]) -> pl.DataFrame:
        t = table(rows, StepRecord)
        return t if texts is None else with_texts(t, [step_key(r) for r in rows], texts)

    write_table(table(kernels, KernelRecord), out / "kernels.parquet")
    write_table(steps_table(result.steps), out / "steps.parquet")
    write_table(steps_table(result.all_steps), out / "all-steps.parquet")
    write_text_atomic(out / "pairs.json", json.dumps(result.pairs, indent=0, sort_keys=True) + "\n")
    write_table(table(trajectories, TrajectoryRecord), out / "trajectories.parquet")
    write_table(table(result.rejects, RejectRecord), out / "rejects.parquet")
    write_text_atomic(out / "splits.json", json.dumps({"splits": result.splits, "groups": result.groups},
                                                      indent=1, sort_keys=True) + "\n")
    write_text_atomic(out / "report.json", json.dumps(result.report, indent=1) + "\n")
    return out


def read_curated(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    sp = json.loads((path / "splits.json").read_text())
    return {"kernels": read_records(path / "kernels.parquet", KernelRecord),
            "steps": read_records(path / "steps.parquet", StepRecord),
            "all_steps": (read_records(path / "all-steps.parquet", StepRecord)
                          if (path / "all-steps.parquet").exists() else None),
            "pairs": json.loads((path / "pairs.json").read_text()) if (path / "pairs.json").exists() else [],
            "trajectories": read_records(path / "trajectories.parquet", TrajectoryRecord),
            "rejects": read_records(path / "rejects.parquet", RejectRecord),
            "splits": sp["splits"], "groups": sp["groups"],
            "report": json.loads((path / "report.json").read_text())}
