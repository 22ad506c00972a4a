"""A strided walk that a tiling keeps strided (a transpose): the reasoning may argue for the tile
when, and only when, the next element of each line it fetches is then read before more than L1
of lines pass (steptp.cot.facts.line_return, steptp.cot.argument.keeps_lines). Night 20261206's
release held 43 such tiles (up to 5.7x faster) out of SFT as "incoherent": the reasoning had no
argument beyond "there is no reuse in this nest"."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from cot_steps import step
from steptp.cot import TemplateWriter, facts, validate, write_cot
from steptp.cot.argument import answered, keeps_lines, site_findings
from steptp.cot.claims import check_claim
from steptp.cot.coherence import coherence_problems
from steptp.cot.facts import GENERIC
from steptp.format.cot_schema import Claim
from steptp.records import table

# 2048 rows of 64: each step of `j` jumps 256 bytes, a new 64-byte line; the line's next element is
# read one iteration of `i` later, after 2048 lines of A and 128 of B (136 KiB > 48 KiB of L1)
TRANSPOSE = """kernel transpose_big(A: f32[2048,64]) -> B: f32[64,2048]
  for i in 64, j in 2048:
    B[i,j] = A[j,i]
"""
SITE = {"path": [0], "loops": ["i", "j"]}


def tile(factors, speedup=3.0, strategy="loop_tiling"):
    params = {"loops": ["i", "j"], "factors": factors} if strategy == "loop_tiling" \
        else {"factor": factors[0]}
    site = SITE if strategy == "loop_tiling" else {"path": [0, 0], "loops": ["j"]}
    return step("transpose", strategy, site, params, speedup=speedup, before=TRANSPOSE,
                trajectory=f"t-line-{strategy}-{'x'.join(map(str, factors))}")


def test_the_facts_find_where_a_line_comes_back_and_what_passes_in_between():
    f = facts(tile([16, 16]), GENERIC)
    a = next(a for a in f.at_site.accesses if a.text == "A[j,i]")
    assert a.stride == 64 and a.stride_after == 64            # still strided after the tile
    assert (a.line_loop, a.line_apart) == ("i", (2048 + 128) * 64)
    assert (a.line_loop_after, a.line_apart_after) == ("i_i", (16 + 1) * 64)
    b = next(a for a in f.at_site.accesses if a.text == "B[i,j]")
    assert b.line_loop is None and b.line_apart is None          # unit stride: no new line each step
    x = site_findings(f)[0]
    assert x.kind == "locality" and x.detail["line_loop"] == "i" and x.detail["line_level"] == "L2"


def test_a_tile_that_keeps_the_lines_in_l1_is_argued_for_and_passes_as_sft():
    st = tile([16, 16])
    f = facts(st, GENERIC)
    x = answered(f)
    assert x is not None and x.kind == "locality" and keeps_lines(f, x)
    cot = TemplateWriter(seed=1, hardware=GENERIC).write(st, f)
    assert coherence_problems(cot, st, f) == []
    assert cot.expected_effect.direction == "faster"
    text = cot.bottleneck.text + " " + cot.expected_effect.text
    assert "136 KiB" in text and "1088 bytes" in text
    kinds = {(c.kind, c.side) for c in cot.claims}
    assert {("line_return", "before"), ("line_return", "after")} <= kinds
    # SFT validation: claims, hindsight, coherence and the measured direction all hold
    validate(cot.model_dump(mode="json"), st, f, sft=True)


def test_a_wrong_line_claim_is_caught():
    f = facts(tile([16, 16]), GENERIC)
    ok = Claim(kind="line_return", access="A[j,i]", loop="i", value=(2048 + 128) * 64, level="L2")
    assert check_claim(ok, f) == []
    assert check_claim(ok.model_copy(update={"value": 2048 * 64}), f)      # B's lines left out
    assert check_claim(ok.model_copy(update={"loop": "j"}), f)
    assert check_claim(ok.model_copy(update={"level": "L1"}), f)
    assert check_claim(Claim(kind="line_return", access="B[i,j]", loop="i", value=64), f)
    after = Claim(kind="line_return", side="after", access="A[j,i]", loop="i_i", value=17 * 64)
    assert check_claim(after, f) == []
    assert check_claim(after.model_copy(update={"value": 16 * 64}), f)


@pytest.mark.parametrize("case", ["tile_too_wide", "split", "fits_before"])
def test_no_argument_when_the_lines_do_not_stay_or_were_never_lost(case):
    if case == "tile_too_wide":
        # 16 x 1024: 1024 lines of A pass before a line's next element (64 KiB > 48 KiB)
        st = tile([16, 1024])
    elif case == "split":
        # a split of `j` changes nothing the line needs: only a tiling is said to keep lines
        st = tile([64], strategy="loop_split")
    else:
        # 64 x 32 transpose: 32 lines of B pass between (2 KiB), the lines stay in L1 anyway
        st = step("transpose", "loop_tiling", {"path": [0], "loops": ["i", "j"]},
                  {"loops": ["i", "j"], "factors": [8, 8]}, speedup=1.3)
    f = facts(st, GENERIC)
    x = site_findings(f)[0]
    assert x.kind == "locality" and not keeps_lines(f, x)
    cot = TemplateWriter(seed=1, hardware=GENERIC).write(st, f)
    assert any(p.startswith("coherence site") for p in coherence_problems(cot, st, f))
    assert cot.expected_effect.direction != "faster"


def test_the_audit_recomputes_the_line_claims_by_brute_force():
    spec = importlib.util.spec_from_file_location(
        "cot_audit", Path(__file__).resolve().parents[1] / "benchmarks" / "cot_audit.py")
    audit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(audit)
    out, summary = write_cot([tile([16, 16]), tile([32, 8])], hardware=GENERIC)
    assert summary["ok"] == 2
    rows = list(table(out).iter_rows(named=True))

    def run(rows):
        tally, wrong = defaultdict(lambda: [0, 0]), []
        for r in rows:
            cot = json.loads(r["cot"])
            audit.audit_step(audit.Step(r, cot["hardware"]), cot, tally, wrong, Counter())
        return tally, wrong

    tally, wrong = run(rows)
    assert wrong == [] and tally["line_return"][0] == 4
    bad = dict(rows[0])
    cot = json.loads(bad["cot"])
    for c in cot["claims"]:
        if c["kind"] == "line_return" and c["side"] == "after":
            c["value"] = 16 * 64
    bad["cot"] = json.dumps(cot)
    _, wrong = run([bad])
    assert any(" line_return:" in w for w in wrong)
