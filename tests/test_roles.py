"""The significance rule on synthetic repeats, and step roles on a hand-built search tree."""

from __future__ import annotations

import math

import numpy as np
import pytest

from steptp.params import parse
from steptp.search.roles import assign_roles, confirm_roles, near_threshold, to_confirm
from steptp.measure.significance import SignificanceRule, combine, interleaved
from steptp.measure.timing import summarize
from steptp.records import StepRecord, Timing

RULE = SignificanceRule(min_gain=0.05, spread_factor=1.0, max_spread=0.25)


def repeats(median: float, rel_noise: float, n: int = 9, seed: int = 0) -> Timing:
    """A timing summarized from ``n`` synthetic repeats around ``median`` (uniform relative
    noise of ``rel_noise``), the way ``steptp.measure.timing`` summarizes real ones."""
    rng = np.random.default_rng(seed)
    xs = median * (1 + rel_noise * rng.uniform(-1, 1, n))
    return summarize(xs.tolist(), number=10, max_spread=RULE.max_spread)


# ---------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("before, after, verdict", [
    ((1e-3, 0.01), (0.5e-3, 0.01), "faster"),     # 2x, quiet
    ((1e-3, 0.01), (0.92e-3, 0.01), "faster"),    # 8.7% gain beats the 5% floor and the ~1% spread
    ((1e-3, 0.01), (0.97e-3, 0.01), "same"),      # 3%: under the 5% floor (a fixed 2% would call it faster)
    ((1e-3, 0.30), (0.87e-3, 0.02), "same"),      # 15% gain but a ~15% spread: not beyond the noise
    ((1e-3, 0.01), (1.5e-3, 0.01), "slower"),
    ((1e-3, 0.9), (0.5e-3, 0.01), "noisy"),       # spread ~0.45 > max_spread: decides nothing
])
def test_rule_on_synthetic_repeats(before, after, verdict):
    b, a = repeats(*before, seed=1), repeats(*after, seed=2)
    assert RULE.compare(b, a) == verdict, (b, a, RULE.margin(b, a))


def test_margin_is_the_larger_spread_or_the_floor():
    b, a = repeats(1e-3, 0.30, seed=1), repeats(0.87e-3, 0.02, seed=2)
    assert b.spread > 0.1 and RULE.margin(b, a) == pytest.approx(b.spread)
    assert RULE.margin(repeats(1e-3, 0.0), repeats(1e-3, 0.0)) == 0.05
    # a looser rule from params
    loose = parse({"significance": {"min_gain": 0.01, "spread_factor": 0.5}}).significance
    assert loose.compare(repeats(1e-3, 0.01, seed=1), repeats(0.97e-3, 0.01, seed=2)) == "faster"
    assert RULE.near(repeats(1e-3, 0.01, seed=1), repeats(0.95e-3, 0.01, seed=2))
    assert not RULE.near(repeats(1e-3, 0.01, seed=1), repeats(0.5e-3, 0.01, seed=2))


def test_interleaved_alternates_and_divides_out_the_rounds_drift():
    calls: list[str] = []
    load = [1.0, 1.35, 0.9]            # the machine's load changes between rounds, by tens of percent

    def time_fn(p: str) -> Timing:
        calls.append(p)
        r = (len(calls) - 1) // 2
        base = {"A": 1e-3, "B": 0.9e-3}[p]
        return repeats(base * load[r], 0.01, seed=len(calls))

    ta, tb = interleaved(time_fn, ["A", "B"], rounds=3)
    assert calls == ["A", "B", "A", "B", "A", "B"]
    assert ta.repeats == tb.repeats == 27
    # timed side by side, the drift hits both and is divided out: B is 10% faster, decided
    assert ta.spread < 0.05 and tb.spread < 0.05
    assert RULE.compare(ta, tb) == "faster"
    # the same rounds combined without that (e.g. timed minutes apart): too noisy to decide
    raw = [repeats(1e-3 * x, 0.01, seed=n) for n, x in enumerate(load)]
    raw_b = [repeats(0.9e-3 * x, 0.01, seed=9 + n) for n, x in enumerate(load)]
    assert combine(raw).spread > 0.25 and RULE.compare(combine(raw), combine(raw_b)) == "noisy"
    c = combine([repeats(1e-3, 0.01), repeats(1.2e-3, 0.01)])
    assert c.median_s == pytest.approx(1.1e-3, rel=0.02) and c.spread > 0.15
    failing = interleaved(lambda p: None if p == "B" else repeats(1e-3, 0.01), ["A", "B"], 2)
    assert failing[0] is not None and failing[1] is None


