"""Proposers: who proposes the next step in ``steptp eval`` (the ``--policy`` names). All behind
one interface (:class:`.base.Proposer`) and all answering in the release's chat format, so one
judge scores them alike.

A proposer is not a trajectory-search policy (``steptp.search.policies.Policy``): that one
decides which registry action a search measures next and records every evaluation; a proposer
writes a reply (reasoning + strategy, site, params, program) for a state, as a model does, and
knows nothing of the judge.

* ``openai`` / ``anthropic`` (:mod:`.llm`) — a model behind the shared LLM client layer;
* ``replay`` (:mod:`.replay`) — the release's own SFT answers for the state (the loop's check);
* ``random`` (:mod:`.random`) — a random legal registry action (the floor);
* ``search`` (:mod:`.search`) — steptp's search ranking (cost model) at the same proposal count.

The implementations import :mod:`.base` only; this package names them (``make_proposer``), so
no module imports its own subclasses.
"""

from __future__ import annotations

from typing import Any

from .base import Proposal, Proposer, prompt_messages

NAMES = ("openai", "anthropic", "replay", "random", "search")


def make_proposer(name: str, **kw: Any) -> Proposer:
    """``kw``: replay: ``steps`` (release step rows); random/search: ``seed``; openai/anthropic:
    ``model``, ``base_url``, ``temperature``, ``max_tokens``, ``cache_dir``, ``http_client``...
    The LLM SDKs are imported only when an LLM proposer is asked for."""
    if name == "replay":
        from .replay import ReplayProposer

        return ReplayProposer(kw["steps"])
    if name == "random":
        from .random import RandomProposer

        return RandomProposer(seed=kw.get("seed", 0))
    if name == "search":
        from .search import CostModelProposer

        return CostModelProposer(seed=kw.get("seed", 0))
    if name in ("openai", "anthropic"):
        from .llm import LLMProposer

        return LLMProposer(name, **kw)
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(NAMES)}")


__all__ = ["NAMES", "Proposer", "Proposal", "make_proposer", "prompt_messages"]
