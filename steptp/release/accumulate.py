"""Nightlies that accumulate (params ``nightly.accumulate``): tonight's release holds tonight's
searches plus every still-valid record of the previous release on the same hardware.

    carry = load_carry(out, rid, name, fingerprint_id, night, stage_hash("search"), max_age_days)
    carry.searched()            # kernel_id -> stale? (the search's shard skips the valid ones)
    steps, trajs, info = carried_records(carry, tonight_steps, tonight_trajs, pool_ids)
    keys = retime_sample(steps, rule, fraction, night, seed)
    timings = time_programs(retime_programs(steps, keys), threads, rounds)
    steps, rows = apply_retiming(steps, timings, rule)

* **One line per hardware fingerprint.** The release a night carries from is the newest
  published release of the same name whose hardware fingerprint (``manifest.json``) is
  tonight's (``steptp.export.previous_release``); releases timed elsewhere are neither carried
  nor compared with, and their records never mix in (a record of another fingerprint in the
  previous release is left out and counted). A first night on a machine starts its own line.
* **Valid and stale.** A carried kernel's records are *stale* when an older code version of the
  search made them (``steptp.codehash``), when they carry no night, or when their night is
  more than ``nightly.max_age_days`` ago. Stale records are still carried until the shard has
  room to search their kernel again (never-searched kernels come first); then tonight's
  records replace them. A kernel that left tonight's pool (removed, or decontaminated) is not
  carried.
* **Drift.** A sample of the carried steps labelled improving or preparatory
  (``nightly.retime_fraction``, ordered by a hash of the night and the step, so it rotates) is
  re-timed interleaved (before, after and the best descendant, ``search.remeasure_rounds``
  rounds, through the measurement service); the re-timing replaces the step's ``paired_*``
  timings and the significance rule decides its role again (``steptp.search.roles``). A label
  that no longer holds is dropped (the step stays, with its new role, among the searched steps
  and the rejects); a step whose programs fail to time is removed with its subtree.
* **Splits.** Every kernel of the newest release of the name (on any hardware: a split is no
  property of the machine) keeps its split (``pinned`` of ``steptp.curate.assign_splits``).

The counts (carried, stale, re-timed, dropped) go to ``accumulation.json``, ``stats.json``
(``accumulation``), the card and ``diff.json``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

from ..records import (KernelRecord, StepRecord, Timing, TrajectoryRecord, step_key,
                       write_text_atomic)

ACCUMULATION = "accumulation.json"


@dataclass
class Carry:
    """What a night takes over from the previous release of its line."""

    previous: str | None                       # the release folder carried from
    fingerprint: str
    night: str
    steps: list[StepRecord] = field(default_factory=list)
    trajectories: list[TrajectoryRecord] = field(default_factory=list)
    splits: dict[str, str] = field(default_factory=dict)   # kernel_id -> split there
    stale: dict[str, str] = field(default_factory=dict)    # kernel_id -> why stale
    other_hardware: int = 0                    # records of another fingerprint, left out
    search_cost: dict[str, Any] | None = None  # the previous release's search cost (its yield)

    def kernels(self) -> list[str]:
        return sorted({s.kernel_id for s in self.steps} | {t.kernel_id for t in self.trajectories})

    def searched(self) -> dict[str, bool]:
        """kernel_id -> whether its records are stale (``choose_kernels``'s ``searched``)."""
        return {k: k in self.stale for k in self.kernels()}

    def answerable(self) -> dict[str, int]:
        """kernel_id -> its prompts with a faster answer: distinct before-programs with a child
        labelled improving or preparatory (what the search gave curation to choose SFT answers
        from); 0 for a searched kernel without one. The shard's family yield reads it
        (``steptp.search.selection.shard_deferrals``)."""
        from ..search.roles import SFT_ROLES

        prompts: dict[str, set[str]] = {k: set() for k in self.kernels()}
        for s in self.steps:
            if s.role in SFT_ROLES:
                prompts[s.kernel_id].add(s.before_hash or s.before_leir)
        return {k: len(v) for k, v in prompts.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"previous": self.previous, "fingerprint": self.fingerprint, "night": self.night,
                "splits": self.splits, "stale": self.stale, "other_hardware": self.other_hardware,
                "searched": self.searched(), "answerable": self.answerable(),
                "search_cost": self.search_cost}


def _read(path: Path, kind: type) -> list:
    """Records of a release table (its added columns, split, step_key, ..., left aside; a table
    written before a field existed takes the field's default)."""
    if not path.is_file():
        return []
    from pydantic import ValidationError

    try:
        df = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as e:
        raise ValueError(f"{path}: not a readable parquet table of the previous release ({e})") from None
    cols = [c for c in df.columns if c in kind.model_fields]
    out = []
    for i, r in enumerate(df.select(cols).iter_rows(named=True)):
        try:
            out.append(kind.from_row(r))
        except (ValidationError, ValueError) as e:
            raise ValueError(f"{path}: row {i} is no {kind.__name__}: {str(e).splitlines()[0][:300]}") from None
    return out


def _night_date(night: str) -> _dt.date | None:
    try:
        return _dt.datetime.strptime(night, "%Y%m%d").date()
    except ValueError:
        return None


def stale_reason(records: Sequence[StepRecord | TrajectoryRecord], code_version: str, night: str,
                 max_age_days: float | None) -> str | None:
    """Why a kernel's records are stale, or None when they are valid tonight."""
    codes = sorted({r.code_version for r in records})
    if any(c != code_version for c in codes):
        old = [c or "unknown" for c in codes if c != code_version]
        return f"searched by another code version of the search ({', '.join(old)}; now {code_version})"
    nights = sorted({r.night for r in records})
    if not nights or "" in nights:
        return "searched on no recorded night"
    today = _night_date(night)
    first = _night_date(nights[0])
    if today is None or first is None:
        return f"night {nights[0]!r} unreadable"
    age = (today - first).days
    if max_age_days is not None and age > max_age_days:
        return f"searched {age} days ago (night {nights[0]}), more than nightly.max_age_days {max_age_days:g}"
    return None


def load_carry(out: str | Path, rid: str, name: str, fingerprint: str, night: str,
               code_version: str, max_age_days: float | None) -> Carry:
    """The records tonight's build ``rid`` takes over: those of the newest release of ``name``
    in ``out`` published on ``fingerprint`` (none on a first night of that hardware)."""
    from ..export import previous_release

    prev = previous_release(out, rid, name, fingerprint)
    carry = Carry(str(prev) if prev else None, fingerprint, night)
    # splits are no property of the hardware: they come from the newest release of the name,
    # whichever line it is on, so that no line tests on another's training kernels (the
    # line's own previous release fills in kernels the newest lacks)
    for rel in (prev, previous_release(out, rid, name)):
        kt = Path(rel) / "data" / "kernels.parquet" if rel is not None else None
        if kt is not None and kt.is_file():
            df = pl.read_parquet(kt)
            if "split" in df.columns:
                carry.splits.update({k: s for k, s in zip(df["kernel_id"].to_list(), df["split"].to_list())
                                     if s})
    if prev is None:
        return carry
    carry.search_cost = _search_cost(Path(prev))
    data = Path(prev) / "data"
    steps = _read(data / "steps.parquet", StepRecord)
    trajs = _read(data / "trajectories.parquet", TrajectoryRecord)
    carry.steps = [s for s in steps if s.fingerprint == fingerprint]
    carry.trajectories = [t for t in trajs if t.fingerprint == fingerprint]
    carry.other_hardware = len(steps) - len(carry.steps) + len(trajs) - len(carry.trajectories)
    by_kernel: dict[str, list] = {}
    for r in [*carry.steps, *carry.trajectories]:
        by_kernel.setdefault(r.kernel_id, []).append(r)
    for kid in sorted(by_kernel):
        why = stale_reason(by_kernel[kid], code_version, night, max_age_days)
        if why is not None:
            carry.stale[kid] = why
    return carry


def _search_cost(release: Path) -> dict[str, Any] | None:
    """A release's search cost as ``steptp.search.stage_stats`` writes it (from its
    ``stats.json`` yield, cumulative over its nights); None when it recorded none."""
    from ..search.stage_stats import check

    try:
        y = json.loads((release / "stats.json").read_text()).get("yield")
    except (OSError, ValueError, AttributeError):
        return None
    return check({k: y.get(k) for k in ("wall_s", "kernels", "steps", "workers", "machines", "nights")
                  if y.get(k) is not None}) if isinstance(y, dict) else None


def write_carry(carry: Carry, work: str | Path) -> dict[str, str]:
    """The carried records and their summary under ``work`` (how the stage flows hand data on)."""
    from ..records import table, write_table

    work = Path(work)
    return {"steps": str(write_table(table(carry.steps, StepRecord), work / "carried-steps.parquet")),
            "trajectories": str(write_table(table(carry.trajectories, TrajectoryRecord),
                                            work / "carried-trajectories.parquet")),
            "carry": str(write_text_atomic(work / "carried.json",
                                           json.dumps(carry.to_dict(), indent=1, sort_keys=True) + "\n"))}


def read_carry(paths: Mapping[str, str]) -> Carry:
    from ..records import read_records

    d = json.loads(Path(paths["carry"]).read_text())
    return Carry(d["previous"], d["fingerprint"], d["night"],
                 read_records(paths["steps"], StepRecord), read_records(paths["trajectories"], TrajectoryRecord),
                 dict(d["splits"]), dict(d["stale"]), int(d["other_hardware"]), d.get("search_cost"))


def carried_records(carry: Carry, steps: Sequence[StepRecord], trajectories: Sequence[TrajectoryRecord],
                    pool: set[str]) -> tuple[list[StepRecord], list[TrajectoryRecord], dict[str, Any]]:
    """The carried records that join tonight's (``steps``, ``trajectories``): those of every
    kernel still in the ``pool`` (tonight's kernel ids) that was not searched again tonight."""
    tonight = {s.kernel_id for s in steps} | {t.kernel_id for t in trajectories}
    keep = lambda kid: kid in pool and kid not in tonight  # noqa: E731
    cs = [s for s in carry.steps if keep(s.kernel_id)]
    ct = [t for t in carry.trajectories if keep(t.kernel_id)]
    carried_kernels = sorted({s.kernel_id for s in cs} | {t.kernel_id for t in ct})
    info = {
        "carried_kernels": len(carried_kernels),
        "carried_steps": len(cs), "carried_trajectories": len(ct),
        "stale_carried": sorted(k for k in carried_kernels if k in carry.stale),
        "researched": sorted(k for k in carry.kernels() if k in tonight),
        "left_pool": sorted(k for k in carry.kernels() if k not in pool),
    }
    return cs, ct, info


def carried_status(kernels: Sequence[KernelRecord], steps: Sequence[StepRecord],
                   trajectories: Sequence[TrajectoryRecord], carry: Carry) -> list[KernelRecord]:
    """``kernels`` with the ``search_status`` of each carried kernel saying so: its night, and
    why its records are stale when they are."""
    nights: dict[str, set[str]] = {}
    for r in [*steps, *trajectories]:
        nights.setdefault(r.kernel_id, set()).add(r.night or "?")
    out = []
    for k in kernels:
        if k.kernel_id in nights:
            n = ", ".join(sorted(nights[k.kernel_id]))
            why = carry.stale.get(k.kernel_id)
            k = k.model_copy(update={"search_status": f"carried: searched night {n}"
                                     + (f"; stale, {why}" if why else "")})
        out.append(k)
    return out


# ---------------------------------------------------------------------------- drift
def retime_sample(steps: Sequence[StepRecord], rule, fraction: float, night: str,
                  seed: int = 0) -> list[str]:
    """Step keys of the carried steps to re-time tonight: ``fraction`` (rounded up) of those the
    rule labels improving or preparatory, ordered by a hash of ``seed``, the night and the step
    (each night another sample; the same one on a rerun of a night)."""
    from ..search.roles import SFT_ROLES, assign_roles

    if fraction <= 0 or not steps:
        return []
    labelled = [step_key(s) for s in assign_roles(steps, rule) if s.role in SFT_ROLES]
    n = math.ceil(fraction * len(labelled))
    order = sorted(labelled, key=lambda k: hashlib.sha256(f"retime|{seed}|{night}|{k}".encode()).hexdigest())
    return sorted(order[:n])


def retime_programs(steps: Sequence[StepRecord], keys: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(step key, programs to re-time side by side) per key: its before- and after-program and,
    when another row of its subtree is faster, that best descendant's after-program."""
    from ..search.roles import Tree

    tree = Tree(steps)
    idx = {k: i for i, k in enumerate(tree.keys)}
    out = []
    for k in keys:
        i = idx[k]
        d = tree.best_descendant(i)
        s = tree.steps[i]
        out.append((k, [s.before_leir, s.after_leir] + ([tree.steps[d].after_leir] if d != i else [])))
    return out


def time_programs(groups: Sequence[tuple[str, list[str]]], threads: int | None, rounds: int,
                  rpc: Mapping[str, Any] | None = None) -> dict[str, list[dict[str, Any] | None]]:
    """Each group's programs timed interleaved (``steptp.measure.significance.interleaved``) with
    the search's timing protocol at ``threads``, uncached (on the RPC fleet ``rpc`` when given);
    key -> the timings as dicts (None for a program that failed)."""
    from ..measure.significance import interleaved, uncached_timer
    from ..search.evaluator import search_config, set_threads
    from ..tir.build import default_target

    backend = None
    if rpc:
        from ..measure.runner.rpc import RPCBackend

        backend = RPCBackend.from_dict(dict(rpc))
    timer = uncached_timer(default_target(), search_config(set_threads(threads)), backend)
    out: dict[str, list[dict[str, Any] | None]] = {}
    try:
        for key, programs in groups:
            ts = interleaved(timer, programs, max(1, rounds))
            out[key] = [t.model_dump() if t is not None else None for t in ts]
    finally:
        timer.close()
    return out


def _gain(b: Timing | None, a: Timing | None) -> float | None:
    return b.median_s / a.median_s if b is not None and a is not None and a.median_s > 0 else None


def apply_retiming(steps: Sequence[StepRecord], timings: Mapping[str, Sequence[Mapping | None]],
                   rule) -> tuple[list[StepRecord], list[dict[str, Any]]]:
    """``steps`` with tonight's re-timings (``timings``: step key -> before, after[, best])
    as their ``paired_*``, and one row per re-timed step: its role before and after, the gains,
    and ``holds``. A step with a failed timing is removed with its subtree (``holds`` false).
    A re-timing too noisy to decide anything by ``rule`` (a spread above its ``max_spread``)
    changes nothing: the recorded label stands (``holds``, ``why`` says so), as a noisy timing
    decides no role in the search either (night 20261212 dropped a 1.6x parallel loop re-timed
    at 2.0x because the after-program's spread was 0.3)."""
    from ..search.roles import SFT_ROLES, Tree, assign_roles

    steps = list(steps)
    before = {step_key(s): s for s in assign_roles(steps, rule)}
    tree = Tree(steps)
    idx = {k: i for i, k in enumerate(tree.keys)}
    removed: set[int] = set()
    failed: set[str] = set()
    undecided: dict[str, float | None] = {}
    for key in sorted(timings):
        i = idx.get(key)
        if i is None:
            continue
        ts = [Timing(**t) if t is not None else None for t in timings[key]]
        if len(ts) < 2 or any(t is None for t in ts):
            failed.add(key)
            stack = [i]
            while stack:
                j = stack.pop()
                if j not in removed:
                    removed.add(j)
                    stack += tree.children.get(j, [])
            continue
        if any(rule.noisy(t) for t in ts):
            undecided[key] = _gain(ts[0], ts[1])
            continue
        steps[i] = steps[i].model_copy(update={"paired_before": ts[0], "paired_after": ts[1],
                                               "paired_best": ts[2] if len(ts) > 2 else None})
    kept = [s for j, s in enumerate(steps) if j not in removed]
    after = {step_key(s): s for s in assign_roles(kept, rule)}
    rows = []
    for key in sorted(timings):
        if key not in before:
            continue
        b, a = before[key], after.get(key)
        old_b, old_a = b.paired_before or b.before, b.paired_after or b.after
        why = ("a program failed to time again" if key in failed else
               f"re-timing too noisy to decide (spread above {rule.max_spread:g}); the recorded "
               f"label stands" if key in undecided else (a.role_detail if a is not None else ""))
        rows.append({
            "step_key": key, "kernel_id": b.kernel_id, "strategy": b.strategy, "night": b.night,
            "role_before": b.role, "role_after": a.role if a is not None else "removed",
            "recorded_speedup": _gain(old_b, old_a),
            "retimed_speedup": (undecided[key] if key in undecided else
                                _gain(a.paired_before, a.paired_after) if a is not None else None),
            "holds": a is not None and a.role in SFT_ROLES, "undecided": key in undecided,
            "why": why})
    return kept, rows


def report(carry: Carry, merged: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
           kernels: Sequence[KernelRecord]) -> dict[str, Any]:
    """The night's accumulation figures (``accumulation.json``)."""
    names = {k.kernel_id: k.name for k in kernels}
    dropped = [r for r in rows if not r["holds"]]
    return {
        "night": carry.night, "fingerprint": carry.fingerprint,
        "carried_from": Path(carry.previous).name if carry.previous else None,
        "carried_kernels": merged["carried_kernels"], "carried_steps": merged["carried_steps"],
        "carried_trajectories": merged["carried_trajectories"],
        "stale_kernels": len(carry.stale),
        "stale_carried": len(merged["stale_carried"]),
        "researched_kernels": len(merged["researched"]),
        "left_pool": len(merged["left_pool"]),
        "other_hardware_records": carry.other_hardware,
        "retimed": len(rows), "dropped": len(dropped),
        "undecided": sum(1 for r in rows if r.get("undecided")),
        "stale": {k: {"name": names.get(k, ""), "why": w} for k, w in sorted(carry.stale.items())},
        "retimed_steps": [dict(r, name=names.get(r["kernel_id"], "")) for r in rows],
    }


def card_section(rep: Mapping[str, Any]) -> str:
    """The card's "Accumulation" section."""
    src = f"`{rep['carried_from']}`" if rep["carried_from"] else "none (the first night of this hardware's line)"
    lines = ["## Accumulation", "",
             f"Nightly {rep['night']} on hardware fingerprint `{rep['fingerprint']}`; carried from: {src}. "
             "Only releases timed on the same fingerprint are carried from; tonight's searches replace "
             "the records of the kernels they searched again.", "",
             "| | count |", "| --- | ---: |",
             f"| kernels carried | {rep['carried_kernels']} |",
             f"| steps carried | {rep['carried_steps']} |",
             f"| kernels of the previous release searched again tonight (stale records) | {rep['researched_kernels']} |",
             f"| kernels with stale records still carried (the shard had no room) | {rep['stale_carried']} |",
             f"| kernels carried from no longer in the pool (left out) | {rep['left_pool']} |",
             f"| records of another fingerprint (left out) | {rep['other_hardware_records']} |",
             f"| carried labels re-timed tonight | {rep['retimed']} |",
             f"| labels that no longer hold (dropped from SFT) | {rep['dropped']} |",
             f"| re-timings too noisy to decide (the recorded label stands) | {rep.get('undecided', 0)} |",
             f"| carried steps whose reasoning an older template wrote, written again "
             f"(`nightly.refresh_reasoning`) | {rep.get('reasoning_rewritten', 0)} |", ""]
    dropped = [r for r in rep["retimed_steps"] if not r["holds"]]
    if dropped:
        fmt = lambda x: "—" if x is None else f"{x:.3g}x"  # noqa: E731
        lines += ["| kernel | strategy | searched | recorded | re-timed | now |",
                  "| --- | --- | --- | ---: | ---: | --- |",
                  *[f"| {r['name'] or r['kernel_id'][:12]} | `{r['strategy']}` | {r['night'] or '?'} | "
                    f"{fmt(r['recorded_speedup'])} | {fmt(r['retimed_speedup'])} | {r['role_after']} |"
                    for r in dropped[:30]], ""]
    lines += [f"Every re-timed step and the stale kernels: `{ACCUMULATION}`.", ""]
    return "\n".join(lines)


def write_report(staging: str | Path, rep: Mapping[str, Any]) -> None:
    """``accumulation.json``, the ``accumulation`` counts in ``stats.json`` and the card section."""
    staging = Path(staging)
    write_text_atomic(staging / ACCUMULATION, json.dumps(rep, indent=1, default=str) + "\n")
    stats_p = staging / "stats.json"
    stats = json.loads(stats_p.read_text())
    stats["accumulation"] = {k: v for k, v in rep.items() if k not in ("stale", "retimed_steps")}
    write_text_atomic(stats_p, json.dumps(stats, indent=1, default=str) + "\n")
    card = staging / "README.md"
    text = card.read_text() if card.is_file() else ""
    write_text_atomic(card, text.rstrip("\n") + "\n\n" + card_section(rep))


__all__ = ["ACCUMULATION", "Carry", "apply_retiming", "card_section", "carried_records", "carried_status",
           "load_carry",
           "read_carry", "report", "retime_programs", "retime_sample", "stale_reason",
           "time_programs", "write_carry", "write_report"]
