"""One strict judge, and an eval that keeps its work.

* a proposal is ``verified`` only when it is its stated step and correct on the release's five
  input distributions, at the stated step's tolerance; a correct program that is not its stated
  step is ``unfaithful``; ``fast_p`` counts only steps the significance rule calls faster;
* every server reply shape (no choices, null content, a body that is not JSON, HTTP 500 after
  the SDK's retries, a timeout...) is a ``no_reply`` outcome with its reason, never a crash;
* a killed eval resumes from its partial file: judged states are kept, never asked again.

Real TVM verification and timing (``Measurer``); the OpenAI SDK through its real HTTP layer
against a loopback server (``tests/_openai_server.py``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from _openai_server import OpenAIServer, completion

from steptp import strategies as S
from steptp.format.cot_schema import answer_json
from steptp.eval.judge import Judge, State
from steptp.eval.journal import PARTIAL, Journal, JournalMismatch
from steptp.eval.report import policy_summary, summarize
from steptp.leir import format_program, parse
from steptp.measure.timing import MeasureConfig
from steptp.measure.verify import DEFAULT_SEEDS, DISTRIBUTIONS
from steptp.records import Timing

ROOT = Path(__file__).resolve().parents[1]
FAST = MeasureConfig(min_repeat_ms=10, repeats=5, num_threads=1, timeout_s=60)
N = 32
MM = f"""kernel mm(A: f32[{N},{N}], B: f32[{N},{N}]) -> C: f32[{N},{N}]
  for i in {N}, j in {N}, k in {N}:
    C[i,j] += A[i,k] * B[k,j]
