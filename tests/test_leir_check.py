"""steptp.leir.check: one test per kind of problem, with its message and position."""

import pytest

from steptp.leir import LeirCheckError, ast as A, check, parse
from steptp.leir.check import Problem, problems


def found(text) -> list[tuple[int, int, str]]:
    prog = parse(text) if isinstance(text, str) else text
    return [(p.line, p.column, p.message) for p in problems(prog)]


def only(text) -> tuple[int, int, str]:
    got = found(text)
    assert len(got) == 1, got
    return got[0]


def test_valid_programs_pass():
    check(parse("""kernel k(A: f32[8,64], B: f32[64,32], C: f32[32]) -> D: f32[8,32]
  T0: f32[8,32]
  for i in 8 parallel, j in 32:
    for k in 64:
      T0[i,j] += A[i,k] * B[k,j]
    D[i,j] = (T0[i,j] + C[j]) * (0.5 + erf((T0[i,j] + C[j]) * 0.7071067811865476) * 0.5)
"""))
    # split with a guard: the subscript i*4+j reaches 11 but only under the guard
    check(parse("""kernel k(A: f32[10]) -> B: f32[10]
  for i in 3, j in 4:
    if i * 4 + j < 10:
      B[i*4+j] = A[i*4+j]
"""))
    # fuse: // and % stay in range; gathers are not range-checked statically
    check(parse("""kernel k(A: f32[4,8], I: i32[32]) -> B: f32[4,8], C: f32[32]
  for f in 32:
    B[f//8,f%8] = A[f//8,f%8]
    C[f] = A[0,I[f]]
"""))
    # a degenerate reduction (no reduction axis) is allowed
    check(parse("kernel k(A: f32[4]) -> B: f32[4]\n  for i in 4:\n    B[i] += A[i]\n"))


def test_error_lists_every_problem():
    text = """kernel k(A: f32[8]) -> B: f32[8]
  for i in 8:
    B[i] = Q[i]
    A[i] = 1.0
"""
    with pytest.raises(LeirCheckError) as info:
        check(parse(text))
    err = info.value
    assert isinstance(err, ValueError)
    assert [str(p) for p in err.problems] == [
        "line 3, column 12: tensor 'Q' is not declared",
        "line 4, column 5: write to input tensor 'A'; inputs are read-only",
    ]
    assert str(err) == "\n".join(str(p) for p in err.problems)


def test_problem_without_position():
    assert str(Problem(None, "x")) == "x"
    assert str(Problem(A.Pos(2, 3), "x")) == "line 2, column 3: x"


def test_undeclared_tensor_read():
    assert only("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = Q[i]\n") == \
        (3, 12, "tensor 'Q' is not declared")


def test_undeclared_tensor_written():
    got = found("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i]\n    Q[i] = 1.0\n")
    assert got == [(4, 5, "tensor 'Q' is not declared")]


def test_undefined_loop_variable():
    # Text with an unbound variable whose extent cannot be inferred fails to parse (see
    # test_leir_syntax); an AST built by code can still hold one, and the checker names it.
    p = parse("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i]\n")
    loop = p.body[0]
    bad = A.Loop("i", 8, "serial", (A.Assign("B", (A.Var("i"),), "=", A.Load("A", (A.Var("j", A.Pos(3, 14)),))),))
    got = only(A.Program(p.name, p.inputs, p.outputs, p.intermediates, (bad,)))
    assert got[:2] == (3, 14)
    assert "name 'j' is not defined" in got[2]


def test_loop_variable_out_of_scope_after_its_loop():
    p = parse("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i]\n")
    after = A.Assign("B", (A.Var("i", A.Pos(4, 5)),), "=", A.Const(0.0, "float"))
    got = only(A.Program(p.name, p.inputs, p.outputs, p.intermediates, p.body + (after,)))
    assert got[:2] == (4, 5) and "name 'i' is not defined" in got[2]


def test_duplicate_tensor():
    got = only("kernel k(A: f32[8], A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i]\n")
    assert got == (1, 21, "tensor 'A' is declared twice (first declared at line 1, column 10)")


def test_duplicate_intermediate():
    got = only("kernel k(A: f32[8]) -> B: f32[8]\n  B: f32[8]\n  for i in 8:\n    B[i] = A[i]\n")
    assert got[:2] == (2, 3) and "tensor 'B' is declared twice" in got[2]


def test_nonpositive_shape():
    got = only("kernel k(A: f32[8,0]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i,0]\n")
    assert got[0:2] == (1, 10)
    assert got[2] == "dimension 1 of A must be a positive integer, got 0"


