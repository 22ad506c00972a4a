"""The Anthropic writer through the SDK's real HTTP layer: recorded API responses are served by
an ``httpx2.MockTransport`` (SDK 2.x is built on httpx2) — no network, no patched internals."""

import json
import logging
import time
from pathlib import Path

import httpx2
import pytest

from steptp.cot import write_cot
from steptp.cot.anthropic_writer import TOOL_NAME, AnthropicWriter, CotWriterError
from steptp.cot.config import AnthropicConfig
from steptp.cot.run import _custom_id
from steptp.cot.facts import facts
from steptp.cot.samples import make_step
from steptp.format.cot_schema import Cot

FIX = Path(__file__).parent / "fixtures" / "anthropic"
FAKE_KEY = "sk-ant-api03-FAKE-test-key-0123456789abcdef"


def fixture(name: str) -> dict:
    return json.loads((FIX / name).read_text())


class Replay:
    """Serves recorded responses in order, checking each request's method and path, and keeps
    every request so tests can inspect what the SDK sent."""

    def __init__(self, *routes):
        self.routes = list(routes)
        self.requests: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        assert self.routes, f"unexpected request {request.method} {request.url}"
        method, path, what = self.routes.pop(0)
        assert (request.method, request.url.path) == (method, path)
        if callable(what):
            return what(request)
        d = fixture(what)
        return httpx2.Response(d["status"], headers=d["headers"], json=d["body"])

    def bodies(self) -> list[dict]:
        return [json.loads(r.content) for r in self.requests if r.content]


def make_writer(replay: Replay, tmp_path: Path, **cfg) -> AnthropicWriter:
    config = AnthropicConfig(**{"http_max_retries": 3, **cfg})
    return AnthropicWriter(config, http_client=httpx2.Client(transport=httpx2.MockTransport(replay)),
                           cache_dir=str(tmp_path / "cache"))


@pytest.fixture(autouse=True)
def fake_key(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)


@pytest.fixture(scope="module")
def step():
    return make_step("matmul_bias_gelu", "loop_parallelization", {"path": [0], "loops": ["i"]}, {},
                     speedup=1.8)


MSG = ("POST", "/v1/messages")


def test_success_path_request_shape_tokens_and_cost(step, tmp_path):
    replay = Replay((*MSG, "message_ok.json"))
    w = make_writer(replay, tmp_path)
    out, summary = write_cot([step], w)
    assert out[0].cot_source == "anthropic"
    assert out[0].cot["decision"]["strategy"] == "loop_parallelization"
    assert out[0].cot_text.startswith("<think>")
    body = replay.bodies()[0]
    assert body["model"] == "claude-sonnet-4-6"
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][0]["name"] == TOOL_NAME
    assert body["tools"][0]["input_schema"] == Cot.model_json_schema()
    assert body["tool_choice"] == {"type": "tool", "name": TOOL_NAME}
    assert "PROGRAM BEFORE" in body["messages"][0]["content"]
    assert replay.requests[0].headers["authorization"].endswith(FAKE_KEY)  # the key only goes here
    # usage of message_ok.json: 1480 in, 612 out, 1890 cache-write at $3/$15/$3.75 per M
    assert summary["requests"] == 1 and summary["input_tokens"] == 1480
    assert summary["output_tokens"] == 612 and summary["cache_write_tokens"] == 1890
    assert summary["cost_usd"] == pytest.approx((1480 * 3 + 612 * 15 + 1890 * 3.75) / 1e6)
    assert summary["ok"] == 1 and summary["fallbacks"] == 0 and summary["retries"] == 0


def test_retries_on_529_overloaded_and_429_honouring_retry_after(step, tmp_path):
    replay = Replay((*MSG, "error_overloaded_529.json"), (*MSG, "error_rate_limit_429.json"),
                    (*MSG, "message_ok.json"))
    w = make_writer(replay, tmp_path)
    t0 = time.monotonic()
    out, summary = write_cot([step], w)
    elapsed = time.monotonic() - t0
    assert out[0].cot_source == "anthropic"
    assert len(replay.requests) == 3
    assert [r.headers["x-stainless-retry-count"] for r in replay.requests] == ["0", "1", "2"]
    assert elapsed >= 1.0          # the 429 said retry-after: 1
    assert summary["requests"] == 1   # one billed answer


