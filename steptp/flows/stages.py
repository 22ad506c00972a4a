"""The stages as Prefect flows and tasks; each calls into the ``steptp`` package (stage bodies in
``steptp.pipeline``, settings from ``steptp.params``, the same the CLI's stage commands use).
The flows take the validated ``Settings``; each task takes the sections it reads.

Caching: a task's key is its inputs, its own source, and the code version of the steptp parts
it runs (``steptp.codehash``: the steptp version and a hash of their source, so a fix in
``steptp.search`` invalidates the searches and nothing upstream). Search keys also carry the
hardware fingerprint (timings from another machine are never reused) and, in a nightly, the
night: a rerun of the same night (after a crash or a kill) takes every finished task from the
cache, the next night searches and measures again. The measurement cache underneath ages out
timings older than ``cache.max_age_hours`` (``steptp.measure.cache``). Results live under the
local storage path, which ``steptp release`` sets to ``<out>/.prefect-results``
(``PREFECT_LOCAL_STORAGE_PATH``) so caches travel with the data. Work is split into one task per
kernel (search) and per trajectory (CoT), so a killed run loses at most the tasks that were
running.

Retries: search (measurement) and CoT (an LLM call when the writer is ``anthropic``) retry,
because their failures can be transient (a timed-out worker, a rate limit).

Stage flows hand each other files, not records: each reads its inputs from the parquet files the
previous stage wrote under the work folder and returns the paths it wrote. (A flow run's
parameters are stored by the Prefect server, which refuses more than 512 KB; records of a real
zoo are larger.) The tasks inside take records, so their cache keys follow the content.

Measurement is serialized per device by the measurement service itself
(``steptp.measure.runner.local.device_lock``: a file lock per device, held exclusively around every
timing and shared around every compile/verify, across threads and processes), so search tasks
may run concurrently (``search.jobs`` threads, or Dask workers on one machine): their
compilations and verifications run in parallel, never during a timing, and their timings one at
a time. With ``devices`` (an RPC tracker) timings go to the fleet instead, one per device.

Task runners (``task_runner``, from the ``runner`` params): kernel searches and CoT batches are
submitted to the flow's runner, a thread pool by default, or ``prefect_dask.DaskTaskRunner`` (a
LocalCluster, or a scheduler address); ``build_release`` gives the search and CoT flows that
runner. Extraction stays one task: its deduplication spans workloads, and it spreads its
workloads over its own worker processes (``extract.jobs``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from prefect import flow, get_run_logger, task
from prefect.cache_policies import TASK_SOURCE, CachePolicy, Inputs
from prefect.task_runners import ThreadPoolTaskRunner

from steptp import params as P
from steptp import pipeline
from steptp.measure.worker import reuse_workers
from steptp.pipeline import select_kernels  # noqa: F401 - re-exported (tests, users)
from steptp.records import (KernelRecord, StepRecord, TrajectoryRecord, read_records, table,
                            write_table, write_text_atomic)


@dataclass
class CodeVersion(CachePolicy):
    """Key part: the code version of ``stage`` (``steptp.codehash.stage_hash``), and with
    ``hardware`` the fingerprint of this machine at the task's ``threads``."""

    stage: str = ""
    hardware: bool = False
    root: Optional[str] = None      # the steptp package whose source counts (default: this one)

    def compute_key(self, task_ctx, inputs: dict[str, Any], flow_parameters: dict[str, Any],
                    **kwargs: Any) -> Optional[str]:
        from steptp.codehash import stage_hash

        parts = [self.stage, stage_hash(self.stage, self.root)]
        if self.hardware:
            from steptp.measure.fingerprint import current

            inputs = inputs or {}
            search = inputs.get("search")
            threads = search.threads if search is not None else inputs.get("threads")
            parts.append(current(num_threads=threads).id)
        return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


@dataclass
class SettingsKey(CachePolicy):
    """Key part: only the fields of the settings input ``name`` that change the task's result
    (a search's are ``Search.KERNEL_FIELDS``: searching more kernels, or more at once, keeps
    every finished search)."""

    name: str = ""
    fields: tuple[str, ...] = ()

    def compute_key(self, task_ctx, inputs: dict[str, Any], flow_parameters: dict[str, Any],
                    **kwargs: Any) -> Optional[str]:
        from prefect.utilities.hashing import hash_objects

        section = (inputs or {}).get(self.name)
        return hash_objects(None if section is None else
                            section.model_dump(include=set(self.fields)), raise_on_failure=True)