def test_rank_mismatch_read():
    assert only("kernel k(A: f32[8,8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i,i,0]\n") == \
        (3, 12, "A has rank 2 but is indexed with 3 subscripts")


def test_rank_mismatch_write():
    assert only("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i,0] = A[i]\n") == \
        (3, 5, "B has rank 1 but is indexed with 2 subscripts")


def test_bare_name_of_a_non_scalar():
    assert only("kernel k(A: f32[8]) -> B: f32\n  B = A\n") == \
        (2, 7, "A has rank 1 but is indexed with 0 subscripts")


def test_constant_subscript_out_of_range():
    assert only("kernel k(A: f32[8], B: f32[8]) -> C: f32[8]\n  for i in 8:\n    C[i] = A[i] + B[8]\n") == \
        (3, 21, "subscript 8 out of range for dimension 0 of B (size 8)")


def test_negative_constant_subscript():
    assert only("kernel k(A: f32[8]) -> C: f32[8]\n  for i in 8:\n    C[i] = A[-1]\n") == \
        (3, 14, "subscript -1 out of range for dimension 0 of A (size 8)")


def test_constant_subscript_is_checked_even_under_a_guard():
    text = "kernel k(A: f32[8]) -> C: f32[8]\n  for i in 8:\n    C[i] = 0.0\n    if i < 4:\n      C[9] = A[i]\n"
    assert only(text) == (5, 9, "subscript 9 out of range for dimension 0 of C (size 8)")


def test_affine_subscript_out_of_range():
    assert only("kernel k(A: f32[8]) -> C: f32[8]\n  for i in 8:\n    C[i] = A[i+1]\n") == \
        (3, 14, "subscript i+1 ranges over [1, 8], out of range for dimension 0 of A (size 8)")


def test_split_subscript_out_of_range_without_guard():
    got = only("kernel k(A: f32[10]) -> C: f32[10]\n  for i in 3, j in 4:\n    C[i*4+j] = 1.0\n"
               "  for i in 10:\n    C[i] = A[i]\n")
    assert got == (3, 7, "subscript i*4+j ranges over [0, 11], out of range for dimension 0 of C "
                         "(size 10)")


def test_modulo_subscript_range():
    # f % 8 is within [0, 7] but 8 is not a valid index of a size-7 dimension
    got = only("kernel k(A: f32[7]) -> C: f32[32]\n  for f in 32:\n    C[f] = A[f%8]\n")
    assert got == (3, 14, "subscript f%8 ranges over [0, 7], out of range for dimension 0 of A "
                          "(size 7)")


def test_range_is_not_checked_under_guard():
    check(parse("kernel k(A: f32[8]) -> C: f32[8]\n  for i in 8:\n    C[i] = 0.0\n"
                "    if i < 7:\n      C[i] = A[i+1]\n"))


def test_range_is_not_checked_in_where_branches():
    check(parse("kernel k(A: f32[8]) -> C: f32[8]\n  for i in 8:\n"
                "    C[i] = where(i >= 1, A[i-1], 0.0)\n"))
    # ... but the condition itself is, and constants always are
    got = found("kernel k(A: f32[8]) -> C: f32[8]\n  for i in 8:\n"
                "    C[i] = where(A[i+1] > 0.0, A[8], 0.0)\n")
    assert [g[2].split(",")[0] for g in got] == ["subscript i+1 ranges over [1", "subscript 8 out of range for dimension 0 of A (size 8)"]


def test_write_to_input():
    got = found("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    A[i] = 1.0\n    B[i] = A[i]\n")
    assert got == [(3, 5, "write to input tensor 'A'; inputs are read-only")]


def test_value_type_mismatch():
    got = only("kernel k(A: f64[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i]\n")
    assert got == (3, 12, "B has dtype f32 but the value has type f64; LEIR has no implicit "
                          "conversion, add a cast f32(...)")


def test_operand_type_mismatch():
    got = only("kernel k(A: f64[8], C: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i] + C[i]\n")
    assert got[:2] == (3, 12)
    assert "operands of '+' have different types f64 and f32" in got[2]


def test_loop_variable_in_float_arithmetic():
    got = only("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i] * i\n")
    assert got[:2] == (3, 12)
    assert "cast the index, e.g. f32(i)" in got[2]


