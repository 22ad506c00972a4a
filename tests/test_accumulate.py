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
    df.with_columns(pl.lit("not-a-role").alias("role")).write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"bad.parquet: row 0 is no StepRecord"):
        A._read(tmp_path / "bad.parquet", StepRecord)


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
    # splits are the newest release's, whichever hardware timed it; the line's fill in
    assert c.splits == {"ka": "validation", "kb": "test", "kc": "train"}
    b = A.load_carry(out, "n-3", "n", "fpB", "20260103", "c1", 30)
    assert Path(b.previous).name == "n-2" and b.steps[0].fingerprint == "fpB"
    new = A.load_carry(out, "n-3", "n", "fpC", "20260103", "c1", 30)
    assert new.previous is None and new.steps == [] and new.searched() == {}   # its own line
    assert new.splits == {"ka": "validation"}
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
    rep["reasoning_rewritten"] = 285      # the carry flow's refresh count, as the card tells it
    assert "written again (`nightly.refresh_reasoning`) | 285 |" in A.card_section(rep)


def test_a_re_timing_too_noisy_to_decide_leaves_the_label_standing():
    # k0: a 2x label re-timed at 2.2x but with a spread of 0.3 (noisy); k1: the same re-timing,
    # quiet, that no longer holds: only k1 is dropped
    steps = [_step("a", "b", kid="k0", tid="t0"), _step("c", "d", kid="k1", tid="t1")]
    keys = [step_key(s) for s in steps]
    t = lambda m, sp=0.02: _t(m, sp).model_dump()  # noqa: E731
    timings = {keys[0]: [t(2.2e-3), t(1e-3, 0.3)], keys[1]: [t(1e-3), t(0.98e-3)]}
    kept, rows = A.apply_retiming(steps, timings, RULE)
    by = {r["step_key"]: r for r in rows}
    assert by[keys[0]]["holds"] and by[keys[0]]["undecided"] and by[keys[0]]["role_after"] == "improving"
    assert "too noisy" in by[keys[0]]["why"] and math.isclose(by[keys[0]]["retimed_speedup"], 2.2)
    assert not by[keys[1]]["holds"] and not by[keys[1]]["undecided"]
    # the noisy timings are not the step's evidence: it keeps what it was decided on
    k0 = next(s for s in kept if s.kernel_id == "k0")
    assert k0.paired_after is None and k0.after.median_s == steps[0].after.median_s
    rep = A.report(A.Carry("releases/n-1", "fpA", "20260102", steps=steps),
                   {"carried_kernels": 2, "carried_steps": 2, "carried_trajectories": 0,
                    "stale_carried": [], "researched": [], "left_pool": []}, rows, [])
    assert (rep["retimed"], rep["dropped"], rep["undecided"]) == (2, 1, 1)
    assert "| re-timings too noisy to decide (the recorded label stands) | 1 |" in A.card_section(rep)


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


def test_carry_counts_each_kernels_prompts_with_a_faster_answer():
    """``Carry.answerable``: distinct before-programs with an improving or preparatory child
    (two faster children of one prompt count once; a neutral one not at all); 0 for a kernel
    searched without one. The shard's family yield reads it from carried.json."""
    imp = lambda s, role="improving": s.model_copy(update={"role": role})  # noqa: E731
    c = A.Carry(None, "fpA", "20260102",
                steps=[imp(_step("p0", "p1")), imp(_step("p0", "p2")), imp(_step("p1", "p3", i=1), "preparatory"),
                       imp(_step("p3", "p4", i=2), "neutral"),
                       imp(_step("q0", "q1", kid="k1", tid="t1"), "regressing")],
                trajectories=[_traj("k0"), _traj("k1"), _traj("k2")])
    assert c.answerable() == {"k0": 2, "k1": 0, "k2": 0}
    assert c.to_dict()["answerable"] == {"k0": 2, "k1": 0, "k2": 0}


# ---------------------------------------------------------------------------- nights in a row
def _night_params(threads: int = 1) -> dict:
    from test_nightly import SMALL

    return {**SMALL, "name": "steptp-acc",
            "search": {**SMALL["search"], "max_kernels": None, "threads": threads},
            # one kernel a night, every carried label re-timed (the drift test needs its step)
            "nightly": {"accumulate": True, "shard_kernels": 1, "retime_fraction": 1.0,
                        "max_age_days": 30}}


