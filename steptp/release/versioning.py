"""Versioning published releases with DVC and, when asked, git; and restoring them.

On publish (``track``): in a DVC project, ``dvc add releases/<id>`` (the folder goes into the
DVC cache, ``releases/<id>.dvc`` names it). Git is written to only when asked (``git=True``:
params ``publish.git``, on in the nightly deployment): then, when the project is a git
repository whose tracked files have no uncommitted change, that ``.dvc`` file is committed and
tagged ``release-<id>``, and ``dvc push`` sends the data to the default remote. Otherwise the
user's branch, tags and remote are left alone and the exact commands that would do it are
returned and logged (as ``dvc add`` itself says what to ``git add``). Whatever cannot be done
is skipped with the reason (no DVC project, no git, a dirty tree, no remote). ``pull`` restores
a release on a fresh clone: the ``.dvc`` file from the working tree or from the tag, then
``dvc pull``, then the manifest's checksums are checked.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from ..export.release import published_releases, verify_checksums

TAG_PREFIX = "release-"


def project_root(path: str | Path) -> Path | None:
    """The DVC project (a folder with ``.dvc/``) that holds ``path``, or None."""
    p = Path(path).resolve()
    for d in (p, *p.parents):
        if (d / ".dvc").is_dir():
            return d
    return None


def _dvc() -> str:
    here = Path(sys.executable).parent / "dvc"  # the dvc installed with steptp
    return str(here) if here.exists() else (shutil.which("dvc") or "dvc")


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _git_ok(root: Path) -> bool:
    r = _run(["git", "rev-parse", "--show-toplevel"], root)
    return r.returncode == 0 and Path(r.stdout.strip()).resolve() == root


def _has_remote(root: Path) -> bool:
    r = _run([_dvc(), "remote", "default"], root)
    return r.returncode == 0 and bool(r.stdout.strip())


def git_steps(rid: str, paths: list[str]) -> list[list[str]]:
    """The git commands that record release ``rid``'s ``paths`` (its ``.dvc`` file and the
    ``.gitignore`` dvc wrote): what ``track`` runs with ``git=True`` and prints without."""
    return [["git", "add", "--", *paths],
            ["git", "commit", "-m", f"release {rid}", "--", *paths],
            ["git", "tag", f"{TAG_PREFIX}{rid}"]]


def _shell(root: Path, steps: list[list[str]]) -> str:
    # prefixed with a cd when run from elsewhere, so that the line can be pasted as it is
    line = " && ".join(shlex.join(s) for s in steps)
    return line if Path.cwd().resolve() == root else f"cd {shlex.quote(str(root))} && {line}"


def track(dest: str | Path, log: Callable[[str], None] = print, push: bool = True,
          git: bool = False) -> dict[str, Any]:
    """Version the published release folder ``dest``: ``dvc add`` it; with ``git``, commit its
    ``.dvc`` file, tag it and (``push``) ``dvc push``; without, only say how (``commands``, one
    shell line each, also logged). Returns what was done, skipped and left to the user."""
    dest = Path(dest).resolve()
    rid = dest.name
    done: dict[str, Any] = {"dvc_add": False, "git_tag": None, "dvc_push": False, "skipped": [],
                            "commands": []}

    def skip(what: str) -> None:
        done["skipped"].append(what)
        log(f"versioning: skipped {what}")

    root = project_root(dest)
    if root is None:
        skip(f"dvc add/push and the git tag: {dest.parent} is not inside a DVC project (dvc init)")
        return done
    rel = dest.relative_to(root).as_posix()
    is_git = _git_ok(root)
    clean = False
    if is_git and git:
        # untracked files do not change what a tag names; modified tracked files do
        st = _run(["git", "status", "--porcelain", "--untracked-files=no"], root)
        clean = st.returncode == 0 and not st.stdout.strip()
    r = _run([_dvc(), "add", rel], root)
    if r.returncode != 0:
        skip(f"dvc add {rel}: {(r.stderr or r.stdout).strip()[-500:]}")
        return done
    done["dvc_add"] = True
    dvc_file = f"{rel}.dvc"
    log(f"versioning: dvc add {rel} -> {dvc_file}")
    ignore = (Path(rel).parent / ".gitignore").as_posix()
    steps = git_steps(rid, [dvc_file] + ([ignore] if (root / ignore).is_file() else []))
    push_cmd = ["dvc", "push", dvc_file]
    if not git:
        done["commands"] = ([_shell(root, steps)] if is_git else []) + [_shell(root, [push_cmd])]
        log("versioning: git and the DVC remote left alone (params publish.git is off); to record "
            "this release in git and push its data, run:\n" +
            "\n".join(f"    {c}" for c in done["commands"]))
        return done
    if not is_git:
        skip(f"the git tag: {root} is not a git repository")
    elif not clean:
        skip(f"the git commit and tag {TAG_PREFIX}{rid}: the git tree of {root} has uncommitted "
             f"changes to tracked files (commit them, then run `{_shell(root, steps)}`)")
    else:
        for cmd in steps:
            g = _run(cmd, root)
            if g.returncode != 0:
                skip(f"the git tag: `{shlex.join(cmd)}` failed: {(g.stderr or g.stdout).strip()[-300:]}")
                break
        else:
            done["git_tag"] = f"{TAG_PREFIX}{rid}"
            log(f"versioning: committed {dvc_file}, tagged {TAG_PREFIX}{rid}")
    if not push:
        return done
    if not _has_remote(root):
        skip("dvc push: no default DVC remote (dvc remote add -d NAME URL)")
        return done
    p = _run([_dvc(), *push_cmd[1:]], root, timeout=3600)
    if p.returncode != 0:
        skip(f"dvc push: {(p.stderr or p.stdout).strip()[-500:]}")
    else:
        done["dvc_push"] = True
        log(f"versioning: dvc push {dvc_file}: {p.stdout.strip().splitlines()[-1] if p.stdout.strip() else 'ok'}")
    return done


def dvc_status(release: str | Path) -> str:
    """untracked | tracked (in the local DVC cache, not on the remote) | pushed | changed."""
    release = Path(release).resolve()
    root = project_root(release)
    dvc_file = release.parent / f"{release.name}.dvc"
    if root is None or not dvc_file.is_file():
        return "untracked"
    rel = dvc_file.relative_to(root).as_posix()
    loc = _run([_dvc(), "status", rel], root)
    if "changed" in loc.stdout or "modified" in loc.stdout:
        return "changed"
    if not _has_remote(root):
        return "tracked"
    r = _run([_dvc(), "status", "-c", rel], root)
    return "pushed" if r.returncode == 0 and ("in sync" in r.stdout or not r.stdout.strip()) else "tracked"


def list_releases(folder: str | Path, with_status: bool = True) -> list[dict[str, Any]]:
    """``published_releases`` plus each one's DVC status and git tag."""
    rows = published_releases(folder)
    root = project_root(folder)
    tags: set[str] = set()
    if root is not None and _git_ok(root):
        tags = set(_run(["git", "tag", "--list", f"{TAG_PREFIX}*"], root).stdout.split())
    for r in rows:
        r["dvc"] = dvc_status(r["path"]) if with_status else ""
        r["tag"] = f"{TAG_PREFIX}{r['id']}" if f"{TAG_PREFIX}{r['id']}" in tags else ""
    return rows


