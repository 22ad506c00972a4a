"""benchmarks/cot_audit.py recomputes the claims of stored reasoning on its own: zero wrong on the
template's reasoning, and a wrong claim slipped into a stored record is counted under its kind."""

import importlib.util
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from cot_steps import step
from steptp.cot import write_cot
from steptp.records import table

_spec = importlib.util.spec_from_file_location(
    "cot_audit", Path(__file__).resolve().parents[1] / "benchmarks" / "cot_audit.py")
audit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(audit)


@pytest.fixture(scope="module")
def rows():
    steps = [step("transpose", "loop_reorder", {"path": [0], "loops": ["i", "j"]}, {"order": ["j", "i"]}),
             step("mm_add", "loop_tiling", {"path": [0], "loops": ["i", "j", "k"]},
                  {"loops": ["j", "k"], "factors": [2, 4]}, speedup=1.4),
             step("rowsum", "loop_parallelization", {"path": [0], "loops": ["i"]}, {}, speedup=0.5),
             step("rows48", "loop_split", {"path": [0, 0], "loops": ["j"]}, {"factor": 16})]
    out, summary = write_cot(steps)
    assert summary["ok"] == len(steps)
    assert summary["distinct_templates"] > 10
    return list(table(out).iter_rows(named=True))


def run(rows):
    tally, wrong, unverified = defaultdict(lambda: [0, 0]), [], Counter()
    for r in rows:
        cot = json.loads(r["cot"])
        audit.audit_step(audit.Step(r, cot["hardware"]), cot, tally, wrong, unverified)
    return tally, wrong


def test_template_reasoning_has_no_wrong_claim(rows):
    tally, wrong = run(rows)
    assert wrong == []
    for kind in ("stride", "loop_nest", "reorder_innermost", "reuse", "fits_in_cache", "effect",
                 "predicted_time", "stride_coverage", "parallel_safe"):
        assert tally[kind][0] > 0, kind


@pytest.mark.parametrize("edit,kind", [
    (lambda c: c["claims"].append({"kind": "stride", "side": "before", "access": "B[j,i]", "value": 1}),
     "stride"),
    (lambda c: c["claims"].append({"kind": "reorder_innermost", "loop": "j", "side": "before"}),
     "reorder_innermost"),
    (lambda c: c["claims"].append({"kind": "reuse", "access": "A[i,j]", "loop": "j", "side": "before"}),
     "reuse"),
    (lambda c: c["expected_effect"].update(direction="faster"), "effect"),
    (lambda c: c["claims"].append({"kind": "fits_in_cache", "loop": "i", "value": 16384,
                                   "level": "L3", "side": "before"}), "fits_in_cache"),
])
def test_a_wrong_stored_claim_is_counted(rows, edit, kind):
    r = dict(rows[0])
    cot = json.loads(r["cot"])
    edit(cot)
    r["cot"] = json.dumps(cot)
    tally, wrong = run([r])
    assert tally[kind][1] == 1 and any(f" {kind}: " in w for w in wrong)


def test_measured_figures_in_the_text_are_hindsight(rows):
    r = dict(rows[2])      # measured 0.5x
    r["cot_text"] = r["cot_text"].replace("</think>", "It measured 0.5x.\n</think>")
    tally, wrong = run([r])
    assert tally["hindsight_numbers"][1] == 1
