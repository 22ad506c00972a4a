"""The GPU target without a GPU: CUDA artifacts, the CUDA search space, the standalone runner's
reference mode over its file protocol, and the directory / TCP backends into the cache."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from steptp import examples
from steptp.leir import parse
from steptp.measure.cache import Cache, program_hash
from steptp.measure.runner.gpu import (DirectoryBackend, GpuJob, TcpBackend, cpu_twin,
                                        fingerprint_id, measure, record,
                                        timing_config_hash,
                                        tolerance_table, verify_config_hash)
from steptp.measure.verify import TOLERANCES
from steptp.search.cuda_space import bind_all, cuda_candidates, is_bound
from steptp.strategies import registry
from steptp.tir.cuda_artifact import CudaLimits, LimitError, build_artifact
from steptp.tir.target import Target

RUNNER = Path(__file__).resolve().parents[1] / "steptp" / "gpu_runner" / "runner.py"
TARGET = Target.cuda()

SHARED = """kernel k(A: f32[8,128]) -> D: f32[8,128]
  T0: f32[8,128] shared
  for i in 8 blockIdx.x:
    for j in 128 threadIdx.x:
      T0[i,j] = A[i,j] * 2.0
    for j in 128 threadIdx.x:
      D[i,j] = T0[i,127 - j] + 1.0
