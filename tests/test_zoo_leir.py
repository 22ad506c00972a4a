"""LEIR-native zoo workloads (``steptp/zoo/leir/*.leir``): the templates, their registration, and
that every strategy they are meant to host has candidates there that compute the same outputs.

These kernels exist because the imported zoo (one TVM operator per statement) gives the
algebraic strategies and some algorithmic ones no site at all (issue #4)."""

from __future__ import annotations

import pytest

import steptp.strategies as S
from steptp.leir import format_program, parse
from steptp.zoo import leir as L
from steptp.zoo import workloads
from strategy_helpers import same_outputs

#: The strategies no kernel imported from PyTorch hosts; the tiny zoo's LEIR kernels must.
NO_IMPORTED_HOME = ("apart", "cancellation", "collect", "expand_cancellation", "expand_log",
                    "factorization", "logsimp", "powsimp", "multiplicative_split",
                    "flashattention_wo_tiling",
                    "normal_loop_summation_on_exp_to_prefix_summation_on_exp")

TEMPLATES = {t.name: t for t in L.builtin()}
TINY_LEIR = [w.name for w in workloads.suite("tiny") if w.is_leir]


# ----------------------------------------------------------------------------- templates
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_builtin_template_is_well_formed(name):
    t = TEMPLATES[name]
    assert len(t.description) > 80, "say where the kernel comes from in real code"
    assert t.family and t.family != "leir"
    assert t.strategies and set(t.strategies) <= set(S.names())
    assert {"tiny", "default"} <= set(t.sizes) and t.sizes["tiny"] != t.sizes["default"]
    from steptp.leir.interp import work

    tiny, default = t.program("tiny"), t.program("default")
    assert tiny.name == default.name == name  # file stem == kernel name == workload name
    assert work(tiny) <= 50_000 and work(tiny) < work(default)
    # the rendered text is ordinary LEIR: its canonical form round-trips
    text = format_program(tiny)
    assert format_program(parse(text)) == text
    assert "{" not in t.render("tiny") and "{" not in t.render("default")


def test_suite_registration():
    names = workloads.names("leir")
    assert names == sorted(TEMPLATES) and len(names) >= 10
    assert set(names) <= set(workloads.names("default"))
    assert len(set(workloads.WORKLOADS)) == len(workloads.WORKLOADS)
    assert 3 <= len(TINY_LEIR) <= 6  # a few: the tiny zoo is CI-sized
    w = workloads.get("generalized_box_iou")
    assert w.is_leir and w.suite == "leir" and w.dtypes == ("float32",)
    assert w.meta["strategies"] == list(TEMPLATES[w.name].strategies)
    assert w.leir_program("default").params[0].shape == (300, 4)
    assert not workloads.get("relu").is_leir
    with pytest.raises(ValueError, match="not a LEIR kernel"):
        workloads.get("relu").leir_program()
    with pytest.raises(KeyError, match="valid sizes"):
        w.leir_program("huge")


def test_build_runs_the_interpreter_deterministically():
    torch = pytest.importorskip("torch")
    from steptp.leir.interp import run

    w = workloads.get("rlhf_token_kl")
    m1, x1 = w.build("tiny")
    m2, x2 = w.build("tiny")
    assert all(torch.equal(a, b) for a, b in zip(x1, x2))
    assert x1[2].dtype == torch.int64 and int(x1[2].min()) >= 0 and int(x1[2].max()) < 64
    out = m1(*x1)
    want = run(w.leir_program("tiny"), [x.numpy() for x in x1])["kl"]
    assert out.shape == (4,) and torch.equal(out, torch.from_numpy(want))


# ----------------------------------------------------------------------------- strategies
#: (kernel, strategy, form) cases expected to fail, with the reason; empty since
#: flashattention_wo_tiling substitutes V's two loop names at once (canonical names collided).
KNOWN_BROKEN: dict[tuple[str, str, str], str] = {}


def _program(name: str, form: str):
    from steptp.leir.canon import canonicalize

    p = workloads.get(name).leir_program("tiny")
    return p if form == "as written" else canonicalize(p)[0]


def _cases(names):
    out = []
    for n in names:
        for s in TEMPLATES[n].strategies:
            for form in ("as written", "canonical"):
                why = KNOWN_BROKEN.get((n, s, form))
                marks = [pytest.mark.xfail(reason=why, strict=False)] if why else []
                out.append(pytest.param(n, s, form, marks=marks, id=f"{n}-{s}-{form}"))
    return out


