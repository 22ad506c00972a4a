"""The release folder: tables, chat JSONL, plots, dataset card, manifest (see the package doc)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import polars as pl

from ..records import (SCHEMA_VERSION, AtomicTextFile, StepRecord, parent_links_of_table, step_keys, write_table,
                       write_text_atomic)
from ..format import chat as chat_format
from . import chat, coverage, hub, source

SPLITS = ("train", "validation", "test")
ROLES = ("improving", "preparatory", "neutral", "regressing", "failed")
MANIFEST = "manifest.json"


def recorded_hardware(steps: Sequence[StepRecord]) -> dict[str, Any] | None:
    """The hardware the steps' reasoning describes (``cot["hardware"]``), when they all agree."""
    seen = {json.dumps(h, sort_keys=True) for s in steps
            if isinstance(s.cot, dict) and isinstance(h := s.cot.get("hardware"), dict)}
    return json.loads(seen.pop()) if len(seen) == 1 else None


def hardware_description(fingerprint: Mapping[str, Any] | None, target: str = "",
                         facts: Mapping[str, Any] | None = None) -> str:
    """What the user turn names as the target hardware. For a CPU it also states the facts the
    reasoning cites (SIMD width, cache sizes, line size; ``facts``: a
    :class:`steptp.cot.facts.Hardware` dict, by default this machine's): a model trained on "fits
    in L2 (2 MiB)" must be able to read the 2 MiB in its prompt, not learn one machine's figure."""
    if not fingerprint:
        return target or "unknown"
    if fingerprint.get("gpu_name") and "cuda" in json.dumps(fingerprint.get("target", {})):
        return f"{fingerprint['gpu_name']} (CUDA)"
    cores = fingerprint.get("num_threads") or fingerprint.get("cpu_affinity")
    base = f"{fingerprint.get('cpu_model', 'CPU')} ({fingerprint.get('machine', '')}, {cores} threads)"
    if facts is None:
        from ..cot.facts import Hardware

        facts = Hardware.current(int(cores) if cores else None).to_dict()
    from ..cot.template import fmt_bytes as size    # the reasoning's own wording of a size

    try:
        return (f"{base}: {int(facts['vector_bits'])}-bit vectors; data caches "
                f"L1 {size(int(facts['l1_bytes']))}, L2 {size(int(facts['l2_bytes']))}, "
                f"L3 {size(int(facts['l3_bytes']))}; {int(facts.get('line_bytes', 64))}-byte lines")
    except (KeyError, TypeError, ValueError):
        return base


def _with_split(df: pl.DataFrame, splits: Mapping[str, str]) -> pl.DataFrame:
    return df.with_columns(pl.col("kernel_id").replace_strict(dict(splits), default=None,
                                                            return_dtype=pl.Utf8).alias("split"))


# ---------------------------------------------------------------------------- plots
def _plots(out: Path, strategy_before: Mapping[str, int], strategy_after: Mapping[str, int],
           speedups: Sequence[float], traj_speedups: Sequence[float], tokens: Sequence[int]) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    files = {}
    names = sorted(set(strategy_before) | set(strategy_after), key=lambda n: (-strategy_after.get(n, 0), n))
    fig, ax = plt.subplots(figsize=(7, 0.35 * max(4, len(names)) + 1))
    y = list(range(len(names)))
    ax.barh([i + 0.2 for i in y], [strategy_before.get(n, 0) for n in names], 0.4, label="before balancing",
            color="#bbbbbb")
    ax.barh([i - 0.2 for i in y], [strategy_after.get(n, 0) for n in names], 0.4, label="released")
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel("steps")
    ax.legend()
    ax.set_title("Steps per strategy")
    fig.tight_layout()
    fig.savefig(out / "strategies.png", dpi=90)
    plt.close(fig)
    files["strategies"] = "plots/strategies.png"

    fig, axs = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, vals, title in ((axs[0], speedups, "step speedup"), (axs[1], traj_speedups, "trajectory speedup")):
        v = [math.log2(x) for x in vals if x and x > 0 and math.isfinite(x)]
        ax.hist(v or [0.0], bins=20)
        ax.set_xlabel(f"log2({title})")
        ax.set_ylabel("count")
        ax.axvline(0, color="k", lw=0.8)
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out / "speedups.png", dpi=90)
    plt.close(fig)
    files["speedups"] = "plots/speedups.png"

    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.hist(list(tokens) or [0], bins=20)
    ax.set_xlabel("tokens per chat example (o200k_base)")
    ax.set_ylabel("examples")
    fig.tight_layout()
    fig.savefig(out / "tokens.png", dpi=90)
    plt.close(fig)
    files["tokens"] = "plots/tokens.png"
    return files


def _q(vals: Sequence[float]) -> dict[str, float | None]:
    v = sorted(x for x in vals if x is not None and math.isfinite(x))
    if not v:
        return {"min": None, "median": None, "max": None, "mean": None}
    return {"min": v[0], "p10": v[int(0.1 * (len(v) - 1))], "median": statistics.median(v),
            "p90": v[int(0.9 * (len(v) - 1))], "max": v[-1], "mean": statistics.fmean(v)}


def _geomean(vals: Sequence[float]) -> float | None:
    v = [x for x in vals if x and x > 0 and math.isfinite(x)]
    return math.exp(statistics.fmean(math.log(x) for x in v)) if v else None


