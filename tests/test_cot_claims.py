"""The claim checker rejects a constructed example of every error class the audit of the template
reasoning found (issue 14), and the template's own reasoning passes it."""

import copy

import pytest

from cot_steps import step
from steptp.cot import CotInvalid, TemplateWriter, facts, validate
from steptp.cot.validate import sft_problems
from steptp.format.cot_schema import Cot


def problems(raw, st, **kw):
    with pytest.raises(CotInvalid) as e:
        validate(raw, st, **kw)
    return "\n".join(e.value.problems)


def good(st, seed=0):
    cot = TemplateWriter(seed=seed).write(st)
    validate(cot, st)
    return cot.model_dump(mode="json")


def with_claim(raw, **claim):
    out = copy.deepcopy(raw)
    out["claims"].append(claim)
    return out


@pytest.fixture(scope="module")
def transpose_split():
    return step("transpose", "loop_split", {"path": [0], "loops": ["i"]}, {"factor": 4})


@pytest.fixture(scope="module")
def mm_vec():
    # a step on the second nest: its own loops are i, j (the first nest's k is not one of them)
    return step("mm_add", "loop_vectorization", {"path": [1, 0], "loops": ["j"]}, {}, speedup=1.3)


def test_loops_of_other_nests_are_not_the_statements_nest(mm_vec):
    raw = good(mm_vec)
    f = facts(mm_vec)
    assert f.at_site.main.loops == ("i", "j") and f.at_site.main.extents == (8, 32)
    msg = problems(with_claim(raw, kind="loop_nest", loops=["i", "j", "k", "i", "j"],
                              extents=[8, 32, 32, 8, 32]), mm_vec)
    assert "claim loop_nest: the loops of the site's main statement" in msg
    assert "are i 8, j 32" in msg


def test_stride_list_must_include_strided_writes(transpose_split):
    raw = good(transpose_split)
    f = facts(transpose_split)
    strides = {a.text: a.stride for a in f.at_site.accesses}
    assert strides == {"A[i,j]": 1, "B[j,i]": 64}
    bad = copy.deepcopy(raw)
    bad["claims"] = [c for c in bad["claims"] if not (c["kind"] == "stride" and c["access"] == "B[j,i]")]
    msg = problems(bad, transpose_split)
    assert "claim stride: the strides listed before the step leave out `B[j,i]` (written)" in msg
    msg = problems(with_claim(raw, kind="stride", access="B[j,i]", value=1), transpose_split)
    assert "`B[j,i]` moves 64 elements per iteration of the innermost loop `j`" in msg


def test_reorder_that_keeps_the_innermost_loop_or_leaves_a_stride():
    # transpose reordered to (j, i): `i` becomes innermost, A then walks with stride 32
    st = step("transpose", "loop_reorder", {"path": [0], "loops": ["i", "j"]}, {"order": ["j", "i"]})
    raw = good(st)
    f = facts(st)
    assert f.at_site.innermost_after == "i"
    assert {a.text: a.stride_after for a in f.at_site.accesses} == {"A[i,j]": 32, "B[j,i]": 1}
    msg = problems(with_claim(raw, kind="reorder_innermost", loop="i", accesses=["A[i,j]"]), st)
    assert "`A[i,j]` is not contiguous along the new innermost loop `i` (stride 32)" in msg
    msg = problems(with_claim(raw, kind="reorder_innermost", loop="j"), st)
    assert "after the step the innermost loop of the main statement is `i`, not `j`" in msg
    # an outer-only reorder of the matmul nest keeps `k` innermost
    st2 = step("mm_add", "loop_reorder", {"path": [0], "loops": ["i", "j", "k"]},
               {"order": ["j", "i", "k"]})
    raw2 = good(st2)
    msg = problems(with_claim(raw2, kind="reorder_innermost", loop="k"), st2)
    assert "the innermost loop stays `k`: the reorder does not change it" in msg
    bad = copy.deepcopy(raw2)
    bad["candidates"][0]["reason"] += " It makes `k` innermost."
    assert "already was before the step" in problems(bad, st2)