"""


def _cand(prog, strategy, **site):
    return next(c for c in S.candidates(prog, strategy)
                if all(c.site.to_json().get(k) == v for k, v in site.items()))


def _reply(c, program: str) -> str:
    return "<think>\nwhy\n</think>\n" + answer_json(c.strategy, c.site.to_json(), dict(c.params), program)


@pytest.fixture(scope="module")
def measurer(tmp_path_factory):
    from steptp.measure.runner.local import Measurer

    with Measurer(config=FAST, cache=tmp_path_factory.mktemp("judge-cache") / "cache.sqlite") as m:
        yield m


# ---------------------------------------------------------------------------- the strict judge
@pytest.mark.slow
def test_unfaithful_but_correct_is_its_own_outcome(measurer):
    """A reply that claims ``loop_unrolling`` but submits a parallelization is correct, yet not
    its step: ``unfaithful`` (verified at the unroll's class, exact), neither timed nor verified."""
    p = parse(MM)
    unroll = _cand(p, "loop_unrolling", loops=["k"])
    par = _cand(p, "loop_parallelization", loops=["i"])
    prog = format_program(par.program)
    judge = Judge(measurer, retime_rounds=0)
    base, _ = judge.time_state(format_program(p))
    st = State("mm", format_program(p), format_program(p), timing=base, baseline=base)
    lie, honest = judge.judge_many(st, [_reply(unroll, prog), _reply(par, prog)])
    assert (lie.outcome, lie.legal, lie.faithful, lie.exactness) == ("unfaithful", True, False, "exact")
    assert "not what loop_unrolling" in lie.reason and lie.after is None and lie.step_speedup is None
    assert lie.max_abs_err is not None            # it was verified, on the release's seeds
    assert (honest.outcome, honest.faithful) == ("verified", True) and honest.step_speedup > 0
    rows = [{"kernel_id": "mm", "state_id": st.state_id, "depth": 0, "outcome": j.outcome,
             "legal": j.legal, "faithful": j.faithful, "step_speedup": j.step_speedup,
             "faster": j.faster, "tokens": 0} for j in (lie, honest)]
    s = policy_summary(rows)
    assert s["outcomes"]["unfaithful"] == 1 and s["verified_rate"] == 0.5 and s["faithful_rate"] == 0.5


@pytest.mark.slow
def test_verified_on_all_five_input_distributions(measurer):
    """A state that clamps at -60 equals the kernel on the standard normal, uniform positive and
    large magnitude (sigma 8) inputs, but not on the mixed-sign ones (magnitudes to 100): a
    faithful step from it passed the eval's old three seeds; on the release's five it fails,
    and the reason names the distribution."""
    orig = "kernel k(A: f32[64,64]) -> B: f32[64,64]\n  for i in 64, j in 64:\n    B[i,j] = A[i,j] * 2.0\n"
    clamped = format_program(parse(orig.replace("A[i,j] * 2.0", "max(A[i,j], -60.0) * 2.0")))
    step = _cand(parse(clamped), "loop_reorder")
    reply = _reply(step, format_program(step.program))
    st = State("k", format_program(parse(orig)), clamped)
    assert Judge(measurer).seeds == DEFAULT_SEEDS and len(set(s % 5 for s in DEFAULT_SEEDS)) == 5
    st.timing = st.baseline = Judge(measurer).time_state(clamped)[0]
    (three,) = Judge(measurer, seeds=(0, 1, 2), retime_rounds=0).judge_many(st, [reply])
    assert three.outcome == "verified"
    (five,) = Judge(measurer, retime_rounds=0).judge_many(st, [reply])
    assert five.outcome == "failed_verification" and DISTRIBUTIONS[4] in five.reason


@pytest.mark.slow
def test_a_faster_step_below_significance_is_not_in_fast_p(measurer):
    """The measured step speedup is far above 2, but the state's timing is too noisy for the
    significance rule: ``faster`` is False, the step is in ``fast_2_raw`` and not in ``fast_2``."""
    p = parse(MM)
    par = _cand(p, "loop_parallelization", loops=["i"])
    judge = Judge(measurer, retime_rounds=0)
    base, _ = judge.time_state(format_program(p))
    noisy = Timing(median_s=base.median_s * 10, min_s=base.min_s, spread=0.4, repeats=5, number=1)
    st = State("mm", format_program(p), format_program(p), timing=noisy, baseline=base)
    (j,) = judge.judge_many(st, [_reply(par, format_program(par.program))])
    assert j.outcome == "verified" and j.step_speedup > 2.0 and j.faster is False
    s = policy_summary([{"kernel_id": "mm", "state_id": st.state_id, "depth": 0, "outcome": j.outcome,
                         "legal": j.legal, "faithful": j.faithful, "step_speedup": j.step_speedup,
                         "faster": j.faster, "tokens": 0}])
    assert s["best_of_n"]["fast_p"]["2.0"] == 0.0 and s["best_of_n"]["fast_p_raw"]["2.0"] == 1.0


def test_fast_p_counts_significant_steps_and_finals_only():
    """The report alone: a 2.09x step the rule marked not faster counts in ``fast_p_raw`` only;
    in multi-step modes a final state the rule cannot tell from the kernel counts as 1x."""
    rows = [{"kernel_id": "a", "state_id": "s1", "depth": 0, "outcome": "verified", "legal": True,
             "faithful": True, "step_speedup": 2.09, "faster": False, "tokens": 0},
            {"kernel_id": "b", "state_id": "s2", "depth": 0, "outcome": "verified", "legal": True,
             "faithful": True, "step_speedup": 1.6, "faster": True, "tokens": 0},
            {"kernel_id": "b", "state_id": "s2", "depth": 0, "outcome": "unfaithful", "legal": True,
             "faithful": False, "step_speedup": None, "faster": None, "tokens": 0}]
    s = policy_summary(rows)
    assert s["best_of_n"]["fast_p"] == {"1.0": 0.5, "1.5": 0.5, "2.0": 0.0, "5.0": 0.0}
    assert s["best_of_n"]["fast_p_raw"] == {"1.0": 1.0, "1.5": 1.0, "2.0": 0.5, "5.0": 0.0}
    kern = [{"kernel_id": "a", "final_speedup": 2.09, "final_faster": False, "ratio_to_dataset_best": None,
             "steps": 1}, {"kernel_id": "b", "final_speedup": 3.0, "final_faster": True,
                           "ratio_to_dataset_best": None, "steps": 2}]
    m = policy_summary(rows, kern)["multi"]
    assert m["fast_p"]["2.0"] == 0.5 and m["fast_p_raw"]["2.0"] == 1.0
    rows2 = [dict(r, policy="p", mode="single") for r in rows]
    from steptp.eval.report import markdown_table

    table = markdown_table(summarize(rows2))
    assert "| fast_2 |" in table and "| fast_2_raw |" in table


# ---------------------------------------------------------------------------- hostile servers
TINY = "kernel k(A: f32[16]) -> B: f32[16]\n  for i in 16:\n    B[i] = A[i] * 2.0\n"
#: (a server's reply or replies for one draw: the SDK retries once, expected reason)
HOSTILE = [
    ([{"json": {**completion("m", "x"), "choices": []}}], "no choices"),
    ([{"json": completion("m", None)}], "no content"),
    ([{"json": completion("m", ["a", "list"])}], "list content"),
    ([{"json": {**completion("m", "x"), "choices": [{"index": 0, "message": None}]}}], "NoneType"),
    ([{"json": {"id": "x", "object": "chat.completion"}}], "NoneType"),
    ([{"json": [1, 2]}], "'list' object"),
    ([{"raw": "<html>502 bad gateway</html>"}], "'str' object"),
    ([{"raw": "{not json", "ctype": "application/json"}], "JSONDecodeError"),
    ([{"status": 500}, {"status": 500}], "HTTP 500"),
    (["SLEEP", "SLEEP"], "timed out"),
]


@pytest.mark.slow
def test_every_server_reply_shape_is_an_outcome(measurer, tmp_path, monkeypatch):
    from steptp.eval.inputs import from_leir
    from steptp.eval.loop import EvalConfig
    from steptp.eval.run import evaluate

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "k.leir").write_text(TINY)
    queue = [r for rs, _ in HOSTILE for r in rs] + ["I would unroll it."]
    with OpenAIServer(queue) as srv:
        llm = {"model": "m", "base_url": srv.base_url, "timeout_s": 1.0, "max_retries": 1,
               "cache_dir": str(tmp_path / "llm")}
        s = evaluate(from_leir([tmp_path / "k.leir"]), ["openai"], tmp_path / "o",
                     EvalConfig(samples=len(HOSTILE) + 1), measurer=measurer, llm=llm, plots=False)
        assert not srv.replies and len(srv.requests) == len(queue)   # every retry was spent
    rows = pl.read_parquet(tmp_path / "o/proposals.parquet").sort("sample").to_dicts()
    assert [r["outcome"] for r in rows] == ["no_reply"] * len(HOSTILE) + ["unparsable"]
    for r, (_, why) in zip(rows, HOSTILE):
        assert r["reason"].startswith("no reply (") and why in r["reason"], (why, r["reason"])
    o = s["policies"]["openai"]
    assert o["outcomes"]["no_reply"] == len(HOSTILE) and o["reply_rate"] == 1 / (len(HOSTILE) + 1)
    assert (tmp_path / "o/summary.json").is_file() and not (tmp_path / "o" / PARTIAL).exists()