def cache_policy(stage: str, hardware: bool = False, exclude: tuple[str, ...] = (),
                 settings: SettingsKey | None = None) -> CachePolicy:
    """Inputs (less ``exclude``, and less ``settings.name`` keyed by its fields instead), the
    task's source and the code version of ``stage``."""
    if settings is not None:
        exclude = (*exclude, settings.name)
    policy = Inputs(exclude=list(exclude)) + TASK_SOURCE + CodeVersion(stage=stage, hardware=hardware)
    return policy + settings if settings is not None else policy


def _log(msg: str) -> None:
    try:
        get_run_logger().info(msg)
    except Exception:  # noqa: BLE001 - outside a run
        print(msg)


# ---------------------------------------------------------------------------- task runners
def task_runner(r: P.Runner, jobs: int = 1):
    """The task runner the ``runner`` settings choose: ``local``, a thread pool of ``jobs`` (the
    searches share this machine's device lock); ``dask``, a ``prefect_dask.DaskTaskRunner`` on
    the scheduler at ``runner.address`` or on a ``LocalCluster`` of ``runner.workers``
    processes it starts and stops with the flow."""
    if r.kind == "local":
        return ThreadPoolTaskRunner(max_workers=max(1, jobs))
    from prefect_dask import DaskTaskRunner

    if r.address:
        return DaskTaskRunner(address=r.address)
    kw = {"n_workers": r.workers, "threads_per_worker": r.threads_per_worker,
          "processes": True, "dashboard_address": None}
    url = _api_url()
    if url:  # the workers report to this flow's (possibly temporary) Prefect server
        kw["env"] = {"PREFECT_API_URL": url}
    return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs=kw)


def _api_url() -> str | None:
    """The Prefect API this process talks to; inside a flow run without a configured server,
    the temporary server Prefect started (else every worker would start its own)."""
    from prefect.context import FlowRunContext

    if FlowRunContext.get() is None:  # outside a run no temporary server is up: start none
        return None
    try:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as c:
            return str(c.api_url).rstrip("/")
    except Exception:  # noqa: BLE001 - no server reachable yet: the workers find their own
        return None


# ---------------------------------------------------------------------------- extract
@task(cache_policy=cache_policy("extract"), persist_result=True, retries=1, retry_delay_seconds=2)
def extract_kernels(extract: P.Extract, sources: str = "") -> list[KernelRecord]:
    """``sources``: the digest of the user's problem and LEIR folders (part of the key only).
    Each finished workload and kernel check is logged: on a large pool this stage takes a
    while."""
    return list(pipeline.extract(extract, log=_log).records)


@task(cache_policy=cache_policy("extract"), persist_result=True)
def contamination_index(decontaminate: P.Decontaminate, jobs: int = 1, sources: str = ""):
    """``steptp.pipeline.contamination_index``; ``sources``: the digest of the benchmark
    folders (part of the key only: an updated checkout is read again)."""
    return pipeline.contamination_index(decontaminate, jobs)


@flow(name="extract")
def extract_flow(s: P.Settings, work: str) -> str:
    """Writes ``work/kernels.parquet``; returns its path."""
    ks = extract_kernels(s.extract, pipeline.sources_digest(
        [*s.extract.problem_dirs, *s.extract.leir_dirs]))
    _log(f"extract: {len(ks)} kernels ({sum(k.raise_ok for k in ks)} raise-checked)")
    return str(write_table(table(ks, KernelRecord), Path(work) / "kernels.parquet"))


# ---------------------------------------------------------------------------- search
@task(cache_policy=cache_policy("search", hardware=True), persist_result=True, retries=1,
      retry_delay_seconds=5)
def time_unscheduled(kernels: list[KernelRecord], threads: int | None = None,
                     night: str | None = None) -> dict[str, float | None]:
    """``steptp.pipeline.time_unscheduled`` (``night`` in the key: each night times again)."""
    return pipeline.time_unscheduled(kernels, threads)


@task(cache_policy=cache_policy("search", hardware=True, exclude=("fresh",),
                               settings=SettingsKey(name="search", fields=P.Search.KERNEL_FIELDS)),
      persist_result=True, retries=2, retry_delay_seconds=5)
def search_one(kernel: KernelRecord, search: P.Search, rule: P.Significance, devices: P.Devices,
               night: str | None = None, fresh: dict[str, Any] | None = None
               ) -> tuple[list[StepRecord], list[TrajectoryRecord]]:
    """``steptp.pipeline.search_one``: search one kernel, then confirm the roles of its steps
    (re-time interleaved the pairs that decide them, by ``rule``). Key: the ``search`` settings
    that change one kernel's result (not ``verify_jobs``: verdicts do not depend on it), the
    rule, ``devices`` (other devices, other timings) and ``night`` (the nightly's date: the
    next night searches again); ``fresh``: how the measurement cache ages timings
    (``max_age_s``, ``clock_offset_s``, ``not_before``; not part of the key). Runs wherever the
    flow's task runner puts it (a thread here, or a Dask worker with its own measurement
    service)."""
    return pipeline.search_one(kernel, search, rule, devices, log=_log, **(fresh or {}))


