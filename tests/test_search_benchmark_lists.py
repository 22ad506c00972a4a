"""The search benchmarks' fixed lists (benchmarks/workloads.py): the held-out list is disjoint
from the tuning list, covers the operator kinds the generalization target names, and no
held-out kernel is a tuning kernel under another name (the zoo's transposed matmuls import as
the plain square matmul, which is why the held-out transposed matmul is a LEIR kernel). The
fresh list is disjoint from both, in names and kernels, and its fused and norm workloads keep
their epilogue or norm in the kernel the benchmark times."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import workloads as BL  # noqa: E402
from _search_common import workload_kernel  # noqa: E402

_KERNELS: dict[str, tuple[str, str]] = {}


def tiny_kernel(name: str) -> tuple[str, str]:
    """(kernel id, LEIR text) of a workload's benchmarked kernel at size tiny, built once."""
    if name not in _KERNELS:
        from steptp.leir import format_program

        kid, prog, _, _ = workload_kernel(name, "tiny")
        _KERNELS[name] = (kid, format_program(prog))
    return _KERNELS[name]


def test_lists_are_disjoint_and_cover_the_target_kinds():
    assert len(BL.HELDOUT) >= 16 and len(set(BL.HELDOUT)) == len(BL.HELDOUT)
    assert not set(BL.HELDOUT) & set(BL.TUNING)
    fams = {BL.family(n) for n in BL.HELDOUT}
    assert {"matmul", "conv", "norm", "softmax", "pool", "attention"} <= fams
    assert all(BL.family(n) for n in BL.HELDOUT + BL.TUNING)   # every name resolves


def test_heldout_kernels_are_not_tuning_kernels():
    tuning = {tiny_kernel(n)[0] for n in BL.TUNING}
    held = [tiny_kernel(n)[0] for n in BL.HELDOUT]
    assert not tuning & set(held)
    assert len(set(held)) == len(held)


def test_fresh_list_is_new_in_names_and_kernels():
    from steptp.zoo import workloads as W

    assert len(BL.FRESH) >= 16 and len(set(BL.FRESH)) == len(BL.FRESH)
    assert BL.LISTS["fresh"] is BL.FRESH
    for other in (BL.TUNING, BL.HELDOUT, BL.PROBLEM_COMPARISON):
        assert not set(BL.FRESH) & set(other)
    for n in BL.FRESH:   # a zoo workload or a LEIR kernel of workloads.py, never both
        assert (n in W.names()) != (n in BL.LEIR_KERNELS), n
        assert BL.family(n), n
    seen = {tiny_kernel(n)[0] for n in BL.TUNING + BL.HELDOUT}
    fresh = [tiny_kernel(n)[0] for n in BL.FRESH]
    assert not seen & set(fresh)
    assert len(set(fresh)) == len(fresh)


def test_fresh_epilogue_kernels_keep_their_activation():
    """At least 6 matmul/conv kernels whose benchmarked (heaviest) kernel applies an activation
    after its contraction: not a workload whose fusion leaves the matmul or conv bare."""
    assert len(BL.FRESH_EPILOGUE) >= 6 and set(BL.FRESH_EPILOGUE) <= set(BL.FRESH)
    for n in BL.FRESH_EPILOGUE:
        assert BL.family(n) in BL.EPILOGUE_FAMILIES, n
        lines = tiny_kernel(n)[1].splitlines()
        contraction = max(i for i, ln in enumerate(lines) if "+=" in ln and "*" in ln)
        after = "\n".join(lines[contraction + 1:])
        assert re.search(r"\b(sigmoid|tanh|erf|max)\(", after), (n, lines)


def test_fresh_has_one_norm_of_each_kind():
    assert sorted(BL.FRESH_NORMS.values()) == ["group", "instance", "layer", "rms"]
    assert set(BL.FRESH_NORMS) <= set(BL.FRESH)
    op = {"group": "group_norm", "instance": "instance_norm", "layer": "layer_norm"}
    for n, kind in BL.FRESH_NORMS.items():
        assert BL.family(n) in BL.NORM_FAMILIES, n
        text = tiny_kernel(n)[1]
        assert "rsqrt(" in text, (n, text)
        if kind == "rms":   # a sum of squares, no mean subtracted
            assert re.search(r"\+= (\w+)\[([^]]*)\] \* \1\[\2\]", text), text
            assert " - " not in text, text
        else:
            assert op[kind] in text.splitlines()[0], (n, text)


@pytest.mark.parametrize("name", sorted(BL.LEIR_KERNELS))
def test_leir_kernel_matches_its_torch_op(name):
    """A LEIR kernel, built with TVM, computes what its PyTorch stand-in computes (so the
    best / PyTorch ratio compares the same operator)."""
    import numpy as np

    from steptp.tir.build import build, run

    kid, prog, module, inputs = workload_kernel(name)
    got = run(build(prog), [x.numpy() for x in inputs])[0]
    want = module(*inputs).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_unknown_list_is_a_clear_error():
    with pytest.raises(SystemExit, match="unknown --list 'nope'"):
        BL.workload_list("nope")

