"""What changed between two releases: ``diff.json`` and the card's "Changes since" section.

Counts per role (the ``role`` column of the steps when there is one, else the step outcome),
per strategy and per split; kernels added and removed, and those whose split changed (the
test-set leak a nightly user has to know of); each kernel's best speedup (its
trajectory's) before and after. A kernel *regressed* when its best speedup fell by more than
the measured spread allows: ``current < previous × (1 − tolerance)``, the tolerance being the
sum of the relative spreads (IQR/median) of the baseline and best timings of both releases —
the uncertainty of a ratio of two noisy timings, twice.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

DIFF = "diff.json"


#: the columns a diff reads (a release's steps table is mostly programs and reasoning)
STEP_COLUMNS = ("trajectory_id", "step_index", "kernel_id", "strategy", "outcome", "role", "split",
                "cumulative_speedup", "before", "after")
KERNEL_COLUMNS = ("kernel_id", "name", "split")
TRAJECTORY_COLUMNS = ("kernel_id", "trajectory_id", "speedup")


def _read(folder: Path, name: str, columns: tuple[str, ...]) -> pl.DataFrame | None:
    """The table's ``columns`` that it has (every row: the first column when it has none)."""
    p = folder / "data" / name
    if not p.is_file():
        return None
    have = list(pl.read_parquet_schema(p))
    return pl.read_parquet(p, columns=[c for c in columns if c in have] or have[:1])


def _counts(df: pl.DataFrame | None, col: str) -> dict[str, int]:
    if df is None or col not in df.columns or df.is_empty():
        return {}
    return dict(sorted(Counter(str(x) for x in df[col].to_list()).items()))


def _compare(a: dict[str, int], b: dict[str, int]) -> dict[str, dict[str, int]]:
    return {k: {"previous": a.get(k, 0), "current": b.get(k, 0), "change": b.get(k, 0) - a.get(k, 0)}
            for k in sorted(set(a) | set(b))}


def _spread(t: Any) -> float:
    return float(t.get("spread") or 0.0) if isinstance(t, dict) else 0.0


def best_speedups(folder: str | Path) -> dict[str, dict[str, float]]:
    """kernel_id -> {speedup, spread}: the best trajectory speedup of each kernel, with the
    relative spread of its baseline and best timings (from the steps on that trajectory)."""
    folder = Path(folder)
    trajs = _read(folder, "trajectories.parquet", TRAJECTORY_COLUMNS)
    steps = _read(folder, "steps.parquet", STEP_COLUMNS)
    if trajs is None or trajs.is_empty():
        return {}
    spreads: dict[str, float] = {}
    if steps is not None and not steps.is_empty() and {"before", "after"} <= set(steps.columns):
        for r in steps.select("trajectory_id", "step_index", "cumulative_speedup", "before", "after"
                              ).iter_rows(named=True):
            # the root's before is the baseline; the most improved step's after is the best
            s = _spread(r["before"]) if r["step_index"] == 0 else 0.0
            spreads[r["trajectory_id"]] = max(spreads.get(r["trajectory_id"], 0.0), s + _spread(r["after"]))
    out: dict[str, dict[str, float]] = {}
    for r in trajs.select("kernel_id", "trajectory_id", "speedup").iter_rows(named=True):
        cur = out.get(r["kernel_id"])
        if cur is None or r["speedup"] > cur["speedup"]:
            out[r["kernel_id"]] = {"speedup": float(r["speedup"]),
                                   "spread": spreads.get(r["trajectory_id"], 0.0)}
    return out