class RestoreError(RuntimeError):
    """A release could not be restored (the message says why)."""


def pull(release_id: str, folder: str | Path = "releases") -> Path:
    """Restore ``folder/<release_id>`` from the DVC remote; returns the folder."""
    folder = Path(folder).resolve()
    root = project_root(folder)
    if root is None:
        raise RestoreError(f"{folder} is not inside a DVC project: run this in a clone of the project")
    dvc_file = folder / f"{release_id}.dvc"
    rel = dvc_file.relative_to(root).as_posix()
    if not dvc_file.is_file():
        tag = f"{TAG_PREFIX}{release_id}"
        g = _run(["git", "show", f"{tag}:{rel}"], root)
        if g.returncode != 0:
            raise RestoreError(f"no {rel} in the working tree and no git tag {tag} holding it "
                               f"(published releases are tagged {TAG_PREFIX}<id>; `git tag -l "
                               f"'{TAG_PREFIX}*'` lists them)")
        folder.mkdir(parents=True, exist_ok=True)
        dvc_file.write_text(g.stdout)
    r = _run([_dvc(), "pull", rel], root, timeout=3600)
    if r.returncode != 0:
        raise RestoreError(f"dvc pull {rel} failed: {(r.stderr or r.stdout).strip()[-800:]}")
    dest = folder / release_id
    bad = verify_checksums(dest)
    if bad:
        raise RestoreError(f"{dest}: restored files differ from the manifest: {', '.join(bad[:5])}")
    return dest


__all__ = ["RestoreError", "TAG_PREFIX", "dvc_status", "git_steps", "list_releases", "project_root", "pull",
           "track"]
