"""LEIR from a model is bounded (issue #35): its size and nesting have limits with clear
positioned errors, deep but legitimate programs go through every stage, and nothing raises
RecursionError or reads for minutes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steptp.cli import app
from steptp.leir import LeirSyntaxError, check, format_program, parse
from steptp.leir.parser import MAX_BYTES, MAX_DEPTH, decode

runner = CliRunner()


def cli_check(tmp_path: Path, data: bytes | str):
    f = tmp_path / "k.leir"
    f.write_bytes(data if isinstance(data, bytes) else data.encode())
    return runner.invoke(app, ["check", str(f)])


def flat_sum(n: int) -> str:
    return f"kernel f32 k(A[{n}]) -> B[1]\n  B[0] = {' + '.join(f'A[{i}]' for i in range(n))}\n"


def test_a_601_term_sum_is_checked_printed_built_and_verified(tmp_path):
    """601 operands nest 601 levels (RecursionError in `steptp check` before): accepted, and
    built and verified against the loop that sums in the same order."""
    from steptp.measure.verify import verify

    text = flat_sum(601)
    r = cli_check(tmp_path, text)
    assert r.exit_code == 0 and "ok" in r.output, r.output
    p = parse(text)
    check(p)
    assert parse(format_program(p)) == p
    loop = "kernel f32 k(A[601]) -> B[1]\n  for k in 601:\n    B[0] += A[k]\n"
    res = verify(p, loop, seeds=(0, 4))
    assert res.passed, res.reason


def test_deep_nesting_is_a_positioned_error_not_a_recursion_error(tmp_path):
    neg = "kernel f32 k(A[4]) -> B[4]\n  for i in 4:\n    B[i] = " + "-" * 5000 + "A[i]\n"
    r = cli_check(tmp_path, neg)
    assert r.exit_code == 2 and "RecursionError" not in r.output
    assert f"line 3, column {12 + MAX_DEPTH}: more than {MAX_DEPTH} unary operators" in r.output
    with pytest.raises(LeirSyntaxError) as e:
        parse(neg.replace("-" * 5000, "- " * 5000))
    assert e.value.line == 3
    # nesting neither the brackets (600) nor the run of minus signs (500) reaches alone
    mixed = "kernel f32 k(A[4]) -> B[4]\n  for i in 4:\n    B[i] = " + "-(" * 600 + "-" * 500 + \
        "A[i]" + ")" * 600 + "\n"
    with pytest.raises(LeirSyntaxError, match="nests more than 1000 levels") as e:
        parse(mixed)
    assert e.value.line == 3
    parse(mixed, max_depth=1300)      # the limit is a parameter
    loops = "kernel f32 k(A[2]) -> B[2]\n" + "".join(
        "  " * (d + 1) + f"for i{d} in 1:\n" for d in range(1001)) + "  " * 1002 + "B[0] = A[0]\n"
    with pytest.raises(LeirSyntaxError, match="nests more than 1000 levels"):
        parse(loops)


def test_huge_and_deep_texts_fail_fast(tmp_path):
    """5 MB of nested parentheses was still parsing after 150 s (700 MB); 0.5 MB took 10 s."""
    for n, what in ((2_500_000, "longer than the limit of 1,048,576 bytes"),
                    (250_000, f"brackets nest more than {MAX_DEPTH} deep")):
        text = "kernel f32 k(A[4]) -> B[4]\n  for i in 4:\n    B[i] = " + "(" * n + "A[i]" + \
            ")" * n + "\n"
        t0 = time.perf_counter()
        with pytest.raises(LeirSyntaxError, match=what) as e:
            parse(text)
        assert time.perf_counter() - t0 < 5.0
        assert e.value.line == 3 and e.value.column is not None
        assert len(str(e.value)) < 500          # the quoted line is a window, not 5 MB
    r = cli_check(tmp_path, text)
    assert r.exit_code == 2 and "brackets nest more than" in r.output


def test_the_size_limit_is_exact_and_configurable():
    head = "kernel f32 k(A[4]) -> B[4]\n  for i in 4:\n    B[i] = A[i]\n"
    at_limit = head + "#" * (MAX_BYTES - len(head) - 1) + "\n"
    assert len(at_limit.encode()) == MAX_BYTES
    parse(at_limit)
    over = at_limit + "#"
    with pytest.raises(LeirSyntaxError, match="longer than the limit") as e:
        parse(over)
    assert (e.value.line, e.value.column) == (5, 1)     # the first byte beyond it
    # a multi-byte character counts its bytes
    with pytest.raises(LeirSyntaxError, match="limit of 60 bytes"):
        parse(head.replace("# ", "") + "# " + "é" * 5, max_bytes=60)
    parse(head + "# " + "é" * 5, max_bytes=100)


def test_bytes_that_are_not_utf8_are_named(tmp_path):
    data = b"kernel f32 k(A[4]) -> B[4]\n  B = A \xff\xfe\n"
    r = cli_check(tmp_path, data)
    assert r.exit_code == 2 and "UnicodeDecodeError" not in r.output
    assert "line 2, column 9: the text is not UTF-8: byte 0xff at offset 35" in r.output
    with pytest.raises(LeirSyntaxError, match="not UTF-8") as e:
        decode(data)
    assert (e.value.line, e.value.column) == (2, 9)
    assert parse(decode(b"\xef\xbb\xbf" + data.replace(b" \xff\xfe", b""))).name == "k"  # BOM
