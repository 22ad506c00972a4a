"""When is one measured program faster than another: THE rule behind every "faster" label.

    rule = SignificanceRule(min_gain=0.05, spread_factor=1.0, max_spread=0.25)
    rule.compare(before, after)     # "faster" | "slower" | "same" | "noisy"

A timing is a median over repeats with its spread (interquartile range / median). Two medians
alone say nothing about noise, so the rule asks for a gap wider than the noise:

* ``noisy``: either timing's spread is above ``max_spread`` (or not finite): nothing is decided;
* ``margin = max(min_gain, spread_factor x max(spread_before, spread_after))``;
* ``faster``: ``before.median / after.median > 1 + margin``;
* ``slower``: ``after.median / before.median > 1 + margin``;
* ``same`` otherwise.

``clearly_slower`` is the stricter test by which a search's timing may stop early: the fastest
repeat so far, not the median, must be slower than the reference beyond the margin.

So with 3% and 8% spreads the after-program must be more than 8% faster; with spreads under
``min_gain`` the gain must exceed ``min_gain``. The search's ``improved`` outcome, the step roles
(``steptp.search.roles``) and curation's ``noisy`` reject all use this one rule.

Timings taken minutes apart drift together with the machine (other processes, clocks), so the
pairs that decide a label are re-timed interleaved (A, B, A, B, ...):
``interleaved(time_fn, programs, rounds)`` divides out each round's common drift and
``combine``s the rounds (median of the rounds' medians, with a spread that also covers the
rounds' remaining disagreement).
"""

from __future__ import annotations

import hashlib
import math
import statistics
from typing import Callable, Literal, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ..records import Timing

Verdict = Literal["faster", "slower", "same", "noisy"]


