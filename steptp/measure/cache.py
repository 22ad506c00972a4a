"""A local SQLite cache of measurement and verification results.

Timings are keyed by (canonical program hash, target key, fingerprint id, measurement-config
hash); the canonical text of each timed LEIR program is kept once per hash (table
``programs``), so a learned cost model can be trained from the cache (``timed_programs``);
verdicts by (canonical before hash, canonical after hash, target key, fingerprint id,
verification-config hash: exactness and seeds). A changed machine, TVM, LLVM or thread count
changes the fingerprint id and so misses the cache. Both config hashes are stored with the code
version of the measurement code (``steptp.codehash.stage_hash("measure")``: the steptp version
and the source of ``measure``, ``tir`` and ``leir``), so a code change misses the cache too.

Age: a ``Cache(max_age_s=..., not_before=...)`` reuses only timings at most that old and made
no earlier than ``not_before`` (verdicts do not age: they follow from the programs and the
code). Rows are dated by the cache's ``clock`` (default: the wall clock; a build of a given date
passes its own). A nightly passes the start of its night as ``not_before``, so it re-measures
what earlier nights measured while a rerun of the same night reuses it.

Location: ``$STEPTP_CACHE`` or ``.steptp/cache.sqlite`` under the working directory. Safe for
concurrent writers (threads and processes): WAL journal, a busy timeout, one short transaction
per write, retries with backoff on ``database is locked``, and a fresh connection per operation.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..lru import LRU

DEFAULT_PATH = Path(".steptp") / "cache.sqlite"
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS timings (
    program_hash TEXT NOT NULL,
    target_key TEXT NOT NULL,
    fingerprint_id TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (program_hash, target_key, fingerprint_id, config_hash)
);
CREATE TABLE IF NOT EXISTS verifications (
    before_hash TEXT NOT NULL,
    after_hash TEXT NOT NULL,
    target_key TEXT NOT NULL,
    fingerprint_id TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (before_hash, after_hash, target_key, fingerprint_id, config_hash)
);
CREATE TABLE IF NOT EXISTS programs (
    program_hash TEXT PRIMARY KEY,
    leir TEXT NOT NULL
);
"""


def default_path() -> Path:
    env = os.environ.get("STEPTP_CACHE")
    return Path(env) if env else Path.cwd() / DEFAULT_PATH


#: ``program_hash`` of texts: a search's candidate text is hashed by its verification's and its
#: timing's cache lookups (and the verify-ahead thread's), the kernel's original text on every
#: verification, each a LEIR parse of a few ms on the search process's thread. Bounded; a text
#: that does not parse is not kept (it raises each time).
_TEXT_HASHES: "LRU[str]" = LRU(4096)


def program_hash(program: Any) -> str:
    """The cache identity of a program: ``leir:<canonical hash>`` for LEIR (text or Program),
    ``tvms:<sha256 of the stripped text>`` for TVMScript."""
    from ..leir import ast as A
    from ..leir.canon import canonical_hash
    from .programs import is_tvmscript

    if isinstance(program, A.Program):
        return "leir:" + canonical_hash(program)
    if not isinstance(program, str):
        raise TypeError(f"cannot hash a {type(program).__name__}; pass LEIR or TVMScript text")
    hit = _TEXT_HASHES.get(program)
    if hit is not None:
        return hit
    if is_tvmscript(program):
        return _TEXT_HASHES.put(
            program, "tvms:" + hashlib.sha256(program.strip().encode("utf-8")).hexdigest())
    from ..leir import parse

    return _TEXT_HASHES.put(program, "leir:" + canonical_hash(parse(program)))


def _newest_per_program(rows, limit: int | None) -> list[tuple[str, float]]:
    """The first (newest) usable timing of each program from ``(hash, text, result json)`` rows
    in newest-first order, stopping at ``limit``."""
    out: list[tuple[str, float]] = []
    seen: set[str] = set()
    for ph, text, result in rows:
        if limit is not None and len(out) >= limit:
            break
        if ph in seen:
            continue
        seen.add(ph)
        try:
            median = float(json.loads(result)["median_s"])
        except (ValueError, KeyError, TypeError):  # a malformed row teaches nothing
            continue
        if median > 0 and math.isfinite(median):
            out.append((text, median))
    return out