def _tables(rel: Path) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, str]]:
    steps = pl.read_parquet(rel / "data/steps.parquet")
    kernels = pl.read_parquet(rel / "data/kernels.parquet")
    return steps, kernels, dict(zip(kernels["kernel_id"].to_list(), kernels["split"].to_list()))


def _searched_names(log: str) -> list[str]:
    from test_nightly import _search_lines

    return sorted(line.split("Task run 'search-", 1)[1].split("'", 1)[0] for line in _search_lines(log))


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_nightlies_accumulate_on_one_hardware_line(tmp_path):
    """Four backfilled nights through `steptp release --nightly` (the Prefect flow, one
    measurement cache): night 1 searches one kernel of two; night 2 carries it and searches only
    the other; night 3 re-searches the kernel whose records an older code version made and
    drops a carried label that no longer holds on re-timing; night 4, timed with another thread
    count (another hardware fingerprint), carries nothing. No kernel changes split."""
    import yaml
    from test_nightly import BIN, _env, _run

    from steptp.codehash import stage_hash
    from steptp.search.roles import SFT_ROLES

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(_night_params()))
    env = _env(tmp_path, STEPTP_CACHE=str(tmp_path / "cache.sqlite"))
    out = tmp_path / "releases"
    rel = [BIN / "steptp", "release", "--params", "params.yaml", "--out", out, "--nightly", "--date"]
    rid = lambda d: f"steptp-acc-0.0.1+nightly.{d}"  # noqa: E731
    code = stage_hash("search")

    # night 1: one kernel of the two, every record with its provenance
    log1 = _run(rel + ["20260101"], tmp_path, env)
    n1 = out / rid("20260101")
    s1, k1, split1 = _tables(n1)
    names = dict(zip(k1["kernel_id"].to_list(), k1["name"].to_list()))
    assert len(names) == 2
    first = set(s1["kernel_id"].to_list())
    assert len(first) == 1 and _searched_names(log1) == [names[next(iter(first))]]
    fp = json.loads((n1 / "stats.json").read_text())["fingerprint"]["id"]
    assert set(s1["night"].to_list()) == {"20260101"} and set(s1["code_version"].to_list()) == {code}
    assert set(s1["fingerprint"].to_list()) == {fp}
    acc1 = json.loads((n1 / "accumulation.json").read_text())
    assert acc1["carried_from"] is None and acc1["carried_steps"] == 0

    # night 2: the first kernel carried as it was, only the new one searched
    log2 = _run(rel + ["20260102"], tmp_path, env)
    n2 = out / rid("20260102")
    s2, _, split2 = _tables(n2)
    second = set(s2["kernel_id"].to_list()) - first
    assert len(second) == 1 and _searched_names(log2) == [names[next(iter(second))]]
    carried = s2.filter(pl.col("kernel_id").is_in(list(first)))
    assert sorted(carried["step_key"].to_list()) == sorted(s1["step_key"].to_list())
    assert set(carried["night"].to_list()) == {"20260101"}
    assert set(s2.filter(pl.col("kernel_id").is_in(list(second)))["night"].to_list()) == {"20260102"}
    acc2 = json.loads((n2 / "accumulation.json").read_text())
    assert acc2["carried_from"] == rid("20260101") and acc2["carried_kernels"] == 1
    assert acc2["carried_steps"] == s1.height and acc2["retimed"] >= 1
    d2 = json.loads((n2 / "diff.json").read_text())
    assert d2["accumulation"]["retimed"] == acc2["retimed"] and d2["kernels_changed_split"] == []
    assert "## Accumulation" in (n2 / "README.md").read_text()
    assert split2 == split1

    # before night 3, two things happen to night 2's records: the softmax kernel's were made by
    # an older search (stale), and one of the matmul's labels was timed under a load spike: the
    # record claims its after-program (here: the kernel as extracted) 2x+ faster than its
    # before-program (the reordered one), which no re-timing will confirm
    soft = next(k for k in names if "softmax" in names[k])
    mm = next(k for k in names if k != soft)
    data = n2 / "data"
    st = pl.read_parquet(data / "steps.parquet")
    best = st.filter((pl.col("kernel_id") == mm) & pl.col("sft")).sort("step_speedup", descending=True).row(0, named=True)
    assert best["step_speedup"] >= 1.5, best["step_speedup"]
    swap = (pl.col("step_key") == best["step_key"])
    st = st.with_columns(pl.when(swap).then(pl.col("after_leir")).otherwise(pl.col("before_leir")).alias("before_leir"),
                         pl.when(swap).then(pl.col("before_leir")).otherwise(pl.col("after_leir")).alias("after_leir"))
    old = pl.when(pl.col("kernel_id") == soft).then(pl.lit("0" * 16)).otherwise(pl.col("code_version"))
    st.with_columns(old.alias("code_version")).write_parquet(data / "steps.parquet")
    tr = pl.read_parquet(data / "trajectories.parquet")
    tr.with_columns(old.alias("code_version")).write_parquet(data / "trajectories.parquet")
    swapped = next(step_key(s) for s in A._read(data / "steps.parquet", StepRecord)
                   if s.before_leir == best["after_leir"] and s.after_leir == best["before_leir"])

    log3 = _run(rel + ["20260103"], tmp_path, env)
    n3 = out / rid("20260103")
    s3, _, split3 = _tables(n3)
    assert _searched_names(log3) == [names[soft]]                     # the stale kernel, again
    assert set(s3.filter(pl.col("kernel_id") == soft)["night"].to_list()) == {"20260103"}
    assert set(s3.filter(pl.col("kernel_id") == soft)["code_version"].to_list()) == {code}
    acc3 = json.loads((n3 / "accumulation.json").read_text())
    assert acc3["stale_kernels"] == 1 and "another code version" in acc3["stale"][soft]["why"]
    assert acc3["researched_kernels"] == 1 and acc3["carried_kernels"] == 1
    dropped = {r["step_key"]: r for r in acc3["retimed_steps"] if not r["holds"]}
    assert swapped in dropped and dropped[swapped]["role_after"] not in SFT_ROLES, acc3["retimed_steps"]
    assert acc3["dropped"] == len(dropped) and acc3["retimed"] >= acc3["dropped"]
    row = s3.filter(pl.col("step_key") == swapped).row(0, named=True)
    assert not row["sft"] and row["role"] not in SFT_ROLES             # kept, as a searched step
    assert json.loads((n3 / "diff.json").read_text())["accumulation"]["dropped"] == acc3["dropped"]
    card = (n3 / "README.md").read_text()
    assert f"| labels that no longer hold (dropped from SFT) | {acc3['dropped']} |" in card
    assert json.loads((n3 / "stats.json").read_text())["accumulation"]["dropped"] == acc3["dropped"]
    assert split3 == split1

    # night 4 on other hardware (another thread count, another fingerprint): its own line
    params.write_text(yaml.safe_dump(_night_params(threads=2)))
    _run(rel + ["20260104"], tmp_path, env)
    n4 = out / rid("20260104")
    s4, _, split4 = _tables(n4)
    assert split4 == split1                             # splits do not follow the hardware
    fp2 = json.loads((n4 / "stats.json").read_text())["fingerprint"]["id"]
    assert fp2 != fp and set(s4["fingerprint"].to_list()) == {fp2}
    assert len(set(s4["kernel_id"].to_list())) == 1 and set(s4["night"].to_list()) == {"20260104"}
    acc4 = json.loads((n4 / "accumulation.json").read_text())
    assert acc4["carried_from"] is None and acc4["carried_steps"] == 0
    assert not (n4 / "diff.json").exists()              # not compared with the other machine's
    # the first machine's line goes on from night 3, not from night 4
    nxt = A.load_carry(out, rid("20260105"), "steptp-acc", fp, "20260105", code, 30)
    assert Path(nxt.previous).name == rid("20260103") and nxt.stale == {}


