"""Preference pairs (``steptp.curate.pairs``) on hand-built search trees over real programs and
real rewrites: each pairing rule with a case the best-descendant comparison paired wrongly, and
the timing fields a released pair carries (``steptp.export.pairs``)."""

from __future__ import annotations

import pytest

from steptp import examples, strategies as S
from steptp.curate import CurateConfig, curate
from steptp.curate.pairs import PAIR_TIMING_FIELDS
from steptp.leir import format_program, parse
from steptp.records import KernelRecord, Occurrence, StepRecord, Timing, step_key

CFG = CurateConfig(require_cot=False, max_pairs_per_state=8)
KERNEL = KernelRecord(kernel_id="k0", name="k0", leir="", leir_hash="k0", tir_hash="", signature=[],
                      occurrences=[Occurrence(workload="bert", suite="archs")], weight=1, flops=1,
                      bytes_moved=1, tvmscript="", target="cpu", raise_ok=True)


def _t(ms: float, spread: float = 0.01) -> Timing:
    return Timing(median_s=ms * 1e-3, min_s=ms * 1e-3 * (1 - spread / 2), spread=spread, repeats=7, number=10)


@pytest.fixture(scope="module")
def progs():
    """The kernel (``A``), five real rewrites of it (``B1``..``B5``: splits and tilings, all
    distinct programs), a real rewrite of ``B1`` (``C``) and one of ``B2`` (``D``), with each
    rewrite's candidate."""
    a = parse(examples.text("matmul_bias_gelu"))
    kids = (S.candidates(a, strategy="loop_split", seed=None)[:3]
            + S.candidates(a, strategy="loop_tiling", seed=None)[:2])
    c = S.candidates(kids[0].program, strategy="loop_split", seed=None)[0]
    d = S.candidates(kids[1].program, strategy="loop_split", seed=None)[0]
    texts = {"A": format_program(a), **{f"B{n + 1}": format_program(k.program) for n, k in enumerate(kids)},
             "C": format_program(c.program), "D": format_program(d.program)}
    assert len(set(texts.values())) == len(texts)
    return texts, {**{f"B{n + 1}": k for n, k in enumerate(kids)}, "C": c, "D": d}


def _step(progs, before: str, after: str, tb: Timing, ta: Timing | None, depth: int = 0, **upd) -> StepRecord:
    texts, cands = progs
    cand = cands[after]
    ok = ta is not None
    return StepRecord(trajectory_id="t0", step_index=depth, kernel_id="k0", before_leir=texts[before],
                      after_leir=texts[after], strategy=cand.strategy, family="loop", exactness="exact",
                      site=cand.to_json()["site"], params=cand.params,
                      outcome="improved" if ok else "failed_verify", verified=ok, before=tb, after=ta,
                      step_speedup=tb.median_s / ta.median_s if ok else None,
                      cumulative_speedup=tb.median_s / ta.median_s if ok else None, target="cpu",
                      reason="" if ok else "max abs err 3.1 > 1e-5", **upd)


def _pairs(progs, rows: dict[str, StepRecord]) -> tuple[set[tuple[str, str]], list[dict]]:
    name = {step_key(s): n for n, s in rows.items()}
    res = curate([KERNEL], list(rows.values()), [], CFG)
    return {(name[p["chosen"]], name[p["rejected"]]) for p in res.pairs}, res.pairs


def test_a_neutral_chosen_on_no_faster_path_is_not_paired(progs):
    """B1 is the same speed as A and nothing under it is faster: preferring it to a slower
    sibling (B2) or a failed one (B3) would teach a step that gains nothing. The old rule paired
    it (its best program, itself, was faster than B2's)."""
    a = _t(1.0)
    rows = {"AB1": _step(progs, "A", "B1", a, _t(0.99)), "AB2": _step(progs, "A", "B2", a, _t(1.5)),
            "AB3": _step(progs, "A", "B3", a, None)}
    pairs, _ = _pairs(progs, rows)
    assert pairs == set()
    # the same B1 with a significantly faster step is a valid chosen side, against both
    rows["AB1"] = _step(progs, "A", "B1", a, _t(0.8))
    pairs, got = _pairs(progs, rows)
    assert pairs == {("AB1", "AB2"), ("AB1", "AB3")}
    failed = next(p for p in got if p["rejected_why"] == "failed")
    assert failed["timings"]["compared_on"] == "failed" and failed["rejected_role"] == "failed"


def test_a_preparatory_chosen_is_paired_only_against_a_slower_step(progs):
    """B1 gains nothing itself but C under it is 2x faster than A (preparatory): it may be
    chosen over a sibling whose own step is significantly slower (B2), not over one that is the
    same step for step (B4) only because the search explored under B1 and not under B4."""
    a, b1 = _t(1.0), _t(0.99)
    rows = {"AB1": _step(progs, "A", "B1", a, b1), "B1C": _step(progs, "B1", "C", b1, _t(0.5), depth=1),
            "AB2": _step(progs, "A", "B2", a, _t(1.5)), "AB4": _step(progs, "A", "B4", a, _t(0.97))}
    pairs, got = _pairs(progs, rows)
    assert ("AB1", "AB2") in pairs
    assert ("AB1", "AB4") not in pairs and ("AB4", "AB1") not in pairs
    p = next(p for p in got if (p["chosen_role"], p["rejected_role"]) == ("preparatory", "regressing"))
    assert p["timings"]["compared_on"] == "step_speedup"


