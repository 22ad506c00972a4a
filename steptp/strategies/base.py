"""The contract every rewrite strategy follows.

A strategy is one kind of atomic optimization decision. It declares

* ``name`` — the dataset's vocabulary word (``loop_split``...);
* ``family`` — ``loop``, ``memory``, ``algebraic``...;
* ``exactness`` — ``exact`` (bit-identical results), ``reassociation`` (floating-point sums are
  regrouped: equal up to rounding) or ``algebraic`` (a mathematical identity);
* ``targets`` — the targets it applies to (``{"cpu"}``, ``{"gpu"}`` or both);
* ``inverse`` — the name of the strategy undoing it, if any;

and provides ``sites`` (where it can apply), ``params`` (the choices at a site), ``check`` (a
legality verdict with a reason) and ``apply`` (the new program; never mutates its input).

A :class:`Site` is JSON-able and written so that a language model could name it back: the path of
the statement it is about (body indices from the program root) plus the loop variables there,
e.g. ``{"path": [0, 1], "loops": ["j"]}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

from ..leir import ast as A

TARGETS = ("cpu", "gpu")


def _freeze(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, _freeze(x)) for k, x in v.items())
    return v


def _thaw(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_thaw(x) for x in v]
    return v


@dataclass(frozen=True)
class Site:
    """Where a strategy applies. ``path`` locates the main statement (usually a loop), ``loops``
    names the loop variables involved, ``extra`` holds strategy-specific fields (e.g. the second
    path of a fusion) as a tuple of (key, value) pairs so that the site stays hashable."""

    path: tuple[int, ...]
    loops: tuple[str, ...] = ()
    extra: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def make(cls, path: Sequence[int], loops: Sequence[str] = (), **extra: Any) -> "Site":
        return cls(tuple(int(p) for p in path), tuple(loops),
                   tuple((k, _freeze(v)) for k, v in extra.items()))

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self.extra:
            if k == key:
                return v
        return default

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": list(self.path), "loops": list(self.loops)}
        for k, v in self.extra:
            d[k] = _thaw(v)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Site":
        extra = {k: v for k, v in d.items() if k not in ("path", "loops")}
        return cls.make(d.get("path", ()), d.get("loops", ()), **extra)

    def __str__(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


OK = Verdict(True, "")


def refuse(reason: str) -> Verdict:
    return Verdict(False, reason)


class IllegalRewrite(ValueError):
    """``apply`` was asked for a rewrite its ``check`` refuses."""


@dataclass(frozen=True)
class Candidate:
    """One legal application: the strategy, where, with which parameters, and the result."""

    strategy: str
    site: Site
    params: Mapping[str, Any]
    program: A.Program
    exactness: str = "exact"
    text: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "site": self.site.to_json(), "params": dict(self.params),
                "exactness": self.exactness}


@dataclass(frozen=True)
class Rejected:
    """A (site, params) the strategy refused (or that was a no-op), with the reason."""

    strategy: str
    site: Site
    params: Mapping[str, Any]
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "site": self.site.to_json(), "params": dict(self.params),
                "reason": self.reason}


class Strategy:
    """Base class. Subclasses set the class attributes and implement the four methods."""

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    exactness: ClassVar[str] = "exact"
    targets: ClassVar[frozenset[str]] = frozenset(TARGETS)
    inverse: ClassVar[str | None] = None
    description: ClassVar[str] = ""

    def sites(self, program: A.Program, analysis: Any = None) -> list[Site]:
        raise NotImplementedError

    def params(self, program: A.Program, site: Site, rng: Any = None) -> list[dict[str, Any]]:
        """Every parameter choice at ``site`` in a deterministic order. ``rng`` (a
        ``random.Random``) lets a strategy with a large space sample instead; ``None`` asks for
        the deterministic enumeration."""
        return [{}]

    def check(self, program: A.Program, site: Site, params: Mapping[str, Any]) -> Verdict:
        raise NotImplementedError

    def exactness_for(self, program: A.Program, site: Site, params: Mapping[str, Any]) -> str:
        """The exactness of one application (defaults to the class's). A strategy whose class is
        ``exact`` may report ``reassociation`` for a choice that regroups a float reduction."""
        return self.exactness

    def rewrite(self, program: A.Program, site: Site, params: Mapping[str, Any]) -> A.Program:
        """The rewrite itself, called only after ``check`` said yes."""
        raise NotImplementedError

    def apply(self, program: A.Program, site: Site, params: Mapping[str, Any]) -> A.Program:
        """The rewritten program; raises :class:`IllegalRewrite` with the reason when ``check``
        refuses. The input program is never modified."""
        if isinstance(site, Mapping):
            site = Site.from_json(site)
        v = self.check(program, site, params)
        if not v.ok:
            raise IllegalRewrite(f"{self.name} at {site} with {json.dumps(dict(params))}: {v.reason}")
        return self.rewrite(program, site, params)

    def __repr__(self) -> str:
        return f"<strategy {self.name} ({self.family}, {self.exactness}, {'/'.join(sorted(self.targets))})>"
