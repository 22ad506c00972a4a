"""The one home of the dataset's record schemas: kernels, steps, trajectories, rejects.

Each record is a pydantic model; ``table(records)`` turns a list of them into a polars DataFrame
with a fixed schema, and ``write_table`` writes parquet atomically (temp file, then rename), so
a crash never leaves half a file. Free-form mappings (sites, params, occurrences, CoT) are stored
as canonical JSON strings: every reader (polars, pandas, ``datasets``) loads them the same way,
and the parquet schema does not change with a strategy's parameters.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, ClassVar, Iterable, Literal, Optional, Sequence

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = "steptp-1"


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal strings (hashable, diffable)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # Fields stored as canonical JSON strings in the table.
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ()

    def row(self) -> dict[str, Any]:
        d = self.model_dump()
        for f in self.JSON_FIELDS:
            d[f] = canonical_json(d[f])
        return d

    @classmethod
    def from_row(cls, row: dict[str, Any]):
        d = dict(row)
        for f in cls.JSON_FIELDS:
            if isinstance(d.get(f), str):
                d[f] = json.loads(d[f])
        return cls(**d)


class TensorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    dtype: str
    shape: list[int]
    role: Literal["input", "output"]


class Occurrence(BaseModel):
    """Where a kernel was found: which workload (model or operator) and how many times."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    workload: str
    suite: str
    count: int = 1
    original_name: str = ""


class KernelRecord(_Record):
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("signature", "occurrences", "names")

    kernel_id: str = Field(description="stable id: the canonical LEIR hash (first 16 hex digits)")
    name: str = Field(description="a readable name (the fused PrimFunc's name)")
    leir: str = Field(description="canonical LEIR text")
    leir_hash: str
    tir_hash: str = Field(description="structural hash of the reference PrimFunc")
    signature: list[TensorSpec]
    occurrences: list[Occurrence]
    weight: int = Field(description="total occurrences over all workloads")
    flops: int
    bytes_moved: int
    tvmscript: str = Field(description="the reference PrimFunc as TVMScript")
    target: str = Field(description="target key the kernel was extracted for")
    raise_ok: bool
    raise_max_abs_err: Optional[float] = None
    raise_reason: str = ""
    names: dict[str, Any] = Field(default_factory=dict, description="original names (canon metadata)")
    search_status: str = Field("", description="searched, or why not (steptp.search.selection)")
    unscheduled_s: Optional[float] = Field(None, description="measured median of the unscheduled kernel")
    schema_version: str = SCHEMA_VERSION


Outcome = Literal["improved", "not_improved", "failed_verify", "failed_build", "timeout",
                  "crashed", "noisy", "illegal", "suspect_timing"]


class Timing(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    median_s: float
    min_s: float
    spread: float = Field(description="interquartile range over median")
    repeats: int
    number: int
    noisy: bool = False
    suspect: bool = Field(False, description="below the machine's speed of light "
                                            "(steptp.measure.roofline): never an improvement")


#: What a searched step is for a learner (``steptp.search.roles``; "" = not assigned yet).
Role = Literal["improving", "preparatory", "neutral", "regressing", "failed", ""]


class StepRecord(_Record):
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("site", "params", "cot")
    #: the reasoning columns, most of a steps table's size: the stages that hold every searched
    #: step read them only for the rows that need them
    REASONING_FIELDS: ClassVar[tuple[str, ...]] = ("cot", "cot_text")

    trajectory_id: str
    step_index: int
    kernel_id: str
    before_leir: str
    after_leir: str
    strategy: str
    family: str
    exactness: str
    site: dict[str, Any]
    params: dict[str, Any]
    outcome: Outcome
    verified: bool
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    reason: str = ""
    before: Optional[Timing] = None
    after: Optional[Timing] = None
    step_speedup: Optional[float] = None
    cumulative_speedup: Optional[float] = None
    target: str = ""
    fingerprint: str = ""
    policy: str = ""
    cot: dict[str, Any] = Field(default_factory=dict)
    cot_text: str = ""
    cot_source: str = ""
    role: Role = Field("", description="improving | preparatory | neutral | regressing | failed, "
                                       "from the measurements (steptp.search.roles)")
    log_speedup: Optional[float] = Field(None, description="ln(before / after) the role was decided on")
    best_descendant_speedup: Optional[float] = Field(
        None, description="before / the fastest program measured through this step (itself or a descendant)")
    role_detail: str = ""
    paired_before: Optional[Timing] = Field(None, description="interleaved re-timing of the before-program")
    paired_after: Optional[Timing] = Field(None, description="... of the after-program")
    paired_best: Optional[Timing] = Field(None, description="... of the best descendant's program")
    before_hash: str = Field("", description="canonical LEIR hash (steptp.leir.canon.canonical_hash) of "
                                             "the before-program: equal for programs that differ only in "
                                             "their names; empty: not recorded (curation parses the text)")
    after_hash: str = Field("", description="... of the after-program")
    night: str = Field("", description="provenance: the UTC date (YYYYMMDD) of the nightly that searched it; empty: not a nightly")
    code_version: str = Field("", description="provenance: the search stage's code version (steptp.codehash) that searched it")
    schema_version: str = SCHEMA_VERSION


def step_key(step: StepRecord) -> str:
    """A row's identity, the released ``step_key`` column: 16 hex digits of a SHA-256 (a
    search's rows share trajectory_id and step_index = depth, so both are not enough)."""
    return _key(step.trajectory_id, step.step_index, step.strategy, json.dumps(step.site, sort_keys=True),
                json.dumps(step.params, sort_keys=True), step.before_leir, step.after_leir)


def _key(*parts: Any) -> str:
    import hashlib

    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:16]


