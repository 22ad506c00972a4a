"""The curated dataset as export reads it: every table as a polars frame with its record type's
fixed schema, and only the SFT steps as records.

A release of 100,000 searched steps does not fit in memory as ``StepRecord`` objects (each holds
two programs, its reasoning and the reasoning's parsed dict, some 45 KB as Python objects against
some 8 KB as an Arrow column), so the steps table is copied through as a frame and a step
becomes a record only where its text is written (an SFT example, a side of a pair).

``load`` takes a curated folder (the files ``steptp.curate.write_curated`` writes: read here
directly, export does not import curation) or the dict ``steptp.curate.read_curated`` returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import polars as pl

from ..records import (KernelRecord, RejectRecord, StepRecord, TrajectoryRecord, polars_schema, read_records,
                       table)


@dataclass
class Curated:
    kernels: pl.DataFrame           # KernelRecord columns
    sft: list[StepRecord]           # the SFT examples, in curation's order
    steps: pl.DataFrame             # every searched step (the SFT steps when curation kept no others)
    trajectories: pl.DataFrame
    rejects: pl.DataFrame
    pairs: list[dict[str, Any]]
    splits: dict[str, str]
    report: dict[str, Any]


def _frame(path: Path, kind: type) -> pl.DataFrame:
    """A table file with exactly its record type's columns, in order and types (as ``table``
    of its records would be)."""
    schema = polars_schema(kind)
    df = pl.read_parquet(path, columns=list(schema))
    return df.cast(schema) if df.schema != pl.Schema(schema) else df


def load(curated: str | Path | Mapping[str, Any]) -> Curated:
    if not isinstance(curated, Mapping):
        path = Path(curated)
        sp = json.loads((path / "splits.json").read_text())
        all_steps = path / "all-steps.parquet"
        return Curated(
            kernels=_frame(path / "kernels.parquet", KernelRecord),
            sft=read_records(path / "steps.parquet", StepRecord),
            steps=_frame(all_steps if all_steps.exists() else path / "steps.parquet", StepRecord),
            trajectories=_frame(path / "trajectories.parquet", TrajectoryRecord),
            rejects=_frame(path / "rejects.parquet", RejectRecord),
            pairs=json.loads((path / "pairs.json").read_text()) if (path / "pairs.json").exists() else [],
            splits=dict(sp["splits"]), report=json.loads((path / "report.json").read_text()))
    sft = list(curated["steps"])
    return Curated(kernels=table(curated["kernels"], KernelRecord), sft=sft,
                   steps=table(curated.get("all_steps") or sft, StepRecord),
                   trajectories=table(curated["trajectories"], TrajectoryRecord),
                   rejects=table(curated["rejects"], RejectRecord),
                   pairs=list(curated.get("pairs") or []), splits=dict(curated["splits"]),
                   report=dict(curated.get("report") or {}))


__all__ = ["Curated", "load"]