class SignificanceRule(BaseModel):
    """The parameters of the rule (``params.yaml`` → ``significance``: ``min_gain``,
    ``spread_factor``, ``max_spread``; ``steptp.params.Significance``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_gain: float = Field(0.05, ge=0, description="the smallest relative gain that counts")
    spread_factor: float = Field(1.0, ge=0, description="the gain must exceed this x the larger spread")
    max_spread: float = Field(0.25, gt=0, description="a timing noisier than this decides nothing")

    def noisy(self, t: Optional[Timing]) -> bool:
        return t is None or not math.isfinite(t.spread) or t.spread > self.max_spread

    def margin(self, before: Timing, after: Timing) -> float:
        return max(self.min_gain, self.spread_factor * max(before.spread, after.spread))

    def compare(self, before: Optional[Timing], after: Optional[Timing]) -> Verdict:
        """Is ``after`` significantly faster than ``before``?"""
        if self.noisy(before) or self.noisy(after) or before.median_s <= 0 or after.median_s <= 0:
            return "noisy"
        m = self.margin(before, after)
        if before.median_s / after.median_s > 1 + m:
            return "faster"
        if after.median_s / before.median_s > 1 + m:
            return "slower"
        return "same"

    def faster(self, before: Optional[Timing], after: Optional[Timing]) -> bool:
        return self.compare(before, after) == "faster"

    def clearly_slower(self, reference: Optional[Timing], partial: Optional[Timing]) -> bool:
        """May a timing stop early (``measure.timing``'s ``stop``): even the FASTEST of its
        repeats so far is slower than ``reference``'s median by more than the margin (both
        spreads, the partial one's over its few repeats), and neither is noisy. Stricter than
        ``compare(reference, partial) == "slower"``, which looks at the median."""
        if self.noisy(reference) or self.noisy(partial) or reference.median_s <= 0:
            return False
        return partial.min_s / reference.median_s > 1 + self.margin(reference, partial)

    def near(self, before: Optional[Timing], after: Optional[Timing], band: float = 2.0) -> bool:
        """Could the verdict flip on a re-measurement: the log ratio lies within a factor
        ``band`` of the log margin on either side (noisy pairs are near too: re-timing may
        settle them)."""
        if before is None or after is None or before.median_s <= 0 or after.median_s <= 0:
            return False
        if self.noisy(before) or self.noisy(after):
            return True
        t = math.log1p(self.margin(before, after))
        r = abs(math.log(before.median_s / after.median_s))
        return t / band <= r <= t * band


def combine(timings: Sequence[Timing]) -> Timing:
    """One timing of several rounds of the same program: the median of the rounds' medians; the
    spread is the larger of the rounds' median spread and their range over the median (drift
    between rounds is noise too)."""
    ts = list(timings)
    if not ts:
        raise ValueError("combine() of no timings")
    meds = [t.median_s for t in ts]
    med = statistics.median(meds)
    within = statistics.median(t.spread for t in ts)
    between = (max(meds) - min(meds)) / med if med > 0 else math.inf
    return Timing(median_s=med, min_s=min(t.min_s for t in ts), spread=max(within, between),
                  repeats=sum(t.repeats for t in ts), number=ts[0].number,
                  noisy=any(t.noisy for t in ts))


def interleaved(time_fn: Callable[[str], Optional[Timing]], programs: Sequence[str],
                rounds: int = 3) -> list[Optional[Timing]]:
    """Time ``programs`` round-robin ``rounds`` times (A, B, A, B, ...) with ``time_fn`` (which
    must not answer from a cache) and combine each program's rounds; None for a program that
    failed in any round.

    Drift that hits a whole round alike (the machine's load, clocks) is what interleaving is
    for: each round's timings are divided by that round's drift factor (the geometric mean of
    its medians over the overall geometric mean) before they are combined, so the combined
    spread keeps only the noise that differs between the programs."""
    got: list[list[Timing]] = [[] for _ in programs]
    failed = [False] * len(programs)
    for _ in range(max(1, rounds)):
        for i, p in enumerate(programs):
            if failed[i]:
                continue
            t = time_fn(p)
            if t is None:
                failed[i] = True
            else:
                got[i].append(t)
    if any(failed) or not programs:
        return [None if failed[i] or not got[i] else combine(got[i]) for i in range(len(programs))]
    n = min(len(g) for g in got)
    logs = [[math.log(g[r].median_s) for g in got] for r in range(n)]
    overall = statistics.fmean(x for row in logs for x in row)
    factor = [math.exp(statistics.fmean(row) - overall) for row in logs]
    out = []
    for g in got:
        scaled = [t.model_copy(update={"median_s": t.median_s / factor[r], "min_s": t.min_s / factor[r]})
                  for r, t in enumerate(g[:n])]
        out.append(combine(scaled))
    return out


def remembered(interleave: Callable[..., list[Optional[Timing]]], cache, target_key: str,
               fingerprint_id: str, config_hash: str) -> Callable[..., list[Optional[Timing]]]:
    """``interleave`` whose complete results are kept in the measurement ``cache`` (under the
    group of programs, the rounds, the fingerprint and the timing config), so a second build
    of the same night (``dvc repro``, then the Prefect flow) decides on the same re-timings
    instead of a second draw of the noise. The cache's age and night rules apply as for
    single timings; an incomplete group (a program failed) is not kept."""
    from .cache import program_hash

    def run(time_fn: Callable[[str], Optional[Timing]], programs: Sequence[str],
            rounds: int = 3) -> list[Optional[Timing]]:
        group = "\n".join([f"interleaved/{max(1, rounds)}"] + [program_hash(p) for p in programs])
        key = "interleaved:" + hashlib.sha256(group.encode()).hexdigest()[:32]
        hit = cache.get_timing(key, target_key, fingerprint_id, config_hash)
        if hit is not None and len(hit.get("timings", ())) == len(programs):
            return [Timing(**t) for t in hit["timings"]]
        out = interleave(time_fn, programs, rounds)
        if out and all(t is not None for t in out):
            cache.put_timing(key, target_key, fingerprint_id, config_hash,
                             {"timings": [t.model_dump() for t in out]})
        return out

    return run


def uncached_timer(target, config, backend=None) -> Callable[[str], Optional[Timing]]:
    """A ``time_fn`` for :func:`interleaved`: the Measurer service (isolated worker, device
    lock; or the RPC ``backend``'s devices) without its result cache, so every call really
    times. Close it with ``.close()``."""
    from .runner.local import Measurer

    m = Measurer(target, config, cache=None, backend=backend)

    def time_fn(program: str) -> Optional[Timing]:
        return m.time_many([program])[0].timing

    time_fn.close = m.close  # type: ignore[attr-defined]
    return time_fn


__all__ = ["SignificanceRule", "Verdict", "combine", "interleaved", "remembered", "uncached_timer"]
