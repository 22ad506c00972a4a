"""What an eval runs on: a release split, a kernels table, or LEIR files — as loop states.

A release gives (a) its kernels of the split (multi-step roots), (b) one state per distinct
program its SFT rows start from (single-step states, with the loosest exactness along the
recorded path to them), (c) the SFT rows themselves (the ``replay`` policy) and (d) the best
recorded trajectory speedup per kernel (the report's ratio)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import polars as pl

from ..leir import check, format_program, parse
from ..leir.canon import canonical_hash
from ..records import StepRecord
from ..exactness import worse
from .judge import State


class EvalInputError(ValueError):
    """An input (release, table, LEIR file) is missing or malformed; the message names it."""


@dataclass
class Inputs:
    roots: list[State]
    states: list[State]
    sft_steps: list[StepRecord] = field(default_factory=list)
    dataset_best: dict[str, float] = field(default_factory=dict)
    source: str = ""


def _step(row: dict) -> StepRecord:
    return StepRecord.from_row({k: v for k, v in row.items() if k in StepRecord.model_fields})


def _read(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise EvalInputError(f"{path}: missing")
    try:
        return pl.read_parquet(path)
    except Exception as e:  # noqa: BLE001
        raise EvalInputError(f"{path}: not a parquet table ({type(e).__name__}: {e})") from None


def _roots(df: pl.DataFrame, hardware: str, target: str, where: str) -> list[State]:
    if "raise_ok" in df.columns:
        df = df.filter(pl.col("raise_ok"))
    for col in ("kernel_id", "leir"):
        if col not in df.columns:
            raise EvalInputError(f"{where}: no column {col!r} (is it a kernels table?)")
    out = []
    for r in df.sort("kernel_id").select("kernel_id", "leir").iter_rows(named=True):
        text = format_program(parse(r["leir"]))
        out.append(State(r["kernel_id"], text, text, hardware=hardware, target=target))
    return out


def from_release(folder: str | Path, split: str = "test", target: str = "cpu") -> Inputs:
    folder = Path(folder)
    hardware = ""
    if (folder / "stats.json").is_file():
        hardware = json.loads((folder / "stats.json").read_text()).get("hardware", "") or ""
    kdf = _read(folder / "data" / "kernels.parquet")
    if "split" in kdf.columns:
        kdf = kdf.filter(pl.col("split") == split)
    roots = _roots(kdf, hardware, target, str(folder / "data/kernels.parquet"))
    if not roots:
        raise EvalInputError(f"{folder}: no kernels in split {split!r}")
    originals = {s.kernel_id: s.original for s in roots}
    sdf = _read(folder / "data" / "steps.parquet")
    sdf = sdf.filter(pl.col("kernel_id").is_in(list(originals)))
    all_steps = [_step(r) for r in sdf.iter_rows(named=True)]
    sft_mask = sdf["sft"].to_list() if "sft" in sdf.columns else [True] * len(all_steps)
    sft = [s for s, m in zip(all_steps, sft_mask) if m]
    by_after: dict[tuple[str, str], StepRecord] = {}
    for s in all_steps:
        if s.verified:
            by_after.setdefault((s.trajectory_id, s.after_leir), s)
    states: dict[tuple[str, str], State] = {}
    for s in sorted(sft, key=lambda s: (s.kernel_id, s.trajectory_id, s.step_index)):
        exact, cur, path, hops = "exact", s.before_leir, [], 0
        while hops <= s.step_index and (s.trajectory_id, cur) in by_after:
            parent = by_after[(s.trajectory_id, cur)]
            try:
                exact = worse(exact, parent.exactness)
            except ValueError as e:
                raise EvalInputError(f"{folder}: step {parent.trajectory_id}/{parent.step_index}: {e}") from None
            cur, hops = parent.before_leir, hops + 1
            path.append(parent.strategy)
        prog = format_program(parse(s.before_leir))
        key = (s.kernel_id, canonical_hash(parse(prog)))
        if key not in states:
            states[key] = State(s.kernel_id, originals[s.kernel_id], prog, exactness=exact,
                                depth=s.step_index, path=tuple(reversed(path)), hardware=hardware,
                                target=target)
    best: dict[str, float] = {}
    tpath = folder / "data" / "trajectories.parquet"
    if tpath.is_file():
        for r in pl.read_parquet(tpath).filter(pl.col("kernel_id").is_in(list(originals))).iter_rows(named=True):
            sp = r.get("remeasured_speedup") or r.get("speedup")
            if sp and sp > best.get(r["kernel_id"], 0.0):
                best[r["kernel_id"]] = float(sp)
    return Inputs(roots, list(states.values()), sft, best, f"{folder} ({split})")


def this_machine() -> str:
    """The user turn's hardware line for this machine, worded as a release words it, so a model
    trained on a release sees the same kind of prompt here."""
    from ..export.release import hardware_description
    from ..measure.fingerprint import current

    return hardware_description(current().to_dict())


def from_kernels(path: str | Path, target: str = "cpu", hardware: str = "") -> Inputs:
    roots = _roots(_read(Path(path)), hardware or this_machine(), target, str(path))
    return Inputs(roots, list(roots), source=str(path))


def from_leir(paths: Sequence[str | Path], target: str = "cpu", hardware: str = "") -> Inputs:
    from ..leir import LeirCheckError, LeirSyntaxError

    roots = []
    here = "" if hardware else this_machine()
    for p in paths:
        try:
            prog = parse(Path(p).read_text())
            check(prog)
        except OSError as e:
            raise EvalInputError(f"{p}: cannot read ({e.strerror})") from None
        except (LeirSyntaxError, LeirCheckError) as e:
            raise EvalInputError(f"{p}: invalid LEIR:\n{e}") from None
        text = format_program(prog)
        roots.append(State(canonical_hash(prog)[:16], text, text, hardware=hardware or here,
                           target=target))
    return Inputs(roots, list(roots), source=", ".join(map(str, paths)))


def select(inputs: Inputs, max_kernels: Optional[int] = None, max_states: Optional[int] = None) -> Inputs:
    # kernels with release SFT states first: a cut keeps what replay can answer
    with_states = {s.kernel_id for s in inputs.sft_steps}
    ordered = sorted(inputs.roots, key=lambda r: r.kernel_id not in with_states)
    roots = ordered[:max_kernels] if max_kernels else inputs.roots
    keep = {r.kernel_id for r in roots}
    states = [s for s in inputs.states if s.kernel_id in keep]
    return Inputs(roots, states[:max_states] if max_states else states, inputs.sft_steps,
                  inputs.dataset_best, inputs.source)


__all__ = ["EvalInputError", "Inputs", "from_release", "from_kernels", "from_leir", "select"]
