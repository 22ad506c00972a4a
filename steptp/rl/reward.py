"""A reward with TRL's signature: ``reward(prompts, completions, **columns) -> list[float]``.

``GRPOTrainer`` calls a reward function with the prompts, the completions and every other column
of the dataset row as keyword arguments (one list each). On the release's ``prompts`` config
those columns are the checker's inputs: ``original`` (the unscheduled kernel), ``program`` (the
state the prompt shows), ``exactness`` (the loosest class along the path to it) and ``target``.

Two strengths, one judge (``steptp.eval.judge``):

* ``reward`` (static): the checks that need no build. The completion parses, keeps the kernel's
  signature, states a legal registry action at the state, and its program IS that action's
  result; it scores by the first check that fails (``SCORES``). Parsing speed, in process.
* ``MeasuredReward`` (measured): the same, then the judge builds the program, verifies it
  against the ORIGINAL kernel within the path's exactness class and times it (a
  :class:`~steptp.measure.Measurer`: its cache, its worker count and memory limit). A
  verified program adds log2 of its step speedup over the state, clipped to ±1.

Completions are untrusted model output: each is cut to ``MAX_CHARS`` before any parsing, and
any failure to read one is a low score, never an exception in the training loop.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections import Counter
from typing import Any, Optional, Sequence

log = logging.getLogger(__name__)

# one score per first failing check; a legal but unfaithful step (the program is not what the
# stated action gives) earns less than a faithful one, more than an illegal one
SCORES = {"unparsable": -1.0, "bad_signature": -0.75, "illegal": -0.5, "failed_verification": -0.25,
          "timeout": -0.25, "unfaithful": 0.0, "faithful": 1.0}
# a release's longest answer is a few thousand tokens; a reply 10x that is not an answer
MAX_CHARS = 65536


def _text(completion: Any) -> str:
    """The reply text of a standard (string) or conversational (message list) completion."""
    if isinstance(completion, str):
        return completion[:MAX_CHARS]
    if isinstance(completion, (list, tuple)):
        parts = [m.get("content") for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
        return "".join(p for p in parts if isinstance(p, str))[:MAX_CHARS]
    return ""


@functools.lru_cache(maxsize=256)
def _program(text: str):
    from ..leir import parse

    return parse(text)


def _column(columns: dict[str, Any], name: str, n: int, default: Any = None) -> list[Any]:
    v = columns.get(name)
    if v is None:
        if default is None:
            raise TypeError(f"reward: the dataset has no {name!r} column (use the release's 'prompts' config)")
        return [default] * n
    if len(v) != n:
        raise ValueError(f"reward: column {name!r} has {len(v)} values for {n} completions")
    return list(v)


def judge_completions(prompts: Optional[Sequence[Any]], completions: Sequence[Any], judge: Any = None,
                      **columns: Any) -> list[tuple[Any, bool]]:
    """The eval judge's judgement of each completion at its row's state, and whether it passed
    every static check. ``judge``: an eval :class:`~steptp.eval.judge.Judge` to also build,
    verify and time (the measured strength); None: the static checks only."""
    from ..eval import judge as J

    n = len(completions)
    originals, programs = _column(columns, "original", n), _column(columns, "program", n)
    exactness = _column(columns, "exactness", n, "exact")
    targets = _column(columns, "target", n, "cpu")
    kernels = _column(columns, "kernel_id", n, "kernel")
    replies = [_text(c) for c in completions]
    out: list[tuple[Any, bool]] = [(J.Judgement("unparsable", "not judged"), False)] * n
    by_state: dict[tuple[str, str, str, str, str], list[int]] = {}
    for i, key in enumerate(zip(kernels, originals, programs, exactness, targets)):
        by_state.setdefault(key, []).append(i)
    for (kid, orig, prog, ex, tgt), idx in by_state.items():
        try:
            # THE call site of the eval judge (steptp.eval.judge): one definition of a legal,
            # faithful, verified step for eval and training alike
            if judge is None:
                res = [J.static_judgement(_program(prog), _program(orig), ex, replies[i], tgt or "cpu") for i in idx]
                got = [(j, cand is not None) for j, cand in res]
            else:
                texts = [replies[i] for i in idx]
                static = [J.static_judgement(_program(prog), _program(orig), ex, t, tgt or "cpu") for t in texts]
                if any(cand is not None for _, cand in static):
                    state = J.State(kid, orig, prog, exactness=ex, target=tgt or "cpu")
                    state.timing = judge.time_state(prog)[0]
                    got = [(j, j.legal is True) for j in judge.judge_many(state, texts)]
                else:
                    # nothing to build (what an untrained policy mostly writes): the state is
                    # not built or timed either
                    got = [(j, False) for j, _ in static]
        except Exception as e:  # noqa: BLE001 - an unreadable completion scores low; training goes on
            if judge is not None:
                raise   # the measurer failed, not the completion (it runs them in limited workers)
            got = [(J.Judgement("unparsable", f"{type(e).__name__}: {e}"[:200]), False)] * len(idx)
        for i, g in zip(idx, got):
            out[i] = g
    return out


def score(judgement: Any, passed: bool) -> float:
    if not passed:
        return SCORES.get(judgement.outcome, SCORES["unparsable"])
    if judgement.outcome in ("failed_verification", "timeout"):
        return SCORES[judgement.outcome]
    base = SCORES["faithful"] if judgement.faithful else SCORES["unfaithful"]
    sp = judgement.step_speedup
    if judgement.outcome == "verified" and sp and sp > 0 and math.isfinite(sp):
        base += max(-1.0, min(1.0, math.log2(sp)))
    return base


def reward(prompts: Optional[Sequence[Any]] = None, completions: Sequence[Any] = (), **columns: Any) -> list[float]:
    """TRL reward function (static strength): one score per completion, from ``SCORES``."""
    return [score(j, passed) for j, passed in judge_completions(prompts, completions, **columns)]


class MeasuredReward:
    """TRL reward function (measured strength): ``MeasuredReward(measurer)(prompts, completions,
    **columns)``. Builds, verifies and times through ``measurer`` (a
    :class:`~steptp.measure.Measurer`; its cache makes a repeated program free, its
    ``jobs`` and ``memory_limit_mb`` bound the workers). Without one it opens its own with
    ``jobs``, ``memory_limit_mb`` and ``cache``, and :meth:`close` closes it. Each call logs
    its batch's throughput and outcomes; :meth:`stats` sums them over the run."""

    __name__ = "steptp_measured_reward"      # TRL logs a reward function by its name

    def __init__(self, measurer: Any = None, *, seeds: Optional[Sequence[int]] = None, jobs: int = 1,
                 memory_limit_mb: Optional[int] = None, cache: Any = True, config: Any = None):
        from ..eval.judge import Judge

        self._own = measurer is None
        if measurer is None:
            from ..measure.runner.local import Measurer

            measurer = Measurer(config=config, cache=cache, jobs=jobs, memory_limit_mb=memory_limit_mb)
        self.measurer = measurer
        self.judge = Judge(measurer, seeds, retime_rounds=0)
        self.completions, self.seconds, self.outcomes = 0, 0.0, Counter()

    def __call__(self, prompts: Optional[Sequence[Any]] = None, completions: Sequence[Any] = (),
                 **columns: Any) -> list[float]:
        t0 = time.perf_counter()
        judged = judge_completions(prompts, completions, judge=self.judge, **columns)
        dt = time.perf_counter() - t0
        self.completions += len(judged)
        self.seconds += dt
        batch = Counter(j.outcome for j, _ in judged)
        self.outcomes.update(batch)
        log.info("measured reward: %d completions in %.2f s (%.1f/s): %s", len(judged), dt,
                 len(judged) / dt if dt > 0 else float("inf"), dict(sorted(batch.items())))
        return [score(j, passed) for j, passed in judged]

    def stats(self) -> dict[str, Any]:
        """What was judged so far: completions, seconds, completions per second and the judge's
        outcomes (the throughput a run's reward costs)."""
        return {"completions": self.completions, "seconds": round(self.seconds, 3),
                "per_second": round(self.completions / self.seconds, 2) if self.seconds > 0 else None,
                "outcomes": dict(sorted(self.outcomes.items()))}

    def close(self) -> None:
        self.judge.close()
        if self._own:
            self.measurer.close()


__all__ = ["MAX_CHARS", "SCORES", "MeasuredReward", "judge_completions", "reward", "score"]
