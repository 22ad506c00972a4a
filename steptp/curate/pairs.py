"""Preference pairs: for one prompt (a before-program), a better answer and a worse one.

    steps, pairs = select_pairs(steps_with_roles, sft_keys, content_ok, rule, cfg)

Children of a prompt are the rows whose ``before_leir`` is that program. A pair
``(chosen, rejected)`` needs:

* ``chosen``: measured and passing every content rule (``content_ok``: not a no-op, renaming or
  shortcut, with a valid CoT, within the token limit), and
* ``rejected``: another child with a different after-program that is either ``failed`` (did not
  build, verify or finish) or whose best measured program (itself or a descendant) is
  significantly slower than the chosen one's (the same ``SignificanceRule``).

Pairs whose ``chosen`` is the prompt's SFT answer come first; then the others; within each a
seeded hash orders them; at most ``cfg.max_pairs_per_state`` per prompt, so one state cannot
dominate. Rejected answers without a chain of thought (failed candidates are not explained by
the CoT stage) get one from the offline template writer (``steptp.cot.run.explained``); one whose CoT cannot be written, or
whose chat example is too long, is not used.

Each pair is a dict of step keys and labels (``steptp.export.pairs`` renders the messages).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Sequence

from ..measure.significance import SignificanceRule
from ..records import StepRecord
from ..search.roles import Tree, measured


def _h(*parts: Any) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def select_pairs(steps: Sequence[StepRecord], sft: set[str], content_ok: set[str],
                 rule: SignificanceRule, cfg, hardware: str = "") -> tuple[list[StepRecord], list[dict[str, Any]]]:
    """Returns (``steps`` with template CoT filled in for the rejected answers that lacked one,
    the pairs)."""
    from ..cot.run import explained
    from ..format.chat import example_tokens

    steps = list(steps)
    tree = Tree(steps)
    keys = tree.keys
    best_t = {}
    for i, s in enumerate(steps):
        if measured(s):
            best_t[i] = steps[tree.best_descendant(i)].after
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
            if keys[c] not in content_ok or c not in best_t:
                continue
            for r in kids:
                if r == c or steps[r].after_leir == steps[c].after_leir:
                    continue
                if steps[r].role == "failed":
                    why = "failed"
                elif r in best_t and rule.compare(best_t[r], best_t[c]) == "faster":
                    why = "slower"
                else:
                    continue
                cand.append((0 if keys[c] in sft else 1, _h("pair", cfg.seed, keys[c], keys[r]), c, r, why))
        cand.sort()
        used = 0
        for _, _, c, r, why in cand:
            if used >= cap:
                break
            rej = explained(steps[r], cfg.seed)
            if rej is None or example_tokens(rej, hardware) > cfg.max_tokens:
                continue
            steps[r] = rej
            cs, rs = steps[c], rej
            pairs.append({
                "pair_key": _h("pairkey", keys[c], keys[r])[:16], "kernel_id": cs.kernel_id,
                "trajectory_id": cs.trajectory_id, "step_index": cs.step_index,
                "chosen": keys[c], "rejected": keys[r], "chosen_role": cs.role, "rejected_role": rs.role,
                "chosen_is_sft": keys[c] in sft, "rejected_why": why,
                "chosen_best_speedup": cs.best_descendant_speedup,
                "rejected_best_speedup": rs.best_descendant_speedup,
                "margin_log": (math.log(best_t[r].median_s / best_t[c].median_s) if r in best_t else None),
            })
            used += 1
    pairs.sort(key=lambda p: (p["trajectory_id"], p["step_index"], p["pair_key"]))
    return steps, pairs


__all__ = ["select_pairs"]