def test_a_deeper_subtree_does_not_beat_a_better_step(progs):
    """The issue's case: B1 measured 22.0x and was explored (C under it, faster still); B2
    measured 23.8x and was not. Compared by best descendant B1 won; step against step B2 is
    better, and B1's deeper best descendant forbids the reverse pair too: no pair."""
    a, b1 = _t(22.0), _t(1.0)
    rows = {"AB1": _step(progs, "A", "B1", a, b1), "B1C": _step(progs, "B1", "C", b1, _t(0.6), depth=1),
            "AB2": _step(progs, "A", "B2", a, _t(22.0 / 23.8))}
    pairs, _ = _pairs(progs, rows)
    assert ("AB1", "AB2") not in pairs and ("AB2", "AB1") not in pairs
    # with an equally good subtree under B2 the better step is the chosen side
    rows["B2D"] = _step(progs, "B2", "D", rows["AB2"].after, _t(0.6), depth=1)
    pairs, got = _pairs(progs, rows)
    assert ("AB2", "AB1") in pairs and ("AB1", "AB2") not in pairs


def test_the_interleaved_re_timing_decides_and_the_pair_is_the_right_way_round(progs):
    """The search timed B1 10% faster than B2; both were re-timed interleaved with A, and side
    by side B2 is 2x faster than A and B1 only 1.4x. Compared on the search's (best) timings
    the pair was B1 over B2, rejected better both step for step and by best descendant."""
    a = _t(1.0)
    b1 = _step(progs, "A", "B1", a, _t(0.5), paired_before=_t(1.2), paired_after=_t(0.84))
    b2 = _step(progs, "A", "B2", a, _t(0.55), paired_before=_t(0.9), paired_after=_t(0.45))
    pairs, got = _pairs(progs, {"AB1": b1, "AB2": b2})
    assert pairs == {("AB2", "AB1")}
    t = got[0]["timings"]
    assert t["compared_on"] == "paired_speedup" and t["best_compared_on"] == "paired_best_speedup"
    assert t["chosen_paired_speedup"] == pytest.approx(2.0) and t["rejected_paired_speedup"] == pytest.approx(1.2 / 0.84)
    assert t["chosen_step_speedup"] == pytest.approx(1 / 0.55) and t["rejected_step_speedup"] == pytest.approx(2.0)
    # re-timings of one side only are not compared with the other's search timing: the search's
    # timings decide (B1 10% faster there), the re-timed side's own is still reported
    b2_search = b2.model_copy(update={"paired_before": None, "paired_after": None})
    pairs, got = _pairs(progs, {"AB1": b1, "AB2": b2_search})
    assert pairs == {("AB1", "AB2")}
    t = got[0]["timings"]
    assert t["compared_on"] == "step_speedup" and t["rejected_paired_speedup"] is None
    assert t["chosen_paired_speedup"] == pytest.approx(1.2 / 0.84)


def test_no_pair_where_the_rejected_best_descendant_is_significantly_faster(progs):
    """B1's own step beats B2's, but the best program through B2 (D, 0.3) is far faster than
    the best through B1 (itself, 0.5): preferring B1 would be inverted on the better path."""
    a, b2 = _t(1.0), _t(0.7)
    rows = {"AB1": _step(progs, "A", "B1", a, _t(0.5)), "AB2": _step(progs, "A", "B2", a, b2),
            "B2D": _step(progs, "B2", "D", b2, _t(0.3), depth=1)}
    pairs, _ = _pairs(progs, rows)
    assert ("AB1", "AB2") not in pairs and ("AB2", "AB1") not in pairs


