"""The closed loop end to end: real TVM verification and timing (``Measurer``), the policies'
SDKs driven through their real HTTP layer (a loopback OpenAI chat-completions server; an
``httpx2`` transport for Anthropic), a tiny release built from measured registry steps."""

from __future__ import annotations

import json
import math

import httpx2
import polars as pl
import pytest
from _openai_server import OpenAIServer

from steptp import strategies as S
from steptp.eval.inputs import from_leir, from_release
from steptp.eval.loop import EvalConfig
from steptp.eval.run import evaluate
from steptp.format import chat
from steptp.format.cot_schema import answer_json
from steptp.leir import format_program, parse
from steptp.measure.runner.local import Measurer
from steptp.measure.significance import interleaved, uncached_timer
from steptp.measure.timing import MeasureConfig
from steptp.records import StepRecord, table, write_table

N = 64
MM = f"""kernel mm(A: f32[{N},{N}], B: f32[{N},{N}]) -> C: f32[{N},{N}]
  for i in {N}, j in {N}, k in {N}:
    C[i,j] += A[i,k] * B[k,j]
"""
FAST = MeasureConfig(min_repeat_ms=10, repeats=5, num_threads=1, timeout_s=60)


def _cand(prog, strategy, **params):
    return next(c for c in S.candidates(prog, strategy)
                if all(c.params.get(k) == v for k, v in params.items()))


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    d = tmp_path_factory.mktemp("kern")
    (d / "mm.leir").write_text(MM)
    return d / "mm.leir"


@pytest.fixture(scope="module")
def measurer(tmp_path_factory):
    with Measurer(config=FAST, cache=tmp_path_factory.mktemp("eval-cache") / "cache.sqlite") as m:
        yield m


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A two-step trajectory on one test kernel (reorder to i,k,j, then a split of j), verified
    and timed with its own measurer and cache, written as a release's data tables."""
    d = tmp_path_factory.mktemp("release")
    p0 = parse(MM)
    c1 = _cand(p0, "loop_reorder", order=["i", "k", "j"])
    c2 = next(c for c in S.candidates(c1.program, "loop_split") if c.params.get("factor") == 16)
    texts = [format_program(p0), format_program(c1.program), format_program(c2.program)]
    with Measurer(config=FAST, cache=d / "build-cache.sqlite") as m:
        assert all(v.passed for v in m.verify_many([(texts[0], t) for t in texts[1:]]))
        t = [o.timing for o in m.time_many(texts)]
        timer = uncached_timer(m.target, FAST)  # paired, as the release re-times its steps
        try:
            paired = [interleaved(timer, texts[i:i + 2], 3) for i in range(2)]
        finally:
            timer.close()
    kid = "k0"
    steps = []
    for i, c in enumerate((c1, c2)):
        steps.append(StepRecord(
            trajectory_id="t0", step_index=i, kernel_id=kid, before_leir=texts[i], after_leir=texts[i + 1],
            strategy=c.strategy, family=S.get(c.strategy).family, exactness=c.exactness,
            site=c.site.to_json(), params=dict(c.params), outcome="improved", verified=True,
            before=t[i], after=t[i + 1], step_speedup=t[i].median_s / t[i + 1].median_s,
            cumulative_speedup=t[0].median_s / t[i + 1].median_s, target="cpu",
            cot_text="<think>\nrecorded reasoning\n</think>", role="improving",
            paired_before=paired[i][0], paired_after=paired[i][1]))
    (d / "data").mkdir()
    write_table(pl.DataFrame({"kernel_id": [kid], "leir": [texts[0]], "raise_ok": [True],
                              "split": ["test"]}), d / "data/kernels.parquet")
    write_table(table(steps, StepRecord).with_columns(pl.lit("test").alias("split"), pl.lit(True).alias("sft")),
                d / "data/steps.parquet")
    # the recorded trajectory speedup from the interleaved pairs (a release re-times its
    # trajectories interleaved too): unpaired medians drift apart on a loaded machine
    best = math.prod(b.median_s / a.median_s for b, a in paired)
    write_table(pl.DataFrame({"kernel_id": [kid], "speedup": [best]}),
                d / "data/trajectories.parquet")
    (d / "stats.json").write_text(json.dumps({"hardware": "Test CPU"}))
    return d, steps