def release_diff(previous: str | Path, current: str | Path) -> dict[str, Any]:
    """The comparison of the release folder ``current`` with ``previous``."""
    previous, current = Path(previous), Path(current)

    def ident(f: Path) -> str:
        for name in ("manifest.json", "stats.json"):
            if (f / name).is_file():
                d = json.loads((f / name).read_text())
                if d.get("name") and d.get("version"):
                    return f"{d['name']}-{d['version']}"
        return f.name

    ps, cs = _read(previous, "steps.parquet", STEP_COLUMNS), _read(current, "steps.parquet", STEP_COLUMNS)
    pk, ck = _read(previous, "kernels.parquet", KERNEL_COLUMNS), _read(current, "kernels.parquet", KERNEL_COLUMNS)
    role = "role" if (cs is not None and "role" in cs.columns) else "outcome"
    pkid = set(pk["kernel_id"].to_list()) if pk is not None else set()
    ckid = set(ck["kernel_id"].to_list()) if ck is not None else set()
    names = {}
    for df in (pk, ck):
        if df is not None and "name" in df.columns:
            names.update(dict(zip(df["kernel_id"].to_list(), df["name"].to_list())))
    pb, cb = best_speedups(previous), best_speedups(current)
    kernels = []
    for kid in sorted(set(pb) & set(cb)):
        a, b = pb[kid], cb[kid]
        tol = min(0.9, a["spread"] + b["spread"])
        kernels.append({"kernel_id": kid, "name": names.get(kid, ""), "previous": a["speedup"],
                        "current": b["speedup"], "ratio": b["speedup"] / a["speedup"],
                        "tolerance": tol, "regression": b["speedup"] < a["speedup"] * (1 - tol)})
    # a kernel in both whose split changed: a model trained on the previous train split and
    # tested on this test split (or the reverse) may have seen it
    moved = []
    if pk is not None and ck is not None and "split" in pk.columns and "split" in ck.columns:
        was = dict(zip(pk["kernel_id"].to_list(), pk["split"].to_list()))
        for kid, sp in sorted(zip(ck["kernel_id"].to_list(), ck["split"].to_list())):
            if kid in was and was[kid] != sp:
                moved.append({"kernel_id": kid, "name": names.get(kid, ""), "previous": was[kid],
                              "current": sp})
    count = lambda df: 0 if df is None else len(df)  # noqa: E731
    # an accumulating nightly's counts (steptp.release.accumulate): what was carried, re-timed, dropped
    # (the counts and the dropped labels; every re-timed step is in accumulation.json)
    acc = current / "accumulation.json"
    accumulation = None
    if acc.is_file():
        a = json.loads(acc.read_text())
        accumulation = {k: v for k, v in a.items() if k not in ("stale", "retimed_steps")}
        accumulation["dropped_steps"] = [r for r in a.get("retimed_steps", []) if not r.get("holds")]
    return {
        "previous": ident(previous), "current": ident(current),
        "counts": {"previous": {"kernels": len(pkid), "steps": count(ps),
                                "trajectories": count(_read(previous, "trajectories.parquet", TRAJECTORY_COLUMNS))},
                   "current": {"kernels": len(ckid), "steps": count(cs),
                               "trajectories": count(_read(current, "trajectories.parquet", TRAJECTORY_COLUMNS))}},
        "role_column": role,
        "steps_per_role": _compare(_counts(ps, role), _counts(cs, role)),
        "steps_per_strategy": _compare(_counts(ps, "strategy"), _counts(cs, "strategy")),
        "steps_per_split": _compare(_counts(ps, "split"), _counts(cs, "split")),
        "kernels_added": sorted(ckid - pkid), "kernels_removed": sorted(pkid - ckid),
        "kernels_changed_split": moved,
        "best_speedup": kernels,
        "regressions": [k["kernel_id"] for k in kernels if k["regression"]],
        **({"accumulation": accumulation} if accumulation is not None else {}),
    }


def card_section(d: dict[str, Any]) -> str:
    """The card's "Changes since <previous>" section."""
    c = d["counts"]
    lines = [f"## Changes since {d['previous']}", "",
             "| | previous | this release |", "| --- | ---: | ---: |",
             *[f"| {k} | {c['previous'][k]} | {c['current'][k]} |" for k in ("kernels", "trajectories", "steps")],
             "", f"Kernels added: {len(d['kernels_added'])}, removed: {len(d['kernels_removed'])}.", ""]
    moved = d.get("kernels_changed_split", [])
    tested = [m for m in moved if "test" in (m["previous"], m["current"])]
    lines += [f"Kernels in another split than in {d['previous']}: {len(moved)}"
              + (f", {len(tested)} of them into or out of test: a model trained on one release's train "
                 f"split and tested on the other's test split may have seen them" if tested else "")
              + ". Splits follow a hash of each workload group, not the timings (see Splits above).", ""]
    if moved:
        lines += ["| kernel | previous split | this release |", "| --- | --- | --- |",
                  *[f"| {m['name'] or m['kernel_id'][:12]} | {m['previous']} | {m['current']} |" for m in moved], ""]
    for title, key in ((f"steps per {d['role_column']}", "steps_per_role"),
                       ("steps per strategy", "steps_per_strategy"), ("steps per split", "steps_per_split")):
        rows = d[key]
        if rows:
            lines += [f"| {title} | previous | this release | change |", "| --- | ---: | ---: | ---: |",
                      *[f"| `{k}` | {v['previous']} | {v['current']} | {v['change']:+d} |" for k, v in rows.items()],
                      ""]
    if d["best_speedup"]:
        lines += ["Best speedup per kernel (a regression is a fall beyond the measured spread):", "",
                  "| kernel | previous | this release | ratio | |", "| --- | ---: | ---: | ---: | --- |",
                  *[f"| {k['name'] or k['kernel_id'][:12]} | {k['previous']:.3g} | {k['current']:.3g} | "
                    f"{k['ratio']:.3f} | {'**regression**' if k['regression'] else ''} |"
                    for k in d["best_speedup"]], ""]
    a = d.get("accumulation")
    if a:
        lines += [f"Carried from {a.get('carried_from')}: {a['carried_kernels']} kernels, {a['carried_steps']} "
                  f"steps; {a['retimed']} carried labels re-timed, {a['dropped']} dropped (no longer "
                  "significantly faster; see Accumulation).", ""]
    lines += [f"Regressions beyond the spread: {len(d['regressions'])}. Full comparison: `{DIFF}`.", ""]
    return "\n".join(lines)


def write_diff(previous: str | Path, current: str | Path) -> dict[str, Any]:
    """Write ``current/diff.json`` and append the section to ``current/README.md``."""
    from ..records import write_text_atomic

    current = Path(current)
    d = release_diff(previous, current)
    write_text_atomic(current / DIFF, json.dumps(d, indent=1) + "\n")
    card = current / "README.md"
    text = card.read_text() if card.is_file() else ""
    write_text_atomic(card, text.rstrip("\n") + "\n\n" + card_section(d))
    return d


__all__ = ["DIFF", "best_speedups", "card_section", "release_diff", "write_diff"]
