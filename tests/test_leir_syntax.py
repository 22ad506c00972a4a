"""Parser and printer: canonical round trips and positioned syntax errors."""

import pytest

from steptp.leir import LeirSyntaxError, ast as A, format_program, parse
from steptp.leir.printer import format_expr

CANONICAL = [
    # the docs example
    """kernel f32 fused_matmul_add_gelu(A[8,64], B[64,32], C[32]) -> D[8,32]
 T0[8,32]
 for i in 8 parallel, j in 32:
  T0[i,j] += A[i,k] * B[k,j]
  D[i,j] = (T0[i,j] + C[j]) * (0.5 + erf((T0[i,j] + C[j]) * 0.7071067811865476) * 0.5)
""",
    # scalars, several outputs, scopes, every reduction op
    """kernel f64 stats(X[4,16]) -> S, M[4], N[4], P[4]
 T0[4] shared
 T1[] local
 for i in 4, j in 16:
  T0[i] += X[i,j]
  M[i] max= X[i,j]
  N[i] min= X[i,j]
  P[i] *= X[i,j] * 0.5 + 1.0
 S += T0[i]
 T1 = S * 2.0
 S = T1 - -inf
""",
    # split with a tail guard, //, %, thread bindings, casts, comparisons and logic
    """kernel f32 tail(A[10], I[3] i32) -> B[10], C[3] i64
 for i in 3 blockIdx.x, j in 4 threadIdx.x:
  if i * 4 + j < 10 and not i * 4 + j == 7:
   B[i*4+j] = where(A[(i*4+j)%10] > 0.0, A[i*4+j], f32(i // 2) * 1e-05)
 for i in 3 unrolled:
  C[i] = i64(I[i]) * 2 + i64(i) % 3
""",
    # gathers, intrinsics, power, unary minus
    """kernel f32 misc(A[8], Idx[8] i32) -> B[8]
 for i in 8 vectorized:
  B[i] = -A[Idx[i]] ** 2 + pow(abs(A[i]), 0.5) - sqrt(exp(tanh(A[i]))) + max(min(A[i], 1.0), -1.0)
""",
    # no inputs
    """kernel i32 iota() -> B[4]
 B[i] = i32(i) * 3
""",
]


@pytest.mark.parametrize("text", CANONICAL)
def test_canonical_round_trip(text):
    p = parse(text)
    assert format_program(p) == text
    assert parse(format_program(p)) == p


def test_non_canonical_input_is_normalised():
    text = """# a comment before the kernel
kernel  k( A : f32[ 4 , 4 ] ) -> B: f32[4,4]   # trailing comment

    for i in 4:
        for j in 4:        # separate loop lines merge
            B[ i , j ] = ((A[i, j]) + (1.0))

"""
    assert format_program(parse(text)) == """kernel f32 k(A[4,4]) -> B[4,4]
 B[i,j] = A[i,j] + 1.0
"""


def test_positions_are_recorded_but_ignored_by_equality():
    p = parse("kernel k(A: f32[4]) -> B: f32[4]\n  for i in 4:\n    B[i] = A[i]\n")
    loop = p.body[0]
    assert loop.pos == A.Pos(2, 7)
    assert loop.body[0].pos == A.Pos(3, 5)
    assert A.strip_pos(p) == p


@pytest.mark.parametrize("src, printed", [
    ("a - (b - c)", "a - (b - c)"),
    ("(a - b) - c", "a - b - c"),
    ("a ** b ** c", "a ** b ** c"),
    ("(a ** b) ** c", "(a ** b) ** c"),
    ("-a ** 2", "-a ** 2"),
    ("(-a) ** 2", "(-a) ** 2"),
    ("(-2.0) ** 2", "(-2.0) ** 2"),
    ("2 ** -1", "2 ** -1"),
    ("-(-a)", "-(-a)"),
    ("a - -1", "a - -1"),
    ("not (a < b)", "not a < b"),
    ("(not a) == b", "(not a) == b"),
    ("(a or b) and c", "(a or b) and c"),
    ("a or b and c", "a or b and c"),
    ("a * (b + c) // 2 % 3", "a * (b + c) // 2 % 3"),
    ("1e16 + 1e-05 + inf + -inf", "1e+16 + 1e-05 + inf + -inf"),
])
def test_expression_printing(src, printed):
    def value(text):
        p = parse(f"kernel k(X: f32) -> Y: f32\n  for a in 2, b in 2, c in 2:\n    Y = {text}\n")
        return p.body[0].body[0].body[0].body[0].value

    e = value(src)
    assert format_expr(e) == printed
    assert value(printed) == e


H = "kernel k(A: f32[8]) -> B: f32[8]\n"

