"""Policies: who proposes the next step. All behind one interface (:class:`.base.Policy`) and
all answering in the release's chat format, so one judge scores them alike.

* ``openai`` / ``anthropic`` (:mod:`.llm`) — a model behind the shared LLM client layer;
* ``replay`` (:mod:`.replay`) — the release's own SFT answers for the state (the loop's check);
* ``random`` (:mod:`.random`) — a random legal registry action (the floor);
* ``search`` (:mod:`.search`) — steptp's search ranking (cost model) at the same proposal count.
"""

from .base import Policy, Proposal, make_policy, prompt_messages

__all__ = ["Policy", "Proposal", "make_policy", "prompt_messages"]
