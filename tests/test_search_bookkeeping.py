"""The search's bookkeeping shortcuts (memos, work done once per pair or statement) answer exactly
what the direct computation answers, and their memory stays bounded."""

from __future__ import annotations

import itertools

import pytest

import steptp.analysis.cost_model as CM
import steptp.strategies._deps as D
from steptp import examples
from steptp.leir import ast as A
from steptp.leir import format_program, parse
from steptp.leir.parser import implicit_loops
from steptp.leir.printer import _implicit_from
from steptp.search.space import actions


@pytest.fixture(scope="module")
def programs() -> list[A.Program]:
    """Two example kernels and the first candidates of each (tiled, split, reordered, fused)."""
    out = []
    for name in ("conv2d_relu", "matmul_bias_gelu"):
        p = parse(examples.text(name))
        out.append(p)
        out.extend(c.program for c in actions(p)[:40])
    assert len(out) > 40
    return out


def _loop_chains(program):
    """(perfect loop chain, its assignment, variables bound outside) of every loop nest."""
    def visit(body, bound):
        for s in body:
            if isinstance(s, A.Loop):
                chain = [s]
                while len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], A.Loop):
                    chain.append(chain[-1].body[0])
                inner = chain[-1].body
                if len(inner) == 1 and isinstance(inner[0], A.Assign):
                    yield chain, inner[0], bound
                yield from visit(s.body, bound + (s.var,))
            elif isinstance(s, A.If):
                yield from visit(s.body, bound)
    yield from visit(program.body, ())


def _implicit_from_reference(chain, stmt, bound, tensors) -> int:
    """The printer's rule, read straight off ``parser.implicit_loops``."""
    for k in range(len(chain) + 1):
        rest = chain[k:]
        if any(lp.kind != "serial" for lp in rest):
            continue
        loops = implicit_loops(stmt, frozenset(bound + tuple(lp.var for lp in chain[:k])), tensors)
        if not isinstance(loops, str) and loops == [(lp.var, lp.extent) for lp in rest]:
            return k
    return len(chain)


def test_printer_leaves_implicit_exactly_the_loops_the_parser_infers(programs):
    n = 0
    kinds = set()
    for p in programs:
        for chain, stmt, bound in _loop_chains(p):
            k = _implicit_from(chain, stmt, bound, p.tensors)
            assert k == _implicit_from_reference(chain, stmt, bound, p.tensors)
            kinds.add(k == 0)
            n += 1
        assert parse(format_program(p)) == p
    assert n > 40 and kinds == {True, False}   # both some implicit and some written chains


def _conflicting(program):
    accs = D.collect(program.body)
    return list(D.conflicting_pairs(accs))


def test_prepared_feasibility_equals_the_direct_test(programs):
    checked = infeasible = 0
    for p in programs[:12]:
        for a, b in _conflicting(p):
            common = D.common_loops(a, b)
            if len(common) > 5:
                common = common[:5]
            subs = D._prepare(a, b, common)
            for vec in itertools.product("<=>*", repeat=len(common)):
                want = D.feasible(a, b, common, vec)
                assert D._feasible_prepared(subs, common, vec) == want, (a.text, b.text, vec)
                checked += 1
                infeasible += not want
    assert checked > 1000 and 0 < infeasible < checked


def test_directions_memo_answers_as_computed_and_stays_bounded(programs, monkeypatch):
    monkeypatch.setattr(D, "_DIRECTIONS_SIZE", 16)
    D._DIRECTIONS.clear()
    asked = 0
    for p in programs[:12]:
        for a, b in _conflicting(p):
            common = D.common_loops(a, b)
            fixed = {0: "="} if common else None
            want = D._directions(a, b, common, fixed=fixed)
            assert D.directions(a, b, common, fixed=fixed) == want
            assert D.directions(a, b, common, fixed=fixed) == want   # from the memo
            asked += 1
            assert len(D._DIRECTIONS) <= 16
    assert asked > 16
    D._DIRECTIONS.clear()


def test_statement_estimate_memo_answers_as_computed_and_stays_bounded(programs, monkeypatch):
    monkeypatch.setattr(CM._STMT_MEMO, "maxsize", 64)
    CM._STMT_MEMO.clear()
    for p in programs:           # warm: candidates share most statements with their parent
        CM.features(p, 4)
    assert len(CM._STMT_MEMO) <= 64
    monkeypatch.setattr(CM._STMT_MEMO, "maxsize", 10**6)
    CM._STMT_MEMO.clear()
    calls = 0
    for p in programs:
        tk = (p.inputs, p.outputs, p.intermediates)
        for st in CM._statements(p):
            for optimistic in (False, True):
                want = CM._stmt_estimate(p, st, 4, optimistic)
                assert CM._stmt_estimate_memo(p, tk, st, 4, optimistic) == want
                calls += 1
    # the candidates' untouched statements repeat their parent's: fewer entries than questions
    assert 0 < len(CM._STMT_MEMO) < calls
    CM._STMT_MEMO.clear()


