"""The bodies of the release stages that the CLI (``dvc repro``) and the Prefect tasks share, so
both entry points run the same code on the same settings (``steptp.params``): which kernels are
searched and how, how CoT is written per trajectory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from .measure.significance import SignificanceRule
from .params import Cot, Decontaminate, Devices, Extract, Nightly, ParamsError, Search
from .records import KernelRecord, StepRecord, TrajectoryRecord


def extract_refs(e: Extract) -> list:
    """The workloads of the ``extract`` settings (``steptp.zoo.extract.WorkloadRef``s): the zoo
    at ``size`` and at each of ``also_sizes``, the problem files of ``problem_dirs`` (at their
    own sizes) and the LEIR files of ``leir_dirs`` (templates at ``size`` and at each of
    ``also_sizes`` they give a preset for, like the zoo's: a user's kernel at its tiny size is
    mostly call overhead), in that order."""
    from .zoo import extract as X

    refs = []
    for size in dict.fromkeys([e.size, *e.also_sizes]) if e.zoo.strip() else ():
        refs += X.refs_for_zoo(e.zoo, size=size)
    for d in e.problem_dirs:
        refs += X.refs_for_problems(d, scale=1.0)
    if e.leir_dirs:
        refs += X.refs_for_leir(list(e.leir_dirs), size=e.size)
        for size in dict.fromkeys(e.also_sizes):
            if size != e.size:
                refs += X.refs_for_leir(list(e.leir_dirs), size=size, required=False)
    return refs


def extract(e: Extract, progress: bool = False, console=None, log=None):
    """The extraction result (``steptp.zoo.extract.ExtractResult``) of the ``extract``
    settings' workloads (``extract_refs``); ``progress``: progress bars on ``console``;
    ``log``: called with a line per finished workload and kernel check. Raise checks that
    passed before (same kernel, reference and check code) are read from the measurement cache
    (``steptp.measure.cache``) instead of run."""
    from .zoo import extract as X

    from .measure.cache import Cache

    # passed raise checks are remembered beside the timings: a nightly whose code changed
    # elsewhere (the search, curation) does not check 1,000 kernels again
    return X.extract(extract_refs(e), jobs=e.jobs, check=e.check,
                     memory_limit_mb=e.memory_limit, check_budget_s=e.check_budget_s,
                     progress=progress, console=console, log=log, check_cache=Cache())


def sources_digest(paths: Sequence[str]) -> str:
    """A digest of the files under ``paths`` (names and contents, sorted; hidden folders such
    as a checkout's ``.git`` skipped, as the extraction skips them): part of the cache key of
    whatever reads them, so an edited problem file or benchmark is read again."""
    import hashlib
    from pathlib import Path

    h = hashlib.sha256()
    for p in paths:
        root = Path(p).expanduser()
        files = [root] if root.is_file() else sorted(
            f for f in root.rglob("*") if f.is_file()
            and not any(part.startswith(".") for part in f.relative_to(root).parts))
        for f in files:
            h.update(f"{p}\0{f.relative_to(root) if f != root else ''}\0".encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:32]


def contamination_index(d: Decontaminate, jobs: int = 1):
    """The decontamination index of the ``decontaminate`` settings
    (``steptp.zoo.decontaminate.Index``), or None when no folder is listed. A folder that holds
    no benchmark, or a bad ``scale``, is a ParamsError naming the key."""
    if not d.folders:
        return None
    from .zoo.decontaminate import build_index
    from .zoo.leir import LeirTemplateError
    from .zoo.user import ScaleError, parse_scale

    try:
        parse_scale(d.scale)
    except ScaleError as e:
        raise ParamsError(f"decontaminate.scale: {e}") from None
    try:
        return build_index(d.folders, d.shape_normalized, d.scale, jobs)
    except (LeirTemplateError, ValueError, OSError) as e:
        raise ParamsError(f"decontaminate.folders: {e}") from None


def select_kernels(kernels: Sequence[KernelRecord], max_kernels: int | None,
                   times: dict[str, float | None] | None = None, **kw) -> list[KernelRecord]:
    """Kernels worth searching (``steptp.search.selection.select``: weight x unscheduled time,
    a time floor and ceiling, a cap per operator family); deterministic."""
    from .search.selection import select

    return select(list(kernels), times or {}, max_kernels=max_kernels, **kw).chosen


def time_unscheduled(kernels: Sequence[KernelRecord], threads: int | None = None
                     ) -> dict[str, float | None]:
    """Median time of each unscheduled kernel with the search's timing protocol, uncached: a
    cached timing would become the search's baseline, timed minutes before its children."""
    from .measure.significance import uncached_timer
    from .search.evaluator import search_config, set_threads
    from .tir.build import default_target

    timer = uncached_timer(default_target(), search_config(set_threads(threads)))
    out: dict[str, float | None] = {}
    try:
        for k in kernels:
            t = timer(k.leir)
            out[k.kernel_id] = t.median_s if t is not None else None
    finally:
        timer.close()
    return out


def choose_kernels(kernels: Sequence[KernelRecord], search: Search, extract_settings: Extract,
                   *, extract_fn: Callable | None = None, time_fn: Callable | None = None,
                   log: Callable[[str], None] = print, searched: Mapping[str, bool] | None = None,
                   shard: int | None = None, contamination=None,
                   answerable: Mapping[str, int] | None = None, nightly: Nightly | None = None
                   ) -> tuple[list[KernelRecord], list[KernelRecord]]:
    """The kernels a release searches (the selection keys of the ``search`` settings): operator
    workloads all of whose kernels are below the time floor are extracted again at
    ``larger_size`` (with the ``extract`` settings otherwise); the most promising by estimate
    are timed unscheduled (at ``search.threads``); then the final pick by weight x time, one per
    family first. Returns (chosen, every kernel with its ``search_status``).
    ``extract_fn(extract_settings)`` and ``time_fn(kernels, threads)`` default to this module's
    (the Prefect flow passes its cached tasks). ``contamination``
    (``steptp.zoo.decontaminate.Index``, from ``contamination_index``): the kernels its
    benchmark folders hold are dropped first, those of the larger extraction too; they are in
    neither list returned (the index records them).

    An accumulating nightly passes ``searched`` (kernel_id -> whether its carried records are
    stale) and ``shard``: then at most ``shard`` kernels are chosen, those never searched first
    (by the same priority), then stale ones; a kernel with valid records is not searched. With
    ``answerable`` (kernel_id -> prompts with a faster answer, ``Carry.answerable``) and the
    ``nightly`` settings, the shard defers a never-searched kernel whose shape group was
    searched, and the kernels of a family that yields little (``nightly.min_family_yield``;
    ``steptp.search.selection.shard_deferrals``)."""
    from .search.selection import estimate_s, from_zoo, kernel_family, select

    extract_fn = extract_fn or (lambda e: list(extract(e).records))
    time_fn = time_fn or time_unscheduled
    kernels = list(kernels)
    if contamination is not None:
        kernels = contamination.drop(kernels)
        log(f"search: {len(contamination.dropped)} kernels held by the decontamination "
            f"folders dropped from the pool")
    floors = dict(floor_s=search.floor_s, ceiling_s=search.ceiling_s,
                  max_per_family=search.max_per_family)
    est = {k.kernel_id: estimate_s(k) for k in kernels if k.raise_ok}
    larger = search.larger_size
    # a size the extraction already covers (``also_sizes``) has nothing new to give
    if larger and larger != extract_settings.size and larger not in extract_settings.also_sizes:
        wl = select(kernels, {}, max_kernels=None, estimates=est, **floors).larger_workloads(
            search.larger_max_workloads)
        if wl:
            # the zoo's workloads only: the user's own have no larger size
            more = extract_fn(extract_settings.model_copy(update={
                "zoo": ",".join(wl), "size": larger, "also_sizes": [], "problem_dirs": [],
                "leir_dirs": []}))
            known = {k.kernel_id for k in kernels}
            new = [k for k in more if k.kernel_id not in known]
            if contamination is not None:
                n = len(contamination.dropped)
                new = contamination.drop(new)
                if len(contamination.dropped) > n:
                    log(f"search: {len(contamination.dropped) - n} kernels of the larger size "
                        f"held by the decontamination folders dropped")
            est.update({k.kernel_id: estimate_s(k) for k in new if k.raise_ok})
            kernels = kernels + new
            log(f"search: {len(wl)} operator workloads below the time floor extracted at size "
                f"{larger}: {len(new)} kernels")
    # time the most promising by estimate (the estimate is rough: a wider window), then rank
    max_k = search.max_kernels if searched is None else shard
    searched = {} if searched is None else searched
    # kernels with valid records are not candidates tonight: no timing is spent on them
    open_ = [k for k in kernels if searched.get(k.kernel_id) is not False]
    defer = groups = None
    if searched and answerable is not None:
        from .search.selection import shard_deferrals

        nl = nightly or Nightly()
        defer, groups, yields = shard_deferrals(kernels, searched, answerable, nl.min_family_yield,
                                                nl.yield_min_kernels)
        low = [f"{f} ({y['answerable_per_kernel']:.2g} over {y['kernels']})" for f, y in yields.items()
               if y["deferred"]]
        log(f"search: shard: {sum(1 for v in defer.values() if 'shape group' in v)} kernels wait behind "
            f"new shape groups; families deferred for their yield: {', '.join(low) or 'none'}")
    # the kernels of the user's own folders go first (``select``'s ``first``)
    floors["first"] = {k.kernel_id for k in kernels if not from_zoo(k)}
    n_meas = search.measure_candidates or 3 * (max_k or 10)
    fam = floors["max_per_family"]
    # the deferred wait here too: the timings go to the kernels the shard will take
    pre = select(open_, {}, max_kernels=n_meas, estimates=est, floor_s=floors["floor_s"] / 4,
                 ceiling_s=None if floors["ceiling_s"] is None else floors["ceiling_s"] * 4,
                 max_per_family=None if not fam else 2 * fam, defer=defer, groups=groups,
                 first=floors["first"])
    times = time_fn(pre.chosen, search.threads)
    final = (_shard(kernels, searched, times, est, floors, max_k, defer, groups) if searched else
             select(kernels, times, max_kernels=max_k, estimates=est, **floors))
    log(f"search: {len(final.chosen)} kernels selected ({len(times)} timed unscheduled): "
        + ", ".join(f"{k.name} [{kernel_family(k)}]" for k in final.chosen))
    for k in final.chosen:
        if "below the time floor" in k.search_status:
            log(f"search: {k.name} ({k.kernel_id}): {k.search_status.split('; ', 1)[1]} "
                f"(search.min_time_us); a user's kernel has no larger size to extract")
    return final.chosen, final.kernels


@dataclass(frozen=True)
class SearchDeadline:
    """When a night stops starting kernel searches: ``at`` (wall clock, seconds), less what one
    search may take (``expected_s``) so that the last one started also ends by then."""

    at: float
    expected_s: float

    def may_start(self, now: float | None = None) -> bool:
        import time

        return (time.time() if now is None else now) + self.expected_s <= self.at


def start_in_time(items: Sequence[Any], submit: Callable[[Any], Any], width: int,
                  deadline: SearchDeadline | None = None,
                  clock: Callable[[], float] | None = None) -> list[Any]:
    """Submit ``items`` in order with at most ``width`` running (waiting on the oldest: the
    searches take about as long), each only while ``deadline`` lets it start; the futures of
    those started (a prefix of ``items``). ``submit(item)`` returns a future with ``wait()``."""
    import time

    clock = clock or time.time
    futs: list[Any] = []
    running: list[Any] = []
    for item in items:
        if len(running) >= max(1, width):
            running.pop(0).wait()
        if deadline is not None and not deadline.may_start(clock()):
            break
        futs.append(submit(item))
        running.append(futs[-1])
    return futs


def search_deadline(started: float | None, nightly: Nightly, search: Search) -> SearchDeadline | None:
    """The night's search deadline (``nightly.search_deadline_minutes`` after ``started``, the
    build's start), or None without one. One kernel's search is expected to take its wall
    budget (``search.seconds``) plus its role re-timing (``search.remeasure_seconds``)."""
    m = nightly.search_deadline_minutes
    if m is None or started is None:
        return None
    return SearchDeadline(started + 60.0 * m, float(search.seconds) + float(search.remeasure_seconds))


def left_for_next_night(k: KernelRecord) -> KernelRecord:
    """``k`` chosen for tonight but not started before the deadline: not searched, and so first
    in line again (by the same priority) next night."""
    rest = k.search_status.split(":", 1)[1] if ":" in k.search_status else ""
    return k.model_copy(update={"search_status": f"not_selected:{rest}; the night's search "
                                                 f"deadline came first (nightly.search_deadline_minutes)"})


def _shard(kernels: list[KernelRecord], searched: Mapping[str, bool], times, est, floors,
           shard: int | None, defer: Mapping[str, str] | None = None,
           groups: Mapping[str, str] | None = None):
    """``select`` over the never-searched kernels (at most ``shard``), then over the stale ones
    for the slots left; every kernel keeps the status of the selection it took part in
    (kernels with valid records: ``carried``)."""
    from .search.selection import Selection, select

    new = [k for k in kernels if k.kernel_id not in searched]
    stale = [k for k in kernels if searched.get(k.kernel_id) is True]
    first = select(new, times, max_kernels=shard, estimates=est, defer=defer, groups=groups, **floors)
    chosen = list(first.chosen)
    status = {k.kernel_id: k for k in first.kernels}
    room = None if shard is None else shard - len(chosen)
    if stale and (room is None or room > 0):
        # max_kernels=None is "all"; a full shard never gets here
        second = select(stale, times, max_kernels=room, estimates=est, **floors)
        chosen += second.chosen
        status.update({k.kernel_id: k.model_copy(update={"search_status": k.search_status + "; stale records"})
                       for k in second.kernels})
    else:
        status.update({k.kernel_id: k.model_copy(update={"search_status": "stale: not_selected, the "
                                                        "shard is full of never-searched kernels"})
                       for k in stale})
    every = [status.get(k.kernel_id) or k.model_copy(update={"search_status": "carried: valid records"})
             for k in kernels]
    by_id = {k.kernel_id: k for k in every}
    return Selection([by_id[k.kernel_id] for k in chosen], every)


def measurement_cache(max_age_s: float | None = None, clock_offset_s: float = 0.0,
                      not_before: float | None = None):
    """The measurement cache at its default place, reusing timings at most ``max_age_s`` old and
    made no earlier than ``not_before`` (a nightly: the start of its night), by a clock
    ``clock_offset_s`` ahead of the wall clock (``steptp.params.Build``)."""
    import time

    from .measure.cache import Cache

    return Cache(max_age_s=max_age_s, not_before=not_before,
                 clock=(lambda: time.time() + clock_offset_s))


def search_one(kernel: KernelRecord, search: Search, rule: SignificanceRule | None = None,
               devices: Devices | None = None, *, max_age_s: float | None = None,
               clock_offset_s: float = 0.0, not_before: float | None = None,
               on_progress: Callable | None = None, log: Callable[[str], None] = print
               ) -> tuple[list[StepRecord], list[TrajectoryRecord]]:
    """Search one kernel with the ``search`` settings; its steps, and its trajectory (none when
    the baseline failed). Then (``remeasure_rounds`` > 0) confirm roles: re-time, interleaved
    and uncached, the before/after pairs that decide a role near the margin of ``rule`` (the
    ``significance`` settings) and the trajectory's first and final program, within about
    ``remeasure_seconds``. Those re-timings are remembered in the measurement cache like single
    timings, so a second build of the same night decides alike. ``devices``: an RPC tracker and
    key to time on (default: this machine); ``max_age_s``, ``clock_offset_s``, ``not_before``:
    how the measurement cache ages timings (``measurement_cache``)."""
    from .search.roles import confirm_roles, confirm_trajectory
    from .measure.significance import interleaved, remembered, uncached_timer
    from .search import Budget, default_evaluator, make_policy, search_kernel, settler

    rule = rule or SignificanceRule()
    remeasure_rounds = search.remeasure_rounds
    backend = None
    rpc = devices.rpc() if devices is not None else None
    if rpc:
        from .measure.runner.rpc import RPCBackend

        backend = RPCBackend.from_dict(rpc)
    cache = measurement_cache(max_age_s, clock_offset_s, not_before)
    ev = default_evaluator(num_threads=search.threads, cache=cache, jobs=search.verify_jobs,
                           backend=backend)
    settle = again = None
    if remeasure_rounds > 0 and hasattr(ev, "config"):
        # one remembered re-timing for the settling and the role-deciding pairs below
        again = remembered(interleaved, cache, ev.target.key, ev.fingerprint, ev.config.hash)
        if hasattr(ev, "time_fresh"):
            # the final program is chosen among the fastest states re-timed side by side
            settle = settler(ev, remeasure_rounds, again)
    try:
        # a beam with options is passed built; its trajectory ids stay the policy's name's
        policy = make_policy("beam", explore=search.explore) if search.explore else search.policy
        res = search_kernel(kernel.leir, kernel.kernel_id, policy,
                            Budget(search.measurements, search.seconds), search.seed, ev,
                            max_actions=search.max_actions, on_progress=on_progress,
                            return_result=True, settle=settle)
    finally:
        ev.close()
    traj = res.trajectory
    if res.settled:
        log(f"search {kernel.name}: final program chosen among {len(res.settled)} re-timed "
            "side by side: " + ", ".join(f"{a * 1e3:.3g}->{b * 1e3:.3g} ms"
                                         for _, a, b in res.settled))
    steps = list(res.steps)
    roots = [st for st in steps if st.step_index == 0 and st.before is not None]
    if remeasure_rounds > 0 and steps and roots and hasattr(ev, "config"):
        # one timing costs about a build plus warm-up and repeats: keep the re-timing of a slow
        # kernel within ``remeasure_seconds`` (3 programs per step, ``remeasure_rounds`` rounds)
        per = 0.5 + 7 * roots[0].before.median_s
        pairs = max(1, min(search.remeasure_pairs,
                           int(search.remeasure_seconds / (3 * remeasure_rounds * per))))
        timer = uncached_timer(ev.target, ev.config, backend)
        try:
            # when the side-by-side re-timing chose another final program than the steps' own
            # timings did, that program's path goes first: its labels are the likeliest wrong
            moved = bool(res.settled) and res.best is not None and res.best.text != res.settled[0][0]
            path = [n.leir for n in res.best.path()[1:]] if moved else []
            steps, n = confirm_roles(steps, timer, rule, remeasure_rounds, pairs,
                                     interleave=again, path=path)
            traj = confirm_trajectory(traj, timer, roots[0].before_leir, remeasure_rounds,
                                      interleave=again)
        finally:
            timer.close()
        log(f"search {kernel.name}: {len(steps)} steps, {n} role-deciding pairs re-timed "
            f"interleaved")
    # provenance: the code version that searched them (an accumulating nightly re-searches
    # the kernels whose records an older version made)
    from .codehash import stage_hash

    code = stage_hash("search")
    steps = [st.model_copy(update={"code_version": code}) for st in steps]
    if traj is not None:
        traj = traj.model_copy(update={"code_version": code})
    return steps, [traj] if traj is not None else []


def by_trajectory(steps: Sequence[StepRecord]) -> list[tuple[str, list[StepRecord]]]:
    """Steps grouped per trajectory (sorted by id), each group in step order."""
    groups: dict[str, list[StepRecord]] = {}
    for s in steps:
        groups.setdefault(s.trajectory_id, []).append(s)
    return [(tid, sorted(groups[tid], key=lambda s: s.step_index)) for tid in sorted(groups)]


def make_writer(writer: str, cache_dir: str | None = None, model: str | None = None,
                base_url: str | None = None):
    """None = the template writer (offline, deterministic); ``anthropic`` = the Anthropic writer
    (reads ANTHROPIC_API_KEY); ``openai`` = a model behind an OpenAI-compatible server
    (``model``, ``base_url``: a vLLM or SGLang endpoint). LLM responses are cached under
    ``cache_dir``."""
    if writer == "template":
        return None
    if writer == "anthropic":
        from .cot.anthropic_writer import AnthropicWriter

        return AnthropicWriter(cache_dir=cache_dir)
    if writer == "openai":
        if not model:
            raise ValueError("cot.writer openai needs cot.model (and cot.base_url for a local "
                             "server) in params.yaml")
        from .cot.openai_writer import OpenAIWriter

        return OpenAIWriter(model, base_url=base_url, cache_dir=cache_dir)
    raise ValueError(f"unknown cot writer {writer!r}: use template, anthropic or openai")


def cot_one(steps: list[StepRecord], cot: Cot, hardware: str = "host"
            ) -> tuple[list[StepRecord], dict[str, Any]]:
    """The CoT of one trajectory's steps with the ``cot`` settings (validated, the template
    writer as the fallback): the verified steps and the failed ones a preference pair may reject
(``steptp.cot.run.needs_reasoning``); the others are passed through untouched. ``hardware``: the
    CPU the reasoning describes, ``host`` (this machine, where the steps were timed) or
    ``generic``."""
    from .cot.facts import GENERIC, Hardware
    from .cot.run import needs_reasoning, write_cot
    from .records import step_key

    # a search's rows form a tree: many rows share (trajectory_id, step_index); key by step_key
    todo = needs_reasoning(list(steps))
    hw = Hardware.current() if hardware == "host" else GENERIC
    done, summary = write_cot(todo, make_writer(cot.writer, cot.cache_dir, cot.model, cot.base_url),
                              max_retries=cot.max_retries, seed=cot.seed, hardware=hw)
    by_key = {step_key(s): s for s in done}
    return [by_key.get(step_key(s), s) for s in steps], summary


def refresh_reasoning(steps: list[StepRecord], cot: Cot, hardware: str = "host"
                      ) -> tuple[list[StepRecord], int]:
    """Carried ``steps`` with the reasoning an older template version wrote written again by
    today's template (whole trajectories, so that the tree's alternatives agree; a trajectory
    with any reasoning a model wrote is left as it is); and how many steps were re-written."""
    from .cot.run import older_template
    from .records import step_key

    groups = by_trajectory(steps)
    out: dict[str, StepRecord] = {}
    n = 0
    tmpl = cot.model_copy(update={"writer": "template"})
    for _, group in groups:
        written = [x for x in group if x.cot]
        if not any(older_template(x) for x in written) or \
                not all((x.cot_source or "").startswith("template") for x in written):
            continue
        done, _ = cot_one(group, tmpl, hardware)
        for x in done:
            out[step_key(x)] = x
        n += len(written)
    return [out.get(step_key(x), x) for x in steps], n


__all__ = ["by_trajectory", "choose_kernels", "contamination_index", "cot_one", "extract",
           "extract_refs", "make_writer", "refresh_reasoning", "sources_digest",
           "measurement_cache", "search_one", "select_kernels", "time_unscheduled"]
