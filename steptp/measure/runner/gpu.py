"""Measuring on a GPU machine without TVM: build jobs here, run them with the thin runner there.

    job = GpuJob(Target.cuda(), seeds=(0, 1))
    job.add_task("softmax", reference_leir, torch={"op": "softmax"})
    job.add_candidate("softmax", bound_leir, "exact", role="baseline")
    job.add_candidate("softmax", candidate_leir, "exact")
    job.write(folder)                                 # job.json + artifacts/ + data/
    results = DirectoryBackend(outbox).run(folder)    # or TcpBackend("127.0.0.1", port).run(folder)
    record(results, job, cache)                       # verdicts and timings into the cache

A job folder holds everything ``steptp/gpu_runner/runner.py`` needs: each task's seeded inputs and
reference outputs (the reference LEIR built and run with TVM on this CPU), each candidate's CUDA
artifact (``steptp.tir.cuda_artifact``) and its tolerance table copied from
``steptp.measure.verify.TOLERANCES`` (the runner keeps no copy), plus the candidate's own outputs
on this CPU (its thread loops run serially) for the runner's reference mode, which checks the
whole file protocol without a GPU.

Backends: ``DirectoryBackend`` copies the job into ``<outbox>/<job id>/`` and waits for the
runner's ``results.json`` there (any job system, or a remote machine reached by copying files);
``TcpBackend`` sends the folder as a tar to ``runner.py --serve`` and reads the results back.
``record`` puts the results into the measurement cache keyed by the runner's GPU fingerprint
(``gpu:<id>``), beside the CPU timings.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import socket
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...gpu_runner.runner import PROTOCOL, recv_frame, send_frame
from ...leir import ast as A
from ...leir import parse
from ...leir.canon import canonical_text
from ...leir.races import thread_races
from ...tir import build as B
from ...tir.cuda_artifact import CudaLimits, build_artifact
from ...tir.target import Target
from ..cache import Cache, program_hash
from ..error_bound import error_bounds
from ..verify import ERROR_BOUND_FACTOR, RULE_VERSION, TOLERANCES, random_inputs

#: What the runner's timing protocol defaults to (warm-up calls, CUDA-event repeats).
DEFAULT_TIMING = {"warmup": 3, "repeats": 20}


def cpu_twin(program: A.Program) -> A.Program:
    """``program`` with every thread-bound loop serial: what it computes, runnable on a CPU,
    with shared/local intermediates made global (a CPU has neither)."""
    def fix(stmts):
        out = []
        for s in stmts:
            if isinstance(s, A.Loop):
                kind = "serial" if s.kind in A.THREAD_KINDS else s.kind
                out.append(replace(s, kind=kind, body=tuple(fix(s.body))))
            elif isinstance(s, A.If):
                out.append(replace(s, body=tuple(fix(s.body))))
            else:
                out.append(s)
        return out

    inter = tuple(replace(t, scope="global") for t in program.intermediates)
    return replace(program, body=tuple(fix(program.body)), intermediates=inter)


def tolerance_table(exactness: str) -> dict[str, list[float]]:
    """The CPU verifier's (atol, rtol) per TVM dtype name for ``exactness``."""
    if exactness not in TOLERANCES:
        raise ValueError(f"unknown exactness {exactness!r}; use one of {', '.join(TOLERANCES)}")
    return {A.DTYPES[k]: list(v) for k, v in sorted(TOLERANCES[exactness].items())}


def _save(root: Path, rel: str, x: np.ndarray) -> str:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    np.save(p, np.ascontiguousarray(x), allow_pickle=False)
    return rel