class Cache:
    """The result cache at ``path`` (default: ``default_path()``)."""

    def __init__(self, path: str | os.PathLike | None = None, timeout_s: float = 30.0,
                 retries: int = 20, *, max_age_s: float | None = None,
                 not_before: float | None = None,
                 clock: Callable[[], float] | None = None, code_key: str | None = None):
        self.path = Path(path) if path is not None else default_path()
        self.timeout_s = timeout_s
        self.retries = retries
        if max_age_s is not None and max_age_s <= 0:
            raise ValueError(f"max_age_s must be > 0 or None, not {max_age_s}")
        self.max_age_s = max_age_s
        self.not_before = not_before
        self.clock = clock or time.time
        if code_key is None:
            from ..codehash import stage_hash

            code_key = stage_hash("measure")
        self.code_key = code_key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._retry(self._init)

    # ------------------------------------------------------------------ plumbing
    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(str(self.path), timeout=self.timeout_s, isolation_level=None)
        con.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
        return con

    def _init(self) -> None:
        con = self._connect()
        try:
            con.execute("PRAGMA journal_mode = WAL")
            con.execute("PRAGMA synchronous = NORMAL")
            con.executescript(_SCHEMA)
        finally:
            con.close()

    def _retry(self, fn: Callable[[], T]) -> T:
        delay = 0.01
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except sqlite3.OperationalError as e:
                msg = str(e).lower()
                if ("locked" not in msg and "busy" not in msg) or attempt == self.retries:
                    raise
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def _get(self, sql: str, args: tuple) -> dict | None:
        def op():
            con = self._connect()
            try:
                row = con.execute(sql, args).fetchone()
            finally:
                con.close()
            return json.loads(row[0]) if row else None

        return self._retry(op)

    def _put(self, sql: str, args: tuple) -> None:
        self._put_all([(sql, args)])

    def _put_all(self, statements: list[tuple[str, tuple]]) -> None:
        """Run ``statements`` in one transaction (a timing and its program text land together)."""
        def op():
            con = self._connect()
            try:
                con.execute("BEGIN IMMEDIATE")
                try:
                    for sql, args in statements:
                        con.execute(sql, args)
                    con.execute("COMMIT")
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
            finally:
                con.close()

        self._retry(op)

    # ------------------------------------------------------------------ keys
    def _key(self, config_hash: str) -> str:
        return f"{config_hash}@{self.code_key}"

    # ------------------------------------------------------------------ timings
    def get_timing(self, program_hash: str, target_key: str, fingerprint_id: str,
                   config_hash: str) -> dict | None:
        """The stored timing, or None (none, another code version, older than max_age_s, or
        made before not_before)."""
        oldest = -math.inf if self.max_age_s is None else self.clock() - self.max_age_s
        if self.not_before is not None:
            oldest = max(oldest, self.not_before)
        return self._get(
            "SELECT result FROM timings WHERE program_hash=? AND target_key=? AND "
            "fingerprint_id=? AND config_hash=? AND created_at>=?",
            (program_hash, target_key, fingerprint_id, self._key(config_hash), oldest))

    def put_timing(self, program_hash: str, target_key: str, fingerprint_id: str,
                   config_hash: str, result: dict, leir: str | None = None) -> None:
        """Store a timing; ``leir``: the program's canonical LEIR text, kept for training."""
        statements = [("INSERT OR REPLACE INTO timings VALUES (?, ?, ?, ?, ?, ?)",
                       (program_hash, target_key, fingerprint_id, self._key(config_hash),
                        json.dumps(result, sort_keys=True), self.clock()))]
        if leir is not None:
            # the hash names the canonical program, so its stored text never needs replacing
            statements.append(("INSERT OR IGNORE INTO programs VALUES (?, ?)",
                               (program_hash, leir)))
        self._put_all(statements)

    def timed_programs(self, fingerprint_id: str, target_key: str,
                       limit: int | None = None) -> list[tuple[str, float]]:
        """``(canonical LEIR text, median seconds)`` of the LEIR programs timed on this
        fingerprint and target (any measurement config), newest first (ties by hash), one row
        per program (its newest timing), at most ``limit`` rows. Timings stored without a text
        (TVMScript, or written before texts were kept) are left out."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0 or None, not {limit}")

        def op():
            con = self._connect()
            try:
                cur = con.execute(
                    "SELECT t.program_hash, p.leir, t.result FROM timings t "
                    "JOIN programs p ON p.program_hash = t.program_hash "
                    "WHERE t.fingerprint_id=? AND t.target_key=? "
                    "ORDER BY t.created_at DESC, t.program_hash, t.config_hash",
                    (fingerprint_id, target_key))
                return _newest_per_program(cur, limit)
            finally:
                con.close()

        return self._retry(op)

    # ------------------------------------------------------------------ verdicts
    def get_verification(self, before_hash: str, after_hash: str, target_key: str,
                         fingerprint_id: str, config_hash: str) -> dict | None:
        return self._get(
            "SELECT result FROM verifications WHERE before_hash=? AND after_hash=? AND "
            "target_key=? AND fingerprint_id=? AND config_hash=?",
            (before_hash, after_hash, target_key, fingerprint_id, self._key(config_hash)))

    def put_verification(self, before_hash: str, after_hash: str, target_key: str,
                         fingerprint_id: str, config_hash: str, result: dict) -> None:
        self._put("INSERT OR REPLACE INTO verifications VALUES (?, ?, ?, ?, ?, ?, ?)",
                  (before_hash, after_hash, target_key, fingerprint_id, self._key(config_hash),
                   json.dumps(result, sort_keys=True), self.clock()))

    # ------------------------------------------------------------------ housekeeping
    def counts(self) -> dict[str, int]:
        def op():
            con = self._connect()
            try:
                return {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                        for t in ("timings", "verifications")}
            finally:
                con.close()

        return self._retry(op)

    def clear(self) -> None:
        self._put_all([("DELETE FROM timings", ()), ("DELETE FROM verifications", ()),
                       ("DELETE FROM programs", ())])

    def __repr__(self) -> str:
        return f"Cache({str(self.path)!r})"
