"""The stages as Prefect flows and tasks; each calls into the ``steptp`` package.

Caching: every task uses ``INPUTS + TASK_SOURCE`` (the key changes with its arguments and its
code) and persists its result, so a rerun (after a crash, a kill, or a second nightly run with
the same inputs) takes every finished task from the cache. Results live under the local storage
path, which ``steptp release`` sets to ``<out>/.prefect-results`` (``PREFECT_LOCAL_STORAGE_PATH``)
so caches travel with the data. Work is split into one task per kernel (search) and per
trajectory (CoT), so a killed run loses at most the tasks that were running.

Retries: search (measurement) and CoT (an LLM call when the writer is ``anthropic``) retry,
because their failures can be transient (a timed-out worker, a rate limit).

Stage flows hand each other files, not records: each reads its inputs from the parquet files the
previous stage wrote under the work folder and returns the paths it wrote. (A flow run's
parameters are stored by the Prefect server, which refuses more than 512 KB; records of a real
zoo are larger.) The tasks inside take records, so their cache keys follow the content.

Measurement is serialized per device by the measurement service itself
(``steptp.measure.service.device_lock``: an exclusive file lock per device, held around every
timing, across threads and processes), so search tasks may run concurrently
(``search.jobs``): their verifications run in parallel, their timings one at a time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.task_runners import ThreadPoolTaskRunner

from steptp.records import (KernelRecord, StepRecord, TrajectoryRecord, read_records, table,
                            write_table)

CACHE = INPUTS + TASK_SOURCE


def _log(msg: str) -> None:
    try:
        get_run_logger().info(msg)
    except Exception:  # noqa: BLE001 - outside a run
        print(msg)


# ---------------------------------------------------------------------------- extract
@task(cache_policy=CACHE, persist_result=True, retries=1, retry_delay_seconds=2)
def extract_kernels(zoo: str, size: str = "tiny", jobs: int = 1, check: bool = True) -> list[KernelRecord]:
    from steptp.zoo import extract as X

    res = X.extract(X.refs_for_zoo(zoo, size=size), jobs=jobs, check=check)
    return list(res.records)


@flow(name="extract")
def extract_flow(p: dict[str, Any], work: str) -> str:
    """Writes ``work/kernels.parquet``; returns its path."""
    e = p.get("extract", {})
    ks = extract_kernels(e.get("zoo", "tiny"), e.get("size", "tiny"), int(e.get("jobs", 1)),
                         bool(e.get("check", True)))
    _log(f"extract: {len(ks)} kernels ({sum(k.raise_ok for k in ks)} raise-checked)")
    return str(write_table(table(ks, KernelRecord), Path(work) / "kernels.parquet"))


# ---------------------------------------------------------------------------- search
def select_kernels(kernels: list[KernelRecord], max_kernels: int | None,
                   times: dict[str, float | None] | None = None, **kw) -> list[KernelRecord]:
    """Kernels worth searching (``steptp.search.selection.select``: weight x unscheduled time,
    a time floor and ceiling, a cap per operator family); deterministic."""
    from steptp.search.selection import select

    return select(kernels, times or {}, max_kernels=max_kernels, **kw).chosen


@task(cache_policy=CACHE, persist_result=True, retries=1, retry_delay_seconds=5)
def time_unscheduled(kernels: list[KernelRecord], threads: int | None = None) -> dict[str, float | None]:
    """Median time of each unscheduled kernel with the search's timing protocol, uncached: a
    cached timing would become the search's baseline, timed minutes before its children."""
    from steptp.measure.significance import uncached_timer
    from steptp.search.evaluator import search_config, set_threads
    from steptp.tir.build import default_target

    timer = uncached_timer(default_target(), search_config(set_threads(threads)))
    out: dict[str, float | None] = {}
    try:
        for k in kernels:
            t = timer(k.leir)
            out[k.kernel_id] = t.median_s if t is not None else None
    finally:
        timer.close()
    return out


@task(cache_policy=CACHE, persist_result=True, retries=2, retry_delay_seconds=5)
def search_one(kernel: KernelRecord, policy: str, measurements: int, seconds: float, seed: int,
               threads: int | None = None, max_actions: int | None = None,
               rule: dict[str, float] | None = None, remeasure_rounds: int = 3,
               remeasure_pairs: int = 6, remeasure_seconds: float = 30.0
               ) -> tuple[list[StepRecord], list[TrajectoryRecord]]:
    """Search one kernel; then re-time, interleaved and uncached, the before/after pairs that
    decide a role near the significance margin and the trajectory's first and final program."""
    from steptp.curate.roles import confirm_roles, confirm_trajectory
    from steptp.measure.significance import SignificanceRule, uncached_timer
    from steptp.search import Budget, default_evaluator, search_kernel

    ev = default_evaluator(num_threads=threads)
    try:
        steps, traj = search_kernel(kernel.leir, kernel.kernel_id, policy, Budget(measurements, seconds),
                                    seed, ev, max_actions=max_actions)
    finally:
        ev.close()
    steps = list(steps)
    roots = [st for st in steps if st.step_index == 0 and st.before is not None]
    if remeasure_rounds > 0 and steps and roots and hasattr(ev, "config"):
        # one timing costs about a build plus warm-up and repeats: keep the re-timing of a slow
        # kernel within ``remeasure_seconds`` (3 programs per step, ``remeasure_rounds`` rounds)
        per = 0.5 + 7 * roots[0].before.median_s
        pairs = max(1, min(remeasure_pairs, int(remeasure_seconds / (3 * remeasure_rounds * per))))
        timer = uncached_timer(ev.target, ev.config)
        try:
            steps, n = confirm_roles(steps, timer, SignificanceRule(**(rule or {})), remeasure_rounds, pairs)
            traj = confirm_trajectory(traj, timer, roots[0].before_leir, remeasure_rounds)
        finally:
            timer.close()
        _log(f"search {kernel.name}: {len(steps)} steps, {n} role-deciding pairs re-timed interleaved")
    return steps, [traj] if traj is not None else []


