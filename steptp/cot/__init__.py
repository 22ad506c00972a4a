"""Step reasoning (chain of thought) for Step-TP records: schema, facts, writers, validation.

* :mod:`.schema` — the versioned pydantic schema and ``render`` (``<think>…</think>`` + answer);
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
from .schema import SCHEMA_VERSION, Cot, cot_from_record, cot_record, render
from .template import TemplateWriter
from .validate import CotInvalid, measured_side, sft_problems, validate

__all__ = ["SCHEMA_VERSION", "Cot", "Facts", "Hardware", "GENERIC", "facts", "sft_problems",
           "measured_side", "render", "cot_record", "cot_from_record",
           "TemplateWriter", "CotInvalid", "validate", "write_cot", "with_cot"]
