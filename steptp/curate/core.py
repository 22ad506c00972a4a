"""Curation rules, strategy balancing and workload-level splits (see the package docstring)."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..records import (KernelRecord, RejectRecord, StepRecord, TrajectoryRecord, read_records, table,
                       write_table, write_text_atomic)

SPLITS = ("train", "validation", "test")
FAILED_OUTCOMES = frozenset({"failed_verify", "failed_build", "timeout", "crashed", "illegal"})

# reason code -> what it means (the card and the rejects table use the codes)
REASONS: dict[str, str] = {
    "unverified": "not verified against the reference, or a failed outcome",
    "unmeasured": "missing timing, or a speedup that is not finite and positive",
    "noisy": "a timing with spread (IQR/median) above the threshold",
    "no_op": "the after-program prints the same as the before-program",
    "rename_only": "the only change is renaming (equal canonical text)",
    "shortcut": "undoes an earlier step of its trajectory (returns to an ancestor program)",
    "no_cot": "no chain of thought",
    "cot_invalid": "the chain of thought does not parse with the CoT schema",
    "too_long": "the chat example exceeds the token limit",
    "duplicate": "the canonical (before, after) pair is already in the release",
    "unknown_kernel": "the step's kernel is not in the kernels table",
    "balance": "its strategy is above the balancing cap",
}


class CurateConfig(BaseModel):
    """Curation parameters (``params.yaml`` → ``curate``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    max_spread: float = Field(0.25, gt=0, description="reject timings with IQR/median above this")
    balance_factor: float = Field(3.0, gt=0, description="cap = factor x median strategy count")
    balance_min_steps: int = Field(30, ge=0, description="balance only with at least this many steps")
    balance_min_strategies: int = Field(3, ge=1, description="... and this many strategies")
    require_cot: bool = True
    max_tokens: int = Field(16384, ge=1, description="token limit of one chat example (o200k_base)")
    splits: dict[str, float] = Field(default_factory=lambda: {"train": 0.8, "validation": 0.1,
                                                               "test": 0.1})


@dataclass
class CurateResult:
    steps: list[StepRecord]
    rejects: list[RejectRecord]
    splits: dict[str, str]                       # kernel_id -> split
    groups: list[dict[str, Any]]                 # the workload groups and their split
    report: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- helpers
@functools.lru_cache(maxsize=4096)
def _canon(text: str) -> str:
    """Canonical text (renaming forgiven, kernel name ignored); the raw text when unparsable."""
    from dataclasses import replace

    from ..leir import format_program, parse
    from ..leir.canon import canonicalize

    try:
        return format_program(replace(canonicalize(parse(text))[0], name="k"))
    except Exception:  # noqa: BLE001 - an unparsable program compares by its text
        return text


def _plain(text: str) -> str:
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


def step_key(step: StepRecord) -> str:
    """A row's identity (a search's rows share trajectory_id and step_index = depth)."""
    return _hkey(step.trajectory_id, step.step_index, step.strategy, json.dumps(step.site, sort_keys=True),
                 json.dumps(step.params, sort_keys=True), step.before_leir, step.after_leir)[:16]


def _reject(step: StepRecord, code: str, detail: str = "") -> RejectRecord:
    return RejectRecord(trajectory_id=step.trajectory_id, step_index=step.step_index,
                        kernel_id=step.kernel_id, strategy=step.strategy,
                        reason=f"{code}: {detail}" if detail else code)


def _spread_problem(step: StepRecord, max_spread: float) -> str | None:
    for name, t in (("before", step.before), ("after", step.after)):
        if t is None:
            continue
        if not math.isfinite(t.spread) or t.spread > max_spread:
            return f"{name} spread {t.spread:.3g} > {max_spread:g}"
    return None


def _cot_problem(step: StepRecord) -> tuple[str, str] | None:
    if not step.cot and not step.cot_text.strip():
        return ("no_cot", "")
    if step.cot:
        try:
            from ..cot.schema import cot_from_record

            cot_from_record(step.cot)
        except Exception as e:  # noqa: BLE001 - pydantic / version errors
            return ("cot_invalid", str(e).splitlines()[0][:200])
    return None


# ---------------------------------------------------------------------------- splits
def workload_groups(kernels: Sequence[KernelRecord]) -> list[list[str]]:
    """Kernel ids grouped so that kernels sharing a workload are together (connected components
    of the kernel–workload graph). Groups and their members are sorted."""
    parent: dict[str, str] = {k.kernel_id: k.kernel_id for k in kernels}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    first_of: dict[str, str] = {}
    for k in kernels:
        for o in k.occurrences:
            w = o.workload
            if w in first_of:
                a, b = find(first_of[w]), find(k.kernel_id)
                if a != b:
                    parent[max(a, b)] = min(a, b)
            else:
                first_of[w] = k.kernel_id
    comps: dict[str, list[str]] = {}
    for kid in parent:
        comps.setdefault(find(kid), []).append(kid)
    return sorted(sorted(v) for v in comps.values())


def assign_splits(groups: Sequence[Sequence[str]], weights: Mapping[str, int], fractions: Mapping[str, float],
                  seed: int = 0) -> dict[str, str]:
    """Assign whole groups to splits. Groups that carry steps (``weights``: steps per kernel) are
    placed first, by their step counts, so every split with a positive fraction gets examples
    whenever there are enough such groups; groups without steps are then placed by their kernel
    counts (they only populate the kernels table)."""
    names = [s for s in fractions if fractions[s] > 0]
    if not names:
        raise ValueError("no split has a positive fraction")
    total_f = sum(fractions[s] for s in names)
    frac = {s: fractions[s] / total_f for s in names}

    def steps_of(g: Sequence[str]) -> int:
        return sum(weights.get(k, 0) for k in g)

    out = _fill(names, frac, [g for g in groups if steps_of(g) > 0], steps_of, seed)
    out.update(_fill(names, frac, [g for g in groups if steps_of(g) <= 0], len, seed))
    return out


def _fill(names: list[str], frac: Mapping[str, float], groups: Sequence[Sequence[str]],
          size, seed: int) -> dict[str, str]:
    """Seeded order, then each group goes to the split furthest below its target share. When
    there are at least as many groups as splits, every split gets a group first (smallest groups
    to the smallest splits)."""
    order = sorted(groups, key=lambda g: _hkey("split", seed, g[0]))
    w = [max(1, size(g)) for g in order]
    total = sum(w)
    got = {s: 0 for s in names}
    out: dict[str, str] = {}
    idx = list(range(len(order)))
    if len(order) >= len(names):
        by_size = sorted(idx, key=lambda i: (w[i], _hkey("split", seed, order[i][0])))
        for s, i in zip(sorted(names, key=lambda s: (frac[s], s)), by_size):
            for k in order[i]:
                out[k] = s
            got[s] += w[i]
            idx.remove(i)
    for i in idx:
        s = max(names, key=lambda s: (frac[s] * total - got[s], frac[s], s))
        for k in order[i]:
            out[k] = s
        got[s] += w[i]
    return out


# ---------------------------------------------------------------------------- the pipeline
def _balance(steps: list[StepRecord], cfg: CurateConfig) -> tuple[list[StepRecord], list[RejectRecord], dict]:
    counts = strategy_counts(steps)
    info: dict[str, Any] = {"applied": False, "cap": None}
    if len(steps) < cfg.balance_min_steps or len(counts) < cfg.balance_min_strategies:
        info["why_not"] = (f"{len(steps)} steps, {len(counts)} strategies (needs "
                           f">= {cfg.balance_min_steps} steps and >= {cfg.balance_min_strategies} strategies)")
        return steps, [], info
    med = statistics.median(counts.values())
    cap = max(1, int(math.floor(cfg.balance_factor * med)))
    info.update(applied=True, cap=cap, median=med)
    drop: set[str] = set()
    for strat, n in counts.items():
        if n <= cap:
            continue
        mine = sorted((s for s in steps if s.strategy == strat),
                      key=lambda s: _hkey("balance", cfg.seed, step_key(s)))
        drop.update(step_key(s) for s in mine[cap:])
    kept = [s for s in steps if step_key(s) not in drop]
    rej = [_reject(s, "balance", f"{s.strategy} above the cap of {cap} steps "
                                 f"({cfg.balance_factor:g} x median {med:g})")
           for s in steps if step_key(s) in drop]
    return kept, rej, info


def curate(kernels: Sequence[KernelRecord], steps: Sequence[StepRecord],
           trajectories: Sequence[TrajectoryRecord] = (), config: CurateConfig | None = None,
           hardware: str = "") -> CurateResult:
    """Apply the rules to ``steps``; see the package docstring. ``hardware`` is the description
    the chat examples name (only used for the token limit)."""
    cfg = config or CurateConfig()
    known = {k.kernel_id for k in kernels}
    ordered = sorted(steps, key=lambda s: (s.trajectory_id, s.step_index))
    # A search's rows form a tree (rows share a trajectory_id; step_index is the depth; a row's
    # before-program is its parent row's after-program). The ancestors of a row are the programs
    # on its path from the root: its before-program, its parent's before-program, ...
    by_after: dict[tuple[str, str], StepRecord] = {}
    for s in ordered:
        if s.verified:
            by_after.setdefault((s.trajectory_id, _canon(s.after_leir)), s)

    def ancestors_of(s: StepRecord) -> dict[str, int]:
        seen: dict[str, int] = {}
        cur: StepRecord | None = s
        while cur is not None and len(seen) <= len(ordered):
            c = _canon(cur.before_leir)
            if c in seen:
                break
            seen[c] = cur.step_index
            parent = by_after.get((cur.trajectory_id, c))
            cur = parent if parent is not None and parent.step_index == cur.step_index - 1 else None
        return seen

    rejects: list[RejectRecord] = []
    kept: list[StepRecord] = []
    pairs: dict[tuple[str, str], StepRecord] = {}
    example = None
    for s in ordered:
        code, detail = None, ""
        if not s.verified or s.outcome in FAILED_OUTCOMES:
            code, detail = "unverified", f"outcome {s.outcome}" + (f": {s.reason[:160]}" if s.reason else "")
        elif s.before is None or s.after is None or s.step_speedup is None \
                or not math.isfinite(s.step_speedup) or s.step_speedup <= 0:
            code, detail = "unmeasured", f"speedup {s.step_speedup}"
        elif (p := _spread_problem(s, cfg.max_spread)) is not None:
            code, detail = "noisy", p
        if code is None:
            cb, ca = _canon(s.before_leir), _canon(s.after_leir)
            if _plain(s.before_leir) == _plain(s.after_leir):
                code = "no_op"
            elif cb == ca:
                code = "rename_only"
            elif ca in (anc := ancestors_of(s)):
                k = anc[ca]
                code, detail = "shortcut", f"returns to the program before step {k}"
            elif cfg.require_cot and (cp := _cot_problem(s)) is not None:
                code, detail = cp
            elif s.kernel_id not in known:
                code, detail = "unknown_kernel", s.kernel_id
            else:
                if example is None:
                    from ..export.chat import example_tokens as example
                n = example(s, hardware)
                if n > cfg.max_tokens:
                    code, detail = "too_long", f"{n} tokens > {cfg.max_tokens}"
                elif (cb, ca) in pairs:
                    o = pairs[(cb, ca)]
                    code, detail = "duplicate", f"same as {o.trajectory_id}:{o.step_index}"
                else:
                    pairs[(cb, ca)] = s
        if code is None:
            kept.append(s)
        else:
            rejects.append(_reject(s, code, detail))

    before_counts = strategy_counts(kept)
    kept, brej, binfo = _balance(kept, cfg)
    rejects += brej
    after_counts = strategy_counts(kept)

    groups = workload_groups(kernels)
    weights = Counter(s.kernel_id for s in kept)
    splits = assign_splits(groups, weights, cfg.splits, cfg.seed) if groups else {}
    workloads_of = {k.kernel_id: sorted({o.workload for o in k.occurrences}) for k in kernels}
    group_rows = [{"kernels": g, "workloads": sorted({w for k in g for w in workloads_of[k]}),
                   "split": splits[g[0]], "steps": sum(weights.get(k, 0) for k in g)} for g in groups]

    rejects.sort(key=lambda r: (r.trajectory_id, r.step_index))
    reason_counts = Counter(r.reason.split(":", 1)[0] for r in rejects)
    split_steps = Counter(splits.get(s.kernel_id, "?") for s in kept)
    report = {
        "input_steps": len(steps), "kept_steps": len(kept), "rejected_steps": len(rejects),
        "rejects_by_reason": dict(sorted(reason_counts.items())),
        "strategy_counts_before_balance": before_counts,
        "strategy_counts_after_balance": after_counts,
        "entropy_before_bits": round(entropy(before_counts), 4),
        "entropy_after_bits": round(entropy(after_counts), 4),
        "balance": binfo,
        "splits": {sp: {"kernels": sum(1 for v in splits.values() if v == sp),
                        "groups": sum(1 for g in group_rows if g["split"] == sp),
                        "steps": split_steps.get(sp, 0)} for sp in cfg.splits},
        "config": cfg.model_dump(),
    }
    return CurateResult(kept, rejects, splits, group_rows, report)


# ---------------------------------------------------------------------------- files
def write_curated(result: CurateResult, out: str | Path, kernels: Sequence[KernelRecord],
                  trajectories: Sequence[TrajectoryRecord]) -> Path:
    """``out/``: kernels, steps, trajectories, rejects (parquet), splits.json, report.json."""
    out = Path(out)
    write_table(table(kernels, KernelRecord), out / "kernels.parquet")
    write_table(table(result.steps, StepRecord), out / "steps.parquet")
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
            "trajectories": read_records(path / "trajectories.parquet", TrajectoryRecord),
            "rejects": read_records(path / "rejects.parquet", RejectRecord),
            "splits": sp["splits"], "groups": sp["groups"],
            "report": json.loads((path / "report.json").read_text())}
