"""``steptp eval``: the closed loop. A policy (a model behind an OpenAI-compatible server or
Anthropic, or an offline reference: replay / random / search) proposes steps in the release's
chat format; the verifier and timer that built the data judge them.

* :mod:`.reply` — reading ``<think>…</think>`` + answer JSON (never evaluated);
* :mod:`.judge` — one proposal's outcome (no_reply / unparsable / bad_signature / illegal /
  failed_verification / unfaithful / timeout / verified + speedup) and ``faithful``;
* :mod:`.policies` — proposers (the ``--policy`` names): the interface and its implementations;
* :mod:`.loop` — modes ``single`` (best-of-n), ``chain``, ``beam`` and ``mcts``, with budgets;
* :mod:`.mcts` — the UCT tree of the ``mcts`` mode (its core shared with the search's MCTS);
* :mod:`.journal` — each judged state kept as it completes; an interrupted run resumes;
* :mod:`.inputs` — release splits, kernels tables and LEIR files as loop states;
* :mod:`.report` — ``eval/<run>/``: parquet, summary.json, report.md, plots;
* :mod:`.run` — ``evaluate(...)``, used by the CLI, the Prefect flow and the benchmark.
"""

from .judge import OUTCOMES, Judge, Judgement, State
from .loop import EvalConfig, Loop
from .reply import Answer, ReplyError, parse_reply

__all__ = ["OUTCOMES", "Judge", "Judgement", "State", "EvalConfig", "Loop", "Answer",
           "ReplyError", "parse_reply"]
