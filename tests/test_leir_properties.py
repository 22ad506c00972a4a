"""Properties of random valid LEIR programs (tests/leir_gen.py)."""

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from leir_gen import inputs_for, programs
from steptp.leir import (canonical_hash, canonicalize, check, format_program, interpret, parse)
from steptp.leir.analysis import Analysis
from steptp.leir.canon import restore_names

SETTINGS = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(programs())
def test_print_parse_round_trip(p):
    text = format_program(p)
    q = parse(text)
    assert q == p
    assert format_program(q) == text


@SETTINGS
@given(programs())
def test_generated_programs_pass_check(p):
    check(p)


@SETTINGS
@given(programs())
def test_canonicalize_is_idempotent_and_reversible(p):
    c, meta = canonicalize(p)
    assert canonicalize(c)[0] == c
    assert restore_names(c, meta) == p
    check(c)
    assert canonical_hash(c) == canonical_hash(p)
    assert parse(format_program(c)) == c


@SETTINGS
@given(programs(), st.integers(0, 2**16))
def test_interpreter_writes_every_output_element(p, seed):
    out = interpret(p, inputs_for(p, seed))
    assert list(out) == [t.name for t in p.outputs]
    for t in p.outputs:
        assert out[t.name].shape == t.shape
        assert out[t.name].dtype == np.dtype(t.tvm_dtype)
        assert not np.isnan(out[t.name]).any(), format_program(p)


@SETTINGS
@given(programs(), st.integers(0, 2**16))
def test_renaming_does_not_change_results(p, seed):
    c, _ = canonicalize(p)
    a = interpret(p, inputs_for(p, seed))
    b = interpret(c, list(inputs_for(p, seed).values()))
    for t, u in zip(p.outputs, c.outputs):
        np.testing.assert_array_equal(a[t.name], b[u.name])


@SETTINGS
@given(programs())
def test_analysis_runs(p):
    a = Analysis(p)
    assert a.flops >= 0 and a.bytes_moved > 0
    for lp in a.loops:
        a.loop_carried(lp.path)
    for si in a.statements:
        if si.stmt.is_reduction and si.reduction_axes:
            # a reduction's own accumulator is carried by each of its reduction axes
            for v, path in zip(si.vars, si.loop_paths):
                if v in si.reduction_axes:
                    assert any(c.reduction for c in a.loop_carried(path))
