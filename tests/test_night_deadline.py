"""A nightly's search deadline (``nightly.search_deadline_minutes``): kernel searches start in
priority order while the last one started can still end by the deadline; the rest keep their
place for the next night. The clock here is a counter the waits advance, so the schedule is
exact."""

from __future__ import annotations

import pytest

from steptp import params as P
from steptp.pipeline import SearchDeadline, left_for_next_night, search_deadline, start_in_time
from steptp.records import KernelRecord


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Run:
    """A search that takes ``seconds`` of the clock, counted when someone waits on it (one
    worker: the oldest running one is the one waited on)."""

    def __init__(self, clock: Clock, name: str, seconds: float, log: list):
        self.clock, self.name, self.seconds = clock, name, seconds
        log.append((name, clock.t))

    def wait(self) -> None:
        self.clock.t += self.seconds


def test_searches_start_while_the_last_can_still_end_by_the_deadline():
    clock, log = Clock(), []
    d = SearchDeadline(at=100.0, expected_s=30.0)
    futs = start_in_time(["a", "b", "c", "d"], lambda k: Run(clock, k, 40.0, log), 1, d, clock)
    # a at 0 and b at 40 may end by 100 (30 s expected); c at 80 would not
    assert [f.name for f in futs] == ["a", "b"] and log == [("a", 0.0), ("b", 40.0)]


def test_two_at_once_and_no_deadline():
    clock, log = Clock(), []
    d = SearchDeadline(at=100.0, expected_s=30.0)
    futs = start_in_time(list("abcdef"), lambda k: Run(clock, k, 40.0, log), 2, d, clock)
    # a and b at 0; c once a is waited on (40), d once b is (80): too late
    assert [f.name for f in futs] == ["a", "b", "c"]
    clock2, log2 = Clock(), []
    every = start_in_time(list("abcdef"), lambda k: Run(clock2, k, 40.0, log2), 1, None, clock2)
    assert [f.name for f in every] == list("abcdef")


def test_the_deadline_counts_from_the_build_start_and_only_when_set():
    s = P.Settings.model_validate({"nightly": {"search_deadline_minutes": 38},
                                   "search": {"seconds": 35, "remeasure_seconds": 25}})
    d = search_deadline(1000.0, s.nightly, s.search)
    assert d == SearchDeadline(at=1000.0 + 38 * 60, expected_s=60.0)
    assert d.may_start(1000.0 + 37 * 60) and not d.may_start(1000.0 + 37 * 60 + 1)
    assert search_deadline(None, s.nightly, s.search) is None
    assert search_deadline(1000.0, P.Settings().nightly, s.search) is None
    with pytest.raises(Exception, match="search_deadline_minutes"):
        P.Settings.model_validate({"nightly": {"search_deadline_minutes": 0}})


def test_a_kernel_left_by_the_deadline_is_not_marked_searched():
    k = KernelRecord(kernel_id="k", name="matmul", leir="", leir_hash="k", tir_hash="", signature=[],
                     occurrences=[], weight=1, flops=1, bytes_moved=1, tvmscript="", target="cpu",
                     raise_ok=True, search_status="searched: rank 3, family matmul")
    left = left_for_next_night(k)
    assert left.search_status == ("not_selected: rank 3, family matmul; the night's search "
                                  "deadline came first (nightly.search_deadline_minutes)")
    assert left.kernel_id == k.kernel_id