@flow(name="search", task_runner=ThreadPoolTaskRunner(max_workers=1))
def search_flow(s: P.Settings, kernels_path: str, work: str,
                build: dict[str, Any] | None = None) -> dict[str, str]:
    """Reads the kernels table; picks the kernels worth searching (``steptp.pipeline.
    choose_kernels``: operator workloads whose kernels are all below the time floor are
    extracted at ``search.larger_size``); writes ``work/search-steps.parquet``,
    ``work/trajectories.parquet``, ``work/kernels-selected.parquet`` (every kernel, with its
    ``search_status``) and ``work/decontamination.json`` (the kernels of the ``decontaminate``
    folders dropped before the pick); returns their paths. ``build``: ``night``,
    ``night_start`` and ``clock_offset_s`` of the build (``steptp.params.Build``)."""
    from steptp.search import stage_stats

    t0 = time.monotonic()
    kernels = read_records(kernels_path, KernelRecord)
    b = build or {}
    night = b.get("night")
    # an accumulating nightly: the kernels with carried records, and whether they are stale
    carried = json.loads(Path(b["carried"]).read_text()) if b.get("carried") else None
    searched = carried["searched"] if carried else None
    d = s.decontaminate
    index = contamination_index(d, s.extract.jobs, pipeline.sources_digest(d.folders)).fresh() \
        if d.folders else None
    chosen, every = pipeline.choose_kernels(
        kernels, s.search, s.extract, extract_fn=extract_kernels,
        time_fn=lambda ks, threads: time_unscheduled(ks, threads, night), log=_log,
        searched=searched, shard=s.nightly.shard_kernels if searched is not None else None,
        contamination=index, answerable=carried.get("answerable") if carried else None,
        nightly=s.nightly)
    decon = Path(work) / "decontamination.json"
    decon.parent.mkdir(parents=True, exist_ok=True)
    decon.write_text(json.dumps(None if index is None else index.report(), indent=1) + "\n")
    max_age = s.cache.max_age_s
    fresh = {"max_age_s": max_age, "clock_offset_s": float(b.get("clock_offset_s", 0.0)),
             "not_before": b.get("night_start")}
    opts = {"cache_expiration": _dt.timedelta(seconds=max_age)} if max_age else {}
    tasks = [search_one.with_options(task_run_name=f"search-{k.name}", **opts) for k in chosen]
    deadline = pipeline.search_deadline(b.get("started"), s.nightly, s.search) \
        if searched is not None else None
    width = s.search.jobs if s.runner.kind == "local" else max(1, s.runner.workers)
    # submitted to the flow's task runner (``task_runner``): ``search.jobs`` threads here, or
    # Dask workers, at most ``width`` at once so that the deadline is asked before each start;
    # results in kernel order whatever order they finish in
    with reuse_workers():  # searches in this process start their measurement workers once
        futs = pipeline.start_in_time(
            list(zip(tasks, chosen)), lambda tk: tk[0].submit(tk[1], s.search, s.significance,
                                                             s.devices, night=night, fresh=fresh),
            width, deadline)
        results = [f.result() for f in futs]
    if len(futs) < len(chosen):
        left = {k.kernel_id for k in chosen[len(futs):]}
        _log(f"search: the night's search deadline ({s.nightly.search_deadline_minutes:g} min after "
             f"the build began) left {len(left)} of {len(chosen)} kernels for the next night")
        every = [pipeline.left_for_next_night(k) if k.kernel_id in left else k for k in every]
        chosen = chosen[:len(futs)]
    _log(f"search: {len(chosen)} kernels on "
         f"{s.search.jobs if s.runner.kind == 'local' else 'dask'} workers")
    # provenance: the night that searched them (the code version is stamped by the search)
    prov = {"night": night or ""}
    steps = [x.model_copy(update=prov) for st, _ in results for x in st]
    trajs = [x.model_copy(update=prov) for _, tr in results for x in tr]
    _log(f"search: {len(chosen)} kernels -> {len(trajs)} trajectories, {len(steps)} steps")
    stage_stats.write(work, wall_s=time.monotonic() - t0, kernels=len(chosen), steps=len(steps),
                      workers=s.search.jobs if s.runner.kind == "local" else s.runner.workers)
    return {"steps": str(write_table(table(steps, StepRecord), Path(work) / "search-steps.parquet")),
            "trajectories": str(write_table(table(trajs, TrajectoryRecord),
                                            Path(work) / "trajectories.parquet")),
            "kernels": str(write_table(table(every, KernelRecord),
                                       Path(work) / "kernels-selected.parquet")),
            "decontamination": str(decon)}


