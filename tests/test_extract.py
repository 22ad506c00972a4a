"""Kernel extraction end to end: real torch.export, real TVM Relax import and fusion, the real
raiser and the real raise check (TVM builds and runs every kernel)."""

from __future__ import annotations

import json
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tvm")
pl = pytest.importorskip("polars")

from typer.testing import CliRunner  # noqa: E402

from steptp.cli import app  # noqa: E402
from steptp.records import KernelRecord, polars_schema, read_records  # noqa: E402
from steptp.zoo import extract as X  # noqa: E402
from steptp.zoo.relax_import import ImportReport, import_module, primfuncs  # noqa: E402
from steptp.zoo.workloads import UnknownName  # noqa: E402


@pytest.fixture(scope="module")
def conv_pair(tmp_path_factory):
    """conv2d and conv2d_depthwise share their bias ``reshape`` kernel."""
    res = X.extract(X.refs_for_zoo("conv2d,conv2d_depthwise"))
    out = tmp_path_factory.mktemp("extract") / "kernels.parquet"
    X.write(res, out)
    return res, out


def test_end_to_end_records(conv_pair):
    res, _ = conv_pair
    s = res.summary()
    assert s["models_tried"] == 2 and s["models_ok"] == 2
    assert s["kernels_found"] == 4 and s["unique_kernels"] == 3
    assert s["raise_success_rate"] == 1.0 and not s["failures"]
    for r in res.records:
        assert r.raise_ok, r.raise_reason
        assert r.raise_max_abs_err is not None and r.raise_max_abs_err <= 1e-4
        assert r.kernel_id == r.leir_hash[:16] and len(r.kernel_id) == 16
        assert r.leir.startswith("kernel") and "T.prim_func" in r.tvmscript
        assert r.target.startswith("llvm-") and r.tir_hash.isdigit()
        assert r.flops >= 0 and r.bytes_moved > 0  # a reshape does no arithmetic
        roles = [t.role for t in r.signature]
        assert roles == sorted(roles, key=lambda x: x == "output")  # inputs, then outputs
        assert [t.name for t in r.signature] == [chr(ord("A") + i) for i in range(len(roles))]
    conv = next(r for r in res.records if "conv2d" in r.name)
    # 2*N*OC*OH*OW*IC*KH*KW multiply-adds at least
    assert conv.flops >= 2 * 8 * 8 * 3 * 3


def test_dedup_across_models(conv_pair):
    res, _ = conv_pair
    shared = [r for r in res.records if len({o.workload for o in r.occurrences}) > 1]
    assert len(shared) == 1
    r = shared[0]
    assert [o.workload for o in r.occurrences] == ["conv2d", "conv2d_depthwise"]
    assert r.weight == sum(o.count for o in r.occurrences) == 2
    assert len({r.kernel_id for r in res.records}) == len(res.records)


def test_parquet_schema_and_summary(conv_pair):
    res, out = conv_pair
    df = pl.read_parquet(out)
    assert dict(df.schema) == polars_schema(KernelRecord)
    assert df.height == len(res.records)
    back = read_records(out, KernelRecord)
    assert back == res.records
    assert not list(out.parent.glob(".*.tmp"))  # atomic writes leave no temp files
    summary = json.loads(X.summary_path(out).read_text())
    assert X.summary_path(out).name == "kernels.summary.json"
    assert summary["unique_kernels"] == 3 and summary["failures"] == []
    assert [w["workload"] for w in summary["workloads"]] == ["conv2d", "conv2d_depthwise"]


def test_extraction_is_deterministic(conv_pair):
    res, _ = conv_pair
    again = X.extract(X.refs_for_zoo("conv2d,conv2d_depthwise"), check=False)
    assert [(r.kernel_id, r.leir, r.tvmscript, r.occurrences) for r in again.records] == \
        [(r.kernel_id, r.leir, r.tvmscript, r.occurrences) for r in res.records]
    assert all(r.raise_reason == "not checked" and not r.raise_ok for r in again.records)


