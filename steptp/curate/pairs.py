"""Preference pairs: for one prompt (a before-program), a better answer and a worse one.

    pairs = select_pairs(steps_with_roles, sft_keys, content_ok, rule, cfg, notes)

Children of a prompt are the rows whose ``before_leir`` is that program. A pair
``(chosen, rejected)`` needs:

* ``chosen``: measured, passing every content rule (``content_ok``: not a no-op, renaming or
  shortcut, with a valid CoT, within the token limit), and with an SFT role (``improving``:
  significantly faster than the before-program; or ``preparatory``: on a path whose best
  measured program is): a step that is neutral or regressing and leads nowhere faster teaches
  nothing as the preferred answer; and with reasoning that argues for it (no problem in
  ``cot["coherence"]``, :mod:`steptp.cot.coherence`): the preferred text is learned as much as
  an SFT answer is;
* ``rejected``: another child with a different after-program that either ``failed`` (did not
  build, verify or finish; nothing is compared) or whose after-program is significantly slower
  than the chosen one's, compared step against step (below);
* never inverted: the rejected side's best descendant must not be significantly faster than the
  chosen side's (the same comparison on the best programs measured through each; a comparison
  too noisy to decide does not clear it).

*Step against step*: the two children's own after-programs, each relative to the shared
before-program, by the one ``SignificanceRule``. Not their best descendants: how deep the search
explored under a child is the search's choice, not the child's merit, so a child with a slower
step but a deeper subtree would win a comparison of best descendants. The timings are the
interleaved re-timings (``paired_before``/``paired_after``) when BOTH children have them (each
side's after-program relative to its own re-timed before-program: the two re-timings ran at
different times, so their absolute medians are not comparable), else the search's timings (the
siblings share the one timing of their before-program, so their after-medians compare directly).
The best-descendant check picks its timings the same way (``paired_best``).

Each pair's ``timings`` (spread into the released pair's ``meta``, :data:`PAIR_TIMING_FIELDS`)
say which timing decided it (``compared_on``: ``paired_speedup``, ``step_speedup``, or ``failed``
when the rejected side failed; ``best_compared_on`` likewise for the best-descendant check) and,
per side (``chosen_``/``rejected_``), one speedup per timing source:

* ``*_step_speedup``: before / after, the search's medians (``steps.step_speedup``);
* ``*_paired_speedup``: before / after, the interleaved re-timing (None if not re-timed);
* ``*_best_speedup``: before / the best descendant's after, the search's medians;
* ``*_paired_best_speedup``: the same from the interleaved re-timing (None if not re-timed).

Pairs whose ``chosen`` is the prompt's SFT answer come first; then the others; within each a
seeded hash orders them; at most ``cfg.max_pairs_per_state`` per prompt, so one state cannot
dominate. A rejected answer needs its chain of thought from the CoT stage (which also writes
the failed candidates beside a measured one, ``steptp.cot.run.needs_reasoning``); one without,
or whose chat example is too long, is not used.

Each pair is a dict of step keys and labels (``steptp.export.pairs`` renders the messages).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Literal, Mapping, Optional, Sequence

from ..measure.significance import SignificanceRule, Verdict
from ..records import StepRecord, Timing
from ..search.roles import SFT_ROLES, Tree, measured
from .reasoning import Note

Source = Literal["paired", "search"]

#: Per side (``chosen_``/``rejected_`` + each), one speedup per timing source; and which timing
#: decided the pair (``compared_on``) and its best-descendant check (``best_compared_on``).
SIDE_TIMING_FIELDS = ("step_speedup", "paired_speedup", "best_speedup", "paired_best_speedup")
PAIR_TIMING_FIELDS = tuple(f"{side}_{f}" for side in ("chosen", "rejected") for f in SIDE_TIMING_FIELDS) + (
    "compared_on", "best_compared_on")

# the pair field named after the timing that decided it
_COMPARED_ON = {"paired": "paired_speedup", "search": "step_speedup"}
_BEST_COMPARED_ON = {"paired": "paired_best_speedup", "search": "best_speedup"}


def _h(*parts: Any) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def _step_timings(s: StepRecord, source: Source) -> Optional[tuple[Timing, Timing]]:
    if source == "paired":
        ok = s.paired_before is not None and s.paired_after is not None
        return (s.paired_before, s.paired_after) if ok else None
    return s.before, s.after


def _best_timings(s: StepRecord, best: StepRecord, source: Source) -> Optional[tuple[Timing, Timing]]:
    """(before, best descendant's after); ``best`` is ``s`` when it is its own best."""
    if source == "paired":
        if s.paired_before is None:
            return None
        b = s.paired_best if s.paired_best is not None else (s.paired_after if best is s else None)
        return (s.paired_before, b) if b is not None else None
    return s.before, best.after


def _relative(before: Timing, after: Timing) -> Timing:
    """``after`` in units of its own ``before`` median; the before-program's noise counts too."""
    return after.model_copy(update={"median_s": after.median_s / before.median_s,
                                    "min_s": after.min_s / before.median_s,
                                    "spread": max(after.spread, before.spread)})


def _versus(rule: SignificanceRule, chosen: tuple[Timing, Timing], rejected: tuple[Timing, Timing]) -> Verdict:
    """Is the chosen side's after-program significantly faster than the rejected side's
    ("faster"), slower, ...: both relative to the shared before-program."""
    (cb, ca), (rb, ra) = chosen, rejected
    if cb == rb:   # one timing of the before-program (siblings of one search): its noise cancels
        return rule.compare(ra, ca)
    return rule.compare(_relative(rb, ra), _relative(cb, ca))


def _pick(pairs_c, pairs_r) -> Source:
    return "paired" if pairs_c is not None and pairs_r is not None else "search"


def _ratio(t: Optional[tuple[Timing, Timing]]) -> Optional[float]:
    return t[0].median_s / t[1].median_s if t else None


def side_speedups(s: StepRecord, best: StepRecord) -> dict[str, Optional[float]]:
    """One speedup per timing source for a measured step (:data:`SIDE_TIMING_FIELDS`); all None
    for a failed one. ``best``: the step's best descendant row (``Tree.best_descendant``)."""
    if not measured(s):
        return dict.fromkeys(SIDE_TIMING_FIELDS)
    return {"step_speedup": _ratio(_step_timings(s, "search")),
            "paired_speedup": _ratio(_step_timings(s, "paired")),
            "best_speedup": _ratio(_best_timings(s, best, "search")),
            "paired_best_speedup": _ratio(_best_timings(s, best, "paired"))}


def compare_siblings(rule: SignificanceRule, c: StepRecord, c_best: StepRecord, r: StepRecord,
                     r_best: StepRecord) -> Optional[dict[str, Any]]:
    """Whether measured sibling ``c`` may be preferred to measured sibling ``r``: its step is
    significantly faster (step against step) and ``r``'s best descendant is not significantly
    faster than ``c``'s (nor too noisy to tell). Returns the deciding fields (``compared_on``,
    ``best_compared_on``, ``margin_log``: ln of the rejected over the chosen relative
    after-time), or None."""
    src = _pick(_step_timings(c, "paired"), _step_timings(r, "paired"))
    tc, tr = _step_timings(c, src), _step_timings(r, src)
    if _versus(rule, tc, tr) != "faster":
        return None
    bsrc = _pick(_best_timings(c, c_best, "paired"), _best_timings(r, r_best, "paired"))
    if _versus(rule, _best_timings(c, c_best, bsrc), _best_timings(r, r_best, bsrc)) in ("slower", "noisy"):
        return None
    margin = math.log((tr[1].median_s / tr[0].median_s) / (tc[1].median_s / tc[0].median_s))
    return {"compared_on": _COMPARED_ON[src], "best_compared_on": _BEST_COMPARED_ON[bsrc], "margin_log": margin}


def select_pairs(steps: Sequence[StepRecord], sft: set[str], content_ok: set[str],
                 rule: SignificanceRule, cfg, notes: Mapping[str, Note]) -> list[dict[str, Any]]:
    """The pairs. ``steps`` carry their roles (``steptp.search.roles.assign_roles``); ``notes``:
    what each one's reasoning says, by step key (``steptp.curate.reasoning``)."""
    steps = list(steps)
    tree = Tree(steps)
    keys = tree.keys
    best_of = {i: tree.best_descendant(i) for i, s in enumerate(steps) if measured(s)}

    def best(i: int) -> StepRecord:
        return steps[best_of[i]]

    by_prompt: dict[str, list[int]] = {}
    for i, s in enumerate(steps):
        by_prompt.setdefault(s.before_leir, []).append(i)
    pairs: list[dict[str, Any]] = []
    cap = cfg.max_pairs_per_state
    for prompt in sorted(by_prompt, key=lambda p: _h("prompt", p)):
        kids = by_prompt[prompt]
        if len(kids) < 2 or cap <= 0:
            continue
        cand = []
        for c in kids:
            if keys[c] not in content_ok or c not in best_of or steps[c].role not in SFT_ROLES \
                    or notes[keys[c]].coherence:
                continue
            for r in kids:
                if r == c or steps[r].after_leir == steps[c].after_leir:
                    continue
                if steps[r].role == "failed":
                    why, decided = "failed", {"compared_on": "failed", "best_compared_on": "failed",
                                              "margin_log": None}
                elif r in best_of and (decided := compare_siblings(rule, steps[c], best(c), steps[r], best(r))):
                    why = "slower"
                else:
                    continue
                cand.append((0 if keys[c] in sft else 1, _h("pair", cfg.seed, keys[c], keys[r]), c, r, why, decided))
        cand.sort(key=lambda x: x[:4])
        used = 0
        for _, _, c, r, why, decided in cand:
            if used >= cap:
                break
            nr = notes[keys[r]]      # a rejected text is needed, and one that fits
            if (cfg.require_cot and not nr.has_text) or nr.tokens_over is not None:
                continue
            rs = steps[r]
            cs = steps[c]
            timings = {f"{side}_{k}": v for side, i in (("chosen", c), ("rejected", r))
                       for k, v in side_speedups(steps[i], best(i) if i in best_of else steps[i]).items()}
            margin = decided["margin_log"]
            pairs.append({
                "pair_key": _h("pairkey", keys[c], keys[r])[:16], "kernel_id": cs.kernel_id,
                "trajectory_id": cs.trajectory_id, "step_index": cs.step_index,
                "chosen": keys[c], "rejected": keys[r], "chosen_role": cs.role, "rejected_role": rs.role,
                "chosen_is_sft": keys[c] in sft, "rejected_why": why, "margin_log": margin,
                "timings": {**timings, **{k: v for k, v in decided.items() if k != "margin_log"}},
            })
            used += 1
    pairs.sort(key=lambda p: (p["trajectory_id"], p["step_index"], p["pair_key"]))
    return pairs


__all__ = ["PAIR_TIMING_FIELDS", "SIDE_TIMING_FIELDS", "compare_siblings", "select_pairs", "side_speedups"]
