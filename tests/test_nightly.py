"""Nightly rebuilds: one reading of params, version ids, cache keys (code version, hardware,
measurement age), publishing that never overwrites, the comparison with the previous release.
The end-to-end nightly runs (real Prefect server) and `dvc repro` ≡ `steptp release` (real DVC)
are the slow tests at the bottom."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))

from _prefect_server import api_url  # noqa: E402
from steptp import params as P  # noqa: E402
from steptp.codehash import stage_hash  # noqa: E402
from steptp.export import ReleaseExists, content_digest, publish_release  # noqa: E402
from steptp.export.diff import release_diff, write_diff  # noqa: E402
from steptp.measure.cache import Cache  # noqa: E402


# ---------------------------------------------------------------------------- params
def test_params_sections_and_release_ids():
    p = P.load(ROOT / "params.yaml")
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert P.build(p).id == f"{raw['name']}-{raw['version']}"
    b = P.build(p, nightly=True, date="20260102")
    assert b.version == f"{raw['version']}+nightly.20260102" and b.night == "20260102"
    assert b.id == f"{raw['name']}-{raw['version']}+nightly.20260102"
    # a backfill's clock reads that date; its night starts at 00:00 UTC
    assert abs(b.now() - 1767312000.0) < 60 and b.night_start == 1767312000.0
    assert P.build(p).night_start is None
    today = time.strftime("%Y%m%d", time.gmtime())
    assert P.build(p, nightly=True).night == today and P.build(p, nightly=True).clock_offset_s == 0
    assert P.build(P.parse({"name": "x", "version": "1",
                            "nightly": {"version": "{version}.dev{date}"}}),
                   True, "2026-03-04").version == "1.dev20260304"
    with pytest.raises(P.ParamsError, match="only with a nightly"):
        P.build(p, nightly=False, date="20260102")
    with pytest.raises(P.ParamsError, match="YYYYMMDD"):
        P.build(p, nightly=True, date="tomorrow")
    s = p.search
    assert s.max_kernels == raw["search"]["max_kernels"] and s.threads == raw["search"]["threads"]
    assert p.cache.max_age_s == raw["cache"]["max_age_hours"] * 3600
    assert p.curate.seed == raw["seed"]
    with pytest.raises(P.ParamsError, match="curate.no_such_option"):
        P.parse({"curate": {"no_such_option": 1}})


def test_dvc_stages_pass_only_params_and_paths():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, st in stages.items():
        assert "--params params.yaml" in st["cmd"], name
        assert "${" not in st["cmd"], name     # no section value is passed around the reader


def test_stage_cli_reads_params(tmp_path):
    """`steptp extract --params` takes the zoo from params.yaml (an unknown workload name there
    is reported as such, so the section really was read)."""
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump({"extract": {"zoo": "no_such_workload_xyz", "jobs": 1}}))
    r = subprocess.run([str(BIN / "steptp"), "extract", "--params", str(p), "--out",
                        str(tmp_path / "k.parquet")], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 2 and "no_such_workload_xyz" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "k.parquet").exists()


# ---------------------------------------------------------------------------- cache keys
def test_code_version_changes_only_the_affected_stage(tmp_path):
    pkg = tmp_path / "steptp"
    shutil.copytree(ROOT / "steptp", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    before = {s: stage_hash(s, str(pkg)) for s in ("extract", "search", "cot", "measure")}
    assert before["search"] == stage_hash("search")          # the copy is the same code
    f = pkg / "search" / "policies.py"
    f.write_text(f.read_text() + "\n# a fix\n")
    from steptp.codehash import source_hash

    source_hash.cache_clear()
    after = {s: stage_hash(s, str(pkg)) for s in before}
    assert after["search"] != before["search"]
    assert after["extract"] == before["extract"] and after["cot"] == before["cot"]
    assert after["measure"] == before["measure"]
    (pkg / "__init__.py").write_text('"""x"""\n__version__ = "9.9.9"\n')
    source_hash.cache_clear()
    assert all(stage_hash(s, str(pkg)) != after[s] for s in before)   # a new version: all


def test_measurement_cache_age_and_code_version(tmp_path):
    now = [1_000_000.0]
    db = tmp_path / "c.sqlite"
    c = Cache(db, max_age_s=3600, clock=lambda: now[0])
    c.put_timing("leir:p", "llvm", "fp1", "cfg", {"median_s": 1.0})
    assert c.get_timing("leir:p", "llvm", "fp1", "cfg") == {"median_s": 1.0}
    assert c.get_timing("leir:p", "llvm", "fp2", "cfg") is None       # another machine
    now[0] += 3000                                                      # same night: reused
    assert c.get_timing("leir:p", "llvm", "fp1", "cfg") is not None
    now[0] += 1000                                                      # older than max age
    assert c.get_timing("leir:p", "llvm", "fp1", "cfg") is None
    assert Cache(db).get_timing("leir:p", "llvm", "fp1", "cfg") is not None   # no max age
    tonight = Cache(db, max_age_s=3600, not_before=now[0] - 10, clock=lambda: now[0])
    c.put_timing("leir:q", "llvm", "fp1", "cfg", {"median_s": 2.0})   # measured tonight
    assert tonight.get_timing("leir:q", "llvm", "fp1", "cfg") is not None
    assert Cache(db, not_before=now[0] + 1).get_timing("leir:q", "llvm", "fp1", "cfg") is None
    other = Cache(db, code_key="other-code")
    assert other.get_timing("leir:p", "llvm", "fp1", "cfg") is None
    c.put_verification("a", "b", "llvm", "fp1", "v", {"passed": True})
    now[0] += 10 ** 6                                                   # verdicts do not age
    assert c.get_verification("a", "b", "llvm", "fp1", "v") == {"passed": True}
    assert other.get_verification("a", "b", "llvm", "fp1", "v") is None


def test_prefect_search_key_carries_code_hardware_and_night():
    from steptp.flows.stages import CodeVersion, cache_policy

    pol = cache_policy("search", hardware=True, exclude=("fresh",))
    base = {"kernel": "k", "threads": 1, "night": "20260101", "fresh": {"clock_offset_s": 1.0}}
    k = lambda **kw: pol.compute_key(None, {**base, **kw}, {})  # noqa: E731
    assert k() == k(fresh={"clock_offset_s": 2.0})              # the clock does not matter
    assert k() != k(night="20260102")                           # the next night does
    assert k() != k(threads=2)                                  # the fingerprint does
    cv = CodeVersion(stage="search", hardware=True)
    assert cv.compute_key(None, {"threads": 1}, {}) != CodeVersion(stage="cot").compute_key(None, {}, {})


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_prefect_task_reruns_after_a_code_change_of_its_stage(tmp_path):
    """On a real (temporary) Prefect server: a task keyed by the cot stage's code is cached
    across runs, re-runs when that code changes, and stays cached when other code changes."""
    script = tmp_path / "flow.py"
    script.write_text(f"""
