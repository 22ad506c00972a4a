"""Decontamination: the kernels of benchmark folders (a user's KernelBench checkout, a folder of
.leir files) never enter a release.

    index = build_index(["~/KernelBench"], shape_normalized=True, scale="elements=1M", jobs=2)
    kept = index.drop(kernels)        # the pool without their kernels; index.dropped says which
    index.report()                    # per folder: its kernels, the pool kernels dropped, by what

Every folder (and every folder below it that holds problem files or ``.leir`` files) is
extracted like ``steptp extract --problems``/``--leir`` (problem files run in contained workers,
without the raise check: only the kernels' text matters here), and each of its kernels is keyed
two ways:

* **exact**: the kernel id (the first 16 hex digits of the canonical LEIR hash; of the TVMScript
  for a kernel that does not raise), the key extraction deduplicates by;
* **shape-normalized** (``shape_key``): the canonical LEIR with the kernel's name and every
  number replaced, so the same operator at another size (or with other constants: an epsilon, a
  mean's 1/N) has the same key. Benchmarks state their sizes and users train at others; matching
  by shape is what catches the same operator in the pool, and it lets the benchmark be extracted
  at a small scale. It errs on the side of dropping: two operators that differ only in a
  constant are one.

A workload of a folder that fails to extract holds kernels nobody has seen: the report lists it
(``failed``), the card says so, and nothing pretends that its kernels were excluded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

__all__ = ["FolderIndex", "Index", "build_index", "folder_refs", "shape_key"]


def shape_key(leir: str) -> str | None:
    """The shape-normalized key of a canonical LEIR text (a ``KernelRecord.leir``): every number
    replaced, constants included (``steptp.leir.canon.shape_key``)."""
    from steptp.leir.canon import shape_key as key

    return key(leir, constants=True)


def _has_problems(d: Path) -> bool:
    from steptp.zoo.user import is_problem_file

    return any(p.suffix == ".py" and p.is_file() and is_problem_file(p) for p in d.iterdir())


def _has_leir(d: Path) -> bool:
    return any(p.suffix == ".leir" and p.is_file() for p in d.iterdir())


def folder_refs(folder: str | os.PathLike, scale: str = "elements=1M", size: str = "tiny"):
    """The workload references of a benchmark folder: its problem files and ``.leir`` files, and
    those of every folder below it (hidden folders skipped), in sorted order. A ValueError when
    the tree holds neither."""
    from steptp.zoo import extract as X

    root = Path(folder).expanduser()
    refs = []
    dirs = [root] + sorted(p for p in root.rglob("*")
                           if p.is_dir() and not any(part.startswith(".")
                                                     for part in p.relative_to(root).parts))
    for d in dirs:
        if _has_problems(d):
            refs += X.refs_for_problems(d, scale=scale, size=size)
        if _has_leir(d):
            refs += X.refs_for_leir([d], size=size)
    if not refs:
        raise ValueError(f"{folder}: holds no problem file (class Model, get_inputs, "
                         f"get_init_inputs) and no .leir file, nor does any folder below it")
    return refs


@dataclass
class FolderIndex:
    """The keys of one benchmark folder's kernels."""

    folder: str
    workloads: int
    kernels: int
    exact: frozenset[str]
    shapes: frozenset[str]
    failed: list[str] = field(default_factory=list)   # "workload: why" of what did not extract


@dataclass
class Index:
    """The keys of every benchmark folder, and what ``drop`` has dropped so far (kernel id ->
    (folder, ``exact`` or ``shape``); a kernel is counted for the first folder that holds it)."""

    folders: list[FolderIndex]
    shape_normalized: bool = True
    dropped: dict[str, tuple[str, str]] = field(default_factory=dict)

    def fresh(self) -> "Index":
        """The same keys, nothing dropped yet (an index reused by another build)."""
        return Index(self.folders, self.shape_normalized)

    def match(self, k) -> tuple[str, str] | None:
        """(folder, ``exact`` or ``shape``) of the first folder holding kernel record ``k``."""
        sk = shape_key(k.leir) if self.shape_normalized else None
        for f in self.folders:
            if k.kernel_id in f.exact:
                return f.folder, "exact"
            if sk is not None and sk in f.shapes:
                return f.folder, "shape"
        return None

    def drop(self, kernels: Sequence) -> list:
        """``kernels`` less those a folder holds (recorded in ``dropped``), order kept."""
        kept = []
        for k in kernels:
            m = self.match(k)
            if m is None:
                kept.append(k)
            else:
                self.dropped.setdefault(k.kernel_id, m)
        return kept

    def report(self) -> dict[str, Any]:
        """JSON-ready: per folder its workloads and kernels, the pool kernels dropped (in all,
        and by exact or shape-normalized match, with their ids) and what failed to extract."""
        rows = []
        for f in self.folders:
            ids = sorted(kid for kid, (folder, _) in self.dropped.items() if folder == f.folder)
            by = {how: sum(1 for kid in ids if self.dropped[kid][1] == how)
                  for how in ("exact", "shape")}
            rows.append({"folder": f.folder, "workloads": f.workloads, "kernels": f.kernels,
                         "dropped": len(ids), "dropped_by": by, "dropped_ids": ids,
                         "failed": list(f.failed)})
        return {"shape_normalized": self.shape_normalized, "folders": rows,
                "dropped": len(self.dropped)}


def build_index(folders: Sequence[str], shape_normalized: bool = True,
                scale: str = "elements=1M", jobs: int = 1, size: str = "tiny") -> Index:
    """Extract every folder (``folder_refs``; ``jobs`` workers) and key its kernels. A folder is
    named in the index as given."""
    from steptp.zoo import extract as X

    out = []
    for folder in folders:
        refs = folder_refs(folder, scale=scale, size=size)
        res = X.extract(refs, jobs=jobs, check=False)
        recs = list(res.records)
        failed = [f"{s.workload}: {s.error}" for s in res.scans if not s.ok]
        out.append(FolderIndex(
            folder=str(folder), workloads=len(res.scans), kernels=len(recs),
            exact=frozenset(r.kernel_id for r in recs),
            shapes=frozenset(k for k in (shape_key(r.leir) for r in recs) if k is not None),
            failed=failed))
    return Index(out, shape_normalized)