def _selection_args(p: dict[str, Any]) -> dict[str, Any]:
    s = p.get("search", {})
    ceil = s.get("max_time_ms", 200)
    return dict(floor_s=float(s.get("min_time_us", 20)) * 1e-6,
                ceiling_s=None if ceil is None else float(ceil) * 1e-3,
                max_per_family=s.get("max_per_family", 3))


@flow(name="search", task_runner=ThreadPoolTaskRunner(max_workers=1))
def search_flow(p: dict[str, Any], kernels_path: str, work: str) -> dict[str, str]:
    """Reads the kernels table; picks the kernels worth searching (extracting operator
    workloads whose kernels are all below the time floor at ``search.larger_size``); writes
    ``work/search-steps.parquet``, ``work/trajectories.parquet`` and ``work/kernels-selected.parquet``
    (every kernel, with its ``search_status``); returns their paths."""
    from steptp.search.selection import estimate_s, select

    kernels = read_records(kernels_path, KernelRecord)
    s = p.get("search", {})
    e = p.get("extract", {})
    sel_args = _selection_args(p)
    max_k = s.get("max_kernels")
    est = {k.kernel_id: estimate_s(k) for k in kernels if k.raise_ok}
    larger = s.get("larger_size", "default")
    if larger and larger != e.get("size", "tiny"):
        wl = select(kernels, {}, max_kernels=None, estimates=est, **sel_args).larger_workloads(
            s.get("larger_max_workloads", 12))
        if wl:
            more = extract_kernels(",".join(wl), larger, int(e.get("jobs", 1)), bool(e.get("check", True)))
            known = {k.kernel_id for k in kernels}
            new = [k for k in more if k.kernel_id not in known]
            est.update({k.kernel_id: estimate_s(k) for k in new if k.raise_ok})
            kernels = kernels + new
            _log(f"search: {len(wl)} operator workloads below the time floor extracted at size "
                 f"{larger}: {len(new)} kernels")
    # measure the most promising by estimate (the estimate is rough: a wider window), then rank
    n_meas = int(s.get("measure_candidates", 3 * (max_k or 10)))
    pre = select(kernels, {}, max_kernels=n_meas, estimates=est,
                 floor_s=sel_args["floor_s"] / 4,
                 ceiling_s=None if sel_args["ceiling_s"] is None else sel_args["ceiling_s"] * 4,
                 max_per_family=None if not sel_args["max_per_family"] else 2 * sel_args["max_per_family"])
    times = time_unscheduled(pre.chosen, s.get("threads"))
    sel = select(kernels, times, max_kernels=max_k, estimates=est, **sel_args)
    chosen = sel.chosen
    from steptp.search.selection import kernel_family

    _log(f"search: {len(chosen)} kernels selected ({len(times)} timed unscheduled): "
         + ", ".join(f"{k.name} [{kernel_family(k)}]" for k in chosen))
    rule = curate_config(p).rule().model_dump()
    args = dict(policy=s.get("policy", "beam"), measurements=int(s.get("measurements", 16)),
                seconds=float(s.get("seconds", 60)), seed=int(p.get("seed", 0)),
                threads=s.get("threads"), max_actions=s.get("max_actions"), rule=rule,
                remeasure_rounds=int(s.get("remeasure_rounds", 3)),
                remeasure_pairs=int(s.get("remeasure_pairs", 6)),
                remeasure_seconds=float(s.get("remeasure_seconds", 30)))
    jobs = max(1, int(s.get("jobs", 1)))
    if jobs > 1:
        futs = [search_one.with_options(task_run_name=f"search-{k.name}").submit(k, **args) for k in chosen]
        results = [f.result() for f in futs]
    else:
        results = [search_one.with_options(task_run_name=f"search-{k.name}")(k, **args) for k in chosen]
    steps = [x for st, _ in results for x in st]
    trajs = [x for _, tr in results for x in tr]
    _log(f"search: {len(chosen)} kernels -> {len(trajs)} trajectories, {len(steps)} steps")
    return {"steps": str(write_table(table(steps, StepRecord), Path(work) / "search-steps.parquet")),
            "trajectories": str(write_table(table(trajs, TrajectoryRecord),
                                            Path(work) / "trajectories.parquet")),
            "kernels": str(write_table(table(sel.kernels, KernelRecord), Path(work) / "kernels-selected.parquet"))}


