"""The Step-TP v1 reader/writer (steptp.leir.v1) on the 202-program v1 corpus and on hand-written
cases: parse, check, print/parse and write/read round trips, semantics, errors, and lowering and
building every corpus program for the host CPU with bound loops mapped to serial loops."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from steptp.leir import ast as A
from steptp.leir import format_program, parse
from steptp.leir.types import expr_dtype, unify
from steptp.leir.v1 import V1SyntaxError, V1WriteError, read_v1, signature_of, write_v1

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("STEPTP_V1_CORPUS")
              or Path(__file__).resolve().parents[2] / "shared" / "data"
              / "steptp-v1-leir-corpus.jsonl")
REPORT = REPO / "out" / "v1_corpus_lowering.json"


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    if not CORPUS.exists():
        pytest.skip(f"v1 corpus not found at {CORPUS} (set STEPTP_V1_CORPUS)")
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]
    assert len(rows) == 202
    return rows


@pytest.fixture(scope="module")
def programs(corpus) -> list[tuple[dict, A.Program]]:
    return [(r, read_v1(r["leir_v1"], signature_of(r), name=f"k{n}"))
            for n, r in enumerate(corpus)]


def _strip(p):
    return A.strip_pos(p)


# ----------------------------------------------------------------------------- corpus
def test_corpus_parses(corpus):
    failures = []
    for r in corpus:
        for bind_as in ("thread", "serial"):
            try:
                p = read_v1(r["leir_v1"], signature_of(r), bind_as=bind_as)
            except V1SyntaxError as e:
                failures.append(f"{r['workload']}: {e}")
                continue
            kinds = {n.kind for n in A.walk(p) if isinstance(n, A.Loop)}
            if bind_as == "serial":
                assert not kinds & set(A.THREAD_KINDS)
    assert not failures, "\n".join(failures)


def test_corpus_signature(programs):
    for r, p in programs:
        names = list(r["inputs"]) + list(r["constants"]) + list(r["params"])
        assert [t.name for t in p.inputs] == names
        assert [t.name for t in p.outputs] == list(r["outputs"])
        for t in p.inputs + p.outputs:
            shape = {**r["inputs"], **r["constants"], **r["params"], **r["outputs"]}[t.name]
            assert t.shape == tuple(shape)
        assert not {t.name for t in p.intermediates} & set(names + list(r["outputs"]))


def test_corpus_checks(programs):
    from steptp.leir.check import problems

    failures = []
    for r, p in programs:
        probs = problems(p)
        if probs:
            failures.append(f"{r['workload']}: " + "; ".join(map(str, probs)))
    assert not failures, "\n".join(failures)


def test_corpus_types(programs):
    for r, p in programs:
        tensors = p.tensors
        for n in A.walk(p):
            if isinstance(n, A.Assign):
                unify(expr_dtype(n.value, tensors), tensors[n.tensor].dtype)


def test_corpus_print_parse_roundtrip(programs):
    for r, p in programs:
        text = format_program(p)
        q = parse(text)
        assert q == p, r["workload"]
        assert format_program(q) == text


def test_corpus_write_read_roundtrip(programs):
    exact = 0
    for r, p in programs:
        text, sig = write_v1(p)
        q = read_v1(text, sig, name=p.name)
        assert _strip(q) == _strip(p), r["workload"]
        exact += text == r["leir_v1"]
        for k in ("inputs", "constants", "params", "outputs"):
            assert list(sig[k].items()) == list(
                {**r["inputs"], **r["constants"], **r["params"]}.items()
                if k == "inputs" else ({} if k in ("constants", "params") else r["outputs"]).items())
    # the writer reproduces the published text exactly (chained comparisons included)
    assert exact == len(programs)


def test_corpus_semantic_facts(programs):
    by = {r["workload"]: p for r, p in programs}
    sm = by["softmax"]
    ops = [s.op for s in A.walk(sm) if isinstance(s, A.Assign)]
    assert ops == ["max=", "+=", "="]
    # padding intermediates get the shape of their writing loops, not of the input
    mp = by["Max_Pooling_1D"]
    assert mp.intermediates[0].shape == (16, 64, 132)
    # bool inputs meeting floats are cast, i64 argmax indices are stored as i64
    mc = format_program(by["masked_cumsum"])
    assert "C[128,4000] bool" in mc and "f64(C[tx,a])" in mc
    am = format_program(by["Argmax_over_a_dimension"])
    assert "-> C[16,256] i64" in am and "C[tx,c] = where(A[tx,a,c] >= D[tx,c], a, C[tx,c])" in am


@pytest.mark.slow   # 35-65 s: 202 TVM builds
def test_v1_corpus_lowers(corpus, capsys):
    from steptp.tir.build import build
    from steptp.tir.lower import lower
    from steptp.tir.target import Target

    target = Target.host_cpu()
    results, t0 = [], time.time()
    for r in corpus:
        entry = {"workload": r["workload"], "level": r["level"]}
        try:
            p = read_v1(r["leir_v1"], signature_of(r), name="main", bind_as="serial")
            entry["stage"] = "lower"
            func = lower(p, target)
            entry["stage"] = "build"
            build(func, target)
            entry.update(stage="ok", ok=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported with its reason
            entry.update(ok=False, error=f"{type(e).__name__}: {str(e)[:500]}")
        results.append(entry)
    ok = sum(e["ok"] for e in results)
    failed = [e for e in results if not e["ok"]]
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps({"target": target.key, "total": len(results), "built": ok,
                                  "seconds": round(time.time() - t0, 1), "failures": failed,
                                  "results": results}, indent=1))
    with capsys.disabled():
        print(f"\nv1 corpus: {ok}/{len(results)} lowered and built for {target.key} "
              f"in {time.time() - t0:.0f}s; report {REPORT}")
        for e in failed:
            print(f"  FAIL {e['workload']} at {e['stage']}: {e['error']}")
    if failed:
        warnings.warn(f"{len(failed)} v1 corpus programs did not build; see {REPORT}")
    assert ok >= 0.95 * len(results), f"only {ok}/{len(results)} built; see {REPORT}"


# ----------------------------------------------------------------------------- semantics
SIG = {"inputs": {"A": [4, 6]}, "constants": {}, "params": {}, "outputs": {"C": [4]}}


def _stmts(p):
    return [n for n in A.walk(p) if isinstance(n, A.Assign)]


@pytest.mark.parametrize("rhs,op,value", [
    ("C^{f64,g}_{tx}+A^{f64,g}_{tx,a}", "+=", "A[tx,a]"),
    ("A^{f64,g}_{tx,a}+C^{f64,g}_{tx}", "+=", "A[tx,a]"),
    ("C^{f64,g}_{tx}*A^{f64,g}_{tx,a}", "*=", "A[tx,a]"),
    ("max(C^{f64,g}_{tx},A^{f64,g}_{tx,a})", "max=", "A[tx,a]"),
    ("min(A^{f64,g}_{tx,a},C^{f64,g}_{tx})", "min=", "A[tx,a]"),
    ("C^{f64,g}_{tx}+A^{f64,g}_{tx,a}*2+1", "+=", "A[tx,a] * 2 + 1"),
    ("C^{f64,g}_{tx}-A^{f64,g}_{tx,a}", "=", "C[tx] - A[tx,a]"),
    ("C^{f64,g}_{tx}+C^{f64,g}_{tx}*A^{f64,g}_{tx,a}", "=", "C[tx] + C[tx] * A[tx,a]"),
])
def test_reduction_patterns(rhs, op, value):
    p = read_v1(f"B^{{4}}_{{tx=0}}L^{{6}}_{{a=0}}[C^{{f64,g}}_{{tx}}={rhs};];", SIG)
    (s,) = _stmts(p)
    assert s.op == op
    from steptp.leir import format_expr
    assert format_expr(s.value) == value


def test_zero_axis_accumulation():
    sig = {"inputs": {"A": [4]}, "outputs": {"C": [4]}}
    # first write of C: an accumulation over no axes from the identity, i.e. C = A
    p = read_v1("L^{4}_{a=0}[C^{f64,g}_{a}=C^{f64,g}_{a}+A^{f64,g}_{a};];", sig)
    (s,) = _stmts(p)
    assert (s.op, s.value) == ("=", A.Load("A", (A.Var("a"),)))
    # after a write: the in-place update C = C + A
    p = read_v1("L^{4}_{a=0}[C^{f64,g}_{a}=A^{f64,g}_{a};];"
                "L^{4}_{a=0}[C^{f64,g}_{a}=C^{f64,g}_{a}+A^{f64,g}_{a};];", sig)
    s = _stmts(p)[1]
    assert s.op == "=" and "C[a] + A[a]" in format_program(p)
    assert _strip(read_v1(*write_v1(p))) == _strip(p)


def test_loop_kinds_and_binding():
    sig = {"inputs": {"A": [2, 3, 4, 5, 6, 7]}, "outputs": {"C": [2, 3, 4, 5, 6, 7]}}
    text = ("B^{2}_{bx=0}B^{3}_{ty=0}P^{4}_{a=0}V^{5}_{c=0}U^{6}_{d=0}L^{7}_{f=0}"
            "[C^{f64,g}_{bx,ty,a,c,d,f}=A^{f64,g}_{bx,ty,a,c,d,f};];")
    kinds = [n.kind for n in A.walk(read_v1(text, sig)) if isinstance(n, A.Loop)]
    assert kinds == ["blockIdx.x", "threadIdx.y", "parallel", "vectorized", "unrolled", "serial"]
    kinds = [n.kind for n in A.walk(read_v1(text, sig, bind_as="serial"))
             if isinstance(n, A.Loop)]
    assert kinds == ["serial", "serial", "parallel", "vectorized", "unrolled", "serial"]
    assert write_v1(read_v1(text, sig))[0] == text


def test_casts_inserted():
    sig = {"inputs": {"A": [4], "M": [4]}, "outputs": {"C": [4], "N": [4]}}
    p = read_v1("L^{4}_{a=0}[C^{f64,g}_{a}=A^{f64,g}_{a}*a+M^{bool,g}_{a}+exp(a);"
                "N^{i64,g}_{a}=A^{f64,g}_{a};];", sig)
    text = format_program(p)
    assert "C[a] = A[a] * f64(a) + f64(M[a]) + exp(f64(a))" in text
    assert "N[a] = i64(A[a])" in text
    from steptp.leir.check import check
    check(p)
    t, sig2 = write_v1(p)
    assert "f64(" not in t and _strip(read_v1(t, sig2)) == _strip(p)


def test_intermediates_declared():
    sig = {"inputs": {"A": [8]}, "outputs": {"C": []}}
    p = read_v1("L^{10}_{a=0}[T^{f64,s}_{a}=if_then_else(1<=a<9,A^{f64,g}_{a-1},0);];"
                "L^{2}_{a=0}L^{5}_{c=0}[Q^{f32,l}_{c+a*5}=T^{f64,s}_{c*2};];"
                "L^{10}_{a=0}[C^{f64,g}=C^{f64,g}+T^{f64,s}_{a};];", sig)
    assert [(t.name, t.dtype, t.shape, t.scope) for t in p.intermediates] == [
        ("T", "f64", (10,), "shared"), ("Q", "f32", (10,), "local")]
    assert "Q[c+a*5] = f32(T[c*2])" in format_program(p)


# ----------------------------------------------------------------------------- writer
def test_write_read_hand_program():
    from steptp.leir.canon import canonicalize

    src = """kernel k(inp: f64[16,8], idx: i64[16]) -> out: f32[16], s: f64
  acc: f64[16] local
  for i in 16 threadIdx.x:
    for r in 8 unrolled:
      acc[i] += inp[i,r] * f64(r)
    for q in 4 vectorized:
      acc[i] max= f64(q) * 0.5
    out[i] = f32(acc[i]) * 2.0
  for bb in 16 blockIdx.y, i in 8 parallel:
    s += where(i < 4 and not (bb == 3), inp[idx[bb],i] ** -1, -inf)
