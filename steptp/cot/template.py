"""The template writer: offline, deterministic reasoning built only from ``facts(step)``.

Every field is assembled from the facts; the wording varies by a choice seeded from the step's
identity and the run seed (SHA-256, never Python's salted ``hash``), so the dataset is not one
sentence repeated while a rebuild gives the same text. Alternatives considered come from the
strategy registry's own enumeration on the before-program (legal ones and refused ones with the
refusal reason). Its output passes :func:`steptp.cot.validate.validate` by construction (the
tests check this over many steps).
"""

from __future__ import annotations

import functools
import hashlib
import random
from typing import Any, Optional

from .. import strategies as S
from ..leir.parser import parse
from ..records import StepRecord
from .facts import Facts, ProgramFacts, StmtFact, facts as compute_facts
from .schema import (Bottleneck, Candidate, Check, Cot, Decision, ExpectedEffect, Observation)

WRITER_VERSION = "template-1"

# Strategies that change structure only: their payoff comes from a later step.
STRUCTURAL = {"loop_split", "loop_tiling", "loop_reorder", "reduction_factorization", "compute_at",
              "loop_fusion"}
ENABLES = {
    "loop_split": ("loop_vectorization", "loop_unrolling", "loop_parallelization"),
    "loop_tiling": ("loop_vectorization", "loop_parallelization", "loop_unrolling"),
    "loop_reorder": ("loop_vectorization", "loop_parallelization"),
    "reduction_factorization": ("loop_vectorization", "loop_parallelization"),
    "compute_at": ("loop_parallelization", "loop_fusion"),
    "loop_fusion": ("loop_parallelization", "loop_vectorization"),
}