def test_no_reuse_in_a_pure_copy(transpose_split):
    st = step("transpose", "loop_tiling", {"path": [0], "loops": ["i", "j"]},
              {"loops": ["i", "j"], "factors": [2, 16]})
    raw = good(st)
    assert any(c["kind"] == "no_reuse" for c in raw["claims"])
    msg = problems(with_claim(raw, kind="reuse", access="A[i,j]", loop="j", value=128), st)
    assert "claim reuse: `A[i,j]` depends on every loop of its nest" in msg
    bad = copy.deepcopy(raw)
    bad["bottleneck"]["text"] += " Tiles keep the working set small between reuses."
    assert "claim reuse: bottleneck.text speaks of reuse" in problems(bad, st)


def test_compute_at_a_one_iteration_loop_keeps_nothing_in_cache():
    st = step("one_row", "compute_at", {"path": [0], "loops": ["i", "j"], "consumer": [1], "tensor": "T"},
              {"at": "i"})
    raw = good(st)
    assert not any(c["kind"] == "staged_in_cache" for c in raw["claims"])
    msg = problems(with_claim(raw, kind="staged_in_cache", side="after", tensor="T", loop="i",
                              value=128, level="L1"), st)
    assert "loop `i` has 1 iteration: the slice of `T` is the whole tensor" in msg


def test_reduction_goes_into_the_tensor_it_writes(mm_vec):
    raw = good(mm_vec)
    msg = problems(with_claim(raw, kind="reduction_writes", tensor="D", axes=["k"]), mm_vec)
    assert "claim reduction_writes: no reduction writes `D` over k" in msg
    assert "`G[i,j] += A[i,k] * B[k,j]` (over k)" in msg
    bad = copy.deepcopy(raw)
    bad["observation"]["work"] += " The reduction over `k` accumulates into `D`."
    assert "claim reduction_writes: observation.work says a reduction goes into `D`" in problems(bad, mm_vec)
    validate(with_claim(raw, kind="reduction_writes", tensor="G", axes=["k"]), mm_vec)


def test_a_4096_iteration_loop_is_not_short():
    st = step("scale_exp", "loop_split", {"path": [0], "loops": ["i"]}, {"factor": 2048})
    raw = good(st)
    msg = problems(with_claim(raw, kind="loop_extent", loop="i", value=4096, short=True), st)
    assert "`i` runs 4096 iterations: not a short loop" in msg
    bad = copy.deepcopy(raw)
    bad["bottleneck"]["text"] += " The body under `i` is small."
    assert "claim loop_extent: bottleneck.text calls `i` short / its body small" in problems(bad, st)


def test_rankings_and_predicted_times_come_from_the_cost_model(transpose_split):
    """The template cites no model time (a model cannot derive one from the prompt); a writer
    that fills the structured figures anyway must copy the cost model's."""
    raw = good(transpose_split)
    f = facts(transpose_split)
    assert all(c["predicted_s"] is None for c in raw["candidates"])
    assert raw["expected_effect"]["predicted_after_s"] is None
    alt = next(c for c in raw["candidates"] if c["verdict"] == "rejected" and not c["refused"])
    by = {a.strategy: a for a in f.alternatives}
    better = min(by.values(), key=lambda a: a.score)
    msg = problems(with_claim(raw, kind="ranks_below", strategy=better.strategy, other="loop_split"),
                   transpose_split)
    assert "claim ranks_below: the cost model ranks" in msg and "not below it" in msg
    bad = copy.deepcopy(raw)
    n = bad["candidates"].index(alt)
    a = next(a for a in f.alternatives if a.strategy == alt["strategy"] and a.site == alt["site"])
    bad["candidates"][n]["predicted_s"] = a.predicted_s * 3
    assert f"claim predicted_time: candidates[{n}].predicted_s" in problems(bad, transpose_split)
    bad["candidates"][n]["site"] = {"path": [7], "loops": ["i"]}
    assert "is not a legal action of this state" in problems(bad, transpose_split)


def test_refusals_must_teach():
    st = step("rowsum", "loop_split", {"path": [0], "loops": ["i"]}, {"factor": 4})
    raw = good(st)
    refused = [c for c in raw["candidates"] if c["refused"]]
    assert refused and "reduction axis" in refused[0]["reason"]
    bad = copy.deepcopy(raw)
    bad["candidates"].append({"strategy": "algebraic_simplification", "site": {"path": [0, 0, 0]},
                              "params": None, "verdict": "rejected", "refused": True,
                              "reason": "nothing to simplify.", "predicted_s": None})
    assert "is not a refusal that concerns this program's dependences" in problems(bad, st)


