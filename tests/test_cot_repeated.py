"""A subexpression evaluated several times per iteration is a limit the reasoning can name, and
only sharing it (common_subexpression_elimination) answers it (steptp.cot.facts.
repeated_subexpression, steptp.cot.argument.SHARES_SUBEXPRESSIONS). Night 20261206 measured a
CSE of `C[k] * C[k]` (3 uses) 1.17x faster and held it out of SFT as "incoherent": the only
limit the rules knew at that statement was the reuse of `B[j,k]`."""

from __future__ import annotations

import pytest

from cot_steps import step
from steptp.cot import CotInvalid, TemplateWriter, facts, validate
from steptp.cot.argument import answered, site_findings
from steptp.cot.coherence import coherence_problems
from steptp.cot.facts import GENERIC, repeated_subexpression
from steptp.leir import parse
from steptp.leir.ast import node_at

GP = """kernel gp(A: f32[64,8], B: f32[64,8], C: f32[8]) -> I: f32[64,64]
  for i in 64, j in 64:
    for k in 8:
      I[i,j] += A[i,k] * A[i,k] / (C[k] * C[k]) - 2.0 * A[i,k] * B[j,k] / (C[k] * C[k]) + B[j,k] * B[j,k] / (C[k] * C[k])
"""
SITE = {"path": [0, 0, 0, 0], "loops": ["i", "j", "k"]}


def gp_step(strategy, params, speedup):
    return step("gp", strategy, SITE, params, speedup=speedup, before=GP,
                trajectory=f"t-gp-{strategy}")


def test_the_most_repeated_computed_subexpression_is_found():
    value = node_at(parse(GP), (0, 0, 0, 0)).value
    # C[k] * C[k] three times (1 multiplication each); A[i,k] * A[i,k] once; loads never count
    assert repeated_subexpression(value) == ("C[k] * C[k]", 1, 3, None)
    once = node_at(parse("""kernel k(A: f32[8]) -> B: f32[8]
  for i in 8:
    B[i] = A[i] * A[i] + A[i]
"""), (0, 0)).value
    assert repeated_subexpression(once) is None


def test_sharing_it_is_argued_for_with_what_it_saves():
    st = gp_step("common_subexpression_elimination", {"expr": "C[k] * C[k]"}, 1.17)
    f = facts(st, GENERIC)
    assert f.at_site.repeated == ("C[k] * C[k]", 1, 3, 0)        # none left in the statement after
    x = answered(f)
    assert x.kind == "compute" and x.detail["repeated"] == "C[k] * C[k]"
    cot = TemplateWriter(seed=2, hardware=GENERIC).write(st, f)
    assert coherence_problems(cot, st, f) == []
    assert cot.bottleneck.kind == "compute" and "3 times" in cot.bottleneck.text
    assert cot.expected_effect.direction == "faster" and "2 operations" in cot.expected_effect.text
    validate(cot.model_dump(mode="json"), st, f, sft=True)
    # measured slower, the same argument is a disagreeing prediction: not an SFT example
    slow = gp_step("common_subexpression_elimination", {"expr": "C[k] * C[k]"}, 0.8)
    fs = facts(slow, GENERIC)
    with pytest.raises(CotInvalid, match="measurement says 'slower'"):
        validate(TemplateWriter(seed=2, hardware=GENERIC).write(slow, fs).model_dump(mode="json"),
                 slow, fs, sft=True)


def test_nothing_but_sharing_answers_a_repeated_subexpression():
    # swapping two operands is a "compute" move too, but it evaluates C[k] * C[k] just as often
    st = gp_step("expression_reorder", {"expr": "2.0 * A[i,k] * B[j,k]", "rewrite": "swap"}, 1.2)
    f = facts(st, GENERIC)
    assert any(x.kind == "compute" and "repeated" in x.detail for x in site_findings(f))
    assert answered(f) is None
    cot = TemplateWriter(seed=2, hardware=GENERIC).write(st, f)
    assert any(p.startswith("coherence effect") for p in coherence_problems(cot, st, f))
