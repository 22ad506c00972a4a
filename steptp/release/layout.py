"""Where a release build keeps its files under the releases folder ``out``:

    <out>/<id>/               the published release (``publish``; never overwritten)
    <out>/.staging/<id>/      the release being built and gated; left for inspection on failure
    <out>/.work/<id>/         the stages' intermediate tables (kernels, steps, trajectories,
                              curated), how the stages hand data on
    <out>/logs/<id>.log       the build's progress, appended (its last lines: what failed, or
                              the git and dvc commands left to the user)
    <out>/latest.json         the newest published release
"""

from __future__ import annotations

from pathlib import Path


def published_dir(out: str | Path, rid: str) -> Path:
    return Path(out) / rid


def staging_dir(out: str | Path, rid: str) -> Path:
    return Path(out) / ".staging" / rid


def work_dir(out: str | Path, rid: str) -> Path:
    return Path(out) / ".work" / rid


def release_log(out: str | Path, rid: str) -> Path:
    return Path(out) / "logs" / f"{rid}.log"


__all__ = ["published_dir", "release_log", "staging_dir", "work_dir"]
