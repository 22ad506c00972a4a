"""The parent flow: extract → search → CoT → curate → export → validate → compare → publish.

    from steptp.flows.build_release import build_release
    build_release(params, out="releases")                 # -> {"release": ..., "status": ..., ...}
    build_release(params_file="params.yaml", nightly=True)   # what the nightly deployment runs

A thin Prefect wrapper: the stage flows (``steptp.flows.stages``), then the library's
``steptp.release.gate_and_publish`` (quality gates, comparison with the previous release and the
regression gate, publishing that never overwrites, DVC versioning; git only with ``git`` or
params ``publish.git``, which the nightly deployment turns on). Where the files go:
``steptp.release.layout``. Progress is also appended to ``<out>/logs/<id>.log``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prefect import flow

from steptp import params as P
from steptp.flows.stages import (_log, accumulate_flow, carry_flow, cot_flow, curate_flow,
                                 export_flow, extract_flow, search_flow, task_runner, validate_flow)
from steptp.release import gate_and_publish
from steptp.release.layout import release_log, staging_dir, work_dir


class _RunFormatter(logging.Formatter):
    """Names the task or flow run a message came from, as Prefect's console lines do."""

    def format(self, record: logging.LogRecord) -> str:
        task, flow_run = getattr(record, "task_run_name", None), getattr(record, "flow_run_name", None)
        record.run = f"Task run {task!r}" if task else f"Flow run {flow_run!r}" if flow_run else record.name
        return super().format(record)


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


@flow(name="build_release", log_prints=True)
def build_release(params: P.Settings | dict[str, Any] | None = None, out: str = "releases",
                  params_file: str | None = None, nightly: bool = False, date: str | None = None,
                  force: bool = False, version_control: bool = True,
                  git: bool | None = None) -> dict[str, Any]:
    """``params`` (Settings, or a params dict, validated), or ``params_file`` (params.yaml;
    what the deployment passes).
    ``nightly``: version ``<version>+nightly.<UTC date>`` (the pattern ``nightly.version``),
    measurements older than ``cache.max_age_hours`` re-measured, a rerun of the same night
    resumed; ``date``: build as of that UTC date (a backfill). ``force``: replace a published
    release of the same id. ``version_control``: dvc add the release. ``git``: also commit and
    tag its ``.dvc`` file and dvc push (None: params ``publish.git``; the nightly deployment
    passes true); without, the commands are printed and logged instead.
    Progress also goes to ``<out>/logs/<id>.log`` (appended; the result's ``log``)."""
    p = P.settings(params) if params is not None else P.load(params_file)
    b = P.build(p, nightly, date)
    use_git = P.publish_git(p, git)
    log_path = release_log(out, b.id)
    with _log_file(log_path):
        _log(f"log: {log_path.resolve()}")
        return _build(p, b, Path(out), force, version_control, use_git) | {"log": str(log_path.resolve())}


def _build(p: P.Settings, b: P.Build, out_p: Path, force: bool, version_control: bool,
           git: bool) -> dict[str, Any]:
    from steptp.export import hardware_description

    started = time.time()     # the night's search deadline counts from here (extraction included)
    work, staging = work_dir(out_p, b.id), staging_dir(out_p, b.id)
    fp = P.fingerprint(p)
    _log(f"build {b.id}" + (f" (nightly {b.night})" if b.nightly else ""))

    kernels = extract_flow(p, str(work))
    # an accumulating nightly (docs/release.md): the previous release of this hardware's line
    acc = p.nightly.accumulate and b.nightly
    carried = carry_flow(p, str(out_p), b.id, fp["id"], b.night, str(work)) if acc else None
    jobs = p.search.jobs
    searched = search_flow.with_options(task_runner=task_runner(p.runner, jobs))(
        p, kernels, str(work), {"night": b.night, "night_start": b.night_start,
                                "clock_offset_s": b.clock_offset_s, "started": started,
                                "carried": carried["carry"] if carried else None})
    steps = cot_flow.with_options(task_runner=task_runner(p.runner, jobs))(p, searched["steps"], str(work))
    kernels_path, trajs, pinned = searched.get("kernels", kernels), searched["trajectories"], None
    stats_dir = None      # the search cost: beside the trajectories, or all nights' when accumulated
    if carried:
        merged = accumulate_flow(p, carried, kernels_path, steps, trajs, str(work))
        kernels_path, steps, trajs, pinned = (merged["kernels"], merged["steps"], merged["trajectories"],
                                              merged["pinned"])
        stats_dir = merged["search_stats"] or None
    curated = curate_flow(p, kernels_path, steps, trajs, str(work), hardware_description(fp), pinned,
                          stats_dir)
    export_flow(p, curated, str(staging), fp, b.version, searched.get("decontamination"))
    if carried:
        from steptp.release.accumulate import write_report

        write_report(staging, json.loads(Path(merged["report"]).read_text()))
    rep = validate_flow(p, str(staging))
    return gate_and_publish(staging, out_p, b.id, b.name, rep, params=p.source,
                            regression_gate=p.nightly.regression_gate, force=force,
                            version_control=version_control, git=git, log=_log,
                            fingerprint=fp["id"] if acc else None)


if __name__ == "__main__":
    print(json.dumps(build_release(params_file=sys.argv[1] if len(sys.argv) > 1 else "params.yaml",
                                   out=sys.argv[2] if len(sys.argv) > 2 else "releases"), indent=1))