_KEY_COLUMNS = ("trajectory_id", "step_index", "strategy", "site", "params", "before_leir", "after_leir")


def step_keys(steps: pl.DataFrame, batch: int = 4096) -> list[str]:
    """``step_key`` of every row of a steps table (``site``, ``params``: its JSON strings),
    without making records: a batch of rows at a time is Python strings."""
    out: list[str] = []
    for off in range(0, steps.height, batch):
        for t, i, st, site, params, b, a in steps.slice(off, batch).select(_KEY_COLUMNS).iter_rows():
            out.append(_key(t, i, st, json.dumps(json.loads(site), sort_keys=True),
                            json.dumps(json.loads(params), sort_keys=True), b, a))
    return out



FAILED_OUTCOMES = frozenset({"failed_verify", "failed_build", "timeout", "crashed", "illegal"})


def measured(s: StepRecord) -> bool:
    """Whether the step's after-program was built, verified and timed: only such a program is a
    search state that later steps start from."""
    return (s.verified and s.outcome not in FAILED_OUTCOMES and s.before is not None
            and s.after is not None and s.before.median_s > 0 and s.after.median_s > 0)


def parent_links(steps: Sequence[StepRecord]) -> dict[int, int]:
    """Index of each row's parent row: the measured row of the same trajectory, one level up,
    whose after-program is this row's before-program (the first such row when a program was
    reached twice). Rows at a root are absent. The one definition of a search tree's edges
    (curation's roles and the release's ``parent_step_key`` both read it)."""
    by_after: dict[tuple[str, str, int], int] = {}
    for i, s in enumerate(steps):
        if measured(s):
            by_after.setdefault((s.trajectory_id, s.after_leir, s.step_index + 1), i)
    out: dict[int, int] = {}
    for i, s in enumerate(steps):
        p = by_after.get((s.trajectory_id, s.before_leir, s.step_index))
        if p is not None and p != i:
            out[i] = p
    return out

def parent_links_of_table(steps: pl.DataFrame) -> dict[int, int]:
    """``parent_links`` of the rows of a steps table, by a join on the program texts instead of
    records (the same rule: ``measured`` as an expression; the first parent row by index)."""
    if steps.is_empty():
        return {}
    timed = [pl.col(c).is_not_null() & (pl.col(c).struct.field("median_s") > 0) for c in ("before", "after")]
    rows = steps.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("i"), "trajectory_id", "before_leir",
                        "after_leir", "step_index",
                        (pl.col("verified") & ~pl.col("outcome").is_in(sorted(FAILED_OUTCOMES))
                         & timed[0] & timed[1]).fill_null(False).alias("measured"))
    heads = (rows.filter(pl.col("measured"))
             .group_by("trajectory_id", "after_leir", (pl.col("step_index") + 1).alias("depth"))
             .agg(pl.col("i").min().alias("p")))
    links = (rows.select("i", "trajectory_id", "before_leir", pl.col("step_index").alias("depth"))
             .join(heads, left_on=["trajectory_id", "before_leir", "depth"],
                   right_on=["trajectory_id", "after_leir", "depth"], how="inner")
             .filter(pl.col("p") != pl.col("i")).sort("i"))
    return dict(zip(links["i"].to_list(), links["p"].to_list()))


