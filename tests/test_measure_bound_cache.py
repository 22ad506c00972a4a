"""The reference's rounding-error bound is computed once per kernel and input set: every
candidate of a search is judged against the same bound on the same seeded inputs, and the
float64 twin that computes it runs about as slowly as the unscheduled kernel."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")

from steptp.leir import parse  # noqa: E402
from steptp.measure.error_bound import ErrorBounds  # noqa: E402
from steptp.measure.verify import random_inputs  # noqa: E402

from test_measure import MATMUL  # noqa: E402


def test_equal_inputs_get_the_bound_computed_once_and_other_inputs_their_own():
    eb = ErrorBounds()
    prog = parse(MATMUL)
    ins = random_inputs(prog, 0)
    first = eb(prog, ins, True)
    assert eb.runs == 1
    # equal inputs in other arrays (as each candidate's verification holds them): no new run
    again = eb(prog, [x.copy() for x in ins], True)
    assert eb.runs == 1 and np.array_equal(first[0], again[0])
    with pytest.raises(ValueError):
        again[0][0, 0] = 0.0   # shared by every caller: read-only
    # other inputs, or the other class, are computed anew
    other = eb(prog, random_inputs(prog, 1), True)
    assert eb.runs == 2 and not np.array_equal(first[0], other[0])
    changed = [x.copy() for x in ins]
    changed[0][0, 0] += 1.0
    eb(prog, changed, True)
    eb(prog, ins, False)
    assert eb.runs == 4