# ---------------------------------------------------------------------------- resuming
def test_journal_drops_a_torn_line_and_refuses_another_configuration(tmp_path):
    j = Journal(tmp_path, {"run": "r", "samples": 2})
    j.record("u1", [{"outcome": "verified", "step_speedup": 1.5, "faithful": True}])
    j.close()
    with open(tmp_path / PARTIAL, "a") as f:
        f.write('{"unit": "u2", "rows": [{"outc')          # the process died mid-write
    j = Journal(tmp_path, {"run": "r", "samples": 2})
    assert j.resumed == 1 and j.done("u1")[0] == [{"outcome": "verified", "step_speedup": 1.5,
                                                   "faithful": True}] and j.done("u2") is None
    j.record("u2", [{"outcome": "unparsable"}])
    j.close()
    assert [json.loads(x)["unit"] for x in (tmp_path / PARTIAL).read_text().splitlines()[1:]] == ["u1", "u2"]
    with pytest.raises(JournalMismatch, match="samples differ"):
        Journal(tmp_path, {"run": "r", "samples": 4})
    fresh = Journal(tmp_path, {"run": "r", "samples": 4}, resume=False)
    assert fresh.resumed == 0 and len((tmp_path / PARTIAL).read_text().splitlines()) == 1
    fresh.finish()
    assert not (tmp_path / PARTIAL).exists()


