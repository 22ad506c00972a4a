"""What version of the code produced a result: the steptp version plus a hash of the source of
the parts of the package a stage runs. Cache keys (Prefect tasks, the measurement cache) carry
it, so a code change invalidates exactly the results that code could have changed."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent

# the package parts each stage's results depend on (params/pipeline: how a stage is called)
_COMMON = ("leir", "records.py", "params.py", "pipeline.py", "codehash.py")
STAGE_PARTS: dict[str, tuple[str, ...]] = {
    "extract": ("zoo", "tir", *_COMMON),
    "search": ("search", "analysis", "strategies", "measure", "tir", *_COMMON),
    # curation reads the roles the search confirmed (search/roles.py)
    "cot": ("cot", "format", "analysis", "curate", "search/roles.py", *_COMMON),
    "curate": ("curate", "format", "search/roles.py", "export", "cot", "analysis", *_COMMON),
    # what a timing or a verdict depends on (the measurement cache)
    "measure": ("measure", "tir", "leir", "codehash.py"),
}
_SUFFIXES = {".py", ".lark", ".leir", ".json", ".yaml"}


def _version(root: Path) -> str:
    init = root / "__init__.py"
    for line in init.read_text().splitlines() if init.exists() else ():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    return "0"


@functools.lru_cache(maxsize=64)
def source_hash(parts: tuple[str, ...], root: str | None = None) -> str:
    """sha256 (16 hex digits) of the steptp version and of every source file under ``parts``
    (sub-packages or modules of the package at ``root``, default: this one), in path order."""
    base = Path(root) if root else PACKAGE
    h = hashlib.sha256(f"steptp {_version(base)}\n".encode())
    for part in sorted(set(parts)):
        p = base / part
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in _SUFFIXES
                       and "__pycache__" not in f.parts) if p.is_dir() else [p] if p.is_file() else []
        for f in files:
            h.update(f.relative_to(base).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


def stage_hash(stage: str, root: str | None = None) -> str:
    """The code version of ``stage`` (a key of ``STAGE_PARTS``)."""
    if stage not in STAGE_PARTS:
        raise KeyError(f"unknown stage {stage!r}; known: {', '.join(STAGE_PARTS)}")
    return source_hash(STAGE_PARTS[stage], root)


__all__ = ["STAGE_PARTS", "source_hash", "stage_hash"]
