"""steptp.release: the gates, publishing, and versioning with real git and real DVC — git is
written to only when asked (params publish.git, the nightly deployment's git: true); otherwise
the user's branch, tags and DVC remote are left alone and the exact commands are printed. Also:
the library never imports the flows, and the built wheel runs a release's first stage from an
empty folder (slow)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_nightly import _fake_release  # noqa: E402
from steptp import params as P  # noqa: E402
from steptp.release import (ReleaseGateFailed, check_quality, check_regressions,  # noqa: E402
                            gate_and_publish, publish_and_version)
from steptp.release.versioning import list_releases  # noqa: E402

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


@pytest.fixture
def git_env(monkeypatch):
    # track() runs git and dvc in subprocesses that inherit this environment
    for k, v in GIT_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ['PATH']}")


def _sh(cmd: list, cwd: Path, ok: bool = True) -> str:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert not ok or r.returncode == 0, f"{cmd}: {r.stdout}{r.stderr}"
    return r.stdout.strip()


def _project(tmp: Path) -> tuple[Path, Path]:
    """A git repository and DVC project with a local DVC remote, one commit; (repo, remote)."""
    repo, remote = tmp / "proj", tmp / "remote"
    repo.mkdir()
    _sh(["git", "init", "-q", "-b", "main"], repo)
    _sh([BIN / "dvc", "init", "-q"], repo)
    _sh([BIN / "dvc", "config", "core.analytics", "false"], repo)
    _sh([BIN / "dvc", "remote", "add", "-d", "local", remote], repo)
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    _sh(["git", "add", "-A"], repo)
    _sh(["git", "commit", "-qm", "project"], repo)
    return repo, remote


def _history(repo: Path) -> tuple[str, str, str]:
    return (_sh(["git", "rev-parse", "HEAD"], repo), _sh(["git", "tag"], repo),
            _sh(["git", "branch", "--show-current"], repo))


# ---------------------------------------------------------------------------- params and gates
def test_publish_git_switch():
    assert P.publish_git(P.load(ROOT / "params.yaml")) is False      # make run: off
    assert P.publish_git({}) is False
    assert P.publish_git({"publish": {"git": True}}) is True
    # the deployment's flow parameter wins over params, either way
    assert P.publish_git({"publish": {"git": False}}, True) is True
    assert P.publish_git({"publish": {"git": True}}, False) is False
    with pytest.raises(P.ParamsError, match="publish.git"):
        P.publish_git({"publish": {"git": "false"}})
    dep = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"][0]
    assert dep["parameters"]["git"] is True and dep["parameters"]["nightly"] is True


def test_gates_refuse_and_publish_nothing(tmp_path):
    staging = _fake_release(tmp_path / "staging", version="2", speedups=(2.0,))
    bad = {"success": False, "docs": "d/index.html",
           "suites": {"steps": {"failures": [{"suite": "steps", "expectation": "verified",
                                              "column": "verified"}]}}}
    with pytest.raises(ReleaseGateFailed, match=r"steps/verified\(verified\).*validation.json"):
        check_quality(bad, staging)
    check_quality({"success": True, "suites": {}}, staging)
    out = tmp_path / "releases"
    publish_and_version(_fake_release(tmp_path / "s1", speedups=(3.0,)), out, "r-1",
                        version_control=False)
    ok = {"success": True, "suites": {}}
    # a regression beyond the spread fails only with the gate on; the diff is written either way
    with pytest.raises(ReleaseGateFailed, match="regression gate: best speedup of k0"):
        gate_and_publish(staging, out, "r-2", "r", ok, regression_gate=True, version_control=False)
    assert not (out / "r-2").exists() and json.loads((staging / "diff.json").read_text())["regressions"] == ["k0"]
    with pytest.raises(ReleaseGateFailed, match="quality gates failed"):
        gate_and_publish(staging, out, "r-2", "r", bad, version_control=False)
    logs: list[str] = []
    res = gate_and_publish(staging, out, "r-2", "r", ok, version_control=False, log=logs.append)
    assert res["status"] == "published" and res["previous"] == "r-1" and res["regressions"] == ["k0"]
    assert res["versioning"] is None and (out / "r-2/manifest.json").is_file()
    assert any(m.startswith("compared with r-1") for m in logs)
    check_regressions(None, staging, True)      # no previous release: nothing to regress from


# ---------------------------------------------------------------------------- versioning
def test_release_without_git_leaves_history_and_prints_the_commands(tmp_path, git_env):
    repo, remote = _project(tmp_path)
    before = _history(repo)
    logs: list[str] = []
    res = publish_and_version(_fake_release(tmp_path / "s"), repo / "releases", "r-1", log=logs.append)
    v = res["versioning"]
    assert res["status"] == "published" and v["dvc_add"] and v["git_tag"] is None and not v["dvc_push"]
    assert _history(repo) == before                       # no commit, no tag, same branch
    assert (repo / "releases/r-1.dvc").is_file() and not any(remote.rglob("*"))  # nothing pushed
    # the commands, as the user would paste them (from elsewhere: a cd into the project first)
    git_line, push_line = v["commands"]
    repo = repo.resolve()
    # (the project's .gitignore already ignores releases/*: dvc wrote no releases/.gitignore)
    assert git_line == (f"cd {repo} && git add -- releases/r-1.dvc && "
                        f"git commit -m 'release r-1' -- releases/r-1.dvc && git tag release-r-1")
    assert push_line == f"cd {repo} && dvc push releases/r-1.dvc"
    assert any(git_line in m and push_line in m for m in logs)     # in the release log too
    # ... and they do what they say
    for line in v["commands"]:
        subprocess.run(["bash", "-c", line], check=True, capture_output=True, timeout=300)
    assert _sh(["git", "tag"], repo) == "release-r-1"
    assert _sh(["git", "log", "-1", "--format=%s"], repo) == "release r-1"
    (row,) = list_releases(repo / "releases", with_status=False)
    assert row["tag"] == "release-r-1" and any(remote.rglob("*"))


def test_release_with_git_commits_tags_and_pushes(tmp_path, git_env):
    repo, remote = _project(tmp_path)
    head, _, branch = _history(repo)
    res = publish_and_version(_fake_release(tmp_path / "s"), repo / "releases", "r-1", git=True)
    v = res["versioning"]
    assert v["git_tag"] == "release-r-1" and v["dvc_push"] and v["commands"] == [] and not v["skipped"]
    assert _sh(["git", "rev-parse", "HEAD~1"], repo) == head
    assert _sh(["git", "show", "--name-only", "--format=%s", "HEAD"], repo).split() == \
        ["release", "r-1", "releases/r-1.dvc"]
    assert _sh(["git", "branch", "--show-current"], repo) == branch and any(remote.rglob("*"))
    # the same records again: no second commit or tag
    again = publish_and_version(_fake_release(tmp_path / "s2"), repo / "releases", "r-1", git=True)
    assert again["status"] == "unchanged" and again["versioning"] is None
    assert _sh(["git", "rev-parse", "HEAD~1"], repo) == head
    # a tracked file changed: nothing committed, and the message says what to run afterwards
    (repo / ".gitignore").write_text("changed\n")
    dirty = publish_and_version(_fake_release(tmp_path / "s3", version="2"), repo / "releases",
                                "r-2", git=True)["versioning"]
    assert dirty["git_tag"] is None and "uncommitted changes" in dirty["skipped"][0]
    assert "git tag release-r-2" in dirty["skipped"][0]
    assert _sh(["git", "tag"], repo).split() == ["release-r-1"]


def test_no_dvc_project_is_said(tmp_path):
    logs: list[str] = []
    v = publish_and_version(_fake_release(tmp_path / "s"), tmp_path / "releases", "r-1",
                            log=logs.append)["versioning"]
    assert not v["dvc_add"] and v["commands"] == [] and "not inside a DVC project" in v["skipped"][0]


# ---------------------------------------------------------------------------- layers
def _imported(path: Path, rel: str) -> set[str]:
    """Every module ``path`` imports, relative imports resolved (``from ..flows import x``
    -> steptp.flows, steptp.flows.x)."""
    package = rel.removesuffix(".py").split("/")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), rel)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out |= {mod} | {f"{mod}.{a.name}" for a in node.names}
    return out


def test_the_library_never_imports_the_flows():
    assert "steptp.flows" in _imported(ROOT / "steptp/cli.py", "steptp/cli.py") or \
        "steptp.flows.build_release" in _imported(ROOT / "steptp/cli.py", "steptp/cli.py")
    offenders = sorted(
        rel for f in (ROOT / "steptp").rglob("*.py")
        if not (rel := f.relative_to(ROOT).as_posix()).startswith("steptp/flows/") and rel != "steptp/cli.py"
        and any(m == "steptp.flows" or m.startswith("steptp.flows.") for m in _imported(f, rel)))
    assert offenders == []


def test_release_without_params_says_so(tmp_path):
    r = subprocess.run([sys.executable, "-m", "steptp.cli", "release"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert r.returncode == 2 and "no params.yaml in" in r.stderr and "--params" in r.stderr
    assert not (tmp_path / "releases").exists()


# ---------------------------------------------------------------------------- the wheel
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_wheel_runs_a_release_from_an_empty_folder(tmp_path):
    # build from a copy: a build in the checkout would leave build/ and *.egg-info there
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, src / f)
    shutil.copytree(ROOT / "steptp", src / "steptp", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    # no build isolation: setuptools comes from this environment, not from the network
    _sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, src],
        tmp_path)
    (wheel,) = dist.glob("steptp-*.whl")
    venv = tmp_path / "venv"
    _sh([sys.executable, "-m", "venv", venv], tmp_path)
    vpy = venv / "bin" / "python"
    site = Path(_sh([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path))
    # the dependencies: this environment's packages, appended after the venv's own (a plain path
    # line, so that its .pth files, among them an editable steptp, are not run)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _sh([vpy, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], tmp_path)

    work = tmp_path / "empty"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STEPTP_EXPECTATIONS")}
    env.update(PATH=f"{venv / 'bin'}:{env['PATH']}", COLUMNS="200",
               STEPTP_LOCK_DIR=str(tmp_path / "locks"), STEPTP_CACHE=str(tmp_path / "cache.sqlite"))

    def run(*cmd: str, ok: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run(list(cmd), cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert not ok or r.returncode == 0, f"{cmd}: {r.stdout[-3000:]}{r.stderr[-3000:]}"
        return r

    where = json.loads(run(str(vpy), "-c", """