class TrajectoryRecord(_Record):
    JSON_FIELDS: ClassVar[tuple[str, ...]] = ("strategies",)

    trajectory_id: str
    kernel_id: str
    policy: str
    seed: int
    n_steps: int
    strategies: list[str]
    baseline_s: float
    best_s: float
    speedup: float
    final_leir: str
    target: str = ""
    fingerprint: str = ""
    remeasured_speedup: Optional[float] = Field(
        None, description="baseline / final, re-timed interleaved at the end of the search")
    remeasured_spread: Optional[float] = None
    night: str = Field("", description="provenance: as StepRecord.night")
    code_version: str = Field("", description="provenance: as StepRecord.code_version")
    schema_version: str = SCHEMA_VERSION


class RejectRecord(_Record):
    """A step dropped by curation, and why (a rejects table, not silence). ``step_key`` names
    the step (the steps table's ``step_key``): a search's rows share ``trajectory_id`` and
    ``step_index`` (its depth), so those two join a reject to every sibling at that depth."""

    JSON_FIELDS: ClassVar[tuple[str, ...]] = ()

    trajectory_id: str
    step_index: int
    kernel_id: str
    strategy: str
    reason: str
    step_key: str = Field("", description="the rejected step's step_key in the steps table; "
                                          "empty: a table written before it was recorded")
    schema_version: str = SCHEMA_VERSION


def _polars_type(annotation: Any) -> pl.DataType:
    import types
    import typing

    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        return _polars_type(args[0])
    if origin is Literal or annotation is str:
        return pl.Utf8()
    if annotation is bool:
        return pl.Boolean()
    if annotation is int:
        return pl.Int64()
    if annotation is float:
        return pl.Float64()
    if origin is list:
        return pl.List(_polars_type(args[0]))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return pl.Struct({n: _polars_type(f.annotation) for n, f in annotation.model_fields.items()})
    raise TypeError(f"no parquet type for {annotation!r}")


def polars_schema(kind: type[_Record]) -> dict[str, pl.DataType]:
    """The fixed table schema of a record type (JSON fields are strings)."""
    return {name: pl.Utf8() if name in kind.JSON_FIELDS else _polars_type(f.annotation)
            for name, f in kind.model_fields.items()}


def table(records: Iterable[_Record], kind: type[_Record] | None = None) -> pl.DataFrame:
    """A DataFrame of records with the record type's fixed schema (also when empty)."""
    records = list(records)
    if kind is None:
        if not records:
            raise ValueError("table() of no records needs the record type")
        kind = type(records[0])
    schema = polars_schema(kind)
    # in slices: the rows as Python dicts are many times the size of the columns they become
    parts = [pl.DataFrame([r.row() for r in records[i:i + _TABLE_SLICE]], schema=schema, orient="row")
             for i in range(0, len(records), _TABLE_SLICE)]
    if not parts:
        return pl.DataFrame([], schema=schema, orient="row")
    return pl.concat(parts, how="vertical", rechunk=True) if len(parts) > 1 else parts[0]


_TABLE_SLICE = 4096


def _write_atomic(path: str | os.PathLike, write) -> Path:
    """Call ``write(tmp_path)`` on a temp file in the target's folder, then rename it over the
    target: readers see the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        _umask_mode(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_table(df: pl.DataFrame, path: str | os.PathLike) -> Path:
    """Write parquet atomically."""
    return _write_atomic(path, df.write_parquet)


def _umask_mode(path: str) -> None:
    """Give a temp file the mode a plain open() would (mkstemp makes it 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write a text file atomically."""
    return _write_atomic(path, lambda tmp: Path(tmp).write_text(text))


class AtomicTextFile:
    """A text file written piece by piece and renamed over ``path`` on ``commit`` (what
    ``write_text_atomic`` does for a text too large to hold whole); ``discard`` removes the
    temp file. Same encoding as ``write_text_atomic``."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        self._f = os.fdopen(fd, "w")

    def write(self, text: str) -> None:
        self._f.write(text)

    def commit(self) -> Path:
        self._f.close()
        _umask_mode(self._tmp)
        os.replace(self._tmp, self.path)
        return self.path

    def discard(self) -> None:
        self._f.close()
        Path(self._tmp).unlink(missing_ok=True)


def read_records(path: str | os.PathLike, kind: type[_Record]) -> list:
    return [kind.from_row(r) for r in pl.read_parquet(path).iter_rows(named=True)]