def test_the_diff_and_stats_report_the_drift(tmp_path):
    from steptp.export.diff import release_diff

    out = tmp_path / "releases"
    a = _publish(out, "n-1", "fpA", [_step("p0", "p1")], [_traj("k0")], {"k0": "train"})
    b = _publish(out, "n-2", "fpA", [_step("p0", "p1")], [_traj("k0")], {"k0": "train"})
    rows = [{"step_key": "s1", "kernel_id": "k0", "strategy": "loop_reorder", "night": "20260101",
             "role_before": "improving", "role_after": "neutral", "recorded_speedup": 2.0,
             "retimed_speedup": 1.01, "holds": False, "why": "after same"},
            {"step_key": "s2", "kernel_id": "k0", "strategy": "loop_reorder", "night": "20260101",
             "role_before": "improving", "role_after": "improving", "recorded_speedup": 2.0,
             "retimed_speedup": 1.9, "holds": True, "why": ""}]
    rep = A.report(A.Carry(str(a), "fpA", "20260102", steps=[_step("p0", "p1")]),
                   {"carried_kernels": 1, "carried_steps": 1, "carried_trajectories": 1,
                    "stale_carried": [], "researched": [], "left_pool": []}, rows, [])
    A.write_report(b, rep)
    assert json.loads((b / "stats.json").read_text())["accumulation"]["dropped"] == 1
    assert "## Accumulation" in (b / "README.md").read_text()
    d = release_diff(a, b)["accumulation"]
    assert d["carried_from"] == "n-1" and (d["retimed"], d["dropped"]) == (2, 1)
    assert [r["step_key"] for r in d["dropped_steps"]] == ["s1"]
    assert "accumulation" not in release_diff(b, a)        # a release that carried nothing


