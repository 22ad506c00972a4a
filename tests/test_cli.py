"""The steptp command line, run in-process through typer's runner (real parsing, real TVM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steptp import examples
from steptp.cli import app

runner = CliRunner()

MATMUL = "kernel f32 mm(A[8,16], B[16,4]) -> C[8,4]\n C[i,j] += A[i,k] * B[k,j]\n"
# the same computation with the reduction split and the outer loop parallel
MATMUL_SPLIT = ("kernel f32 mm(A[8,16], B[16,4]) -> C[8,4]\n"
                " for i in 8 parallel, j in 4, k in 4, l in 4:\n"
                "  C[i,j] += A[i,k*4+l] * B[k*4+l,j]\n")
# wrong: reads B transposed-ish, so the numbers differ
MATMUL_WRONG = "kernel f32 mm(A[8,16], B[16,4]) -> C[8,4]\n C[i,j] += A[i,k] * B[15-k,j]\n"
# leaves the last column unwritten
MATMUL_PARTIAL = ("kernel f32 mm(A[8,16], B[16,4]) -> C[8,4]\n"
                  " for i in 8, j in 3:\n  C[i,j] += A[i,k] * B[k,j]\n")


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_parse_prints_canonical_text_and_hash(tmp_path):
    f = write(tmp_path, "k.leir", "kernel mm(X: f32[8,16], W: f32[16,4]) -> Y: f32[8,4]\n"
                                  "  for a in 8:\n    for b in 4:\n      for c in 16:\n"
                                  "        Y[a,b] += X[a,c] * W[c,b]\n")
    r = runner.invoke(app, ["parse", str(f), "--rename", "--hash"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[:2] == ["kernel f32 mm(A[8,16], B[16,4]) -> C[8,4]", " C[i,j] += A[i,k] * B[k,j]"]
    assert lines[2].startswith("# hash ") and len(lines[2]) == len("# hash ") + 64


def test_check_reports_every_error_with_position(tmp_path):
    f = write(tmp_path, "bad.leir", "kernel f32 k(A[8]) -> B[8]\n B[i] = A[i,0] + Q[i]\n")
    r = runner.invoke(app, ["check", str(f)])
    assert r.exit_code == 2
    assert "line 2" in r.output and "A has rank 1" in r.output and "'Q' is not declared" in r.output


def test_syntax_error_names_file_line_and_column(tmp_path):
    f = write(tmp_path, "bad.leir", "kernel f32 k(A[8]) -> B[8]\n B[i] = A[i] $ 2.0\n")
    r = runner.invoke(app, ["check", str(f)])
    assert r.exit_code == 2
    assert str(f) in r.output and "line 2, column 14" in r.output and "B[i] = A[i] $ 2.0" in r.output and "'$'" in r.output


def test_missing_file_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["check", str(tmp_path / "nope.leir")])
    assert r.exit_code == 2 and "cannot read" in r.output


def test_lower_prints_tvmscript_and_refuses_threads_on_cpu(tmp_path):
    r = runner.invoke(app, ["lower", str(write(tmp_path, "mm.leir", MATMUL))])
    assert r.exit_code == 0 and "T.prim_func" in r.stdout and 'T.sblock("C")' in r.stdout
    gpu = write(tmp_path, "g.leir", "kernel f32 k(A[64]) -> B[64]\n for i in 2 blockIdx.x, j in 32 threadIdx.x:\n  B[i*32+j] = A[i*32+j]\n")
    r = runner.invoke(app, ["lower", str(gpu)])
    assert r.exit_code == 2 and "blockIdx.x" in r.output and "CPU" in r.output
    r = runner.invoke(app, ["lower", str(gpu), "--target", "cuda"])
    assert r.exit_code == 0 and 'T.thread_binding(2, thread="blockIdx.x")' in r.stdout


def test_verify_pass_fail_and_unwritten(tmp_path):
    ref = write(tmp_path, "ref.leir", MATMUL)
    ok = runner.invoke(app, ["verify", str(write(tmp_path, "c.leir", MATMUL_SPLIT)), "-r", str(ref),
                             "--exactness", "reassociation", "--json"])
    assert ok.exit_code == 0, ok.output
    res = json.loads(ok.stdout)
    assert res["passed"] and res["max_abs_err"] < 1e-4 and len(res["seeds"]) == 5

    bad = runner.invoke(app, ["verify", str(write(tmp_path, "w.leir", MATMUL_WRONG)), "-r", str(ref)])
    assert bad.exit_code == 1 and "FAIL" in bad.stdout

    part = runner.invoke(app, ["verify", str(write(tmp_path, "p.leir", MATMUL_PARTIAL)), "-r", str(ref),
                               "--json"])
    assert part.exit_code == 1
    assert "not written" in json.loads(part.stdout)["reason"]


def test_verify_against_a_tvmscript_reference(tmp_path):
    script = runner.invoke(app, ["lower", str(write(tmp_path, "mm.leir", MATMUL))]).stdout
    ref = write(tmp_path, "ref.py", script)
    r = runner.invoke(app, ["verify", str(write(tmp_path, "c.leir", MATMUL_SPLIT)), "-r", str(ref),
                            "--exactness", "reassociation"])
    assert r.exit_code == 0, r.output and "PASS" in r.stdout


def test_verify_rejects_unknown_exactness(tmp_path):
    f = write(tmp_path, "mm.leir", MATMUL)
    r = runner.invoke(app, ["verify", str(f), "-r", str(f), "--exactness", "roughly"])
    assert r.exit_code == 2 and "exact, reassociation, algebraic" in r.output


@pytest.mark.slow
def test_demo_runs_every_bundled_example():
    r = runner.invoke(app, ["demo"])
    assert r.exit_code == 0, r.output
    assert f"{len(examples.names())}/{len(examples.names())} kernels" in r.stdout


CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "steptp-v1-leir-corpus.jsonl"


@pytest.mark.skipif(not CORPUS.exists(), reason=f"v1 corpus not found at {CORPUS}")
def test_v1_prints_a_corpus_program_as_leir():
    r = runner.invoke(app, ["v1", "--corpus", str(CORPUS), "--workload", "softmax",
                            "--bind-as", "serial"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("kernel f64 softmax(A[16,16384]) -> C[16,16384]\n")
    assert "max= A[" in r.stdout


def test_strategies_lists_the_catalog():
    r = runner.invoke(app, ["strategies", "--json"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    by = {row["name"]: row for row in rows}
    assert by["loop_split"]["family"] == "loop" and by["loop_binding"]["targets"] == ["gpu"]
    assert by["online_softmax"]["family"] == "algorithmic"
    r = runner.invoke(app, ["strategies", "--family", "nonsense"])
    assert r.exit_code == 2 and "families:" in r.output


def test_apply_lists_candidates_and_verifies_them(tmp_path):
    f = write(tmp_path, "mm.leir", MATMUL)
    r = runner.invoke(app, ["apply", str(f), "-s", "loop_split", "--max-per-site", "1", "--json",
                            "--verify"])
    assert r.exit_code == 0, r.output
    cands = [json.loads(line) for line in r.stdout.splitlines()]
    assert cands and all(c["strategy"] == "loop_split" and c["verified"] for c in cands)
    assert all(c["program"].startswith("kernel f32 mm(") for c in cands)


def test_apply_one_site_and_a_refusal(tmp_path):
    f = write(tmp_path, "mm.leir", MATMUL)
    site = json.dumps({"path": [0], "loops": ["i"]})
    r = runner.invoke(app, ["apply", str(f), "-s", "loop_split", "--site", site,
                            "--params", json.dumps({"factor": 4})])
    assert r.exit_code == 0, r.output
    assert "for i_o in 2, i_i in 4" in r.stdout
    red = json.dumps({"path": [0, 0, 0], "loops": ["k"]})
    r = runner.invoke(app, ["apply", str(f), "-s", "loop_parallelization", "--site", red, "--params", "{}"])
    assert r.exit_code == 1 and "reduction" in r.output
    r = runner.invoke(app, ["apply", str(f), "-s", "no_such_strategy"])
    assert r.exit_code == 2 and "no_such_strategy" in r.output


def test_listings_are_not_cut_when_piped():
    """`steptp strategies | grep ...`: the real command with its stdout a pipe prints whole names."""
    import subprocess
    import sys

    from steptp import strategies as S

    r = subprocess.run([sys.executable, "-m", "steptp.cli", "strategies"], capture_output=True, text=True,
                       timeout=300, env={**__import__("os").environ, "COLUMNS": "60"})
    assert r.returncode == 0, r.stderr
    longest = max((d["name"] for d in S.describe()), key=len)
    assert len(longest) > 30 and longest in r.stdout
    assert "…" not in r.stdout