KILLED = """
import sys
from steptp.eval.inputs import from_leir
from steptp.eval.loop import EvalConfig
from steptp.eval.run import evaluate
from steptp.measure.timing import MeasureConfig
files, out, url, cache = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4]
evaluate(from_leir(files), ["openai"], out, EvalConfig(samples=1), cache=cache, plots=False,
         measure_config=MeasureConfig(min_repeat_ms=10, repeats=5, num_threads=1, timeout_s=60),
         llm={"model": "m", "base_url": url, "timeout_s": 300, "max_retries": 0, "cache_dir": out + "-llm"})
"""


@pytest.mark.slow
def test_a_killed_eval_resumes_with_every_state_once(tmp_path, monkeypatch):
    """Three kernels, one state each. The server answers two states and holds the third; the
    eval is killed while it waits. The rerun keeps the two judged states (never asks for them
    again) and judges the third: the report has each state exactly once."""
    from steptp.eval.inputs import from_leir
    from steptp.eval.loop import EvalConfig
    from steptp.eval.run import evaluate

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    files = []
    for n in (8, 16, 24):
        files.append(tmp_path / f"k{n}.leir")
        files[-1].write_text(TINY.replace("16", str(n)))
    out, cache = tmp_path / "eval" / "r", str(tmp_path / "cache.sqlite")
    env = dict(os.environ, PYTHONPATH=str(ROOT), STEPTP_LOCK_DIR=str(tmp_path / "locks"))
    env.pop("OPENAI_API_KEY", None)
    with OpenAIServer(["first answer", "second answer", "HANG"]) as srv:
        proc = subprocess.Popen([sys.executable, "-c", KILLED, ",".join(map(str, files)), str(out),
                                 srv.base_url, cache], env=env, cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 500
            while len(srv.requests) < 3 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.5)
            assert len(srv.requests) == 3, proc.stdout.read().decode()[-3000:] if proc.poll() is not None else ""
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(60)
        lines = (out / PARTIAL).read_text().splitlines()
        assert len(lines) == 3 and not (out / "proposals.parquet").exists()   # header + 2 states
        srv.add("third answer")
        s = evaluate(from_leir(files), ["openai"], out, EvalConfig(samples=1), cache=cache, plots=False,
                     measure_config=FAST, llm={"model": "m", "base_url": srv.base_url, "timeout_s": 300,
                                               "max_retries": 0, "cache_dir": str(out) + "-llm"})
        assert len(srv.requests) == 4              # only the third state was asked again
    rows = pl.read_parquet(out / "proposals.parquet")
    assert rows.height == 3 and rows["state_id"].n_unique() == 3 and rows["kernel_id"].n_unique() == 3
    assert sorted(rows["reply"].to_list()) == ["first answer", "second answer", "third answer"]
    assert s["resumed_units"] == 2 and s["policies"]["openai"]["proposals"] == 3
    assert not (out / PARTIAL).exists()