def test_http_retries_exhausted_falls_back(step, tmp_path):
    replay = Replay(*[(*MSG, "error_overloaded_529.json")] * 2)
    w = make_writer(replay, tmp_path, http_max_retries=1)
    out, summary = write_cot([step], w)
    assert out[0].cot_source == "template-fallback"
    assert summary["fallbacks"] == 1 and "overloaded_error" in summary["errors"][0]


def test_validation_failure_is_fed_back_then_succeeds(step, tmp_path):
    replay = Replay((*MSG, "message_bad_decision.json"), (*MSG, "message_ok.json"))
    w = make_writer(replay, tmp_path)
    out, summary = write_cot([step], w, max_retries=2)
    assert out[0].cot_source == "anthropic"
    assert summary["retries"] == 1 and summary["ok"] == 1
    follow = replay.bodies()[1]["messages"]
    assert [m["role"] for m in follow] == ["user", "assistant", "user"]
    assert follow[1]["content"][0]["type"] == "tool_use"
    result = follow[2]["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert result["tool_use_id"] == "toolu_03Bad"
    assert "decision.site is" in result["content"] and '"loops": ["j"]' in result["content"]


def test_wrong_claims_in_the_llm_prose_are_fed_back(step, tmp_path):
    """The recorded answer says the reduction goes into `D` and `B[k,j]` has stride 1: the same
    claim checker as for the template rejects it, and the retry sees which claims were wrong."""
    replay = Replay((*MSG, "message_bad_claim.json"), (*MSG, "message_ok.json"))
    w = make_writer(replay, tmp_path)
    out, summary = write_cot([step], w, max_retries=2)
    assert out[0].cot_source == "anthropic" and summary["retries"] == 1
    fed_back = replay.bodies()[1]["messages"][2]["content"][0]["content"]
    assert "claim reduction_writes: bottleneck.text says a reduction goes into `D`" in fed_back
    assert "claim stride: bottleneck.text gives `B[k,j]` stride 1" in fed_back
    # the prompt shows no measurement of the step
    prompt = replay.bodies()[0]["messages"][0]["content"]
    assert "step_speedup" not in json.dumps(prompt) and "after_median" not in json.dumps(prompt)


def test_still_invalid_after_n_retries_falls_back_to_template(step, tmp_path):
    replay = Replay((*MSG, "message_bad_decision.json"), (*MSG, "message_bad_number.json"))
    w = make_writer(replay, tmp_path)
    out, summary = write_cot([step, step.model_copy(update={"step_index": 1})][:1], w, max_retries=1)
    assert len(replay.requests) == 2
    assert "decision.site" in json.dumps(replay.bodies()[1]["messages"][-1])
    assert out[0].cot_source == "template-fallback"
    assert out[0].cot["decision"]["site"] == step.site
    assert summary["fallbacks"] == 1 and summary["retries"] == 1
    assert "cites 12345" in summary["errors"][0]


def test_response_cache_second_run_makes_no_request(step, tmp_path):
    replay = Replay((*MSG, "message_ok.json"))
    out1, s1 = write_cot([step], make_writer(replay, tmp_path))
    replay2 = Replay()   # any request would fail the test
    out2, s2 = write_cot([step], make_writer(replay2, tmp_path))
    assert replay2.requests == []
    assert s2["cache_hits"] == 1 and s2["requests"] == 0 and s2["cost_usd"] == 0
    assert out1[0].cot == out2[0].cot
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 1 and FAKE_KEY not in files[0].read_text()


def test_batch_submission_polling_and_results(step, tmp_path):
    # the prompt holds no measurement, so a different speedup alone would give the same prompt
    # (a cache hit); another target string makes it a different request
    step2 = step.model_copy(update={"trajectory_id": "other", "step_speedup": 1.7,
                                    "target": "llvm -mcpu=generic -opt-level=3"})
    ids = [_custom_id(0, facts(step)), _custom_id(1, facts(step2))]

    def results(request):
        text = (FIX / "batch_results.jsonl").read_text().replace("{ID0}", ids[0]).replace("{ID1}", ids[1])
        return httpx2.Response(200, headers={"content-type": "application/binary"}, content=text.encode())

    b = "/v1/messages/batches"
    replay = Replay(("POST", b, "batch_in_progress.json"),
                    ("GET", f"{b}/msgbatch_01Test", "batch_in_progress.json"),
                    ("GET", f"{b}/msgbatch_01Test", "batch_ended.json"),
                    ("GET", f"{b}/msgbatch_01Test", "batch_ended.json"),   # results() re-reads it
                    ("GET", f"{b}/msgbatch_01Test/results", results),
                    (*MSG, "message_ok.json"))                            # the errored one, interactively
    sleeps = []
    w = AnthropicWriter(AnthropicConfig(http_max_retries=0, batch_poll_s=7.0),
                        http_client=httpx2.Client(transport=httpx2.MockTransport(replay)),
                        cache_dir=str(tmp_path / "cache"), sleep=sleeps.append)
    out, summary = write_cot([step, step2], w, batch=True)
    assert replay.routes == []
    created = replay.bodies()[0]
    assert [r["custom_id"] for r in created["requests"]] == ids
    assert created["requests"][0]["params"]["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert created["requests"][0]["params"]["tool_choice"]["name"] == TOOL_NAME
    assert sleeps == [7.0, 7.0]
    assert [s.cot_source for s in out] == ["anthropic", "anthropic"]
    assert summary["batches"] == 1 and summary["requests"] == 2
    # the batch answer is billed at the batch discount; usage 1480 in, 601 out, 1890 cache read
    batch_cost = 0.5 * (1480 * 3 + 601 * 15 + 1890 * 0.30) / 1e6
    direct_cost = (1480 * 3 + 612 * 15 + 1890 * 3.75) / 1e6
    assert summary["cost_usd"] == pytest.approx(batch_cost + direct_cost, abs=1e-6)


def test_key_never_in_errors_logs_or_records(step, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    echo = fixture("error_auth_401.json")

    def auth_error(request):   # an error body that (unusually) echoes the key back
        body = json.loads(json.dumps(echo["body"]))
        body["error"]["message"] = f"invalid x-api-key {FAKE_KEY}"
        return httpx2.Response(401, headers=echo["headers"], json=body)

    replay = Replay((*MSG, auth_error), (*MSG, "error_auth_401.json"))
    w = make_writer(replay, tmp_path)
    with pytest.raises(CotWriterError) as e:
        w.propose(step, facts(step))
    err = e.value
    assert "HTTP 401 authentication_error" in str(err) and "[REDACTED]" in str(err)
    assert FAKE_KEY not in str(err) and FAKE_KEY not in repr(err)
    assert err.__cause__ is None and err.__context__ is None   # no SDK error holding the request
    assert FAKE_KEY not in repr(w)
    out, summary = write_cot([step], w)                           # the run continues
    assert out[0].cot_source == "template-fallback"
    assert "authentication_error" in summary["errors"][0]
    assert FAKE_KEY not in json.dumps(summary)
    assert FAKE_KEY not in out[0].model_dump_json()
    assert caplog.records, "the SDK and the writer log at DEBUG/WARNING"
    assert FAKE_KEY not in caplog.text
    for rec in caplog.records:
        assert FAKE_KEY not in rec.getMessage()


def test_missing_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(CotWriterError, match="ANTHROPIC_API_KEY is not set"):
        AnthropicWriter(AnthropicConfig())


def test_the_writer_calls_through_the_llm_client_layer(step, tmp_path):
    """One client layer: the CoT writer's requests are rate-capped, metered and cached by
    ``steptp.llm.chat.AnthropicChat`` — the same client the eval policies use — so a layer client
    on the same cache answers the writer's request without HTTP, and the layer's meter holds the
    writer's tokens."""
    from steptp.llm.chat import AnthropicChat

    replay = Replay((*MSG, "message_bad_decision.json"), (*MSG, "message_ok.json"))
    sleeps = []
    w = AnthropicWriter(AnthropicConfig(http_max_retries=0, requests_per_minute=600),
                        http_client=httpx2.Client(transport=httpx2.MockTransport(replay)),
                        cache_dir=str(tmp_path / "cache"), sleep=sleeps.append)
    out, summary = write_cot([step], w, max_retries=1)
    assert out[0].cot_source == "anthropic" and len(replay.requests) == 2
    assert len(sleeps) == 1 and 0.0 < sleeps[0] <= 0.1       # the layer's 600/min cap
    assert isinstance(w.client, AnthropicChat) and w.meter is w.client.meter
    assert w.client.meter.output_tokens == 605 + 612 and w.client.meter.cache_read_tokens == 1890
    layer = AnthropicChat("claude-sonnet-4-6", cache_dir=str(tmp_path / "cache"),
                          http_client=httpx2.Client(transport=httpx2.MockTransport(Replay())))
    req = w.request(step, facts(step))
    msg, cached = layer.message(req, w.request_key(req))
    assert cached and msg["content"] == fixture("message_bad_decision.json")["body"]["content"]
    assert layer.meter.cache_hits == 1 and layer.meter.requests == 0
