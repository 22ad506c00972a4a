"""The eval flow on a local Prefect server: a rerun takes every judged state from the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MM = """kernel mm(A: f32[32,32], B: f32[32,32]) -> C: f32[32,32]
  for i in 32, j in 32, k in 32:
    C[i,j] += A[i,k] * B[k,j]
"""
SCRIPT = """
import json, sys
from steptp.flows.eval import eval_flow
s = eval_flow(leir=[sys.argv[1]], policies=["random", "search"], samples=2, out=sys.argv[2],
              run="f", cache=sys.argv[3])
print("SUMMARY " + json.dumps({p: v["outcomes"] for p, v in s["policies"].items()}))
"""


@pytest.mark.slow
def test_eval_flow_cached_rerun(tmp_path):
    (tmp_path / "mm.leir").write_text(MM)
    env = dict(os.environ, PREFECT_HOME=str(tmp_path / "ph"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOCAL_STORAGE_PATH=str(tmp_path / "results"), PYTHONPATH=str(ROOT),
               STEPTP_LOCK_DIR=str(tmp_path / "locks"), PREFECT_LOGGING_LEVEL="INFO")
    from _prefect_server import api_url

    env["PREFECT_API_URL"] = api_url()      # one loopback server for the suite
    args = [sys.executable, "-c", SCRIPT, str(tmp_path / "mm.leir"), str(tmp_path / "eval"),
            str(tmp_path / "cache.sqlite")]
    runs = [subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    out = [json.loads(next(l for l in r.stdout.splitlines() if l.startswith("SUMMARY "))[8:]) for r in runs]
    assert out[0] == out[1] and out[0]["random"]["verified"] + out[0]["random"]["failed_verification"] == 2
    logs = runs[1].stdout + runs[1].stderr
    # one state x 2 policies judged in run 1; in run 2 both tasks are cached, only the flow completes
    assert logs.count("Cached") >= 2 and logs.count("Finished in state Completed()") == 1
    assert (tmp_path / "eval/f/report.md").is_file()