def _role_timing(steps: pl.DataFrame) -> pl.Series:
    """Which timing each step's role, ``log_speedup`` and ``best_descendant_speedup`` come from
    (``steptp.search.roles``: the interleaved re-timing when the step has one); None when failed."""
    return steps.select(
        pl.when((pl.col("role") == "failed") | pl.col("log_speedup").is_null()).then(pl.lit(None, dtype=pl.Utf8))
        .when(pl.col("paired_before").is_not_null() & pl.col("paired_after").is_not_null())
        .then(pl.lit("paired")).otherwise(pl.lit("search")).alias("role_timing")).to_series()


class _Searched(NamedTuple):
    """What the card's counts read of a searched step (``coverage`` takes it for a record)."""
    strategy: str
    role: str
    trajectory_id: str
    step_index: int
    step_key: str


class _Rejected(NamedTuple):
    strategy: str
    reason: str
    trajectory_id: str
    step_index: int
    step_key: str


#: pairs written per batch: the steps of one batch become records, its rows one frame
PAIR_BATCH = 512


def _records(steps: pl.DataFrame, rows: Sequence[int]) -> dict[int, StepRecord]:
    return {i: StepRecord.from_row(r) for i, r in zip(rows, steps[list(rows)].iter_rows(named=True))}


def _unified_schema(schemas: Sequence[pl.Schema]) -> pl.Schema:
    """The schema ``hub.frame`` of all the rows of row batches would infer, from the batches'
    own: a field null throughout one batch takes the others' type (raises when the batches'
    fields differ)."""
    return pl.concat([pl.DataFrame(schema=s) for s in schemas], how="vertical_relaxed").schema