import sys, shutil
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from prefect import flow, task
from prefect.cache_policies import INPUTS
from steptp.flows.stages import CodeVersion
from steptp.codehash import source_hash

pkg = Path({str(tmp_path)!r}) / "steptp"
calls = Path({str(tmp_path)!r}) / "calls"

@task(cache_policy=INPUTS + CodeVersion(stage="cot", root=str(pkg)), persist_result=True)
def write(x: int) -> int:
    with open(calls, "a") as f:
        f.write("x")
    return x + 1

@flow
def f() -> int:
    return write(1)

def edit(rel):
    p = pkg / rel
    p.write_text(p.read_text() + "\\n# changed\\n")
    source_hash.cache_clear()

f(); f()
edit("search/policies.py"); f()        # not the cot stage's code
edit("cot/template.py"); f()           # the cot stage's code
print("CALLS", calls.read_text())
""")
    shutil.copytree(ROOT / "steptp", tmp_path / "steptp", ignore=shutil.ignore_patterns("__pycache__"))
    env = _env(tmp_path, PREFECT_LOCAL_STORAGE_PATH=str(tmp_path / "results"))
    out = _run([sys.executable, script], tmp_path, env, timeout=500)
    assert "CALLS xx\n" in out, out[-3000:]


# ---------------------------------------------------------------------------- publish and diff
def _fake_release(folder: Path, name="r", version="1", speedups=(2.0,), steps=("a",), splits=None) -> Path:
    (folder / "data").mkdir(parents=True)
    (folder / "chat").mkdir()
    kids = [f"k{i}" for i in range(len(speedups))]
    pl.DataFrame({"kernel_id": kids, "name": [f"kern{i}" for i in range(len(kids))],
                  "split": list(splits or ["train"] * len(kids))}).write_parquet(folder / "data/kernels.parquet")
    pl.DataFrame({"kernel_id": kids, "trajectory_id": [f"t{i}" for i in range(len(kids))],
                  "speedup": list(speedups)}).write_parquet(folder / "data/trajectories.parquet")
    timing = {"median_s": 1.0, "min_s": 1.0, "spread": 0.02, "repeats": 5, "number": 1, "noisy": False}
    pl.DataFrame({"trajectory_id": ["t0"] * len(steps), "step_index": list(range(len(steps))),
                  "strategy": list(steps), "split": ["train"] * len(steps), "outcome": ["improved"] * len(steps),
                  "cumulative_speedup": [1.0] * len(steps), "before": [timing] * len(steps),
                  "after": [timing] * len(steps)}).write_parquet(folder / "data/steps.parquet")
    (folder / "chat/train.jsonl").write_text("{}\n")
    (folder / "stats.json").write_text(json.dumps({"name": name, "version": version, "counts": {}}))
    (folder / "README.md").write_text(f"# {name} {version}\n")
    return folder


def test_publish_never_overwrites(tmp_path):
    out = tmp_path / "releases"
    a = publish_release(_fake_release(tmp_path / "s1"), out / "r-1")
    assert a.status == "published" and (out / "r-1/manifest.json").is_file()
    man = (out / "r-1/manifest.json").read_text()
    assert json.loads((out / "latest.json").read_text())["id"] == "r-1"
    assert os.readlink(out / "latest") == "r-1"
    # the same records again: a no-op that leaves the published folder as it was
    b = publish_release(_fake_release(tmp_path / "s2"), out / "r-1")
    assert b.status == "unchanged" and (out / "r-1/manifest.json").read_text() == man
    assert not (tmp_path / "s2").exists()
    # other records under the same id: refused, nothing touched, unless forced
    s3 = _fake_release(tmp_path / "s3", speedups=(3.0,))
    with pytest.raises(ReleaseExists, match="never overwritten.*--force"):
        publish_release(s3, out / "r-1")
    assert (out / "r-1/manifest.json").read_text() == man and s3.exists()
    c = publish_release(s3, out / "r-1", force=True)
    assert c.status == "replaced" and content_digest(out / "r-1") != json.loads(man)["content_sha256"]


def test_diff_flags_regressions_beyond_the_spread(tmp_path):
    prev = _fake_release(tmp_path / "a", version="1", speedups=(2.0, 3.0), steps=("x", "y"))
    cur = _fake_release(tmp_path / "b", version="2", speedups=(1.98, 2.0), steps=("x", "x", "z"))
    d = write_diff(prev, cur)
    assert d["previous"] == "r-1" and d["current"] == "r-2"
    by = {k["kernel_id"]: k for k in d["best_speedup"]}
    assert not by["k0"]["regression"]             # 1% down, within the 4% spread
    assert by["k1"]["regression"] and d["regressions"] == ["k1"]
    assert d["steps_per_strategy"]["x"] == {"previous": 1, "current": 2, "change": 1}
    assert d["steps_per_strategy"]["y"]["current"] == 0 and "z" in d["steps_per_strategy"]
    assert json.loads((cur / "diff.json").read_text()) == d
    card = (cur / "README.md").read_text()
    assert card.startswith("# r 2") and "## Changes since r-1" in card and "**regression**" in card
    d2 = release_diff(prev, _fake_release(tmp_path / "c", version="3", speedups=(2.0,)))
    assert d2["kernels_removed"] == ["k1"] and d2["kernels_added"] == []
    assert d["kernels_changed_split"] == [] and "Kernels in another split than in r-1: 0." in card
    # a kernel that moved into test is named: the previous train split held it
    moved = write_diff(prev, _fake_release(tmp_path / "d", version="4", speedups=(2.0, 3.0),
                                           splits=["train", "test"]))
    assert moved["kernels_changed_split"] == [{"kernel_id": "k1", "name": "kern1", "previous": "train",
                                               "current": "test"}]
    card = (tmp_path / "d/README.md").read_text()
    assert "Kernels in another split than in r-1: 1, 1 of them into or out of test" in card
    assert "| kern1 | train | test |" in card


# ---------------------------------------------------------------------------- end to end
SMALL = {
    "name": "steptp-small", "version": "0.0.1", "seed": 0,
    # matmul_large_k: its loop reorder is a 3-5x step even at tiny size, so that the release
    # gate (at least one SFT example) does not hang on timing noise, as it did with gemv
    "extract": {"zoo": "softmax,matmul_large_k", "size": "tiny", "jobs": 1, "check": True},
    "decontaminate": {"folders": []},      # dvc.yaml's search stage reads the section
    # measurements (not seconds) bound the search, so equal timings give equal searches; tiny
    # kernels searched at their size (no time floor, no larger preset: at default size their
    # verifications cost about 2 s each, and these tests are about rebuilding, not selection)
    "search": {"policy": "beam", "max_kernels": 2, "measurements": 4, "seconds": 300, "jobs": 1,
               "threads": 1, "remeasure_rounds": 1, "remeasure_pairs": 2, "min_time_us": 0,
               "larger_size": ""},
    "cot": {"writer": "template"},
    # a loaded machine times noisily; the significance rule and the gate are tested elsewhere
    "significance": {"max_spread": 100.0, "min_gain": 0.0, "spread_factor": 0.0},
    "nightly": {"version": "{version}+nightly.{date}"},
    "cache": {"max_age_hours": 20},
}
KEY = ["kernel_id", "strategy", "site", "params", "before_leir", "after_leir"]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PREFECT_HOME=str(tmp / "prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOGGING_LEVEL="INFO", STEPTP_LOCK_DIR=str(tmp / "locks"),
               PYTHONPATH=str(ROOT), PATH=f"{BIN}:{os.environ['PATH']}",
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", **extra)
    for k in ("PREFECT_API_URL", "PREFECT_LOCAL_STORAGE_PATH", "STEPTP_CACHE"):
        env.pop(k, None)
    env["PREFECT_API_URL"] = api_url()      # one loopback server for the suite (_prefect_server)
    env.update(extra)
    return env


def _run(cmd, cwd, env, timeout=1500, ok=True):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    out = r.stdout + r.stderr
    if ok:
        assert r.returncode == 0, f"{cmd}: {out[-4000:]}"
    return out


def _search_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "Task run 'search-" in line and "Finished in state" in line]


def _timing_ages(cache: Path) -> dict[str, float]:
    con = sqlite3.connect(cache)
    try:
        return {ph: t for ph, t in con.execute("SELECT program_hash, MAX(created_at) FROM timings "
                                               "GROUP BY program_hash")}
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_two_nightlies_give_two_releases_with_fresh_measurements(tmp_path):
    from steptp.measure.cache import program_hash

    (tmp_path / "params.yaml").write_text(yaml.safe_dump(SMALL))
    cache = tmp_path / "cache.sqlite"
    env = _env(tmp_path, STEPTP_CACHE=str(cache))
    out = tmp_path / "releases"
    rel = [BIN / "steptp", "release", "--params", "params.yaml", "--out", out, "--nightly", "--date"]
    a_id, b_id = "steptp-small-0.0.1+nightly.20260101", "steptp-small-0.0.1+nightly.20260102"

    log1 = _run(rel + ["20260101"], tmp_path, env)
    a = out / a_id
    assert (a / "manifest.json").is_file() and json.loads((a / "manifest.json").read_text())["version"] \
        == "0.0.1+nightly.20260101"
    assert "not inside a DVC project" in log1            # said what it skipped, and why
    logfile = out / "logs" / f"{a_id}.log"                # progress in a file too, named at the end
    assert f"log:       {logfile}" in log1
    assert "Task run 'search-softmax' - Finished in state Completed()" in logfile.read_text()
    man_a = (a / "manifest.json").read_text()
    night1 = _timing_ages(cache)
    assert night1 and all(t < P._parse_date("20260102").timestamp() for t in night1.values())

    # a rerun of the same night resumes: every search from the cache, the release untouched
    log2 = _run(rel + ["20260101"], tmp_path, env)
    lines = _search_lines(log2)
    assert len(lines) == 2 and all("Cached" in line for line in lines), log2[-3000:]
    assert "already published with the same records" in log2
    assert (a / "manifest.json").read_text() == man_a

    # the next night: searched and measured again, a new release compared with the first
    log3 = _run(rel + ["20260102"], tmp_path, env)
    lines = _search_lines(log3)
    assert len(lines) == 2 and all("Completed" in line for line in lines), log3[-3000:]
    b = out / b_id
    assert (b / "manifest.json").is_file() and (a / "manifest.json").read_text() == man_a
    night2_start = P._parse_date("20260102").timestamp()
    ages = _timing_ages(cache)
    steps_b = pl.read_parquet(b / "data/steps.parquet")
    progs = {program_hash(t) for t in steps_b["before_leir"].to_list() + steps_b["after_leir"].to_list()}
    timed = [ph for ph in progs if ph in ages]
    assert timed and all(ages[ph] >= night2_start for ph in timed)   # every timing is tonight's
    d = json.loads((b / "diff.json").read_text())
    assert d["previous"] == a_id and d["current"] == b_id
    assert d["kernels_added"] == [] and len(d["best_speedup"]) == 2
    assert d["kernels_changed_split"] == []          # re-measured, yet every kernel kept its split
    assert f"## Changes since {a_id}" in (b / "README.md").read_text()
    assert json.loads((out / "latest.json").read_text())["id"] == b_id
    listed = [json.loads(line) for line in _run([BIN / "steptp", "releases", "--out", out, "--json"],
                                               tmp_path, env).splitlines() if line.startswith("{")]
    assert [r["id"] for r in listed] == [a_id, b_id] and listed[1]["latest"]
    assert all(r["dvc"] == "untracked" and r["counts"]["steps"] >= 1 for r in listed)

    # the regression gate: were the first night far faster, tonight's rerun fails the build
    t = pl.read_parquet(a / "data/trajectories.parquet")
    t.with_columns(pl.col("speedup") * 100).write_parquet(a / "data/trajectories.parquet")
    man_b = (b / "manifest.json").read_text()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**SMALL, "nightly": {"regression_gate": True}}))
    r = subprocess.run([str(c) for c in rel + ["20260102"]], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 1 and "regression gate" in r.stderr, (r.stdout + r.stderr)[-3000:]
    assert f"log: {out / 'logs' / f'{b_id}.log'}" in r.stderr
    night2 = (out / "logs" / f"{b_id}.log").read_text()     # appended: the build, then the failure
    assert night2.count(f"build {b_id}") == 2 and "release failed: ReleaseGateFailed: regression gate" in night2
    assert (b / "manifest.json").read_text() == man_b
    assert len(json.loads((out / ".staging" / b_id / "diff.json").read_text())["regressions"]) == 2


def _norm(df: pl.DataFrame) -> list[tuple]:
    return sorted(df.select(KEY).rows())


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_dvc_repro_equals_steptp_release_then_versioned_and_restored(tmp_path):
    repo = tmp_path / "proj"
    repo.mkdir()
    for f in ("dvc.yaml", ".gitignore"):
        shutil.copy(ROOT / f, repo / f)
    # the validate stage's dependency (the suites themselves are read from the package)
    shutil.copytree(ROOT / "steptp/quality/expectations", repo / "steptp/quality/expectations")
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    for k in ("name", "version", "extract", "search", "significance"):
        p[k] = SMALL[k]
    p["search"] = {**SMALL["search"], "measurements": 3}
    (repo / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    env = _env(tmp_path)
    dvc = BIN / "dvc"
    _run(["git", "init", "-q"], repo, env)
    _run([dvc, "init", "-q"], repo, env)
    _run([dvc, "config", "core.analytics", "false"], repo, env)
    remote = tmp_path / "remote"
    _run([dvc, "remote", "add", "-d", "local", remote], repo, env)
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "project"], repo, env)

    _run([dvc, "repro"], repo, env, timeout=1800)
    man = json.loads((repo / "release/manifest.json").read_text())
    assert man["validation"]["success"] and man["counts"]["steps"] >= 1
    assert (repo / "release/data_docs/index.html").is_file()
    assert "up to date" in _run([dvc, "repro"], repo, env)     # nothing changed, nothing reruns
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "dvc repro"], repo, env)
    # the Prefect flow on the same params, reading the measurements dvc repro made
    log = _run([BIN / "steptp", "release", "--params", "params.yaml", "--out", "releases"], repo, env)
    rid = "steptp-small-0.0.1"
    rel = repo / "releases" / rid
    searched = _norm(pl.read_parquet(repo / "build/search/steps.parquet"))
    assert len({r[0] for r in searched}) == 2 and len(searched) >= 4
    assert searched == _norm(pl.read_parquet(repo / "releases/.work" / rid / "search-steps.parquet"))
    assert _norm(pl.read_parquet(repo / "release/data/steps.parquet")) == \
        _norm(pl.read_parquet(rel / "data/steps.parquet"))
    assert json.loads((repo / "release/manifest.json").read_text())["counts"] == \
        json.loads((rel / "manifest.json").read_text())["counts"]

    # `make run`: published and dvc-added, but the user's history and remote are left alone;
    # the commands that would record it are printed and logged
    assert (repo / "releases" / f"{rid}.dvc").is_file(), log[-3000:]
    head = _run(["git", "rev-parse", "HEAD"], repo, env)
    assert _run(["git", "tag"], repo, env) == "" and not remote.exists()
    assert _run(["git", "log", "-1", "--format=%s"], repo, env).strip() == "dvc repro"
    commands = [f"git add -- releases/{rid}.dvc && git commit -m 'release {rid}' -- releases/{rid}.dvc "
                f"&& git tag release-{rid}", f"dvc push releases/{rid}.dvc"]
    flat = " ".join(log.split())
    assert all(c in flat for c in commands), log[-3000:]
    assert all(c in (repo / "releases/logs" / f"{rid}.log").read_text() for c in commands)
    # the same records again: nothing changes
    again = _run([BIN / "steptp", "release", "--params", "params.yaml", "--out", "releases"], repo, env)
    assert "already published with the same records" in again
    assert _run(["git", "rev-parse", "HEAD"], repo, env) == head and _run(["git", "tag"], repo, env) == ""

    # the nightly deployment: the flow with prefect.yaml's parameters (git: true) and job env
    dep = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"][0]
    assert dep["parameters"]["git"] is True
    job_env = {k: v.replace("{{ $STEPTP_HOME }}", str(repo))
               for k, v in dep["work_pool"]["job_variables"]["env"].items()}
    _run([sys.executable, "-c", "import json, sys; from steptp.flows.build_release import build_release; "
          "build_release(**json.loads(sys.argv[1]))", json.dumps(dep["parameters"])],
         repo, {**env, **job_env})
    rid = json.loads((repo / "releases/latest.json").read_text())["id"]
    assert rid.startswith("steptp-small-0.0.1+nightly.")
    rel = repo / "releases" / rid
    assert f"release-{rid}" in _run(["git", "tag"], repo, env).split()
    assert _run(["git", "rev-parse", "HEAD~1"], repo, env) == head        # one commit: its .dvc file
    assert _run(["git", "show", "--name-only", "--format=%s", "HEAD"], repo, env).split() == \
        ["release", rid, f"releases/{rid}.dvc"]
    assert any(remote.rglob("*"))
    rows = [json.loads(line) for line in _run([BIN / "steptp", "releases", "--json"], repo, env)
            .splitlines() if line.startswith("{")]
    row = next(r for r in rows if r["id"] == rid)
    assert row["dvc"] == "pushed" and row["tag"] == f"release-{rid}"

    # a fresh clone restores it from the remote
    clone = tmp_path / "clone"
    _run(["git", "clone", "-q", repo, clone], tmp_path, env)
    assert not (clone / "releases" / rid).exists()
    _run([BIN / "steptp", "pull", rid], clone, env)
    assert content_digest(clone / "releases" / rid) == content_digest(rel)
    assert (clone / "releases" / rid / "manifest.json").read_text() == (rel / "manifest.json").read_text()
    bad = subprocess.run([str(BIN / "steptp"), "pull", "steptp-small-9.9"], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "release-steptp-small-9.9" in bad.stderr

