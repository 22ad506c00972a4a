"""The offline reference policies side by side: replay / random / search, judged by the
verifier and timer that built the data, on a release's test split (default: the release
``make run`` builds, ``releases/<name>-<version>`` from params.yaml).

    python benchmarks/eval_policies.py                      # default release, full test split
    python benchmarks/eval_policies.py --release releases/X --samples 4 --steps 6 --max-kernels 4
    python benchmarks/eval_policies.py --leir steptp/zoo/leir/examples/softmax.leir   # no release: random/search

Runs ``single`` (each SFT prompt of the split once), then ``multi`` with ``chain`` and ``mcts``
side by side at equal proposals (samples x steps per kernel), then ``mcts`` alone with
``--mcts-factor`` times that budget (a chain cannot spend more: it expands one state a depth). Prints, per run, the report's table
(parse / faithful / verified rates, step speedups, best-of-n, fast_p, final speedups and the ratio
to the dataset's best trajectory) and where the full report was written. Expect: replay 100%
verified and reproducing its recorded speedups; random below search; mcts at least chain.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    from steptp.eval.inputs import from_leir, from_release, select
    from steptp.eval.loop import EvalConfig
    from steptp.eval.report import markdown_table
    from steptp.eval.run import evaluate

    from steptp.params import load

    p = load(ROOT / "params.yaml")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, default=ROOT / "releases" / f"{p.name}-{p.version}")
    ap.add_argument("--leir", type=Path, nargs="*", default=[])
    ap.add_argument("--split", default="test")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--max-kernels", type=int, default=None, help="only the first N kernels (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--mcts-c", type=float, default=p.eval.mcts_c)
    ap.add_argument("--mcts-factor", type=float, default=2.0,
                    help="the last run: mcts alone with this many times the chain's proposals")
    ap.add_argument("--out", type=Path, default=ROOT / "eval" / "benchmark")
    a = ap.parse_args()
    if a.leir:
        inputs, policies = from_leir(a.leir), ["random", "search"]
    else:
        if not (a.release / "data" / "kernels.parquet").is_file():
            sys.exit(f"{a.release}: no release there (build one with `make run`, or pass --leir FILES)")
        inputs, policies = from_release(a.release, a.split), ["replay", "random", "search"]
    inputs = select(inputs, a.max_kernels)
    print(f"{inputs.source}: {len(inputs.roots)} kernels, {len(inputs.states)} single-step states")
    budget = a.samples * a.steps
    runs = {"single": [EvalConfig(mode="single", samples=a.samples)],
            "multi": [EvalConfig(mode=m, samples=a.samples, steps=a.steps, mcts_c=a.mcts_c, seed=a.seed)
                      for m in ("chain", "mcts")],
            # what mcts does with proposals a chain has no use for (it expands one state a depth)
            f"mcts-x{a.mcts_factor:g}": [EvalConfig(mode="mcts", samples=a.samples, steps=a.steps, mcts_c=a.mcts_c,
                                                    seed=a.seed, max_proposals=int(a.mcts_factor * budget))]}
    for mode, cfgs in runs.items():
        t0 = time.monotonic()
        s = evaluate(inputs, policies, a.out / mode, cfgs, seed=a.seed,
                     on_progress=lambda m: print("  " + m, flush=True))
        print(f"\n## {mode} ({time.monotonic() - t0:.0f} s; {a.out / mode}/report.md)\n")
        print(markdown_table(s))
        for name, ps in s["policies"].items():
            if "reproduced_rate" in ps:
                print(f"\n{name}: {100 * ps['reproduced_rate']:.0f}% of replayed steps reproduce the "
                      "recorded step speedup within spread")
        print()


if __name__ == "__main__":
    main()
