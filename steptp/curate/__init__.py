"""Curation: from every searched step to what a model learns from, and why the others went.

    result = curate(kernels, steps, trajectories, CurateConfig(seed=0))
    result.steps      # the SFT examples (improving / preparatory), in (trajectory_id, step_index) order
    result.all_steps  # every input step with its role (``steptp.search.roles``): rewards, negatives
    result.pairs      # preference pairs (``steptp.curate.pairs``): step keys of chosen / rejected
    result.rejects    # one RejectRecord per step that is not an SFT example; ``reason`` starts with a code
    result.splits     # kernel_id -> "train" | "validation" | "test"
    result.report     # counts, roles, strategy distribution before/after balancing and its entropy

Roles come from the measurements by one significance rule (``steptp.measure.significance``,
parameters ``min_gain``, ``spread_factor``, ``max_spread``); the SFT rules, in this order (a step is
rejected by the first rule it fails):

1. ``unverified`` — not verified, or its outcome is a failure (grounded: never an SFT example);
2. ``unmeasured`` — no before/after timing, or a speedup that is not finite and positive;
3. ``no_op`` — the after-program prints the same as the before-program;
4. ``rename_only`` — the only change is renaming (equal canonical text);
5. ``shortcut`` — the after-program equals an ancestor in its trajectory (it undoes an earlier
   step: an inverse pair, or a return to any earlier program);
6. ``no_cot`` / ``cot_invalid`` — (with ``require_cot``) no reasoning, or reasoning that does not
   parse with the CoT schema;
7. ``unknown_kernel`` — the step's kernel is not in the kernels table;
8. ``too_long`` — the chat example exceeds ``max_tokens`` (o200k_base);
9. ``noisy`` / ``neutral`` / ``regressing`` — its role is not ``improving`` or ``preparatory``
   (``noisy``: the rule could not decide, a timing's spread is above ``max_spread``);
10. ``duplicate`` — the canonical (before, after) pair was already kept;
11. ``alternative`` — another child of the same before-program (the same prompt) led to a faster
    measured program (the search's own timings, so a re-timed sibling is not favoured), or
    one whose best program the significance rule cannot tell apart from the fastest has a
    strategy fewer eligible steps have: one answer per distinct prompt; the others go to the
    pairs;
12. ``balance`` — its strategy is above the cap (no strategy above ``max_strategy_share`` of the SFT examples,
    applied when there are at least ``balance_min_steps`` steps and ``balance_min_strategies``
    strategies) among the SFT-eligible steps; within a strategy the larger measured gains stay
    (ties: a seeded hash), so it is deterministic.

Splits are by workload: kernels that share a workload (an architecture or an operator suite
entry, from ``KernelRecord.occurrences``) form one group (connected components), and whole
groups are assigned to train/validation/test by a seeded hash of the group (its anchor against
the fractions), so a kernel stays in its split from build to build whatever the timings, and
when the zoo grows; a group too big for a small split is in train. Only when a split would have
no SFT steps (at least three groups have steps) does it take the group with steps nearest to it,
and the test split an architecture group and an operator group when there is one of each to
spare (``assign_splits``). Deterministic given the seed.
"""

from .core import (REASONS, CurateConfig, CurateResult, curate, entropy, strategy_counts,
                   workload_groups, assign_splits, read_curated, write_curated)
from ..search.roles import ROLES, SFT_ROLES, assign_roles

__all__ = ["REASONS", "CurateConfig", "CurateResult", "curate", "entropy", "strategy_counts",
           "workload_groups", "assign_splits", "read_curated", "write_curated", "ROLES", "SFT_ROLES",
           "assign_roles"]
