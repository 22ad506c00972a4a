"""benchmarks/vs_metaschedule.py: our search at several measurement budgets against one
MetaSchedule trial count, every program of a kernel re-timed in one interleaved set of rounds.

The end-to-end test reads MetaSchedule's program from a cache entry it writes itself (the
unscheduled kernel lowered to TVMScript, under the key this machine's run looks up): tuning
MetaSchedule even at 2 trials takes over a minute on a tiny kernel, and what is tested here is
the comparison around it, not MetaSchedule."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import vs_metaschedule as VS  # noqa: E402


def test_budgets_parse_sorted_without_repeats_and_reject_bad_input():
    assert VS.parse_budgets("64,16") == (16, 64)
    assert VS.parse_budgets(" 16, 16 ,64,") == (16, 64)
    with pytest.raises(argparse.ArgumentTypeError, match="'16,x'.*comma list of integers"):
        VS.parse_budgets("16,x")
    with pytest.raises(argparse.ArgumentTypeError, match="positive"):
        VS.parse_budgets("0,16")
    with pytest.raises(argparse.ArgumentTypeError, match="positive"):
        VS.parse_budgets(",")


def test_metaschedule_trials_default_to_our_largest_budget():
    assert VS.resolve_budgets(None, None, None) == ((64,), 64)
    assert VS.resolve_budgets(None, 16, None) == ((16,), 16)
    assert VS.resolve_budgets((16, 64), None, None) == ((16, 64), 64)
    assert VS.resolve_budgets((16,), None, 64) == ((16,), 64)
    assert VS.resolve_budgets((16,), 16, 32) == ((16,), 32)
    with pytest.raises(SystemExit, match="--budget 64 and --budgets 16,64 disagree"):
        VS.resolve_budgets((16, 64), 64, None)
    with pytest.raises(SystemExit, match="--ms-trials 0"):
        VS.resolve_budgets((16,), None, 0)


def _row(name: str, family: str, r16: float, r64: float) -> dict:
    return {"workload": name, "family": family,
            "by_budget": {"16": {"ratio": r16}, "64": {"ratio": r64}}}


def test_summary_per_budget_with_outliers_and_the_fused_and_norm_kernels():
    rows = [_row("gemm_bias_silu", "gemm_epilogue", 2.0, 0.5),
            _row("instancenorm2d", "norm", 0.5, 2.0),
            _row("log_softmax", "softmax", 1.7, 0.25)]
    lines = VS.summary_lines(rows, (16, 64), 64)
    assert len(lines) == 4
    g16 = math.exp((math.log(2.0) + math.log(0.5) + math.log(1.7)) / 3)
    assert lines[0].startswith(f"# ours@16 / MetaSchedule@64: geomean {g16:.2f} (3 kernels)")
    assert "worst 2.00 (gemm_bias_silu); 2 above 1.6" in lines[0]
    # softmax is neither an epilogue nor a norm family
    assert "fused-epilogue + norm kernels: geomean 1.00 (2 kernels; epilogue 2.00 over 1, " \
           "norm 0.50 over 1)" in lines[1]
    assert "worst 2.00 (instancenorm2d); 1 above 1.6" in lines[2]
    assert "epilogue 0.50 over 1, norm 2.00 over 1" in lines[3]
    only_ops = VS.summary_lines([_row("log_softmax", "softmax", 1.0, 1.0)], (16, 64), 64)
    assert len(only_ops) == 2 and not any("fused-epilogue" in ln for ln in only_ops)


def _ms_cache(tmp_path, monkeypatch):
    """A MetaSchedule cache holding tiny gemm_bias_silu's unscheduled program as its 3-trial
    result (the comparison runs without tuning); the kernel id and the cache folder."""
    from steptp.search import default_evaluator
    from steptp.tir.lower import lower

    from _search_common import workload_kernel

    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    kid, prog, _, _ = workload_kernel("gemm_bias_silu", "tiny")
    ev = default_evaluator(kind="inprocess")
    fingerprint, script = ev.fingerprint, lower(prog, ev.target).script()
    ev.close()
    cache = tmp_path / "ms"
    cache.mkdir()
    (cache / f"{kid}-{VS._ms_key(kid, 3, 1, fingerprint)}.json").write_text(json.dumps(
        {"workload": "gemm_bias_silu", "kernel_id": kid, "trials": 3, "seed": 1,
         "fingerprint": fingerprint, "wall_s": 12.0, "script": script}))
    return kid, cache


@pytest.mark.slow
def test_two_budgets_one_interleaved_retiming(tmp_path, monkeypatch, capsys):
    kid, cache = _ms_cache(tmp_path, monkeypatch)
    out = tmp_path / "rows.json"
    monkeypatch.setattr(sys, "argv", [
        "vs_metaschedule.py", "--workloads", "gemm_bias_silu", "--size", "tiny",
        "--budgets", "2,1", "--ms-trials", "3", "--no-torch", "--seconds", "30",
        "--ms-cache", str(cache), "--json", str(out)])
    VS.main()
    text = capsys.readouterr().out
    [row] = json.loads(out.read_text())
    assert row["budgets"] == [1, 2] and row["ms_trials"] == 3 and row["ms_reused"]
    assert row["family"] == "gemm_epilogue" and row["kernel_id"] == kid
    assert sorted(row["by_budget"]) == ["1", "2"]
    for b, got in row["by_budget"].items():
        assert 1 <= got["measurements"] <= int(b)
        assert got["ratio"] == pytest.approx(got["ours_s"] / row["ms_s"])
        assert got["final_leir"].startswith("kernel f32 ")
        if got["settled"]:   # the final program is the finalist settling chose (none: unscheduled)
            assert sum(f["chosen"] for f in got["settled"]) == (1 if got["strategies"] else 0)
    assert any(got["settled"] for got in row["by_budget"].values())
    header = next(ln for ln in text.splitlines() if ln.startswith("workload"))
    assert header.split()[:6] == ["workload", "base", "ms", "@1", "ms", "@2"]
    assert "@1/MS" in header and "@2/MS" in header
    assert "# ours@1 / MetaSchedule@3: geomean" in text
    assert "# ours@2 / MetaSchedule@3: geomean" in text
    assert "fused-epilogue + norm kernels: geomean" in text
    assert "reused from" in text and text.rstrip().endswith("gemm_bias_silu")


def test_the_summary_counts_each_search_trees_prompts_with_a_faster_child():
    def st(before, outcome, after_s=1e-3):
        return {"before_hash": before, "outcome": outcome, "after_s": after_s}

    # root r: two children, one faster; a: one slower child; a failed row counts for nothing
    steps = [st("r", "improved"), st("r", "not_improved"), st("a", "not_improved"),
             st("b", "improved", None)]
    assert VS.tree_prompts(steps) == (1, 2)
    row = _row("gemm_bias_silu", "gemm_epilogue", 1.0, 1.0)
    row["by_budget"]["16"]["steps"] = steps
    row["by_budget"]["64"]["steps"] = steps + [st("a", "improved")]
    lines = VS.summary_lines([row], (16, 64), 64)
    assert "search trees at 16: 1.00 prompts with a faster child per kernel, of 2.00" in lines[1]
    assert "search trees at 64: 2.00 prompts with a faster child per kernel, of 2.00" in lines[4]


@pytest.mark.slow
def test_repeats_report_the_median_search_of_each_kernel(tmp_path, monkeypatch, capsys):
    """``--repeats 3``: three searches per budget, their final programs re-timed in one set of
    rounds; the budget's ratio is their median and the summary gives each run's geomean."""
    import statistics

    _, cache = _ms_cache(tmp_path, monkeypatch)
    out = tmp_path / "rows.json"
    monkeypatch.setattr(sys, "argv", [
        "vs_metaschedule.py", "--workloads", "gemm_bias_silu", "--size", "tiny",
        "--budgets", "2", "--ms-trials", "3", "--no-torch", "--seconds", "30", "--repeats", "3",
        "--ms-cache", str(cache), "--json", str(out)])
    VS.main()
    text = capsys.readouterr().out
    [row] = json.loads(out.read_text())
    got = row["by_budget"]["2"]
    assert len(got["repeat_ratios"]) == 3
    assert got["ratio"] == pytest.approx(statistics.median(got["repeat_ratios"]))
    assert got["ratio"] == pytest.approx(got["ours_s"] / row["ms_s"])
    assert "@2 each search / MS: " in text
    assert "#   each of the 3 searches per kernel alone: geomean " in text
