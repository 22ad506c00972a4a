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