def _fmt_time(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if s >= scale or unit == "ns":
            return f"{s / scale:.3g} {unit}"
    return f"{s:.3g} s"  # pragma: no cover


def _fmt_bytes(b: int) -> str:
    if b >= 1 << 20 and b % (1 << 10) == 0:
        return f"{b / (1 << 20):.3g} MiB"
    if b >= 1 << 10 and b % (1 << 10) == 0:
        return f"{b // (1 << 10)} KiB"
    return f"{b} bytes"


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(str(d) for d in shape) if shape else "a scalar"


def target_kind(target: str) -> str:
    t = (target or "").lower()
    return "gpu" if any(w in t for w in ("cuda", "gpu", "nvptx", "rocm")) else "cpu"


@functools.lru_cache(maxsize=128)
def _enumerate(text: str, target: str) -> tuple[tuple, tuple]:
    """The registry's legal and refused applications on a program (cached: steps of one
    trajectory share before-programs)."""
    try:
        cands, rejected = S.candidates(parse(text), target=target, seed=0, max_per_site=1,
                                       with_rejected=True)
    except Exception:  # noqa: BLE001 - alternatives are best effort; the writer falls back
        return (), ()
    return tuple(cands), tuple(rejected)


class _Pick:
    """Seeded choices: one ``random.Random`` per (seed, step identity)."""

    def __init__(self, seed: int, key: str):
        h = hashlib.sha256(f"{WRITER_VERSION}|{seed}|{key}".encode()).digest()
        self.rng = random.Random(int.from_bytes(h[:8], "big"))

    def __call__(self, *options: str) -> str:
        return self.rng.choice(options)

    def sample(self, items: list, k: int) -> list:
        if len(items) <= k:
            return list(items)
        idx = sorted(self.rng.sample(range(len(items)), k))
        return [items[i] for i in idx]


class TemplateWriter:
    """``write(step) -> Cot``. Deterministic given (step, seed)."""

    name = "template"
    version = WRITER_VERSION

    def __init__(self, seed: int = 0, max_alternatives: int = 2):
        self.seed = seed
        self.max_alternatives = max_alternatives

    # ------------------------------------------------------------------ pieces
    def _observation(self, f: Facts, pick: _Pick) -> Observation:
        p = f.before
        ins = [t for t in p.tensors.values() if t.role == "input"]
        outs = [t for t in p.tensors.values() if t.role == "output"]
        mids = [t for t in p.tensors.values() if t.role == "intermediate"]
        io = ", ".join(f"`{t.name}` ({_shape(t.shape)} {t.dtype})" for t in ins)
        od = ", ".join(f"`{t.name}` ({_shape(t.shape)})" for t in outs)
        hot = p.hot_statement
        s1 = pick(f"`{f.kernel}` reads {io} and writes {od}",
                  f"The kernel `{f.kernel}` maps {io} to {od}",
                  f"Inputs {io}; outputs {od}")
        if mids:
            s1 += pick(f", through the intermediate{'s' if len(mids) > 1 else ''} "
                       + ", ".join(f"`{t.name}`" for t in mids),
                       f", staging values in " + ", ".join(f"`{t.name}`" for t in mids))
        s1 += ". "
        if hot.reduction_axes:
            s1 += pick(f"Its main statement `{hot.text}` reduces over "
                       + ", ".join(f"`{v}`" for v in hot.reduction_axes) + ".",
                       f"The heavy statement is the reduction `{hot.text}` (over "
                       + ", ".join(f"`{v}`" for v in hot.reduction_axes) + ").")
        else:
            s1 += pick(f"Its main statement is `{hot.text}`.",
                       f"Most of the arithmetic is in `{hot.text}`.")
        nest = ", ".join(f"`{lp.var}` {lp.extent}" for lp in p.loops if lp.var in hot.loops)
        w = [pick(f"{p.flops} operations against {p.bytes_moved} bytes of compulsory traffic "
                  f"(arithmetic intensity {p.arithmetic_intensity:.2f} FLOP/B).",
                  f"Arithmetic intensity is {p.arithmetic_intensity:.2f} FLOP/B: {p.flops} operations, "
                  f"{p.bytes_moved} bytes moved.",
                  f"The program does {p.flops} operations and moves {_fmt_bytes(p.bytes_moved)} "
                  f"(intensity {p.arithmetic_intensity:.2f} FLOP/B).")]
        if nest:
            w.append(pick(f"The hot statement runs {hot.iterations} iterations under loops {nest} "
                          f"({hot.flops} operations).",
                          f"Loop extents around it: {nest}; {hot.iterations} iterations, "
                          f"{hot.flops} operations."))
        strided = [a for a in hot.accesses if a.stride not in (None, 0, 1) and not a.write]
        unit = [a for a in hot.accesses if a.stride == 1]
        if hot.innermost and (strided or unit):
            parts = []
            if unit:
                parts.append(", ".join(f"`{a.text}`" for a in unit) + " contiguous (stride 1)")
            if strided:
                parts.append(", ".join(f"`{a.text}` with stride {a.stride}" for a in strided))
            w.append(pick(f"In the innermost loop `{hot.innermost}`: " + "; ".join(parts) + ".",
                          f"Along `{hot.innermost}` (innermost) the accesses are " + "; ".join(parts) + "."))
        big = max(p.footprint_bytes.items(), key=lambda kv: kv[1], default=None)
        if big and pick("yes", "no") == "yes":
            w.append(f"The largest footprint is `{big[0]}` at {_fmt_bytes(big[1])}.")
        if f.before_s is not None:
            w.append(pick(f"It currently runs in {_fmt_time(f.before_s)} (median).",
                          f"Measured median runtime now: {_fmt_time(f.before_s)}.",
                          f"Current median time is {_fmt_time(f.before_s)}."))
        return Observation(computes=s1, work=" ".join(w))

    def _site_loop(self, f: Facts):
        loops = f.site.get("loops") or []
        for v in loops:
            lp = f.before.loop(v)
            if lp is not None:
                return lp
        return None

    def _bottleneck(self, f: Facts, pick: _Pick) -> Bottleneck:
        p = f.before
        hot = p.hot_statement
        lp = self._site_loop(f)
        loop = lp.var if lp else None
        strided = [a for a in hot.accesses if a.stride not in (None, 0, 1) and not a.write]
        ai = f"{p.arithmetic_intensity:.2f} FLOP/B"
        s = f.strategy
        if s in ("loop_parallelization", "loop_binding"):
            kind = "parallelism"
            text = pick(f"Every iteration runs on one {'thread' if target_kind(f.target) == 'cpu' else 'lane'}; "
                        f"loop `{loop}` carries no dependence, so its {lp.extent if lp else ''} iterations "
                        f"could run concurrently.",
                        f"The work is serial although loop `{loop}` has independent iterations.")
        elif s == "loop_vectorization":
            kind = "vectorization"
            text = pick(f"The innermost loop `{loop}` is scalar; its iterations are independent and "
                        f"its accesses can be issued as vector operations.",
                        f"Scalar code in loop `{loop}`: one element per instruction where SIMD lanes "
                        f"could do several.")
        elif s == "loop_unrolling":
            kind = "loop_overhead"
            text = pick(f"Loop `{loop}` runs {lp.extent if lp else ''} short iterations whose "
                        f"increment-and-branch overhead is comparable to the body.",
                        f"The body under `{loop}` is small, so loop control is a visible share of "
                        f"the work.")
        elif s == "reduction_factorization":
            kind = "dependence"
            text = pick(f"The reduction over `{loop}` is one serial chain of updates to "
                        f"`{hot.tensor}`: neither parallelizable nor vectorizable as written.",
                        f"Every iteration of `{loop}` accumulates into the same element of "
                        f"`{hot.tensor}`, a loop-carried dependence.")
        elif s in ("compute_at", "loop_fusion"):
            kind = "locality"
            mids = [t for t in p.tensors.values() if t.role == "intermediate"]
            tname = mids[0].name if mids else hot.tensor
            text = pick(f"Separate nests write `{tname}` completely before it is read back, a round "
                        f"trip through memory at intensity {ai}.",
                        f"Producer and consumer live in different nests, so `{tname}` is written "
                        f"and re-read instead of staying in cache.")
            return Bottleneck(kind=kind, loop=loop, tensor=tname, text=text)
        elif strided:
            kind = "locality"
            a = strided[0]
            text = pick(f"`{a.text}` is read with stride {a.stride} in the innermost loop "
                        f"`{hot.innermost}`, touching a new cache line almost every iteration.",
                        f"Poor locality: the innermost loop `{hot.innermost}` walks `{a.text}` with "
                        f"stride {a.stride}.")
            return Bottleneck(kind=kind, loop=loop or hot.innermost, tensor=a.tensor, text=text)
        elif p.arithmetic_intensity < 4:
            kind = "memory"
            text = pick(f"At {ai} the kernel is bound by memory traffic, not arithmetic.",
                        f"Low arithmetic intensity ({ai}): bandwidth limits it.")
        else:
            kind = "structure"
            text = pick(f"The loop structure around `{hot.tensor}` fixes how the work can be "
                        f"scheduled; at {ai} the arithmetic dominates.",
                        f"The current loop nest leaves no room for the next optimization.")
        return Bottleneck(kind=kind, loop=loop, tensor=None, text=text)

    def _chosen_reason(self, f: Facts, pick: _Pick) -> str:
        lp = self._site_loop(f)
        v = f"`{lp.var}`" if lp else "the site"
        s = f.strategy
        prm = f.params
        if s == "loop_split":
            return pick(f"split {v} by {prm.get('factor')} to expose an inner loop of that extent.",
                        f"an inner loop of {prm.get('factor')} iterations is what later steps need.")
        if s == "loop_tiling":
            fs = " and ".join(str(x) for x in prm.get("factors", []))
            return pick(f"tiles of {fs} keep the working set small between reuses.",
                        f"tiling by {fs} improves reuse in cache.")
        if s == "loop_reorder":
            order = ", ".join(f"`{x}`" for x in prm.get("order", []))
            return pick(f"the order {order} puts the contiguous dimension innermost.",
                        f"reordering to {order} changes which access is contiguous.")
        if s == "loop_parallelization":
            return pick(f"{v} carries no dependence, so its iterations can run on several cores.",
                        f"independent iterations of {v}: use the cores.")
        if s == "loop_vectorization":
            return pick(f"{v} is innermost, independent and of a power-of-two extent.",
                        f"SIMD over {v}.")
        if s == "loop_unrolling":
            return pick(f"{v} is short; unrolling removes its loop control.",
                        f"unrolling {v} exposes straight-line code to the compiler.")
        if s == "reduction_factorization":
            return pick(f"partial sums over {v} break the serial accumulation chain.",
                        f"rfactor turns the reduction over {v} into independent partial results.")
        if s in ("compute_at", "loop_fusion"):
            return pick("bringing producer and consumer together keeps the intermediate in cache.",
                        "fusing the nests removes a round trip through memory.")
        return f"applies `{s}` at this site."

    def _alternatives(self, f: Facts, pick: _Pick, bottleneck: Bottleneck) -> list[Candidate]:
        cands, rejected = _enumerate(f.before_text, target_kind(f.target))
        legal: dict[str, Any] = {}
        for c in cands:
            if c.strategy != f.strategy:
                legal.setdefault(c.strategy, c)
        refused: dict[str, Any] = {}
        for r in rejected:
            if r.strategy != f.strategy and r.strategy not in legal and "no-op" not in r.reason \
                    and "duplicate" not in r.reason:
                refused.setdefault(r.strategy, r)
        out: list[Candidate] = []
        for name in pick.sample(sorted(legal), max(1, self.max_alternatives - (1 if refused else 0))):
            c = legal[name]
            loops = ", ".join(f"`{v}`" for v in c.site.loops)
            reason = pick(f"legal at {loops or 'its site'}, but it does not address the "
                          f"{bottleneck.kind.replace('_', ' ')} problem first.",
                          f"possible, but less useful than `{f.strategy}` for the "
                          f"{bottleneck.kind.replace('_', ' ')} issue right now.",
                          f"legal; kept for a later step.")
            out.append(Candidate(strategy=name, site=c.site.to_json(), params=dict(c.params) or None,
                                 verdict="rejected", reason=reason))
        if refused:
            name = pick.sample(sorted(refused), 1)[0]
            r = refused[name]
            reason = self._refusal(f, r.reason, pick)
            out.append(Candidate(strategy=name, site=r.site.to_json(), params=dict(r.params) or None,
                                 verdict="rejected", reason=reason))
        if not out:  # nothing enumerated: name a registered strategy that is not applied
            others = [n for n in S.names() if n != f.strategy]
            if others:
                out.append(Candidate(strategy=pick.sample(others, 1)[0], verdict="rejected",
                                     reason="not applicable to this program as it stands."))
        return out

    @staticmethod
    def _refusal(f: Facts, reason: str, pick: _Pick) -> str:
        from .validate import cited_numbers, named_identifiers, number_matches, SMALL_COUNTS
        allowed = set(f.names_before) | set(S.names())
        ok = all(n in allowed for n in named_identifiers(reason))
        for num, unit, _ in cited_numbers(reason, [f.before_text]):
            if not (not unit and float(num.replace(",", "")) in SMALL_COUNTS) and \
                    not number_matches(num, unit, f.numbers.values()):
                ok = False
        if ok and reason:
            return pick("illegal here: ", "refused: ") + reason.rstrip(".") + "."
        return pick("the legality check refuses it at this site.", "not legal at this site.")

    def _effect(self, f: Facts, pick: _Pick) -> ExpectedEffect:
        s = f.strategy
        sp = f.step_speedup
        tol = max(0.03, f.noise)
        lp = self._site_loop(f)
        enables = next((e for e in ENABLES.get(s, ()) if e in S.names()), None)
        if sp is None:
            direction = "preparatory" if s in STRUCTURAL and enables else "faster"
        elif sp > 1 + tol:
            direction = "faster"
        elif s in STRUCTURAL and enables:
            direction = "preparatory"
        elif sp >= 1 - 2 * tol:
            direction = "neutral"
        else:
            direction = "slower"
        if direction == "faster":
            text = pick("less time per call: the step removes part of the bottleneck.",
                        "a shorter runtime, since the limiting resource is used better.",
                        "faster, as the same work is scheduled more efficiently.")
        elif direction == "preparatory":
            v = f"`{lp.var}`" if lp else "this nest"
            text = pick(f"little change by itself; the new loop structure around {v} is what "
                        f"`{enables}` needs next.",
                        f"mostly structural: it sets up `{enables}`.")
        elif direction == "neutral":
            text = pick("about the same runtime; the compiler already handles this well.",
                        "little change expected at this size.")
        else:
            text = pick("probably slower: the added loop control outweighs the gain at this size.",
                        "likely a small slowdown; kept to show the trade-off.")
        return ExpectedEffect(direction=direction, enables=enables if direction == "preparatory" else None,
                              text=text)

    def _check(self, f: Facts, pick: _Pick) -> Check:
        outs = list(f.outputs)
        o = ", ".join(f"`{x}`" for x in outs)
        if f.exactness == "exact":
            text = pick(f"every element of {o} is computed by the same operations in the same order, "
                        f"so the results must be bit-identical.",
                        f"the rewrite only changes iteration order or structure, not arithmetic: "
                        f"{o} must match exactly.")
        elif f.exactness == "reassociation":
            text = pick(f"floating-point sums are regrouped, so {o} must match up to rounding.",
                        f"the reduction order changes; {o} must agree within floating-point tolerance.")
        else:
            text = pick(f"an algebraic identity is used; {o} must agree within tolerance.",
                        f"{o} must stay mathematically equal (within tolerance).")
        return Check(exactness=f.exactness, outputs=outs, text=text)

    # ------------------------------------------------------------------ entry point
    def write(self, step: StepRecord, f: Optional[Facts] = None) -> Cot:
        f = f if f is not None else compute_facts(step)
        pick = _Pick(self.seed, f.step_key)
        obs = self._observation(f, pick)
        bott = self._bottleneck(f, pick)
        chosen = Candidate(strategy=step.strategy, site=dict(step.site), params=dict(step.params) or None,
                           verdict="chosen", reason=self._chosen_reason(f, pick))
        alts = self._alternatives(f, pick, bott)
        cands = [chosen] + alts
        if pick("first", "shuffled") == "shuffled":
            cands = alts[:1] + [chosen] + alts[1:]
        return Cot(observation=obs, bottleneck=bott, candidates=cands,
                   decision=Decision(strategy=step.strategy, site=dict(step.site), params=dict(step.params)),
                   expected_effect=self._effect(f, pick), check=self._check(f, pick))


__all__ = ["TemplateWriter", "WRITER_VERSION", "target_kind"]