# ---------------------------------------------------------------------------- CoT
def _writer(writer: str, cache_dir: str | None = None):
    """None = the template writer (offline, deterministic); ``anthropic`` = the LLM writer (reads
    ANTHROPIC_API_KEY; responses cached under ``cache_dir``)."""
    if writer == "template":
        return None
    if writer == "anthropic":
        from steptp.cot.anthropic_writer import AnthropicWriter

        return AnthropicWriter(cache_dir=cache_dir)
    raise ValueError(f"unknown cot writer {writer!r}: use template or anthropic")


@task(cache_policy=CACHE, persist_result=True, retries=3, retry_delay_seconds=10)
def cot_one(steps: list[StepRecord], writer: str, seed: int, max_retries: int = 2,
            cache_dir: str | None = None) -> list[StepRecord]:
    """The CoT of one trajectory's steps (``steptp.cot.run.write_cot``: validated, with the
    template writer as the fallback). Unverified steps are passed through untouched."""
    from steptp.cot.run import write_cot

    from steptp.records import step_key

    # a search's rows form a tree: many rows share (trajectory_id, step_index); key by step_key
    todo = [s for s in steps if s.verified]
    done, _summary = write_cot(todo, _writer(writer, cache_dir), max_retries=max_retries, seed=seed)
    by_key = {step_key(s): s for s in done}
    return [by_key.get(step_key(s), s) for s in steps]


@flow(name="cot")
def cot_flow(p: dict[str, Any], steps_path: str, work: str) -> str:
    """Reads the search's steps; writes them with their CoT to ``work/steps.parquet``."""
    steps = read_records(steps_path, StepRecord)
    c = p.get("cot", {})
    by_traj: dict[str, list[StepRecord]] = {}
    for s in steps:
        by_traj.setdefault(s.trajectory_id, []).append(s)
    out: list[StepRecord] = []
    for tid in sorted(by_traj):
        out += cot_one.with_options(task_run_name=f"cot-{tid}")(
            sorted(by_traj[tid], key=lambda s: s.step_index), c.get("writer", "template"),
            int(c.get("seed", p.get("seed", 0))), int(c.get("max_retries", 2)), c.get("cache_dir"))
    _log(f"cot: {sum(1 for s in out if s.cot)} of {len(out)} steps explained")
    return str(write_table(table(out, StepRecord), Path(work) / "steps.parquet"))


# ---------------------------------------------------------------------------- curate / export / validate
def curate_config(p: dict[str, Any]):
    from steptp.curate import CurateConfig

    c = dict(p.get("curate", {}))
    c.setdefault("seed", int(p.get("seed", 0)))
    return CurateConfig(**c)


@task(cache_policy=CACHE, persist_result=True)
def curate_task(p: dict[str, Any], kernels: list[KernelRecord], steps: list[StepRecord],
                trajectories: list[TrajectoryRecord], hardware: str):
    from steptp.curate import curate

    return curate(kernels, steps, trajectories, curate_config(p), hardware=hardware)


@flow(name="curate")
def curate_flow(p: dict[str, Any], kernels_path: str, steps_path: str, trajectories_path: str,
                work: str, hardware: str = "") -> str:
    """Reads the three tables; writes the curated folder ``work/curated``; returns its path."""
    from steptp.curate import write_curated

    kernels = read_records(kernels_path, KernelRecord)
    trajectories = read_records(trajectories_path, TrajectoryRecord)
    res = curate_task(p, kernels, read_records(steps_path, StepRecord), trajectories, hardware)
    r = res.report
    _log(f"curate: kept {r['kept_steps']} of {r['input_steps']} steps; rejects {r['rejects_by_reason']}")
    return str(write_curated(res, Path(work) / "curated", kernels, trajectories))


@flow(name="export")
def export_flow(p: dict[str, Any], curated_path: str, staging: str,
                fingerprint: dict[str, Any] | None = None) -> dict[str, Any]:
    from steptp.curate import read_curated
    from steptp.export import export_release

    # not cached: it writes files (cheap); its inputs are cached upstream
    return export_release(read_curated(curated_path), staging, name=p.get("name", "steptp"),
                          version=str(p.get("version", "0")), params=p, fingerprint=fingerprint)


@flow(name="validate")
def validate_flow(p: dict[str, Any], staging: str) -> dict[str, Any]:
    from steptp.quality import validate_release

    rep = validate_release(staging, p)
    for f in rep.failures:
        _log(f"gate FAILED: {f['suite']}/{f['expectation']} {f.get('column') or ''}: {f['why']} "
             f"(e.g. {f['unexpected'][:3]})")
    return rep.to_dict()
