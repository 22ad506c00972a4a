"""Reading and statically judging model replies (no TVM): the reply is untrusted text."""

import json

import pytest

from steptp import strategies as S
from steptp.format.cot_schema import answer_json
from steptp.eval.judge import static_judgement
from steptp.eval.reply import ReplyError, parse_reply
from steptp.leir import format_program, parse

MM = """kernel mm(A: f32[16,16], B: f32[16,16]) -> C: f32[16,16]
  for i in 16, j in 16, k in 16:
    C[i,j] += A[i,k] * B[k,j]
"""


def _reorder():
    p = parse(MM)
    c = next(c for c in S.candidates(p, "loop_reorder") if list(c.params["order"]) == ["i", "k", "j"])
    return p, c


def test_reply_forms():
    a = parse_reply('<think>\nwhy\n</think>\n```json\n{"strategy": "x", "site": {"path": [0]}, '
                    '"params": {}, "program": "kernel ..."}\n```\ntrailing words')
    assert (a.think, a.strategy, a.site) == ("why", "x", {"path": [0]})
    # no think block: the first JSON object anywhere
    assert parse_reply('Sure! {"strategy": "y", "site": {}, "params": {}, "program": "p"}').strategy == "y"
    for bad, why in [("", "empty"), ("<think> never closed {", "never closed"),
                     ("<think>x</think> no json here", "no JSON"),
                     ('<think>x</think>{"strategy": "a", "site": {}}', "lacks params, program"),
                     ('<think>x</think>{"strategy": "a", "site": [], "params": {}, "program": "p"}',
                      "'site' must be an object"),
                     ('<think>x</think>{"strategy": "__import__(\'os\')", "site": {}, "params": {}, '
                      '"program": ""}', "LEIR text")]:
        with pytest.raises(ReplyError, match=why):
            parse_reply(bad)


def test_static_outcomes():
    p, c = _reorder()
    good = format_program(c.program)
    site = c.site.to_json()

    def judge(strategy, program, params=None, s=site):
        reply = "<think>t</think>\n" + answer_json(strategy, s, params or dict(c.params), program)
        return static_judgement(p, p, "exact", reply)

    j, cand = judge("loop_reorder", good)
    assert (j.outcome, j.legal, j.faithful, j.exactness) == ("unparsable", True, True, "exact")
    assert cand == good  # goes on to verification
    j, cand = judge("loop_reorder", "kernel mm(A: f32[16,16]) -> C: f32[16,16]\n  C[i,j] = A[i,j] +\n")
    assert j.outcome == "unparsable" and j.reason.startswith("program:") and cand is None
    j, _ = judge("loop_reorder", good.replace("f32", "f64"))
    assert j.outcome == "bad_signature" and "f64" in j.reason
    j, _ = judge("loop_reorder", format_program(p))
    assert j.outcome == "illegal" and "no-op" in j.reason
    j, _ = judge("make_it_fast", good)
    assert j.outcome == "illegal" and "unknown strategy" in j.reason
    j, _ = judge("loop_reorder", good, {"order": ["i", "q", "j"]})
    assert j.outcome == "illegal" and j.legal is False
    # legal stated step, different program: not faithful; verified (to tell unfaithful from
    # wrong) at the STATED step's class, never at a looser one it did not claim
    other = next(o for o in S.candidates(p, "loop_split"))
    j, cand = judge(other.strategy, good, dict(other.params), other.site.to_json())
    assert j.legal and j.faithful is False and cand == good and j.exactness == "exact"
    # ... and a path that already reassociated keeps its looser class
    reply = "<think>t</think>\n" + answer_json(other.strategy, other.site.to_json(), dict(other.params), good)
    assert static_judgement(p, p, "reassociation", reply)[0].exactness == "reassociation"
    assert json.loads(json.dumps(site)) == site


def test_one_exactness_order_and_unknown_classes_are_errors():
    """The search's paths and the eval's judge take the looser class by one function; a class
    outside the three is refused, never read as exact (nor as anything else)."""
    from steptp.search import run as search_run
    from steptp.eval import judge as eval_judge

    from steptp import exactness as X

    assert search_run.worse is X.worse and eval_judge.worse is X.worse
    assert X.worse("exact", "reassociation") == "reassociation" == X.worse("reassociation", "exact")
    assert X.worse("algebraic", "reassociation") == "algebraic"
    assert list(X.EXACTNESS) == ["exact", "reassociation", "algebraic"]
    for a, b in [("exact", "bitwise"), ("Exact", "exact"), ("", "algebraic")]:
        with pytest.raises(ValueError, match="unknown exactness"):
            X.worse(a, b)
    p, c = _reorder()
    reply = "<think>t</think>\n" + answer_json("loop_reorder", c.site.to_json(), dict(c.params),
                                                format_program(c.program))
    with pytest.raises(ValueError, match="unknown exactness 'fuzzy'"):
        static_judgement(p, p, "fuzzy", reply)


@pytest.mark.slow
def test_cli_errors_name_the_input(tmp_path):
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, "-m", "steptp.cli", "eval", *args], capture_output=True,
                              text=True, cwd=tmp_path, timeout=120)

    r = run()
    assert r.returncode == 2 and "give exactly one input" in r.stderr
    (tmp_path / "bad.leir").write_text("kernel k(A: f32[4]) -> B: f32[4]\n  B[i] = A[i] +\n")
    r = run("--leir", "bad.leir", "--policy", "random")
    assert r.returncode == 2 and "bad.leir: invalid LEIR" in r.stderr
    (tmp_path / "k.leir").write_text(MM)
    r = run("--leir", "k.leir", "--policy", "replay")
    assert r.returncode == 2 and "replay policy needs a release" in r.stderr
    r = run("--leir", "k.leir", "--policy", "openai", "--model", "m")
    assert r.returncode == 2 and "OPENAI_API_KEY is not set and no --base-url" in r.stderr
    (tmp_path / "p.yaml").write_text("eval:\n  sampels: 2\n")
    r = run("--leir", "k.leir", "--params", "p.yaml")
    assert r.returncode == 2 and "unknown keys sampels" in r.stderr
    assert not (tmp_path / "eval").exists()  # nothing half-written
