"""Curation: from every searched step to the steps a release keeps, and why the others went.

    result = curate(kernels, steps, trajectories, CurateConfig(seed=0))
    result.steps      # kept StepRecords, in (trajectory_id, step_index) order
    result.rejects    # one RejectRecord per dropped step; ``reason`` starts with a code
    result.splits     # kernel_id -> "train" | "validation" | "test"
    result.report     # counts, strategy distribution before/after balancing and its entropy

The rules, applied in this order (a step is rejected by the first rule it fails):

1. ``unverified`` — not verified, or its outcome is a failure (grounded: never released);
2. ``unmeasured`` — no before/after timing, or a speedup that is not finite and positive;
3. ``noisy`` — a before or after timing with spread (IQR/median) above ``max_spread``;
4. ``no_op`` — the after-program prints the same as the before-program;
5. ``rename_only`` — the only change is renaming (equal canonical text);
6. ``shortcut`` — the after-program equals an ancestor in its trajectory (it undoes an earlier
   step: an inverse pair, or a return to any earlier program);
7. ``no_cot`` / ``cot_invalid`` — (with ``require_cot``) no reasoning, or reasoning that does not
   parse with the CoT schema;
8. ``too_long`` — the chat example exceeds ``max_tokens`` (o200k_base);
9. ``duplicate`` — the canonical (before, after) pair was already kept;
10. ``unknown_kernel`` — the step's kernel is not in the kernels table;
11. ``balance`` — its strategy is above the cap (``balance_factor`` × the median strategy count,
    applied when there are at least ``balance_min_steps`` steps and ``balance_min_strategies``
    strategies); the kept ones are chosen by a seeded hash, so it is deterministic.

Splits are by workload: kernels that share a workload (an architecture or an operator suite
entry, from ``KernelRecord.occurrences``) form one group (connected components), and whole
groups are assigned to train/validation/test, deterministic given the seed.
"""

from .core import (REASONS, CurateConfig, CurateResult, curate, entropy, strategy_counts,
                   workload_groups, assign_splits, read_curated, write_curated)

__all__ = ["REASONS", "CurateConfig", "CurateResult", "curate", "entropy", "strategy_counts",
           "workload_groups", "assign_splits", "read_curated", "write_curated"]
