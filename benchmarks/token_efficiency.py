"""Token cost of LEIR against TVMScript and against Step-TP v1 (+ the signature it lacks).

Counts o200k_base tokens (the `bpe-openai` package ships the encoding; no network) for:
  * our canonical LEIR, self-contained (the signature is in the text);
  * the same program's TVMScript (``PrimFunc.script()`` of its lowering);
  * the v1 string plus its signature written as one sentence (v1 carries no signature, so a
    prompt must add it).
Over the v1 corpus (../shared/data) and, with --extracted, the kernels extracted from the model
zoo (default: the tiny zoo) through Relax, whose TVMScript is the fused PrimFunc's own. Prints per-kernel rows (with -v) and the medians and the two ratios the
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


def measure(enc, program, v1_text: str | None = None) -> dict:
    """Token counts of one v1 kernel: canonical LEIR, the TVMScript of its lowering, v1+sig."""
    canon, _ = canonicalize(program)
    leir = format_program(canon)
    script = lower(program).script()
    out = {"leir": count(enc, leir), "tvmscript": count(enc, script)}
    if v1_text is not None:
        out["v1_sig"] = count(enc, v1_text)
    return out


def extracted_rows(enc, kernels: Path | None, zoo: str) -> list[tuple[str, dict]]:
    """Kernels extracted from the model zoo: canonical LEIR against the TVMScript of the fused
    PrimFunc Relax produced (its reference), both as stored in the kernels table."""
    import polars as pl

    if kernels is not None:
        df = pl.read_parquet(kernels)
        recs = [(r["name"], r["leir"], r["tvmscript"], r["raise_ok"]) for r in df.iter_rows(named=True)]
    else:
        from steptp.zoo.extract import extract, refs_for_zoo

        res = extract(refs_for_zoo(zoo), jobs=2, check=False)
        recs = [(r.name, r.leir, r.tvmscript, bool(r.leir)) for r in res.records]
    return [(f"zoo/{name}", {"leir": count(enc, leir), "tvmscript": count(enc, script)})
            for name, leir, script, ok in recs if ok and leir]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--extracted", action="store_true",
                    help="also count kernels extracted from the model zoo through Relax")
    ap.add_argument("--kernels", type=Path, help="a kernels table (steptp extract) to use for --extracted")
    ap.add_argument("--zoo", default="tiny", help="zoo to extract for --extracted without --kernels")
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
        rows.extend(extracted_rows(enc, a.kernels, a.zoo))

    if a.verbose:
        print(f"{'kernel':50s} {'LEIR':>6s} {'TVMS':>6s} {'v1+sig':>7s}")
        for name, m in rows:
            print(f"{name[:50]:50s} {m['leir']:6d} {m['tvmscript']:6d} {m.get('v1_sig', ''):>7}")

    r_script = [m["leir"] / m["tvmscript"] for _, m in rows]
    r_v1 = [m["leir"] / m["v1_sig"] for _, m in rows if "v1_sig" in m]
    zoo = [m["leir"] / m["tvmscript"] for n, m in rows if n.startswith("zoo/")]
    print(f"kernels: {len(rows)} ({len(r_v1)} from the v1 corpus, {len(zoo)} from the zoo)")
    if zoo:
        print(f"median LEIR/TVMScript over the zoo kernels alone = {statistics.median(zoo):.3f}")
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