import json, steptp, steptp.flows.build_release as b, steptp.release
from steptp.quality import expectations_dir
from steptp.quality.core import SUITES, load_suite_spec
print(json.dumps({"steptp": steptp.__file__, "flow": b.__file__, "flow_name": b.build_release.name,
                  "expectations": str(expectations_dir()),
                  "suites": {s: len(load_suite_spec(s, {})["expectations"]) for s in SUITES}}))
""").stdout.strip().splitlines()[-1])
    assert Path(where["steptp"]).is_relative_to(site), where      # the wheel, not the checkout
    assert Path(where["flow"]).is_relative_to(site) and where["flow_name"] == "build_release"
    assert Path(where["expectations"]).is_relative_to(site)
    assert where["suites"] and all(n > 0 for n in where["suites"].values()), where
    assert "--git / --no-git" in run(str(venv / "bin/steptp"), "release", "--help").stdout
    bare = run(str(venv / "bin/steptp"), "release", ok=False)
    assert bare.returncode == 2 and "no params.yaml in" in bare.stderr

    # the default release's first stage, from a copy of params.yaml (its zoo narrowed to one
    # workload: this is about the installed package, not the zoo)
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["extract"] = {**p["extract"], "zoo": "softmax", "jobs": 1}
    (work / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    run(str(venv / "bin/steptp"), "extract", "--params", "params.yaml", "--out", "k.parquet")
    import polars as pl

    kernels = pl.read_parquet(work / "k.parquet")
    assert len(kernels) >= 1 and kernels["raise_ok"].all() and kernels["leir"].str.len_chars().min() > 0