def test_canonical_text_prints_each_statement_once_per_declarations(programs):
    """``canonical_text`` keeps the printed lines of each top-level statement: a candidate's
    text is still the printer's text of its canonical program, and the same statement object
    under other declarations (which rename it and decide its implicit loops) prints anew."""
    from dataclasses import replace

    from steptp.leir import canon

    for p in programs:
        assert canon.canonical_text(p) == format_program(canon.canonicalize(p)[0])
    mm = parse("kernel mm(A: f32[8,8], B: f32[8,8]) -> C: f32[8,8]\n"
               "  C[i,j] += A[i,k] * B[k,j]\n")
    assert "for" not in canon.canonical_text(mm)   # every loop implicit
    # the same statement object, the inputs swapped (other letters) and reshaped (the loops
    # are no longer what the parser infers, so they are written out)
    other = replace(mm, inputs=(replace(mm.inputs[1], shape=(8, 16)),
                                replace(mm.inputs[0], shape=(8, 8))),
                    outputs=(replace(mm.outputs[0], shape=(8, 16)),))
    assert other.body[0] is mm.body[0]
    text = canon.canonical_text(other)
    assert text == format_program(canon.canonicalize(other)[0])
    assert text != canon.canonical_text(mm)
    assert len(canon._LINES) <= canon._LINES_MAX


def _directions_by_definition(a, b, common, fixed=None, free_from=None):
    """The hierarchical refinement read straight off its definition, with the direct
    ``feasible`` test of each whole vector: refine a level to ``< = >`` (or its pinned entry)
    only while the vector it starts, the rest pinned or ``*``, may hold."""
    fixed = fixed or {}
    n = len(common)
    stop = n if free_from is None else free_from
    out = []

    def go(prefix):
        vec = prefix + [fixed.get(j, "*") for j in range(len(prefix), n)]
        if not D.feasible(a, b, common, vec):
            return
        if len(prefix) >= stop:
            out.append(tuple(vec))
            return
        for d in ([fixed[len(prefix)]] if len(prefix) in fixed else ["<", "=", ">"]):
            go(prefix + [d])

    go([])
    return out


def test_directions_equal_the_refinement_by_definition(programs):
    """``_directions`` carries each equation's bounds down the recursion instead of summing the
    whole vector at every step: the same vectors in the same order, for pinned outer levels,
    free inner levels and pairs that never conflict (a write against itself over every loop,
    a tiled band's reduction)."""
    asked = found = 0
    shapes = set()
    # strided subscripts, where the GCD of the suffix's coefficients decides (B[4i+2j] reads
    # B[4i+2j+2]: a dependence only because 2 divides the distance)
    strided = parse("kernel k(A: f32[8]) -> B: f32[40]\n  for i in 8, j in 4:\n"
                    "    B[4*i+2*j] = B[4*i+2*j+2] + A[i]\n")
    for p in [strided] + programs:
        for a, b in _conflicting(p):
            common = D.common_loops(a, b)
            for fixed, free_from in ((None, None), ({0: "="} if common else None, None),
                                     (None, max(0, len(common) - 1))):
                want = _directions_by_definition(a, b, common, fixed, free_from)
                assert D._directions(a, b, common, fixed, free_from) == want, (a.text, b.text)
                asked += 1
                found += len(want)
                shapes.add(len(want) > 1)
    assert asked > 200 and found > asked and shapes == {True, False}


def test_check_answers_per_statement_as_the_whole_program_does():
    """``leir.check`` keeps each top-level statement's problems for its declarations and what
    the statements before it wrote: the same statement object read after a different first
    statement is checked anew (an intermediate read before it is written), and a warm memo
    reports exactly the problems of a cold one."""
    from dataclasses import replace

    from steptp.leir import check as check_fn
    import importlib

    C = importlib.import_module("steptp.leir.check")
    p = parse("kernel k(A: f32[8]) -> B: f32[8]\n  T: f32[8]\n"
              "  for i in 8:\n    T[i] = A[i] * 2.0\n  for i in 8:\n    B[i] = T[i] + Q[i]\n")
    C._STMTS.clear()
    cold = [str(x) for x in C.problems(p)]
    assert cold == ["line 6, column 19: tensor 'Q' is not declared"]
    assert [str(x) for x in C.problems(p)] == cold and len(C._STMTS) == 2   # warm
    # the second statement object, now after a statement that writes B, not T
    q = replace(p, body=(parse("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n"
                               "    B[i] = A[i]\n").body[0], p.body[1]))
    assert q.body[1] is p.body[1]
    got = [x.message for x in C.problems(q)]
    assert got == ["intermediate 'T' is read before it is written", "tensor 'Q' is not declared"]
    C._STMTS.clear()
    assert [x.message for x in C.problems(q)] == got
    # candidates: a warm memo answers every program exactly as a cold one
    progs = [parse(examples.text(n)) for n in ("softmax", "layer_norm")]
    progs += [c.program for pr in progs for c in actions(pr)[:30]]
    warm = [C.problems(x) for x in progs]
    for x, w in zip(progs, warm):
        C._STMTS.clear()
        assert C.problems(x) == w
    check_fn(progs[0])


