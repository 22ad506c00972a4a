"""Which kernels a release searches: where time goes in real models, at measurable sizes.

    sel = select(kernels, times, max_kernels=10, floor_s=20e-6, ceiling_s=0.2, max_per_family=3)
    sel.chosen          # KernelRecords to search, best first
    sel.kernels         # every kernel, with ``search_status`` and ``unscheduled_s`` set

* **score** = occurrence weight x unscheduled time: the measured time (``times``, the search
  evaluator's timing of the unscheduled program) when there is one, else the analytic estimate
  from FLOPs and bytes (``steptp.analysis.cost_model.predict``). Weight alone picks the many
  25 ns reshapes of an architecture; time alone picks one big kernel that occurs once;
* **floor**: below ``floor_s`` a timing is mostly call overhead and a step's gain is noise, so
  such a kernel is not searched at that size (``search_status`` says so; the release flow then
  extracts the operator workloads of such kernels at their larger size preset and offers those
  kernels instead, see ``larger_workloads``). Only zoo kernels have a larger size: a kernel
  that occurs in no zoo workload (a user's ``--leir`` file, model or problem folder: suite
  ``user``) is never re-extracted; below the floor it is searched at its own size, last in
  rank, and its status says it is below the floor (``own_below_floor``);
* **ceiling**: above ``ceiling_s`` one timing would eat the search budget; not searched either;
* **families**: at most ``max_per_family`` kernels of one operator family (matmul, conv, norm,
  softmax, ...) while other families have candidates, so a release covers several;
* **yours first** (``first``: the kernels of your own problem and LEIR folders, suite
  ``user``): at or above the floor they are taken before any zoo kernel, by the same score
  among themselves: you listed them to have them searched;
* **deferred** (``defer``: kernel_id -> why; an accumulating nightly's shard, see
  ``shard_deferrals`` below): such kernels are taken only when the others run out:
  a kernel whose shape group (``shape_group``: the same program at other sizes) an earlier
  night or a better-ranked kernel of tonight already searched (curation caps a group's SFT
  examples together), and the kernels of a family whose searched kernels gave few prompts
  with a faster answer.

Ties are broken by kernel id: the choice is deterministic given the times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Collection, Mapping, Optional, Sequence

from ..records import KernelRecord

ARCH_SUITES = frozenset({"arch", "archs"})
#: suites of the zoo's registry (``steptp.zoo.workloads``) whose workloads have size presets;
#: every other suite (``user``: --model, --problems, --leir files) names nothing to re-extract
ZOO_SUITES = frozenset({"ops", "fused", "leir"}) | ARCH_SUITES


def from_zoo(k: KernelRecord) -> bool:
    """Whether the kernel occurs in a zoo workload (one the release flow can extract again at
    another size); a user's own kernel (suite ``user``) does not."""
    return any(o.suite in ZOO_SUITES for o in k.occurrences)

# name fragments -> family, for kernels that only occur inside architectures (fused PrimFuncs)
_NAME_FAMILIES = (("conv", "conv"), ("matmul", "matmul"), ("dense", "matmul"), ("gemm", "matmul"),
                  ("gemv", "matmul"), ("softmax", "softmax"), ("attention", "attention"),
                  ("layer_norm", "norm"), ("rms_norm", "norm"), ("norm", "norm"), ("pool", "pool"),
                  ("gelu", "activation"), ("relu", "activation"), ("tanh", "activation"),
                  ("sigmoid", "activation"), ("sum", "reduction"), ("mean", "reduction"),
                  ("max", "reduction"), ("cumsum", "scan"), ("transpose", "layout"),
                  ("reshape", "layout"), ("concat", "layout"), ("take", "gather"))


def kernel_family(k: KernelRecord) -> str:
    """The operator family of a kernel: its operator workload's family when it occurs in one
    (``steptp.zoo.workloads``), else guessed from its name, else its fused chain's family."""
    fused = None
    try:
        from ..zoo import workloads as W

        for o in sorted(k.occurrences, key=lambda o: o.workload):
            if o.suite in ARCH_SUITES:
                continue
            try:
                fam = W.get(o.workload).family
            except KeyError:
                continue
            if o.suite == "fused":
                fused = fused or fam
            else:
                return fam
    except ImportError:  # the zoo extra is not installed
        pass
    name = re.sub(r"\d+", "", k.name.lower())
    for frag, fam in _NAME_FAMILIES:
        if frag in name:
            return fam
    return fused or "other"


def shape_group(leir: str) -> str:
    """A key equal for kernels that differ only in their shapes (``leir``: a canonical text, the
    ``KernelRecord.leir``): ``steptp.leir.canon.shape_key`` with the floating-point constants
    kept: a GELU and a tanh-approximated GELU are different programs. Curation's diversity caps
    count such kernels as one; the nightly shard searches one of them before the next."""
    from ..leir.canon import shape_key

    return (shape_key(leir) or "")[:16]


