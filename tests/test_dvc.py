"""DVC: the dvc.yaml stages rebuild a release with `dvc repro` at a tiny size; a second repro is
up to date; `dvc push` to a local directory remote versions it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent   # the environment running the tests


def test_dvc_yaml_stages_match_the_cli():
    d = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    stages = d["stages"]
    assert list(stages) == ["extract", "search", "cot", "curate", "export", "validate"]
    for name, st in stages.items():
        assert st["cmd"].startswith(f"steptp {name} ")
    assert stages["validate"]["outs"] == ["release"]
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert isinstance(p, dict) and "seed" in p


def _run(cmd, cwd, env, timeout=1200):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd}: {r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_dvc_repro_and_push(tmp_path):
    repo = tmp_path / "proj"
    repo.mkdir()
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")
    shutil.copytree(ROOT / "expectations", repo / "expectations")
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["extract"].update(zoo="softmax,gemv", jobs=1)
    p["search"].update(measurements=3, seconds=20, threads=1)
    # a loaded CI machine times noisily; the gates and the significance rule are tested elsewhere
    p["curate"].update(max_spread=100.0, min_gain=0.0, spread_factor=0.0)
    (repo / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", STEPTP_LOCK_DIR=str(tmp_path / "locks"),
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    _run(["git", "init", "-q"], repo, env)
    _run([str(BIN / "dvc"), "init", "-q"], repo, env)
    _run([str(BIN / "dvc"), "config", "core.analytics", "false"], repo, env)
    out = _run([str(BIN / "dvc"), "repro"], repo, env)
    rel = repo / "release"
    assert (rel / "manifest.json").is_file(), out[-3000:]
    assert (rel / "data_docs" / "index.html").is_file()
    man = json.loads((rel / "manifest.json").read_text())
    assert man["validation"]["success"] and man["counts"]["steps"] >= 1
    out2 = _run([str(BIN / "dvc"), "repro"], repo, env)
    assert "up to date" in out2, out2
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "release"], repo, env)
    _run(["git", "tag", f"release-v{p['version']}"], repo, env)
    remote = tmp_path / "remote"
    _run([str(BIN / "dvc"), "remote", "add", "-d", "local", str(remote)], repo, env)
    out3 = _run([str(BIN / "dvc"), "push"], repo, env)
    assert any(remote.rglob("*")), out3
    # the release can be restored from the remote
    shutil.rmtree(rel)
    shutil.rmtree(repo / ".dvc" / "cache")
    _run([str(BIN / "dvc"), "pull"], repo, env)
    assert (rel / "manifest.json").is_file()