# ----------------------------------------------------------------------------- user models
@pytest.fixture
def user_models(tmp_path, monkeypatch):
    pkg = tmp_path / "xmodels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Mlp(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(16, 32)
                self.fc2 = nn.Linear(32, 8)

            def forward(self, x):
                return self.fc2(torch.relu(self.fc1(x)))

        class Odd(nn.Module):
            # lgamma has no TVM converter; the matmul and the sum still come through
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.randn(8, 8))

            def forward(self, x):
                y = x @ self.w
                return torch.lgamma(y.abs() + 1.0).sum(1) + y.sum(1)

        def make_mlp():
            return Mlp()

        def make_odd():
            return Odd(), (torch.randn(4, 8),)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    return pkg


def test_user_model_factory(user_models):
    refs = X.refs_for_model("xmodels.nets:make_mlp", "f32[4,16]")
    res = X.extract(refs, isolate=False)
    s = res.summary()
    assert s["models_ok"] == 1 and s["kernels_found"] >= 2
    assert all(r.raise_ok for r in res.records), [r.raise_reason for r in res.records]
    assert {o.suite for r in res.records for o in r.occurrences} == {"user"}
    matmul = [r for r in res.records if "matmul" in r.name]
    assert any(r.signature[0].shape == [4, 16] for r in matmul)


def test_unsupported_operator_is_reported_and_the_rest_succeeds(user_models):
    res = X.extract(X.refs_for_model("xmodels.nets:make_odd"), isolate=False)
    s = res.summary()
    assert s["models_ok"] == 1
    assert s["workloads"][0]["unsupported_ops"] == ["lgamma.default"]
    (fail,) = [f for f in s["failures"] if f["stage"] == "import"]
    assert fail["op"] == "lgamma.default" and "no TVM converter" in fail["reason"]
    names = [r.name for r in res.records]
    assert any("matmul" in n for n in names), names
    assert all(r.raise_ok for r in res.records), [r.raise_reason for r in res.records]


def test_import_report_opaque_and_strict():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.special.erfinv(torch.tanh(x)) * 2.0, torch.cumsum(x, 1)

    x = torch.randn(4, 8)
    report = ImportReport()
    mod, _ = import_module(M(), (x,), unsupported="opaque", report=report)
    assert [u.op for u in report.unsupported] == ["erfinv.default"]
    names = [n for n, _ in primfuncs(mod)]
    assert "cumsum" in names  # scans come through DispatchSortScan
    with pytest.raises(Exception, match="erfinv"):
        import_module(M(), (x,))


def test_bad_zoo_names_are_named():
    with pytest.raises(UnknownName, match="no_such_op"):
        X.refs_for_zoo("gemv,no_such_op")
    with pytest.raises(ValueError, match="suite"):
        X.refs_for_zoo(" , ")
    assert [r.name for r in X.refs_for_zoo("gemv,gemv,softmax")] == ["gemv", "softmax"]