"""
    p = parse(src)
    text, sig = write_v1(p)
    assert "B^{16}_{tx=0}" in text and "B^{16}_{by=0}P^{8}_{i=0}" in text
    assert "f32(" in text    # a narrowing cast the reader would not insert stays explicit
    q = read_v1(text, sig, name="k")
    assert canonicalize(p)[0] == canonicalize(q)[0]
    assert write_v1(q) == (text, sig)


def test_write_keeps_declared_shapes_and_order():
    src = """kernel k(A: f64[4]) -> C: f64[4]
  U1: f64[8]
  T0: f64[4]
  for i in 4:
    T0[i] = A[i]
  for i in 4:
    U1[i] = T0[i] * 2
  for i in 4:
    C[i] = U1[i]
"""
    p = parse(src)
    text, sig = write_v1(p)
    assert sig["intermediates"] == {"U1": [8], "T0": [4]}
    assert _strip(read_v1(text, sig, name="k")) == _strip(p)


def test_write_errors():
    guard = parse("kernel k(A: f64[4]) -> C: f64[4]\n  for i in 4:\n    if i < 2:\n"
                  "      C[i] = A[i]\n")
    with pytest.raises(V1WriteError, match="guard"):
        write_v1(guard)
    carried = parse("kernel k(A: f64[4,3]) -> C: f64[4]\n  for i in 4:\n    C[i] = 0\n"
                    "    for k in 3:\n      C[i] = C[i] + A[i,k]\n")
    with pytest.raises(V1WriteError, match="reduction"):
        write_v1(carried)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("text,offset,expected", [
    ("B^{4}_{tx=0}[C^{f64,g}_{tx}=A^{f64,g}_{tx,0}]", 44, "';' after a statement"),
    ("B^{4}_{tx=0}[C^{f64,g}_{tx}=A^{f64,g}_{tx,0};", 45, "']'"),
    ("L^{0}_{a=0}[C^{f64,g}_{a}=1;];", 3, "a positive integer"),
    ("B^{4}_{tx=0}C^{f64,g}_{tx}=1;", 12, "another loop head or '['"),
    ("B^{4}_{tx=1}[C^{f64,g}_{tx}=1;];", 10, "0"),
    ("B^{4}_{a=0}[C^{f64,g}_{a}=1;];", 7, "tx, ty, tz, bx, by or bz"),
    ("L^{4}_{a=0}[C^{f64,q}_{a}=1;];", 19, "a scope (g, s or l)"),
    ("L^{4}_{a=0}[C^{f65,g}_{a}=1;];", 15, "a dtype"),
    ("L^{4}_{a=0}[C^{f64,g}_{a}=foo(a);];", 26, "if_then_else"),
    ("L^{4}_{a=0}[C^{f64,g}_{a}=c;];", 26, "a loop variable in scope"),
    ("L^{4}_{a=0}[C^{f64,g}_{a}=1+;];", 28, "an expression"),
    ("L^{4}_{a=0}[C^{f64,g}_{a}=1 $ 2;];", 28, "a name, a number or an operator"),
    ("L^{4}_{a=0}[C^{f64,g}_{a}=max(1);];", 26, "2 arguments"),
    ("L^{4}_{a=0}[C^{f64,g}_{a}=A^{f32,g}_{a,0}+A^{f64,g}_{a,0};];", 42, "f32"),
    ("L^{4}_{a=0}[C^{f64,g}_{a}=A^{f64,g}_{a};];", 26, "2 subscript(s)"),
])
def test_syntax_errors(text, offset, expected):
    with pytest.raises(V1SyntaxError) as ei:
        read_v1(text, SIG)
    e = ei.value
    assert isinstance(e, ValueError)
    assert e.offset == offset, str(e)
    assert expected in (e.expected or "") or expected in str(e), str(e)


def test_bad_signature():
    with pytest.raises(ValueError, match="no outputs"):
        read_v1("L^{4}_{a=0}[C^{f64,g}_{a}=1;];", {"inputs": {}})
    with pytest.raises(TypeError):
        read_v1(None, SIG)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- end to end
def _run(text, sig, inputs):
    from steptp.tir.build import build, run

    p = read_v1(text, sig, name="main", bind_as="serial")
    return run(build(p), inputs)


def test_softmax_runs():
    pytest.importorskip("tvm")
    sig = {"inputs": {"A": [3, 7]}, "outputs": {"C": [3, 7]}}
    text = ("B^{3}_{tx=0}L^{7}_{a=0}[D^{f64,g}_{tx}=max(D^{f64,g}_{tx},A^{f64,g}_{tx,a});];"
            "B^{3}_{tx=0}L^{7}_{a=0}[E^{f64,g}_{tx}=E^{f64,g}_{tx}+exp(A^{f64,g}_{tx,a}-"
            "D^{f64,g}_{tx});];B^{3}_{tx=0}L^{7}_{a=0}[C^{f64,g}_{tx,a}=exp(A^{f64,g}_{tx,a}-"
            "D^{f64,g}_{tx})/E^{f64,g}_{tx};];")
    a = np.random.default_rng(0).normal(size=(3, 7)) - 5.0   # all negative: max needs -inf init
    (c,) = _run(text, sig, [a])
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(c, e / e.sum(axis=1, keepdims=True), rtol=1e-12)


def test_argmax_and_padding_run():
    pytest.importorskip("tvm")
    sig = {"inputs": {"A": [2, 5, 3]}, "outputs": {"C": [2, 3], "P": [2, 7]}}
    text = ("B^{2}_{tx=0}L^{5}_{a=0}L^{3}_{c=0}[D^{f64,g}_{tx,c}=max(D^{f64,g}_{tx,c},"
            "A^{f64,g}_{tx,a,c});C^{i64,g}_{tx,c}=0;];B^{2}_{tx=0}L^{5}_{a=0}L^{3}_{c=0}"
            "[C^{i64,g}_{tx,c}=if_then_else(A^{f64,g}_{tx,a,c}>=D^{f64,g}_{tx,c},a,"
            "C^{i64,g}_{tx,c});];B^{2}_{tx=0}L^{7}_{c=0}[P^{f64,g}_{tx,c}="
            "if_then_else(2<=c<5,A^{f64,g}_{tx,0,c-2},-1.5);];")
    a = np.random.default_rng(1).normal(size=(2, 5, 3))
    c, pad = _run(text, sig, [a])
    np.testing.assert_array_equal(c, a.argmax(axis=1))
    want = np.full((2, 7), -1.5)
    want[:, 2:5] = a[:, 0, :]
    np.testing.assert_array_equal(pad, want)


def _random_inputs(p: A.Program, rng) -> list[np.ndarray]:
    out = []
    for t in p.inputs:
        if t.dtype == "bool":
            out.append(rng.random(t.shape) < 0.5)
        elif t.dtype in A.INT_DTYPES:
            out.append(rng.integers(0, 2, size=t.shape).astype(t.tvm_dtype))
        else:   # positive, so that log/sqrt of inputs stay real
            out.append(rng.uniform(0.1, 1.0, size=t.shape).astype(t.tvm_dtype))
    return out


def test_small_corpus_programs_match_interpreter(corpus):
    """The corpus programs small enough for the NumPy interpreter compute the same outputs
    built with TVM (bound loops as serial loops) as interpreted."""
    interp = pytest.importorskip("steptp.leir.interp")
    from steptp.tir.build import build, run

    rng = np.random.default_rng(0)
    ran = 0
    for r in corpus:
        p = read_v1(r["leir_v1"], signature_of(r), name="main", bind_as="serial")
        if interp.work(p) > 60_000:
            continue
        inputs = _random_inputs(p, rng)
        want = interp.run(p, inputs, check_program=False)
        got = run(build(p), inputs)
        for t, g in zip(p.outputs, got):
            np.testing.assert_allclose(g, want[t.name], rtol=1e-9, atol=1e-12,
                                       err_msg=f"{r['workload']}: output {t.name}")
        ran += 1
    assert ran >= 8
