"""Helpers shared by the strategy test files: parse dedented LEIR, apply through the registry,
and check a refusal both at ``check`` and at ``apply``."""

from __future__ import annotations

import textwrap

import pytest

import steptp.strategies as S
from steptp.leir import format_program, parse
from steptp.strategies.base import IllegalRewrite, Site


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
