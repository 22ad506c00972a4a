"""``write_cot(steps, writer)``: fill the CoT columns of step records, validated, with fallback.

For each step: the writer proposes an answer; :func:`steptp.cot.validate.validate` checks it; a
failure is fed back to the writer (an LLM sees the validator's message) up to ``max_retries``
times; after that — or when the API fails for good — the step falls back to the template writer
and is marked ``cot_source="template-fallback"``. The run always continues. With ``batch=True``
(and a writer that has ``propose_batch``), first attempts go through the Message Batches API and
only retries are interactive.

The summary holds, per writer: steps, ok, retries, fallbacks, failed, and the writer's requests,
cache hits, tokens and cost.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from ..format.cot_schema import Cot, cot_record, render
from ..records import StepRecord
from .facts import Facts, facts as compute_facts
from .template import TemplateWriter
from .validate import CotInvalid, measured_side, validate

log = logging.getLogger("steptp.cot")


def _answer(step: StepRecord) -> dict[str, Any]:
    return {"strategy": step.strategy, "site": step.site, "params": step.params, "program": step.after_leir}


def with_cot(step: StepRecord, cot: Cot, source: str, f: Optional[Facts] = None) -> StepRecord:
    """The step with its reasoning, and beside it (``cot["measured"]``, ``cot["hardware"]``) what
    was measured and the hardware the facts describe — never part of the rendered text."""
    side: dict[str, Any] = {}
    if f is not None:
        from .coherence import ARGUMENT, coherence_problems

        side["measured"] = measured_side(step, f, cot)
        if f.hardware is not None:
            side["hardware"] = f.hardware.to_dict()
        # an argument the step cannot support (it answers nothing found at its site): the
        # reasoning stays true, curation keeps the step out of the SFT set
        side["coherence"] = coherence_problems(cot, step, f, ARGUMENT)
    if source.startswith("template"):
        from .template import WRITER_VERSION

        # a release that carries the step can tell reasoning an older template wrote
        side["writer"] = WRITER_VERSION
    return step.model_copy(update={"cot": cot_record(cot, **side),
                                   "cot_text": render(cot, _answer(step)), "cot_source": source})


def older_template(step: StepRecord) -> bool:
    """Was the step's reasoning written by another version of the template writer (or before
    versions were recorded)? Reasoning a model wrote is never taken for it."""
    from .template import WRITER_VERSION

    return (step.cot_source or "").startswith("template") and bool(step.cot) \
        and step.cot.get("writer") != WRITER_VERSION


def skeleton(text: str) -> str:
    """A sentence with program names and numbers masked: two texts with the same skeleton come
    from the same template."""
    text = re.sub(r"`[^`]*`", "`_`", text)
    text = re.sub(r"\{[^{}]*\}", "{}", text)
    return re.sub(r"\d+(?:\.\d+)?", "N", text)


def template_counts(steps: list[StepRecord]) -> dict[str, Any]:
    """Distinct sentence templates over the reasoning of ``steps`` (for the card)."""
    sentences: list[str] = []
    openings: set[str] = set()
    for s in steps:
        if not s.cot_text:
            continue
        think = s.cot_text.split("</think>")[0].replace("<think>", "")
        lines = [ln for ln in think.splitlines() if ln.strip()]
        if lines:
            openings.add(" ".join(skeleton(lines[0]).split()[:4]))
        for ln in lines:
            sentences += [x.strip() for x in re.split(r"(?<=[.:;])\s+", ln) if x.strip()]
    sk = {skeleton(x) for x in sentences}
    return {"sentences": len(sentences), "distinct_templates": len(sk),
            "distinct_openings": len(openings)}


def _custom_id(n: int, f: Facts) -> str:
    import hashlib

    return f"s{n}-" + hashlib.sha256(f.seed_text.encode()).hexdigest()[:16]


class _Stats:
    def __init__(self) -> None:
        self.ok = self.retries = self.fallbacks = self.failed = 0
        self.errors: list[str] = []


def write_cot(steps: list[StepRecord], writer: Any = None, *, max_retries: int = 2, seed: int = 0,
              batch: bool = False, concurrency: int = 1, hardware: Any = None
              ) -> tuple[list[StepRecord], dict[str, Any]]:
    """Return the steps with ``cot``, ``cot_text`` and ``cot_source`` set, and a summary.
    ``hardware`` (:class:`steptp.cot.facts.Hardware`) is the machine the reasoning describes
    (default: the cost model's generic core)."""
    template = TemplateWriter(seed=seed, hardware=hardware)
    writer = writer or template
    is_template = isinstance(writer, TemplateWriter)
    stats = _Stats()
    import threading

    lock = threading.Lock()
    out: list[Optional[StepRecord]] = [None] * len(steps)
    fs: list[Optional[Facts]] = []
    for n, st in enumerate(steps):
        try:
            fs.append(compute_facts(st, hardware))
        except Exception as e:  # noqa: BLE001 - a step whose program does not parse gets no CoT
            fs.append(None)
            stats.failed += 1
            stats.errors.append(f"step {st.trajectory_id}/{st.step_index}: no facts: {e}")
            out[n] = st.model_copy(update={"cot": {}, "cot_text": "", "cot_source": "failed"})

    def fallback(n: int, why: str) -> None:
        st, f = steps[n], fs[n]
        try:
            cot = validate(template.write(st, f), st, f)
        except Exception as e:  # noqa: BLE001 - recorded, the run continues
            with lock:
                stats.failed += 1
                stats.errors.append(f"step {st.trajectory_id}/{st.step_index}: template failed: {e}")
            out[n] = st.model_copy(update={"cot": {}, "cot_text": "", "cot_source": "failed"})
            return
        with lock:
            stats.fallbacks += 1
            stats.errors.append(f"step {st.trajectory_id}/{st.step_index}: {why}")
        out[n] = with_cot(st, cot, "template-fallback", f)

    def attempt(n: int, first: Optional[tuple[Optional[dict], dict]] = None) -> None:
        st, f = steps[n], fs[n]
        if is_template:
            try:
                out[n] = with_cot(st, validate(writer.write(st, f), st, f), "template", f)
                with lock:
                    stats.ok += 1
            except Exception as e:  # noqa: BLE001
                with lock:
                    stats.failed += 1
                    stats.errors.append(f"step {st.trajectory_id}/{st.step_index}: template failed: {e}")
                out[n] = st.model_copy(update={"cot": {}, "cot_text": "", "cot_source": "failed"})
            return
        history: list[tuple[dict, str]] = []
        for k in range(max_retries + 1):
            try:
                raw, msg = first if (k == 0 and first is not None) else writer.propose(st, f, history)
            except Exception as e:  # noqa: BLE001 - API failure after the SDK's retries
                fallback(n, f"{writer.name} failed: {e}")
                return
            try:
                if raw is None:
                    raise CotInvalid([f"the answer has no `{getattr(writer, 'tool_name', 'tool')}` call "
                                      f"(stop_reason={msg.get('stop_reason')!r})"])
                cot = validate(raw, st, f, coherent=True)
            except CotInvalid as e:
                history.append((msg, str(e)))
                log.info("step %s/%s attempt %d rejected: %s", st.trajectory_id, st.step_index, k + 1,
                         re.sub(r"\s+", " ", str(e))[:300])
                if k < max_retries:
                    with lock:
                        stats.retries += 1
                continue
            out[n] = with_cot(st, cot, writer.name, f)
            with lock:
                stats.ok += 1
            return
        fallback(n, f"{writer.name}: still invalid after {max_retries} retries: {history[-1][1]}")

    todo = [n for n in range(len(steps)) if fs[n] is not None]
    firsts: dict[int, Any] = {}
    if batch and not is_template and hasattr(writer, "propose_batch") and todo:
        ids = {_custom_id(n, fs[n]): n for n in todo}
        try:
            res = writer.propose_batch([(cid, steps[n], fs[n]) for cid, n in ids.items()])
        except Exception as e:  # noqa: BLE001 - the whole batch failed: go interactive
            log.warning("batch failed, continuing interactively: %s", e)
            res = {}
        for cid, n in ids.items():
            r = res.get(cid)
            if isinstance(r, tuple):
                firsts[n] = r
    if concurrency > 1 and not is_template and len(todo) > 1:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(lambda n: attempt(n, firsts.get(n)), todo))
    else:
        for n in todo:
            attempt(n, firsts.get(n))
    summary: dict[str, Any] = {
        "writer": writer.name, "writer_version": writer.version, "steps": len(steps), "ok": stats.ok,
        "retries": stats.retries, "fallbacks": stats.fallbacks, "failed": stats.failed,
        "errors": stats.errors,
    }
    done = [s for s in out if s is not None]
    summary.update(template_counts(done))
    agree = [s.cot.get("measured", {}).get("prediction_agrees") for s in done if s.cot]
    summary["prediction_agrees"] = sum(1 for a in agree if a is True)
    summary["prediction_disagrees"] = sum(1 for a in agree if a is False)
    if hardware is not None:
        summary["hardware"] = hardware.to_dict()
    meter = getattr(writer, "meter", None)
    if meter is not None:
        summary.update(meter.as_dict())
        summary["model"] = writer.config.model
    return [s for s in out if s is not None], summary


def needs_reasoning(steps: list[StepRecord]) -> list[StepRecord]:
    """The steps whose reasoning the CoT stage writes: every verified step, and every failed one
    with a measured sibling (the same before-program in the same search). The failed ones are
    the rejected sides of preference pairs: their text comes from the same writer, describing
    the same hardware, as the chosen side's (and curation, which holds every row of a release
    at once, writes none)."""
    from ..records import measured

    prompts = {(s.trajectory_id, s.before_leir) for s in steps if measured(s)}
    return [s for s in steps if s.verified or (s.trajectory_id, s.before_leir) in prompts]


__all__ = ["write_cot", "with_cot", "needs_reasoning", "template_counts", "skeleton"]