@pytest.mark.slow
def test_replay_reproduces_the_release(release, measurer, tmp_path):
    d, steps = release
    inp = from_release(d, "test")
    assert [s.depth for s in inp.states] == [0, 1] and inp.states[1].path == ("loop_reorder",)
    s = evaluate(inp, ["replay"], tmp_path / "r", EvalConfig(), measurer=measurer)
    r = s["policies"]["replay"]
    assert r["proposals"] == 2 and r["verified_rate"] == 1.0 and r["faithful_rate"] == 1.0
    rows = pl.read_parquet(tmp_path / "r/proposals.parquet")
    assert r["reproduced_rate"] == 1.0, rows.select("paired_step_speedup", "recorded_paired_step_speedup",
                                                    "step_speedup", "recorded_step_speedup").to_dicts()
    assert rows["paired_step_speedup"].null_count() == 0
    # multi-step chain follows the recorded trajectory to its end, then stops (no row for the end state)
    s = evaluate(inp, ["replay"], tmp_path / "m", EvalConfig(mode="chain", steps=4), measurer=measurer)
    k = pl.read_parquet(tmp_path / "m/kernels.parquet").to_dicts()[0]
    m = pl.read_parquet(tmp_path / "m/proposals.parquet").sort("depth")
    assert m["strategy"].to_list() == ["loop_reorder", "loop_split"] and m["chosen"].all()
    # the final state is the fastest along the path (the recorded split is about neutral)
    assert k["proposals"] == 2 and k["path"] == ["loop_reorder", "loop_split"][:k["steps"]]
    assert k["final_s"] == pytest.approx(m["after_s"].min())
    # compared like with like: the final state re-timed interleaved with the kernel, as the
    # release's trajectory speedup was (the unpaired ratio drifted to 2.19 on a loaded CI machine)
    assert k["final_paired_speedup"] is not None
    assert k["ratio_to_dataset_best"] == pytest.approx(k["final_paired_speedup"] / k["dataset_best_speedup"])
    assert 0.5 < k["ratio_to_dataset_best"] < 2.0
    for f in ("summary.json", "report.md", "plots/outcomes.png", "plots/step_speedups.png",
              "plots/final_speedups.png"):
        assert (tmp_path / "m" / f).is_file(), f
    assert (tmp_path / "m/plots/outcomes.png").read_bytes()[:4] == b"\x89PNG"
    assert "| replay |" in (tmp_path / "m/report.md").read_text()
    # mcts with the replay policy walks the same recorded path (cached timings), then the tree is done
    evaluate(inp, ["replay"], tmp_path / "t", EvalConfig(mode="mcts", steps=4), measurer=measurer)
    t = pl.read_parquet(tmp_path / "t/proposals.parquet")
    assert t["strategy"].to_list() == ["loop_reorder", "loop_split"] and t["outcome"].to_list() == ["verified"] * 2
    kt = pl.read_parquet(tmp_path / "t/kernels.parquet").to_dicts()[0]
    assert (kt["final_s"], kt["path"]) == (k["final_s"], k["path"]) and kt["proposals"] == 2


@pytest.mark.slow
def test_random_below_search(kernel, measurer, tmp_path):
    s = evaluate(from_leir([kernel]), ["random", "search"], tmp_path / "rs",
                 EvalConfig(mode="chain", samples=2, steps=2), measurer=measurer, seed=0)
    p = s["policies"]
    assert p["random"]["multi"]["final_speedup_geomean"] < p["search"]["multi"]["final_speedup_geomean"]
    assert p["search"]["multi"]["fast_p"]["1.5"] == 1.0


@pytest.mark.slow
def test_beam_keeps_the_fastest_states(kernel, measurer, tmp_path):
    evaluate(from_leir([kernel]), ["search"], tmp_path / "b",
             EvalConfig(mode="beam", samples=2, steps=2, width=2), measurer=measurer)
    rows = pl.read_parquet(tmp_path / "b/proposals.parquet")
    # depth 0: the root expanded with 2 proposals; depth 1: both verified children, 2 each
    assert rows.group_by("depth").len().sort("depth")["len"].to_list() == [2, 4]
    k = pl.read_parquet(tmp_path / "b/kernels.parquet").to_dicts()[0]
    fastest = rows.filter(pl.col("outcome") == "verified")["after_s"].min()
    assert k["final_s"] == pytest.approx(fastest) and k["final_speedup"] == pytest.approx(k["baseline_s"] / fastest)


# ---------------------------------------------------------------------------- LLM policies
def _replies():
    p = parse(MM)
    c = _cand(p, "loop_reorder", order=["i", "k", "j"])
    other = next(o for o in S.candidates(p, "loop_split"))
    good = format_program(c.program)
    site, params = c.site.to_json(), dict(c.params)

    def r(strategy, program, s=site, ps=params):
        return "<think>\nk innermost strides B by rows; make j innermost.\n</think>\n" + answer_json(
            strategy, s, ps, program)
    return [
        ("unparsable", "I would reorder the loops."),
        ("bad_signature", r("loop_reorder", good.replace("f32", "f64"))),
        ("unfaithful", r(other.strategy, good, other.site.to_json(), dict(other.params))),
        ("failed_verification", r("loop_reorder", good.replace("A[i,k] * B[k,j]", "A[i,k] + B[k,j]"))),
        ("no_reply", "SLEEP"),
        ("verified", r("loop_reorder", good)),
    ]