def _check_hosts(name: str, strategy: str, form: str) -> None:
    """The strategy has candidates on the kernel (as written, or canonical as in a kernels
    record); each computes the same outputs in the interpreter and verifies with TVM."""
    from steptp.measure.verify import random_inputs, verify

    p = _program(name, form)
    cands = S.candidates(p, [strategy], target="cpu", seed=0)
    assert cands, f"{strategy} has no candidate on {name}"
    inputs = random_inputs(p, 0)  # gathers (token ids, labels) get in-range indices
    for c in cands:
        same_outputs(c.program, p, c.exactness, inputs)
        r = verify(c.program, p, exactness=c.exactness, seeds=(0, 1, 2))
        assert r.passed, (name, c.strategy, c.to_json(), r.reason)


def test_tiny_zoo_hosts_every_strategy_without_an_imported_home():
    hosted = {s for n in TINY_LEIR for s in TEMPLATES[n].strategies}
    assert set(NO_IMPORTED_HOME) <= hosted
    for form in ("as written", "canonical"):
        found = {c.strategy for n in TINY_LEIR
                 for c in S.candidates(_program(n, form), list(NO_IMPORTED_HOME), seed=0)}
        assert found == set(NO_IMPORTED_HOME), form


@pytest.mark.parametrize("name,strategy,form", _cases(TINY_LEIR))
def test_tiny_leir_kernels_host_their_strategies(name, strategy, form):
    _check_hosts(name, strategy, form)


@pytest.mark.slow
@pytest.mark.parametrize("name,strategy,form", _cases(sorted(set(TEMPLATES) - set(TINY_LEIR))))
def test_other_leir_kernels_host_their_strategies(name, strategy, form):
    _check_hosts(name, strategy, form)


# ----------------------------------------------------------------------------- template errors
def _error(text: str, size: str = "tiny") -> L.LeirTemplateError:
    with pytest.raises(L.LeirTemplateError) as e:
        L.parse_template(text, "/k/mine.leir").program(size)
    return e.value


def test_plain_leir_needs_no_header():
    t = L.parse_template("kernel f32 k(A[8]) -> B[8]\n  B[i] = A[i] * 2.0\n", "/k/plain.leir")
    assert t.name == "plain" and t.sizes == {"tiny": {}, "default": {}}
    assert t.program("tiny") == t.program("default")
    assert t.description == "" and t.strategies == ()


def test_template_errors_name_the_file_and_the_template_position():
    head = "# size tiny: N=8\n# size default: N=64\nkernel f32 k(A[{N}]) -> B[{N}]\n"
    # a syntax error after a placeholder: the column is the template's, not the rendered text's
    e = _error(head + "  B[i] = A[i] * {N} * * 2.0\n", "default")
    assert (e.line, e.column) == (4, 23) and str(e).startswith("/k/mine.leir: line 4, column 23")
    assert "B[i] = A[i] * {N} * * 2.0" in str(e)
    e = _error(head + "  B[i] = A[i] * {N} + C[i]\n")  # check error (undeclared)
    assert (e.line, e.column) == (4, 23) and "'C' is not declared" in str(e)
    e = _error(head.replace("B[{N}]", "B[{M}]") + "  B[i] = A[i]\n")
    assert (e.line, e.column) == (3, 27) and "{M} has no value" in str(e)
    e = _error("kernel f32 k(A[{N}]) -> B[{N}]\n  B[i] = A[i]\n")
    assert e.line == 1 and "no `# size tiny:" in str(e)
    e = _error(head.replace("N=64", "N=__import__('os')") + "  B[i] = A[i]\n")
    assert e.line == 2 and "not an integer or float literal" in str(e)
    e = _error("# only a comment\n")
    assert "no `kernel` line" in str(e)


def test_load_path_reads_a_folder(tmp_path):
    (tmp_path / "b.leir").write_text("kernel f32 b(A[4]) -> B[4]\n  B[i] = A[i]\n")
    (tmp_path / "a.leir").write_text("kernel f32 a(A[4]) -> B[4]\n  B[i] = -A[i]\n")
    (tmp_path / "notes.txt").write_text("not LEIR")
    assert [t.name for t in L.load_path(tmp_path, check_sizes=("tiny",))] == ["a", "b"]
    with pytest.raises(L.LeirTemplateError, match="no such file"):
        L.load_path(tmp_path / "missing.leir")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(L.LeirTemplateError, match="no .leir file"):
        L.load_path(empty)
