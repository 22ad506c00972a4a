"""The multi-step RL environment (steptp.rl.env) over real HTTP on loopback, with the real judge:
an episode played with crafted replies (docs/train.md's client code, executed), each outcome the
judge gives, the episode limit, and the JSON errors of bad requests."""

from __future__ import annotations

import json
import math
import re
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from steptp import strategies as S
from steptp.format.cot_schema import answer_json
from steptp.leir import format_program, parse
from steptp.measure.timing import MeasureConfig
from steptp.rl import SCORES
from steptp.rl.reward import MAX_CHARS

DOC = Path(__file__).resolve().parent.parent / "docs" / "train.md"
FAST = MeasureConfig(min_repeat_ms=10, repeats=5, num_threads=1, timeout_s=60)
MM = """kernel mm(A: f32[16,16], B: f32[16,16]) -> C: f32[16,16]
  for i in 16, j in 16, k in 16:
    C[i,j] += A[i,k] * B[k,j]
"""


def _reply(c, program: str) -> str:
    return "<think>\nwhy\n</think>\n" + answer_json(c.strategy, c.site.to_json(), dict(c.params), program)


def _cand(prog, strategy, **site):
    return next(c for c in S.candidates(prog, strategy)
                if all(c.site.to_json().get(k) == v for k, v in site.items()))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from steptp.rl.env import Env, make_server, open_judge

    judge, m = open_judge(config=FAST, cache=tmp_path_factory.mktemp("env-cache") / "cache.sqlite")
    env = Env(judge, max_steps=4, max_episodes=3, hardware="Test CPU")
    srv = make_server(env, "127.0.0.1", 0)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", env
    finally:
        srv.shutdown()
        srv.server_close()
        judge.close()
        m.close()


@pytest.fixture(scope="module")
def client():
    """docs/train.md's client block, executed (our own docs, not input)."""
    code = re.search(r"```python env-client\n(.*?)```", DOC.read_text(), re.S).group(1)
    ns: dict = {}
    exec(compile(code, "docs/train.md:env-client", "exec"), ns)
    return ns


def _raw(url: str, method: str, path: str, data: bytes | None = None, headers=None):
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.slow
def test_an_episode_over_http(server, client):
    """Four crafted replies: a legal loop reorder (verified, the next observation shows its
    program), a no-op (illegal), a legal statement with a wrong program (fails verification), a
    program whose parallel loop races on C (fails verification, the reason names the race); done
    after the fourth."""
    url, env = server
    p = parse(MM)
    good = next(c for c in S.candidates(p, "loop_reorder") if list(c.params["order"]) == ["i", "k", "j"])
    after = format_program(good.program)
    wrong_step = _cand(good.program, "loop_parallelization", loops=["i"])
    wrong = format_program(wrong_step.program).replace("A[i,k] * B[k,j]", "A[i,k] + B[k,j]")
    assert wrong != format_program(wrong_step.program)
    par_j = _cand(good.program, "loop_parallelization", loops=["j"])
    racy = format_program(par_j.program).replace("k in 16, j in 16 parallel", "k in 16 parallel, j in 16")
    assert racy != format_program(par_j.program)
    replies = iter([_reply(good, after), _reply(good, after), _reply(wrong_step, wrong), _reply(par_j, racy)])
    seen: list[str] = []

    def policy(messages):
        assert [m["role"] for m in messages] == ["system", "user"] and "Test CPU" in messages[1]["content"]
        seen.append(messages[1]["content"])
        return next(replies)

    steps = client["play"](url, MM, policy)
    assert [s["outcome"] for s in steps] == ["verified", "illegal", "failed_verification", "failed_verification"], steps
    assert [s["done"] for s in steps] == [False, False, False, True] and [s["step"] for s in steps] == [1, 2, 3, 4]
    v = steps[0]
    assert v["speedup"] > 0 and v["step_speedup"] > 0 and v["strategy"] == "loop_reorder"
    # reward.score's measured reward: faithful plus log2 of the step speedup, clipped to ±1
    assert v["reward"] == pytest.approx(SCORES["faithful"] + max(-1.0, min(1.0, math.log2(v["step_speedup"]))))
    assert v["reward"] >= 0
    # the verified step moved the episode: from then on the prompt shows the reordered program
    assert after in seen[1] and after not in seen[0] and all(after in s for s in seen[1:])
    assert after in steps[-1]["observation"][1]["content"]
    assert "no-op" in steps[1]["reason"] and steps[1]["reward"] == SCORES["illegal"]
    assert steps[2]["reward"] == SCORES["failed_verification"] and steps[2]["speedup"] is None
    assert "race" in steps[3]["reason"] and steps[3]["reward"] == SCORES["failed_verification"]
    assert "parallel loop k" in steps[3]["reason"], steps[3]["reason"]