def estimate_s(k: KernelRecord) -> Optional[float]:
    """The analytic run-time estimate of the unscheduled kernel (None when it does not parse)."""
    from ..leir import parse
    from ..analysis.cost_model import predict

    try:
        return float(predict(parse(k.leir)))
    except Exception:  # noqa: BLE001 - an unparsable kernel is simply not ranked by estimate
        return None


@dataclass
class Selection:
    chosen: list[KernelRecord]
    kernels: list[KernelRecord]                  # every input kernel, status set
    skipped: dict[str, str] = field(default_factory=dict)   # kernel_id -> why not searched
    time_s: dict[str, float] = field(default_factory=dict)  # kernel_id -> measured or estimated time

    def larger_workloads(self, limit: int | None = None) -> list[str]:
        """Operator workloads (not architectures) all of whose kernels are below the floor: the
        ones worth extracting at a larger size. With ``limit``: one per operator family in turn
        (operator suites before fused chains, heavier first), at most ``limit``."""
        below: dict[str, bool] = {}
        info: dict[str, tuple[int, float, str]] = {}
        for k in self.kernels:
            for o in k.occurrences:
                # architectures are re-extracted whole or not at all; user workloads (a --leir
                # file, a problem) are not in the zoo's registry and have no larger size
                if o.suite in ARCH_SUITES or o.suite not in ZOO_SUITES:
                    continue
                below[o.workload] = below.get(o.workload, True) and k.search_status.startswith("below_time_floor")
                t = self.time_s.get(k.kernel_id) or 0.0
                prev = info.get(o.workload)
                info[o.workload] = (1 if o.suite == "fused" else 0, max(t, prev[1] if prev else 0.0),
                                    kernel_family(k) if prev is None else prev[2])
        names = sorted((w for w, b in below.items() if b), key=lambda w: (info[w][0], -info[w][1], w))
        if limit is None:
            return sorted(names)
        out: list[str] = []
        for fused in (0, 1):   # operator workloads first: a fused chain at full size is heavy
            by_fam: dict[str, list[str]] = {}
            for w in names:
                if info[w][0] == fused:
                    by_fam.setdefault(info[w][2], []).append(w)
            while len(out) < limit and any(by_fam.values()):
                for fam in sorted((f for f in by_fam if by_fam[f]), key=lambda f: names.index(by_fam[f][0])):
                    if len(out) < limit:
                        out.append(by_fam[fam].pop(0))
        return sorted(out)


def _us(s: float) -> str:
    return f"{s * 1e6:.3g} µs"


def select(kernels: Sequence[KernelRecord], times: Mapping[str, Optional[float]] | None = None,
           max_kernels: int | None = 10, floor_s: float = 20e-6, ceiling_s: float | None = 0.2,
           max_per_family: int | None = 3, estimates: Mapping[str, Optional[float]] | None = None,
           own_below_floor: bool = True, defer: Mapping[str, str] | None = None,
           groups: Mapping[str, str] | None = None, first: Collection[str] = ()) -> Selection:
    """``own_below_floor``: a kernel below the floor that is not from the zoo (``from_zoo``)
    stays a candidate, ranked by weight x time like the rest: the floor's remedy, a larger
    size of the same workload, does not exist for it, and a user who brought it expects it
    searched. Its status then ends with ``below the time floor ...``.

    ``defer`` (kernel_id -> why) and ``groups`` (kernel_id -> shape group): a deferred kernel,
    and one whose group a better-ranked chosen kernel holds, is chosen only when the kernels
    that are neither run out (in rank order; the group repeats before the deferred); its
    status says why it waited."""
    times = dict(times or {})
    est = dict(estimates) if estimates is not None else {}
    status: dict[str, str] = {}
    unsched: dict[str, Optional[float]] = {}
    notes: dict[str, str] = {}
    tval: dict[str, float] = {}
    tall: dict[str, float] = {}
    pool = []
    for k in kernels:
        if not k.raise_ok:
            status[k.kernel_id] = "not_raised: the kernel did not raise to LEIR and check"
            continue
        t = times.get(k.kernel_id)
        measured = t is not None
        if t is None:
            t = est[k.kernel_id] if k.kernel_id in est else estimate_s(k)
        unsched[k.kernel_id] = t if measured else None
        if t is None:
            status[k.kernel_id] = "unmeasured: no timing and no estimate"
            continue
        tall[k.kernel_id] = t
        src = "measured" if measured else "estimated"
        if t < floor_s:
            if own_below_floor and not from_zoo(k):
                notes[k.kernel_id] = (f"; below the time floor ({src} {_us(t)} < {_us(floor_s)}), "
                                      f"not a zoo kernel: searched at its own size")
            else:
                status[k.kernel_id] = f"below_time_floor: {src} {_us(t)} < {_us(floor_s)}"
                continue
        if ceiling_s is not None and t > ceiling_s:
            status[k.kernel_id] = f"above_time_ceiling: {src} {t * 1e3:.3g} ms > {ceiling_s * 1e3:.3g} ms"
            continue
        tval[k.kernel_id] = t
        pool.append((-(k.weight * t), k.kernel_id, k))
    # yours ahead of the zoo's, but not below the floor: its steps would time call overhead
    ahead = {kid for kid in first if kid not in notes}
    pool.sort(key=lambda x: (x[1] not in ahead, x[0], x[1]))
    fam = {k.kernel_id: kernel_family(k) for _, _, k in pool}
    chosen: list[KernelRecord] = []
    per: dict[str, int] = {}
    defer = dict(defer or {})
    groups = dict(groups or {})
    held: dict[str, str] = {}            # shape group -> the chosen kernel's name
    waited: dict[str, str] = {}          # kernel_id -> why it was not taken in the first pass
    limit = max_kernels if max_kernels else len(pool)
    for _, kid, k in pool:
        if len(chosen) >= limit:
            break
        if kid in defer:
            waited[kid] = defer[kid]
            continue
        g = groups.get(kid)
        if g is not None and g in held:
            waited[kid] = f"deferred: its shape group is searched tonight ({held[g]})"
            continue
        if max_per_family and per.get(fam[kid], 0) >= max_per_family:
            continue
        chosen.append(k)
        per[fam[kid]] = per.get(fam[kid], 0) + 1
        if g is not None:
            held[g] = k.name
    if len(chosen) < limit:   # fewer families than slots: fill with the best of the rest
        ids = {k.kernel_id for k in chosen}
        rest = [(kid in defer, rank, kid, k) for rank, (_, kid, k) in enumerate(pool) if kid not in ids]
        rest.sort(key=lambda x: (x[0], x[1]))
        chosen += [k for *_, k in rest[:limit - len(chosen)]]
        chosen.sort(key=lambda k: (k.kernel_id not in ahead, -(k.weight * tval[k.kernel_id]), k.kernel_id))
    ids = {k.kernel_id for k in chosen}
    for rank, (_, kid, k) in enumerate(pool):
        if kid in ids:
            status[kid] = f"searched: rank {rank + 1}, family {fam[kid]}" + notes.get(kid, "")
        else:
            status[kid] = (f"not_selected: rank {rank + 1}, family {fam[kid]}" + notes.get(kid, "")
                           + (f"; {waited[kid]}" if kid in waited else ""))
    out = [k.model_copy(update={"search_status": status.get(k.kernel_id, ""),
                                "unscheduled_s": unsched.get(k.kernel_id)}) for k in kernels]
    by_id = {k.kernel_id: k for k in out}
    return Selection([by_id[k.kernel_id] for k in chosen], out,
                     {kid: st for kid, st in status.items() if not st.startswith("searched")}, tall)