def test_fits_in_cache_uses_the_fingerprinted_sizes(transpose_split):
    raw = good(transpose_split)
    ws = facts(transpose_split).at_site.working_sets[0]
    assert ws.bytes == 64 * 32 * 4 * 2 and ws.level == "L1"
    msg = problems(with_claim(raw, kind="fits_in_cache", loop="i", value=ws.bytes, level="L2"),
                   transpose_split)
    assert "16384 bytes fit first in L1 of this CPU (L1 49152" in msg
    bad = copy.deepcopy(raw)
    bad["observation"]["work"] += " The 64 KiB of both tensors fits in L1."
    assert "claim fits_in_cache: observation.work says 64 KiB fit in L1" in problems(bad, transpose_split)
    # on a CPU with a 4 KiB L1 the same program is described differently
    from steptp.cot.facts import Hardware
    tiny = Hardware("tiny", 4096, 65536, 1 << 20, 128, 1)
    f2 = facts(transpose_split, tiny)
    assert f2.at_site.working_sets[0].level == "L2"
    cot = TemplateWriter(hardware=tiny).write(transpose_split)
    validate(cot, transpose_split, f2)
    assert "fits in L2 (64 KiB per core)" in cot.observation.work


def test_the_bottleneck_is_a_limit_found_at_the_site():
    """The bottleneck is one of the limits the rules find at the step's site, from the program
    before the step (never from the measurement): a kind not found there is rejected."""
    from steptp.cot.argument import site_findings

    b = step("mm_add", "loop_unrolling", {"path": [0, 0, 0], "loops": ["k"]}, {}, speedup=0.5)
    cb = good(b)
    kinds = [x.kind for x in site_findings(facts(b))]
    assert cb["bottleneck"]["kind"] in kinds and "loop_overhead" not in kinds
    bad = copy.deepcopy(cb)
    bad["bottleneck"] = {"kind": "loop_overhead", "loop": "k", "tensor": None,
                         "text": "Loop control of `k` dominates."}
    assert "claim bottleneck: bottleneck.kind is 'loop_overhead', but the limits found at the " \
           "step's site are" in problems(bad, b)


def test_expected_effect_is_the_argument_not_the_measurement():
    st = step("rowsum", "loop_parallelization", {"path": [0], "loops": ["i"]}, {}, speedup=0.4)
    raw = good(st)
    f = facts(st)
    # the step answers the serial `i` found at its site: expected faster, whatever it measured
    assert raw["bottleneck"]["kind"] == "parallelism" and raw["expected_effect"]["direction"] == "faster"
    validate(raw, st, coherent=True)
    bad = copy.deepcopy(raw)
    bad["expected_effect"]["direction"] = "slower"      # what the measurement said
    assert "coherence effect: the chosen step is expected 'slower'" in problems(bad, st, coherent=True)
    leak = copy.deepcopy(raw)
    leak["expected_effect"]["text"] += " Measured 0.4x."
    assert "claim hindsight: that is the step's measured outcome" in problems(leak, st)
    prep = copy.deepcopy(raw)
    prep["expected_effect"].update(direction="preparatory", enables="loop_vectorization")
    msg = problems(prep, st, coherent=True)
    assert "coherence preparatory: the expected effect does not name `loop_vectorization`" in msg
    assert "coherence site: `loop_vectorization` does not answer a parallelism limit" in msg
    # as an SFT example it disagrees with the measurement
    cot = Cot.model_validate(raw)
    assert "a disagreeing step is not an SFT example" in "\n".join(sft_problems(cot, st, f))


def test_preparatory_needs_the_named_later_step_on_its_path():
    st = step("rows48", "loop_split", {"path": [0, 0], "loops": ["j"]}, {"factor": 16}, speedup=0.97)
    f = facts(st)
    raw = good(st)
    assert raw["expected_effect"]["direction"] == "preparatory"
    assert raw["expected_effect"]["enables"] == "loop_vectorization"
    # it says why: no 48-wide loop can be vectorized, the split's 16-wide `j_i` can
    assert "`loop_vectorization`" in raw["expected_effect"]["text"]
    validate(raw, st, coherent=True)
    cot = Cot.model_validate(raw)
    assert "no later step on its path applies `loop_vectorization`" in "\n".join(
        sft_problems(cot, st, f, [st]))
    later = st.model_copy(update={"step_index": 1, "strategy": "loop_vectorization",
                                  "outcome": "improved"})
    assert sft_problems(cot, st, f, [st, later]) == []
    # the same split by 24 leaves a 24-wide loop: nothing new to vectorize, not preparatory,
    # and a split answers no limit itself: no argument for it (kept out of SFT)
    st24 = step("rows48", "loop_split", {"path": [0, 0], "loops": ["j"]}, {"factor": 24})
    raw24 = good(st24)
    assert raw24["expected_effect"]["direction"] == "neutral"
    assert "coherence effect" in problems(raw24, st24, coherent=True)
    bad = copy.deepcopy(raw24)
    bad["expected_effect"].update(direction="preparatory", enables="loop_vectorization",
                                  text="it prepares a later step.")
    msg = problems(bad, st24)
    assert "coherence preparatory: the expected effect does not name `loop_vectorization`" in msg
    assert "does not say why `loop_vectorization` needs this step first" in msg


