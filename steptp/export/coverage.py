"""What a release covers and what its search yields, for the card (``stats.json``: ``coverage``,
``yield``) and ``benchmarks/yield_plan.py``.

Strategy coverage: SFT examples per strategy, and for each strategy of the target's catalog
that has none, why: it was never evaluated on these kernels (no legal site, or the search never
proposed it), it was never measured significantly faster (no step of it is ``improving`` or
``preparatory``), its answers were capped (balancing, the per-kernel repetition cap, the family
and kernel shares), or another rule removed them (the most frequent reason is named).

Yield: searched steps, SFT examples and pairs per machine-hour of the search stage
(``steptp.search.stage_stats``), and a projection for a pool of N kernels on W machines, linear
in both (the measured per-kernel yield times N; the measured kernels per machine-hour times W).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from ..records import RejectRecord, StepRecord

#: reject codes that are caps: the step qualified and a share or count limit removed it
CAPS = ("balance", "repetitive", "family_cap", "kernel_cap")
SFT_ROLES = ("improving", "preparatory")


def catalog(target: str) -> list[str]:
    """The strategy names that apply to ``target`` (a target key: ``cuda`` in it means GPU)."""
    from .. import strategies as S

    kind = "cuda" if "cuda" in (target or "").lower() else "cpu"
    return sorted(s.name for s in S.for_target(kind))


def strategy_coverage(sft: Sequence[StepRecord], all_steps: Sequence[StepRecord],
                      rejects: Sequence[RejectRecord], strategies: Iterable[str]) -> dict[str, Any]:
    """``{"sft": {strategy: n}, "missing": {strategy: why}, "catalog": n}``; see the module doc."""
    sft_n = Counter(s.strategy for s in sft)
    seen = Counter(s.strategy for s in all_steps)
    faster = Counter(s.strategy for s in all_steps if s.role in SFT_ROLES)
    # why the FASTER steps of a strategy were not kept: the rejects of its neutral and
    # regressing steps say nothing about that. A rejects row names its step by ``step_key``
    # (tables curated before it did: by trajectory, depth and strategy, which siblings of one
    # strategy at one depth share)
    faster_keys = {getattr(s, "step_key", "") for s in all_steps if s.role in SFT_ROLES} - {""}
    faster_at = {(s.trajectory_id, s.step_index, s.strategy) for s in all_steps if s.role in SFT_ROLES}
    why_rejected: dict[str, Counter] = {}
    for r in rejects:
        code = r.reason.split(":", 1)[0]
        key = getattr(r, "step_key", "")
        hit = key in faster_keys if key and faster_keys else (r.trajectory_id, r.step_index, r.strategy) in faster_at
        if hit and code not in ("neutral", "regressing"):
            why_rejected.setdefault(r.strategy, Counter())[code] += 1
    names = sorted(set(strategies) | set(sft_n))
    missing: dict[str, str] = {}
    for n in names:
        if sft_n.get(n):
            continue
        if not seen.get(n):
            missing[n] = "never evaluated on these kernels (no legal site, or never proposed)"
        elif not faster.get(n):
            missing[n] = f"never measured faster ({seen[n]} steps, none improving or preparatory)"
        else:
            c = why_rejected.get(n, Counter())
            caps = {k: c[k] for k in CAPS if c.get(k)}
            if caps:
                missing[n] = "capped (" + ", ".join(f"{k} {v}" for k, v in caps.items()) + ")"
            else:
                top = ", ".join(f"{k} {v}" for k, v in c.most_common(2)) or "no reason recorded"
                missing[n] = f"{faster[n]} faster steps, none kept ({top})"
    return {"sft": dict(sorted(sft_n.items(), key=lambda kv: (-kv[1], kv[0]))), "missing": missing,
            "catalog": len(set(strategies)), "in_sft": len(sft_n)}


def yields(search: Mapping[str, Any] | None, *, sft: int, pairs: int) -> dict[str, Any] | None:
    """Per machine-hour of the search stage: searched steps (the stage's own count), SFT
    examples and pairs (the release's), and kernels. None without the stage's stats."""
    if not search:
        return None
    hours = search["wall_s"] / 3600.0 * max(1, int(search.get("machines", 1)))
    k, st = int(search.get("kernels") or 0), int(search.get("steps") or 0)
    return {"machine_hours": round(hours, 4), "wall_s": search["wall_s"],
            "workers": search.get("workers", 1), "machines": search.get("machines", 1),
            "nights": search.get("nights", 1),
            "kernels": k, "steps": st, "sft": sft, "pairs": pairs,
            "per_machine_hour": {"kernels": k / hours, "steps": st / hours,
                                 "sft": sft / hours, "pairs": pairs / hours},
            "per_kernel": ({"steps": st / k, "sft": sft / k, "pairs": pairs / k} if k else None)}


def projection(y: Mapping[str, Any], kernels: int, machines: int = 1) -> dict[str, Any] | None:
    """A pool of ``kernels`` searched on ``machines`` machines like the measured one: wall hours
    and what it would give, linear in both (no figure when nothing was searched)."""
    if not y or not y.get("per_kernel") or not y["per_machine_hour"]["kernels"]:
        return None
    pk = y["per_kernel"]
    hours = kernels / (y["per_machine_hour"]["kernels"] * max(1, machines))
    return {"kernels": kernels, "machines": machines, "wall_hours": hours,
            "steps": round(pk["steps"] * kernels), "sft": round(pk["sft"] * kernels),
            "pairs": round(pk["pairs"] * kernels)}


def yield_lines(y: Mapping[str, Any] | None, plan: Sequence[tuple[int, int]] = ((1000, 1), (1000, 4))
                ) -> list[str]:
    """The card's yield paragraph."""
    if not y:
        return ["No search-stage timing was recorded for this release (`search-stats.json` beside "
                "the search's tables), so no yield per machine-hour is given."]
    m = y["per_machine_hour"]
    out = [f"**Yield**: {m['steps']:,.0f} searched steps, {m['sft']:,.0f} SFT examples and "
           f"{m['pairs']:,.0f} pairs per machine-hour of the search stage ({y['kernels']} kernels, "
           f"{y['steps']} steps in {y['wall_s'] / 60:.1f} min on {y['machines']} machine(s)"
           + (f" over {y['nights']} accumulated nights" if y.get("nights", 1) > 1 else "")
           + f", {y['workers']} searches at once; {m['kernels']:.1f} kernels per machine-hour)."]
    rows = [p for n, w in plan if (p := projection(y, n, w))]
    if rows:
        out += ["", "Projection, linear in kernels and machines (`benchmarks/yield_plan.py` for "
                "other sizes):", "", "| kernels | machines | wall hours | searched steps | SFT "
                "examples | pairs |", "| ---: | ---: | ---: | ---: | ---: | ---: |",
                *[f"| {p['kernels']:,} | {p['machines']} | {p['wall_hours']:.1f} | {p['steps']:,} | "
                  f"{p['sft']:,} | {p['pairs']:,} |" for p in rows]]
    return out


def coverage_lines(cov: Mapping[str, Any] | None, diversity: Mapping[str, Any] | None) -> list[str]:
    """The card's strategy coverage and diversity caps."""
    out: list[str] = []
    if cov:
        out += [f"{cov['in_sft']} of the catalog's {cov['catalog']} strategies have SFT examples."]
        if cov["missing"]:
            out += ["", "| strategy without SFT examples | why |", "| --- | --- |",
                    *[f"| `{k}` | {v} |" for k, v in cov["missing"].items()]]
    if diversity:
        out += [""]
        if diversity.get("applied"):
            fams = diversity.get("families") or {}
            known = [(k, v) for k, v in fams.items() if not k.startswith("other:")]
            unknown = [v for k, v in fams.items() if k.startswith("other:")]
            shown = ", ".join(f"{k} {v}" for k, v in known[:10]) + (
                f" and {len(known) - 10} more" if len(known) > 10 else "")
            if unknown:
                shown += (f"{'; ' if known else ''}{len(unknown)} kernel groups of unknown family, each "
                          f"its own family ({sum(unknown)} examples, at most {max(unknown)} in one)")
            out += [f"Diversity caps ({diversity['searched_kernels']} searched kernels): no operator "
                    f"family above {diversity['max_family_share']:.0%} of the SFT examples (cap "
                    f"{diversity.get('family_cap')}), no kernel above "
                    f"{diversity['max_kernel_share']:.0%} (cap {diversity.get('kernel_cap')}; kernels "
                    f"that differ only in their shapes count as one: {diversity.get('shape_groups')} "
                    f"groups). SFT examples per family: {shown}."]
            for code, why in (diversity.get("cannot_hold") or {}).items():
                out += ["", f"The {code.replace('_', ' ')} cannot hold: {why}."]
        else:
            out += [f"Diversity caps not applied: {diversity.get('why_not', '')}."]
    return out
