"""The curated dataset as export reads it: the tables as polars frames with their record types'
fixed schemas, read when needed, and only the SFT steps as records.

A release of 100,000 searched steps does not fit in memory as ``StepRecord`` objects (each holds
two programs, its reasoning and the reasoning's parsed dict: some 45 KB as Python objects against
some 8 KB in an Arrow column), so the steps table is copied through as a frame, read whole only
while it is written, and a step becomes a record only where its text is written (an SFT example,
a side of a pair).

``load`` takes a curated folder (the files ``steptp.curate.write_curated`` writes: read here
directly, export does not import curation) or the dict ``steptp.curate.read_curated`` returns.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import polars as pl

from ..records import (KernelRecord, RejectRecord, StepRecord, TrajectoryRecord, polars_schema, read_records,
                       step_key, step_keys, table)

#: the steps table's reasoning columns, most of its size
REASONING = StepRecord.REASONING_FIELDS
STEP_COLUMNS = tuple(polars_schema(StepRecord))


def _frame(path: Path, kind: type, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """A table file with its record type's columns (``columns`` of them), in order and types,
    as ``table`` of its records would be."""
    schema = polars_schema(kind)
    if columns is not None:
        schema = {c: schema[c] for c in columns}
    have = set(pl.read_parquet_schema(path))
    df = pl.read_parquet(path, columns=[c for c in schema if c in have])
    if len(df.columns) < len(schema):
        # a column the record type gained since the table was written (a rejects table
        # curated before ``step_key``): null, as the record's default "not recorded"
        df = df.with_columns([pl.lit(None, dtype=t).alias(c) for c, t in schema.items()
                              if c not in have]).select(list(schema))
    return df.cast(schema) if df.schema != pl.Schema(schema) else df


class Curated:
    """``kernels``, ``trajectories``, ``rejects`` (frames), ``splits`` and ``report`` at once;
    the steps, the SFT steps and the pairs when asked for (each call reads them again)."""

    def __init__(self, kernels: pl.DataFrame, trajectories: pl.DataFrame, rejects: pl.DataFrame,
                 splits: Mapping[str, str], report: Mapping[str, Any], *, folder: Path | None = None,
                 records: Mapping[str, Any] | None = None):
        self.kernels, self.trajectories, self.rejects = kernels, trajectories, rejects
        self.splits, self.report = dict(splits), dict(report)
        self._folder, self._records = folder, records

    def steps(self, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Every searched step (the SFT steps when curation kept no others) as a table."""
        if self._folder is None:
            recs = self._records.get("all_steps") or self._records["steps"]
            df = table(recs, StepRecord)
            return df if columns is None else df.select(columns)
        path = self._folder / "all-steps.parquet"
        return _frame(path if path.exists() else self._folder / "steps.parquet", StepRecord, columns)

    def sft_steps(self) -> list[StepRecord]:
        """The SFT examples, in curation's order."""
        if self._folder is None:
            return list(self._records["steps"])
        return read_records(self._folder / "steps.parquet", StepRecord)

    def sft_keys(self) -> set[str]:
        """The step keys of the SFT examples (without making their records)."""
        if self._folder is None:
            return {step_key(s) for s in self._records["steps"]}
        return set(step_keys(_frame(self._folder / "steps.parquet", StepRecord,
                                    [c for c in STEP_COLUMNS if c not in REASONING])))

    def pairs(self) -> list[dict[str, Any]]:
        if self._folder is None:
            return list(self._records.get("pairs") or [])
        path = self._folder / "pairs.json"
        return json.loads(path.read_text()) if path.exists() else []


def load(curated: str | Path | Mapping[str, Any]) -> Curated:
    if isinstance(curated, Mapping):
        return Curated(table(curated["kernels"], KernelRecord), table(curated["trajectories"], TrajectoryRecord),
                       table(curated["rejects"], RejectRecord), curated["splits"], curated.get("report") or {},
                       records=curated)
    path = Path(curated)
    return Curated(_frame(path / "kernels.parquet", KernelRecord),
                   _frame(path / "trajectories.parquet", TrajectoryRecord),
                   _frame(path / "rejects.parquet", RejectRecord),
                   json.loads((path / "splits.json").read_text())["splits"],
                   json.loads((path / "report.json").read_text()), folder=path)


__all__ = ["Curated", "REASONING", "STEP_COLUMNS", "load"]
