"""Kernel programs as the measurement layer receives them: LEIR or TVMScript text (or objects).

The bottom of ``steptp.measure``'s dependencies: ``cache`` (hashing), ``timing`` and the worker
tasks import it; it imports nothing of ``steptp.measure``. ``MeasureError`` lives here
for that reason (``timing`` re-exports it).
"""

from __future__ import annotations

from typing import Any


class MeasureError(RuntimeError):
    """A kernel could not be measured (it does not parse, build or run)."""


def is_tvmscript(text: str) -> bool:
    """TVMScript (a printed PrimFunc/IRModule) rather than LEIR text."""
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        return s.startswith(("@", "from ", "import ", "class ", "def "))
    return False


def load_kernel(program: Any):
    """A LEIR ``Program`` or a TVM PrimFunc from text (LEIR or TVMScript) or an object."""
    if not isinstance(program, str):
        return program
    if is_tvmscript(program):
        import tvm

        try:
            obj = tvm.script.from_source(program)
        except Exception as e:  # noqa: BLE001
            raise MeasureError(f"TVMScript does not parse: {type(e).__name__}: {e}") from e
        if isinstance(obj, tvm.IRModule):
            funcs = [f for _, f in obj.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
            if len(funcs) != 1:
                raise MeasureError(f"the TVMScript module has {len(funcs)} PrimFuncs; need one")
            obj = funcs[0]
        return obj
    from ..leir import parse

    try:
        return parse(program)
    except Exception as e:  # noqa: BLE001
        raise MeasureError(f"LEIR does not parse: {type(e).__name__}: {e}") from e

