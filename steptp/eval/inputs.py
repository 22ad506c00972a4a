"""What an eval runs on: a release split, a kernels table, or LEIR files — as loop states.

A release gives (a) its kernels of the split (multi-step roots), (b) every state of the split
once (single-step states: its ``prompts`` config, the prompt of every SFT example and preference
pair and every kernel, with the loosest exactness along the recorded path to it), (c) the SFT rows themselves (the ``replay`` policy) and (d) the best
recorded trajectory speedup per kernel (the report's ratio)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import polars as pl

from ..leir import check, format_program, parse
from ..leir.canon import canonical_hash
from ..leir.parser import decode
from ..records import StepRecord, parent_links, step_key
from ..exactness import worse
from ..export.hub import CONFIG_DIR, prompt_states
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


def _path(key: Optional[str], strategy: dict[str, str], parent: dict[str, Optional[str]]) -> tuple[str, ...]:
    """The strategies from the root to the state a step of ``key`` ends in (``key``: the state's
    ``parent_step_key``, None at a root)."""
    out: list[str] = []
    while key is not None and key in strategy and len(out) <= len(strategy):
        out.append(strategy[key])
        key = parent.get(key)
    return tuple(reversed(out))


def _prompt_rows(folder: Path, split: str, kdf: pl.DataFrame, steps: list[StepRecord], sft_mask: list[bool],
                 parents: dict[int, int], hardware: str) -> tuple[list[dict], str]:
    """The release's states of ``split``: its ``prompts`` config (every SFT and pair prompt and
    every kernel of the split, the states the RL reward and environment see), or, for a folder
    with data tables only, the same rows derived from them (``export.hub.prompt_states``; the
    pair prompts are then missing: pairs live in the configs and chat files)."""
    config = folder / CONFIG_DIR / "prompts"
    if config.is_dir():
        f = config / f"{split}.parquet"
        return (_read(f).to_dicts() if f.is_file() else []), str(f)
    if "split" not in kdf.columns:
        kdf = kdf.with_columns(pl.lit(split).alias("split"))
    sft_keys = {step_key(s) for s, m in zip(steps, sft_mask) if m}
    rows = prompt_states(kdf, steps, sft_keys, set(), parents, {k: split for k in kdf["kernel_id"]}, hardware)
    return rows, str(folder / "data")


def _states(rows: list[dict], where: str, originals: dict[str, str], steps: list[StepRecord], keys: list[str],
            parent_keys: list[Optional[str]], hardware: str, target: str) -> list[State]:
    strategy = {k: s.strategy for k, s in zip(keys, steps)}
    parent = dict(zip(keys, parent_keys))
    states: dict[tuple[str, str], State] = {}
    for i, r in enumerate(rows):
        try:
            kid, text, exact, depth = r["kernel_id"], r["program"], r["exactness"], int(r["depth"])
            worse("exact", exact)
        except (KeyError, TypeError, ValueError) as e:
            raise EvalInputError(f"{where}: row {i}: no valid kernel_id, program, exactness and depth "
                                 f"({type(e).__name__}: {e})") from None
        if kid not in originals:
            raise EvalInputError(f"{where}: row {i}: kernel {kid!r} is not a kernel of the split")
        try:
            prog = format_program(parse(text))
        except Exception as e:  # noqa: BLE001 - a release file is input: name the row
            raise EvalInputError(f"{where}: row {i} ({kid}): its program does not parse "
                                 f"({type(e).__name__}: {str(e)[:200]})") from None
        key = (kid, canonical_hash(parse(prog)))
        if key not in states:
            states[key] = State(kid, originals[kid], prog, exactness=exact, depth=depth,
                                path=_path(r.get("parent_step_key"), strategy, parent), hardware=hardware,
                                target=target, meta={"source": r.get("source", "")})
    return list(states.values())


def from_release(folder: str | Path, split: str = "test", target: str = "cpu") -> Inputs:
    """A release's kernels of ``split`` (roots), every state of the split (the ``prompts``
    config's rows: SFT prompts, pair-only prompts and unscheduled kernels), its SFT steps and its
    best trajectory speedups."""
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
    # the tree's edges as released (data/steps.parquet's keys), else as the export derives them
    parents = parent_links(all_steps)
    keys = sdf["step_key"].to_list() if "step_key" in sdf.columns else [step_key(s) for s in all_steps]
    parent_keys = (sdf["parent_step_key"].to_list() if "parent_step_key" in sdf.columns
                   else [keys[parents[i]] if i in parents else None for i in range(len(keys))])
    rows, where = _prompt_rows(folder, split, kdf, all_steps, sft_mask, parents, hardware)
    states = _states(rows, where, originals, all_steps, keys, parent_keys, hardware, target)
    best: dict[str, float] = {}
    tpath = folder / "data" / "trajectories.parquet"
    if tpath.is_file():
        for r in pl.read_parquet(tpath).filter(pl.col("kernel_id").is_in(list(originals))).iter_rows(named=True):
            sp = r.get("remeasured_speedup") or r.get("speedup")
            if sp and sp > best.get(r["kernel_id"], 0.0):
                best[r["kernel_id"]] = float(sp)
    return Inputs(roots, states, sft, best, f"{folder} ({split})")


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
            prog = parse(decode(Path(p).read_bytes()))
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
