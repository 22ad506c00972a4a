"""Early stop of a search's timings: a candidate whose first repeats are clearly slower than the
search's best time ends there, and no "faster" label may rest on such a short timing."""

from __future__ import annotations

import pytest

from steptp.measure.significance import SignificanceRule
from steptp.records import Timing

RULE = SignificanceRule()


def _t(median, spread=0.02, lo=None, repeats=3):
    return Timing(median_s=median, min_s=median * 0.99 if lo is None else lo, spread=spread,
                  repeats=repeats, number=1)


def test_clearly_slower_asks_the_fastest_repeat_to_clear_the_margin():
    best = _t(1.0, spread=0.03, repeats=5)
    assert RULE.clearly_slower(best, _t(1.5))
    # the median is far slower, but one repeat came within the margin: no early stop
    assert RULE.compare(best, _t(1.5, lo=1.04)) == "slower"
    assert not RULE.clearly_slower(best, _t(1.5, lo=1.04))
    # a wide spread widens the margin
    assert not RULE.clearly_slower(best, _t(1.3, spread=0.24, lo=1.2))
    # nothing noisy decides anything
    assert not RULE.clearly_slower(best, _t(3.0, spread=0.5))
    assert not RULE.clearly_slower(_t(1.0, spread=0.4, repeats=5), _t(3.0))


# ---------------------------------------------------------------------------- real timings
tvm = pytest.importorskip("tvm")

from steptp.measure import MeasureConfig, Measurer  # noqa: E402
from steptp.measure.cache import Cache  # noqa: E402

from test_measure import MATMUL, MATMUL_SPLIT  # noqa: E402

FAST = dict(min_repeat_ms=2, repeats=5, remeasure_tries=0, timeout_s=30, num_threads=1)


def test_a_timing_clearly_slower_than_the_reference_stops_and_is_not_cached(tmp_path):
    with Measurer(None, MeasureConfig(**FAST), cache=Cache(tmp_path / "c.sqlite"),
                  lock_directory=tmp_path, speed_of_light=False) as m:
        fast = Timing(median_s=1e-9, min_s=1e-9, spread=0.01, repeats=5, number=1)
        slow = Timing(median_s=10.0, min_s=10.0, spread=0.01, repeats=5, number=1)
        # (a loaded machine may spread 3 short repeats past the default rule's 0.25: this rule
        # lets no spread stand in the way)
        lax = SignificanceRule(max_spread=100)
        assert m.verify_many([(MATMUL, MATMUL_SPLIT)])[0].passed
        stopped = m.time_many([MATMUL_SPLIT], stop_if_slower_than=fast, rule=lax)[0]
        assert stopped.stopped_early and stopped.timing.repeats == 3
        assert m.stats["stopped_early"] == 1
        # the next caller gets a full timing, measured anew (the short one was not cached), of
        # the module verification built (the worker kept it)
        full = m.time_many([MATMUL_SPLIT])[0]
        assert not full.cached and not full.stopped_early and full.timing.repeats == 5
        assert m.stats["rebuilds"] == 0
        # against a reference it may beat, the timing runs in full
        m2 = m.time_many([MATMUL], stop_if_slower_than=slow, rule=lax, use_cache=False)[0]
        assert not m2.stopped_early and m2.timing.repeats == 5


# ---------------------------------------------------------------------------- the search
class _WrongStop:
    """Times from a table; the timing of ``stop_on`` stops early and WRONGLY: its first repeats
    were hit by a burst of load, three times its real time (the worst case the rule cannot
    see)."""

    target = "cpu"
    num_threads = 1
    fingerprint = "table"
    early_stop = True

    def __init__(self, times: dict[str, float], stop_on: str):
        self.times, self.stop_on, self.calls = times, stop_on, []

    def verify(self, original, candidate, exactness):
        from steptp.measure.runner.base import VerifyOutcome
        from steptp.measure.verify import VerifyResult

        return VerifyOutcome(result=VerifyResult(passed=True, exactness=exactness))

    def time(self, program, slower_than=None):
        from steptp.measure.runner.base import TimingOutcome

        self.calls.append((program, slower_than is not None))
        m = self.times[program]
        if program == self.stop_on and slower_than is not None:
            return TimingOutcome(timing=_t(3 * m), stopped_early=True)
        return TimingOutcome(timing=_t(m, repeats=5))

    def close(self):
        pass


def test_a_wrong_early_stop_cannot_label_a_slower_child_faster():
    from steptp.leir import parse
    from steptp.leir.canon import canonical_text, canonicalize
    from steptp.search import Budget, Search
    from steptp.search.run import IMPROVE_RULE
    from steptp.search.space import actions

    loops = ["loop_split", "loop_reorder"]
    root = canonical_text(canonicalize(parse(MATMUL))[0])
    first = Search(parse(MATMUL), "mm", "beam", Budget(8, 1e9), 0, _WrongStop({root: 1.0}, ""),
                   strategies=loops)
    b, x = first.pop(first.root), first.pop(first.root)     # two rewrites of the kernel
    y = next(c for c in actions(x.program, strategies=loops) if c.text not in (root, b.text))
    # real times: root 1.0, B 0.2 (the best), X 0.5 (its timing stops, wrongly, at 1.5), and
    # X's child Y 0.75: slower than X
    ev = _WrongStop({root: 1.0, x.text: 0.5, y.text: 0.75, b.text: 0.2}, stop_on=x.text)
    s = Search(parse(MATMUL), "mm", "beam", Budget(8, 1e9), 0, ev,
               strategies=["loop_split", "loop_reorder"])
    nb = s.evaluate(s.root, b)
    nx = s.evaluate(s.root, x)
    assert s.best is nb and nx.partial and nx.timing.median_s == 1.5   # stopped, wrongly
    short = nx.timing
    ny = s.evaluate(nx, y)
    # without the full re-timing Y (0.75) would be "faster" than X's short 1.5, though it is
    # slower than X's real 0.5
    assert IMPROVE_RULE.faster(short, ny.timing)
    row_x = next(r for r in s.steps if r.after_leir == nx.leir)
    row_y = next(r for r in s.steps if r.after_leir == ny.leir)
    assert row_y.outcome == "not_improved" and row_y.before is row_x.after
    assert row_x.after.median_s == 0.5 and row_x.after.repeats == 5 and not nx.partial
    assert row_x.outcome == "improved" and s.retimed == 1
    # the re-timing was a full one (no early stop asked), and so was every before
    assert ev.calls.count((x.text, False)) == 1
    assert all(r.before.repeats == 5 for r in s.steps)


