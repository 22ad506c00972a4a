"""The parent flow: extract → search → CoT → curate → export → validate → compare → publish.

    from steptp.flows.build_release import build_release
    build_release(params, out="releases")                 # -> {"release": ..., "status": ..., ...}
    build_release(params_file="params.yaml", nightly=True)   # what the nightly deployment runs

The release is built in ``<out>/.staging/<id>`` and moved to ``<out>/<id>`` only when every
quality gate passes; a failing gate raises ``ReleaseGateFailed`` and publishes nothing (the
staging folder keeps the report and its Data Docs for inspection). ``<id>`` is
``<name>-<version>``; a nightly's version carries the night (``steptp.params.build``:
``0.1.0+nightly.20261201``). Before publishing, the release is compared with the previous one
in ``<out>`` (``diff.json`` and a card section; ``nightly.regression_gate`` makes a regression
beyond the measured spread fail the build). Publishing never overwrites: the same records again
are a no-op, other records under a published id are refused unless ``force``. A published
release is then versioned with DVC and a git tag where the project allows
(``steptp.export.versioning``). Also writes the intermediate tables (``<out>/.work/<id>/``:
kernels, steps, trajectories parquet and the curated folder), which is how the stage flows
hand data on.
"""

from __future__ import annotations

import json
import logging
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import flow

from steptp.flows.stages import (_log, cot_flow, curate_flow, export_flow, extract_flow,
                          search_flow, task_runner, validate_flow)
from steptp import params as P


class ReleaseGateFailed(RuntimeError):
    """A quality gate failed; nothing was published."""


class _RunFormatter(logging.Formatter):
    """Names the task or flow run a message came from, as Prefect's console lines do."""

    def format(self, record: logging.LogRecord) -> str:
        task, flow_run = getattr(record, "task_run_name", None), getattr(record, "flow_run_name", None)
        record.run = f"Task run {task!r}" if task else f"Flow run {flow_run!r}" if flow_run else record.name
        return super().format(record)


def release_log(out: str | Path, rid: str) -> Path:
    """Where a release's progress is appended: ``<out>/logs/<id>.log``."""
    return Path(out) / "logs" / f"{rid}.log"


