"""The search benchmarks' fixed lists (benchmarks/workloads.py): the held-out list is disjoint
from the tuning list, covers the operator kinds the generalization target names, and no
held-out kernel is a tuning kernel under another name (the zoo's transposed matmuls import as
the plain square matmul, which is why the held-out transposed matmul is a LEIR kernel)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import workloads as BL  # noqa: E402
from _search_common import workload_kernel  # noqa: E402


def test_lists_are_disjoint_and_cover_the_target_kinds():
    assert len(BL.HELDOUT) >= 16 and len(set(BL.HELDOUT)) == len(BL.HELDOUT)
    assert not set(BL.HELDOUT) & set(BL.TUNING)
    fams = {BL.family(n) for n in BL.HELDOUT}
    assert {"matmul", "conv", "norm", "softmax", "pool", "attention"} <= fams
    assert all(BL.family(n) for n in BL.HELDOUT + BL.TUNING)   # every name resolves


def test_heldout_kernels_are_not_tuning_kernels():
    tuning = {workload_kernel(n, "tiny")[0] for n in BL.TUNING}
    held = [workload_kernel(n, "tiny")[0] for n in BL.HELDOUT]
    assert not tuning & set(held)
    assert len(set(held)) == len(held)


def test_leir_kernel_matches_its_torch_op():
    """The LEIR kernel, built with TVM, computes what its PyTorch stand-in computes (so the
    best / PyTorch ratio compares the same operator)."""
    import numpy as np

    from steptp.tir.build import build, run

    kid, prog, module, inputs = workload_kernel("matmul_at_b")
    got = run(build(prog), [x.numpy() for x in inputs])[0]
    want = module(*inputs).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_unknown_list_is_a_clear_error():
    with pytest.raises(SystemExit, match="unknown --list 'nope'"):
        BL.workload_list("nope")

