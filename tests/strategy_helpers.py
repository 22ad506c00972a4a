"""Helpers shared by the strategy test files: parse dedented LEIR, apply through the registry,
and check a refusal both at ``check`` and at ``apply``."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import steptp.strategies as S
from steptp.leir import format_program, parse
from steptp.strategies.base import IllegalRewrite, Site

from leir_gen import inputs_for  # noqa: F401 - re-exported for the strategy tests


#: a small max pooling with its padding copy computed at each output (``compute_at`` at ``l``):
#: two 3x3 windows, the copy's and the taps', for the window-unrolling tests
FUSED_MAXPOOL = """kernel f32 mp(A[1,4,8,8]) -> B[1,4,4,4]
 C[1,4,10,10]
 for i in 1, j in 4, k in 4, l in 4:
  for k_1 in 3, l_1 in 3:
   C[i,j,k*2+k_1,l*2+l_1] = where(1 <= k * 2 + k_1 and k * 2 + k_1 < 9 and 1 <= l * 2 + l_1 and l * 2 + l_1 < 9, A[i,j,k*2+k_1-1,l*2+l_1-1], -3.4e+38)
  for m in 3, n in 3:
   B[i,j,k,l] max= C[i,j,k*2+m,l*2+n]
"""


def P(text: str):
    """A program from dedented LEIR text."""
    return parse(textwrap.dedent(text).strip() + "\n")


def T(text: str) -> str:
    """Expected output, written in any LEIR spelling, as canonical text."""
    return format_program(P(text))


def applied(program, name, site, params) -> str:
    """Apply through the registry (which also drops no-ops) and return the canonical text."""
    return format_program(S.apply(program, name, site, params))


def refusal(program, name, site, params) -> str:
    """The reason a strategy refuses this application (it must refuse at check and at apply)."""
    v = S.check(program, name, site, params)
    assert not v.ok, f"{name} at {site} with {params} should be refused"
    with pytest.raises(IllegalRewrite):
        S.get(name).apply(program, Site.from_json(site), params)
    return v.reason


def same_outputs(program, reference, exactness: str, inputs) -> None:
    """Both programs through the NumPy interpreter: ``exact`` rewrites must be bit-identical,
    the others close."""
    from steptp.leir.interp import run

    want = run(reference, inputs, check_program=False)
    got = run(program, inputs, check_program=False)
    for k in want:
        if exactness == "exact":
            assert np.array_equal(got[k], want[k], equal_nan=True), k
        else:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)
