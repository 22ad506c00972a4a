"""THE strategy registry: one instance per strategy name, and the candidate enumerator.

``candidates(program)`` walks every registered strategy (or one), its sites, its parameters,
checks legality, applies, and drops no-ops (a result whose canonical text equals the input's) —
here, once, rather than in each strategy. Enumeration is deterministic given ``seed``: sites come
in program order, parameters in each strategy's order, and sampling uses a ``random.Random``
seeded from ``seed`` and the strategy name (never Python's salted ``hash``).
"""

from __future__ import annotations

import random
import zlib
from typing import Any, Callable, Iterable, Mapping

from ..exactness import EXACTNESS
from ..leir import ast as A
from ..leir.printer import format_program
from .base import Candidate, IllegalRewrite, Rejected, Site, Strategy, Verdict

_REGISTRY: dict[str, Strategy] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: instantiate and register a strategy under its ``name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.exactness not in EXACTNESS:
        raise ValueError(f"{cls.name}: unknown exactness {cls.exactness!r}")
    if cls.name in _REGISTRY and type(_REGISTRY[cls.name]) is not cls:
        raise ValueError(f"strategy {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def get(name: str) -> Strategy:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no strategy {name!r}; known: {', '.join(names())}") from None


def all() -> list[Strategy]:  # noqa: A001 - the registry's vocabulary
    return [_REGISTRY[n] for n in names()]


def names() -> list[str]:
    return sorted(_REGISTRY)


def for_target(target: str) -> list[Strategy]:
    return [s for s in all() if target in s.targets]


def canonical(program: A.Program) -> str:
    """The text two programs are compared by to detect a no-op: ``canon.canonical_text`` when
    the canonicalizer is available (it also forgives a mere renaming), else the printer."""
    try:
        from ..leir.canon import canonical_text  # type: ignore[attr-defined]
    except Exception:  # pragma: no cover - the canonicalizer is optional here
        return format_program(program)
    try:
        return canonical_text(program)
    except Exception:
        return format_program(program)


def _analysis(program: A.Program) -> Any:
    try:
        from ..leir.analysis import Analysis  # type: ignore[attr-defined]

        return Analysis(program)
    except Exception:
        return None


def _checker() -> Callable[[A.Program], Any] | None:
    try:
        from ..leir.check import check  # type: ignore[attr-defined]

        return check
    except Exception:
        return None


def _rng(seed: int | None, name: str) -> random.Random | None:
    if seed is None:
        return None
    return random.Random((int(seed) << 32) ^ zlib.crc32(name.encode()))


def apply(program: A.Program, strategy: str, site: Site | Mapping[str, Any],
          params: Mapping[str, Any]) -> A.Program:
    """Apply one named strategy; raises IllegalRewrite (refused or a no-op)."""
    s = get(strategy)
    if not isinstance(site, Site):
        site = Site.from_json(site)
    new = s.apply(program, site, params)
    if canonical(new) == canonical(program):
        raise IllegalRewrite(f"{strategy} at {site}: no-op (canonical text unchanged)")
    return new


def check(program: A.Program, strategy: str, site: Site | Mapping[str, Any],
          params: Mapping[str, Any]) -> Verdict:
    s = get(strategy)
    if not isinstance(site, Site):
        site = Site.from_json(site)
    return s.check(program, site, params)


def candidates(program: A.Program, strategy: str | Iterable[str] | None = None, target: str = "cpu",
               seed: int | None = 0, max_per_site: int | None = None, *, rng: random.Random | None = None,
               with_rejected: bool = False, validate: bool = True
               ) -> list[Candidate] | tuple[list[Candidate], list[Rejected]]:
    """Every legal, non-trivial application of the strategies to ``program``.

    * ``strategy``: one name, several, or None for every strategy that supports ``target``;
    * ``seed``: sampling seed (``None`` = each strategy's full deterministic enumeration);
    * ``max_per_site``: keep at most this many candidates per site: choices are tried in a seeded
      order until that many are legal (output in enumeration order);
    * ``rng``: an explicit generator, overriding ``seed``;
    * ``with_rejected``: also return the refused and no-op choices with their reasons;
    * ``validate``: run ``leir.check`` on each result when the checker is available, rejecting
      a rewrite that produced an invalid program (a strategy bug, reported rather than hidden).

    Candidates with identical resulting text (per strategy) are kept once, the first found.
    """
    if strategy is None:
        strategies = for_target(target)
    elif isinstance(strategy, str):
        strategies = [get(strategy)]
    else:
        strategies = [get(n) for n in strategy]
    base = canonical(program)
    analysis = _analysis(program)
    checker = _checker() if validate else None
    if checker is not None:
        try:
            checker(program)
        except Exception:
            checker = None  # the input itself does not pass the checker: nothing to compare to
    out: list[Candidate] = []
    rejected: list[Rejected] = []
    for s in strategies:
        if target not in s.targets:
            continue
        r = rng if rng is not None else _rng(seed, s.name)
        seen: set[str] = set()
        for site in s.sites(program, analysis):
            choices = list(s.params(program, site, r))
            # With a cap, choices are tried in a seeded order until `max_per_site` of them are
            # legal and new (an illegal draw does not cost the site its candidate); the kept
            # ones come out in enumeration order.
            order = list(range(len(choices)))
            if max_per_site is not None and r is not None:
                r.shuffle(order)
            kept: list[tuple[int, Candidate]] = []
            for k in order:
                if max_per_site is not None and len(kept) >= max_per_site:
                    break
                p = choices[k]
                v = s.check(program, site, p)
                if not v.ok:
                    rejected.append(Rejected(s.name, site, p, v.reason))
                    continue
                try:
                    new = s.rewrite(program, site, p)
                except IllegalRewrite as e:
                    rejected.append(Rejected(s.name, site, p, str(e)))
                    continue
                if checker is not None:
                    try:
                        checker(new)
                    except Exception as e:  # a strategy bug: keep it visible
                        rejected.append(Rejected(s.name, site, p, f"result fails leir.check: {e}"))
                        continue
                text = canonical(new)
                if text == base:
                    rejected.append(Rejected(s.name, site, p, "no-op: canonical text unchanged"))
                    continue
                if text in seen:
                    rejected.append(Rejected(s.name, site, p, "duplicate of an earlier candidate"))
                    continue
                seen.add(text)
                kept.append((k, Candidate(s.name, site, dict(p), new,
                                          s.exactness_for(program, site, p), text)))
            out.extend(c for _, c in sorted(kept, key=lambda kc: kc[0]))
    return (out, rejected) if with_rejected else out


def describe() -> list[dict[str, Any]]:
    """The registry as JSON-able rows (name, family, exactness, targets, inverse)."""
    return [{"name": s.name, "family": s.family, "exactness": s.exactness,
             "targets": sorted(s.targets), "inverse": s.inverse, "description": s.description}
            for s in all()]


__all__ = ["register", "get", "all", "names", "for_target", "candidates", "apply", "check",
           "canonical", "describe"]