# ---------------------------------------------------------------------------- CoT
@task(cache_policy=cache_policy("cot"), persist_result=True, retries=3, retry_delay_seconds=10)
def cot_one(steps: list[StepRecord], cot: P.Cot) -> list[StepRecord]:
    """The CoT of one trajectory's steps (``steptp.pipeline.cot_one``), describing the CPU the
    steps were timed on (as ``steptp cot --hardware host`` does)."""
    return pipeline.cot_one(steps, cot, hardware="host")[0]


@flow(name="cot", task_runner=ThreadPoolTaskRunner(max_workers=1))
def cot_flow(s: P.Settings, steps_path: str, work: str) -> str:
    """Reads the search's steps; writes them with their CoT to ``work/steps.parquet``."""
    steps = read_records(steps_path, StepRecord)
    out: list[StepRecord] = []
    futs = [cot_one.with_options(task_run_name=f"cot-{tid}").submit(group, s.cot)
            for tid, group in pipeline.by_trajectory(steps)]
    for f in futs:  # one task per trajectory on the flow's task runner, joined in order
        out += f.result()
    _log(f"cot: {sum(1 for s in out if s.cot)} of {len(out)} steps explained")
    return str(write_table(table(out, StepRecord), Path(work) / "steps.parquet"))


# ---------------------------------------------------------------------------- accumulation
@flow(name="carry")
def carry_flow(s: P.Settings, out: str, rid: str, fingerprint: str, night: str, work: str) -> dict[str, str]:
    """An accumulating nightly's start (``steptp.release.accumulate``): the records of the
    previous release of this hardware's line, written under ``work``; returns their paths."""
    from steptp.codehash import stage_hash
    from steptp.release import accumulate as A

    carry = A.load_carry(out, rid, s.name, fingerprint, night, stage_hash("search"),
                         s.nightly.max_age_days)
    _log(f"accumulate: carrying from {carry.previous or 'nothing (a new line for this hardware)'}: "
         f"{len(carry.kernels())} kernels, {len(carry.steps)} steps, {len(carry.stale)} kernels stale, "
         f"{carry.other_hardware} records of another fingerprint left out")
    rewritten = 0
    if s.nightly.refresh_reasoning and carry.steps:
        # an update's better arguments reach the carried steps too, not only tonight's; done
        # before the search, so that the night's search deadline counts its time
        steps, rewritten = pipeline.refresh_reasoning(carry.steps, s.cot)
        carry = dataclasses.replace(carry, steps=steps)
        _log(f"accumulate: the reasoning of {rewritten} carried steps written again by today's "
             f"template")
    return {**A.write_carry(carry, work), "reasoning_rewritten": str(rewritten)}


@task(cache_policy=cache_policy("search", hardware=True), persist_result=True, retries=1,
      retry_delay_seconds=5)
def retime_carried(groups: list[tuple[str, list[str]]], threads: int | None, rounds: int,
                   devices: P.Devices, night: str | None = None) -> dict[str, list[dict[str, Any] | None]]:
    """``steptp.release.accumulate.time_programs`` (``night`` in the key: a rerun of the night
    reuses its re-timings, the next night times again)."""
    from steptp.release.accumulate import time_programs

    return time_programs(groups, threads, rounds, devices.rpc())