"""


def _runner_module():
    spec = importlib.util.spec_from_file_location("steptp_gpu_runner_under_test", RUNNER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_runner(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """The runner as it travels: copied alone, run with steptp unimportable."""
    alone = tmp_path / "alone" / "runner.py"
    alone.parent.mkdir(exist_ok=True)
    shutil.copy(RUNNER, alone)
    code = ("import runpy, sys; sys.modules['steptp'] = None; sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    return subprocess.run([sys.executable, "-I", "-c", code, str(alone), *args],
                          capture_output=True, text=True, timeout=120, cwd=alone.parent)


# ---------------------------------------------------------------------------- artifacts
def test_every_gpu_strategy_with_candidates_yields_buildable_artifacts():
    produced: dict[str, int] = {}
    built: dict[str, int] = {}
    for name in examples.names():
        prog = parse(examples.text(name))
        for c in cuda_candidates(prog, max_per_site=1):
            produced[c.strategy] = produced.get(c.strategy, 0) + 1
            try:
                art = build_artifact(c.program, TARGET)
            except Exception:  # noqa: BLE001 - counted below
                continue
            built[c.strategy] = built.get(c.strategy, 0) + 1
            for ln in art.meta["launches"]:
                assert re.search(r'extern "C" __global__ void (__launch_bounds__\(\d+\) )?'
                                 + ln["name"] + r"\(", art.source), ln["name"]
                assert ln["block"][0] * ln["block"][1] * ln["block"][2] <= 1024
                assert ln["static_shared_bytes"] + ln["dynamic_shared_bytes"] <= 227 * 1024
    gpu_strategies = {s.name for s in registry.for_target("gpu")}
    assert set(produced) <= gpu_strategies
    assert len(produced) >= 35, sorted(produced)
    missing = sorted(set(produced) - set(built))
    assert not missing, f"strategies whose GPU candidates never build: {missing}"
    assert sum(built.values()) >= 0.9 * sum(produced.values())


def test_artifact_is_deterministic_and_names_workspaces():
    prog = bind_all(parse(examples.text("softmax")))
    a, b = build_artifact(prog, TARGET), build_artifact(examples.text("softmax").replace(
        "  for i in 8:", "  for i in 8 blockIdx.x:"), TARGET)
    assert a.id == b.id and a.meta == b.meta and a.source == b.source
    roles = {x["name"]: x["role"] for x in a.meta["buffers"]}
    assert roles == {"A": "input", "D": "output", "T0": "workspace", "T1": "workspace"}
    (ln,) = a.meta["launches"]
    assert ln["grid"] == [8, 1, 1] and ln["args"][:2] == ["A", "D"]


def test_a_kernel_that_reads_back_what_it_writes_loses_restrict():
    """On an H200, nvcc turned `where(F > 0, F, G)` into a select between the two addresses,
    both `__restrict__`, and loaded through the read-only path, which missed the thread's own
    store to `G` just before: every negative element came back as the workspace's stale
    contents, also with `G` alone not `__restrict__`. The artifact drops it from every
    parameter of a kernel that reads back, in a conditional, a buffer it writes (prototype and
    definition), and keeps it elsewhere."""
    split = """kernel k(A: f32[64,64], B: f32[64,64], C: f32[64]) -> D: f32[64,64]
      E: f32[64,64]
      F: f32[64,64]
      G: f32[64,64]
      for i in 64 blockIdx.x, j in 64 threadIdx.x:
        E[i,j] += A[i,k] * B[k,j]
      for i in 64 blockIdx.x, j in 64 threadIdx.x:
        F[i,j] = E[i,j] + C[j]
      for i in 64 blockIdx.x, j in 64 threadIdx.x:
        G[i,j] = F[i,j] * 0.01
        D[i,j] = where(F[i,j] > 0.0, F[i,j], G[i,j])
    """
    src = build_artifact(split, TARGET).source
    heads = [ln for ln in src.splitlines() if "__global__" in ln]
    last = [h for h in heads if "main_kernel_2(" in h]
    assert len(last) == 2   # the prototype and the definition
    assert all("__restrict__" not in h and "float* G_ptr" in h and "float* F_ptr" in h
               for h in last)
    middle = [h for h in heads if "main_kernel_1(" in h]
    assert middle and all(h.count("__restrict__") == 3 for h in middle)
    # the accumulation reads E back in place, not in a conditional: it keeps `__restrict__`
    # (without it the accumulator leaves its register: a matmul ran 5x slower)
    first = [h for h in heads if "main_kernel(" in h]
    assert first and all(h.count("__restrict__") == 3 for h in first)


def test_launch_limits_are_checked_and_configurable():
    art = build_artifact(SHARED, TARGET)
    (ln,) = art.meta["launches"]
    assert ln["block"] == [128, 1, 1] and ln["static_shared_bytes"] >= 128 * 4
    with pytest.raises(LimitError, match="shared memory"):
        build_artifact(SHARED, TARGET, CudaLimits(max_shared_bytes=ln["static_shared_bytes"] - 1))
    with pytest.raises(LimitError, match="128 threads per block"):
        build_artifact(SHARED, TARGET, CudaLimits(max_threads_per_block=64))
    assert CudaLimits.from_dict(CudaLimits().to_dict()) == CudaLimits()
    with pytest.raises(ValueError, match="unknown CUDA limit"):
        CudaLimits.from_dict({"max_warps": 3})


def test_cuda_space_binds_every_nest_and_refuses_cpu_kinds():
    base = bind_all(parse(examples.text("layer_norm")))
    assert is_bound(base) and not is_bound(parse(examples.text("layer_norm")))
    assert bind_all(parse(examples.text("split_matmul"))) is None  # a parallel (CPU) loop
    cands = cuda_candidates(parse(examples.text("softmax")))
    assert cands and all(is_bound(c.program) for c in cands)
    assert len({c.text for c in cands}) == len(cands)
    assert [c.text for c in cands] == [c.text for c in cuda_candidates(
        parse(examples.text("softmax")))]


# ---------------------------------------------------------------------------- the runner
def _softmax_job(tmp_path: Path) -> tuple[GpuJob, Path, str]:
    prog = parse(examples.text("softmax"))
    job = GpuJob(TARGET, seeds=(0, 3))
    job.add_task("softmax", prog, torch={"op": "softmax"})
    job.add_candidate("softmax", bind_all(prog), role="baseline")
    for c in cuda_candidates(prog)[:3]:
        job.add_candidate("softmax", c.program, c.exactness, label=c.label)
    wrong = examples.text("softmax").replace("/ T1[i]", "/ (T1[i] + 1e-3)").replace(
        "  for i in 8:", "  for i in 8 blockIdx.x:")
    wrong_id = job.add_candidate("softmax", wrong, label="wrong")
    return job, job.write(tmp_path / "job"), wrong_id


def test_job_carries_the_verifier_tolerances():
    assert tolerance_table("reassociation")["float32"] == list(TOLERANCES["reassociation"]["f32"])
    assert set(tolerance_table("exact")) == {"float16", "bfloat16", "float32", "float64"}


def test_runner_reference_mode_end_to_end(tmp_path):
    job, d, wrong_id = _softmax_job(tmp_path)
    manifest = json.loads((d / "job.json").read_text())
    assert manifest["candidates"][0]["tolerances"] == tolerance_table("exact")
    r = _run_runner(tmp_path, str(d), "--out", str(tmp_path / "res.json"), "--mode", "reference")
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "res.json").read_text())
    assert res["mode"] == "reference" and res["fingerprint"]["mode"] == "reference"
    by_id = {x["artifact"]: x for x in res["results"]}
    assert len(by_id) == 5
    assert by_id[wrong_id]["status"] == "failed" and "D[" in by_id[wrong_id]["reason"]
    assert all(x["verified"] for k, x in by_id.items() if k != wrong_id)
    assert all(x["timing"] is None for x in res["results"])  # nothing is timed without a GPU


def test_runner_rejects_tampered_and_malformed_jobs(tmp_path):
    job, d, _ = _softmax_job(tmp_path)
    first = job.candidates[0]["artifact"]
    cu = d / "artifacts" / f"{first}.cu"
    cu.write_text(cu.read_text() + "\n// edited\n")
    r = _run_runner(tmp_path, str(d), "--mode", "reference", "--quiet")
    assert r.returncode == 0
    res = json.loads((d / "results.json").read_text())
    bad = next(x for x in res["results"] if x["artifact"] == first)
    assert bad["status"] == "error" and "does not match its hash" in bad["reason"]
    (d / "job.json").write_text("{ not json")
    r = _run_runner(tmp_path, str(d), "--mode", "reference")
    assert r.returncode == 2 and "job.json" in r.stderr


def test_runner_comparison_matches_the_verifier_rule():
    run = _runner_module()
    want = np.array([1.0, 0.0, 100.0], dtype=np.float32)
    atol, rtol = TOLERANCES["exact"]["f32"]
    ok = want + np.array([0, atol * 0.9, 100.0 * rtol * 0.9], dtype=np.float32)
    assert run.compare(ok, want, (atol, rtol), "exact", "D")["passed"]
    off = want.copy()
    off[2] = 100.0 * (1 + 3 * rtol)
    assert not run.compare(off, want, (atol, rtol), "exact", "D")["passed"]
    slack = np.array([0.0, 0.0, 100.0 * 3 * rtol], dtype=np.float32)  # 2 x the error bound
    assert run.compare(off, want, (atol, rtol), "exact", "D", slack)["passed"]
    nan = want.copy()
    nan[1] = np.nan
    assert "never written" in run.compare(nan, want, (atol, rtol), "exact", "D")["reason"]
    assert not run.compare(np.array([1, 2]), np.array([1, 3]), (0, 0), "exact", "I")["passed"]


def test_cpu_twin_serializes_thread_loops():
    twin = cpu_twin(parse(SHARED))
    text = registry.canonical(twin)
    assert "blockIdx" not in text and "threadIdx" not in text and "shared" not in text


# ---------------------------------------------------------------------------- backends
def test_tcp_backend_on_loopback_fills_the_cache(tmp_path):
    job, d, wrong_id = _softmax_job(tmp_path)
    alone = tmp_path / "srv" / "runner.py"
    alone.parent.mkdir()
    shutil.copy(RUNNER, alone)
    srv = subprocess.Popen([sys.executable, "-I", str(alone), "--serve", "127.0.0.1:0", "--once",
                            "--mode", "reference"], stdout=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline()
        assert line.startswith("serving on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        cache = Cache(tmp_path / "cache.sqlite")
        res, stored = measure(job, TcpBackend("127.0.0.1", port, timeout_s=120), cache,
                              tmp_path / "work")
        assert srv.wait(timeout=60) == 0
    finally:
        if srv.poll() is None:
            srv.kill()
    assert sum(x["verified"] for x in res["results"]) == 4
    assert stored == {"verifications": 5, "timings": 0}
    cand = next(c for c in job.candidates if c["artifact"] == wrong_id)
    hit = cache.get_verification(
        program_hash(examples.text("softmax")),
        cand["program_hash"], TARGET.key, fingerprint_id(res), verify_config_hash("exact", [0, 3]))
    assert hit is not None and hit["passed"] is False


def test_directory_backend_and_gpu_timings_enter_the_cache(tmp_path):
    job, d, _ = _softmax_job(tmp_path)
    backend = DirectoryBackend(tmp_path / "outbox", timeout_s=60)
    shipped = backend.submit(d)
    assert shipped.parent == tmp_path / "outbox" and (shipped / "job.json").exists()
    r = _run_runner(tmp_path, str(shipped), "--out", str(shipped / "results.json"),
                    "--mode", "reference", "--quiet")
    assert r.returncode == 0, r.stderr
    res = backend.collect(shipped)
    assert res["job"] == job.id
    # what a GPU run adds (recorded shape of a cupy-mode result): a fingerprint and timings
    res = {**res, "mode": "cupy", "fingerprint": {"mode": "cupy", "gpu_name": "NVIDIA H200",
                                                  "sm_count": 132, "id": "feedc0ffee123456"},
           "results": [{**x, "timing": {"median_s": 1e-5, "min_s": 9e-6, "spread": 0.02,
                                        "repeats": 20, "number": 1}} if x["verified"] else x
                       for x in res["results"]]}
    cache = Cache(tmp_path / "cache.sqlite")
    assert record(res, job.manifest(), cache) == {"verifications": 5, "timings": 4}
    ph = job.candidates[0]["program_hash"]
    chash = timing_config_hash(res["timing"])
    assert cache.get_timing(ph, TARGET.key, "gpu:feedc0ffee123456", chash)["median_s"] == 1e-5
    assert cache.get_timing(ph, TARGET.key, "gpu:another", chash) is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit, no GPU)")
def test_runner_compile_mode_compiles_cuda_source_with_nvcc(tmp_path):
    prog = parse(SHARED)
    job = GpuJob(TARGET, seeds=(0,), cpu_outputs=False)
    job.add_task("shared", cpu_twin(prog))
    job.add_candidate("shared", prog, label="shared staging")
    unrolled = next(c for c in cuda_candidates(parse(examples.text("softmax")))
                    if c.strategy == "loop_split")
    job.add_task("softmax", examples.text("softmax"))
    job.add_candidate("softmax", unrolled.program, label=unrolled.label)
    d = job.write(tmp_path / "job")
    r = _run_runner(tmp_path, str(d), "--mode", "compile", "--quiet")
    assert r.returncode == 0, r.stderr
    res = json.loads((d / "results.json").read_text())
    assert [x["status"] for x in res["results"]] == ["compiled", "compiled"], res["results"]
    assert all(x["cubin_bytes"] > 1000 for x in res["results"])


def test_job_folder_is_deterministic(tmp_path):
    def make(where):
        job = GpuJob(TARGET, seeds=(1,))
        job.add_task("layer_norm", examples.text("layer_norm"), torch={"op": "layer_norm"})
        job.add_candidate("layer_norm", bind_all(parse(examples.text("layer_norm"))),
                          role="baseline")
        return job.write(where)

    a, b = make(tmp_path / "a"), make(tmp_path / "b")
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    manifest = json.loads((a / "job.json").read_text())
    assert manifest["tasks"]["layer_norm"]["seeds"][0]["bounds"]["exact"]  # the slack travels


def test_tcp_runner_refuses_an_archive_that_leaves_its_folder(tmp_path):
    import io
    import socket
    import struct
    import tarfile
    import threading

    run = _runner_module()
    ports = []
    ready = threading.Event()
    t = threading.Thread(target=run.serve, args=("127.0.0.1", 0, "reference", True,
                                                 lambda p: (ports.append(p), ready.set())))
    t.start()
    assert ready.wait(30)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("../evil.json")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"{}"))
    with socket.create_connection(("127.0.0.1", ports[0]), timeout=30) as s:
        data = buf.getvalue()
        s.sendall(struct.pack("!Q", len(data)) + data)
        reply = json.loads(run.recv_frame(s))
    t.join(30)
    assert "not a plain relative path" in reply["error"]
    assert not (tmp_path.parent / "evil.json").exists()


def test_gpu_runner_package_imports_without_tvm_and_frames_round_trip():
    """The package the build side's ``TcpBackend`` imports its framing from: importable on a
    GPU machine without TVM (``tvm`` blocked), and its frames survive a socket pair."""
    code = """
import socket, sys
sys.modules['tvm'] = None
sys.modules['tvm_ffi'] = None
from steptp.gpu_runner.runner import JobError, recv_frame, send_frame
a, b = socket.socketpair()
send_frame(a, b'x' * 70000)
assert recv_frame(b) == b'x' * 70000
send_frame(a, b'abc')
try:
    recv_frame(b, limit=2)
    raise SystemExit('no limit')
except JobError:
    pass
a, b = socket.socketpair()
a.sendall((10).to_bytes(8, 'big') + b'half')
a.close()
try:
    recv_frame(b)
    raise SystemExit('no error on a cut message')
except ConnectionError:
    pass
assert not any(m == 'tvm' or m.startswith(('tvm.', 'steptp.measure', 'steptp.tir'))
               for m, v in sys.modules.items() if v is not None), sorted(sys.modules)
print('ok')
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