# ---------------------------------------------------------------------------- roles on a tree
def _row(before: str, after: str, depth: int, tb: Timing | None, ta: Timing | None, strategy="loop_split",
         outcome=None, tid="T") -> StepRecord:
    ok = ta is not None
    return StepRecord(trajectory_id=tid, step_index=depth, kernel_id="k", before_leir=before, after_leir=after,
                      strategy=strategy, family="loop", exactness="exact", site={"path": [0]}, params={},
                      outcome=outcome or ("improved" if ok else "failed_verify"), verified=ok,
                      before=tb, after=ta, step_speedup=(tb.median_s / ta.median_s) if ok else None)


def tree() -> dict[str, StepRecord]:
    """A search tree over programs A..J (text stands in for LEIR: roles only read timings and
    the parent links). Times in ms: A 1.0; B 0.99 -> C 0.5; D 1.5; E 0.96; F failed;
    B -> G 1.2; H 1.2 -> I 0.85; J noisy."""
    t = {k: repeats(v * 1e-3, 0.01, seed=n) for n, (k, v) in enumerate(
        {"A": 1.0, "B": 0.99, "C": 0.5, "D": 1.5, "E": 0.96, "G": 1.2, "H": 1.2, "I": 0.85}.items())}
    t["J"] = repeats(0.7e-3, 0.9, seed=42)
    return {
        "AB": _row("A", "B", 0, t["A"], t["B"]), "BC": _row("B", "C", 1, t["B"], t["C"], "loop_vectorization"),
        "AD": _row("A", "D", 0, t["A"], t["D"]), "AE": _row("A", "E", 0, t["A"], t["E"]),
        "AF": _row("A", "F", 0, t["A"], None), "BG": _row("B", "G", 1, t["B"], t["G"]),
        "AH": _row("A", "H", 0, t["A"], t["H"], "loop_tiling"),
        "HI": _row("H", "I", 1, t["H"], t["I"], "loop_unrolling"),
        "AJ": _row("A", "J", 0, t["A"], t["J"]),
    }


def test_roles_on_a_hand_built_search_tree():
    rows = tree()
    names = list(rows)
    got = dict(zip(names, assign_roles(list(rows.values()), RULE)))
    assert {k: s.role for k, s in got.items()} == {
        "AB": "preparatory",   # 1% by itself, but C (through it) is 2x faster than A
        "BC": "improving", "AD": "regressing", "AE": "neutral", "AF": "failed",
        "BG": "regressing",    # in the subtree of a good step, but not on its best path
        "AH": "preparatory",   # a slowdown that enables a 15% gain over A (I, 0.85 ms)
        "HI": "improving", "AJ": "neutral"}   # AJ: noisy, undecided
    ab = got["AB"]
    assert ab.best_descendant_speedup == pytest.approx(rows["AB"].before.median_s / rows["BC"].after.median_s)
    assert ab.log_speedup == pytest.approx(math.log(rows["AB"].before.median_s / rows["AB"].after.median_s))
    assert "loop_vectorization at depth 1" in ab.role_detail
    assert got["AF"].best_descendant_speedup is None and "failed_verify" in got["AF"].role_detail
    assert got["AD"].best_descendant_speedup == pytest.approx(1 / 1.5, rel=0.03)
    # the roles do not depend on the order of the rows
    back = dict(zip(names[::-1], assign_roles(list(rows.values())[::-1], RULE)))
    assert {k: s.role for k, s in back.items()} == {k: s.role for k, s in got.items()}


def test_paired_retiming_decides_the_role():
    rows = tree()
    ae = rows["AE"]
    assert assign_roles([ae], RULE)[0].role == "neutral"
    # timed side by side, E is 20% faster than A: the re-timing decides
    paired = ae.model_copy(update={"paired_before": repeats(1.2e-3, 0.01, seed=5),
                                   "paired_after": repeats(1.0e-3, 0.01, seed=6)})
    r = assign_roles([paired], RULE)[0]
    assert r.role == "improving" and r.log_speedup == pytest.approx(math.log(1.2), abs=0.02)


