"""Model replies are parsed in a worker under a time and a memory limit (issue #35):
``steptp.measure.worker.parse_in_worker``."""

from __future__ import annotations

import pytest

from steptp.leir import LeirCheckError, LeirSyntaxError, parse
from steptp.measure.worker import parse_in_worker

GOOD = "kernel f32 k(A[64,64]) -> B[64,64]\n  for i in 64 parallel:\n    B[i,j] = A[i,j] * 2.0\n"


def test_replies_parse_in_a_worker_with_the_parsers_errors():
    assert parse_in_worker(GOOD) == parse(GOOD)
    with pytest.raises(LeirSyntaxError) as e:
        parse_in_worker(GOOD.replace("* 2.0", "*"))
    assert (e.value.line, e.value.column) == (3, 22) and "unexpected end of line" in str(e.value)
    assert "B[i,j] = A[i,j] *" in str(e.value)               # the line is quoted, as parse does
    with pytest.raises(LeirCheckError) as c:
        parse_in_worker(GOOD.replace("A[i,j]", "C[i,j]"))
    assert c.value.problems[0].line == 3 and "'C' is not declared" in str(c.value)
    with pytest.raises(LeirSyntaxError, match="nests more than 1000 levels|unary operators"):
        parse_in_worker(GOOD.replace("A[i,j] * 2.0", "-" * 1200 + "A[i,j]"))


def test_a_reply_that_parses_too_long_or_too_big_costs_one_reply():
    flat = "kernel f32 k(A[8]) -> B[1]\n  B[0] = " + " + ".join("A[1]" for _ in range(140_000)) + "\n"
    assert len(flat) < (1 << 20)                               # under the size limit
    with pytest.raises(LeirSyntaxError, match="not parsed within 1 s"):
        parse_in_worker(flat, timeout_s=1.0)
    # 1 MB of statements: about 480 MB of parse tree, 22 s on a loaded machine
    many = "kernel f32 k(A[8]) -> B[1]\n" + "  B[0] += A[1] * 2.0\n" * 49_000
    assert len(many) < (1 << 20)
    with pytest.raises(LeirSyntaxError, match="ran out of its 200 MB|at its 200 MB memory limit"):
        parse_in_worker(many, timeout_s=300, memory_mb=200)
    assert parse_in_worker(GOOD, memory_mb=200).name == "k"    # the next reply parses