@pytest.mark.slow
def test_an_interrupted_multi_step_run_resumes_per_kernel(measurer, tmp_path):
    """chain over two kernels, interrupted (Ctrl-C) while the second kernel is searched: the
    rerun keeps the first kernel's search as recorded and searches the second again; proposals
    and kernel rows equal an uninterrupted run's, each (kernel, state, sample) once."""
    from steptp.eval.inputs import from_leir
    from steptp.eval.loop import EvalConfig
    from steptp.eval.policies import make_proposer
    from steptp.eval.policies.base import Proposer
    from steptp.eval.run import evaluate

    class Interrupted(Proposer):
        """The search proposer until it reaches the second kernel: then the user presses Ctrl-C."""
        name = "search"

        def __init__(self, stop_at: str):
            self.inner, self.stop_at = make_proposer("search"), stop_at

        def propose(self, state, n=1, *, offset=0):
            if state.kernel_id == self.stop_at:
                raise KeyboardInterrupt
            return self.inner.propose(state, n, offset=offset)

    files = []
    for n in (16, 24):
        files.append(tmp_path / f"k{n}.leir")
        files[-1].write_text(TINY.replace("16", str(n)))
    inp = from_leir(files)
    cfg = EvalConfig(mode="chain", samples=2, steps=2)
    evaluate(inp, ["search"], tmp_path / "whole", cfg, run="r", measurer=measurer, plots=False)
    with pytest.raises(KeyboardInterrupt):
        evaluate(inp, {"search": Interrupted(inp.roots[1].kernel_id)}, tmp_path / "cut", cfg, run="r",
                 measurer=measurer, plots=False)
    assert len((tmp_path / "cut" / PARTIAL).read_text().splitlines()) == 2   # header + kernel 1
    s = evaluate(inp, ["search"], tmp_path / "cut", cfg, run="r", measurer=measurer, plots=False)
    assert s["resumed_units"] == 1
    cols = ["kernel_id", "state_id", "depth", "sample", "outcome", "program_hash", "chosen"]
    whole, cut = (pl.read_parquet(tmp_path / d / "proposals.parquet").select(cols) for d in ("whole", "cut"))
    assert cut.to_dicts() == whole.to_dicts() and cut.unique().height == cut.height
    kw, kc = (pl.read_parquet(tmp_path / d / "kernels.parquet").drop("final_paired_speedup")
              for d in ("whole", "cut"))
    assert kc.to_dicts() == kw.to_dicts() and kc.height == 2


def test_a_proposer_that_fails_gives_no_reply_rows_and_the_run_goes_on():
    """Any proposer failure (not only the LLM layer's) is each draw's ``no_reply``, with the
    exception in the reason, and is journaled like any other outcome. The states come timed, so
    nothing is built: a proposal without a reply never reaches the verifier."""
    from steptp.eval.loop import EvalConfig, Loop
    from steptp.eval.policies.base import Proposal, Proposer

    class Flaky(Proposer):
        name = "flaky"

        def propose(self, state, n=1, *, offset=0):
            if state.kernel_id == "a":
                raise RuntimeError("connection reset by peer")
            return [Proposal(error="empty", error_reason="the server answered no choices")] * (n + 3)

    t = Timing(median_s=1e-3, min_s=1e-3, spread=0.01, repeats=5, number=1)
    states = [State(k, TINY, TINY, timing=t, baseline=t) for k in ("a", "b")]
    seen = []

    class Record:                       # the journal's interface, kept in memory
        def done(self, key):
            return None

        def record(self, key, rows, kernels=()):
            seen.append((key, [r["outcome"] for r in rows]))

    loop = Loop(Judge(None), {"flaky": Flaky()}, EvalConfig(samples=2), journal=Record())
    loop.single(states)
    assert [(r["kernel_id"], r["outcome"]) for r in loop.rows] == [("a", "no_reply")] * 2 + [("b", "no_reply")] * 2
    assert loop.rows[0]["reason"] == "no reply (error): RuntimeError: connection reset by peer"
    assert loop.rows[2]["reason"] == "no reply (empty): the server answered no choices"
    assert [k.split("|")[2] for k, _ in seen] == ["a", "b"]      # one unit per state, as judged