# ----------------------------------------------------------------------------- CLI
def test_cli_extract_and_kernels(tmp_path):
    runner = CliRunner()
    out = tmp_path / "k.parquet"
    r = runner.invoke(app, ["extract", "--zoo", "gemv", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "unique 1" in r.output and "100.0%" in r.output
    assert (tmp_path / "k.summary.json").exists()
    r = runner.invoke(app, ["kernels", str(out)])
    assert r.exit_code == 0 and "ok" in r.output
    r = runner.invoke(app, ["extract", "--zoo", "nope"])
    assert r.exit_code == 2 and "unknown workload 'nope'" in r.output
    r = runner.invoke(app, ["extract", "--zoo", "gemv", "--model", "a:b"])
    assert r.exit_code == 2 and "exactly one of" in r.output


# ----------------------------------------------------------------------------- parallel
@pytest.mark.slow
def test_parallel_matches_serial_and_survives_a_crash(tmp_path, monkeypatch):
    (tmp_path / "crashy.py").write_text(textwrap.dedent("""
        import ctypes, torch
        def make():
            ctypes.string_at(0)  # segfault in the worker
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    refs = X.refs_for_zoo("gemv,softmax")
    serial = X.extract(refs, check=False)
    crash = X.WorkloadRef("factory", "crashy", source="crashy:make", inputs="f32[2]")
    par = X.extract(refs[:1] + [crash] + refs[1:], jobs=2, check=True)
    assert [r.kernel_id for r in par.records] == [r.kernel_id for r in serial.records]
    assert [r.occurrences for r in par.records] == [r.occurrences for r in serial.records]
    assert all(r.raise_ok for r in par.records)
    s = par.summary()
    assert s["models_tried"] == 3 and s["models_ok"] == 2
    (bad,) = [w for w in par.scans if not w.ok]
    assert bad.workload == "crashy" and bad.stage == "crashed" and "died" in bad.error


def test_gather_bounds_follow_copies():
    from steptp.leir import parse

    prog = parse("kernel i64 g(A[1,16] bool, B[1,1], C[1,16]) -> D[1,16] bool\n"
                 " E[1,16]\n F[1,16]\n"
                 " E[i,j] = B[i,0]\n F[i,j] = C[i,j]\n D[i,j] = A[E[i,j],F[i,j]]\n")
    assert X.gather_bounds(prog) == {"B": 1, "C": 16}


# ----------------------------------------------------------------------------- KernelBench folders
PROBLEM = (__import__("pathlib").Path(__file__).parent / "fixtures" / "problems_bounds"
           / "linear_relu.py").read_text()  # a linear + relu KernelBench-style problem


def test_cli_extract_problems_folder_scaled(tmp_path):
    probs = tmp_path / "level1"
    probs.mkdir()
    (probs / "1_linear_relu.py").write_text(PROBLEM)
    (probs / "notes.txt").write_text("not a problem")
    out = tmp_path / "k.parquet"
    r = CliRunner().invoke(app, ["extract", "--problems", str(probs), "--scale", "0.5", "--out", str(out),
                                 "--trust"])
    assert r.exit_code == 0, r.output
    recs = read_records(out, KernelRecord)
    assert recs and all(k.raise_ok for k in recs)
    assert {(o.workload, o.suite) for k in recs for o in k.occurrences} == {("1_linear_relu", "user")}
    # M=64 and N=32 are >= 16, so both are halved: the matmul is [32,16] x [16,16]
    shapes = {tuple(s.shape) for k in recs for s in k.signature}
    assert (32, 16) in shapes and (64, 32) not in shapes


# ----------------------------------------------------------------------------- LEIR-native kernels
def test_leir_suite_records():
    """A LEIR-native workload is its own LEIR: no torch.export, no raise step; the record's TIR
    is the lowered canonical program and the check compares TVM with the LEIR interpreter."""
    import tvm_ffi

    from steptp.leir import format_program
    from steptp.leir.canon import canonical_hash, canonicalize
    from steptp.records import Occurrence
    from steptp.tir.lower import lower
    from steptp.zoo import workloads

    names = ["generalized_box_iou", "vae_kl"]
    lines: list[str] = []
    res = X.extract(X.refs_for_zoo(",".join(names)), log=lines.append)
    # the progress a flow's log shows: a line per finished workload
    assert sorted(ln.split(":")[0] for ln in lines if ln.startswith("workload ")) == [
        f"workload {n}" for n in sorted(names)]
    s = res.summary()
    assert s["models_ok"] == 2 and s["unique_kernels"] == 2 and s["raise_ok"] == 2
    assert not s["failures"] and s["raise_failures_by_reason"] == {}
    for name, r in zip(names, res.records):
        prog = workloads.get(name).leir_program("tiny")
        assert r.name == name and r.leir_hash == canonical_hash(prog)
        assert r.kernel_id == r.leir_hash[:16]
        assert r.leir == format_program(canonicalize(prog)[0])
        assert r.leir.startswith(f"kernel f32 {name}(A[")
        assert r.tir_hash == str(tvm_ffi.structural_hash(lower(canonicalize(prog)[0])))
        assert r.occurrences == [Occurrence(workload=name, suite="leir", count=1,
                                            original_name=name)]
        assert r.weight == 1 and r.flops > 0 and "T.prim_func" in r.tvmscript
        assert r.raise_ok and r.raise_reason.startswith("leir-native: no raise step")
        assert "matched the LEIR interpreter" in r.raise_reason
        # the large-magnitude inputs (seed 2) make exp(logvar) ~1e10: the difference is rounding
        # within the exact class, so the recorded error is finite, not small in absolute terms
        assert r.raise_max_abs_err is not None and 0 <= r.raise_max_abs_err < float("inf")
        assert r.names["tensors"]["A"] == prog.inputs[0].name  # original names kept
    # --no-check: there is no raise step to check, the record still says so
    r = X.extract(X.refs_for_zoo("vae_kl"), check=False).records[0]
    assert r.raise_ok and r.raise_reason == "leir-native: no raise step (not checked)"


def test_leir_check_without_the_interpreter():
    c = X.check_native("k", "kernel f32 k(A[4,8]) -> B[4]\n B[i] += exp(A[i,j])\n", work_limit=10)
    assert c.passed and c.max_abs_err is None and "too large for the interpreter" in c.reason


USER_LEIR = """# Scaled row sums, written by hand.
# family: mine
# size tiny: R=4 C=8
# size default: R=16 C=32
kernel f32 row_scale(x[{R},{C}], w[{C}]) -> y[{R}]
  y[r] += x[r,c] * w[c] * 0.5
"""


def test_cli_extract_user_leir(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "row_scale.leir").write_text(USER_LEIR)
    plain = tmp_path / "plain.leir"
    plain.write_text("kernel f32 plain(A[8]) -> B[8]\n  B[i] = A[i] * A[i] + 1.0\n")
    out = tmp_path / "k.parquet"
    runner = CliRunner()
    r = runner.invoke(app, ["extract", "--leir", f"{tmp_path / 'mine'},{plain}", "--out", str(out),
                            "--size", "default"])
    assert r.exit_code == 0, r.output
    recs = read_records(out, KernelRecord)
    assert [k.name for k in recs] == ["row_scale", "plain"]
    assert [(o.workload, o.suite, o.count) for k in recs for o in k.occurrences] == \
        [("row_scale", "user", 1), ("plain", "user", 1)]
    assert all(k.raise_ok for k in recs)
    assert [s.shape for s in recs[0].signature] == [[16, 32], [32], [16]]  # the default size
    # --leir added to --zoo, repeated; the same kernel twice is one record
    r = runner.invoke(app, ["extract", "--zoo", "vae_kl", "--leir", str(plain), "--leir",
                            str(plain), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert [k.name for k in read_records(out, KernelRecord)] == ["vae_kl", "plain"]


def test_cli_extract_bad_leir_names_file_and_position(tmp_path):
    good = tmp_path / "good.leir"
    good.write_text(USER_LEIR)
    bad = tmp_path / "bad.leir"
    bad.write_text(USER_LEIR.replace("x[r,c] * w[c]", "x[r,c] * * w[c]"))
    out = tmp_path / "k.parquet"
    r = CliRunner().invoke(app, ["extract", "--leir", str(good), "--leir", str(bad),
                                 "--out", str(out)])
    assert r.exit_code == 2
    assert f"{bad}: line 6, column 20: unexpected '*'" in r.output
    assert "y[r] += x[r,c] * * w[c] * 0.5" in r.output
    assert not out.exists() and not (tmp_path / "k.summary.json").exists()
    # two different files giving one workload name
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "good.leir").write_text(USER_LEIR)
    r = CliRunner().invoke(app, ["extract", "--leir", f"{good},{tmp_path / 'other'}"])
    assert r.exit_code == 2 and "rename one of them" in r.output
    r = CliRunner().invoke(app, ["extract", "--leir", str(tmp_path / "nope.leir")])
    assert r.exit_code == 2 and "no such file" in r.output


# ----------------------------------------------------------------------------- bounds (issue 12)
FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


def test_huge_problem_stays_under_its_memory_limit_and_is_reported(tmp_path):
    """A folder with a 2 x 4 GiB problem, a stuck one and a small one: the huge one fails inside
    its worker's memory limit, the stuck one at its deadline, the small one comes through."""
    import resource

    log = tmp_path / "extract.log"
    refs = X.refs_for_problems(FIXTURES / "problems_bounds")
    res = X.extract(refs, jobs=1, memory_limit_mb=2500, scan_timeout_s=10, log_path=log)
    scans = {s.workload: s for s in res.scans}
    assert scans["linear_relu"].ok and all(r.raise_ok for r in res.records)
    huge = scans["huge_matmul"]
    assert not huge.ok and "memory limit of 2500 MB" in huge.error
    slow = scans["slow_inputs"]
    assert not slow.ok and slow.stage == "timeout" and "10 s" in slow.error
    assert res.options["memory_limit_mb"] == 2500 and res.options["isolated"]
    # the workers' peak resident memory stayed under the limit (the parent never built a problem)
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 2500 * 1024
    lines = log.read_text().splitlines()
    assert sum(ln.split(" ", 1)[1].startswith("workload ") for ln in lines) == 3
    assert any("huge_matmul: FAILED at build" in ln for ln in lines)
    failures = {f["workload"]: f for f in res.summary()["failures"]}
    assert set(failures) == {"huge_matmul", "slow_inputs"}


MATMUL_256 = '''
import torch
import torch.nn as nn

M = 256
K = 256
N = 256

class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)

def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]

def get_init_inputs():
    return []
'''


def test_check_over_budget_runs_on_a_reduced_problem_or_is_skipped(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    (d / "mm.py").write_text(MATMUL_256)
    k = X.check_estimate(2 * 256 ** 3, 3 * 4 * 256 ** 2, [])[0]
    assert 0.5 < k < 3.0  # 256^3 unscheduled, 3 runs x 3 seeds: about a second and a half
    res = X.extract(X.refs_for_problems(d), isolate=False, check_budget_s=0.05)
    (row,) = res.summary()["workloads"]
    assert row["check_reduced"]["from"] == "1" and float(row["check_reduced"]["to"]) <= 0.5
    (rec,) = res.records
    (n,) = {s.shape[0] for s in rec.signature}
    assert rec.raise_ok and n < 256 and [s.shape for s in rec.signature] == [[n, n]] * 3
    assert X.check_estimate(2 * n ** 3, 12 * n * n, [])[0] <= 0.05
    # a budget nothing fits: rescanned once, then skipped with the estimate, never run
    res = X.extract(X.refs_for_problems(d), isolate=False, check_budget_s=1e-6)
    (rec,) = res.records
    assert not rec.raise_ok and rec.raise_reason.startswith("check-skipped: estimated")
    assert not res.checks[f"leir:{rec.leir_hash}"].passed


def test_plan_workers_never_exceeds_the_machine():
    machine = int(X.machine_memory_mb() * X.MEMORY_SHARE)
    jobs, mb, note = X.plan_workers(4, None)
    assert jobs == 4 and mb == machine // 4 and note == ""
    jobs, mb, note = X.plan_workers(8, machine // 2)
    assert jobs == 2 and mb == machine // 2 and "lowered from 8 to 2" in note
    with pytest.raises(ValueError, match="too small"):
        X.plan_workers(1, 100)


def test_cli_extract_problems_with_an_element_target(tmp_path):
    out = tmp_path / "k.parquet"
    r = CliRunner().invoke(app, ["extract", "--problems", str(FIXTURES / "problems_literal"),
                                 "--scale", "elements=64K", "--out", str(out)])
    assert r.exit_code == 0, r.output
    s = json.loads(X.summary_path(out).read_text())
    (row,) = s["workloads"]
    used = row["scale_used"]
    assert used["form"] == "elements=65536" and used["largest_elements"] <= 65536
    assert used["shrunk_inputs"][0][0] == [10, 3, 224, 224]
    recs = read_records(out, KernelRecord)
    assert recs and all(k.raise_ok for k in recs)
    log = out.with_suffix(".log").read_text()
    assert "workload conv_literal: " in log and "scale elements=65536" in log
    bad = CliRunner().invoke(app, ["extract", "--problems", str(FIXTURES / "problems_literal"),
                                   "--scale", "huge", "--out", str(out)])
    assert bad.exit_code == 2 and "elements=N" in bad.output


@pytest.mark.slow
def test_architecture_patterns_and_the_fixtures_extract_fully_at_a_reduced_scale(tmp_path):
    """Issue 35: a Swin-style model that asserts its input size and a ShuffleNet unit whose
    channels must divide its groups, in one folder with the converter fixtures, at scale 0.25:
    every problem scanned, every kernel raised and checked (no per-problem check bound here)."""
    import shutil

    d = tmp_path / "mixed"
    d.mkdir()
    for sub in ("problems_arch", "problems"):
        for f in sorted((FIXTURES / sub).glob("*.py")):
            shutil.copy(f, d / f.name)
    res = X.extract(X.refs_for_problems(d, scale="0.25"), jobs=2, problem_check_budget_s=None)
    s = res.summary()
    assert s["models_ok"] == s["models_tried"] == len(list(d.glob("*.py"))), s["failures"]
    assert all(not sc.unsupported for sc in res.scans)
    assert res.records and all(r.raise_ok for r in res.records), \
        [(r.name, r.raise_reason) for r in res.records if not r.raise_ok]
    rows = {w["workload"]: w for w in s["workloads"]}
    swin = rows["swin_fixed_size"]["scale_used"]
    assert swin["factor"] == 0.25 and swin["kept_globals"] == ["image_size"]
    assert swin["input_shapes"] == [[8, 3, 32, 32]]
    shuffle = rows["shufflenet_groups"]
    assert shuffle["applied_scale"]["default"] == 0.5   # 0.25 leaves 16 channels for 3 groups
    assert res.options["sandbox"]["network"]


def test_check_memory_estimate_counts_the_comparisons_float64_copies(monkeypatch):
    """Issue 35: a check died with ``MemoryError`` allocating 784 MiB (one float64 copy of a
    98 M-element output): the estimate now counts those copies, so such a kernel is skipped
    before it runs under a small worker, and a MemoryError that still happens is named."""
    n = 98 * 2 ** 20
    sig = [{"name": "A", "dtype": "float32", "shape": [n], "role": "input"},
           {"name": "B", "dtype": "float32", "shape": [n], "role": "output"}]
    _s, b = X.check_estimate(n, 8 * n, sig)
    assert b >= n * 4 * 3 + n * 4 * 3 + n * 8 * X.COMPARE_F64_COPIES
    k = X.KernelScan(name="big", calls=1, tvmscript="", tir_hash="", script_hash="",
                     flops=n, bytes_moved=8 * n, signature=sig)
    # 2.4 GB of inputs and outputs fit half of 8 GB; with the 3.3 GB of float64 copies they do not
    assert "memory limit of 8192 MB" in X._over_budget(k, 1e9, 8192)
    monkeypatch.setenv("STEPTP_WORKER_MEMORY_MB", "2500")
    why = X._crash_reason(MemoryError("Unable to allocate 784. MiB for an array with shape "
                                      "(102760448,) and data type float64"))
    assert why.startswith("check-out-of-memory") and "memory limit of 2500 MB" in why
    assert X._crash_reason(ValueError("bad")).startswith("check-crashed: ValueError")


def test_passed_raise_checks_are_remembered_and_not_run_again(tmp_path):
    """With a ``check_cache`` (the measurement cache; ``pipeline.extract`` passes it), a kernel
    whose check passed before with the same reference, LEIR and check code is not checked
    again: a nightly whose search or curation code changed skips its 1,000 checks. The
    records are the same either way; a changed kernel text is checked."""
    from steptp.measure.cache import Cache

    cache = Cache(tmp_path / "cache.sqlite")
    names = "conv2d,vae_kl"
    first: list[str] = []
    a = X.extract(X.refs_for_zoo(names), log=first.append, check_cache=cache)
    ran = [ln for ln in first if ln.startswith("kernel ") and ": check passed" in ln]
    assert len(ran) == len(a.records) >= 3 and all(r.raise_ok for r in a.records)
    assert cache.counts()["verifications"] == len(a.records)
    again: list[str] = []
    b = X.extract(X.refs_for_zoo(names), log=again.append, check_cache=cache)
    assert not [ln for ln in again if ln.startswith("kernel ") and ": check" in ln]
    assert any(f"{len(a.records)} of {len(a.records)} raise checks passed before" in ln for ln in again)
    assert b.records == a.records          # a release does not depend on what the cache held
    # another kernel text (the LEIR-native program at another size) misses the cache
    other: list[str] = []
    X.extract(X.refs_for_zoo("vae_kl", size="default"), log=other.append, check_cache=cache)
    assert [ln for ln in other if ln.startswith("kernel ") and ": check passed" in ln]