def test_statement_estimates_by_identity_answer_as_by_value(programs):
    """The cost model looks a statement up by its object before its value (a candidate shares
    its untouched statements with its parent) and walks each program once for ``predict`` and
    ``potential``: the same estimates as computed afresh, with bounded memos."""
    for memo in (CM._STMT_MEMO, CM._STMT_BY_ID, CM._WALKS):
        memo.clear()
    first = [(CM.predict(p, 4), CM.potential(p, 4), tuple(CM.features(p, 4))) for p in programs]
    assert len(CM._STMT_BY_ID) > 0 and len(CM._WALKS) <= CM._WALKS.maxsize
    again = [(CM.predict(p, 4), CM.potential(p, 4), tuple(CM.features(p, 4))) for p in programs]
    assert again == first
    for p, want in zip(programs, first):
        for memo in (CM._STMT_MEMO, CM._STMT_BY_ID, CM._WALKS):
            memo.clear()
        assert (CM.predict(p, 4), CM.potential(p, 4), tuple(CM.features(p, 4))) == want
    # equal declarations in another program object share the by-value entries
    d1 = CM._Decls((programs[0].inputs, programs[0].outputs, programs[0].intermediates))
    d2 = CM._Decls(tuple(tuple(t) for t in d1.decls))
    assert d1 == d2 and hash(d1) == hash(d2) and d1 != d1.decls


def test_program_hash_of_a_text_is_kept_and_answers_as_parsed(programs, monkeypatch):
    """``program_hash`` keeps the hash of each text (a candidate's text is hashed by its
    verification's and its timing's cache lookups): the same identity as the parsed program's,
    bounded, and a text that does not parse raises every time, never kept."""
    import steptp.measure.cache as MC
    from steptp.leir.canon import canonical_text

    monkeypatch.setattr(MC._TEXT_HASHES, "maxsize", 8)
    MC._TEXT_HASHES.clear()
    texts = [canonical_text(p) for p in programs[:20]]
    want = [MC.program_hash(p) for p in programs[:20]]          # from the Program objects
    assert [MC.program_hash(t) for t in texts] == want          # parsed
    assert [MC.program_hash(t) for t in texts] == want          # kept (the last 8)
    assert len(MC._TEXT_HASHES) == 8 and texts[-1] in MC._TEXT_HASHES
    # the printer's text of a renamed program: another text, the same identity
    assert MC.program_hash(format_program(programs[0])) == want[0]
    for _ in range(2):
        with pytest.raises(Exception):
            MC.program_hash("kernel k(A: f32[4]) -> B: f32[4]\n  B[i] = A[i] +\n")
    assert len(MC._TEXT_HASHES) == 8
    MC._TEXT_HASHES.clear()


def test_the_leir_stored_with_a_timing_is_the_canonical_text_kept_per_text(programs, monkeypatch):
    """The text stored with a timing (what the cost model trains on) is the canonical text,
    kept per input text (bounded): a printer's text is renamed, a canonical one unchanged."""
    import steptp.measure.runner.local as MS
    from steptp.leir.canon import canonical_text

    monkeypatch.setattr(MS._CANONICAL, "maxsize", 4)
    MS._CANONICAL.clear()
    for p in programs[:10]:
        text = format_program(p)
        want = canonical_text(p)
        assert MS._canonical_leir(text, "leir:x") == want
        assert MS._canonical_leir(text, "leir:x") is MS._CANONICAL.get(text)
        assert MS._canonical_leir(want, "leir:x") == want
        assert MS._canonical_leir(p, "leir:x") == want
    assert len(MS._CANONICAL) == 4
    assert MS._canonical_leir("# tvmscript", "tvms:x") is None
    MS._CANONICAL.clear()


def test_a_timings_speed_of_light_work_is_kept_per_text(programs, monkeypatch):
    """The work (flops, compulsory bytes) the speed-of-light check reads off each timed text
    is kept per text (bounded): the analysis's own figures, and None, kept too, for a text
    that is not LEIR."""
    import steptp.measure.roofline as RF
    from steptp.leir.analysis import analyze

    monkeypatch.setattr(RF._WORK, "maxsize", 4)
    RF._WORK.clear()
    for p in programs[:8]:
        an = analyze(p)
        text = format_program(p)
        assert RF.program_work(text) == (float(an.flops), float(an.bytes_moved))
        assert RF.program_work(text) == RF.program_work(p) and text in RF._WORK
    assert RF.program_work("# from tvm.script import tir as T") is None
    assert RF._WORK.get("# from tvm.script import tir as T", 0) is None and len(RF._WORK) == 4
    RF._WORK.clear()
