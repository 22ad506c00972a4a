"""Nightlies that accumulate (``steptp.release.accumulate``, params ``nightly.accumulate``): the
pieces on hand-built records (staleness, the shard, the drift sample and its verdicts, the
hardware line, splits that never move), then several real nights in a row through the Prefect
flow with a real measurement cache (slow, at the bottom)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from steptp import params as P  # noqa: E402
from steptp.measure.significance import SignificanceRule  # noqa: E402
from steptp.records import StepRecord, Timing, TrajectoryRecord, step_key, table  # noqa: E402
from steptp.release import accumulate as A  # noqa: E402

RULE = SignificanceRule(min_gain=0.1, spread_factor=1.0, max_spread=0.25)


def _t(median: float, spread: float = 0.02) -> Timing:
    return Timing(median_s=median, min_s=median, spread=spread, repeats=5, number=1)


def _step(before: str, after: str, kid: str = "k0", tid: str = "t0", i: int = 0, b: float = 2e-3,
          a: float = 1e-3, night: str = "20260101", code: str = "c1", fp: str = "fpA") -> StepRecord:
    return StepRecord(trajectory_id=tid, step_index=i, kernel_id=kid, before_leir=before, after_leir=after,
                      strategy="loop_reorder", family="loop", exactness="exact", site={"path": [i]},
                      params={}, outcome="improved", verified=True, before=_t(b), after=_t(a),
                      step_speedup=b / a, cumulative_speedup=b / a, target="cpu", fingerprint=fp,
                      night=night, code_version=code)


def _traj(kid: str, night: str = "20260101", code: str = "c1", fp: str = "fpA") -> TrajectoryRecord:
    return TrajectoryRecord(trajectory_id=f"t-{kid}", kernel_id=kid, policy="beam", seed=0, n_steps=1,
                            strategies=["loop_reorder"], baseline_s=2e-3, best_s=1e-3, speedup=2.0,
                            final_leir="p1", target="cpu", fingerprint=fp, night=night, code_version=code)


# ---------------------------------------------------------------------------- provenance, staleness
def test_old_record_files_read_with_empty_provenance(tmp_path):
    s = _step("p0", "p1")
    df = table([s], StepRecord).drop("night", "code_version")     # a file from before the fields
    df.write_parquet(tmp_path / "steps.parquet")
    (old,) = A._read(tmp_path / "steps.parquet", StepRecord)
    assert old.night == "" and old.code_version == "" and old.before == s.before
    assert "another code version" in A.stale_reason([old], "c1", "20260105", 30)


def test_stale_by_code_version_age_or_no_night():
    rec = [_step("p0", "p1", night="20260101", code="c1"), _traj("k0", night="20260101", code="c1")]
    assert A.stale_reason(rec, "c1", "20260120", 30) is None
    assert "30" in A.stale_reason(rec, "c1", "20260201", 30)          # 31 days old
    assert A.stale_reason(rec, "c1", "20260201", None) is None        # no age limit
    why = A.stale_reason(rec, "c2", "20260102", 30)
    assert "another code version" in why and "c1" in why and "c2" in why
    assert "no recorded night" in A.stale_reason([_step("p0", "p1", night="")], "c1", "20260102", 30)


# ---------------------------------------------------------------------------- the hardware line
def _publish(out: Path, rid: str, fp: str, steps: list[StepRecord], trajs: list[TrajectoryRecord],
             splits: dict[str, str]) -> Path:
    from steptp.export import publish_release

    st = out.parent / f"staging-{rid}"
    (st / "data").mkdir(parents=True)
    table(steps, StepRecord).with_columns(pl.lit("train").alias("split"),
                                          pl.Series("step_key", [step_key(s) for s in steps])
                                          ).write_parquet(st / "data/steps.parquet")
    table(trajs, TrajectoryRecord).write_parquet(st / "data/trajectories.parquet")
    pl.DataFrame({"kernel_id": list(splits), "split": list(splits.values())}).write_parquet(
        st / "data/kernels.parquet")
    name, version = rid.rsplit("-", 1)
    (st / "stats.json").write_text(json.dumps({"name": name, "version": version, "counts": {},
                                               "fingerprint": {"id": fp}}))
    return publish_release(st, out / rid).dest


def test_carry_follows_the_line_of_the_same_fingerprint(tmp_path):
    out = tmp_path / "releases"
    a = [_step("p0", "p1", kid="ka"), _step("q0", "q1", kid="kb", tid="t1", code="old")]
    # a stray record of another machine inside the release is left out too
    a_other = [*a, _step("r0", "r1", kid="kc", tid="t2", fp="fpB")]
    _publish(out, "n-1", "fpA", a_other, [_traj("ka"), _traj("kb", code="old")],
             {"ka": "train", "kb": "test", "kc": "train"})
    _publish(out, "n-2", "fpB", [_step("p0", "p1", kid="ka", fp="fpB")], [_traj("ka", fp="fpB")],
             {"ka": "validation"})
    c = A.load_carry(out, "n-3", "n", "fpA", "20260103", "c1", 30)
    assert Path(c.previous).name == "n-1"                      # not the newer release of fpB
    assert {s.kernel_id for s in c.steps} == {"ka", "kb"} and c.other_hardware == 1
    assert c.searched() == {"ka": False, "kb": True} and "another code version" in c.stale["kb"]
    assert c.splits == {"ka": "train", "kb": "test", "kc": "train"}
    b = A.load_carry(out, "n-3", "n", "fpB", "20260103", "c1", 30)
    assert Path(b.previous).name == "n-2" and b.steps[0].fingerprint == "fpB"
    new = A.load_carry(out, "n-3", "n", "fpC", "20260103", "c1", 30)
    assert new.previous is None and new.steps == [] and new.searched() == {}   # its own line
    # the records round-trip through the work folder as the flows hand them on
    again = A.read_carry(A.write_carry(c, tmp_path / "work"))
    assert again.steps == c.steps and again.stale == c.stale and again.splits == c.splits

    # tonight re-searched kb; ka is carried; a kernel that left the pool is not
    tonight = [_step("q0", "q2", kid="kb", tid="t9", night="20260103")]
    cs, ct, info = A.carried_records(c, tonight, [], {"ka", "kb"})
    assert {s.kernel_id for s in cs} == {"ka"} and [t.kernel_id for t in ct] == ["ka"]
    assert info["researched"] == ["kb"] and info["carried_kernels"] == 1
    cs, _, info = A.carried_records(c, tonight, [], {"kb"})
    assert cs == [] and info["left_pool"] == ["ka"]


# ---------------------------------------------------------------------------- drift
def test_retime_sample_rotates_with_the_night_and_takes_only_labelled_steps():
    steps = [_step(f"p{i}", f"p{i}x", kid=f"k{i}", tid=f"t{i}") for i in range(12)]
    flat = [_step(f"f{i}", f"f{i}x", kid=f"f{i}", tid=f"tf{i}", a=2e-3) for i in range(4)]   # neutral
    one = A.retime_sample(steps + flat, RULE, 0.25, "20260101")
    assert len(one) == 3 and one == A.retime_sample(steps + flat, RULE, 0.25, "20260101")
    assert set(one) <= {step_key(s) for s in steps}
    nights = {tuple(A.retime_sample(steps + flat, RULE, 0.25, f"202601{d:02d}")) for d in range(1, 6)}
    assert len(nights) > 1                                  # another night, another sample
    assert A.retime_sample(steps, RULE, 0.0, "20260101") == []
    assert len(A.retime_sample(steps, RULE, 1.0, "20260101")) == 12


def test_a_label_that_no_longer_holds_is_dropped_and_counted():
    # kernel k0: a -> b (2x recorded, holds), kernel k1: c -> d (2x recorded, not any more),
    # kernel k2: e -> f -> g (the first step's programs fail to time: it goes with its child)
    steps = [_step("a", "b", kid="k0", tid="t0"), _step("c", "d", kid="k1", tid="t1"),
             _step("e", "f", kid="k2", tid="t2"), _step("f", "g", kid="k2", tid="t2", i=1, b=1e-3, a=0.5e-3)]
    keys = [step_key(s) for s in steps[:3]]
    groups = dict(A.retime_programs(steps, keys))
    assert groups[keys[0]] == ["a", "b"] and groups[keys[2]] == ["e", "f", "g"]   # + best descendant
    t = lambda m: _t(m).model_dump()  # noqa: E731
    timings = {keys[0]: [t(2e-3), t(0.9e-3)], keys[1]: [t(1e-3), t(0.98e-3)],
               keys[2]: [t(2e-3), None, t(0.5e-3)]}
    kept, rows = A.apply_retiming(steps, timings, RULE)
    by = {r["step_key"]: r for r in rows}
    assert by[keys[0]]["holds"] and by[keys[0]]["role_after"] == "improving"
    assert not by[keys[1]]["holds"] and by[keys[1]]["role_after"] == "neutral"
    assert math.isclose(by[keys[1]]["recorded_speedup"], 2.0) and by[keys[1]]["retimed_speedup"] < 1.1
    assert not by[keys[2]]["holds"] and by[keys[2]]["role_after"] == "removed"
    assert {s.kernel_id for s in kept} == {"k0", "k1"}        # k2's step and its child removed
    redone = next(s for s in kept if s.kernel_id == "k1")
    assert redone.paired_after.median_s == 0.98e-3            # the evidence stays with the step
    # curation decides on the re-timing: the dropped label is no SFT answer
    from steptp.search.roles import assign_roles

    assert {s.kernel_id: s.role for s in assign_roles(kept, RULE)} == {"k0": "improving", "k1": "neutral"}
    c = A.Carry("releases/n-1", "fpA", "20260102", steps=steps)
    rep = A.report(c, {"carried_kernels": 3, "carried_steps": 4, "carried_trajectories": 0,
                       "stale_carried": [], "researched": [], "left_pool": []}, rows, [])
    assert rep["retimed"] == 3 and rep["dropped"] == 2 and rep["carried_from"] == "n-1"
    card = A.card_section(rep)
    assert "| labels that no longer hold (dropped from SFT) | 2 |" in card and "| neutral |" in card


# ---------------------------------------------------------------------------- splits
def test_pinned_kernels_never_move_between_nights():
    from steptp.curate import assign_splits
    from steptp.curate.core import _anchor

    fr = {"train": 0.8, "validation": 0.1, "test": 0.1}
    groups = [[f"g{i:03d}"] for i in range(60)]
    in_train = sorted((g for g in groups if _anchor(0, g) < 0.8), key=lambda g: _anchor(0, g))
    # night 1: few kernels searched, so the repairs move two train groups into val and test
    night1 = assign_splits(groups, {g[0]: 5 for g in in_train[:2] + in_train[-2:]}, fr, seed=0)
    moved = [g[0] for g in in_train[-2:]]
    assert {night1[k] for k in moved} <= {"validation", "test"}
    # night 2: every kernel has steps; unpinned, the repaired ones would go back to train
    every = {g[0]: 3 for g in groups}
    assert {assign_splits(groups, every, fr, seed=0)[k] for k in moved} == {"train"}
    night2 = assign_splits(groups, every, fr, seed=0, pinned=night1)
    assert night2 == night1
    # a new kernel sharing a workload with a pinned one joins its split
    grown = [g if g[0] != moved[0] else [moved[0], "zz-new"] for g in groups]
    night3 = assign_splits(grown, every, fr, seed=0, pinned=night1)
    assert night3["zz-new"] == night1[moved[0]] and all(night3[k] == v for k, v in night1.items())


# ---------------------------------------------------------------------------- the shard
def test_the_shard_takes_never_searched_kernels_first_then_stale_ones():
    from _release_records import kernel_record
    from steptp.pipeline import choose_kernels
    from steptp.search.selection import select

    ks = [kernel_record(n) for n in ("softmax", "layer_norm", "cumsum", "matmul_bias_gelu")]
    search = P.Search(min_time_us=0, larger_size="", max_per_family=None, max_time_ms=None)
    no_timing = lambda kernels, threads: {}  # noqa: E731 - rank by the analytic estimate
    order = [k.kernel_id for k in select(ks, {}, max_kernels=None, floor_s=0, ceiling_s=None,
                                         max_per_family=None).chosen]
    valid, stale = order[0], order[1]
    searched = {valid: False, stale: True}
    new = [k for k in order if k not in searched]
    chosen, every = choose_kernels(ks, search, P.Extract(), time_fn=no_timing, log=lambda m: None,
                                   searched=searched, shard=2)
    assert [k.kernel_id for k in chosen] == new                   # both new ones, by priority
    status = {k.kernel_id: k.search_status for k in every}
    assert status[valid].startswith("carried") and status[stale].startswith("stale: not_selected")
    chosen, every = choose_kernels(ks, search, P.Extract(), time_fn=no_timing, log=lambda m: None,
                                   searched=searched, shard=3)
    assert [k.kernel_id for k in chosen] == new + [stale]         # then the stale one
    assert {k.kernel_id: k.search_status for k in every}[stale].endswith("; stale records")
    # a first night (nothing carried): the shard is the usual pick, at most shard kernels
    chosen, _ = choose_kernels(ks, search, P.Extract(), time_fn=no_timing, log=lambda m: None,
                               searched={}, shard=2)
    assert [k.kernel_id for k in chosen] == order[:2]
