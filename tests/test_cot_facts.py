"""Each fact the reasoning may cite, compared with an independent computation on generated
programs: the brute-force evaluator of benchmarks/cot_audit.py (address differences for strides,
element sets for working sets and reuse, an element-by-element dependence test), not the affine
and interval analyses the facts use."""

import importlib.util
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from leir_gen import programs
from steptp.cot.facts import GENERIC, Hardware, prediction, program_facts, site_facts
from steptp.leir import format_program
from steptp.leir.parser import parse
from steptp.analysis import cost_model as CM

_spec = importlib.util.spec_from_file_location(
    "cot_audit", Path(__file__).resolve().parents[1] / "benchmarks" / "cot_audit.py")
audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(audit)


def _stmts(prog):
    return list(audit.walk(prog.body))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_site_facts_match_brute_force(p):
    text = format_program(p)
    prog = parse(text)
    pf = program_facts(text)
    for path, s, loops, guards in _stmts(prog):
        sf = site_facts(text, "", {"path": list(path)}, GENERIC)
        m = sf.main
        assert m.path == path
        # the statement's own nest, nothing from other nests
        assert list(m.nest) == [(lp.var, lp.extent) for lp, _ in loops]
        assert m.innermost == (loops[-1][0].var if loops else None)
        # every access, reads and writes, with its stride along the innermost loop
        accs = audit.accesses(s, guards)
        assert [(a.text, a.write) for a in sf.accesses] == [(audit.text(t, i), w) for t, i, w in accs]
        for a, (t, i, w) in zip(sf.accesses, accs):
            if a.stride is not None and loops:
                assert a.stride == audit.stride(prog, t, i, loops[-1][0].var, loops), a.text
            # reuse: the innermost loop along which the address does not move
            inv = [lp.var for lp, _ in loops
                   if lp.extent > 1 and audit.invariant(prog, t, i, lp.var, loops)]
            if a.reuse_loop is None:
                assert not inv, (a.text, inv)
            else:
                assert a.reuse_loop == inv[-1], (a.text, inv)
        # working set of each loop of the nest: distinct bytes over that loop's full run
        idx = [(t, i) for t, i, _ in accs]
        for w in sf.working_sets:
            if w.exact:
                want = audit.distinct(prog, idx, [lp for lp, _ in loops[w.depth:]], guards)
                assert w.bytes == want, (w.loop, s)
        # touched once: as many distinct elements as (access, iteration) pairs
        if sf.working_sets and sf.working_sets[0].exact and math.prod(e for _, e in m.nest) <= 20000:
            uniq = {audit.text(t, i): (t, i) for t, i, _ in accs}
            seen, count = set(), 0
            for env in audit.points([lp for lp, _ in loops]):
                try:
                    if guards and not all(audit.ev(g, env) for g in guards):
                        continue
                except audit.Unknown:
                    pass
                for t, i in uniq.values():
                    a_ = audit.addr(prog, t, i, env)
                    if a_ is not None:
                        seen.add((t, a_))
                        count += 1
            assert sf.touched_once == (len(seen) == count), s
        # reduction axes: loops absent from the left-hand side
        if s.op != "=":
            used = {v for e in s.index for v in audit.A.free_vars(e)}
            assert list(m.reduction_axes) == [lp.var for lp, _ in loops if lp.var not in used]
    # dependences: a loop the facts call parallel-safe has no element touched by two iterations
    for lf in pf.loops:
        if lf.carries_dependence:
            continue
        under = [x for x in _stmts(prog) if x[0][:len(lf.path)] == lf.path]
        owner = {}
        for _, s, loops, guards in under:
            if math.prod(lp.extent for lp, _ in loops) > 20000:
                break
            for env in audit.points([lp for lp, _ in loops]):
                try:
                    if not all(audit.ev(g, env) for g in guards):
                        continue
                except audit.Unknown:
                    pass
                wkey = (s.tensor, audit.addr(prog, s.tensor, s.index, env))
                if wkey[1] is None:
                    continue
                assert owner.setdefault(wkey, env[lf.var]) == env[lf.var], (lf.var, s)


def test_prediction_is_the_cost_model_on_the_fingerprinted_cores():
    text = "kernel k(A: f32[64,256]) -> S: f32[64]\n  for i in 64:\n    for j in 256:\n      S[i] += A[i,j]\n"
    for cores in (1, 2, 8):
        hw = Hardware("x", GENERIC.l1_bytes, GENERIC.l2_bytes, GENERIC.l3_bytes, 512, cores)
        pr = prediction(format_program(parse(text)), "", hw)
        assert pr.before_s == pytest.approx(CM.predict(parse(text), cores=cores))
        assert pr.after_s is None


def test_hardware_levels_and_lanes():
    hw = Hardware("x", 32 * 1024, 1 << 20, 8 << 20, 256, 4)
    assert [hw.level(b) for b in (32 * 1024, 32 * 1024 + 1, 1 << 20, 9 << 20)] == ["L1", "L2", "L2", "DRAM"]
    assert hw.lanes("f32") == 8 and hw.lanes("f64") == 4 and hw.lanes("f16") == 16
    assert Hardware.from_dict(hw.to_dict()) == hw
    host = Hardware.current()
    assert host.l1_bytes > 0 and host.cores >= 1 and host.vector_bits in (64, 128, 256, 512)