def test_released_pair_meta_names_each_timing(progs, tmp_path):
    """A release's pair line carries one speedup per timing source per side, the roles of both
    sides and the timing that decided it."""
    import json

    from steptp.curate import read_curated, write_curated
    from steptp.export import export_release

    a, b1 = _t(1.0), _t(0.7)
    rows = {"AB1": _step(progs, "A", "B1", a, b1, paired_before=_t(1.1), paired_after=_t(0.8),
                         paired_best=_t(0.5)),
            "B1C": _step(progs, "B1", "C", b1, _t(0.45), depth=1),
            "AB2": _step(progs, "A", "B2", a, _t(1.3)), "AB5": _step(progs, "A", "B5", a, None)}
    rows = {n: s.model_copy(update={"cot_text": f"<think>\nwhy {n}\n</think>"}) if s.verified else s
            for n, s in rows.items()}
    kernel = KERNEL.model_copy(update={"leir": progs[0]["A"]})
    res = curate([kernel], list(rows.values()), [], CFG)
    write_curated(res, tmp_path / "cur", [kernel], [])
    export_release(read_curated(tmp_path / "cur"), tmp_path / "rel", name="t", version="0")
    lines = [json.loads(ln) for sp in ("train", "validation", "test")
             for ln in (tmp_path / f"rel/chat/pairs-{sp}.jsonl").read_text().splitlines()]
    metas = {(m["chosen_step_key"], m["rejected_step_key"]): m for m in (ln["meta"] for ln in lines)}
    k = {n: step_key(s) for n, s in rows.items()}
    assert set(metas) == {(k["AB1"], k["AB2"]), (k["AB1"], k["AB5"])}
    m = metas[(k["AB1"], k["AB2"])]
    assert set(PAIR_TIMING_FIELDS) <= set(m)
    assert (m["chosen_role"], m["rejected_role"], m["compared_on"]) == ("improving", "regressing", "step_speedup")
    assert m["chosen_step_speedup"] == pytest.approx(1 / 0.7)           # the search's medians
    assert m["chosen_paired_speedup"] == pytest.approx(1.1 / 0.8)       # the interleaved re-timing
    assert m["chosen_best_speedup"] == pytest.approx(1 / 0.45)          # the search's best descendant
    assert m["chosen_paired_best_speedup"] == pytest.approx(1.1 / 0.5)
    assert m["rejected_step_speedup"] == pytest.approx(1 / 1.3) and m["rejected_paired_speedup"] is None
    f = metas[(k["AB1"], k["AB5"])]
    assert f["compared_on"] == "failed" and f["rejected_role"] == "failed" and f["rejected_step_speedup"] is None
    # steps.parquet says which timing each step's role (and log_speedup) was decided on
    import polars as pl

    steps = {r["step_key"]: r for r in pl.read_parquet(tmp_path / "rel/data/steps.parquet").iter_rows(named=True)}
    assert steps[k["AB1"]]["role_timing"] == "paired" and steps[k["AB2"]]["role_timing"] == "search"
    assert steps[k["AB5"]]["role_timing"] is None
    card = (tmp_path / "rel/README.md").read_text()
    for field in ("compared_on", "chosen_paired_speedup", "role_timing", "log_speedup", "step_speedup"):
        assert f"`{field}`" in card, field


def test_a_chosen_whose_reasoning_does_not_argue_for_it_is_not_paired(progs):
    """A preferred answer is learned like an SFT answer: a chosen side whose reasoning is marked
    incoherent (``cot["coherence"]``: it answers nothing found at its site) is not paired, even
    when it measured faster; the same step with coherent reasoning is."""
    a = _t(1.0)
    why = ["coherence site: `loop_split` does not answer a parallelism limit"]
    rows = {"AB1": _step(progs, "A", "B1", a, _t(0.8), cot={"coherence": why}),
            "AB2": _step(progs, "A", "B2", a, _t(1.5))}
    pairs, _ = _pairs(progs, rows)
    assert pairs == set()
    rows["AB1"] = _step(progs, "A", "B1", a, _t(0.8), cot={"coherence": []})
    pairs, _ = _pairs(progs, rows)
    assert pairs == {("AB1", "AB2")}


def test_the_cot_stage_explains_the_failed_siblings_a_pair_may_reject(progs):
    """The CoT stage writes the reasoning of a failed candidate beside a measured one (its text
    is a rejected side, from the same writer and hardware as the chosen side's) and not of one
    with no measured sibling; curation writes none: with reasoning required, a failed sibling is
    rejected in a pair only when the CoT stage explained it."""
    from steptp import params as P, pipeline
    from steptp.cot.run import needs_reasoning

    a = _t(1.0)
    rows = {"AB1": _step(progs, "A", "B1", a, _t(0.8)), "AB3": _step(progs, "A", "B3", a, None),
            "B1C": _step(progs, "B1", "C", _t(0.8), None, depth=1)}    # failed, no measured sibling
    todo = {step_key(s) for s in needs_reasoning(list(rows.values()))}
    assert todo == {step_key(rows["AB1"]), step_key(rows["AB3"])}
    done, _ = pipeline.cot_one(list(rows.values()), P.Cot(), hardware="generic")
    by = {step_key(s): s for s in done}
    explained = {n: by[step_key(s)] for n, s in rows.items()}
    assert explained["AB3"].cot and "<think>" in explained["AB3"].cot_text
    assert not explained["B1C"].cot and explained["B1C"].cot_text == ""
    assert explained["AB1"].cot["hardware"] == explained["AB3"].cot["hardware"]
    # the chosen side's argument is not this test's subject (a split answers no limit found at
    # this site, so it is marked incoherent): clear the mark
    c = explained["AB1"]
    explained["AB1"] = c.model_copy(update={"cot": {**c.cot, "coherence": []}})

    def pairs_of(steps):
        name = {step_key(s): n for n, s in steps.items()}
        res = curate([KERNEL], list(steps.values()), [], CurateConfig(max_pairs_per_state=8))
        return {(name[p["chosen"]], name[p["rejected"]]) for p in res.pairs}

    assert pairs_of(explained) == {("AB1", "AB3")}
    assert pairs_of({"AB1": explained["AB1"], "AB3": rows["AB3"]}) == set()    # not explained
