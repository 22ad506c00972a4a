"""Every release stage at 100x size: curate, export (parquet configs, chat files, the card with
its plots), the quality gates, the diff against a previous release and ``dvc add``, on a
synthetic release input, each stage timed and its peak memory measured.

The input is generated, not searched. The programs are real: each bundled example kernel and
each LEIR-native template (at its ``tiny`` and ``default`` sizes) gets a small search tree of
real rewrites (``steptp.strategies.candidates``, two levels) with the template's reasoning
(``steptp.cot.template``), computed once. Kernel *variants* of a base then differ in their name
and in one floating-point constant of the program (the same constant in every program of the
tree, so each variant is a different canonical program with the same rewrites), which makes
10,000 kernels out of 42 trees in seconds. Timings are synthetic: a log-normal baseline per
kernel and a speedup per row drawn around the base tree's own value, with a 2% spread; about 5%
of the rows fail verification. Rows carry what the search and CoT stages give them: each
program's canonical hash (the variant's canonical text is the base's with the constant
substituted, checked against a parse now and then) and reasoning, the failed rows beside measured
siblings included. Bases without a floating-point constant give variants equal to
their base up to renaming: curation rejects those as duplicates, as it would a real zoo's
repeats.

Each stage runs as its own process (the ``steptp`` CLI, as ``dvc repro`` runs it); its wall
time and peak RSS (``os.wait4``: the process and its children) are reported. The previous
release for the diff is the same input built with different timings and 5% of its kernels
left out, by the same stages (not timed). Finally the chat files are loaded with
``datasets.load_dataset`` on the release folder.

    python benchmarks/scale.py --kernels 10000 --steps-per-kernel 10 --work build/scale
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_FLOAT = re.compile(r"(?<![\w.])\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])")


def _h(*parts) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


# ---------------------------------------------------------------------------- the base trees
def _bases() -> list[tuple[str, str]]:
    """(name, LEIR text): the bundled examples and the LEIR-native templates at two sizes."""
    from steptp import examples
    from steptp.zoo.leir import builtin

    out = [(n, examples.text(n)) for n in examples.names()]
    for t in builtin():
        for size in ("tiny", "default"):
            out.append((f"{t.name}_{size}", t.render(size)))
    return out


def _tree(name: str, text: str, width: int = 7, deep: int = 2, fan: int = 4) -> list[dict]:
    """Rows of a two-level search tree of real rewrites: up to ``width`` children of the root
    (distinct strategies first), then up to ``fan`` children of each of the first ``deep``."""
    from steptp import strategies as S
    from steptp.leir import format_program, parse

    def children(src: str, n: int) -> list:
        cands = S.candidates(parse(src), seed=0, max_per_site=1)
        seen, first, rest = set(), [], []
        for c in cands:
            (rest if c.strategy in seen else first).append(c)
            seen.add(c.strategy)
        return (first + rest)[:n]

    def row(depth: int, before: str, c) -> dict:
        return dict(depth=depth, before=before, after=format_program(c.program), strategy=c.strategy,
                    family=S.get(c.strategy).family, exactness=c.exactness, site=c.site.to_json(),
                    params=dict(c.params))

    root = format_program(parse(text))
    rows = [row(0, root, c) for c in children(root, width)]
    for p in rows[:deep]:
        rows += [row(1, p["after"], c) for c in children(p["after"], fan)]
    return rows


def _template_cots(name: str, rows: list[dict]) -> list[tuple[dict, str]]:
    """The template reasoning of each row (computed once per base; variants rewrite it)."""
    from steptp.cot.facts import GENERIC
    from steptp.cot.template import TemplateWriter
    from steptp.format.cot_schema import answer_json, cot_record, render
    from steptp.records import StepRecord, Timing

    w = TemplateWriter(seed=0, hardware=GENERIC)
    t = Timing(median_s=1e-4, min_s=1e-4, spread=0.02, repeats=7, number=10)
    out = []
    for r in rows:
        s = StepRecord(trajectory_id="t", step_index=r["depth"], kernel_id="k", before_leir=r["before"],
                       after_leir=r["after"], strategy=r["strategy"], family=r["family"],
                       exactness=r["exactness"], site=r["site"], params=r["params"],
                       outcome="improved", verified=True, before=t, after=t, step_speedup=1.0,
                       cumulative_speedup=1.0, target="llvm", fingerprint="synthetic", policy="synthetic")
        try:
            cot = w.write(s)
            text = render(cot, answer_json(s.strategy, s.site, s.params, s.after_leir))
            out.append((cot_record(cot, hardware=GENERIC.to_dict()), text))
        except Exception as e:  # noqa: BLE001 - a row without reasoning is rejected as no_cot
            out.append(({}, ""))
            print(f"  {name}: no reasoning for {r['strategy']}: {str(e)[:100]}", file=sys.stderr)
    return out


def _variant(text: str, name: str, new_name: str, literal: str | None, value: str | None) -> str:
    text = re.sub(rf"\b{re.escape(name)}\b", new_name, text)
    if literal is not None:
        text = re.sub(rf"(?<![\w.]){re.escape(literal)}(?![\w.])", value, text)
    return text


def _base_trees(limit: int, cache: Path) -> list:
    """The base trees with their reasoning, computed once into ``cache`` (each release's input is
    generated in its own process, so that the stages do not inherit the generator's memory)."""
    import pickle

    from dataclasses import replace

    from steptp.leir import parse
    from steptp.leir.canon import canonical_text
    from steptp.records import TensorSpec

    if cache.is_file():
        return pickle.loads(cache.read_bytes())
    t0 = time.perf_counter()
    bases = []
    for name, text in _bases():
        rows = _tree(name, text)
        if not rows:
            continue
        rows = rows[:limit]
        cots = _template_cots(name, rows)
        kname = parse(text).name
        texts = [r["before"] for r in rows] + [r["after"] for r in rows] + [c[1] for c in cots]
        lits = [m.group(0) for m in _FLOAT.finditer(rows[0]["before"])]
        lit = next((l for l in lits if all(re.search(rf"(?<![\w.]){re.escape(l)}(?![\w.])", x)
                                           for x in texts[:2 * len(rows)])), None)
        prog = parse(rows[0]["before"])
        sig = ([TensorSpec(name=t.name, dtype=t.dtype, shape=list(t.shape), role="input") for t in prog.inputs]
               + [TensorSpec(name=t.name, dtype=t.dtype, shape=list(t.shape), role="output")
                  for t in prog.outputs])
        # the canonical text of each program (the search records its hash with the row); a
        # variant's is the same text with the constant substituted, checked below
        canon = {t: canonical_text(replace(parse(t), name="k"))
                 for r in rows for t in (r["before"], r["after"])}
        bases.append(dict(name=name, kname=kname, rows=rows, cots=cots, lit=lit, sig=sig, canon=canon))
    print(f"  {len(bases)} base trees ({sum(b['lit'] is not None for b in bases)} with a constant "
          f"to vary) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    cache.write_bytes(pickle.dumps(bases))
    return bases


# ---------------------------------------------------------------------------- the input
def generate(out: Path, n_kernels: int, steps_per_kernel: int, seed: int = 0, drop: float = 0.0,
             timing_seed: int = 0) -> dict:
    """Write ``out/{kernels,steps,trajectories}.parquet``; returns counts."""
    from steptp.records import (KernelRecord, Occurrence, StepRecord, Timing, TrajectoryRecord,
                                table, write_table)

    t0 = time.perf_counter()
    bases = _base_trees(steps_per_kernel + 4, out.parent / "base-trees.pkl")
    rng = random.Random(_h("scale", seed, timing_seed))
    kernels, steps, trajs = [], [], []
    for i in range(n_kernels):
        b = bases[i % len(bases)]
        v = i // len(bases)
        if drop and random.Random(_h("drop", seed, i)).random() < drop:
            continue
        new_name = f"{b['kname']}_v{v}"
        value = None
        if b["lit"] is not None:
            x = float(b["lit"]) * (1 + (v + 1) * 1e-5)
            value = f"{x:.10g}"
            if "." not in value and "e" not in value:
                value += ".0"
        sub = (lambda t, b=b, new_name=new_name, value=value:
               _variant(t, b["kname"], new_name, b["lit"], value))

        def chash(t: str, b=b, value=value) -> str:
            c = b["canon"][t]
            if b["lit"] is not None:
                c = re.sub(rf"(?<![\w.]){re.escape(b['lit'])}(?![\w.])", value, c)
            return hashlib.sha256(c.encode("utf-8")).hexdigest()

        if v == 0 or i % 997 == 0:     # the substituted canonical text is the variant's own
            from steptp.leir import parse as _parse
            from steptp.leir.canon import canonical_hash

            r0 = b["rows"][0]
            assert chash(r0["after"]) == canonical_hash(_parse(sub(r0["after"]))), b["name"]
        root = sub(b["rows"][0]["before"])
        kid = _h("kernel", root)[:16]
        base_s = 1e-4 * math.exp(rng.gauss(0.0, 1.0))
        kernels.append(KernelRecord(
            kernel_id=kid, name=new_name, leir=root, leir_hash=_h("kernel", root), tir_hash="",
            signature=b["sig"], occurrences=[Occurrence(workload=f"syn_{b['name']}_{v // 3}", suite="ops",
                                                        count=1, original_name=new_name)],
            weight=1, flops=1_000_000, bytes_moved=100_000, tvmscript="", target="llvm",
            raise_ok=True, search_status="searched", unscheduled_s=base_s))
        tid = _h("traj", kid)[:16]
        times = {root: base_s}
        path = []
        n = 0
        for r, (cot, cot_text) in zip(b["rows"], b["cots"]):
            if n >= steps_per_kernel:
                break
            n += 1
            before, after = sub(r["before"]), sub(r["after"])
            if before not in times:
                continue
            bt = times[before]
            mu = (int(_h("mu", b["name"], r["after"])[:8], 16) / 16 ** 8 - 0.4) * 0.8
            sp = math.exp(rng.gauss(mu, 0.15))
            ok = rng.random() > 0.05
            tb = Timing(median_s=bt, min_s=bt * 0.98, spread=0.02, repeats=7, number=10)
            common = dict(trajectory_id=tid, step_index=r["depth"], kernel_id=kid, before_leir=before,
                          after_leir=after, before_hash=chash(r["before"]), after_hash=chash(r["after"]),
                          strategy=r["strategy"], family=r["family"],
                          exactness=r["exactness"], site=r["site"], params=r["params"],
                          before=tb, target="llvm", fingerprint="synthetic", policy="synthetic")
            # the CoT stage explains the failed candidates beside measured ones too (the
            # rejected sides of preference pairs)
            cj = json.loads(sub(json.dumps(cot))) if cot else {}
            if not ok:
                steps.append(StepRecord(**common, outcome="failed_verify", verified=False,
                                        reason="synthetic: max error above tolerance", cot=cj,
                                        cot_text=sub(cot_text), cot_source="template"))
                continue
            at = bt / sp
            times[after] = at
            ta = Timing(median_s=at, min_s=at * 0.98, spread=0.02, repeats=7, number=10)
            steps.append(StepRecord(**common, outcome="improved" if sp > 1 else "not_improved",
                                    verified=True, max_abs_err=0.0, max_rel_err=0.0, after=ta,
                                    step_speedup=sp, cumulative_speedup=base_s / at, cot=cj,
                                    cot_text=sub(cot_text), cot_source="template"))
            if r["depth"] == 0 and (not path or at < times[path[-1]]):
                path = [after]
        best = min(times.values())
        trajs.append(TrajectoryRecord(trajectory_id=tid, kernel_id=kid, policy="synthetic", seed=seed,
                                      n_steps=len(path), strategies=[], baseline_s=base_s, best_s=best,
                                      speedup=base_s / best, final_leir=root, target="llvm",
                                      fingerprint="synthetic"))
    out.mkdir(parents=True, exist_ok=True)
    write_table(table(kernels, KernelRecord), out / "kernels.parquet")
    write_table(table(steps, StepRecord), out / "steps.parquet")
    write_table(table(trajs, TrajectoryRecord), out / "trajectories.parquet")
    return {"kernels": len(kernels), "steps": len(steps), "seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------------------- the stages
def _run(label: str, cmd: list[str], cwd: Path, results: list, timed: bool = True) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - t0
    tail = out.decode(errors="replace").strip().splitlines()[-3:]
    if p.returncode != 0:
        print(out.decode(errors="replace")[-4000:], file=sys.stderr)
        raise SystemExit(f"{label}: exit {p.returncode}")
    if timed:
        results.append((label, dt, ru.ru_maxrss / 1024))
    print(f"  {label}: {dt:.1f} s, {ru.ru_maxrss / 1024:.0f} MiB; " + " | ".join(tail)[:300], file=sys.stderr)


def _stages(inp: Path, work: Path, params: Path, rid: str, results: list, timed: bool) -> Path:
    cli = [sys.executable, "-m", "steptp.cli"]
    _run("curate", cli + ["curate", "--kernels", str(inp / "kernels.parquet"), "--steps",
                          str(inp / "steps.parquet"), "--trajectories", str(inp / "trajectories.parquet"),
                          "--params", str(params), "--out", str(work / f"{rid}-curated")], ROOT, results, timed)
    _run("export", cli + ["export", str(work / f"{rid}-curated"), "--params", str(params),
                          "--out", str(work / f"{rid}-staging")], ROOT, results, timed)
    dest = work / "releases" / rid
    _run("validate + publish", cli + ["validate", str(work / f"{rid}-staging"), "--params", str(params),
                                      "--publish", str(dest)], ROOT, results, timed)
    return dest


def _params(work: Path, rid: str) -> Path:
    import yaml

    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    p["name"], p["version"] = "steptp-scale", rid.split("-")[-1]
    path = work / f"params-{rid}.yaml"
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    return path


def _generate(label: str, out: Path, kernels: int, spk: int, drop: float, timing_seed: int) -> dict:
    """``generate`` in a child process (its memory is not the stages')."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
            "import benchmarks.scale as B; print(json.dumps(B.generate(Path(sys.argv[2]), "
            "int(sys.argv[3]), int(sys.argv[4]), drop=float(sys.argv[5]), timing_seed=int(sys.argv[6]))))")
    r = subprocess.run([sys.executable, "-c", code, str(ROOT), str(out), str(kernels), str(spk),
                        str(drop), str(timing_seed)], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    sys.stderr.write(r.stderr[-2000:])
    if r.returncode != 0:
        raise SystemExit(f"{label}: generation failed")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=10_000)
    ap.add_argument("--steps-per-kernel", type=int, default=10)
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "scale")
    ap.add_argument("--reuse-trees", action="store_true",
                    help="keep WORK/base-trees.pkl from an earlier run of the same code")
    ap.add_argument("--no-previous", action="store_true", help="skip the previous release and the diff")
    ap.add_argument("--max-seconds", type=float, default=900.0)
    ap.add_argument("--max-mib", type=float, default=6 * 1024.0)
    a = ap.parse_args()
    work = a.work.resolve()
    trees = work / "base-trees.pkl"
    kept = trees.read_bytes() if a.reuse_trees and trees.is_file() else None
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    if kept is not None:
        trees.write_bytes(kept)
    res: list = []

    prev = None
    if not a.no_previous:
        print("previous release (not timed):", file=sys.stderr)
        _generate("previous", work / "input-prev", a.kernels, a.steps_per_kernel, 0.05, 1)
        prev = _stages(work / "input-prev", work, _params(work, "steptp-scale-0.9.0"),
                       "steptp-scale-0.9.0", res, timed=False)

    print("current release:", file=sys.stderr)
    t0 = time.perf_counter()
    g = _generate("current", work / "input", a.kernels, a.steps_per_kernel, 0.0, 0)
    print(f"  input: {g['kernels']} kernels, {g['steps']} steps, {g['seconds']:.1f} s "
          f"(generation, not a stage)", file=sys.stderr)
    rid = "steptp-scale-1.0.0"
    dest = _stages(work / "input", work, _params(work, rid), rid, res, timed=True)
    if prev is not None:
        code = ("import sys, json; from steptp.export.diff import write_diff; "
                "d = write_diff(sys.argv[1], sys.argv[2]); print(json.dumps({k: d[k] for k in list(d)[:4]})[:300])")
        _run("diff", [sys.executable, "-c", code, str(prev), str(dest)], ROOT, res)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    dvc = str(Path(sys.executable).with_name("dvc"))
    subprocess.run([dvc, "init", "-q"], cwd=work, check=True)
    _run("dvc add", [dvc, "add", "-q", f"releases/{rid}"], work, res)
    # the release folder as the hub reads it (its default config, the SFT rows), and the chat
    # files themselves
    code = ("import os, sys, datasets; r = sys.argv[1]; d = datasets.load_dataset(r); "
            "f = lambda pre: {s: p for s in ('train', 'validation', 'test') "
            "if os.path.getsize(p := f'{r}/chat/{pre}{s}.jsonl')}; "
            "c = datasets.load_dataset('json', data_files=f('')); "
            "p = datasets.load_dataset('json', data_files=f('pairs-')); "
            "print('sft config', {k: len(v) for k, v in d.items()}, 'chat', {k: len(v) for k, v in c.items()}, "
            "'pairs', {k: len(v) for k, v in p.items()})")
    _run("load_dataset", [sys.executable, "-c", code, str(dest)], ROOT, res)
    total = time.perf_counter() - t0

    stats = json.loads((dest / "stats.json").read_text()) if (dest / "stats.json").exists() else {}
    print(f"\n{g['kernels']} kernels, {g['steps']} steps -> "
          f"{(stats.get('counts') or {}).get('steps', '?')} SFT examples, "
          f"{(stats.get('counts') or {}).get('pairs', '?')} pairs\n")
    print(f"| stage | seconds | peak MiB |\n| --- | ---: | ---: |")
    for label, dt, mib in res:
        print(f"| {label} | {dt:.1f} | {mib:.0f} |")
    stage_s = sum(dt for _, dt, _ in res)
    peak = max(m for _, _, m in res)
    print(f"| all stages | {stage_s:.1f} | {peak:.0f} |")
    print(f"\nwall time including generation: {total:.1f} s")
    ok = stage_s <= a.max_seconds and peak <= a.max_mib
    print(("PASS" if ok else "FAIL") + f": {stage_s:.0f} s <= {a.max_seconds:.0f} s and "
          f"{peak:.0f} MiB <= {a.max_mib:.0f} MiB")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