@pytest.mark.slow
def test_garbage_limits_and_errors(server, client):
    url, env = server
    post = client["post"]
    start = post(url, "/reset", {"kernel": MM})
    ep = start["episode"]
    assert start["done"] is False and start["observation"][1]["content"].count("C[i,j] += A[i,k] * B[k,j]") == 1
    # an oversized reply (a valid head, then braces past MAX_CHARS) and plain garbage: unparsable
    for text in ("<think>x</think>" + "{" * (MAX_CHARS * 2), "no answer at all"):
        out = post(url, "/step", {"episode": ep, "reply": text})
        assert out["outcome"] == "unparsable" and out["reward"] == SCORES["unparsable"], out
    # a body past the server's limit is refused before it is read
    from steptp.rl.env import MAX_BODY

    st, err = _raw(url, "POST", "/step", json.dumps({"episode": ep, "reply": "x" * MAX_BODY}).encode(),
                   {"Content-Type": "application/json"})
    assert st == 413 and str(MAX_BODY) in err["error"]
    # bad requests: JSON errors that say what was wrong
    st, err = _raw(url, "POST", "/step", b"{not json", {"Content-Type": "application/json"})
    assert st == 400 and "not JSON" in err["error"]
    st, err = _raw(url, "POST", "/step", json.dumps({"episode": "nope", "reply": "x"}).encode())
    assert st == 404 and "unknown episode" in err["error"]
    st, err = _raw(url, "POST", "/step", json.dumps({"episode": ep}).encode())
    assert st == 400 and "'reply'" in err["error"]
    st, err = _raw(url, "POST", "/reset", json.dumps({"kernel": "kernel oops("}).encode())
    assert st == 400 and "not a LEIR program" in err["error"]
    st, err = _raw(url, "POST", "/reset", json.dumps({"kernel_id": "k1"}).encode())
    assert st == 400 and "release" in err["error"]
    st, err = _raw(url, "POST", "/reset", json.dumps([MM]).encode())
    assert st == 400 and "JSON object" in err["error"]
    st, err = _raw(url, "GET", "/nowhere")
    assert st == 404
    st, h = _raw(url, "GET", "/health")
    assert st == 200 and h["ok"] and h["max_steps"] == 4 and h["episodes"] >= 1
    with pytest.raises(RuntimeError, match="unknown episode"):
        post(url, "/step", {"episode": "nope", "reply": "x"})
    # finish it: the rest are unparsable, the last says done, one more is refused
    for k in range(2):
        out = post(url, "/step", {"episode": ep, "reply": "?"})
    assert out["done"] and out["step"] == 4
    st, err = _raw(url, "POST", "/step", json.dumps({"episode": ep, "reply": "?"}).encode())
    assert st == 409 and "done" in err["error"]


