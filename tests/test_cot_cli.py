"""`steptp cot`: reads a steps table, writes the CoT columns and a summary."""

import json

from typer.testing import CliRunner

from steptp.cli import app
from steptp.cot.samples import make_step
from steptp.records import StepRecord, read_records, table, write_table


def test_cot_command_template(tmp_path):
    steps = [make_step("matmul_bias_gelu", "loop_parallelization", {"path": [0], "loops": ["i"]}, {},
                       speedup=1.8),
             make_step("softmax", "loop_split", {"path": [0, 0], "loops": ["j"]}, {"factor": 16},
                       speedup=0.97, step_index=1)]
    src = write_table(table(steps, StepRecord), tmp_path / "steps.parquet")
    out = tmp_path / "steps.cot.parquet"
    res = CliRunner().invoke(app, ["cot", "--steps", str(src), "--writer", "template", "--out", str(out),
                                   "--seed", "3"])
    assert res.exit_code == 0, res.output
    back = read_records(out, StepRecord)
    assert [s.cot_source for s in back] == ["template", "template"]
    assert all(s.cot_text.startswith("<think>") for s in back)
    summary = json.loads((tmp_path / "steps.cot.cot-summary.json").read_text())
    assert summary["writer"] == "template" and summary["ok"] == 2 and summary["fallbacks"] == 0


def test_cot_command_anthropic_without_key(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    steps = [make_step("matmul_bias_gelu", "loop_parallelization", {"path": [0], "loops": ["i"]}, {})]
    src = write_table(table(steps, StepRecord), tmp_path / "steps.parquet")
    res = CliRunner().invoke(app, ["cot", "--steps", str(src), "--writer", "anthropic",
                                   "--out", str(tmp_path / "o.parquet")])
    assert res.exit_code == 2
    assert "ANTHROPIC_API_KEY is not set" in res.output
