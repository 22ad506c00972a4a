"""The record schema: fixed parquet schemas, JSON fields, atomic writes."""

from __future__ import annotations

import os

import polars as pl
import pytest

from steptp.records import (KernelRecord, StepRecord, Timing, polars_schema, read_records, table,
                            write_table, write_text_atomic)


def _step(**kw) -> StepRecord:
    base = dict(trajectory_id="t", step_index=0, kernel_id="k", before_leir="a", after_leir="b",
                strategy="loop_split", family="loop", exactness="exact", site={"path": [0], "loops": ["i"]},
                params={"factor": 4}, outcome="improved", verified=True,
                before=Timing(median_s=2e-6, min_s=1.9e-6, spread=0.01, repeats=5, number=100))
    base.update(kw)
    return StepRecord(**base)


def test_round_trip_and_fixed_schema(tmp_path):
    s = _step()
    p = write_table(table([s]), tmp_path / "steps.parquet")
    assert read_records(p, StepRecord) == [s]
    df = pl.read_parquet(p)
    assert df.schema == pl.Schema(polars_schema(StepRecord))
    assert df["site"][0] == '{"loops":["i"],"path":[0]}'        # canonical JSON
    # all-None optional columns keep their types; an empty table keeps its columns
    assert table([_step(after=None)]).schema["after"] == polars_schema(StepRecord)["after"]
    assert table([], StepRecord).columns == list(StepRecord.model_fields)
    with pytest.raises(ValueError, match="record type"):
        table([])


def test_unknown_fields_are_refused():
    with pytest.raises(ValueError, match="extra"):
        _step(surprise=1)


def test_atomic_writes_leave_nothing_half_written(tmp_path):
    target = tmp_path / "k.parquet"
    write_text_atomic(target, "old")
    mode = os.stat(target).st_mode & 0o777
    assert mode == 0o666 & ~_umask()

    class Boom(pl.DataFrame):
        def write_parquet(self, *a, **k):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_table(Boom({"a": [1]}), target)
    assert target.read_text() == "old"                          # the old file is intact
    assert [p.name for p in tmp_path.iterdir()] == ["k.parquet"]  # no temp file left


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_kernel_record_json_fields_round_trip(tmp_path):
    k = KernelRecord(kernel_id="0123456789abcdef", name="mm", leir="kernel f32 mm(A[2]) -> B[2]\n B[i] = A[i]\n",
                     leir_hash="x" * 64, tir_hash="1", signature=[{"name": "A", "dtype": "float32", "shape": [2],
                                                                   "role": "input"}],
                     occurrences=[{"workload": "w", "suite": "ops", "count": 2}], weight=2, flops=0,
                     bytes_moved=16, tvmscript="", target="llvm", raise_ok=True)
    p = write_table(table([k]), tmp_path / "k.parquet")
    assert read_records(p, KernelRecord) == [k]