@pytest.mark.slow
def test_live_episodes_are_bounded_and_steps_on_one_episode_serialize(server, client):
    """max_episodes 3: finished episodes make room, live ones are never dropped (503 instead);
    concurrent steps on one episode are judged one at a time (distinct step numbers)."""
    url, env = server
    post = client["post"]
    with env._lock:
        env._episodes.clear()
    eps = [post(url, "/reset", {"kernel": MM})["episode"] for _ in range(3)]
    st, err = _raw(url, "POST", "/reset", json.dumps({"kernel": MM}).encode())
    assert st == 503 and "live" in err["error"]
    results: list[dict] = []

    def hit():
        results.append(post(url, "/step", {"episode": eps[0], "reply": "garbage"}))

    ts = [threading.Thread(target=hit) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(r["step"] for r in results) == [1, 2, 3, 4] and sum(r["done"] for r in results) == 1
    # eps[0] is finished: a new episode takes its place, the live ones stay
    new = post(url, "/reset", {"kernel": MM})["episode"]
    with env._lock:
        assert set(env._episodes) == {new, eps[1], eps[2]}


def test_serve_help_teaches_the_endpoints():
    from typer.testing import CliRunner

    from steptp.cli import app

    r = CliRunner().invoke(app, ["env", "serve", "--help"])
    assert r.exit_code == 0, r.output
    for word in ("POST /reset", "POST /step", "/health", "curl", "--max-steps", "--release", "404"):
        assert word in r.output, word


@pytest.mark.slow
def test_cli_serves_a_release_by_kernel_id(tmp_path):
    """`steptp env serve --release DIR --port 0` in its own process: /reset takes the release's
    kernel_id (data/kernels.parquet's `leir`), the prompt names the release's hardware."""
    import os
    import subprocess
    import sys

    import polars as pl

    rel = tmp_path / "release"
    (rel / "data").mkdir(parents=True)
    pl.DataFrame({"kernel_id": ["mm16"], "leir": [MM], "split": ["test"]}).write_parquet(rel / "data/kernels.parquet")
    (rel / "stats.json").write_text(json.dumps({"hardware": "Release CPU, 2 threads"}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(DOC.parent.parent),
                                                                      os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "steptp.cli", "env", "serve", "--release", str(rel),
                             "--port", "0", "--max-steps", "2", "--cache", str(tmp_path / "c.sqlite")],
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        line = proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        assert m, line + proc.stderr.read() if proc.poll() is not None else line
        url = f"http://127.0.0.1:{m.group(1)}"
        st, h = _raw(url, "GET", "/health")
        assert st == 200 and h["max_steps"] == 2
        st, start = _raw(url, "POST", "/reset", json.dumps({"kernel_id": "mm16"}).encode())
        assert st == 200 and start["kernel_id"] == "mm16", start
        assert "Release CPU, 2 threads" in start["observation"][1]["content"]
        assert "C[i,j] += A[i,k] * B[k,j]" in start["observation"][1]["content"]
        st, err = _raw(url, "POST", "/reset", json.dumps({"kernel_id": "other"}).encode())
        assert st == 404 and "other" in err["error"]
    finally:
        proc.terminate()
        # a clean exit: SIGTERM closed the server and the measurer's workers
        assert proc.wait(timeout=60) == 0


@pytest.mark.slow
def test_a_step_past_the_time_limit_is_a_timeout(tmp_path):
    """A judge whose verification limit is 50 ms (a build alone takes longer): the legal, faithful
    step is a ``timeout``, scored as reward.score scores one, and the episode stays where it was."""
    from steptp.rl.env import Env, make_server, open_judge

    judge, m = open_judge(config=FAST, cache=False, step_timeout_s=0.05)
    srv = make_server(Env(judge, hardware="Test CPU"), "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        p = parse(MM)
        good = next(c for c in S.candidates(p, "loop_reorder") if list(c.params["order"]) == ["i", "k", "j"])
        st, start = _raw(url, "POST", "/reset", json.dumps({"kernel": MM}).encode())
        assert st == 200, start
        st, out = _raw(url, "POST", "/step", json.dumps(
            {"episode": start["episode"], "reply": _reply(good, format_program(good.program))}).encode())
        assert st == 200 and out["outcome"] == "timeout", out
        assert out["reward"] == SCORES["timeout"] and out["speedup"] is None
        assert out["observation"] == start["observation"]
    finally:
        srv.shutdown()
        srv.server_close()
        judge.close()
        m.close()