def test_near_threshold_and_confirm_roles_retime_only_those():
    rows = list(tree().values())
    near = near_threshold(rows, RULE)
    # AE (4% against a 5% margin) and AJ (noisy) are near; AB's own 1% with a 2x descendant is far; AH's way to I (15% vs ~5% margin) is near-ish
    keys = {(rows[i].before_leir + rows[i].after_leir) for i, _ in near}
    assert "AE" in keys and "BC" not in keys and "AF" not in keys
    calls: list[str] = []

    def time_fn(p: str) -> Timing:
        calls.append(p)
        return repeats({"A": 1.0, "E": 0.8, "B": 0.99, "C": 0.5, "H": 1.2, "I": 0.85, "D": 1.5, "G": 1.2,
                        "J": 0.7}[p] * 1e-3, 0.01, seed=len(calls))

    # the would-be SFT answers come first (largest gain first: AB, whose best descendant C is
    # 2x faster than A), then the steps near the margin
    order = [rows[i].before_leir + rows[i].after_leir for i, _ in to_confirm(rows, RULE)]
    assert order[:3] == ["AB", "BC", "HI"] and set(order[3:]) == keys
    out, n = confirm_roles(rows, time_fn, RULE, rounds=2, max_pairs=1)
    assert n == 1 and calls == ["A", "B", "C", "A", "B", "C"]     # before, after, best; interleaved
    ab = next(s for s in out if s.before_leir == "A" and s.after_leir == "B")
    assert ab.paired_before.repeats == 18 and ab.paired_best is not None
    assert ab.role == "preparatory"
    assert sum(s.paired_before is not None for s in out) == 1
    # with more budget the near-threshold AE is re-timed too: side by side E is 20% faster
    out, n = confirm_roles(rows, time_fn, RULE, rounds=2, max_pairs=len(order))
    ae = next(s for s in out if s.after_leir == "E")
    assert ae.paired_before is not None and ae.role == "improving"
    # a settled final program's path comes first (E: chosen by a side-by-side re-timing though
    # its own timing made it no SFT answer); a path step that already is one keeps its place
    order = [rows[i].before_leir + rows[i].after_leir for i, _ in to_confirm(rows, RULE, ["B", "E"])]
    assert order[:4] == ["AE", "AB", "BC", "HI"] and order.count("AE") == 1
    calls.clear()
    out, n = confirm_roles(rows, time_fn, RULE, rounds=2, max_pairs=1, path=["E"])
    assert n == 1 and calls == ["A", "E", "A", "E"]
    assert next(s for s in out if s.after_leir == "E").role == "improving"


def test_curation_keeps_improving_and_preparatory_one_per_prompt_and_pairs_the_rest():
    from steptp.curate import CurateConfig, curate
    from steptp.records import KernelRecord, Occurrence, step_key

    # reasoning for every measured row (a failed one has none: it cannot be a rejected answer)
    rows = {n: s.model_copy(update={"cot_text": f"<think>\nwhy {n}\n</think>"}) if s.verified else s
            for n, s in tree().items()}
    name_of = {step_key(s): n for n, s in rows.items()}
    k = KernelRecord(kernel_id="k", name="k", leir="", leir_hash="k", tir_hash="", signature=[],
                     occurrences=[Occurrence(workload="w", suite="ops")], weight=1, flops=1, bytes_moved=1,
                     tvmscript="", target="cpu", raise_ok=True)
    res = curate([k], list(rows.values()), [], CurateConfig(require_cot=False, max_pairs_per_state=4))
    assert sorted(name_of[step_key(s)] for s in res.steps) == ["AB", "BC", "HI"]
    assert {s.role for s in res.steps} <= {"improving", "preparatory"}
    reasons = sorted(r.reason.split(":")[0] for r in res.rejects)
    assert reasons == sorted(["regressing", "neutral", "unverified", "alternative", "regressing", "noisy"])
    alt = next(r for r in res.rejects if r.reason.startswith("alternative"))
    assert alt.strategy == "loop_tiling"                      # AH: a smaller gain than AB's, same prompt
    pairs = {(name_of[p["chosen"]], name_of[p["rejected"]]) for p in res.pairs}
    assert {("AB", "AD"), ("AB", "AH"), ("BC", "BG")} <= pairs
    assert ("AB", "AJ") not in pairs                          # J is noisy: not significantly worse
    # B (0.99 ms) and E (0.96) are the same step for step: that the search found C under B and
    # explored nothing under E is no evidence that B is the better answer
    assert ("AB", "AE") not in pairs and ("AE", "AB") not in pairs
    assert sum(1 for c, _ in pairs if c[0] == "A") <= 4       # the cap per prompt
    assert all(rows[c].before_leir == rows[r].before_leir for c, r in pairs)
    assert res.report["pairs"] == len(res.pairs) and res.report["sft_roles"] == {"improving": 2, "preparatory": 1}
    assert len(res.all_steps) == len(rows)