@contextmanager
def _log_file(path: Path):
    """Every Prefect flow and task message of this process and steptp's own (the CoT writers'
    rejected attempts, LLM batch failures), appended to ``path`` too: a nightly started from a
    deployment has no terminal to read afterwards. Tasks that run in Dask workers log there,
    not here. A failure is written before the handler goes (Prefect reports the failed state
    only after the flow returns), and the exception carries the path (``log``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(_RunFormatter("%(asctime)s | %(levelname)-7s | %(run)s - %(message)s"))
    prefect_log, own = logging.getLogger("prefect"), logging.getLogger("steptp")
    own_level = own.level
    if own_level == logging.NOTSET:
        own.setLevel(logging.INFO)
    for lg in (prefect_log, own):
        lg.addHandler(handler)
    try:
        yield
    except BaseException as e:
        prefect_log.error("release failed: %s: %s", type(e).__name__, e)
        try:
            e.log = str(path.resolve())
        except AttributeError:  # an exception type without a __dict__
            pass
        raise
    finally:
        for lg in (prefect_log, own):
            lg.removeHandler(handler)
        own.setLevel(own_level)
        handler.close()


def release_id(p: P.Settings | dict[str, Any], nightly: bool = False, date: str | None = None) -> str:
    return P.build(P.settings(p), nightly, date).id


@flow(name="build_release", log_prints=True)
def build_release(params: P.Settings | dict[str, Any] | None = None, out: str = "releases",
                  params_file: str | None = None, nightly: bool = False, date: str | None = None,
                  force: bool = False, version_control: bool = True) -> dict[str, Any]:
    """``params`` (Settings, or a params dict, validated), or ``params_file`` (params.yaml;
    what the deployment passes).
    ``nightly``: version ``<version>+nightly.<UTC date>`` (the pattern ``nightly.version``),
    measurements older than ``cache.max_age_hours`` re-measured, a rerun of the same night
    resumed; ``date``: build as of that UTC date (a backfill). ``force``: replace a published
    release of the same id. ``version_control``: dvc add/push and git-tag the release.
    Progress also goes to ``<out>/logs/<id>.log`` (appended; the result's ``log``)."""
    p = P.settings(params) if params is not None else P.load(params_file)
    b = P.build(p, nightly, date)
    out_p = Path(out)
    log_path = release_log(out_p, b.id)
    with _log_file(log_path):
        _log(f"log: {log_path.resolve()}")
        return _build(p, b, out_p, force, version_control) | {"log": str(log_path.resolve())}


def _build(p: P.Settings, b: P.Build, out_p: Path, force: bool,
           version_control: bool) -> dict[str, Any]:
    from steptp.export import hardware_description, previous_release, publish_release
    from steptp.export.diff import write_diff
    from steptp.export.versioning import track

    rid = b.id
    work = out_p / ".work" / rid
    staging = out_p / ".staging" / rid
    fp = P.fingerprint(p)
    hw = hardware_description(fp)
    _log(f"build {rid}" + (f" (nightly {b.night})" if b.nightly else ""))

    kernels = extract_flow(p, str(work))
    jobs = p.search.jobs
    searched = search_flow.with_options(task_runner=task_runner(p.runner, jobs))(
        p, kernels, str(work), {"night": b.night, "night_start": b.night_start,
                                "clock_offset_s": b.clock_offset_s})
    steps = cot_flow.with_options(task_runner=task_runner(p.runner, jobs))(p, searched["steps"], str(work))
    curated = curate_flow(p, searched.get("kernels", kernels), steps, searched["trajectories"],
                          str(work), hw)
    export_flow(p, curated, str(staging), fp, b.version)
    rep = validate_flow(p, str(staging))
    if not rep["success"]:
        bad = [f"{f['suite']}/{f['expectation']}({f.get('column') or ''})" for f in
               (x for s in rep["suites"].values() for x in s["failures"])]
        raise ReleaseGateFailed(f"quality gates failed, nothing published: {', '.join(bad)}; "
                                f"report: {staging / 'validation.json'}, Data Docs: {rep['docs']}")
    prev = previous_release(out_p, rid, b.name)
    diff = write_diff(prev, staging) if prev is not None else None
    if diff is not None:
        _log(f"compared with {diff['previous']}: {len(diff['kernels_added'])} kernels added, "
             f"{len(diff['kernels_removed'])} removed, {len(diff['regressions'])} regressions beyond the spread")
        if diff["regressions"] and p.nightly.regression_gate:
            raise ReleaseGateFailed(f"regression gate: best speedup of {', '.join(diff['regressions'])} fell "
                                    f"beyond the measured spread since {diff['previous']}; nothing published "
                                    f"(see {staging / 'diff.json'})")
    pub = publish_release(staging, out_p / rid, params=p.source, validation=rep, force=force)
    dest = pub.dest
    versioning = None
    if pub.status == "unchanged":
        _log(f"{dest} is already published with the same records: left untouched")
    elif version_control:
        versioning = track(dest, log=_log)
    result = {"release": str(dest.resolve()), "id": rid, "status": pub.status,
              "data_docs": str((dest / "data_docs" / "index.html").resolve()),
              "card": str((dest / "README.md").resolve()),
              "previous": diff["previous"] if diff else None,
              "regressions": diff["regressions"] if diff else [],
              "versioning": versioning,
              "counts": json.loads((dest / "stats.json").read_text())["counts"]}
    _log(f"release: {result['release']} ({pub.status})  Data Docs: {result['data_docs']}")
    return result


if __name__ == "__main__":
    print(json.dumps(build_release(params_file=sys.argv[1] if len(sys.argv) > 1 else "params.yaml",
                                   out=sys.argv[2] if len(sys.argv) > 2 else "releases"), indent=1))