class GpuJob:
    """A batch of tasks (reference kernels) and CUDA candidates for one runner call."""

    def __init__(self, target: Target | None = None, seeds: Sequence[int] = (0, 1),
                 limits: CudaLimits | None = None, timing: dict | None = None,
                 cpu_outputs: bool = True):
        self.target = target or Target.cuda()
        self.seeds = tuple(int(s) for s in seeds)
        self.limits = limits or CudaLimits()
        self.timing = {**DEFAULT_TIMING, **(timing or {})}
        self.cpu_outputs = cpu_outputs  # for the runner's reference mode; a GPU run needs none
        self._cpu = Target.host_cpu(num_cores=1)
        self.tasks: dict[str, dict[str, Any]] = {}
        self._data: dict[str, np.ndarray] = {}
        self._inputs: dict[str, dict[int, list[np.ndarray]]] = {}
        self.candidates: list[dict[str, Any]] = []
        self.artifacts: dict[str, Any] = {}
        self.failures: list[dict[str, str]] = []

    # ------------------------------------------------------------------ building
    def add_task(self, task_id: str, reference: str | A.Program, torch: dict | None = None
                 ) -> None:
        """A kernel to answer: its reference program, run here on every seed."""
        prog = parse(reference) if isinstance(reference, str) else reference
        built = B.build(prog, self._cpu)
        seeds, per_seed = [], {}
        for s in self.seeds:
            ins = random_inputs(prog, s)
            outs = B.run(built, ins)
            per_seed[s] = ins
            in_files = {p.name: self._keep(f"data/{task_id}/{s}/in_{p.name}.npy", x)
                        for p, x in zip(built.inputs, ins)}
            out_files = {p.name: self._keep(f"data/{task_id}/{s}/ref_{p.name}.npy", x)
                         for p, x in zip(built.outputs, outs)}
            seeds.append({"seed": s, "inputs": in_files, "outputs": out_files,
                          "bounds": self._bounds(task_id, s, prog, ins)})
        buffers = [{"name": p.name, "shape": list(p.shape), "dtype": p.dtype,
                    "role": "output" if p.is_output else "input"} for p in built.params]
        self.tasks[task_id] = {"kernel": prog.name, "leir": canonical_text(prog),
                               "buffers": buffers, "seeds": seeds,
                               **({"torch": torch} if torch else {})}
        self._inputs[task_id] = per_seed

    def _bounds(self, task_id: str, seed: int, prog: A.Program, ins) -> dict[str, dict]:
        """The reference's per-element rounding-error bound (``error_bound``), in the same
        order (``exact``) and in any order (the other classes): the runner's slack is
        ``2 * bound`` on top of the fixed tolerances, as in the CPU verifier."""
        out: dict[str, dict] = {}
        for key, reorders in (("exact", False), ("reorders", True)):
            bs = error_bounds(prog, ins, reorders, self._cpu)
            if bs is None:
                continue
            out[key] = {t.name: self._keep(f"data/{task_id}/{seed}/bound_{key}_{t.name}.npy",
                                           b.astype(np.float32))
                        for t, b in zip(prog.outputs, bs) if b is not None}
        return out

    def _keep(self, rel: str, x: np.ndarray) -> str:
        self._data[rel] = x
        return rel

    def add_candidate(self, task_id: str, program: str | A.Program, exactness: str = "exact",
                      role: str = "candidate", label: str | None = None) -> str | None:
        """Build ``program`` to a CUDA artifact for ``task_id``; its id, or None (the reason is
        in ``failures``) when it does not build or breaks a limit."""
        if task_id not in self.tasks:
            raise KeyError(f"no task {task_id!r}; add_task first")
        prog = parse(program) if isinstance(program, str) else program
        races = thread_races(prog)
        if races:
            # a race may pass a run or two on the GPU; it is refused here, never timed
            self.failures.append({"task": task_id, "label": label or "",
                                  "reason": f"race: {races[0]}"})
            return None
        try:
            art = build_artifact(prog, self.target, self.limits)
            twin = B.build(cpu_twin(prog), self._cpu) if self.cpu_outputs else None
        except Exception as e:  # noqa: BLE001 - a candidate that does not build is reported
            self.failures.append({"task": task_id, "label": label or "", "reason":
                                  f"{type(e).__name__}: {str(e)[:500]}"})
            return None
        self.artifacts[art.id] = art
        cpu_out = {}
        for s, ins in (self._inputs[task_id].items() if twin is not None else ()):
            outs = B.run(twin, ins)
            cpu_out[str(s)] = {p.name: self._keep(f"data/{task_id}/{s}/cpu_{art.id}_{p.name}.npy",
                                                  x) for p, x in zip(twin.outputs, outs)}
        self.candidates.append({"artifact": art.id, "task": task_id, "role": role,
                                "label": label or role, "exactness": exactness,
                                "tolerances": tolerance_table(exactness),
                                "program_hash": program_hash(prog),
                                **({"cpu_outputs": cpu_out} if twin is not None else {})})
        return art.id

    # ------------------------------------------------------------------ writing
    @property
    def id(self) -> str:
        blob = json.dumps({"tasks": {k: v["leir"] for k, v in self.tasks.items()},
                           "cands": [c["artifact"] + c["task"] for c in self.candidates],
                           "seeds": self.seeds, "timing": self.timing}, sort_keys=True)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def manifest(self) -> dict[str, Any]:
        return {"protocol": PROTOCOL, "id": self.id, "target": self.target.to_dict(),
                "rule_version": RULE_VERSION, "error_bound_factor": ERROR_BOUND_FACTOR,
                "timing": self.timing, "tasks": self.tasks,
                "candidates": self.candidates}

    def write(self, directory: str | os.PathLike) -> Path:
        """Write the job folder (a fresh temp folder renamed into place); return its path."""
        dest = Path(directory)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
        try:
            for art in self.artifacts.values():
                art.write(tmp / "artifacts")
            for rel, x in self._data.items():
                _save(tmp, rel, x)
            with open(tmp / "job.json", "w", encoding="utf-8") as f:
                json.dump(self.manifest(), f, sort_keys=True, indent=1)
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return dest


