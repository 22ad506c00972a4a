"""The Prefect release flow: the deployment file, and the whole flow at a very small size —
killed in the middle, rerun, resumed from the cache with no lost or duplicated records."""

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
import yaml

ROOT = Path(__file__).resolve().parents[1]

SMALL = {
    "name": "steptp-small", "version": "0.0.1", "seed": 0,
    # matmul_large_k: its loop reorder is a 3-5x step even at tiny size, so that the release
    # gate (at least one SFT example) does not hang on timing noise, as it did with gemv
    "extract": {"zoo": "softmax,matmul_large_k", "size": "tiny", "jobs": 1, "check": True},
    # tiny kernels, searched at their size (no time floor, no larger preset): this test is about
    # the pipeline's mechanics, not the selection
    "search": {"policy": "beam", "max_kernels": 2, "measurements": 4, "seconds": 30, "jobs": 1, "threads": 1,
               "min_time_us": 0, "larger_size": "", "remeasure_rounds": 1, "remeasure_pairs": 1},
    "cot": {"writer": "template"},
    # a loaded CI machine times noisily: this test is about the pipeline, not the significance rule
    "significance": {"max_spread": 100.0, "min_gain": 0.0, "spread_factor": 0.0},
}


def test_prefect_yaml_deployment():
    d = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    (dep,) = d["deployments"]
    assert dep["entrypoint"] == "steptp/flows/build_release.py:build_release"
    assert dep["schedules"][0]["cron"] == "0 2 * * *"
    assert dep["work_pool"]["name"] == "steptp-process"
    assert dep["parameters"]["params_file"] == "params.yaml"
    # the entrypoint exists and takes those parameters
    sys.path.insert(0, str(ROOT))
    from steptp.flows.build_release import build_release

    assert build_release.name == "build_release"
    params = set(build_release.parameters.properties)
    assert set(dep["parameters"]) <= params


def test_params_yaml_is_a_mapping_the_flow_reads():
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert isinstance(p, dict)
    for section in ("extract", "search", "cot", "curate", "significance", "quality"):
        assert isinstance(p[section], dict), section
    from steptp.params import parse

    s = parse(p, "params.yaml")  # every key is a real option
    assert s.curate.max_tokens == p["curate"]["max_tokens"]


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PREFECT_HOME=str(tmp / "prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOGGING_LEVEL="INFO", STEPTP_LOCK_DIR=str(tmp / "locks"))
    env.pop("PREFECT_LOCAL_STORAGE_PATH", None)
    from _prefect_server import api_url

    env["PREFECT_API_URL"] = api_url()      # one loopback server for the suite
    return env


def _release_cmd(params: Path, out: Path) -> list[str]:
    return [str(Path(sys.executable).parent / "steptp"), "release", "--params", str(params), "--out", str(out)]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_build_release_killed_then_resumed(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(SMALL))
    out = tmp_path / "releases"
    env = _env(tmp_path)

    # run 1: kill it once the first kernel's search task has finished (its result persisted)
    log1 = tmp_path / "run1.log"
    with open(log1, "w") as f:
        proc = subprocess.Popen(_release_cmd(params, out), cwd=tmp_path, env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 900
    killed = False
    while time.time() < deadline and proc.poll() is None:
        text = log1.read_text()
        if "Task run 'search-" in text and "Finished in state Completed" in text.split("Task run 'search-", 1)[1]:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.5)
    proc.wait(timeout=60)
    assert killed, log1.read_text()[-3000:]
    assert not (out / "steptp-small-0.0.1").exists()          # nothing published by a killed run
    first = log1.read_text().split("Task run 'search-", 1)[1].split("'", 1)[0]

    # run 2: resumes — finished tasks come from the cache, the rest run
    log2 = tmp_path / "run2.log"
    with open(log2, "w") as f:
        r = subprocess.run(_release_cmd(params, out), cwd=tmp_path, env=env, stdout=f,
                           stderr=subprocess.STDOUT, timeout=1200)
    text = log2.read_text()
    assert r.returncode == 0, text[-4000:]
    assert f"Task run 'search-{first}' - Finished in state Cached" in text, text[-4000:]
    assert "extract_kernels" in text and "Finished in state Cached" in text.split("extract_kernels", 1)[1][:300]

    rel = out / "steptp-small-0.0.1"
    assert f"release:   {rel}" in text.replace("\n", " ") or str(rel) in text
    assert (rel / "manifest.json").is_file() and (rel / "data_docs" / "index.html").is_file()
    assert not (out / ".staging" / "steptp-small-0.0.1").exists()

    # no lost or duplicated records
    work = out / ".work" / "steptp-small-0.0.1"
    kernels = pl.read_parquet(work / "kernels.parquet")
    steps = pl.read_parquet(work / "steps.parquet")
    trajs = pl.read_parquet(work / "trajectories.parquet")
    # the release has no duplicated record (step_key: trajectory, depth, strategy, site, params,
    # programs); duplicates in the search output are curation rejects ("duplicate")
    released_keys = pl.read_parquet(rel / "data/steps.parquet")["step_key"]
    assert released_keys.is_duplicated().sum() == 0
    key = ["trajectory_id", "step_index", "strategy", "site", "params", "before_leir", "after_leir"]
    assert steps.select(key).is_duplicated().sum() == 0
    assert trajs["trajectory_id"].is_duplicated().sum() == 0
    sys.path.insert(0, str(ROOT))
    from steptp.flows.stages import select_kernels
    from steptp.records import KernelRecord, read_records

    selected = read_records(work / "kernels-selected.parquet", KernelRecord)
    chosen = [k for k in selected if k.search_status.startswith("searched")]
    assert len(kernels) >= 2 and len(chosen) == 2
    assert sorted(trajs["kernel_id"].to_list()) == sorted(k.kernel_id for k in chosen)
    # the selection is a function of the kernels and their measured unscheduled times
    times = {k.kernel_id: k.unscheduled_s for k in selected if k.unscheduled_s is not None}
    assert sorted(k.kernel_id for k in select_kernels(read_records(work / "kernels.parquet", KernelRecord), 2,
                                                      times, floor_s=0, ceiling_s=0.2, max_per_family=3)) == \
        sorted(k.kernel_id for k in chosen)
    released = pl.read_parquet(rel / "data/steps.parquet")       # every searched step, with its role
    rejects = pl.read_parquet(rel / "data/rejects.parquet")
    assert len(released) == len(steps) and released["sft"].sum() + len(rejects) == len(steps)
    man = json.loads((rel / "manifest.json").read_text())
    assert man["params"]["name"] == "steptp-small" and man["validation"]["success"] is True

    # run 3: everything cached; the same release again
    r3 = subprocess.run(_release_cmd(params, out), cwd=tmp_path, env=env, capture_output=True, text=True,
                        timeout=900)
    assert r3.returncode == 0, (r3.stdout + r3.stderr)[-3000:]
    assert "Finished in state Completed()" not in "".join(
        l for l in (r3.stdout + r3.stderr).splitlines(True) if "Task run 'search-" in l)
    again = pl.read_parquet(out / ".work" / "steptp-small-0.0.1" / "steps.parquet")
    assert again.equals(steps)
