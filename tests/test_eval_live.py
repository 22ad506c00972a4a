"""Live smoke test of the LLM policies: runs only when a server or a key is given.

    STEPTP_EVAL_BASE_URL=http://localhost:8000/v1 STEPTP_EVAL_MODEL=my-sft pytest tests/test_eval_live.py
    ANTHROPIC_API_KEY=... STEPTP_EVAL_MODEL=claude-haiku-4-5 pytest tests/test_eval_live.py
"""

from __future__ import annotations

import os

import pytest

from steptp.eval.judge import OUTCOMES

BASE_URL = os.environ.get("STEPTP_EVAL_BASE_URL")
MODEL = os.environ.get("STEPTP_EVAL_MODEL")
BACKEND = "openai" if (BASE_URL or os.environ.get("OPENAI_API_KEY")) else (
    "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else None)

pytestmark = pytest.mark.skipif(BACKEND is None or not MODEL,
                                reason="needs STEPTP_EVAL_MODEL and a --base-url server or an API key")


@pytest.mark.slow
def test_live_policy_gets_judged(tmp_path):
    from steptp import examples  # noqa: F401
    from steptp.eval.inputs import from_leir
    from steptp.eval.loop import EvalConfig
    from steptp.eval.run import evaluate

    leir = os.path.join(os.path.dirname(examples.__file__), "softmax.leir")
    s = evaluate(from_leir([leir]), [BACKEND], tmp_path / "live", EvalConfig(samples=1),
                 llm={"model": MODEL, "base_url": BASE_URL, "cache_dir": str(tmp_path / "llm")})
    p = s["policies"][BACKEND]
    assert p["proposals"] == 1 and sum(p["outcomes"][o] for o in OUTCOMES) == 1
    assert s["usage"][BACKEND]["requests"] == 1
