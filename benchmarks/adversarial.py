"""The verifier against deliberately wrong candidates: one line per case of
``steptp.measure.adversarial.CASES`` (the exploit, rejected or not, the verifier's reason).

    .venv/bin/python benchmarks/adversarial.py [--json out.json]

Target: 100% rejected, each with a reason that names the output and the first wrong element
(or the race, the input written, the buffer read). Exits non-zero when a case passes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="write the rows as JSON")
    args = ap.parse_args()

    from steptp.measure.adversarial import run_suite

    t0 = time.perf_counter()
    rows = run_suite()
    for r in rows:
        print(f"{'rejected' if r.rejected else 'PASSED  '}  {r.name:26s} {r.what}\n"
              f"          {r.reason[:300]}")
    n_rej = sum(r.rejected for r in rows)
    print(f"# {n_rej} of {len(rows)} wrong candidates rejected "
          f"({100.0 * n_rej / max(len(rows), 1):.0f}%) in {time.perf_counter() - t0:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.__dict__ for r in rows], f, indent=1)
    return 0 if n_rej == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
