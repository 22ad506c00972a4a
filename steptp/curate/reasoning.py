"""What curation reads of a step's reasoning, and the rows held without it.

A step's reasoning (``cot``, a nested dict of checked claims, and ``cot_text``) is most of the
memory a step record takes. Curation reads only a few verdicts of it (whether it parses, whether
its argument holds, what it predicted, how long the chat example is): ``note`` computes them once
per step. ``read_steps`` reads a steps table in slices, notes each step and keeps the record
without its reasoning, while the reasoning itself stays in an Arrow table (``Texts``) that
``with_texts`` joins back when the curated tables are written. A release of 100,000 steps is then
curated in a fraction of the memory its records would take.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional

import polars as pl

from ..records import StepRecord, step_key

#: the columns kept in Arrow while curation works on the rows without them
TEXT_COLUMNS = StepRecord.REASONING_FIELDS


@dataclass(frozen=True)
class Note:
    """Curation's reading of one step's reasoning."""

    has_text: bool                       # both the reasoning record and its text
    problem: Optional[tuple[str, str]]   # ("no_cot" | "cot_invalid", detail) or None
    coherence: tuple[str, ...]           # cot["coherence"]: why no argument leads to the step
    prediction_agrees: Optional[bool]    # cot["measured"]: the stated expectation held?
    predicted: str                       # ... the direction the reasoning states
    direction: str                       # ... the direction measured
    tokens_over: Optional[int]           # the chat example's tokens when above the limit


def cot_problem(step: StepRecord) -> Optional[tuple[str, str]]:
    if not step.cot and not step.cot_text.strip():
        return ("no_cot", "")
    if step.cot:
        try:
            from ..format.cot_schema import cot_from_record

            cot_from_record(step.cot)
        except Exception as e:  # noqa: BLE001 - pydantic / version errors
            return ("cot_invalid", str(e).splitlines()[0][:200])
    return None


def note(step: StepRecord, hardware: str, max_tokens: int) -> Note:
    from ..format.chat import tokens_over

    cot = step.cot or {}
    m = cot.get("measured") or {}
    return Note(has_text=bool(step.cot and step.cot_text.strip()), problem=cot_problem(step),
                coherence=tuple(cot.get("coherence") or ()),
                prediction_agrees=m.get("prediction_agrees"),
                predicted=str(m.get("predicted_direction", "")), direction=str(m.get("direction", "")),
                tokens_over=tokens_over(step, hardware, max_tokens))


def notes_of(steps: Iterable[StepRecord], hardware: str, max_tokens: int,
             known: Optional[Mapping[str, Note]] = None) -> dict[str, Note]:
    """step_key -> note, for every step (``known`` ones taken as they are)."""
    known = known or {}
    out: dict[str, Note] = {}
    for s in steps:
        k = step_key(s)
        out[k] = known.get(k) or note(s, hardware, max_tokens)
    return out


@dataclass
class Texts:
    """The reasoning columns of a steps table (``step_key`` and ``TEXT_COLUMNS``), in Arrow."""

    frame: pl.DataFrame


def read_steps(path: str | Path, hardware: str, max_tokens: int, batch: int = 4096
               ) -> tuple[list[StepRecord], dict[str, Note], Texts]:
    """The rows of a steps table without their reasoning, each one's note, and the reasoning
    columns apart. Read in slices of ``batch`` rows so that only a slice's records are whole at
    once."""
    df = pl.read_parquet(path)
    rows: list[StepRecord] = []
    notes: dict[str, Note] = {}
    keys: list[str] = []
    empty = {c: ({} if c == "cot" else "") for c in TEXT_COLUMNS}
    for start in range(0, df.height, batch):
        for r in df.slice(start, batch).iter_rows(named=True):
            s = StepRecord.from_row(r)
            k = step_key(s)
            notes[k] = note(s, hardware, max_tokens)
            keys.append(k)
            rows.append(s.model_copy(update=empty))
    texts = df.select(*TEXT_COLUMNS).with_columns(pl.Series("step_key", keys, dtype=pl.Utf8))
    if texts.height != texts["step_key"].n_unique():
        texts = texts.unique("step_key", keep="first", maintain_order=True)
    return rows, notes, Texts(texts)


def with_texts(frame: pl.DataFrame, keys: list[str], texts: Texts) -> pl.DataFrame:
    """``frame`` (a steps table of rows read by ``read_steps``, ``keys`` their step keys in
    order) with its reasoning columns joined back, in the table's own column order."""
    order = frame.columns
    base = frame.drop(*TEXT_COLUMNS).with_columns(pl.Series("__key", keys, dtype=pl.Utf8))
    joined = base.join(texts.frame.rename({"step_key": "__key"}), on="__key", how="left",
                       maintain_order="left")
    return joined.select(order)


__all__ = ["Note", "TEXT_COLUMNS", "Texts", "cot_problem", "note", "notes_of", "read_steps",
           "with_texts"]
