"""Costly operations per iteration (math-library calls, divisions) are a limit the reasoning can
name, and an algebraic rewrite answers it only when its result evaluates fewer of them
(steptp.cot.facts.statement_work, steptp.cot.argument.answered). The line of nights 20261208-10
measured `logsimp` (two `log` calls into one, 1.19x) and `apart` (three divisions into one,
1.07x) faster and held both out of SFT as "incoherent": the only limits the rules knew at those
statements were parallelism and locality, which no algebraic rewrite answers."""

from __future__ import annotations

from cot_steps import KERNELS, step
from steptp.cot import TemplateWriter, facts, validate
from steptp.cot.argument import answered, site_findings
from steptp.cot.coherence import coherence_problems
from steptp.cot.facts import GENERIC, costly_ops
from steptp.leir import parse
from steptp.leir.ast import node_at

NLL = KERNELS["nll"]
GP = """kernel gp(A: f32[64,8], B: f32[64,8], C: f32[8]) -> I: f32[64,64]
  for i in 64, j in 64:
    for k in 8:
      I[i,j] += A[i,k] * A[i,k] / (C[k] * C[k]) - 2.0 * A[i,k] * B[j,k] / (C[k] * C[k]) + B[j,k] * B[j,k] / (C[k] * C[k])
"""
NLL_SITE = {"path": [0, 2], "loops": ["i"]}
GP_SITE = {"path": [0, 0, 0, 0], "loops": ["i", "j", "k"]}


def test_costly_operations_are_counted_by_name():
    assert costly_ops(node_at(parse(NLL), (0, 2)).value) == (("log", 2),)
    assert costly_ops(node_at(parse(GP), (0, 0, 0, 0)).value) == (("division", 3),)
    assert costly_ops(node_at(parse(NLL), (0, 0)).value) == ()


def test_one_log_instead_of_two_is_argued_for():
    st = step("nll", "logsimp", NLL_SITE, {}, speedup=1.19, before=NLL, trajectory="t-nll")
    assert "log(D[i] * E[i])" in st.after_leir
    f = facts(st, GENERIC)
    w = f.at_site.work
    assert (w.costly, w.costly_after) == ((("log", 2),), (("log", 1),)) and w.less
    x = answered(f)
    assert x.kind == "compute" and x.detail["work"] == {"log": 2}
    cot = TemplateWriter(seed=1, hardware=GENERIC).write(st, f)
    assert coherence_problems(cot, st, f) == []
    assert cot.bottleneck.kind == "compute" and "2 `log` calls" in cot.bottleneck.text
    assert cot.expected_effect.direction == "faster"
    assert "1 `log` call" in cot.expected_effect.text
    validate(cot.model_dump(mode="json"), st, f, sft=True)


def test_three_divisions_into_one_is_argued_for():
    st = step("gp", "apart", GP_SITE, {"symbol": "C[k]"}, speedup=1.07, before=GP,
              trajectory="t-gp-apart")
    f = facts(st, GENERIC)
    assert f.at_site.work.n_costly == 3 and f.at_site.work.n_costly_after == 1
    cot = TemplateWriter(seed=3, hardware=GENERIC).write(st, f)
    assert coherence_problems(cot, st, f) == []
    assert "3 divisions" in cot.bottleneck.text and "1 division" in cot.expected_effect.text
    validate(cot.model_dump(mode="json"), st, f, sft=True)


def test_a_rewrite_with_as_many_costly_operations_answers_nothing():
    # swapping two operands is an algebraic move too, but it keeps all three divisions
    st = step("gp", "expression_reorder", GP_SITE,
              {"expr": "2.0 * A[i,k] * B[j,k]", "rewrite": "swap"}, speedup=1.2, before=GP,
              trajectory="t-gp-swap")
    f = facts(st, GENERIC)
    assert any(x.kind == "compute" and "work" in x.detail for x in site_findings(f))
    assert not f.at_site.work.less
    assert answered(f) is None
    cot = TemplateWriter(seed=2, hardware=GENERIC).write(st, f)
    assert any(p.startswith("coherence effect") for p in coherence_problems(cot, st, f))


def test_sharing_a_subexpression_does_not_answer_costly_operations():
    # CSE answers the repeated `C[k] * C[k]` and nothing else, even where divisions are found
    st = step("gp", "common_subexpression_elimination", GP_SITE, {"expr": "C[k] * C[k]"},
              speedup=1.17, before=GP, trajectory="t-gp-cse")
    x = answered(facts(st, GENERIC))
    assert x.kind == "compute" and "repeated" in x.detail


def test_moving_a_costly_operation_into_another_statement_saves_none():
    # the statement loses a `log`, but a new one computes it in the same iteration
    st = step("nll", "expression_splitting", NLL_SITE, {"expr": "log(D[i])"}, speedup=1.1,
              before=NLL, trajectory="t-nll-split")
    f = facts(st, GENERIC)
    w = f.at_site.work
    assert (w.n_costly, w.n_costly_after) == (2, 1)
    assert w.total_after[0] == w.total[0] == 2 * 65536 and not w.less
    assert answered(f) is None


def test_a_small_whole_power_is_a_multiply_not_a_costly_operation():
    v = parse("""kernel k(A: f32[8]) -> B: f32[8]
  for i in 8:
    B[i] = A[i] ** 2 + A[i] ** 0.5
""")
    assert costly_ops(node_at(v, (0, 0)).value) == (("pow", 1),)