@pytest.mark.slow
def test_openai_policy_outcomes(kernel, measurer, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    want = _replies()
    with OpenAIServer([t for _, t in want]) as srv:
        llm = {"model": "my-sft", "base_url": srv.base_url, "timeout_s": 1.0, "max_retries": 0,
               "cache_dir": str(tmp_path / "llm")}
        s = evaluate(from_leir([kernel]), ["openai"], tmp_path / "o", EvalConfig(samples=len(want)),
                     measurer=measurer, llm=llm)
    rows = pl.read_parquet(tmp_path / "o/proposals.parquet").sort("sample").to_dicts()
    assert [r["outcome"] for r in rows] == [w for w, _ in want]
    # the correct program under another step's name is not verified (nor timed)
    assert rows[2]["faithful"] is False and rows[2]["after_s"] is None and rows[2]["exactness"] == "exact"
    assert rows[5]["faithful"] is True and rows[5]["legal"] and "timed out" in rows[4]["reason"]
    assert rows[5]["step_speedup"] > 1.0 and rows[3]["faithful"] is False
    # the prompt is the release's chat format, the model and sampling as configured
    path, headers, body = srv.requests[0]
    assert path == "/v1/chat/completions" and body["model"] == "my-sft"
    assert body["messages"][0] == {"role": "system", "content": chat.SYSTEM_PROMPT}
    assert "```leir\n" + format_program(parse(MM)) in body["messages"][1]["content"]
    u = s["policies"]["openai"]
    assert u["outcomes"]["verified"] == 1 and u["outcomes"]["unfaithful"] == 1 and u["parse_rate"] == 4 / 6
    assert s["usage"]["openai"]["requests"] == 5 and s["usage"]["openai"]["output_tokens"] == 100


def test_anthropic_client_through_httpx2(tmp_path, monkeypatch):
    """The shared client layer's anthropic backend: system turn as a cached block, the key in the
    authorization header only, responses cached on disk, HTTP errors as LLMError with the key scrubbed."""
    from steptp.eval.judge import State
    from steptp.eval.policies.llm import LLMProposer
    from steptp.llm.chat import LLMError, make_client

    key = "sk-ant-test-0123456789abcdef"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    seen = []

    def handler(req: httpx2.Request) -> httpx2.Response:
        body = json.loads(req.content)
        seen.append((dict(req.headers), body))
        if body["messages"][0]["content"] == "fail":
            return httpx2.Response(500, json={"type": "error", "error": {"type": "api_error",
                                                                          "message": f"bad key {key}"}})
        return httpx2.Response(200, json={
            "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": "<think>x</think>{\"strategy\": \"s\"}"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 50, "output_tokens": 7}})

    http = httpx2.Client(transport=httpx2.MockTransport(handler))
    pol = LLMProposer("anthropic", "claude-haiku-4-5", http_client=http, max_retries=0,
                    cache_dir=str(tmp_path / "c"))
    st = State("k", MM, MM, hardware="Test CPU")
    a = pol.propose(st, 2)
    b = pol.propose(st, 2)  # cached draws: no new request
    assert [p.reply for p in a] == [p.reply for p in b] and len(seen) == 2 and all(p.cached for p in b)
    headers, body = seen[0]
    assert headers["authorization"].endswith(key) and body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["system"][0]["text"] == chat.SYSTEM_PROMPT and body["messages"][0]["role"] == "user"
    assert pol.usage()["cost_usd"] > 0 and pol.usage()["cache_hits"] == 2
    client = make_client("anthropic", "claude-haiku-4-5", http_client=http, max_retries=0)
    with pytest.raises(LLMError) as e:
        client.complete([{"role": "user", "content": "fail"}])
    assert "HTTP 500" in str(e.value) and key not in str(e.value) and e.value.__cause__ is None


def test_prompts_from_leir_files_name_this_machine_as_a_release_does(tmp_path):
    """A model trained on a release reads "...: 512-bit vectors; data caches L1 ..." in every
    prompt; evaluating it on LEIR files or a kernels table must not drop that line to "cpu"."""
    from steptp.eval.policies.base import prompt_messages
    from steptp.export.release import hardware_description
    from steptp.measure.fingerprint import current

    (tmp_path / "mm.leir").write_text(MM)
    (root,) = from_leir([tmp_path / "mm.leir"]).roots
    assert root.hardware == hardware_description(current().to_dict())
    assert "-bit vectors; data caches L1 " in root.hardware
    user = prompt_messages(root)[1]["content"]
    assert user.startswith(f"Target hardware: {root.hardware}\n")
    assert from_leir([tmp_path / "mm.leir"], hardware="Test CPU").roots[0].hardware == "Test CPU"
