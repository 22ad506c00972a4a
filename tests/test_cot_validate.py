"""Each semantic check of steptp.cot.validate catches a violating answer with a clear message."""

import copy

import pytest

from steptp.cot import CotInvalid, TemplateWriter, facts, validate
from steptp.cot.samples import make_step
from steptp.cot.validate import cited_numbers, named_identifiers, number_matches


@pytest.fixture(scope="module")
def step():
    return make_step("matmul_bias_gelu", "loop_parallelization", {"path": [0], "loops": ["i"]}, {},
                     speedup=1.8)


@pytest.fixture(scope="module")
def good(step):
    return TemplateWriter(seed=3).write(step).model_dump(mode="json")


def problems(raw, step):
    with pytest.raises(CotInvalid) as e:
        validate(raw, step)
    return str(e.value), e.value.problems


def test_template_answer_is_valid(good, step):
    validate(good, step)


def test_schema_violation_is_reported_by_field(good, step):
    bad = copy.deepcopy(good)
    bad["candidates"] = bad["candidates"][:1]
    del bad["check"]
    msg, probs = problems(bad, step)
    assert any("schema: candidates" in p and "at least 2" in p for p in probs)
    assert any("schema: check" in p for p in probs)


def test_wrong_decision(good, step):
    bad = copy.deepcopy(good)
    bad["decision"]["strategy"] = "loop_unrolling"
    bad["decision"]["site"] = {"path": [0, 0], "loops": ["j"]}
    bad["decision"]["params"] = {"factor": 4}
    msg, probs = problems(bad, step)
    assert "decision.strategy is 'loop_unrolling' but the applied strategy is 'loop_parallelization'" in msg
    assert any(p.startswith("decision.site") for p in probs)
    assert any(p.startswith("decision.params") for p in probs)


def test_decision_equality_forgives_int_float(good, step):
    ok = copy.deepcopy(good)
    ok["decision"]["site"] = {"loops": ["i"], "path": [0.0]}
    validate(ok, step)


def test_chosen_candidate_must_be_applied_and_strategies_registered(good, step):
    bad = copy.deepcopy(good)
    for c in bad["candidates"]:
        c["verdict"] = "rejected"
    bad["candidates"][0]["strategy"] = "magic_speedup"
    msg, probs = problems(bad, step)
    assert any("exactly one must be 'chosen', found 0" in p for p in probs)
    assert any("'magic_speedup' is not a registered strategy" in p for p in probs)


def test_two_distinct_strategies_required(good, step):
    bad = copy.deepcopy(good)
    chosen = next(c for c in bad["candidates"] if c["verdict"] == "chosen")
    bad["candidates"] = [chosen, {**chosen, "verdict": "rejected", "reason": "other site."}]
    msg, _ = problems(bad, step)
    assert "at least two different strategies" in msg


def test_unknown_loop_variable(good, step):
    bad = copy.deepcopy(good)
    bad["bottleneck"]["text"] = "The loop `q` is serial."
    bad["bottleneck"]["loop"] = "q"
    msg, probs = problems(bad, step)
    assert any("bottleneck.loop 'q' is not a loop variable" in p for p in probs)
    assert any("bottleneck.text names loop variable `q`" in p and "loop variables: i, j, k" in p
               for p in probs)


def test_unknown_tensor_in_prose_and_structured(good, step):
    bad = copy.deepcopy(good)
    bad["observation"]["computes"] += " It also reads tensor W."
    bad["bottleneck"]["tensor"] = "W"
    msg, probs = problems(bad, step)
    assert any("observation.computes names tensor `W`" in p for p in probs)
    assert any("bottleneck.tensor 'W' is not a tensor" in p for p in probs)


