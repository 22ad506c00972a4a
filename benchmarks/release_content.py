"""What a model learns from a release, recomputed from its parquet tables and JSONL files.

    python benchmarks/release_content.py releases/steptp-tiny-0.1.0

Prints: the share of SFT examples that lie on a path ending significantly faster than their
before-state (the step itself, or its best measured descendant in the same search tree, by the
release's significance rule), examples and pairs per split, roles, distinct prompts vs.
examples, families of the searched kernels, and the median of the trajectories' speedups
re-timed interleaved at the end of each search. The issue's bar: >= 95% on faster paths, every
split non-empty, pairs present.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import polars as pl

from steptp.search.roles import Tree
from steptp.measure.significance import SignificanceRule
from steptp.records import KernelRecord, StepRecord
from steptp.search.selection import kernel_family


def main(release: str) -> dict:
    rel = Path(release)
    stats = json.loads((rel / "stats.json").read_text())
    sig = {k: v for k, v in (stats.get("significance") or {}).items() if v is not None}
    rule = SignificanceRule(**sig)
    df = pl.read_parquet(rel / "data/steps.parquet")
    fields = set(StepRecord.model_fields)
    rows = list(df.iter_rows(named=True))
    recs = [StepRecord.from_row({k: v for k, v in r.items() if k in fields}) for r in rows]
    tree = Tree(recs)
    sft = [i for i, r in enumerate(rows) if r["sft"]]
    on_faster = 0
    for i in sft:
        s = recs[i]
        b = s.paired_before or s.before
        best = recs[tree.best_descendant(i)]
        end = (s.paired_best or best.after) if best is not s else (s.paired_after or s.after)
        own = rule.compare(b, s.paired_after or s.after)
        if own == "faster" or rule.compare(b, end) == "faster":
            on_faster += 1
    chat = {sp: sum(1 for ln in (rel / f"chat/{sp}.jsonl").read_text().splitlines() if ln.strip())
            for sp in ("train", "validation", "test")}
    pairs = {sp: sum(1 for ln in (rel / f"chat/pairs-{sp}.jsonl").read_text().splitlines() if ln.strip())
             for sp in ("train", "validation", "test")}
    kfields = set(KernelRecord.model_fields)
    ks = [KernelRecord.from_row({k: v for k, v in r.items() if k in kfields})
          for r in pl.read_parquet(rel / "data/kernels.parquet").iter_rows(named=True)]
    searched = [k for k in ks if k.search_status.startswith("searched")]
    retimed = [x for x in pl.read_parquet(rel / "data/trajectories.parquet")["remeasured_speedup"].to_list()
               if x is not None]
    out = {
        "sft_examples": len(sft),
        "sft_on_faster_paths": on_faster, "sft_share_on_faster_paths": on_faster / len(sft) if sft else None,
        "distinct_prompts_in_sft": len({recs[i].before_leir for i in sft}),
        "examples_per_split": chat, "pairs_per_split": pairs, "pairs": sum(pairs.values()),
        "roles_all": dict(Counter(r["role"] for r in rows)), "roles_sft": dict(Counter(rows[i]["role"] for i in sft)),
        "searched_kernels": [{"name": k.name, "family": kernel_family(k),
                              "unscheduled_us": round((k.unscheduled_s or 0) * 1e6, 1)} for k in searched],
        "families": sorted({kernel_family(k) for k in searched}),
        "median_step_speedup_sft": (sorted(recs[i].step_speedup for i in sft)[len(sft) // 2] if sft else None),
        # each search's final program against its unscheduled kernel, re-timed interleaved at
        # the end of the search (the figure a search change must not lower)
        "remeasured_trajectories": len(retimed),
        "median_remeasured_trajectory_speedup": statistics.median(retimed) if retimed else None,
        "rule": rule.model_dump(),
    }
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "releases/steptp-tiny-0.1.0"), indent=1))
