"""A reward with TRL's signature: ``reward(prompts, completions, **columns) -> list[float]``.

``GRPOTrainer`` calls a reward function with the prompts, the completions and every other column
of the dataset row as keyword arguments (one list each). On the release's ``prompts`` config
those columns are the checker's inputs: ``original`` (the unscheduled kernel), ``program`` (the
state the prompt shows), ``exactness`` (the loosest class along the path to it) and ``target``.

Strength: static. A completion is judged by the eval judge's checks that need no build (it
parses, keeps the kernel's signature, states a legal registry action at the state, and its
program IS that action's result), and scored by the first check that fails (``SCORES``). The
measured strength (build, verify against the original, time) is the eval's ``Judge``; it is not
wired here.

Completions are untrusted model output: each is cut to ``MAX_CHARS`` before any parsing, and
any failure to read one is a low score, never an exception in the training loop.
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

# one score per first failing check; a legal but unfaithful step (the program is not what the
# stated action gives) earns less than a faithful one, more than an illegal one
SCORES = {"unparsable": -1.0, "bad_signature": -0.75, "illegal": -0.5, "unfaithful": 0.0, "faithful": 1.0}
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


def judge_completions(prompts: Optional[Sequence[Any]], completions: Sequence[Any],
                      **columns: Any) -> list[tuple[Any, bool]]:
    """The eval judge's static judgement of each completion at its row's state, and whether it
    passed every static check (the judge would build and verify it next)."""
    from ..eval.judge import Judgement, static_judgement

    n = len(completions)
    originals, programs = _column(columns, "original", n), _column(columns, "program", n)
    exactness = _column(columns, "exactness", n, "exact")
    targets = _column(columns, "target", n, "cpu")
    out = []
    for c, orig, prog, ex, tgt in zip(completions, originals, programs, exactness, targets):
        try:
            # THE call site of the eval judge (steptp.eval.judge): one definition of a legal,
            # faithful step for eval and training alike
            j, cand = static_judgement(_program(prog), _program(orig), ex, _text(c), tgt or "cpu")
        except Exception as e:  # noqa: BLE001 - an unreadable completion scores low; training goes on
            j, cand = Judgement("unparsable", f"{type(e).__name__}: {e}"[:200]), None
        out.append((j, cand is not None))
    return out


def score(judgement: Any, passed: bool) -> float:
    if not passed:
        return SCORES.get(judgement.outcome, SCORES["unparsable"])
    return SCORES["faithful"] if judgement.faithful else SCORES["unfaithful"]


def reward(prompts: Optional[Sequence[Any]] = None, completions: Sequence[Any] = (), **columns: Any) -> list[float]:
    """TRL reward function (static strength): one score per completion, from ``SCORES``."""
    return [score(j, passed) for j, passed in judge_completions(prompts, completions, **columns)]


__all__ = ["MAX_CHARS", "SCORES", "judge_completions", "reward", "score"]
