"""The kernel pool of a params file: every kernel its sources give, which of them a release has
searched, which are still pending, and why the others are skipped (``steptp pool``).

    p = pool(settings.load("profiles/standard.yaml"), release="releases/steptp-standard-0.1.0")
    p.summary()          # per source and per family: kernels, searched, pending, skipped

The pool is what the search stage would choose from: the extraction of the ``extract`` settings
(``steptp.pipeline.extract``: the zoo at each size, the problem folders, the LEIR files), less
the kernels of the ``decontaminate`` folders, plus the larger size of operator workloads below
the time floor, ranked by ``steptp.pipeline.choose_kernels`` on the analytic estimates alone
(nothing is timed here; the release times the best candidates, so a kernel near the time floor
or ceiling may land on the other side there).

* **searched**: the kernel has a trajectory in the given release;
* **pending**: a candidate of the search (raised and checked, within the time bounds) that the
  release has not searched yet; with an accumulating profile (``nightly.accumulate``) and a
  release, the pending kernels the next night's shard would make wait are counted as
  **deferred**, by why (``steptp.search.selection.shard_deferrals``: a shape group the release
  searched, a family that yielded little);
* **skipped**, with the selection's reason: ``not_raised`` (no LEIR, or its check failed),
  ``below_time_floor``, ``above_time_ceiling``, ``unmeasured``. Kernels that one of the
  ``decontaminate`` folders holds are not in the pool (counted per folder), nor are
  ``duplicates`` (a kernel found again in another workload, or again in the same: one kernel).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .params import Settings
from .records import KernelRecord

__all__ = ["Pool", "answerable_in", "pool", "searched_in", "source_labels"]

STATES = ("searched", "pending", "skipped")


@dataclass
class Pool:
    kernels: list[KernelRecord]                 # the pool, each with its search_status
    state: dict[str, str]                       # kernel id -> searched | pending | skipped
    reason: dict[str, str]                      # kernel id -> why skipped (the status's code)
    sources: dict[str, list[str]]               # kernel id -> the sources it occurs in
    family: dict[str, str]                      # kernel id -> operator family
    duplicates: int | None = None               # kernel occurrences folded into another
    decontamination: dict[str, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)   # pending kernel id -> why it waits
    yields: dict[str, dict] = field(default_factory=dict)     # family -> its searched kernels' yield

    def _table(self, groups: dict[str, list[str]]) -> dict[str, dict[str, int]]:
        out = {}
        for g in sorted(groups, key=lambda g: (-len(groups[g]), g)):
            ids = groups[g]
            row = {"kernels": len(ids)} | {s: sum(1 for i in ids if self.state[i] == s) for s in STATES}
            row["deferred"] = sum(1 for i in ids if i in self.deferred)
            out[g] = row
        return out

    def summary(self) -> dict[str, Any]:
        """JSON-ready: the totals, per source (a kernel that occurs in two sources counts in
        each) and per family, the skip reasons, the decontamination per folder."""
        by_source: dict[str, list[str]] = {}
        by_family: dict[str, list[str]] = {}
        for k in self.kernels:
            for s in self.sources[k.kernel_id]:
                by_source.setdefault(s, []).append(k.kernel_id)
            by_family.setdefault(self.family[k.kernel_id], []).append(k.kernel_id)
        states = Counter(self.state.values())
        return {"kernels": len(self.kernels), **{s: states.get(s, 0) for s in STATES},
                "skipped_by_reason": dict(sorted(Counter(self.reason.values()).items())),
                "deferred": len(self.deferred),
                "deferred_by_reason": dict(sorted(Counter(self.deferred.values()).items())),
                "family_yield": self.yields,
                "duplicates": self.duplicates,
                "decontaminated": None if self.decontamination is None else {
                    f["folder"]: f["dropped"] for f in self.decontamination["folders"]},
                "per_source": self._table(by_source), "per_family": self._table(by_family),
                "decontamination": self.decontamination,
                "seconds": {k: round(v, 1) for k, v in self.seconds.items()}}


def source_labels(refs: Sequence) -> dict[tuple[str, str], str]:
    """(suite, workload) -> the pool source a workload reference stands for: the zoo's suite
    (``ops``, ``fused``, ``arch``, ``leir``), ``problems:FOLDER`` or ``leir-files:PATH``."""
    import os

    from .zoo import workloads as W

    def where(path: str) -> str:
        d = Path(path).parent
        return os.path.relpath(d) if d.is_relative_to(Path.cwd()) else str(d)

    out: dict[tuple[str, str], str] = {}
    for r in refs:
        if r.kind == "registry":
            w = W.get(r.name)
            out[(w.suite, r.name)] = w.suite
        elif r.kind == "problem":
            out[("user", r.name)] = f"problems:{where(r.source)}"
        elif r.kind == "leir":
            out[("user", r.name)] = f"leir-files:{where(r.source)}"
        else:
            out[("user", r.name)] = "user"
    return out


def answerable_in(release: str | Path) -> dict[str, int]:
    """kernel_id -> the release's prompts with a faster answer for each searched kernel
    (``steptp.release.accumulate.Carry.answerable``, from its steps table)."""
    import polars as pl

    from .search.roles import SFT_ROLES

    path = Path(release) / "data" / "steps.parquet"
    if not path.exists():
        return {}
    df = pl.read_parquet(path, columns=["kernel_id", "before_leir", "role"])
    good = df.filter(pl.col("role").is_in(list(SFT_ROLES))).group_by("kernel_id").agg(
        pl.col("before_leir").n_unique().alias("n"))
    return dict(zip(good["kernel_id"].to_list(), good["n"].to_list()))


def searched_in(release: str | Path) -> set[str]:
    """The kernel ids that have a trajectory in a release folder."""
    import polars as pl

    path = Path(release) / "data" / "trajectories.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{release}: not a release folder (no data/trajectories.parquet)")
    return set(pl.read_parquet(path, columns=["kernel_id"])["kernel_id"].to_list())


def pool(s: Settings, *, kernels: Sequence[KernelRecord] | None = None,
         release: str | Path | None = None, duplicates: int | None = None,
         log: Callable[[str], None] = print, console=None) -> Pool:
    """The pool of settings ``s``. ``kernels``: an extraction already made (a kernels table of
    these settings; ``duplicates`` then as its summary says), else the sources are extracted
    here (with progress bars on ``console`` when given). ``release``: a release folder whose
    searched kernels count as searched."""
    from . import pipeline
    from .search.selection import kernel_family

    t0 = time.perf_counter()
    refs = pipeline.extract_refs(s.extract)
    if kernels is None:
        log(f"pool: extracting {len(refs)} workloads ({s.extract.jobs} jobs)")
        res = pipeline.extract(s.extract, progress=console is not None, console=console)
        kernels = list(res.records)
        sm = res.summary()
        duplicates = sm["kernels_found"] - sm["unique_kernels"]
    t1 = time.perf_counter()
    if s.decontaminate.folders:
        log(f"pool: extracting the {len(s.decontaminate.folders)} decontamination folders")
    index = pipeline.contamination_index(s.decontaminate, s.extract.jobs)
    t2 = time.perf_counter()
    labels = source_labels(refs)
    # every candidate ranked on estimates (nothing timed), no cap on their number; the pick's
    # own log (every candidate by name) is the search stage's, not the pool's
    search = s.search.model_copy(update={"max_kernels": None})
    _, every = pipeline.choose_kernels(kernels, search, s.extract, time_fn=lambda ks, th: {},
                                       log=lambda m: None, contamination=index)
    t3 = time.perf_counter()
    done = searched_in(release) if release is not None else set()
    state, reason, sources, family = {}, {}, {}, {}
    for k in every:
        kid = k.kernel_id
        code = k.search_status.split(":", 1)[0]
        if kid in done:
            state[kid] = "searched"
        elif code in ("searched", "not_selected"):
            state[kid] = "pending"
        else:
            state[kid] = "skipped"
            reason[kid] = code or "unknown"
        # a kernel of the larger extraction has a zoo suite whose workload is not in refs
        sources[kid] = sorted({labels.get((o.suite, o.workload), o.suite) for o in k.occurrences})
        family[kid] = kernel_family(k)
    deferred: dict[str, str] = {}
    yields: dict[str, dict] = {}
    if release is not None and s.nightly.accumulate:
        from .search.selection import shard_deferrals

        why, _, yields = shard_deferrals(every, {k: False for k in done}, answerable_in(release),
                                         s.nightly.min_family_yield, s.nightly.yield_min_kernels)
        deferred = {k: ("family yield" if "family" in w else "shape group searched")
                    for k, w in why.items() if state.get(k) == "pending"}
    return Pool(every, state, reason, sources, family, duplicates,
                None if index is None else index.report(),
                {"extract": t1 - t0, "decontaminate": t2 - t1, "select": t3 - t2,
                 "total": t3 - t0}, deferred, yields)