def shard_deferrals(kernels: Sequence[KernelRecord], searched: Mapping[str, bool],
                    answerable: Mapping[str, int], min_family_yield: float = 0.0,
                    min_kernels: int = 5) -> tuple[dict[str, str], dict[str, str], dict[str, dict]]:
    """What an accumulating nightly's shard defers (``select``'s ``defer`` and ``groups``),
    from the kernels earlier nights searched (``searched``: kernel_id -> stale?) and what they
    gave (``answerable``: kernel_id -> prompts with a faster answer, ``Carry.answerable``):

    * a never-searched kernel whose shape group an earlier night searched: curation counts the
      group as one for its caps, so a new group teaches more;
    * every never-searched kernel of a family whose searched kernels (at least ``min_kernels``
      of them) gave fewer than ``min_family_yield`` prompts with a faster answer each, on
      average: elementwise chains the compiler already vectorizes, arg-reductions, copies.

    Returns (defer, groups: kernel_id -> shape group, yields: family -> {"kernels",
    "answerable_per_kernel", "deferred"})."""
    fam = {k.kernel_id: kernel_family(k) for k in kernels}
    groups = {k.kernel_id: shape_group(k.leir) for k in kernels if k.leir}
    names = {k.kernel_id: k.name for k in kernels}
    per: dict[str, list[int]] = {}
    for kid in sorted(searched):
        if kid in fam:
            per.setdefault(fam[kid], []).append(int(answerable.get(kid, 0)))
    yields: dict[str, dict] = {}
    for f, v in sorted(per.items()):
        y = sum(v) / len(v)
        yields[f] = {"kernels": len(v), "answerable_per_kernel": round(y, 3),
                     "deferred": len(v) >= min_kernels and y < min_family_yield}
    seen = {}
    for kid in sorted(searched):
        if kid in groups:
            seen.setdefault(groups[kid], names[kid])
    defer: dict[str, str] = {}
    for k in kernels:
        kid = k.kernel_id
        if kid in searched:
            continue
        y = yields.get(fam[kid])
        if y is not None and y["deferred"]:
            defer[kid] = (f"deferred: family {fam[kid]} gave {y['answerable_per_kernel']:.2g} prompts with "
                          f"a faster answer per searched kernel ({y['kernels']} searched), below "
                          f"nightly.min_family_yield {min_family_yield:g}")
        elif groups.get(kid) in seen:
            defer[kid] = f"deferred: its shape group was searched on an earlier night ({seen[groups[kid]]})"
    return defer, groups, yields


__all__ = ["shard_deferrals", "Selection", "select", "kernel_family", "shape_group", "estimate_s", "from_zoo", "ZOO_SUITES"]