def test_an_accumulated_release_yields_over_all_the_searching_that_made_it(tmp_path):
    """The card's yield divides the release's examples by the search of every night it holds:
    tonight's stats plus the previous release's (its yield, itself cumulative), read from its
    stats.json; a release without one adds nothing."""
    import json

    from steptp.export.coverage import yield_lines, yields
    from steptp.release.accumulate import _search_cost
    from steptp.search import stage_stats

    prev = tmp_path / "prev"
    prev.mkdir()
    (prev / "stats.json").write_text(json.dumps({"yield": yields(
        {"wall_s": 2700.0, "kernels": 50, "steps": 607, "workers": 1, "machines": 1}, sft=56, pairs=113)}))
    before = _search_cost(prev)
    assert before == {"wall_s": 2700.0, "kernels": 50, "steps": 607, "workers": 1, "machines": 1, "nights": 1}
    tonight = {"wall_s": 900.0, "kernels": 50, "steps": 741, "workers": 1, "machines": 2, "nights": 1}
    cost = stage_stats.cumulative(tonight, before)
    assert cost == {"wall_s": 4500.0, "kernels": 100, "steps": 1348, "workers": 1, "machines": 1, "nights": 2}
    y = yields(cost, sft=80, pairs=284)
    assert y["machine_hours"] == 1.25 and y["per_machine_hour"]["sft"] == 64.0
    assert "over 2 accumulated nights" in yield_lines(y)[0]
    assert stage_stats.cumulative(tonight, None) == tonight and stage_stats.cumulative(None, before) is None
    assert _search_cost(tmp_path) is None                         # no stats.json there


def test_carried_reasoning_an_older_template_wrote_is_written_again():
    """``pipeline.refresh_reasoning``: a carried trajectory whose reasoning another version of
    the template wrote gets today's (with its version recorded); today's is left alone, and so
    is a trajectory with reasoning a model wrote."""
    from cot_steps import step as cot_step

    from steptp import params as P
    from steptp.cot import write_cot
    from steptp.cot.facts import Hardware
    from steptp.cot.run import older_template
    from steptp.cot.template import WRITER_VERSION
    from steptp.pipeline import refresh_reasoning

    made = [cot_step("rowsum", "loop_parallelization", {"path": [0], "loops": ["i"]}, {},
                     speedup=1.8, trajectory=t) for t in ("t-old", "t-now", "t-llm")]
    # carried steps were timed on this machine (the same fingerprint): the reasoning describes it
    done, summary = write_cot(made, hardware=Hardware.current())
    assert summary["ok"] == 3 and all(x.cot["writer"] == WRITER_VERSION for x in done)
    assert not any(older_template(x) for x in done)
    old_text = "an older template's words"
    carried = [done[0].model_copy(update={"cot": {**{k: v for k, v in done[0].cot.items()
                                                     if k != "writer"}}, "cot_text": old_text}),
               done[1],
               done[2].model_copy(update={"cot": {k: v for k, v in done[2].cot.items() if k != "writer"},
                                          "cot_source": "anthropic", "cot_text": old_text})]
    assert [older_template(x) for x in carried] == [True, False, False]
    out, n = refresh_reasoning(carried, P.Cot())
    assert n == 1
    assert out[0].cot["writer"] == WRITER_VERSION and out[0].cot_text != old_text
    assert out[0].cot_text == done[0].cot_text          # the template is deterministic
    assert out[1] is carried[1] and out[2] is carried[2]