def test_tiling_says_how_much_closer_the_reuse_gets():
    st = step("mm_add", "loop_tiling", {"path": [0], "loops": ["i", "j", "k"]},
              {"loops": ["i", "j"], "factors": [2, 8], "point": "inner"})
    raw = good(st)
    f = facts(st)
    b = next(a for a in f.at_site.accesses if a.text == "B[k,j]")
    assert b.reuse_loop == "i" and b.reuse_bytes_after < b.reuse_bytes
    after = [c for c in raw["claims"] if c["kind"] == "reuse" and c["side"] == "after"]
    assert after and after[0]["value"] == b.reuse_bytes_after
    msg = problems(with_claim(raw, kind="reuse", side="after", access="B[k,j]",
                              value=b.reuse_bytes), st)
    assert f"after the step the reuse distance of `B[k,j]` is {b.reuse_bytes_after} bytes" in msg


@pytest.mark.parametrize("rows,cols", [(64, 64), (256, 32)])
def test_the_bottleneck_is_the_one_whose_remedy_is_predicted_faster(rows, cols):
    """Serial and scalar at once: the diagnosis names parallelism or vectorization after the
    cost model's prediction for each remedy, so the heading agrees with the ranking below it."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from cot_steps import step

    from steptp import strategies as S
    from steptp.cot.facts import GENERIC, facts
    from steptp.leir import parse

    text = (f"kernel ew(X: f32[{rows},{cols}]) -> Y: f32[{rows},{cols}]\n"
            f"  for i in {rows}, j in {cols}:\n    Y[i,j] = exp(X[i,j] * 0.5)\n")
    c = S.candidates(parse(text), strategy="loop_unrolling", seed=None)[0]
    f = facts(step("ew", c.strategy, c.site.to_json(), dict(c.params), before=text), GENERIC)
    best = {}
    for a in f.alternatives:
        best.setdefault(a.strategy, a.predicted_s)
    par, vec = best["loop_parallelization"], best["loop_vectorization"]
    assert par != vec
    assert f.diagnosis.kind == ("vectorization" if vec < par else "parallelism")
    assert f.diagnosis.detail["predicted_s"] == min(par, vec)


def test_a_batch_of_one_above_the_nest_does_not_hide_its_parallelism():
    """max_pool2d's nest starts with `i` 1 (the batch): the parallelism rule looks past it to
    `j`, so a 3-tap window's max chain is not named the bottleneck of a serial kernel (the
    session-13 release called it "a scan" above a step that parallelized `j`)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from cot_steps import step

    from steptp.cot.facts import GENERIC, facts
    from steptp.cot.template import TemplateWriter
    from steptp.cot.validate import validate

    pool = """kernel f32 pool(A[1,16,34,34]) -> B[1,16,16,16]
 T0[] local
 for i in 1, j in 16, k in 16, l in 16:
  T0 = -inf
  for m in 3 unrolled, n in 3 unrolled:
   T0 = max(T0, A[i,j,k*2+m,l*2+n])
  B[i,j,k,l] = T0
"""
    st = step("pool", "loop_parallelization", {"path": [0, 0], "loops": ["j"]}, {}, speedup=1.9,
              before=pool)
    f = facts(st, GENERIC)
    assert f.diagnosis.kind == "parallelism" and f.diagnosis.loop == "j"
    assert f.diagnosis.detail["extent"] == 16
    out = TemplateWriter(seed=0, hardware=GENERIC).write(st)
    validate(out, st, f)
    assert "scan" not in out.bottleneck.text.lower()
