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
    # facts are never wrong; coherence fails only for the steps with no argument (curation keeps
    # them out of SFT): the transpose's reorder trades its stride-64 write for a stride-64 read,
    # and the mm_add tiling by 2 and 4 leaves `B[k,j]`'s stride-32 walk and its reuse distance
    # as they were: neither answers anything found at its site
    assert [w for w in wrong if " coherence_" not in w] == []
    assert {w.split("/")[0] for w in wrong} == {rows[0]["trajectory_id"], rows[1]["trajectory_id"]}
    for kind in ("stride", "loop_nest", "reorder_innermost", "reuse", "fits_in_cache",
                 "stride_coverage", "parallel_safe", "coherence_site", "coherence_ranking",
                 "coherence_effect", "coherence_preparatory", "derivable", "coherence_cache"):
        assert tally[kind][0] > 0, kind


@pytest.mark.parametrize("edit,kind", [
    (lambda c: c["claims"].append({"kind": "stride", "side": "before", "access": "B[j,i]", "value": 1}),
     "stride"),
    (lambda c: c["claims"].append({"kind": "reorder_innermost", "loop": "j", "side": "before"}),
     "reorder_innermost"),
    (lambda c: c["claims"].append({"kind": "reuse", "access": "A[i,j]", "loop": "j", "side": "before"}),
     "reuse"),

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


def _edited(row, edit_cot=None, edit_text=None):
    r = dict(row)
    cot = json.loads(r["cot"])
    if edit_cot:
        edit_cot(cot)
    r["cot"] = json.dumps(cot)
    if edit_text:
        r["cot_text"] = edit_text(r["cot_text"])
    return r


def _think(extra):
    return lambda t: t.replace("</think>", extra + "\n</think>")


@pytest.mark.parametrize("which,edit_cot,edit_text,kind", [
    # the bottleneck about a statement of another nest than the step's
    (1, lambda c: c["bottleneck"].update(text=c["bottleneck"]["text"] + " `D[i,j] = C[i,j] + E[i,j]`."),
     None, "coherence_site"),
    # a limit the step does not answer (a tiling is no answer to a serial nest)
    (1, lambda c: c["bottleneck"].update(kind="parallelism", loop="i"), None, "coherence_site"),
    # an alternative ranked above the chosen step with no reason it is not taken now
    (1, lambda c: next(x for x in c["candidates"] if x["verdict"] == "rejected"
                       and not x.get("refused")).update(reason="the cost model ranks it ahead."),
     None, "coherence_ranking"),
    # a preparatory step that does not say what it prepares
    (3, lambda c: c["expected_effect"].update(text="little by itself."), None,
     "coherence_preparatory"),
    # a chosen step expected slower
    (2, lambda c: c["expected_effect"].update(direction="slower"), None, "coherence_effect"),
    # a model's absolute time, which nothing in the prompt gives
    (2, None, _think("The cost model predicts 41.3 µs."), "derivable"),
])
def test_each_coherence_category_rejects_a_constructed_example(rows, which, edit_cot, edit_text, kind):
    tally0, _ = run([rows[which]])
    assert tally0[kind][1] == 0, kind              # the template's own passes
    tally, wrong = run([_edited(rows[which], edit_cot, edit_text)])
    assert tally[kind][1] == 1 and any(f" {kind}: " in w for w in wrong), wrong


def test_an_l3_figure_is_only_used_when_plausible(rows):
    r = _edited(rows[2], None, _think("It all fits in L3 (480 MiB)."))
    cot = json.loads(r["cot"])
    plausible = dict(cot["hardware"], l3_bytes=16 << 20, cores=2)
    vm = dict(cot["hardware"], l3_bytes=480 << 20, cores=2)
    for hw, bad in ((plausible, 0), (vm, 1)):
        tally, wrong = defaultdict(lambda: [0, 0]), []
        audit.audit_step(audit.Step(r, hw), cot, tally, wrong, Counter())
        assert tally["coherence_cache"][1] == bad
