"""The coherence rule (steptp.cot.coherence): the reasoning must lead to its decision. Each
category rejects a constructed incoherent example (taken from the ways the default release's
reasoning failed: a bottleneck about another statement, an alternative ranked above the chosen
step, a preparatory step that does not say what it prepares, a decision expected slower,
millisecond figures a model cannot derive, an L3 of 480 MiB), and the template's own reasoning
passes; curation holds a step with no argument out of the SFT set and keeps it for pairs."""

from __future__ import annotations

import copy

import pytest

from cot_steps import step
from steptp.cot import CotInvalid, TemplateWriter, facts, validate, write_cot
from steptp.cot.argument import answered, preparation, site_findings
from steptp.cot.coherence import category, coherence_problems, derivable_numbers
from steptp.cot.facts import GENERIC, Hardware
from steptp.format.cot_schema import Cot


@pytest.fixture(scope="module")
def par():
    """A row sum's serial `i` parallelized: the step answers the parallelism found at its site."""
    st = step("rowsum", "loop_parallelization", {"path": [0], "loops": ["i"]}, {}, speedup=1.8)
    return st, facts(st), TemplateWriter(seed=3).write(st).model_dump(mode="json")


def cats(raw, st, f) -> set[str]:
    return {category(p) for p in coherence_problems(Cot.model_validate(raw), st, f)}


def test_the_template_argues_for_its_step(par):
    st, f, raw = par
    assert cats(raw, st, f) == set()
    assert answered(f).kind == "parallelism" and raw["bottleneck"]["kind"] == "parallelism"
    assert raw["expected_effect"]["direction"] == "faster"
    # the bound it gives follows from the hardware line: 64 iterations over 2 cores
    assert "at most 2x" in raw["expected_effect"]["text"] or "by 2x" in raw["expected_effect"]["text"]


def test_site_a_bottleneck_on_another_statement_or_one_the_step_does_not_answer(par):
    st, f, raw = par
    other = copy.deepcopy(raw)
    other["bottleneck"]["text"] += " `D[i,j] = G[i,j] + C[i,j]` is slow too."
    assert "site" in cats(other, st, f)
    loop = copy.deepcopy(raw)
    loop["bottleneck"]["loop"] = "q"
    assert "site" in cats(loop, st, f)
    kind = copy.deepcopy(raw)
    kind["bottleneck"].update(kind="locality", loop="j")
    msg = "\n".join(coherence_problems(Cot.model_validate(kind), st, f))
    assert "`loop_parallelization` does not answer a locality limit" in msg


def test_ranking_an_alternative_ahead_needs_a_reason_it_is_not_taken(par):
    st, f, raw = par
    alt = next(n for n, c in enumerate(raw["candidates"])
               if c["verdict"] == "rejected" and not c["refused"])
    bad = copy.deepcopy(raw)
    bad["candidates"][alt]["reason"] = "faster by itself than the chosen step, so the cost model ranks it higher."
    assert "ranking" in cats(bad, st, f)
    ok = copy.deepcopy(bad)
    ok["candidates"][alt]["reason"] += " Not now: it is only legal after the rows are split, because its loop must be innermost."
    assert "ranking" not in cats(ok, st, f)
    # a lower predicted time beside the chosen one's is the same claim in structured form
    timed = copy.deepcopy(raw)
    chosen = next(n for n, c in enumerate(timed["candidates"]) if c["verdict"] == "chosen")
    timed["candidates"][chosen]["predicted_s"] = 2e-5
    timed["candidates"][alt]["predicted_s"] = 1e-5
    assert "ranking" in cats(timed, st, f)


def test_a_preparatory_step_names_what_it_enables_and_why():
    st = step("rows48", "loop_split", {"path": [0, 0], "loops": ["j"]}, {"factor": 16}, speedup=0.99)
    f = facts(st)
    p = preparation(f)
    assert (p.strategy, p.why) == ("loop_vectorization", "no_site")   # 48 wide: no legal vector loop
    raw = TemplateWriter().write(st).model_dump(mode="json")
    assert cats(raw, st, f) == set()
    assert raw["expected_effect"]["enables"] == "loop_vectorization"
    for text in ("little by itself.", "it prepares `loop_vectorization`."):
        bad = copy.deepcopy(raw)
        bad["expected_effect"]["text"] = text
        assert "preparatory" in cats(bad, st, f), text


