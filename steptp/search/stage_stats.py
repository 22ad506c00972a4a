"""What the search stage cost: its wall time, the kernels it searched and the steps it wrote,
in ``search-stats.json`` beside its ``trajectories.parquet`` (the CLI's ``--out`` folder, the
flow's work folder). Curation copies it into its report, and the export turns it into the card's
yield line (``steptp.export.coverage.yields``): what a machine-hour of searching gives."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

from ..records import write_text_atomic

FILE = "search-stats.json"


def write(folder: str | Path, *, wall_s: float, kernels: int, steps: int, workers: int,
          machines: int = 1) -> Path:
    """``folder/search-stats.json``. ``workers``: searches run at once (``search.jobs`` or Dask
    workers); ``machines``: the machines they ran on (a machine-hour is one machine's hour)."""
    d = {"wall_s": round(float(wall_s), 3), "kernels": int(kernels), "steps": int(steps),
         "workers": int(workers), "machines": int(machines)}
    old = read(folder)
    if old and (old["kernels"], old["steps"], old["workers"]) == (d["kernels"], d["steps"], d["workers"]):
        # a resumed build finds its searches cached and takes seconds: the first run's time is
        # what the searching cost
        d["wall_s"] = max(d["wall_s"], old["wall_s"])
    return write_text_atomic(Path(folder) / FILE, json.dumps(d, indent=1, sort_keys=True) + "\n")


def cumulative(tonight: Mapping[str, Any] | None, before: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the searching of an accumulated release cost in all: tonight's stats plus those of
    the release it carries from (its card's yield, itself cumulative), as machine-time on one
    machine. The yield per machine-hour then divides the release's examples by the search that
    made all of them, not by tonight's alone."""
    if not tonight:
        return None
    before = check(before) if before else None
    if not before:
        return dict(tonight)
    return {"wall_s": round(tonight["wall_s"] * tonight["machines"] + before["wall_s"] * before["machines"], 3),
            "kernels": tonight["kernels"] + before["kernels"], "steps": tonight["steps"] + before["steps"],
            "workers": tonight["workers"], "machines": 1,
            "nights": tonight.get("nights", 1) + before.get("nights", 1)}


def read(folder: str | Path) -> dict[str, Any] | None:
    """The stats beside a search's tables, or None when there are none or they are malformed
    (the file is user-editable: each field is checked, never trusted)."""
    p = Path(folder) / FILE
    if not p.is_file():
        return None
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return check(d)


def check(d: Any) -> dict[str, Any] | None:
    """``d`` when it has a finite positive ``wall_s`` and non-negative integer counts, else None."""
    if not isinstance(d, Mapping):
        return None
    w = d.get("wall_s")
    if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w) or w <= 0:
        return None
    out: dict[str, Any] = {"wall_s": float(w)}
    for k, default in (("kernels", None), ("steps", None), ("workers", 1), ("machines", 1), ("nights", 1)):
        v = d.get(k, default)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return None
        out[k] = v
    out["machines"] = max(1, out["machines"])
    return out
