"""steptp GPU runner: verify and time CUDA artifacts on a machine with no TVM and no steptp.

    python runner.py JOB_DIR --out results.json            # on a GPU (CuPy; PyTorch optional)
    python runner.py JOB_DIR --out results.json --mode reference   # anywhere (NumPy only)
    python runner.py JOB_DIR --mode compile                 # nvcc compiles each .cu, no GPU
    python runner.py --serve 127.0.0.1:9300                 # answer jobs sent over TCP

Needs only the standard library and NumPy, plus CuPy for the GPU mode (PyTorch, if present,
times the per-task PyTorch baselines). Keep it that way: this file travels alone.

The job folder (written by ``steptp.measure.runner.gpu``): ``job.json`` names the tasks (a
kernel's buffers, its seeded inputs and reference outputs as ``.npy`` under ``data/``, computed on
the build machine with TVM), the candidates (an artifact under ``artifacts/``: ``<id>.json`` +
``<id>.cu``, the task it answers, and its tolerance table ``{dtype: [atol, rtol]}`` copied from
the CPU verifier), and the timing protocol. Each candidate is compiled with NVRTC (nvcc when
NVRTC refuses), loaded as a ``cupy.RawModule``, launched on every seed with outputs pre-filled
with NaN (so an unwritten
element fails), compared element by element with ``|got - want| <= atol + rtol * |want|``
(a non-finite result where the reference is finite fails; integers must be equal), its inputs
checked unchanged, and timed with CUDA events: ``warmup`` calls, then ``repeats`` measurements,
each after overwriting a buffer larger than the L2 cache; median, min and spread (IQR / median).

Reference mode (no GPU): the same protocol end to end, but a candidate's outputs are the ones the
build machine computed for it on the CPU (``cpu_outputs`` in the job); nothing is timed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

PROTOCOL = 1
ARTIFACT_VERSION = 1
_AXES = 3


class JobError(ValueError):
    """The job folder is malformed (the message names the file and what is wrong)."""


# ---------------------------------------------------------------------------- files
def _read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise JobError(f"{path}: cannot read JSON: {e}") from e


def _load_npy(root: Path, rel: str) -> np.ndarray:
    p = (root / rel).resolve()
    if root.resolve() not in p.parents:
        raise JobError(f"{rel}: path leaves the job folder")
    return np.load(p, allow_pickle=False)


def _write_json_atomic(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f, sort_keys=True, indent=1)
        f.write("\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- comparison
def compare(got: np.ndarray, want: np.ndarray, tol, exactness: str, name: str,
            slack: np.ndarray | None = None) -> dict:
    """The CPU verifier's criterion: ``|got - want| <= atol + rtol * |want| + slack``, where
    ``slack`` is ``factor * bound`` (the reference's rounding-error bound, from the build side)."""
    if got.shape != want.shape:
        return {"passed": False, "reason": f"{name}: shape {got.shape}, expected {want.shape}"}
    if want.dtype.kind not in "fc":
        bad = got != want
        if bad.any():
            i = tuple(int(k) for k in np.argwhere(bad)[0])
            return {"passed": False, "reason": f"{name}{list(i)}: {got[i].item()!r}, expected {want[i].item()!r}"}
        return {"passed": True, "max_abs_err": 0.0, "compared": int(want.size)}
    atol, rtol = tol
    g, w = got.astype(np.float64), want.astype(np.float64)
    wf = np.isfinite(w)
    if exactness == "exact":
        special = ~wf
        same_special = (np.isnan(w) & np.isnan(g)) | (np.isinf(w) & (g == w))
        if (special & ~same_special).any():
            i = tuple(int(k) for k in np.argwhere(special & ~same_special)[0])
            return {"passed": False, "reason": f"{name}{list(i)}: {float(g[i])!r}, expected {float(w[i])!r}"}
    bad_nonfinite = wf & ~np.isfinite(g)
    if bad_nonfinite.any():
        i = tuple(int(k) for k in np.argwhere(bad_nonfinite)[0])
        return {"passed": False, "reason": f"{name}{list(i)}: {float(g[i])!r} where the reference is "
                                           f"{float(w[i])!r} (never written, or overflow)"}
    err = np.where(wf, np.abs(g - w), 0.0)
    allowed = atol + rtol * np.abs(np.where(wf, w, 0.0))
    if slack is not None:
        allowed = allowed + slack.astype(np.float64)
    bad = err > allowed
    max_abs = float(err.max()) if err.size else 0.0
    if bad.any():
        i = tuple(int(k) for k in np.argwhere(bad)[0])
        return {"passed": False, "max_abs_err": max_abs,
                "reason": f"{name}{list(i)}: {float(g[i])!r}, expected {float(w[i])!r} "
                          f"(atol {atol:g}, rtol {rtol:g})"}
    return {"passed": True, "max_abs_err": max_abs, "compared": int(wf.sum())}


def _spread(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(xs, n=4, method="inclusive")
    med = statistics.median(xs)
    return (q[2] - q[0]) / med if med > 0 else 0.0


def _timing(xs: list[float]) -> dict:
    return {"median_s": statistics.median(xs), "min_s": min(xs), "spread": _spread(xs),
            "repeats": len(xs), "number": 1, "results": xs}


# ---------------------------------------------------------------------------- executors
class ReferenceExecutor:
    """No GPU: a candidate's outputs are those the build machine computed for it on the CPU."""

    mode = "reference"

    def __init__(self, root: Path):
        self.root = root

    def fingerprint(self) -> dict:
        return {"mode": "reference", "machine": platform.machine(),
                "python": platform.python_version(), "numpy": np.__version__}

    def prepare(self, meta: dict, source: str):
        return None

    def run(self, prepared, meta, cand, seed, inputs, fills):
        files = (cand.get("cpu_outputs") or {}).get(str(seed))
        if files is None:
            raise JobError(f"candidate {cand['artifact']}: no cpu_outputs for seed {seed} "
                           f"(reference mode needs them)")
        outs = {name: _load_npy(self.root, rel) for name, rel in files.items()}
        return outs, {k: v.copy() for k, v in inputs.items()}

    def time(self, prepared, meta, inputs, timing) -> dict | None:
        return None

    def torch_time(self, task, inputs, want, timing) -> dict | None:
        return None


class CompileExecutor:
    """No GPU, but nvcc: compile every artifact to a cubin for its arch (nothing runs)."""

    mode = "compile"

    def __init__(self, root: Path, nvcc: str = "nvcc"):
        self.root, self.nvcc = root, nvcc

    def fingerprint(self) -> dict:
        try:
            ver = subprocess.run([self.nvcc, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.strip().splitlines()[-1]
        except (OSError, subprocess.SubprocessError, IndexError):
            ver = "unknown"
        return {"mode": "compile", "nvcc": ver, "machine": platform.machine()}

    def prepare(self, meta: dict, source: str):
        with tempfile.TemporaryDirectory(prefix="steptp-nvcc-") as d:
            cu = Path(d) / "k.cu"
            cu.write_text(source, encoding="utf-8")
            r = subprocess.run([self.nvcc, f"-arch={meta.get('arch') or 'sm_90'}", "-cubin",
                                "-o", str(Path(d) / "k.cubin"), str(cu)],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise RuntimeError(f"nvcc failed: {(r.stderr or r.stdout).strip()[-1500:]}")
            cubin = (Path(d) / "k.cubin").read_bytes()
        missing = [ln["name"] for ln in meta["launches"] if ln["name"].encode() not in cubin]
        if missing:
            raise RuntimeError(f"the cubin has no kernel {missing[0]}")
        return len(cubin)

    def torch_time(self, task, inputs, want, timing) -> None:
        return None


class CupyExecutor:
    """A CUDA GPU through CuPy: NVRTC compiles, ``RawModule`` launches, CUDA events time."""

    mode = "cupy"

    def __init__(self, root: Path, device: int = 0):
        import cupy as cp

        self.cp = cp
        self.root = root
        cp.cuda.Device(device).use()
        self.props = cp.cuda.runtime.getDeviceProperties(device)
        l2 = int(self.props.get("l2CacheSize", 0)) or 64 * 1024 * 1024
        self._flush = cp.empty(max(2 * l2, 8 * 1024 * 1024) // 4, dtype=cp.float32)

    def fingerprint(self) -> dict:
        cp, p = self.cp, self.props
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        fp = {"mode": "cupy", "gpu_name": name, "sm_count": int(p["multiProcessorCount"]),
              "compute_capability": f"{p['major']}.{p['minor']}",
              "cuda_runtime": int(cp.cuda.runtime.runtimeGetVersion()),
              "cuda_driver": int(cp.cuda.runtime.driverGetVersion()),
              "l2_bytes": int(p.get("l2CacheSize", 0)),
              "clock_khz": int(p.get("clockRate", 0)),
              "memory_clock_khz": int(p.get("memoryClockRate", 0)),
              "cupy": cp.__version__}
        # the compiler used (nvrtc / nvcc) is per candidate, in its result
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=20, check=True).stdout.strip().splitlines()[0]
            drv, _, clk = out.partition(",")
            fp["driver_version"] = drv.strip()
            fp["max_sm_clock"] = clk.strip()
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
        return fp

    def _module(self, meta: dict, source: str):
        """NVRTC first; when it refuses TVM's source (a missing header), nvcc to a cubin."""
        cp = self.cp
        opts = []  # NVRTC (CUDA >= 12) compiles C++17 by default
        cuda = os.environ.get("CUDA_PATH") or os.environ.get("CUDA_HOME") or "/usr/local/cuda"
        if os.path.isdir(os.path.join(cuda, "include")):
            opts.append(f"-I{os.path.join(cuda, 'include')}")
        try:
            mod = cp.RawModule(code=source, options=tuple(opts))
            mod.get_function(meta["launches"][0]["name"])  # compiles now, not at first launch
            self.compiler = "nvrtc"
            return mod
        except Exception as nvrtc_error:  # noqa: BLE001 - try nvcc before giving up
            nvcc = shutil.which("nvcc") or os.path.join(cuda, "bin", "nvcc")
            if not os.path.exists(nvcc):
                raise
            arch = f"sm_{self.props['major']}{self.props['minor']}"
            d = tempfile.mkdtemp(prefix="steptp-nvcc-")
            cu, cubin = os.path.join(d, "k.cu"), os.path.join(d, "k.cubin")
            with open(cu, "w", encoding="utf-8") as f:
                f.write(source)
            r = subprocess.run([nvcc, f"-arch={arch}", "-cubin", "-o", cubin, cu],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                raise RuntimeError(f"NVRTC: {nvrtc_error}; nvcc: {r.stderr[-1000:]}") from None
            self.compiler = "nvcc"
            return cp.RawModule(path=cubin)

    def prepare(self, meta: dict, source: str):
        mod = self._module(meta, source)
        funcs = []
        for ln in meta["launches"]:
            f = mod.get_function(ln["name"])
            if ln["dynamic_shared_bytes"] > 48 * 1024:
                f.max_dynamic_shared_size_bytes = ln["dynamic_shared_bytes"]
            funcs.append(f)
        return funcs

    def _buffers(self, meta, inputs, fills):
        cp = self.cp
        bufs = {}
        for b in meta["buffers"]:
            if b["role"] == "input":
                bufs[b["name"]] = cp.asarray(inputs[b["name"]])
            elif b["role"] == "output":
                bufs[b["name"]] = cp.asarray(fills[b["name"]])
            else:
                bufs[b["name"]] = cp.empty(tuple(b["shape"]), dtype=b["dtype"])
        return bufs

    def _launch(self, funcs, meta, bufs):
        for f, ln in zip(funcs, meta["launches"]):
            f(tuple(ln["grid"]), tuple(ln["block"]), tuple(bufs[a] for a in ln["args"]),
              shared_mem=ln["dynamic_shared_bytes"])

    def run(self, funcs, meta, cand, seed, inputs, fills):
        bufs = self._buffers(meta, inputs, fills)
        self._launch(funcs, meta, bufs)
        self.cp.cuda.Device().synchronize()
        outs = {b["name"]: self.cp.asnumpy(bufs[b["name"]]) for b in meta["buffers"]
                if b["role"] == "output"}
        ins = {b["name"]: self.cp.asnumpy(bufs[b["name"]]) for b in meta["buffers"]
               if b["role"] == "input"}
        return outs, ins

    def _events(self, call, timing) -> dict:
        cp = self.cp
        for _ in range(int(timing.get("warmup", 3))):
            call()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        xs = []
        for _ in range(int(timing.get("repeats", 20))):
            self._flush.fill(0.0)  # evict the kernel's data from L2
            start.record()
            call()
            end.record()
            end.synchronize()
            xs.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return _timing(xs)

    def time(self, funcs, meta, inputs, timing) -> dict:
        fills = {b["name"]: np.zeros(b["shape"], dtype=b["dtype"]) for b in meta["buffers"]
                 if b["role"] == "output"}
        bufs = self._buffers(meta, inputs, fills)
        return self._events(lambda: self._launch(funcs, meta, bufs), timing)

    def torch_time(self, task, inputs, want, timing) -> dict | None:
        """PyTorch's time for the task (cuBLAS/cuDNN), and how far its answer is from the
        reference (it is a yardstick, not a candidate: it is not judged)."""
        spec = task.get("torch")
        if not spec:
            return None
        try:
            import torch
        except ImportError:
            return None
        fn = TORCH_OPS.get(spec["op"])
        if fn is None:
            return {"error": f"unknown torch op {spec['op']!r}"}
        names = [b["name"] for b in task["buffers"] if b["role"] == "input"]
        xs = [torch.as_tensor(inputs[n]).cuda() for n in names]
        args = spec.get("args", {})
        with torch.no_grad():
            got = fn(*xs, **args)
            got = got if isinstance(got, tuple) else (got,)
            outs = [b["name"] for b in task["buffers"] if b["role"] == "output"]
            err = max(float(np.max(np.abs(g.double().cpu().numpy().reshape(want[n].shape)
                                          - want[n].astype(np.float64))))
                      for g, n in zip(got, outs))
            t = self._events(lambda: fn(*xs, **args), timing)
        return {**t, "max_abs_err_vs_reference": err, "torch": torch.__version__}


def _torch_ops():
    def matmul(a, b):
        return a @ b

    def matmul_bias_gelu(a, b, c):
        import torch
        return torch.nn.functional.gelu(a @ b + c)

    def linear_leaky_relu(a, b, c, slope=0.01):
        import torch
        return torch.nn.functional.leaky_relu(a @ b + c, slope)

    def softmax(a):
        return a.softmax(-1)

    def layer_norm(a, w, b, eps=1e-5):
        import torch
        return torch.nn.functional.layer_norm(a, a.shape[-1:], w, b, eps)

    def conv2d_relu(x, w, padding=1):
        import torch
        return torch.relu(torch.nn.functional.conv2d(x, w, padding=padding))

    def attention(q, k, v, scale=None):
        import torch
        return torch.nn.functional.scaled_dot_product_attention(q[None], k[None], v[None],
                                                                scale=scale)[0]

    def dual_matmul(a, b, c):
        return a @ b, a @ c

    def row_sum_exp(a, b, scale=1.0):
        return (a * scale + b[:, None]).exp().sum(-1)

    def cumsum(a):
        return a.cumsum(-1)

    return {f.__name__: f for f in (matmul, matmul_bias_gelu, linear_leaky_relu, softmax,
                                     layer_norm, conv2d_relu, attention, dual_matmul,
                                     row_sum_exp, cumsum)}


TORCH_OPS = _torch_ops()


# ---------------------------------------------------------------------------- the job
def _fill(b: dict) -> np.ndarray:
    dt = np.dtype(b["dtype"])
    if dt.kind == "f":
        v = np.nan
    elif dt.kind == "b":
        v = False
    else:
        info = np.iinfo(dt)
        v = info.max if info.min == 0 else info.min
    return np.full(b["shape"], v, dtype=dt)


def _check_artifact(meta: dict, where: str) -> None:
    if meta.get("artifact_version") != ARTIFACT_VERSION:
        raise JobError(f"{where}: artifact_version {meta.get('artifact_version')!r}, this runner "
                       f"reads {ARTIFACT_VERSION}")
    names = {b["name"] for b in meta["buffers"]}
    lim = meta.get("limits", {})
    for ln in meta["launches"]:
        if len(ln["grid"]) != _AXES or len(ln["block"]) != _AXES:
            raise JobError(f"{where}: kernel {ln['name']} needs 3 grid and 3 block extents")
        unknown = [a for a in ln["args"] if a not in names]
        if unknown:
            raise JobError(f"{where}: kernel {ln['name']} takes unknown buffers {unknown}")
        threads = ln["block"][0] * ln["block"][1] * ln["block"][2]
        if threads > lim.get("max_threads_per_block", 1024):
            raise JobError(f"{where}: kernel {ln['name']} has {threads} threads per block")


def _verify_and_time(ex, prepared, meta, cand, seeds, timing, r, bounds, factor) -> None:
    """Run on every seed, compare, check the inputs; time a verified candidate."""
    tol = cand["tolerances"]
    verdict = {"passed": True, "max_abs_err": 0.0}
    for seed, ins, want in seeds:
        fills = {b["name"]: _fill(b) for b in meta["buffers"] if b["role"] == "output"}
        outs, ins_after = ex.run(prepared, meta, cand, seed, ins, fills)
        for n, x in ins.items():
            if not np.array_equal(ins_after[n], x, equal_nan=True):
                verdict = {"passed": False, "reason": f"seed {seed}: the candidate "
                                                      f"writes to its input {n}"}
                break
        if not verdict["passed"]:
            break
        for n, w in want.items():
            b = bounds.get(seed, {}).get(n)
            c = compare(outs[n], w, tol.get(w.dtype.name, (0.0, 0.0)),
                        cand.get("exactness", "exact"), n,
                        None if b is None else factor * b)
            verdict["max_abs_err"] = max(verdict["max_abs_err"], c.get("max_abs_err", 0))
            if not c["passed"]:
                verdict = {**c, "reason": f"seed {seed}: {c['reason']}"}
                break
        if not verdict["passed"]:
            break
    r["verified"] = bool(verdict["passed"])
    r["max_abs_err"] = verdict.get("max_abs_err", 0.0)
    r["reason"] = verdict.get("reason")
    r["status"] = "ok" if r["verified"] else "failed"
    if r["verified"]:
        r["timing"] = ex.time(prepared, meta, seeds[0][1], timing)


def run_job(job_dir: str | os.PathLike, mode: str = "auto", log=None,
            budget_s: float | None = None) -> dict:
    """Verify and time every candidate of the job folder; return the results object. Past
    ``budget_s`` seconds the remaining candidates are reported as not run (status ``error``)."""
    root = Path(job_dir)
    job = _read_json(root / "job.json")
    if job.get("protocol") != PROTOCOL:
        raise JobError(f"{root / 'job.json'}: protocol {job.get('protocol')!r}, this runner "
                       f"speaks {PROTOCOL}")
    if mode == "auto":
        try:
            import cupy  # noqa: F401
            mode = "cupy" if cupy.cuda.runtime.getDeviceCount() > 0 else "reference"
        except Exception:  # noqa: BLE001 - no CuPy or no device
            mode = "reference"
    ex = (CupyExecutor(root) if mode == "cupy" else CompileExecutor(root) if mode == "compile"
          else ReferenceExecutor(root))
    timing = job.get("timing", {})
    tasks = job["tasks"]
    data: dict[str, list[tuple[int, dict, dict]]] = {}
    bounds: dict[str, dict[str, dict[int, dict]]] = {}  # task -> exact|reorders -> seed -> out
    factor = float(job.get("error_bound_factor", 2.0))
    for tid, task in sorted(tasks.items()):
        seeds = []
        bounds[tid] = {}
        for s in task["seeds"]:
            ins = {n: _load_npy(root, r) for n, r in s["inputs"].items()}
            outs = {n: _load_npy(root, r) for n, r in s["outputs"].items()}
            seeds.append((int(s["seed"]), ins, outs))
            for kind, files in (s.get("bounds") or {}).items():
                bounds[tid].setdefault(kind, {})[int(s["seed"])] = {
                    n: _load_npy(root, r) for n, r in files.items()}
        data[tid] = seeds
    results = []
    t_job = time.perf_counter()
    for k, cand in enumerate(job["candidates"]):
        t0 = time.perf_counter()
        r = {"artifact": cand["artifact"], "task": cand["task"], "role": cand.get("role"),
             "label": cand.get("label"), "verified": False, "status": "error", "timing": None}
        if budget_s is not None and time.perf_counter() - t_job > budget_s:
            r["reason"] = f"not run: the job's budget of {budget_s:g} s was spent"
            results.append(r)
            continue
        try:
            meta = _read_json(root / "artifacts" / f"{cand['artifact']}.json")
            _check_artifact(meta, f"artifacts/{cand['artifact']}.json")
            src = (root / "artifacts" / meta["source"]).read_text(encoding="utf-8")
            if hashlib.sha256(src.encode()).hexdigest() != meta.get("source_sha256", ""):
                raise JobError(f"artifacts/{meta['source']}: content does not match its hash")
            prepared = ex.prepare(meta, src)
            if getattr(ex, "compiler", None):
                r["compiler"] = ex.compiler
            if ex.mode == "compile":
                r.update(status="compiled", cubin_bytes=prepared, reason=None)
            else:
                kind = "exact" if cand.get("exactness", "exact") == "exact" else "reorders"
                _verify_and_time(ex, prepared, meta, cand, data[cand["task"]], timing, r,
                                 bounds[cand["task"]].get(kind, {}), factor)
        except Exception as e:  # noqa: BLE001 - one candidate's failure is its own result
            r["reason"] = f"{type(e).__name__}: {str(e).strip()[:1500]}"
            if not isinstance(e, JobError):
                r["traceback"] = traceback.format_exc(limit=3)[-2000:]
        r["wall_s"] = time.perf_counter() - t0
        results.append(r)
        if log:
            log(f"[{k + 1}/{len(job['candidates'])}] {cand['task']} {cand.get('label')}: "
                f"{r['status']}" + (f" {r['timing']['median_s'] * 1e6:.1f} us"
                                    if r.get("timing") else "")
                + (f" ({r['reason']})" if r.get("reason") else ""))
    torch_timings = {}
    for tid, task in sorted(tasks.items()):
        try:
            t = ex.torch_time(task, data[tid][0][1], data[tid][0][2], timing)
        except Exception as e:  # noqa: BLE001
            t = {"error": f"{type(e).__name__}: {e}"}
        if t is not None:
            torch_timings[tid] = t
    fp = ex.fingerprint()
    fp["id"] = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]
    return {"protocol": PROTOCOL, "job": job.get("id"), "mode": ex.mode, "fingerprint": fp,
            "timing": timing, "results": results, "torch": torch_timings,
            "wall_s": time.perf_counter() - t_job}


# ---------------------------------------------------------------------------- TCP
# The one framing of the TCP exchange, both ends: the build side's ``TcpBackend``
# (``steptp.measure.runner.gpu``) imports these, so they must stay free of TVM and steptp.
def send_frame(sock, payload: bytes) -> None:
    """One message: its length as 8 bytes, big-endian, then the bytes."""
    sock.sendall(struct.pack("!Q", len(payload)) + payload)


def recv_frame(sock, limit: int = 1 << 31) -> bytes:
    """The next message ``send_frame`` sent; ``JobError`` when it announces over ``limit`` bytes,
    ``ConnectionError`` when the peer closes before its end."""
    head = _recv_exact(sock, 8)
    (n,) = struct.unpack("!Q", head)
    if n > limit:
        raise JobError(f"message of {n} bytes is over the limit of {limit}")
    return _recv_exact(sock, n)


def _recv_exact(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(1 << 20, n - len(buf)))
        if not chunk:
            raise ConnectionError("connection closed mid-message")
        buf += chunk
    return bytes(buf)


def _untar(data: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tf:
        for m in tf.getmembers():
            if not (m.isfile() or m.isdir()) or m.name.startswith(("/", "..")) or ".." in \
                    Path(m.name).parts:
                raise JobError(f"job archive member {m.name!r} is not a plain relative path")
        tf.extractall(dest, filter="data")


def serve(host: str, port: int, mode: str = "auto", once: bool = False, ready=None) -> None:
    """Answer jobs: each connection sends a tar of a job folder and gets the results JSON."""
    with socket.create_server((host, port)) as srv:
        if ready is not None:
            ready(srv.getsockname()[1])
        while True:
            conn, _ = srv.accept()
            with conn:
                try:
                    data = recv_frame(conn)
                    with tempfile.TemporaryDirectory(prefix="steptp-gpu-job-") as d:
                        _untar(data, Path(d))
                        res = run_job(d, mode)
                except Exception as e:  # noqa: BLE001 - answer with the error
                    res = {"protocol": PROTOCOL, "error": f"{type(e).__name__}: {e}"}
                send_frame(conn, json.dumps(res, sort_keys=True).encode("utf-8"))
            if once:
                return


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job", nargs="?", help="job folder (job.json, artifacts/, data/)")
    ap.add_argument("--out", help="results JSON path (default: JOB/results.json)")
    ap.add_argument("--mode", choices=("auto", "cupy", "reference", "compile"), default="auto",
                    help="cupy: a CUDA GPU; reference: no GPU, CPU outputs from the build side; "
                         "compile: nvcc only, nothing runs; auto: cupy when a device is visible")
    ap.add_argument("--serve", metavar="HOST:PORT", help="serve jobs over TCP instead")
    ap.add_argument("--once", action="store_true", help="with --serve: answer one job, exit")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="stop starting candidates after this many seconds (the rest are "
                         "reported as not run); results are written either way")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.serve:
        host, _, port = a.serve.rpartition(":")

        def ready(p):
            print(f"serving on {host}:{p}", flush=True)

        serve(host or "127.0.0.1", int(port), a.mode, a.once, ready)
        return 0
    if not a.job:
        ap.error("give a job folder or --serve")
    log = None if a.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    try:
        res = run_job(a.job, a.mode, log, a.budget_s)
    except JobError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out) if a.out else Path(a.job) / "results.json"
    _write_json_atomic(out, res)
    n = len(res["results"])
    if res["mode"] == "compile":
        ok = sum(r["status"] == "compiled" for r in res["results"])
        print(f"{ok}/{n} compiled (nvcc); results in {out}")
    else:
        ok = sum(r["verified"] for r in res["results"])
        print(f"{ok}/{n} verified ({res['mode']}); results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
