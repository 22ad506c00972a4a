"""A split of the one loop both the cores and the vector lanes need has an argument: a loop
cannot be parallel and vectorized at once, and its halves can (``argument._both_limits``).

Night 20261209 held 19 preparatory ``loop_split`` steps out of SFT as incoherent: e.g.
``axpy_clamp``'s single loop of 262144, split by 256 on the way to 1.7x (``i_o`` parallel,
``i_i`` vectorized). The template said "no limit found here is answered by it", because the
parallelization of ``i`` itself was legal before the split. A split of the inner loop of a
two-loop nest (``tanh``'s ``j``: ``i`` takes the cores) has no such argument and stays out."""

from __future__ import annotations

import re

import pytest

from steptp.cot import TemplateWriter, facts, validate
from steptp.cot.argument import preparation
from steptp.cot.coherence import coherence_problems
from steptp.cot.samples import make_step
from steptp.format.cot_schema import cot_record
from steptp.leir import parse

AXPY = """kernel f32 axpy_clamp(A[262144], B[262144], C) -> D[262144]
 D[i] = min(max(C * A[i] + B[i], -1.0), 1.0)
"""
TANH = """kernel f32 tanh2(A[256,16384]) -> B[256,16384]
 B[i,j] = tanh(A[i,j])
"""


@pytest.mark.parametrize("factor", [64, 256])
def test_a_split_of_the_loop_both_cores_and_lanes_need_prepares_the_parallel_loop(factor):
    step = make_step("axpy_clamp", "loop_split", {"loops": ["i"], "path": [0]}, {"factor": factor},
                     speedup=0.97, program=parse(AXPY))
    f = facts(step)
    p = preparation(f)
    assert (p.strategy, p.loops, p.why, p.extent) == (
        "loop_parallelization", ("i_o",), "both_limits", 262144 // factor)
    assert p.finding.kind == "parallelism" and p.finding.loop == "i"
    lanes, cores = f.hardware.lanes("float32"), f.hardware.cores
    texts = set()
    for seed in range(8):       # both wordings
        cot = TemplateWriter(seed=seed).write(step, f)
        validate(cot_record(cot), step)
        assert coherence_problems(cot, step, f) == []
        e = cot.expected_effect
        assert (e.direction, e.enables) == ("preparatory", "loop_parallelization")
        assert f"`i_o` ({262144 // factor})" in e.text and f"`i_i` ({factor})" in e.text
        assert f"{cores} cores" in e.text and re.search(rf"\b{lanes} (vector )?lanes", e.text)
        assert cot.bottleneck.kind == "parallelism" and cot.bottleneck.loop == "i"
        texts.add(e.text)
    assert len(texts) == 2


def test_a_split_of_an_inner_loop_whose_nest_gives_the_cores_another_loop_has_no_argument():
    step = make_step("tanh2", "loop_split", {"loops": ["j"], "path": [0, 0]}, {"factor": 128},
                     speedup=1.15, program=parse(TANH))
    f = facts(step)
    assert preparation(f) is None
    cot = TemplateWriter(seed=0).write(step, f)
    assert cot.expected_effect.direction == "neutral"
    assert any(p.startswith("coherence site") for p in coherence_problems(cot, step, f))
