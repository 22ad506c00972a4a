"""THE preference-pair format of a release: ``chat/pairs-{split}.jsonl``.

One JSON object per line in the conversational preference format TRL's ``DPOTrainer`` reads::

    {"prompt":   [{"role": "system", ...}, {"role": "user", ...}],   # the SFT format's turns
     "chosen":   [{"role": "assistant", "content": "<think>...</think>\\n{answer}"}],
     "rejected": [{"role": "assistant", "content": ...}],
     "meta": {"pair_key", "kernel_id", "split", "chosen_step_key", "rejected_step_key",
              "chosen_role", "rejected_role", "rejected_why", "compared_on",
              "chosen_step_speedup", "chosen_paired_speedup", "chosen_best_speedup", ...,
              "parent_step_key", "tokens": {"prompt", "chosen", "rejected"}, ...}}

``prompt`` is exactly the system and user turns of ``steptp.format.chat`` for the shared
before-program; ``chosen``/``rejected`` are assistant turns in the same format. Which pairs exist,
which timing decided each and the speedups per timing source (the pair's ``timings``, spread into
``meta``: ``steptp.curate.pairs.PAIR_TIMING_FIELDS``) are curation's decision
(``steptp.curate.pairs``).
"""

from __future__ import annotations

import functools
import json
from typing import Any, Mapping

from ..format import chat
from ..format.tokens import n_tokens
from ..records import StepRecord

PAIRS_FORMAT = "steptp-pairs-1"

# a state's prompt, and a chosen answer, recur in several pairs (and the system turn in all)
_tokens = functools.lru_cache(maxsize=4096)(n_tokens)


def pair_example(pair: Mapping[str, Any], chosen: StepRecord, rejected: StepRecord, hardware: str = "",
                 split: str = "", parent_step_key: str | None = None) -> dict[str, Any]:
    """``parent_step_key``: the step whose after-program is the shared before-program (None at
    the unscheduled kernel), so a pair joins the search tree by key."""
    msgs = chat.prompt_messages(chosen.before_leir, chat.hardware_text(chosen, hardware))
    c_turn, r_turn = chat.assistant_turn(chosen), chat.assistant_turn(rejected)
    meta = {"format": PAIRS_FORMAT, "pair_key": pair["pair_key"], "kernel_id": chosen.kernel_id,
            "split": split, "trajectory_id": chosen.trajectory_id, "step_index": chosen.step_index,
            "chosen_step_key": pair["chosen"], "rejected_step_key": pair["rejected"],
            "chosen_role": chosen.role, "rejected_role": rejected.role,
            "chosen_strategy": chosen.strategy, "rejected_strategy": rejected.strategy,
            "chosen_is_sft": bool(pair.get("chosen_is_sft")), "rejected_why": pair.get("rejected_why", ""),
            **dict(pair.get("timings") or {}),
            "parent_step_key": parent_step_key,
            "tokens": {"prompt": sum(_tokens(m["content"]) for m in msgs),
                       "chosen": _tokens(c_turn), "rejected": _tokens(r_turn)}}
    return {"prompt": msgs,
            "chosen": [{"role": "assistant", "content": c_turn}],
            "rejected": [{"role": "assistant", "content": r_turn}],
            "meta": meta}


def check_pair_line(line: str) -> list[str]:
    """Problems with one pairs line (empty: valid)."""
    try:
        d = json.loads(line)
    except ValueError as e:
        return [f"not JSON: {e}"]
    out = []
    p, c, r = d.get("prompt"), d.get("chosen"), d.get("rejected")
    if not isinstance(p, list) or [m.get("role") for m in p] != ["system", "user"]:
        out.append("prompt must be system, user")
    for name, m in (("chosen", c), ("rejected", r)):
        if not isinstance(m, list) or [x.get("role") for x in m] != ["assistant"]:
            out.append(f"{name} must be one assistant message")
            continue
        sft_like = json.dumps({"messages": (p or []) + m})
        bad = [x for x in chat.check_line(sft_like) if not x.startswith("messages must")]
        out += [f"{name}: {x}" for x in bad]
    if not out and c[0]["content"] == r[0]["content"]:
        out.append("chosen equals rejected")
    return out


__all__ = ["PAIRS_FORMAT", "pair_example", "check_pair_line"]