SYNTAX_ERRORS = [
    # (text, line, column, fragments the message must contain)
    ("unexpected character", H + "  for i in 8:\n    B[i] = A[i] $ 2.0\n", 3, 17,
     ["unexpected character '$'", "expected"]),
    ("missing colon", H + "  for i in 8\n    B[i] = A[i]\n", 2, 13,
     ["unexpected end of line", "':'"]),
    ("bad loop kind", H + "  for i in 8 fast:\n    B[i] = A[i]\n", 2, 14,
     ["unexpected 'fast'", "a loop kind"]),
    ("bad assignment operator", H + "  for i in 8:\n    B[i] -= A[i]\n", 3, 10,
     ["unexpected '-'", "+=, *=, max= or min="]),
    ("chained comparison", H + "  B[0] = where(1 < 2 < 3, 1.0, 2.0)\n", 2, 22,
     ["unexpected '<'", "')'"]),
    ("missing dtype", "kernel k(A: [8]) -> B: f32[8]\n  B[0] = 1.0\n", 1, 13,
     ["unexpected '['", "a dtype"]),
    ("declaration after a statement", H + "  B[0] = 1.0\n  T: f32[8]\n", 3, 4,
     ["unexpected ':'", "=, +=, *=, max= or min="]),
    ("missing block", H + "  for i in 8:\n  B[i] = A[i]\n", 3, 3,
     ["unexpected 'B'", "an indented block"]),
    ("inconsistent dedent", H + "  for i in 8:\n      B[i] = A[i]\n     B[i] = 1.0\n", 4, 6,
     ["inconsistent indentation", "column 3"]),
    ("unclosed parenthesis", H + "  B[0] = (A[0] + 1.0\n", 2, 21,
     ["unexpected end of block", "')'"]),
    ("empty text", "", 1, 1, ["unexpected end of input", "'kernel'"]),
    ("header only", "kernel k(A: f32[8]) -> B: f32[8]", 1, 33,
     ["unexpected end of input", "an indented block"]),
    ("no outputs", "kernel k(A: f32[8]) ->\n  B[0] = 1.0\n", 1, 23,
     ["unexpected end of line", "a name"]),
]


@pytest.mark.parametrize("name, text, line, column, fragments", SYNTAX_ERRORS,
                         ids=[c[0] for c in SYNTAX_ERRORS])
def test_syntax_errors(name, text, line, column, fragments):
    with pytest.raises(LeirSyntaxError) as info:
        parse(text)
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    for f in fragments:
        assert f in err.detail, err.detail
    assert str(err).startswith(f"line {line}, column {column}: ")


def test_syntax_error_quotes_the_line():
    with pytest.raises(LeirSyntaxError) as info:
        parse(H + "  for i in 8:\n    B[i] = A[i] $ 2.0\n")
    lines = str(info.value).splitlines()
    assert lines[1].strip() == "B[i] = A[i] $ 2.0"
    assert lines[2].index("^") == lines[1].index("$")


def test_parse_rejects_non_text():
    with pytest.raises(TypeError):
        parse(b"kernel")  # type: ignore[arg-type]


def test_implicit_loops_expand_to_explicit_ones():
    short = parse("kernel f32 mm(A[4,8], B[8,2]) -> C[4,2]\n C[i,j] += A[i,k] * B[k,j]\n")
    long = parse("kernel mm(A: f32[4,8], B: f32[8,2]) -> C: f32[4,2]\n"
                 "  for i in 4:\n    for j in 2:\n      for k in 8:\n"
                 "        C[i,j] += A[i,k] * B[k,j]\n")
    assert short == long
    assert format_program(long) == "kernel f32 mm(A[4,8], B[8,2]) -> C[4,2]\n C[i,j] += A[i,k] * B[k,j]\n"


def test_loops_that_differ_from_the_inferred_ones_stay_written():
    # i outside j is not the order the parser would infer (left-hand side first), so the i
    # loop stays written; j, innermost, is exactly what it infers.
    text = "kernel f32 t(A[4,8]) -> B[8,4]\n  for i in 4, j in 8:\n    B[j,i] = A[i,j]\n"
    assert format_program(parse(text)) == "kernel f32 t(A[4,8]) -> B[8,4]\n for i in 4:\n  B[j,i] = A[i,j]\n"
    # an inner implicit tail below written loops
    text2 = "kernel f32 r(A[4,8]) -> B[4]\n for i in 4 parallel:\n  B[i] += A[i,j]\n"
    p = parse(text2)
    assert format_program(p) == text2
    assert p.body[0].body[0] == A.Loop("j", 8, "serial", (p.body[0].body[0].body[0],))


@pytest.mark.parametrize("text, line, column, fragment", [
    ("kernel f32 k(A[8]) -> B[8]\n  B[0] = A[i+1]\n", 2, 3, "loop variable i is bound by no for loop"),
    ("kernel f32 k(A[8], C[4]) -> B[8]\n  B[i] = A[i] + C[i]\n", 2, 3, "sizes 8 and 4"),
    ("kernel k(A[8]) -> B: f32[8]\n  B[i] = A[i]\n", 1, 10, "A has no dtype"),
    ("kernel f32 k(A[8]) -> B[8]\n  T0[8,i]\n  B[i] = A[i]\n", 2, 8, "positive integers"),
])
def test_implicit_and_short_form_errors(text, line, column, fragment):
    with pytest.raises(LeirSyntaxError) as e:
        parse(text)
    assert (e.value.line, e.value.column) == (line, column), str(e.value)
    assert fragment in str(e.value)


def test_default_dtype_is_the_most_common():
    p = parse("kernel k(A: f64[4], M: bool[4], N: bool[4]) -> B: bool[4]\n  B[i] = M[i] and N[i]\n")
    assert format_program(p).splitlines()[0] == "kernel bool k(A[4] f64, M[4], N[4]) -> B[4]"
