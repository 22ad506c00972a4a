"""Step reasoning (chain of thought) for Step-TP records: facts, writers, validation. The
versioned schema and ``render`` (``<think>…</think>`` + answer) are a shared contract, in
:mod:`steptp.format.cot_schema`.

* :mod:`.facts` — ``facts(step)``: the one source of citable numbers and names;
* :mod:`.template` — the deterministic offline writer (the default);
* :mod:`.anthropic_writer` — the LLM writer (``anthropic`` SDK, cached, batched, metered);
* :mod:`.alternatives` — the state's other actions ranked by the cost model, teaching refusals;
* :mod:`.claims` — the claim checker (structured and prose claims, no hindsight);
* :mod:`.validate` — schema and semantic checks, and ``sft_problems`` for SFT examples;
* :mod:`.run` — ``write_cot(steps, writer)`` with retries and template fallback.
"""

from .facts import GENERIC, Facts, Hardware, facts
from .run import with_cot, write_cot
from .template import TemplateWriter
from .validate import CotInvalid, measured_side, sft_problems, validate

__all__ = ["Facts", "Hardware", "GENERIC", "facts", "sft_problems", "measured_side",
           "TemplateWriter", "CotInvalid", "validate", "write_cot", "with_cot"]
