"""The exactness classes (``steptp.exactness``): one ordered tuple everyone reads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from steptp.exactness import EXACTNESS, worse


def test_classes_run_strictest_first():
    assert EXACTNESS == ("exact", "reassociation", "algebraic")


@pytest.mark.parametrize("a, b, want", [
    ("exact", "exact", "exact"),
    ("exact", "reassociation", "reassociation"),
    ("reassociation", "exact", "reassociation"),
    ("algebraic", "reassociation", "algebraic"),
    ("exact", "algebraic", "algebraic"),
])
def test_worse_is_the_looser_class(a, b, want):
    assert worse(a, b) == want


def test_worse_refuses_a_word_outside_the_classes():
    with pytest.raises(ValueError, match="unknown exactness 'roughly'"):
        worse("exact", "roughly")


def test_the_verifier_has_a_tolerance_row_per_class_and_the_strategies_use_the_classes():
    import steptp.strategies as S
    from steptp.measure.verify import TOLERANCES

    assert tuple(TOLERANCES) == EXACTNESS
    assert {s.exactness for s in S.all()} <= set(EXACTNESS)


def test_cot_schema_takes_only_the_classes():
    from steptp.format.cot_schema import Check

    assert Check(exactness="algebraic", outputs=["D"], text="t").exactness == "algebraic"
    with pytest.raises(ValidationError):
        Check(exactness="roughly", outputs=["D"], text="t")
    enum = Check.model_json_schema()["properties"]["exactness"]["enum"]
    assert tuple(enum) == EXACTNESS