def test_float_literal_into_integer_tensor():
    got = only("kernel k(A: i32[8]) -> B: i32[8]\n  for i in 8:\n    B[i] = 0.5\n")
    assert got == (3, 12, "B has dtype i32 but the value has type a float literal; LEIR has no "
                          "implicit conversion, add a cast i32(...)")


def test_integer_division_with_slash():
    got = only("kernel k(A: i32[8]) -> B: i32[8]\n  for i in 8:\n    B[i] = A[i] / 2\n")
    assert got[:2] == (3, 12) and "use '//'" in got[2]


def test_unknown_function():
    got = only("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = gelu(A[i])\n")
    assert got[:2] == (3, 12) and "unknown function 'gelu'" in got[2]


def test_wrong_arity():
    got = only("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = exp(A[i], 1.0)\n")
    assert got == (3, 12, "exp() takes 1 argument, got 2")


def test_float_subscript():
    got = only("kernel k(A: f32[8], X: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[X[i]]\n")
    assert got == (3, 14, "subscript 0 of A must be an integer, got f32")


def test_if_condition_not_boolean():
    got = only("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = 0.0\n"
               "    if A[i]:\n      B[i] = 1.0\n")
    assert got == (4, 5, "if condition must be boolean, got f32")


def test_reduction_target_subscript_reads_tensor():
    got = only("kernel k(A: f32[8], I: i32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = 0.0\n"
               "  for i in 8:\n    B[I[i]] += A[i]\n")
    assert got == (5, 7, "the subscripts of reduction target 'B' must not read tensors "
                         "(found a read of 'I')")


def test_scatter_store_is_allowed():
    check(parse("kernel k(A: f32[8], I: i32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = 0.0\n"
                "  for i in 8:\n    B[I[i]] = A[i]\n"))


def test_reduction_on_boolean():
    got = only("kernel k(A: bool[8]) -> B: bool\n  for i in 8:\n    B max= A[i]\n")
    assert got == (3, 5, "reduction 'max=' on boolean tensor 'B'")


def test_loop_extent_zero():
    got = only("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i]\n"
               "  for j in 0:\n    B[j] = 1.0\n")
    assert got == (4, 7, "loop 'j' has extent 0; extents must be >= 1")


def test_unknown_loop_kind():
    prog = parse("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i]\n")
    from dataclasses import replace
    bad = replace(prog, body=(replace(prog.body[0], kind="fast"),))
    got = [(p.line, p.column, p.message) for p in problems(bad)]
    assert got[0][:2] == (2, 7)
    assert got[0][2].startswith("loop 'i' has unknown kind 'fast'; known: serial, parallel")


def test_loop_variable_shadowing():
    got = only("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    for i in 8:\n      B[i] = A[i]\n")
    assert got == (3, 9, "loop variable 'i' shadows the enclosing loop variable 'i' "
                         "(at line 2, column 7)")


def test_loop_variable_named_like_a_tensor():
    got = found("kernel k(A: f32[8]) -> B: f32[8]\n  for A in 8:\n    B[0] = 1.0\n")
    assert got == [(2, 7, "loop variable 'A' has the name of a tensor")]


def test_intermediate_read_before_write():
    got = only("kernel k(A: f32[8]) -> B: f32[8]\n  T0: f32[8]\n  for i in 8:\n"
               "    B[i] = T0[i]\n    T0[i] = A[i]\n")
    assert got == (4, 12, "intermediate 'T0' is read before it is written")


def test_intermediate_read_by_its_own_store():
    got = only("kernel k(A: f32[8]) -> B: f32[8]\n  T0: f32[8]\n  for i in 8:\n"
               "    T0[i] = T0[i] + A[i]\n    B[i] = T0[i]\n")
    assert got == (4, 13, "intermediate 'T0' is read before it is written")


def test_reduction_initialises_its_target():
    check(parse("kernel k(A: f32[8]) -> B: f32\n  T0: f32\n  for i in 8:\n"
                "    T0 += A[i]\n  B = T0\n"))


def test_output_never_written():
    got = only("kernel k(A: f32[8]) -> B: f32[8], C: f32[8]\n  for i in 8:\n    B[i] = A[i]\n")
    assert got == (1, 35, "output 'C' is never written")


def test_bad_scope_of_a_parameter():
    prog = parse("kernel k(A: f32[8]) -> B: f32[8]\n  for i in 8:\n    B[i] = A[i]\n")
    from dataclasses import replace
    bad = replace(prog, inputs=(replace(prog.inputs[0], scope="shared"),))
    assert [p.message for p in problems(bad)] == ["input 'A' must be in global scope, not 'shared'"]
