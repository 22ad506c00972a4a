"""An eval's work as it is done: ``proposals.partial.jsonl`` in the run's folder.

Each unit of work is appended as ONE line, flushed to disk, the moment it is judged: in
``single`` mode a (mode, policy, kernel, state) with all its proposals; in multi-step modes a
(mode, policy, kernel) with all its proposals and its kernel row (a search is resumed per
kernel: a kernel cut off halfway is searched again, its replies and measurements then come from
the LLM and measurement caches). The first line is a header naming the configuration.

A run that finds the file (after a crash, a kill, a lost machine) resumes from it: a unit
already recorded is not judged again, its rows are taken as recorded, in the place the loop
would have produced them, so the final report is the one an uninterrupted run writes. A torn
last line (the process died mid-write) is dropped; a header from another configuration is an
error rather than a silent mix. When the report is written, the file is removed.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

log = logging.getLogger("steptp.eval")
PARTIAL = "proposals.partial.jsonl"
VERSION = 1


class JournalMismatch(ValueError):
    """The run's folder holds a partial file of another configuration."""


def unit_key(*parts: Any) -> str:
    return "|".join(str(p) for p in parts)


class Journal:
    """``done(key)`` -> the recorded (rows, kernel rows) or None; ``record(key, rows, kernels)``.
    ``resume=False`` discards a partial file found in the folder."""

    def __init__(self, folder: str | Path, header: Mapping[str, Any], resume: bool = True):
        self.path = Path(folder) / PARTIAL
        self.header = {"journal": VERSION, **json.loads(json.dumps(dict(header), default=str))}
        self.units: dict[str, tuple[list[dict], list[dict]]] = {}
        if resume and self.path.is_file():
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(json.dumps(self.header, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
        self._f = open(self.path, "a", encoding="utf-8")

    @property
    def resumed(self) -> int:
        return len(self.units)

    def _load(self) -> None:
        data = self.path.read_bytes()
        good, lines = 0, []
        for raw in data.splitlines(keepends=True):
            if not raw.endswith(b"\n"):
                break                   # torn: written when the process died
            try:
                lines.append(json.loads(raw))
            except ValueError:
                break
            good += len(raw)
        if not lines:
            raise JournalMismatch(f"{self.path}: no header; run with --fresh to start over")
        if lines[0] != self.header:
            diff = sorted(k for k in set(lines[0]) | set(self.header)
                          if lines[0].get(k) != self.header.get(k))
            raise JournalMismatch(
                f"{self.path} was written by another configuration ({', '.join(diff)} differ): "
                "run with --fresh to discard it, or choose another --run")
        for u in lines[1:]:
            self.units[u["unit"]] = (list(u["rows"]), list(u.get("kernels") or []))
        if good < len(data):
            log.warning("%s: dropped a torn last line (%d bytes)", self.path, len(data) - good)
            os.truncate(self.path, good)
        log.info("resuming from %s: %d units already judged", self.path, len(self.units))

    def done(self, key: str) -> Optional[tuple[list[dict], list[dict]]]:
        return self.units.get(key)

    def record(self, key: str, rows: Sequence[Mapping[str, Any]],
               kernels: Sequence[Mapping[str, Any]] = ()) -> None:
        unit = {"unit": key, "rows": [dict(r) for r in rows], "kernels": [dict(k) for k in kernels]}
        # one write of one line: a kill leaves the unit whole or torn, never half a unit
        self._f.write(json.dumps(unit, default=str) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())
        self.units[key] = (unit["rows"], unit["kernels"])

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def finish(self) -> None:
        """The report holds everything: the partial file goes."""
        self.close()
        self.path.unlink(missing_ok=True)


__all__ = ["PARTIAL", "Journal", "JournalMismatch", "unit_key"]
