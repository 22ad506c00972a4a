"""The foundation's main job: every bundled example through parse, check, lower, build, verify.

For each kernel: parse and check the LEIR, canonicalize it, lower it to TIR and build it for the
host CPU, run it on seeded inputs against the NumPy interpreter (an oracle that shares no code
with TVM), verify the canonical form against the original through TVM, and count o200k_base tokens
of LEIR against the TVMScript of the same program.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from . import examples
from .leir import check, format_program, parse
from .leir.canon import canonicalize
from .leir.interp import run as interpret
from .measure.verify import random_inputs, verify
from .tir.build import build, run
from .tir.lower import lower
from .tir.target import Target


@dataclass
class DemoRow:
    name: str
    ok: bool
    leir_tokens: int
    tvmscript_tokens: int
    max_abs_err_vs_numpy: float
    verified: bool
    seconds: float
    error: str = ""


def token_counter():
    import bpe_openai

    enc = bpe_openai.get_encoding("o200k_base")
    return lambda s: len(enc.encode(s))


def run_example(name: str, target: Target, count) -> DemoRow:
    t0 = time.perf_counter()
    text = examples.text(name)
    try:
        prog = parse(text)
        check(prog)
        canon, _ = canonicalize(prog)
        func = lower(prog, target)
        built = build(func, target)
        inputs = random_inputs(prog, seed=0)
        got = run(built, inputs)
        want = interpret(prog, inputs)
        err = 0.0
        for t, g in zip(prog.outputs, got):
            w = np.asarray(want[t.name])
            err = max(err, float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))))
        res = verify(canon, prog, exactness="exact", target=target)
        ok = res.passed and err <= 1e-3
        return DemoRow(name, ok, count(format_program(canon)), count(func.script()), err,
                       res.passed, time.perf_counter() - t0,
                       "" if ok else (res.reason or f"differs from NumPy by {err:.3g}"))
    except Exception as e:  # noqa: BLE001 - the demo reports every kernel and goes on
        return DemoRow(name, False, 0, 0, float("nan"), False, time.perf_counter() - t0,
                       f"{type(e).__name__}: {e}")


def run_demo(target: Target | None = None) -> list[DemoRow]:
    target = target or Target.host_cpu()
    count = token_counter()
    return [run_example(n, target, count) for n in examples.names()]
