"""The columnar paths of export and the quality gates (a release of 100,000 steps is never held
as records): each gives what the record-by-record definition gives, on search trees over real
programs and real rewrites."""

from __future__ import annotations

import polars as pl
import pytest

from steptp import examples, strategies as S
from steptp.leir import format_program, parse
from steptp.records import (StepRecord, Timing, parent_links, parent_links_of_table, step_key, step_keys,
                            table)


def _t(ms: float, spread: float = 0.01) -> Timing:
    return Timing(median_s=ms * 1e-3, min_s=ms * 1e-3, spread=spread, repeats=7, number=10)


@pytest.fixture(scope="module")
def steps() -> list[StepRecord]:
    """Two searches of one kernel over the same programs: A -> B1 (faster), A -> B2 (slower),
    A -> B3 (failed verification), B1 -> C reached twice (the first row is C's parent, the
    second a duplicate), C -> D; the second search repeats A -> B1 and B1 -> C."""
    a = parse(examples.text("matmul_bias_gelu"))
    kids = S.candidates(a, strategy="loop_split", seed=None)[:3]
    c = S.candidates(kids[0].program, strategy="loop_split", seed=None)[0]
    d = S.candidates(c.program, strategy="loop_split", seed=None)[0]
    text = {"A": format_program(a), **{f"B{n + 1}": format_program(k.program) for n, k in enumerate(kids)},
            "C": format_program(c.program), "D": format_program(d.program)}
    cand = {**{f"B{n + 1}": k for n, k in enumerate(kids)}, "C": c, "D": d}
    assert len(set(text.values())) == len(text)

    def row(traj: str, before: str, after: str, depth: int, tb: float, ta: float | None, **upd) -> StepRecord:
        ok = ta is not None
        d = dict(trajectory_id=traj, step_index=depth, kernel_id="k0", before_leir=text[before],
                 after_leir=text[after], strategy=cand[after].strategy, family="loop", exactness="exact",
                 site=cand[after].to_json()["site"], params=cand[after].params,
                 outcome="improved" if ok else "failed_verify", verified=ok, before=_t(tb),
                 after=_t(ta) if ok else None, step_speedup=tb / ta if ok else None, target="cpu")
        return StepRecord(**{**d, **upd})

    return [row("t0", "A", "B1", 0, 10, 5), row("t0", "A", "B2", 0, 10, 20), row("t0", "A", "B3", 0, 10, None),
            row("t0", "B1", "C", 1, 5, 4), row("t0", "B1", "C", 1, 5, 4.5, params={"factor": 99}),
            row("t0", "C", "D", 2, 4, 2), row("t1", "A", "B1", 0, 10, 8), row("t1", "B1", "C", 1, 8, 7)]


def test_keys_and_tree_of_a_table_are_the_records(steps):
    df = table(steps, StepRecord)
    assert step_keys(df) == [step_key(s) for s in steps]
    assert step_keys(df, batch=3) == step_keys(df)
    links = parent_links_of_table(df)
    assert links == parent_links(steps)
    # C's parent is the first B1 row of its own search; D's is the first of the two C rows;
    # the failed B3 is nobody's parent; nothing links across searches
    assert links == {3: 0, 4: 0, 5: 3, 7: 6}
    assert parent_links_of_table(df.head(0)) == {}


def test_roles_recomputed_in_batches_are_the_whole_table(steps, monkeypatch):
    from steptp.measure.significance import SignificanceRule
    from steptp.quality import core
    from steptp.search.roles import assign_roles

    rule = SignificanceRule()
    recs = assign_roles(steps, rule)
    df = table(recs, StepRecord)
    whole = core._roles_table(df, rule)
    assert whole["role_recomputed"].to_list() == [r.role for r in recs]
    assert whole["role_recomputed"].to_list()[:3] == ["improving", "regressing", "failed"]
    assert whole["role_consistent"].all()
    monkeypatch.setattr(core, "ROLES_BATCH", 1)     # one search per batch
    assert core._roles_table(df, rule).equals(whole)
    # without the reasoning columns (the gates read them for the SFT rows only)
    assert core._roles_table(df.drop("cot", "cot_text"), rule).equals(whole.drop("cot", "cot_text"))


def test_batches_of_rows_frame_as_all_rows_at_once():
    from steptp.export import hub
    from steptp.export.release import _concat_batches

    def row(c: str, x, y, n: int, split: str) -> dict:
        return {"prompt": [{"role": "user", "content": c}], "meta": {"x": x, "y": y, "t": {"n": n}}, "split": split}

    rows = [row("a", None, 1, 1, "train"), row("b", None, 2, 2, "test"), row("c", 1.5, 3.5, 3, "train")]
    whole = hub.frame(rows)
    assert whole.schema["meta"] == pl.Struct({"x": pl.Float64, "y": pl.Float64, "t": pl.Struct({"n": pl.Int64})})
    got = _concat_batches([hub.frame(rows[:2]), hub.frame(rows[2:])])
    assert got.schema == whole.schema and got.equals(whole)
    # batches whose rows carry different fields: framed from their rows
    odd = [{"meta": {"x": 1}}, {"meta": {"z": "s"}}]
    assert _concat_batches([hub.frame(odd[:1]), hub.frame(odd[1:])]).equals(hub.frame(odd))


def test_a_suite_gets_the_columns_it_reads():
    from steptp.quality.core import _checked_columns

    df = pl.DataFrame({"a": [1], "b": ["x"], "cot": ["{}"], "before_leir": ["p"]})
    spec = {"expectations": [{"type": "expect_table_row_count_to_be_between", "kwargs": {"min_value": 1}},
                             {"type": "expect_column_values_to_be_unique", "kwargs": {"column": "b"}},
                             {"type": "expect_column_pair_values_a_to_be_greater_than_b",
                              "kwargs": {"column_A": "a", "column_B": "b"}}]}
    assert _checked_columns(spec, df) == ["a", "b"]
    # an expectation that may read any column (the names, a row condition) gets them all
    for e in ({"type": "expect_table_columns_to_match_set", "kwargs": {"column_set": ["a"]}},
              {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "a", "row_condition": "b==\"x\""}},
              {"type": "expect_table_row_count_to_equal", "kwargs": {"value": 1, "row_condition": "a>0"}}):
        assert _checked_columns({"expectations": spec["expectations"] + [e]}, df) == df.columns


def test_many_programs_parsed_in_workers_are_parsed_as_one_by_one(steps):
    """The prompt states parse every program up front, in spawned worker processes: the same
    printed texts and hashes, in order; a text that does not parse raises its own error."""
    from steptp.leir import LeirSyntaxError
    from steptp.leir.batch import MIN_PARALLEL, forms, many_forms

    texts = list(dict.fromkeys(t for s in steps for t in (s.before_leir, s.after_leir)))
    many = (texts * (MIN_PARALLEL // len(texts) + 1))[:MIN_PARALLEL]
    one_by_one = [forms(t) for t in many]
    assert len(set(one_by_one)) == len(texts)
    assert many_forms(many, processes=2) == one_by_one == many_forms(many, processes=1)
    with pytest.raises(LeirSyntaxError):
        many_forms(many[:-1] + ["kernel k(:\n"], processes=2)