class _RuleStop:
    """Times from a table; a timing given ``slower_than`` stops after 3 repeats exactly when
    the rule says its repeats are clearly slower than that reference."""

    target = "cpu"
    num_threads = 1
    fingerprint = "table"
    early_stop = True

    def __init__(self, times: dict[str, float]):
        self.times, self.refs = times, {}

    def verify(self, original, candidate, exactness):
        from steptp.measure.runner.base import VerifyOutcome
        from steptp.measure.verify import VerifyResult

        return VerifyOutcome(result=VerifyResult(passed=True, exactness=exactness))

    def time(self, program, slower_than=None):
        from steptp.measure.runner.base import TimingOutcome

        self.refs[program] = slower_than
        m = self.times[program]
        if slower_than is not None and RULE.clearly_slower(slower_than, _t(m)):
            return TimingOutcome(timing=_t(m), stopped_early=True)
        return TimingOutcome(timing=_t(m, repeats=5))

    def close(self):
        pass


def test_the_search_stops_a_child_clearly_slower_than_its_parent_not_one_only_slower_than_the_best():
    from steptp.leir import parse
    from steptp.leir.canon import canonical_text, canonicalize
    from steptp.search import Budget, Search

    loops = ["loop_split", "loop_reorder"]
    root = canonical_text(canonicalize(parse(MATMUL))[0])
    probe = Search(parse(MATMUL), "mm", "beam", Budget(8, 1e9), 0, _RuleStop({root: 1.0}),
                   strategies=loops)
    b, x, z, w = (probe.pop(probe.root) for _ in range(4))
    # root 1.0; B 0.2 (the best); X 0.5: faster than its parent, slower than the best; Z 2.0:
    # clearly slower than its parent; W 1.02: within the margin of its parent
    ev = _RuleStop({root: 1.0, b.text: 0.2, x.text: 0.5, z.text: 2.0, w.text: 1.02})
    s = Search(parse(MATMUL), "mm", "beam", Budget(8, 1e9), 0, ev, strategies=loops)
    nb, nx, nz, nw = (s.evaluate(s.root, c) for c in (b, x, z, w))
    assert s.best is nb
    # every reference was the parent's timing, not the best's
    assert all(ev.refs[c.text] is s.root.timing for c in (b, x, z, w))
    # X is slower than the best by far, but its "improved" rests on all its repeats
    row = {r.after_leir: r for r in s.steps}  # rows keep the written names (Node.leir)
    assert not nx.partial and row[nx.leir].after.repeats == 5 and row[nx.leir].outcome == "improved"
    # Z stopped after 3 repeats, and its label is the one the rule decides for its parent
    assert nz.partial and row[nz.leir].after.repeats == 3
    assert row[nz.leir].outcome == "not_improved"
    assert RULE.compare(s.root.timing, nz.timing) == "slower"
    # W is close to its parent: timed in full
    assert not nw.partial and row[nw.leir].after.repeats == 5
    # a child the policy will expand at once is timed in full whatever its time
    z2 = next(c for c in s.untried(s.root))
    ev.times[z2.text] = 3.0
    n2 = s.evaluate(s.root, z2, may_stop=False)
    assert not n2.partial and ev.refs[z2.text] is None


def test_real_timings_a_clearly_slower_kernel_stops_and_a_close_one_does_not(tmp_path):
    """Real TVM timings: the 64x larger matmul stops against the small one's timing; the
    small one, timed again against its own timing, runs all its repeats."""
    small = MATMUL   # 32^3, and 128^3:
    big = MATMUL.replace("[32,32]", "[128,128]").replace(" in 32", " in 128")
    # (3 short repeats on a loaded machine may spread past the default 0.25: no spread may
    # excuse the close kernel here, which makes its "does not stop" the harder test. The margin
    # is 3x: a CI run under `pytest -n 2` once saw the same kernel's 3 fastest repeats over
    # 1.5x its own earlier median (a load spike), and the 64x larger kernel is far past 4x)
    lax = SignificanceRule(max_spread=100, min_gain=3.0)
    with Measurer(None, MeasureConfig(**{**FAST, "min_repeat_ms": 5}), cache=None,
                  lock_directory=tmp_path, speed_of_light=False) as m:
        ref = m.time_many([small])[0].timing
        assert ref is not None and ref.repeats == 5
        slow = m.time_many([big], stop_if_slower_than=ref, rule=lax)[0]
        assert slow.stopped_early and slow.timing.repeats == 3
        assert slow.timing.min_s > 10 * ref.median_s
        again = m.time_many([small], stop_if_slower_than=ref, rule=lax)[0]
        assert not again.stopped_early and again.timing.repeats == 5
