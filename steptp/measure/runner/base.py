"""The runner interface and its one set of requests and outcomes.

A runner verifies candidates against references and times programs on one device (MetaSchedule's
``Runner``, with verification folded in). ``local.Measurer`` is the runner of this machine (and
times on a remote device when given an ``rpc.RPCBackend``); ``gpu`` ships batches of CUDA
candidates, as job folders, to the TVM-free runner on a GPU machine.

Every runner and every consumer speaks these types: the Measurer returns them, the search's
evaluators (``steptp.search.evaluator``) return them, the eval judge reads them. ``status`` says
how the run went (``ok`` | ``error`` | ``timeout`` | ``crash``, and ``suspect`` for a timing below
the speed of light); ``outcome`` restates it in a step's words (``records.Outcome``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Optional, Protocol, Sequence

from pydantic import BaseModel, ConfigDict

from ...records import Timing
from ..verify import DEFAULT_SEEDS, RULE_VERSION, TOLERANCES, VerifyResult

@dataclass(frozen=True)
class VerifyJob:
    """Verify that ``after`` (the candidate) computes what ``before`` (the reference) does."""

    before: str
    after: str
    exactness: str = "exact"
    seeds: tuple[int, ...] = DEFAULT_SEEDS

    @property
    def config_hash(self) -> str:
        blob = json.dumps({"exactness": self.exactness, "seeds": list(self.seeds),
                           "tolerances": TOLERANCES.get(self.exactness),
                           "rule": RULE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _classify(reason: str) -> str:
    """The step word of a run that failed with an error (not a verdict): from its reason."""
    r = (reason or "").lower()
    if "timeout" in r or "timed out" in r:
        return "timeout"
    if "build" in r or "lower" in r or "does not parse" in r:
        return "failed_build"
    if "crash" in r or "signal" in r or "died" in r:
        return "crashed"
    return "failed_verify"


class VerifyOutcome(BaseModel):
    """A verdict. ``status``: ok (the verifier ran: see ``result.passed``) | error | timeout |
    crash (the run failed: ``result.passed`` is False and ``result.reason`` says why)."""

    model_config = ConfigDict(extra="forbid")
    result: VerifyResult
    status: str = "ok"
    cached: bool = False
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.result.passed

    @property
    def ok(self) -> bool:
        """The candidate computes the reference's outputs within the exactness tolerance."""
        return self.status == "ok" and self.result.passed

    @property
    def reason(self) -> Optional[str]:
        return self.result.reason

    @property
    def max_abs_err(self) -> Optional[float]:
        """The verifier's error; None when it did not run to a verdict."""
        return self.result.max_abs_err if self.status == "ok" else None

    @property
    def max_rel_err(self) -> Optional[float]:
        return self.result.max_rel_err if self.status == "ok" else None

    @property
    def outcome(self) -> str:
        """ok | failed_verify (ran, wrong) | failed_build | timeout |
        crashed. A verdict that fails because a program does not build is ``failed_build``."""
        if self.status != "ok":
            return {"timeout": "timeout", "crash": "crashed"}.get(
                self.status, _classify(self.result.reason or ""))
        if self.result.passed:
            return "ok"
        reason = self.result.reason or "verification failed"
        return "failed_build" if "does not build" in reason else "failed_verify"


class TimingOutcome(BaseModel):
    """A timing, or why there is none. ``status``: ok | error (does not parse/build/run) |
    timeout | crash | suspect (below the machine's speed of light: ``timing.suspect``)."""

    model_config = ConfigDict(extra="forbid")
    program_hash: str = ""
    timing: Optional[Timing] = None
    status: str = "ok"
    reason: Optional[str] = None
    cached: bool = False
    fingerprint: str = ""
    wall_s: float = 0.0
    #: the timing ended after its first repeats: clearly slower than the reference it was
    #: asked to beat (``time_many``'s ``stop_if_slower_than``); never cached
    stopped_early: bool = False

    @property
    def ok(self) -> bool:
        return self.timing is not None

    @property
    def outcome(self) -> str:
        """In a step's words: ok | suspect_timing | timeout | crashed | failed_build."""
        if self.status == "suspect":
            return "suspect_timing"
        if self.timing is not None:
            return "ok"
        return {"timeout": "timeout", "crash": "crashed"}.get(self.status, "failed_build")


class Runner(Protocol):
    """What a runner offers (``local.Measurer``). Results come in input order, one outcome per
    request; a request that fails is an outcome with a reason, never an exception."""

    @property
    def fingerprint(self) -> Any: ...   # what its timings were measured on

    def verify_many(self, pairs: Sequence[Any], together: bool = False
                    ) -> list[VerifyOutcome]: ...

    def time_many(self, programs: Sequence[str], check_speed_of_light: bool | None = None,
                  use_cache: bool = True, stop_if_slower_than: Timing | None = None,
                  rule=None, hints: Sequence[float | None] | None = None
                  ) -> list[TimingOutcome]: ...

    def close(self) -> None: ...


__all__ = ["Runner", "VerifyJob", "VerifyOutcome", "TimingOutcome"]
