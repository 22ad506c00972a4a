"""Token cost of LEIR against TVMScript and against Step-TP v1 (+ the signature it lacks).

Counts o200k_base tokens (the `bpe-openai` package ships the encoding; no network) for:
  * our canonical LEIR, self-contained (the signature is in the text);
  * the same program's TVMScript (``PrimFunc.script()`` of its lowering);
  * the v1 string plus its signature written as one sentence (v1 carries no signature, so a
    prompt must add it).
Over the v1 corpus (../shared/data) and, with --extracted, kernels extracted from small torch
modules through Relax. Prints per-kernel rows (with -v) and the medians and the two ratios the
foundation issue targets: median LEIR/TVMScript <= 0.20 and median LEIR/(v1+signature) <= 0.80.

    python benchmarks/token_efficiency.py [--corpus PATH] [--extracted] [-v]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import bpe_openai

from steptp.leir import format_program
from steptp.leir.canon import canonicalize
from steptp.leir.v1 import read_v1
from steptp.tir.lower import lower

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT.parent / "shared" / "data" / "steptp-v1-leir-corpus.jsonl"


def signature_sentence(row: dict) -> str:
    """The v1 signature as the one sentence a prompt would need to add."""
    dt = row.get("dtype", "float64")

    def part(kind: str) -> str:
        items = row.get(kind) or {}
        return ", ".join(f"{n} {dt}{list(s)}" for n, s in items.items())

    pieces = [f"{k}: {part(k)}" for k in ("inputs", "constants", "params", "outputs") if row.get(k)]
    return "Arguments in order — " + "; ".join(pieces) + "."


def count(enc, text: str) -> int:
    return len(enc.encode(text))


def corpus_rows(path: Path):
    with path.open() as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def measure(enc, program, v1_text: str | None = None, primfunc=None) -> dict:
    """Token counts of one kernel. ``primfunc`` is its original TIR where it has one (extracted
    kernels); otherwise the TVMScript is that of its lowering."""
    canon, _ = canonicalize(program)
    leir = format_program(canon)
    script = (primfunc if primfunc is not None else lower(program)).script()
    out = {"leir": count(enc, leir), "tvmscript": count(enc, script)}
    if v1_text is not None:
        out["v1_sig"] = count(enc, v1_text)
    return out


def extracted_programs():
    """Fused kernels of a few small torch modules, raised to LEIR (skipped if torch is absent)."""
    try:
        import torch
        from steptp.tir.raise_ import raise_primfunc
        from steptp.zoo.relax_import import fused_primfuncs
    except ImportError as e:  # pragma: no cover - optional extra
        print(f"(extracted kernels skipped: {e})", file=sys.stderr)
        return
    torch.manual_seed(0)
    mods = {
        "mlp": (torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)),
                (torch.randn(8, 64),)),
        "conv_bn_relu": (torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
                                             torch.nn.ReLU()).eval(), (torch.randn(1, 8, 16, 16),)),
        "layernorm_softmax": (torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.Softmax(-1)),
                              (torch.randn(4, 64),)),
    }
    for mname, (m, args) in mods.items():
        res = fused_primfuncs(m, args)
        funcs = res[0] if isinstance(res, tuple) else res
        for name, f in funcs:
            try:
                yield f"{mname}/{name}", raise_primfunc(f, name), f
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"  {mname}/{name}: not raised ({e})", file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--extracted", action="store_true", help="also count kernels extracted via Relax")
    ap.add_argument("-v", "--verbose", action="store_true", help="one row per kernel")
    a = ap.parse_args(argv)
    enc = bpe_openai.get_encoding("o200k_base")

    rows = []
    if a.corpus.exists():
        for r in corpus_rows(a.corpus):
            sig = {k: r.get(k) or {} for k in ("inputs", "constants", "params", "outputs")}
            try:
                prog = read_v1(r["leir_v1"], sig, name=r["workload"], bind_as="serial")
                m = measure(enc, prog, signature_sentence(r) + "\n" + r["leir_v1"])
            except Exception as e:  # noqa: BLE001 - a benchmark reports and goes on
                print(f"  v1/{r['workload']}: skipped ({type(e).__name__}: {e})", file=sys.stderr)
                continue
            rows.append(("v1/" + r["workload"], m))
    else:
        print(f"(v1 corpus not found at {a.corpus})", file=sys.stderr)
    if a.extracted:
        for name, prog, func in extracted_programs():
            rows.append((name, measure(enc, prog, primfunc=func)))

    if a.verbose:
        print(f"{'kernel':50s} {'LEIR':>6s} {'TVMS':>6s} {'v1+sig':>7s}")
        for name, m in rows:
            print(f"{name[:50]:50s} {m['leir']:6d} {m['tvmscript']:6d} {m.get('v1_sig', ''):>7}")

    r_script = [m["leir"] / m["tvmscript"] for _, m in rows]
    r_v1 = [m["leir"] / m["v1_sig"] for _, m in rows if "v1_sig" in m]
    print(f"kernels: {len(rows)} ({len(r_v1)} from the v1 corpus)")
    print(f"median tokens  LEIR {statistics.median(m['leir'] for _, m in rows):.0f}  "
          f"TVMScript {statistics.median(m['tvmscript'] for _, m in rows):.0f}"
          + (f"  v1+signature {statistics.median(m['v1_sig'] for _, m in rows if 'v1_sig' in m):.0f}"
             if r_v1 else ""))
    ok1 = statistics.median(r_script) <= 0.20
    print(f"median LEIR/TVMScript      = {statistics.median(r_script):.3f}  (target <= 0.20: "
          f"{'met' if ok1 else 'MISSED'})")
    if r_v1:
        ok2 = statistics.median(r_v1) <= 0.80
        print(f"median LEIR/(v1+signature) = {statistics.median(r_v1):.3f}  (target <= 0.80: "
              f"{'met' if ok2 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