def test_names_introduced_by_the_step_only_in_effect_fields():
    st = make_step("matmul_bias_gelu", "loop_split", {"path": [0, 0, 0], "loops": ["k"]}, {"factor": 16},
                   speedup=1.0)
    good = TemplateWriter().write(st).model_dump(mode="json")
    ok = copy.deepcopy(good)
    ok["expected_effect"]["text"] = "The new inner loop `k_i` has 16 iterations."
    validate(ok, st)
    bad = copy.deepcopy(good)
    bad["observation"]["work"] += " The loop `k_i` is short."
    msg, _ = problems(bad, st)
    assert "observation.work names loop variable `k_i`" in msg


def test_number_matching_no_fact(good, step):
    bad = copy.deepcopy(good)
    bad["observation"]["work"] += " Each row of `A` is reused 12345 times."
    msg, probs = problems(bad, step)
    assert any("observation.work cites 12345" in p and "matches no fact" in p for p in probs)


def test_numbers_with_units_and_rounding(step):
    f = facts(step)
    vals = list(f.numbers.values())
    assert number_matches("24", "µs", vals)            # before median 2.4e-5 s (known before the step)
    assert number_matches("0.024", "ms", vals)
    assert number_matches("4.78", "", vals)             # arithmetic intensity 4.7788 (rounded)
    assert number_matches("4.77", "", vals)             # truncated
    assert number_matches("8", "KiB", vals)             # B is 8192 bytes
    assert number_matches("48", "KiB", vals)           # the L1 of the generic core
    assert number_matches("69,120", "", vals)
    assert not number_matches("4.9", "", vals)
    assert not number_matches("1.8", "x", vals)         # the measured speedup: not citable
    assert not number_matches("97.3", "µs", vals)
    nums = [(n, u) for n, u, _ in cited_numbers("`T0[i,j]` is 16×32 f32, about 24 µs and 1.8x; see "
                                                "`D[i,j] = (T0[i,j] + C[j]) * 0.5`",
                                                quotes=["D[i,j] = (T0[i,j] + C[j]) * 0.5"])]
    assert nums == [("16", ""), ("32", ""), ("24", "µs"), ("1.8", "x")]


def test_identifiers_extraction():
    names = named_identifiers("`T0[i,j] += A[i,k]` and the loop j, tensor B, `exp(x)`, the loop order")
    assert names == ["T0", "i", "j", "A", "i", "k", "exp", "x", "j", "B"]


def test_effect_direction_supports_the_decision(good, step):
    """The direction follows from the argument (the step answers the limit named), not from a
    model's time; a chosen step expected slower is not argued for."""
    assert good["expected_effect"]["direction"] == "faster"
    bad = copy.deepcopy(good)
    bad["expected_effect"] = {"direction": "slower", "enables": None, "text": "Threads cost more."}
    with pytest.raises(CotInvalid) as e:
        validate(bad, step, coherent=True)
    assert "coherence effect: the chosen step is expected 'slower'" in str(e.value)
    contra = copy.deepcopy(good)
    contra["expected_effect"]["text"] = "about the same as before."
    with pytest.raises(CotInvalid) as e:
        validate(contra, step, coherent=True)
    assert "coherence effect: expected_effect.direction is 'faster' but its text says" in str(e.value)


def test_measured_speedup_is_not_citable(good, step):
    bad = copy.deepcopy(good)
    bad["expected_effect"]["text"] += " It came out 1.8x faster."
    msg, _ = problems(bad, step)
    assert "claim hindsight: that is the step's measured outcome" in msg


def test_preparatory_needs_an_enabled_strategy(good, step):
    no_enable = copy.deepcopy(good)
    no_enable["expected_effect"]["direction"] = "preparatory"
    no_enable["expected_effect"]["enables"] = None
    msg, _ = problems(no_enable, step)
    assert "must say which strategy it enables" in msg


def test_check_exactness_and_outputs(good, step):
    bad = copy.deepcopy(good)
    bad["check"]["exactness"] = "reassociation"
    bad["check"]["outputs"] = ["T0"]
    msg, probs = problems(bad, step)
    assert any("check.exactness is 'reassociation' but the step is 'exact'" in p for p in probs)
    assert any("check.outputs is ['T0'] but the kernel's outputs are ['D']" in p for p in probs)
