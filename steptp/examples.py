"""The bundled example kernels (plain LEIR), used by ``steptp demo``, the CoT samples and the
tests: the named subset ``steptp/zoo/leir/examples/`` of the bundled LEIR kernels.

The zoo's LEIR-native suite (``steptp.zoo.leir``) reads the templates beside that folder, never
the folder itself. This loader reads the files without importing ``steptp.zoo.leir`` (whose
workloads import PyTorch).
"""

from __future__ import annotations

from importlib import resources

_FOLDER = ("zoo", "leir", "examples")


def _folder():
    return resources.files("steptp").joinpath(*_FOLDER)


def names() -> list[str]:
    return sorted(p.name[:-5] for p in _folder().iterdir() if p.name.endswith(".leir"))


def text(name: str) -> str:
    f = _folder().joinpath(f"{name}.leir")
    if not f.is_file():
        raise KeyError(f"no bundled example {name!r}; known: {', '.join(names())}")
    return f.read_text()