def _concat_batches(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """One frame of row batches each framed by ``hub.frame``, typed as ``hub.frame`` of all the
    rows at once would be."""
    if len(frames) == 1:
        return frames[0]
    try:
        schema = _unified_schema([f.schema for f in frames])
        # a strict cast: polars >= 2.2 unifies structs of different fields, which no batch casts to
        return pl.concat([f.cast(schema) for f in frames], rechunk=True)
    except (pl.exceptions.PolarsError, TypeError):     # batches whose fields differ: frame the rows
        return hub.frame([r for f in frames for r in f.to_dicts()])


class _Spilled:
    """Row batches kept on disk (Arrow IPC files in ``folder``) until they are written as one
    ``datasets`` config: a release's pairs, as frames, are larger than the rest of export."""

    def __init__(self, folder: Path):
        self.folder, self.files, self.schemas = folder, [], []

    def add(self, rows: list[dict[str, Any]]) -> None:
        df = hub.frame(rows)
        self.files.append(self.folder / f"{len(self.files):06d}.arrow")
        self.schemas.append(df.schema)
        df.write_ipc(self.files[-1])

    def write_config(self, out: Path, name: str) -> dict[str, int]:
        """``hub.write_config`` of the batches as one frame, a split at a time."""
        if not self.files:
            return {}
        try:
            schema = _unified_schema(self.schemas)
        except (pl.exceptions.PolarsError, TypeError):
            return hub.write_config(out, name, _concat_batches([pl.read_ipc(f) for f in self.files]))
        counts: dict[str, int] = {}
        for sp in hub.SPLITS:
            part = pl.concat([pl.read_ipc(f).filter(pl.col("split") == sp).cast(schema)
                              for f in self.files], rechunk=True)
            if part.height:
                counts[sp] = hub.write_split(out, name, sp, part)
            del part
        return counts


# ---------------------------------------------------------------------------- export
def export_release(curated: str | Path | Mapping[str, Any], out: str | Path, *, name: str = "steptp",
                   version: str = "0.0.0", params: Mapping[str, Any] | None = None,
                   fingerprint: Mapping[str, Any] | None = None,
                   decontamination: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write the release folder ``out`` (created or replaced) from a curated dataset: its folder
    (read by ``steptp.export.source``: every searched step stays a table), or the dict
    ``steptp.curate.read_curated`` returns. Returns the statistics the card shows.
    ``decontamination``: the search stage's report of the benchmark kernels kept out of the
    pool (``steptp.zoo.decontaminate.Index.report``); None: no folder was listed.

    The steps table is read whole once, after the columns that need no texts were taken from
    it, and dropped once the pairs' sides were made records from it: at 100,000 steps it, and
    the copy polars makes to write it, are most of export's memory."""
    out = Path(out)
    if out.exists():
        shutil.rmtree(out)
    (out / "data").mkdir(parents=True)
    src = source.load(curated)
    splits, report = src.splits, src.report
    kernels_df = _with_split(src.kernels, splits)
    trajs_df = _with_split(src.trajectories, splits)
    rejects_df = src.rejects

    # every searched step without its reasoning: keys, tree links, what the card counts and
    # the prompt states read
    light = src.steps([c for c in source.STEP_COLUMNS if c not in source.REASONING])
    keys = step_keys(light)
    sft_keys = src.sft_keys()
    parents = parent_links_of_table(light)
    parent_key = {keys[i]: keys[p] for i, p in parents.items()}
    searched = [_Searched(*r, k) for r, k in zip(light.select("strategy", "role", "trajectory_id",
                                                              "step_index").iter_rows(), keys)]
    step_split = [splits.get(k, "train") for k in light["kernel_id"].to_list()]
    searched_ids = set(light["kernel_id"].to_list())
    remeasured_steps = light["paired_before"].is_not_null().sum()
    role_timing = _role_timing(light)
    states = light.select("kernel_id", "step_index", "exactness", "target", "before_leir")
    del light

    full = src.steps()
    tables = {
        "kernels": kernels_df,
        "steps": _with_split(full, splits).with_columns(
            pl.Series("step_key", keys, dtype=pl.Utf8),
            pl.Series("parent_step_key", [parent_key.get(k) for k in keys], dtype=pl.Utf8),
            pl.Series("sft", [k in sft_keys for k in keys], dtype=pl.Boolean),
            role_timing),
        "trajectories": trajs_df,
    }
    for tname, df in tables.items():
        write_table(df, out / f"data/{tname}.parquet")
    write_table(rejects_df, out / "data/rejects.parquet")
    table_configs = {tname: hub.write_config(out, tname, df) for tname, df in tables.items()}
    del tables

    steps = src.sft_steps()
    target = steps[0].target if steps else (kernels_df["target"][0] if kernels_df.height else "")
    hw = hardware_description(fingerprint, target, recorded_hardware(steps))
    files: dict[str, AtomicTextFile] = {}
    try:
        def line(fname: str, text: str) -> None:
            if fname not in files:
                files[fname] = AtomicTextFile(out / "chat" / fname)
            files[fname].write(text + "\n")

        for sp in SPLITS:
            files[f"{sp}.jsonl"] = AtomicTextFile(out / "chat" / f"{sp}.jsonl")
        examples_per_split: dict[str, int] = {s: 0 for s in SPLITS}
        tokens: list[int] = []
        sft_rows: list[dict[str, Any]] = []
        for s in chat.interleaved(steps):
            sp = splits.get(s.kernel_id, "train")
            ex = chat_format.example(s, hw, sp)
            tokens.append(ex["meta"]["tokens"]["total"])
            line(f"{sp}.jsonl", chat.to_line(ex))
            examples_per_split[sp] = examples_per_split.get(sp, 0) + 1
            sft_rows.append({**ex, "split": sp})
        sft_config = hub.write_config(out, "sft", hub.frame(sft_rows)) if sft_rows else {}
        del sft_rows

        from .pairs import pair_example

        pairs = src.pairs()
        index = {k: i for i, k in enumerate(keys)}
        pair_keys = {pr["chosen"] for pr in pairs if pr["chosen"] in index}
        pairs = [pr for pr in pairs if pr["chosen"] in index and pr["rejected"] in index]
        for sp in SPLITS:
            files[f"pairs-{sp}.jsonl"] = AtomicTextFile(out / "chat" / f"pairs-{sp}.jsonl")
        pairs_per_split: dict[str, int] = {s: 0 for s in SPLITS}
        pair_tokens: list[int] = []
        with tempfile.TemporaryDirectory(prefix=".pairs-", dir=out) as tmp:
            spilled = _Spilled(Path(tmp))
            for b in range(0, len(pairs), PAIR_BATCH):
                batch = pairs[b:b + PAIR_BATCH]
                recs = _records(full, sorted({index[pr[side]] for pr in batch for side in ("chosen", "rejected")}))
                rows = []
                for pr in batch:
                    c, r = recs[index[pr["chosen"]]], recs[index[pr["rejected"]]]
                    sp = splits.get(c.kernel_id, "train")
                    ex = pair_example(pr, c, r, hw, sp, parent_key.get(pr["chosen"]))
                    line(f"pairs-{sp}.jsonl", chat.to_line(ex))
                    pairs_per_split[sp] = pairs_per_split.get(sp, 0) + 1
                    t = ex["meta"]["tokens"]
                    pair_tokens.append(t["prompt"] + max(t["chosen"], t["rejected"]))
                    rows.append({**ex, "split": sp})
                spilled.add(rows)
                del recs, rows
            del full, pairs
            for f in files.values():
                f.commit()
            # the prompt states first: mostly parsing, while the allocator hands the steps
            # table's memory back; the preference frames come after
            prompt_rows = hub.prompt_states(kernels_df, states, sft_keys, pair_keys, parents, splits, hw,
                                            keys=keys)
            prompt_tokens = [r["prompt_tokens"] for r in prompt_rows]
            prompts_config = hub.write_config(out, "prompts", hub.frame(prompt_rows)) if prompt_rows else {}
            del prompt_rows, states
            pref_config = spilled.write_config(out, "preference")
    except BaseException:
        for f in files.values():
            f.discard()
        raise

    config_counts = {"sft": sft_config, "preference": pref_config, "prompts": prompts_config, **table_configs}
    length_fit = {name: {"n": len(v), "fit": {str(k): n for k, n in hub.fits(v).items()}}
                  for name, v in (("sft", tokens), ("preference", pair_tokens), ("prompts", prompt_tokens))}

    def _roles(rows) -> dict[str, int]:
        c = Counter(s.role or "unassigned" for s in rows)
        return {r: c[r] for r in ROLES + ("unassigned",) if c.get(r)}

    role_stats = {
        "all_steps": _roles(searched), "sft": _roles(steps),
        "sft_per_split": {sp: _roles([s for s in steps if splits.get(s.kernel_id, "train") == sp]) for sp in SPLITS},
        "all_per_split": {sp: _roles([s for s, ssp in zip(searched, step_split) if ssp == sp]) for sp in SPLITS},
        "per_strategy": {k: _roles([s for s in searched if s.strategy == k])
                         for k in sorted({s.strategy for s in searched})},
    }
    before = report.get("strategy_counts_before_balance") or dict(Counter(s.strategy for s in steps))
    after = dict(Counter(s.strategy for s in steps))
    speedups = [s.step_speedup for s in steps if s.step_speedup is not None]
    traj_speedups = trajs_df["speedup"].to_list()
    remeasured = [x for x in trajs_df["remeasured_speedup"].to_list() if x is not None]
    kernel_ids = kernels_df["kernel_id"].to_list()
    rejects = [_Rejected(*r) for r in rejects_df.select("strategy", "reason", "trajectory_id",
                                                        "step_index", "step_key").iter_rows()]
    plots = _plots(out / "plots", before, after, speedups, traj_speedups, tokens)
    n_pairs = sum(pairs_per_split.values())

    def per_split(ids) -> dict[str, int]:
        n = Counter(splits.get(k) for k in ids)
        return {sp: n[sp] for sp in SPLITS}

    stats = {
        "name": name, "version": version, "hardware": hw,
        "counts": {"kernels": len(kernel_ids), "steps": len(steps), "trajectories": trajs_df.height,
                   "rejects": len(rejects),
                   "workloads": len({o["workload"] for occ in kernels_df["occurrences"].to_list()
                                     for o in json.loads(occ)}),
                   "examples_per_split": examples_per_split,
                   "searched_steps": len(searched),
                   "pairs": n_pairs,
                   "pairs_per_split": pairs_per_split,
                   "kernels_per_split": per_split(kernel_ids),
                   # the pool is every extracted kernel; these are the ones a search has steps of
                   "searched_kernels": len(searched_ids),
                   "searched_kernels_per_split": per_split(searched_ids)},
        "strategies": dict(sorted(after.items(), key=lambda kv: (-kv[1], kv[0]))),
        "roles": role_stats,
        "significance": {k: (report.get("config") or {}).get(k) for k in ("min_gain", "spread_factor", "max_spread")},
        "remeasured": {"steps": remeasured_steps,
                       "trajectories": len(remeasured),
                       "trajectory_speedup": _q(remeasured)},
        "coverage": coverage.strategy_coverage(steps, searched, rejects, coverage.catalog(target)),
        "diversity": report.get("diversity"),
        "yield": coverage.yields(report.get("search_stage"), sft=len(steps), pairs=n_pairs),
        "strategies_before_balance": before,
        "entropy_bits": report.get("entropy_after_bits"),
        "entropy_before_bits": report.get("entropy_before_bits"),
        "balance": report.get("balance"),
        "rejects_by_reason": dict(sorted(Counter(r.reason.split(":", 1)[0] for r in rejects).items())),
        "reason_meanings": dict(report.get("reason_meanings") or {}),
        "step_speedup": {**_q(speedups), "geomean": _geomean(speedups)},
        "trajectory_speedup": {**_q(traj_speedups), "geomean": _geomean(traj_speedups)},
        "tokens": _q([float(t) for t in tokens]),
        "cot_sources": dict(Counter(s.cot_source or "none" for s in steps)),
        "cot_variety": _cot_variety(steps),
        "fingerprint": dict(fingerprint or {}),
        "fingerprints": sorted({s.fingerprint for s in steps if s.fingerprint}),
        "plots": plots, "chat_format": chat_format.FORMAT_VERSION, "schema_version": SCHEMA_VERSION,
        "configs": config_counts, "length_fit": length_fit,
        "config_digests": {n: hub.config_digest(out, n) for n, c in config_counts.items() if c},
        "decontamination": _decontamination(decontamination),
    }
    write_text_atomic(out / "stats.json", json.dumps(stats, indent=1, default=str) + "\n")
    write_text_atomic(out / "README.md", card(stats, params or {}))
    return stats


def _decontamination(report: Mapping[str, Any] | None) -> dict[str, Any]:
    """stats.json's ``decontamination``: per folder its kernels, the pool kernels dropped (by
    exact and shape-normalized match) and the workloads that could not be extracted."""
    r = dict(report or {})
    return {"shape_normalized": r.get("shape_normalized"), "dropped": r.get("dropped", 0),
            "folders": [{k: f.get(k) for k in ("folder", "workloads", "kernels", "dropped",
                                               "dropped_by", "failed")}
                        for f in r.get("folders") or []]}


def _decontamination_section(stats: Mapping[str, Any]) -> list[str]:
    d = stats.get("decontamination") or {}
    folders = d.get("folders") or []
    head = ["## Decontamination", ""]
    if not folders:
        return head + ["No benchmark folder was listed (params `decontaminate.folders`): this "
                       "release was not checked against any benchmark's kernels.", ""]
    how = ("by canonical LEIR hash and, shape-normalized (every size and constant replaced), "
           "at any other size" if d.get("shape_normalized") else "by canonical LEIR hash")
    lines = head + [
        f"This release contains no kernel of the benchmark folders below, matched {how}: they "
        f"were extracted and their kernels dropped from the pool before the search. "
        f"{d.get('dropped', 0)} pool kernels were dropped in all.", "",
        "| folder | its workloads | its kernels | pool kernels dropped | exact | at another size | not extracted |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for f in folders:
        by = f.get("dropped_by") or {}
        lines.append(f"| `{f['folder']}` | {f['workloads']} | {f['kernels']} | {f['dropped']} | "
                     f"{by.get('exact', 0)} | {by.get('shape', 0)} | {len(f.get('failed') or [])} |")
    failed = [x for f in folders for x in f.get("failed") or []]
    lines.append("")
    if failed:
        lines += [f"{len(failed)} benchmark workloads could not be extracted, so their kernels "
                  "are unknown and could not be excluded: " + "; ".join(failed[:5])
                  + (" ..." if len(failed) > 5 else ""), ""]
    return lines


def _cot_variety(steps: Sequence[StepRecord]) -> dict[str, Any]:
    """Distinct sentence templates of the reasoning, and how often the direction the reasoning
    expects agreed with the measurement (stored beside it)."""
    from ..cot.run import template_counts

    agree = [(s.cot.get("measured") or {}).get("prediction_agrees") for s in steps if s.cot]
    return {**template_counts(list(steps)), "prediction_agrees": sum(a is True for a in agree),
            "prediction_disagrees": sum(a is False for a in agree),
            "incoherent": sum(1 for s in steps if s.cot and s.cot.get("coherence"))}


def _cot_lines(v: Mapping[str, Any] | None) -> list[str]:
    if not v:
        return []
    return ["", "## Reasoning", "",
            "Each example's reasoning argues for its answer from what the prompt shows: the "
            "bottleneck is a limit found at the step's own site (the statement and loops it "
            "changes), the step is chosen because it answers that limit (or prepares the move "
            "that does, which it names, saying why that move needs it), alternatives are set "
            "aside with a reason from the same findings and never ranked by a model's time, and "
            "the expected effect is a bound computed from the program and the hardware line "
            "(cores, vector lanes, elements per cache line, reuse distance). Every number is "
            "computable from the prompt; caches are reasoned with per core (L1, L2; a last-level "
            "figure only when plausible for the core count). Steps whose reasoning cannot argue "
            "for them are kept out of the SFT set (`incoherent` in the rejects) and are never a "
            "pair's chosen side; they stay in `steps` and may be a rejected side; see "
            "`steptp/cot/coherence.py` for the rule.",
            "",
            f"{v['distinct_templates']} distinct sentence templates over {v['sentences']} sentences "
            f"(names and numbers masked), {v['distinct_openings']} opening patterns. The measured "
            "direction never enters the text; it agreed with the direction the reasoning expects "
            f"in {v['prediction_agrees']} steps and disagreed in {v['prediction_disagrees']} "
            "(`cot.measured.prediction_agrees`)."]


# ---------------------------------------------------------------------------- card
def _fmt(x: Any, spec: str = ".3g") -> str:
    return "–" if x is None else format(x, spec)


def card(stats: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    c = stats["counts"]
    lines = [
        # the publisher sets the license (params.yaml `license`); the Hub reads the front matter
        hub.front_matter(stats, params.get("license")) + f"# {stats['name']} {stats['version']} — a Step-TP dataset", "",
        "Step-level, verified, measured and explained tensor-program optimizations. Each example is "
        "one atomic decision on a kernel written in LEIR: the program before, the strategy, the site "
        "and the parameters, the chain of thought, and the program after. Every after-program was "
        "built with TVM, matched the reference numerically within its strategy's exactness class, "
        "and was timed on the hardware below.", "",
        "Programs keep the names their rewrites gave them (splitting `i` gives `i_o` and `i_i`, a "
        "new buffer is `T0`), so a step's site and reasoning name the loops of its own before- and "
        "after-program; a step's `before_leir` is its parent step's `after_leir`. Programs that "
        "differ only by names are one state: `data/kernels.parquet` holds each kernel's "
        "canonically renamed text (`steptp parse --rename` prints it for any program).", "",
        "## Contents", "",
        "| | count |", "| --- | ---: |",
        f"| kernels in the pool (extracted, checked) | {c['kernels']} |",
        f"| searched kernels (with steps) | {c.get('searched_kernels', c['trajectories'])} |",
        f"| workloads | {c['workloads']} |",
        f"| trajectories | {c['trajectories']} |", f"| SFT examples (`chat/*.jsonl`) | {c['steps']} |",
        f"| preference pairs (`chat/pairs-*.jsonl`) | {c.get('pairs', 0)} |",
        f"| searched steps, every role (`data/steps.parquet`) | {c.get('searched_steps', c['steps'])} |",
        f"| steps not used for SFT (`data/rejects.parquet`) | {c['rejects']} |", "",
        "| split | pool kernels | searched kernels | SFT examples | pairs |",
        "| --- | ---: | ---: | ---: | ---: |",
        *[f"| {sp} | {c['kernels_per_split'].get(sp, 0)} | "
          f"{(c.get('searched_kernels_per_split') or {}).get(sp, 0)} | "
          f"{c['examples_per_split'].get(sp, 0)} | {(c.get('pairs_per_split') or {}).get(sp, 0)} |"
          for sp in SPLITS],
        "",
        *_roles_section(stats),
        "Splits are by workload: kernels that occur in a common workload (an architecture, an operator "
        "suite entry) are in the same split, so no kernel is in more than one split, nor an "
        "architecture's kernels, except where a kernel shared by many workloads would make one group "
        "larger than the smallest split's share of the kernels (that kernel then stays with the "
        "workloads it joined first). A group's split comes from a seeded hash of the group, not from the timings, "
        "so it is the same in every build of these kernels (train on one nightly's train split and "
        "test on the next one's test split without overlap); only a split that would hold no SFT "
        "example takes the group nearest to it.", "",
        "## Strategies", "",
        f"![strategies]({stats['plots']['strategies']})", "",
        "| strategy | released | before balancing |", "| --- | ---: | ---: |",
        *[f"| `{k}` | {v} | {stats['strategies_before_balance'].get(k, 0)} |" for k, v in stats["strategies"].items()],
        "",
        f"Entropy of the strategy distribution: {_fmt(stats['entropy_bits'], '.3f')} bits "
        f"(before balancing {_fmt(stats['entropy_before_bits'], '.3f')}). "
        + (f"Balancing cap: {stats['balance']['cap']} steps per strategy."
           if stats.get("balance") and stats["balance"].get("applied")
           else "Balancing was not applied (" + str((stats.get("balance") or {}).get("why_not", "")) + ")."),
        "", *coverage.coverage_lines(stats.get("coverage"), stats.get("diversity")),
        "", "## Yield", "", *coverage.yield_lines(stats.get("yield")),
        "", "## Speedups", "",
        f"![speedups]({stats['plots']['speedups']})", "",
        "| | min | median | max | geomean |", "| --- | ---: | ---: | ---: | ---: |",
        *[f"| {k.replace('_', ' ')} | {_fmt(stats[k]['min'])} | {_fmt(stats[k]['median'])} | "
          f"{_fmt(stats[k]['max'])} | {_fmt(stats[k]['geomean'])} |" for k in ("step_speedup", "trajectory_speedup")],
        "", "## Token lengths", "",
        f"![tokens]({stats['plots']['tokens']})", "",
        f"Tokens per chat example (all three turns, `o200k_base`): min {_fmt(stats['tokens']['min'], '.0f')}, "
        f"median {_fmt(stats['tokens']['median'], '.0f')}, max {_fmt(stats['tokens']['max'], '.0f')}.", "",
        "## Steps not used for SFT", "",
        "Each with its reason and its `step_key` in `data/rejects.parquet` (`alternative`: a sibling, "
        "whose `step_key` the reason names, is the answer to that prompt; it is in the preference "
        "pairs).", "",
        "| reason | steps | meaning |", "| --- | ---: | --- |",
        *[f"| `{k}` | {v} | {(stats.get('reason_meanings') or {}).get(k, '')} |"
          for k, v in stats["rejects_by_reason"].items()],
        *_cot_lines(stats.get("cot_variety")),
        "", *_decontamination_section(stats),
        "## Hardware", "",
        f"Timed on: **{stats['hardware']}**.", "",
        "```json", json.dumps(stats["fingerprint"], indent=1, sort_keys=True), "```", "",
        "## Chat format", "",
        f"`chat/{{train,validation,test}}.jsonl`, format `{stats['chat_format']}`: one JSON object per "
        "line, `{\"messages\": [system, user, assistant], \"meta\": {...}}`. The user turn holds the "
        "target hardware and the LEIR program; the assistant turn holds `<think>` + the chain of "
        "thought + `</think>` and then the answer JSON `{\"strategy\", \"site\", \"params\", "
        "\"program\"}` (`program` is the LEIR after the step). `meta` joins back to "
        "`data/steps.parquet` by `step_key` (a search's rows form a tree: `step_index` is the depth, so (`trajectory_id`, `step_index`) alone is not unique) "
        "and carries `role`, `step_speedup` and `best_descendant_speedup`. The system prompt lists the "
        "strategy vocabulary.", "",
        "`chat/pairs-{train,validation,test}.jsonl`: preference pairs in the conversational format "
        "TRL's `DPOTrainer` reads: `prompt` (the system and user turns above), `chosen` and `rejected` "
        "(one assistant turn each, same format). For a program with several measured children, "
        "`chosen` is a child that is `improving` or `preparatory` (significantly faster than the "
        "program, or on a path to a significantly faster one), and `rejected` is a sibling that "
        "failed to build, verify or finish, or whose own after-program is significantly slower "
        "than `chosen`'s (`meta.rejected_why`: `failed` or `slower`). Siblings are compared step "
        "against step, each relative to the shared before-program: on the interleaved re-timings "
        "when both were re-timed, else on the search's timings; not on their best descendants, "
        "whose depth depends on how far the search explored under each. No pair is inverted: the "
        "best program measured through `rejected` is never significantly faster than the best "
        "through `chosen`. `meta` carries both roles (`chosen_role`, `rejected_role`), the "
        "timing that decided the pair (`compared_on`) and each side's speedups per timing "
        "source (see *Timing fields*); at most a few pairs per program.", "",
        *_timing_fields_section(),
        *hub.card_sections(stats),
        "Tables: `data/kernels.parquet`, `data/steps.parquet`, `data/trajectories.parquet` (each with a "
        "`split` column; steps also with `step_key` and `parent_step_key`) and `data/rejects.parquet`. `manifest.json` lists versions, parameters, seeds, "
        "fingerprints and the sha256 of every file; `data_docs/index.html` is the Great Expectations "
        "report of the quality gates this release passed.", "",
        "## Parameters", "",
        "```json", json.dumps(dict(params), indent=1, sort_keys=True, default=str), "```", "",
    ]
    return "\n".join(lines)


def _timing_fields_section() -> list[str]:
    """Which timing each speedup field of the tables and the pairs comes from."""
    rows = [
        ("`step_speedup`", "steps, chat `meta`",
         "before / after, the search's medians (the two programs timed minutes apart)"),
        ("`cumulative_speedup`", "steps", "the unscheduled kernel / after, the search's medians"),
        ("`paired_before`, `paired_after`, `paired_best`", "steps",
         "interleaved re-timings (A, B, A, B, …) of the before-program, the after-program and the "
         "best descendant; null where the step was not re-timed"),
        ("`role_timing`", "steps", "the timing the role was decided on: `paired` (the `paired_*` "
         "re-timings) or `search`; null for a failed step"),
        ("`log_speedup`", "steps, chat `meta`", "ln(before / after) on the `role_timing` timing, so "
         "`exp(log_speedup)` equals `step_speedup` only where `role_timing` is `search`"),
        ("`best_descendant_speedup`", "steps, chat `meta`",
         "before / the fastest program measured through the step, on the `role_timing` timing"),
        ("`chosen_step_speedup`, `rejected_step_speedup`", "pair `meta`",
         "before / after, the search's medians (the side's `step_speedup`)"),
        ("`chosen_paired_speedup`, `rejected_paired_speedup`", "pair `meta`",
         "before / after, the interleaved re-timing; null where the side was not re-timed"),
        ("`chosen_best_speedup`, `rejected_best_speedup`", "pair `meta`",
         "before / the side's best descendant, the search's medians"),
        ("`chosen_paired_best_speedup`, `rejected_paired_best_speedup`", "pair `meta`",
         "the same from the interleaved re-timing; null where the side was not re-timed"),
        ("`compared_on`", "pair `meta`", "the field whose timing decided the pair: "
         "`paired_speedup` (both sides re-timed), `step_speedup`, or `failed` (the rejected side "
         "failed; nothing was compared)"),
        ("`best_compared_on`", "pair `meta`", "the timing of the no-inversion check on best "
         "descendants: `paired_best_speedup`, `best_speedup` or `failed`"),
    ]
    return ["## Timing fields", "",
            "Every speedup is a ratio of medians, before / after; the fields say which timing they "
            "come from (steps: `data/steps.parquet`, joined to chat and pair rows by `step_key`).", "",
            "| field | in | timing |", "| --- | --- | --- |",
            *[f"| {f} | {where} | {what} |" for f, where, what in rows], ""]


def _roles_section(stats: Mapping[str, Any]) -> list[str]:
    r = stats.get("roles") or {}
    if not r:
        return []
    sig = stats.get("significance") or {}
    rem = stats.get("remeasured") or {}
    cols = ROLES
    lines = [
        "## Step roles", "",
        "Every searched step has a `role`, computed from its measurements:", "",
        "- `improving`: the after-program is significantly faster than the before-program;",
        "- `preparatory`: not by itself, but the fastest program measured through it (its best "
        "descendant in the same search tree) is significantly faster than its before-program; its "
        "chain of thought names the later step it enables;",
        "- `neutral` / `regressing`: neither (regressing: significantly slower); negatives;",
        "- `failed`: did not build, verify, or finish in time (the reason is in `reason`); negatives.", "",
        f"*Significantly faster*: with timings summarized as median and spread (interquartile range / "
        f"median), the before-median must exceed the after-median by more than "
        f"max({_fmt(sig.get('min_gain'))}, {_fmt(sig.get('spread_factor'))} × the larger spread); a "
        f"timing with spread above {_fmt(sig.get('max_spread'))} decides nothing (`noisy`). The "
        f"would-be SFT answers and the steps nearest that margin were re-timed interleaved (A, B, A, B, …, "
        f"each round's common drift divided out) and decided on those timings: {rem.get('steps', 0)} steps; the first and final program of "
        f"{rem.get('trajectories', 0)} trajectories were re-timed the same way "
        f"(median re-timed trajectory speedup {_fmt((rem.get('trajectory_speedup') or {}).get('median'))}).", "",
        "Only `improving` and `preparatory` steps are SFT examples, one answer per distinct prompt (the "
        "best-measured child of that program; its siblings go to the preference pairs). "
        "`data/steps.parquet` keeps every searched step with `role`, `role_timing` (the timing "
        "it was decided on), `log_speedup`, `best_descendant_speedup` (for returns) and `sft` "
        "(whether it is a chat example).", "",
        "| steps | " + " | ".join(cols) + " |", "| --- |" + " ---: |" * len(cols),
        "| all searched | " + " | ".join(str((r.get("all_steps") or {}).get(k, 0)) for k in cols) + " |",
        "| SFT examples | " + " | ".join(str((r.get("sft") or {}).get(k, 0)) for k in cols) + " |",
        *[f"| {sp}: searched / SFT | " + " | ".join(
            f"{(r.get('all_per_split') or {}).get(sp, {}).get(k, 0)} / {(r.get('sft_per_split') or {}).get(sp, {}).get(k, 0)}"
            for k in cols) + " |" for sp in SPLITS],
        "", "| strategy | " + " | ".join(cols) + " |", "| --- |" + " ---: |" * len(cols),
        *[f"| `{k}` | " + " | ".join(str(v.get(x, 0)) for x in cols) + " |"
          for k, v in (r.get("per_strategy") or {}).items()],
        "",
    ]
    return lines


# ---------------------------------------------------------------------------- manifest, publish
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_checksums(folder: str | Path) -> dict[str, dict[str, Any]]:
    folder = Path(folder)
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            out[p.relative_to(folder).as_posix()] = {"sha256": _sha256(p), "bytes": p.stat().st_size}
    return out


def verify_checksums(folder: str | Path) -> list[str]:
    """Files whose checksum differs from the manifest, or are missing (empty: all good)."""
    folder = Path(folder)
    man = json.loads((folder / MANIFEST).read_text())
    bad = []
    for rel, d in man["files"].items():
        p = folder / rel
        if not p.is_file() or _sha256(p) != d["sha256"]:
            bad.append(rel)
    return bad


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for pkg in ("steptp", "apache-tvm", "polars", "pyarrow", "prefect", "dvc", "great-expectations",
                "bpe-openai", "torch", "transformers"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def write_manifest(folder: str | Path, *, params: Mapping[str, Any] | None = None,
                   validation: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None) -> Path:
    folder = Path(folder)
    stats = json.loads((folder / "stats.json").read_text()) if (folder / "stats.json").exists() else {}
    p = dict(params or {})
    seeds = {k: v for k, v in _flatten(p).items() if k.split(".")[-1] == "seed"}
    man = {
        "name": stats.get("name"), "version": stats.get("version"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "schema_version": SCHEMA_VERSION, "chat_format": chat_format.FORMAT_VERSION,
        "versions": _versions(), "params": p, "seeds": seeds,
        "fingerprints": {"hardware": stats.get("fingerprint"), "step_fingerprints": stats.get("fingerprints", [])},
        "counts": stats.get("counts"), "validation": dict(validation or {}),
        **dict(extra or {}),
        "files": file_checksums(folder),
    }
    return write_text_atomic(folder / MANIFEST, json.dumps(man, indent=1, default=str) + "\n")


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


class ReleaseExists(RuntimeError):
    """A release of that id is already published with different content."""


CONTENT_DIRS = ("data", "chat", hub.CONFIG_DIR)
LATEST = "latest.json"


def content_digest(folder: str | Path) -> str:
    """sha256 of the records of a release (every file under data/ and chat/, by path): what
    "the same release" means. Card, plots, Data Docs and manifest dates are left out."""
    folder = Path(folder)
    h = hashlib.sha256()
    for d in CONTENT_DIRS:
        for p in sorted((folder / d).rglob("*")) if (folder / d).is_dir() else ():
            if p.is_file():
                h.update(p.relative_to(folder).as_posix().encode() + b"\0" + _sha256(p).encode() + b"\n")
    return h.hexdigest()


def _differing(a: Path, b: Path) -> list[str]:
    fa, fb = file_checksums(a), file_checksums(b)
    keys = {k for k in set(fa) | set(fb) if k.split("/", 1)[0] in CONTENT_DIRS}
    return sorted(k for k in keys if (fa.get(k) or {}).get("sha256") != (fb.get(k) or {}).get("sha256"))


def published_releases(folder: str | Path) -> list[dict[str, Any]]:
    """The releases published in ``folder`` (subfolders with a manifest), oldest first:
    id, path, name, version, created, counts."""
    folder = Path(folder)
    out = []
    for m in sorted(folder.glob(f"*/{MANIFEST}")):
        if m.parent.is_symlink() or m.parent.name.startswith("."):  # the latest pointer, staging
            continue
        try:
            man = json.loads(m.read_text())
        except (OSError, ValueError):
            continue
        hw = (man.get("fingerprints") or {}).get("hardware") or {}
        out.append({"id": m.parent.name, "path": str(m.parent), "name": man.get("name"),
                    "version": man.get("version"), "created": man.get("created", ""),
                    "counts": man.get("counts") or {},
                    "fingerprint": hw.get("id", "") if isinstance(hw, dict) else ""})
    out.sort(key=lambda r: (r["created"], r["id"]))
    return out


def previous_release(folder: str | Path, exclude: str, name: str | None = None,
                     fingerprint: str | None = None) -> Path | None:
    """The newest release in ``folder`` other than ``exclude`` (of the same ``name``; with
    ``fingerprint``, timed on that hardware: an accumulating nightly's line)."""
    rs = [r for r in published_releases(folder) if r["id"] != exclude and (name is None or r["name"] == name)
          and (fingerprint is None or r["fingerprint"] == fingerprint)]
    return Path(rs[-1]["path"]) if rs else None


def _point_latest(dest: Path) -> None:
    man = json.loads((dest / MANIFEST).read_text())
    write_text_atomic(dest.parent / LATEST, json.dumps(
        {"id": dest.name, "name": man.get("name"), "version": man.get("version"),
         "created": man.get("created"), "path": dest.name}, indent=1) + "\n")
    link, tmp = dest.parent / "latest", dest.parent / f".latest.{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(dest.name, tmp)
        os.replace(tmp, link)
    except OSError:  # a file system without symlinks: latest.json is the pointer
        pass


@dataclass
class Publication:
    dest: Path
    status: str                 # published | unchanged | replaced


def publish_release(staging: str | Path, dest: str | Path, *, params: Mapping[str, Any] | None = None,
                    validation: Mapping[str, Any] | None = None, move: bool = True, force: bool = False,
                    latest: bool = True) -> Publication:
    """Write the manifest into ``staging`` and put the folder at ``dest`` atomically (it
    appears complete or not at all). A published release is never overwritten: when ``dest``
    exists with the same records (``content_digest``) nothing changes (status ``unchanged``;
    ``staging`` is removed when ``move``); with other records ``ReleaseExists`` is raised unless
    ``force``. ``latest``: point ``dest.parent/latest.json`` (and the ``latest`` symlink) at it.
    ``move=False`` copies (``staging`` stays, e.g. as a DVC output of the export stage)."""
    staging, dest = Path(staging), Path(dest)
    status = "published"
    if (dest / MANIFEST).is_file():
        if content_digest(dest) == content_digest(staging):
            if move:
                shutil.rmtree(staging, ignore_errors=True)
            if latest:
                _point_latest(dest)
            return Publication(dest, "unchanged")
        if not force:
            diff = _differing(dest, staging)
            raise ReleaseExists(
                f"{dest} is already published with other records ({len(diff)} files differ, e.g. "
                f"{', '.join(diff[:3])}); a published release is never overwritten: give it a new "
                f"version (params.yaml 'version', or a nightly build), or pass --force to replace it")
        status = "replaced"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.incoming-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    if move:
        os.replace(staging, tmp) if staging.parent.resolve() == dest.parent.resolve() else shutil.move(str(staging), tmp)
    else:
        shutil.copytree(staging, tmp)
    write_manifest(tmp, params=params, validation=validation,
                   extra={"content_sha256": content_digest(tmp)})
    old = None
    if dest.exists():
        old = dest.parent / f".{dest.name}.old-{os.getpid()}"
        os.replace(dest, old)
    os.replace(tmp, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    if latest:
        _point_latest(dest)
    return Publication(dest, status)


def publish(staging: str | Path, dest: str | Path, *, params: Mapping[str, Any] | None = None,
            validation: Mapping[str, Any] | None = None, move: bool = True, force: bool = True,
            latest: bool = False) -> Path:
    """``publish_release`` returning the destination; replaces a differing release at ``dest``
    unless ``force=False`` (the DVC stage's single ``release`` output is versioned by DVC)."""
    return publish_release(staging, dest, params=params, validation=validation, move=move,
                           force=force, latest=latest).dest
