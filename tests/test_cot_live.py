"""A live smoke test of the Anthropic writer: runs only when ANTHROPIC_API_KEY is set."""

import os

import pytest

pytestmark = pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"),
                                reason="ANTHROPIC_API_KEY is not set (live smoke test)")


def test_live_one_step(tmp_path):
    from steptp.cot import write_cot
    from steptp.cot.anthropic_writer import AnthropicWriter
    from steptp.cot.config import AnthropicConfig
    from steptp.cot.samples import make_step

    step = make_step("matmul_bias_gelu", "loop_parallelization", {"path": [0], "loops": ["i"]}, {},
                     speedup=1.8)
    w = AnthropicWriter(AnthropicConfig(model=os.environ.get("STEPTP_COT_MODEL", "claude-sonnet-4-6")),
                        cache_dir=str(tmp_path))
    out, summary = write_cot([step], w, max_retries=2)
    assert summary["requests"] >= 1 and summary["input_tokens"] > 0
    assert out[0].cot_source in ("anthropic", "template-fallback")
    assert out[0].cot["decision"]["strategy"] == "loop_parallelization"
    assert os.environ["ANTHROPIC_API_KEY"] not in out[0].model_dump_json()