# ---------------------------------------------------------------------------- backends
class DirectoryBackend:
    """Ship a job by copying it into ``outbox/<job id>/``; a runner writes ``results.json``
    there (``python runner.py outbox/<id> --out outbox/<id>/results.json``)."""

    def __init__(self, outbox: str | os.PathLike, timeout_s: float = 600.0, poll_s: float = 0.2):
        self.outbox = Path(outbox)
        self.timeout_s, self.poll_s = timeout_s, poll_s

    def submit(self, job_dir: str | os.PathLike) -> Path:
        job = json.loads((Path(job_dir) / "job.json").read_text())
        dest = self.outbox / job["id"]
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(job_dir, dest)
        return dest

    def run(self, job_dir: str | os.PathLike) -> dict:
        """Submit, then wait for the runner's results."""
        return self.collect(self.submit(job_dir))

    def collect(self, shipped: Path) -> dict:
        path = Path(shipped) / "results.json"
        deadline = time.monotonic() + self.timeout_s
        while not path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {path} after {self.timeout_s:g} s (is a runner watching "
                                   f"{self.outbox}?)")
            time.sleep(self.poll_s)
        return _checked(json.loads(path.read_text()), str(path))


class TcpBackend:
    """Send a job folder to ``runner.py --serve HOST:PORT`` and read its results back."""

    def __init__(self, host: str, port: int, timeout_s: float = 600.0):
        self.host, self.port, self.timeout_s = host, int(port), timeout_s

    def run(self, job_dir: str | os.PathLike) -> dict:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for p in sorted(Path(job_dir).rglob("*")):
                if p.is_file() and p.name != "results.json":
                    tf.add(p, arcname=str(p.relative_to(job_dir)), recursive=False)
        data = buf.getvalue()
        with socket.create_connection((self.host, self.port), timeout=self.timeout_s) as s:
            send_frame(s, data)
            res = json.loads(recv_frame(s))
        return _checked(res, f"runner at {self.host}:{self.port}")


def _checked(res: dict, where: str) -> dict:
    if "error" in res:
        raise RuntimeError(f"{where}: the runner failed: {res['error']}")
    if res.get("protocol") != PROTOCOL:
        raise RuntimeError(f"{where}: protocol {res.get('protocol')!r}, expected {PROTOCOL}")
    return res


# ---------------------------------------------------------------------------- into the cache
def fingerprint_id(results: dict) -> str:
    return "gpu:" + str(results["fingerprint"]["id"])


def timing_config_hash(timing: dict) -> str:
    blob = json.dumps({"runner": PROTOCOL, **timing}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def verify_config_hash(exactness: str, seeds: Sequence[int]) -> str:
    blob = json.dumps({"exactness": exactness, "seeds": list(seeds), "runner": PROTOCOL,
                       "tolerances": TOLERANCES.get(exactness), "rule": RULE_VERSION},
                      sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def record(results: dict, manifest: dict, cache: Cache) -> dict[str, int]:
    """Put the runner's verdicts and timings into ``cache`` keyed by its GPU fingerprint;
    returns how many of each were stored."""
    fp = fingerprint_id(results)
    target_key = Target.from_dict(manifest["target"]).key
    seeds = sorted({s["seed"] for t in manifest["tasks"].values() for s in t["seeds"]})
    cands = {(c["artifact"], c["task"]): c for c in manifest["candidates"]}
    n_v = n_t = 0
    chash = timing_config_hash(results.get("timing", {}))
    for r in results["results"]:
        c = cands.get((r["artifact"], r["task"]))
        if c is None or r["status"] == "error":
            continue  # an error may be transient: not cached
        ref_hash = program_hash(manifest["tasks"][r["task"]]["leir"])
        cache.put_verification(ref_hash, c["program_hash"], target_key, fp,
                               verify_config_hash(c["exactness"], seeds),
                               {"passed": r["verified"], "exactness": c["exactness"],
                                "max_abs_err": r.get("max_abs_err", 0.0),
                                "reason": r.get("reason"), "target": target_key})
        n_v += 1
        t = r.get("timing")
        if t:
            cache.put_timing(c["program_hash"], target_key, fp, chash,
                             {k: t[k] for k in ("median_s", "min_s", "spread", "repeats",
                                                "number")})
            n_t += 1
    return {"verifications": n_v, "timings": n_t}


def measure(job: GpuJob, backend, cache: Cache | None, workdir: str | os.PathLike
            ) -> tuple[dict, dict[str, int]]:
    """Write ``job`` under ``workdir``, run it through ``backend`` (``DirectoryBackend`` or
    ``TcpBackend``), record the results in ``cache``; return (results, stored counts)."""
    folder = job.write(Path(workdir) / f"job-{job.id}")
    results = backend.run(folder)
    if results.get("job") != job.id:
        raise RuntimeError(f"the runner answered job {results.get('job')!r}, not {job.id!r}")
    stored = record(results, job.manifest(), cache) if cache is not None else {}
    return results, stored


__all__ = ["measure", "DirectoryBackend", "GpuJob", "TcpBackend", "cpu_twin", "fingerprint_id", "record",
           "tolerance_table", "timing_config_hash", "verify_config_hash"]
