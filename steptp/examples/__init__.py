"""Bundled example kernels (LEIR text), used by ``steptp demo`` and the tests."""

from __future__ import annotations

from importlib import resources


def names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).iterdir()
                  if p.name.endswith(".leir"))


def text(name: str) -> str:
    f = resources.files(__package__).joinpath(f"{name}.leir")
    if not f.is_file():
        raise KeyError(f"no bundled example {name!r}; known: {', '.join(names())}")
    return f.read_text()
