"""The OpenAI-compatible CoT writer through the openai SDK's real HTTP layer, against a loopback
chat-completions server: a rejected answer is fed back, the corrected one is validated."""

from __future__ import annotations

import json

import pytest
from _openai_server import OpenAIServer

from steptp.cot import write_cot
from steptp.cot.facts import facts
from steptp.cot.openai_writer import OpenAIWriter
from steptp.cot.samples import make_step
from steptp.cot.template import TemplateWriter


@pytest.fixture(scope="module")
def step():
    return make_step("matmul_bias_gelu", "loop_parallelization", {"path": [0], "loops": ["i"]}, {},
                     speedup=1.8)


def test_openai_writer_retry_then_valid(step, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    good = TemplateWriter().write(step, facts(step)).model_dump(mode="json")
    bad = dict(good, decision={**good["decision"], "strategy": "loop_split"})
    with OpenAIServer(["Let me think... no JSON here", "```json\n" + json.dumps(bad) + "\n```",
                       json.dumps(good)]) as srv:
        w = OpenAIWriter("local-model", srv.base_url, cache_dir=str(tmp_path / "c"), max_retries=0)
        out, summary = write_cot([step], w, max_retries=2)
    assert out[0].cot_source == "openai" and out[0].cot["decision"]["strategy"] == "loop_parallelization"
    assert len(srv.requests) == 3 and summary["writer"] == "openai"
    first, third = srv.requests[0][2], srv.requests[2][2]
    assert first["model"] == "local-model" and "ONE JSON object" in first["messages"][0]["content"]
    # each rejected attempt went back to the model with the validator's reason
    fb = [m["content"] for m in third["messages"] if m["role"] == "user"][1:]
    assert len(fb) == 2 and all("rejected by the validator" in t for t in fb)
    assert w.meter.as_dict()["requests"] == 3
