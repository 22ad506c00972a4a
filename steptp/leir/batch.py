"""Many LEIR texts parsed at once: the printed text and the canonical hash of each, in worker
processes when there are enough of them to pay for starting those.

Parsing is most of the time of a release's export (one parse per distinct program of its
prompts), and each text is independent. The workers are spawned (not forked: the caller may run
threads, e.g. polars'), and they import only ``steptp.leir``.
"""

from __future__ import annotations

import os
from typing import Sequence

#: fewer texts than this are parsed in the calling process
MIN_PARALLEL = 256
CHUNK = 64


def forms(text: str) -> tuple[str, str]:
    """(``format_program`` of the parsed text, its ``canonical_hash``)."""
    from .canon import canonical_hash
    from .parser import parse
    from .printer import format_program

    prog = parse(text)
    return format_program(prog), canonical_hash(prog)


def _forms_or_none(text: str) -> tuple[str, str] | None:
    try:
        return forms(text)
    except Exception:  # noqa: BLE001 - the caller parses it again and raises the error itself
        return None


def workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def many_forms(texts: Sequence[str], processes: int | None = None) -> list[tuple[str, str]]:
    """``forms`` of each text, in order. ``processes``: worker processes (default: the CPUs this
    process may run on); in this process when 1 or when the texts are few. A text that does
    not parse raises its ``LeirSyntaxError`` here, as ``forms`` would."""
    n = workers() if processes is None else processes
    if n <= 1 or len(texts) < MIN_PARALLEL:
        return [forms(t) for t in texts]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    try:
        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn")) as ex:
            got = list(ex.map(_forms_or_none, texts, chunksize=CHUNK))
    except Exception:  # noqa: BLE001 - no workers here (a daemon process, a main module that
        # starts work on import): the same results, in this process
        got = [None] * len(texts)
    return [g if g is not None else forms(t) for g, t in zip(got, texts)]


__all__ = ["forms", "many_forms", "workers"]