@flow(name="accumulate")
def accumulate_flow(s: P.Settings, carried: dict[str, str], kernels_path: str, steps_path: str,
                    trajectories_path: str, work: str) -> dict[str, str]:
    """Tonight's records plus the carried ones (a sample of their labels re-timed, those that
    no longer hold dropped): writes ``work/accumulated-*.parquet``, the kernel splits to keep
    and ``work/accumulation.json``; returns their paths."""
    from steptp.release import accumulate as A
    from steptp.search import stage_stats

    carry = A.read_carry(carried)
    kernels = read_records(kernels_path, KernelRecord)
    steps = read_records(steps_path, StepRecord)
    trajs = read_records(trajectories_path, TrajectoryRecord)
    cs, ct, info = A.carried_records(carry, steps, trajs, {k.kernel_id for k in kernels})
    keys = A.retime_sample(cs, s.significance, s.nightly.retime_fraction, carry.night, s.seed)
    timings = retime_carried(A.retime_programs(cs, keys), s.search.threads,
                             max(1, s.search.remeasure_rounds), s.devices, carry.night) if keys else {}
    cs, rows = A.apply_retiming(cs, timings, s.significance)
    kernels = A.carried_status(kernels, cs, ct, carry)
    rep = A.report(carry, info, rows, kernels)
    rep["reasoning_rewritten"] = int(carried.get("reasoning_rewritten") or 0)
    _log(f"accumulate: {rep['carried_kernels']} kernels and {rep['carried_steps']} steps carried, "
         f"{rep['retimed']} labels re-timed, {rep['dropped']} dropped")
    w = Path(work)
    # the yield of the release is its examples over all the searching that made them
    cost = stage_stats.cumulative(stage_stats.read(Path(trajectories_path).parent), carry.search_cost)
    if cost:
        write_text_atomic(w / "accumulated" / stage_stats.FILE, json.dumps(cost, indent=1, sort_keys=True) + "\n")
    return {"search_stats": str(w / "accumulated") if cost else "",
            "steps": str(write_table(table(steps + cs, StepRecord), w / "accumulated-steps.parquet")),
            "trajectories": str(write_table(table(trajs + ct, TrajectoryRecord),
                                            w / "accumulated-trajectories.parquet")),
            "kernels": str(write_table(table(kernels, KernelRecord), w / "accumulated-kernels.parquet")),
            "pinned": str(write_text_atomic(w / "pinned-splits.json",
                                            json.dumps(carry.splits, indent=0, sort_keys=True) + "\n")),
            "report": str(write_text_atomic(w / "accumulation.json", json.dumps(rep, indent=1) + "\n"))}


# ---------------------------------------------------------------------------- curate / export / validate
@task(cache_policy=cache_policy("curate"), persist_result=True)
def curate_task(curate: P.Curate, rule: P.Significance, kernels: list[KernelRecord],
                steps: list[StepRecord], trajectories: list[TrajectoryRecord], hardware: str,
                pinned: dict[str, str] | None = None, search_stats: dict[str, Any] | None = None):
    from steptp.curate import curate as do_curate

    return do_curate(kernels, steps, trajectories, curate, hardware=hardware, rule=rule, pinned=pinned,
                     search_stats=search_stats)


@flow(name="curate")
def curate_flow(s: P.Settings, kernels_path: str, steps_path: str, trajectories_path: str,
                work: str, hardware: str = "", pinned_path: str | None = None,
                search_stats_dir: str | None = None) -> str:
    """Reads the three tables; writes the curated folder ``work/curated``; returns its path.
    ``pinned_path``: a JSON file of kernel splits to keep (an accumulating nightly's);
    ``search_stats_dir``: where the search cost is (default: beside the trajectories)."""
    from steptp.curate import write_curated

    kernels = read_records(kernels_path, KernelRecord)
    trajectories = read_records(trajectories_path, TrajectoryRecord)
    from steptp.search import stage_stats

    pinned = json.loads(Path(pinned_path).read_text()) if pinned_path else None
    res = curate_task(s.curate, s.significance, kernels, read_records(steps_path, StepRecord),
                      trajectories, hardware, pinned,
                      stage_stats.read(search_stats_dir or Path(trajectories_path).parent))
    r = res.report
    _log(f"curate: kept {r['kept_steps']} of {r['input_steps']} steps; rejects {r['rejects_by_reason']}")
    return str(write_curated(res, Path(work) / "curated", kernels, trajectories))


@flow(name="export")
def export_flow(s: P.Settings, curated_path: str, staging: str,
                fingerprint: dict[str, Any] | None = None, version: str | None = None,
                decontamination_path: str | None = None) -> dict[str, Any]:
    """``decontamination_path``: the search flow's ``decontamination.json`` (the card's
    counts)."""
    from steptp.export import export_release

    decon = json.loads(Path(decontamination_path).read_text()) if decontamination_path else None
    # not cached: it writes files (cheap); its inputs are cached upstream
    # the card records the params as written
    return export_release(curated_path, staging, name=s.name,
                          version=version or s.version, params=s.source, fingerprint=fingerprint,
                          decontamination=decon)


@flow(name="validate")
def validate_flow(s: P.Settings, staging: str) -> dict[str, Any]:
    from steptp.quality import validate_release

    rep = validate_release(staging, s)
    for f in rep.failures:
        _log(f"gate FAILED: {f['suite']}/{f['expectation']} {f.get('column') or ''}: {f['why']} "
             f"(e.g. {f['unexpected'][:3]})")
    return rep.to_dict()