def test_retimed_sibling_stays_the_answer_when_the_search_measured_it_fastest():
    """Re-timing shrinks an over-optimistic gain; it must not hand the prompt to a sibling that
    was simply not re-timed."""
    from steptp.curate import CurateConfig, curate
    from steptp.records import KernelRecord, Occurrence

    a = repeats(1e-3, 0.01, seed=1)
    x = _row("A", "X", 0, a, repeats(0.5e-3, 0.01, seed=2)).model_copy(update={
        "cot_text": "<think>\nx\n</think>", "paired_before": repeats(0.8e-3, 0.01, seed=3),
        "paired_after": repeats(0.55e-3, 0.01, seed=4)})
    y = _row("A", "Y", 0, a, repeats(0.55e-3, 0.01, seed=5)).model_copy(update={"cot_text": "<think>\ny\n</think>"})
    k = KernelRecord(kernel_id="k", name="k", leir="", leir_hash="k", tir_hash="", signature=[],
                     occurrences=[Occurrence(workload="w", suite="ops")], weight=1, flops=1, bytes_moved=1,
                     tvmscript="", target="cpu", raise_ok=True)
    res = curate([k], [x, y], [], CurateConfig(require_cot=False))
    assert [s.after_leir for s in res.steps] == ["X"]
    assert res.steps[0].best_descendant_speedup == pytest.approx(0.8 / 0.55, rel=0.05)  # the re-timed gain


def test_remembered_re_timings_decide_a_second_build_of_the_night_alike(tmp_path):
    """``dvc repro`` and then the Prefect flow on the same night must decide on the same
    interleaved re-timings, not on a second draw of the noise; the next night times again."""
    from steptp.measure.cache import Cache
    from steptp.measure.significance import remembered

    a = "kernel f32 f(A[8]) -> B[8]\n for i in 8:\n  B[i] = A[i] + 1.0\n"
    b = "kernel f32 f(A[8]) -> B[8]\n for i in 8:\n  B[i] = A[i] * 2.0\n"
    calls: list[str] = []

    def time_fn(p: str) -> Timing:
        calls.append(p)
        return repeats((1.0 if p == a else 0.9) * 1e-3, 0.05, seed=len(calls))

    now = [1000.0]
    db = tmp_path / "cache.sqlite"
    tonight = Cache(db, clock=lambda: now[0], not_before=900.0)
    first = remembered(interleaved, tonight, "llvm", "fp", "cfg")(time_fn, [a, b], 2)
    assert len(calls) == 4 and all(t is not None for t in first)
    again = remembered(interleaved, Cache(db, clock=lambda: now[0], not_before=900.0), "llvm", "fp",
                       "cfg")(time_fn, [a, b], 2)
    assert len(calls) == 4 and again == first          # remembered, not re-timed
    # another order, other rounds or another fingerprint is another group: timed
    remembered(interleaved, tonight, "llvm", "fp", "cfg")(time_fn, [b, a], 2)
    remembered(interleaved, tonight, "llvm", "fp2", "cfg")(time_fn, [a, b], 2)
    assert len(calls) == 12
    now[0] = 2000.0
    nxt = remembered(interleaved, Cache(db, clock=lambda: now[0], not_before=1500.0), "llvm", "fp",
                     "cfg")(time_fn, [a, b], 2)
    assert len(calls) == 16 and nxt != first            # the next night measures again
    # a failed program keeps nothing: the group is timed again next time
    fails = remembered(interleaved, tonight, "llvm", "fp", "cfg")(lambda p: None, [a, b], 1)
    assert fails == [None, None]
    assert remembered(interleaved, tonight, "llvm", "fp", "cfg")(lambda p: None, [a, b], 1) == [None, None]
