"""Property: lowering + building with TVM agrees with the NumPy interpreter on generated
programs (``tests/leir_gen.py``), element by element, within the ``exact`` tolerance (the two
execute the same operations in the same order; only code generation noise differs)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from leir_gen import inputs_for, programs  # noqa: E402
from steptp.leir import format_program  # noqa: E402
from steptp.leir.interp import run as interpret  # noqa: E402
from steptp.measure.verify import compare  # noqa: E402
from steptp.tir.build import build, run  # noqa: E402


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_tvm_build_agrees_with_interpreter(program):
    ins = inputs_for(program, seed=0)
    args = [ins[t.name] for t in program.inputs]
    want = interpret(program, ins)
    got = run(build(program), args)
    for t, g in zip(program.outputs, got):
        ok, abs_err, _, why = compare(g, np.asarray(want[t.name]), t.tvm_dtype, "exact",
                                      name=t.name)
        assert ok, f"{why}\n{format_program(program)}"
