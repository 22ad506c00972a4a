"""A transpose's nest split in two halves along its strided loop
(``tensor_split_to_decouple_operators``) keeps the lines of the strided read in L1 until their
next element is read, as a tiling does (``steptp.cot.argument.KEEPS_LINES``). The line of nights
20261211-12 measured it faster on 11 transposes (1.07-1.57x), all held out as incoherent: no
limit the rules knew was answered by it. (Where the halves still put more than L1 of lines
between two elements of a line — 1024 rows of A and 64 of B: 34 KiB — the rule says nothing,
and the step stays out, though it measured 1.57x.)"""

from __future__ import annotations

from cot_steps import step
from steptp.cot import TemplateWriter, facts, validate
from steptp.cot.argument import answered, keeps_lines
from steptp.cot.coherence import coherence_problems
from steptp.cot.facts import Hardware

T = """kernel transpose1(A: f32[768,3072]) -> B: f32[3072,768]
  for i in 3072, j in 768:
    B[i,j] = A[j,i]
"""
SITE = {"path": [0], "loops": ["i", "j"]}
# the EPYC line the nights ran on: 32 KiB L1, 1 MiB L2 per core, 64-byte lines, 2 cores
HW = Hardware(cpu="AMD EPYC", cores=2, vector_bits=512, l1_bytes=32 * 1024, l2_bytes=1024 * 1024,
              l3_bytes=32 * 1024 * 1024, line_bytes=64)


def test_halves_along_the_strided_loop_keep_its_lines_in_l1():
    st = step("transpose1", "tensor_split_to_decouple_operators", SITE, {"loop": "j"},
              speedup=1.46, before=T, trajectory="t-halves")
    f = facts(st, HW)
    x = answered(f)
    assert x.kind == "locality" and x.detail["access"] == "A[j,i]"
    a = next(a for a in f.at_site.accesses if a.text == "A[j,i]")
    # between two elements of one line of A: 768 lines of A and 48 of B before (51 KiB), half
    # of each after (25.5 KiB, within the 32 KiB of L1)
    assert (a.line_apart, a.line_apart_after) == (816 * 64, 408 * 64) and keeps_lines(f, x)
    cot = TemplateWriter(seed=4, hardware=HW).write(st, f)
    assert coherence_problems(cot, st, f) == []
    assert cot.expected_effect.direction == "faster" and "L1" in cot.expected_effect.text
    validate(cot.model_dump(mode="json"), st, f, sft=True)


def test_halves_along_the_other_loop_answer_nothing():
    # split along i, each half still walks all 768 rows of A between two elements of a line
    st = step("transpose1", "tensor_split_to_decouple_operators", SITE, {"loop": "i"},
              speedup=1.2, before=T, trajectory="t-halves-i")
    f = facts(st, HW)
    assert answered(f) is None
    cot = TemplateWriter(seed=4, hardware=HW).write(st, f)
    assert any(p.startswith("coherence") for p in coherence_problems(cot, st, f))