def test_effect_a_decision_expected_slower_or_contradicted(par):
    st, f, raw = par
    for d in ("slower", "neutral"):
        bad = copy.deepcopy(raw)
        bad["expected_effect"]["direction"] = d
        assert "effect" in cats(bad, st, f)
    contra = copy.deepcopy(raw)
    contra["expected_effect"]["text"] = "about the same as before."
    assert "effect" in cats(contra, st, f)


def test_derivable_no_model_time_and_every_number_from_the_prompt(par):
    st, f, raw = par
    assert not any(k.startswith("pred.") for k in derivable_numbers(f))
    bad = copy.deepcopy(raw)
    bad["expected_effect"]["text"] += f" The cost model predicts {f.predicted.after_s * 1e6:.3g} µs."
    assert "derivable" in cats(bad, st, f)
    # validation (every writer) rejects it, though the figure is a true cost-model output
    with pytest.raises(CotInvalid) as e:
        validate(bad, st, f)
    assert "coherence derivable" in str(e.value)


def test_cache_no_last_level_figure_the_cores_cannot_count_on():
    st = step("rowsum", "loop_parallelization", {"path": [0], "loops": ["i"]}, {}, speedup=1.8)
    vm = Hardware("VM", 32 << 10, 1 << 20, 480 << 20, 512, 2)      # the host's whole L3, 2 cores
    real = Hardware("desktop", 32 << 10, 1 << 20, 16 << 20, 512, 2)
    assert not vm.l3_plausible and real.l3_plausible
    f = facts(st, vm)
    raw = TemplateWriter(hardware=vm).write(st, f).model_dump(mode="json")
    assert "L3" not in raw["observation"]["work"] and cats(raw, st, f) == set()
    bad = copy.deepcopy(raw)
    bad["observation"]["work"] += " The whole program fits in L3 (480 MiB)."
    assert "cache" in cats(bad, st, f)
    assert "cache" not in cats(bad, st, facts(st, real))
    # 3 MiB is beyond a 1 MiB L2; on the VM it is "beyond L2", never "fits in L3"
    assert vm.level(3 << 20) == "DRAM" and real.level(3 << 20) == "L3"


def test_a_step_with_no_argument_is_marked_and_stays_out_of_sft(par):
    """The transpose's reorder trades a stride-64 write for a stride-64 read: it answers nothing
    found at its site, so its reasoning cannot argue for it. The template writes true facts and
    marks it (cot["coherence"]); curation rejects it as incoherent, not as an SFT answer."""
    from steptp.curate import CurateConfig, curate
    from steptp.records import KernelRecord, Occurrence

    good, _, _ = par
    bad = step("transpose", "loop_reorder", {"path": [0], "loops": ["i", "j"]}, {"order": ["j", "i"]},
               speedup=1.6)
    assert answered(facts(bad)) is None and preparation(facts(bad)) is None
    done, _ = write_cot([good, bad])
    assert done[0].cot["coherence"] == []
    assert done[1].cot["coherence"] and all(category(p) in ("site", "effect")
                                            for p in done[1].cot["coherence"])
    kernels = [KernelRecord(kernel_id=k, name=k, leir="", leir_hash=k, tir_hash="", signature=[],
                            occurrences=[Occurrence(workload="w" + k, suite="ops")], weight=1,
                            flops=1, bytes_moved=1, tvmscript="", target="cpu", raise_ok=True)
               for k in ("rowsum", "transpose")]
    res = curate(kernels, done, [], CurateConfig(max_tokens=100_000))
    reasons = {r.kernel_id: r.reason.split(":")[0] for r in res.rejects}
    assert [s.kernel_id for s in res.steps] == [done[0].kernel_id]
    assert reasons[done[1].kernel_id] == "incoherent"
    assert res.report["rejects_by_reason"]["incoherent"] == 1


def test_the_findings_use_only_the_program_and_the_hardware():
    """The same step on two machines: the limits found follow the hardware line (cores, L2),
    never a timing; a one-core machine has no parallelism limit."""
    st = step("rowsum", "loop_parallelization", {"path": [0], "loops": ["i"]}, {}, speedup=1.8)
    one = Hardware("one core", 32 << 10, 256 << 10, 8 << 20, 256, 1)
    kinds2 = [x.kind for x in site_findings(facts(st, GENERIC))]
    kinds1 = [x.kind for x in site_findings(facts(st, one))]
    assert "parallelism" in kinds2 and "parallelism" not in kinds1
    slow = st.model_copy(update={"step_speedup": 0.3})
    assert [x.kind for x in site_findings(facts(slow, GENERIC))] == kinds2
