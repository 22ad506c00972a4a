"""The report of a run, ``eval/<run>/``:

* ``proposals.parquet`` — one row per proposal (``steptp.eval.loop.ROW_COLUMNS``);
* ``kernels.parquet`` — multi-step modes: one row per (policy, kernel) with the final speedup over
  the unscheduled kernel and its ratio to the dataset's best trajectory for that kernel;
* ``summary.json`` — per policy: outcome counts; reply / parse / signature / legal / faithful /
  verified / faster rates; step-speedup distribution; best-of-n; ``fast_p`` for p in ``FAST_P``
  (share of states — single — or kernels — multi — strictly above p x, counting only a step
  (single) or a final state (multi) that the significance rule calls faster than where it
  started) and ``fast_p_raw`` (the same without the rule); replay's reproduction rate;
* ``report.md`` — the same side by side, with the plots under ``plots/``; a run comparing
  multi-step searches (chain, beam, mcts at equal proposals) reports each ``policy/mode``.

Every file is written atomically (temp file, rename).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import polars as pl

from ..records import write_table, write_text_atomic
from .judge import OUTCOMES

FAST_P = (1.0, 1.5, 2.0, 5.0)
ALL_OUTCOMES = OUTCOMES
_COLORS = {"no_reply": "#424242", "unparsable": "#9e9e9e", "bad_signature": "#ff9800",
           "illegal": "#9c27b0", "failed_verification": "#e53935", "unfaithful": "#fdd835",
           "timeout": "#795548", "verified": "#43a047"}


def _geomean(xs: Sequence[float]) -> Optional[float]:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _median(xs: Sequence[float]) -> Optional[float]:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else 0.5 * (xs[m - 1] + xs[m])


def _rate(num: int, den: int) -> Optional[float]:
    return num / den if den else None


def _fast_p(speedups) -> dict[str, Optional[float]]:
    xs = list(speedups)
    return {str(p): _rate(sum(1 for x in xs if x is not None and x > p), len(xs)) for p in FAST_P}


def policy_summary(rows: Sequence[Mapping[str, Any]], kernels: Sequence[Mapping[str, Any]] = ()
                   ) -> dict[str, Any]:
    n = len(rows)
    oc = Counter(r["outcome"] for r in rows)
    replied = [r for r in rows if r["outcome"] != "no_reply"]
    parsed = [r for r in replied if r["outcome"] != "unparsable"]
    sig_ok = [r for r in parsed if r["outcome"] != "bad_signature"]
    legal = [r for r in sig_ok if r["legal"]]
    ver = [r for r in rows if r["outcome"] == "verified"]
    steps = [r["step_speedup"] for r in ver if r["step_speedup"]]
    best: dict[str, float] = {}       # per state: its best verified step speedup
    best_sig: dict[str, float] = {}   # ... among the steps the significance rule calls faster
    for r in rows:
        key = f"{r['kernel_id']}|{r['state_id']}|{r['depth']}"
        best.setdefault(key, 0.0)
        best_sig.setdefault(key, 0.0)
        if r["outcome"] == "verified" and r["step_speedup"]:
            best[key] = max(best[key], r["step_speedup"])
            if r["faster"]:
                best_sig[key] = max(best_sig[key], r["step_speedup"])
    out: dict[str, Any] = {
        "proposals": n, "states": len(best), "outcomes": {o: oc.get(o, 0) for o in ALL_OUTCOMES},
        "reply_rate": _rate(len(replied), n),
        "parse_rate": _rate(len(parsed), n), "signature_rate": _rate(len(sig_ok), n),
        "legal_rate": _rate(len(legal), n),
        "faithful_rate": _rate(sum(1 for r in legal if r["faithful"]), n),
        "verified_rate": _rate(len(ver), n),
        "faster_rate": _rate(sum(1 for r in ver if r["faster"]), n),
        "step_speedup": {"geomean": _geomean(steps), "median": _median(steps),
                         "min": min(steps) if steps else None, "max": max(steps) if steps else None},
        "best_of_n": {"geomean": _geomean([b for b in best.values() if b > 0]),
                      "fast_p": _fast_p(best_sig.values()), "fast_p_raw": _fast_p(best.values())},
        "tokens": sum(int(r["tokens"] or 0) for r in rows),
    }
    rec = [r["within_spread"] for r in rows if r.get("within_spread") is not None]
    if rec:
        out["reproduced_rate"] = _rate(sum(1 for x in rec if x), len(rec))
    if kernels:
        finals = [k["final_speedup"] for k in kernels]
        ratios = [k["ratio_to_dataset_best"] for k in kernels if k["ratio_to_dataset_best"]]
        # a final state the rule cannot tell from the unscheduled kernel counts as 1x
        sig = [k["final_speedup"] if k.get("final_faster") else 1.0 for k in kernels]
        out["multi"] = {"kernels": len(kernels), "final_speedup_geomean": _geomean(finals),
                        "fast_p": _fast_p(sig), "fast_p_raw": _fast_p(finals),
                        "ratio_to_dataset_best_geomean": _geomean(ratios),
                        "mean_steps": sum(k["steps"] for k in kernels) / len(kernels)}
    return out


def labeller(rows: Sequence[Mapping[str, Any]], kernels: Sequence[Mapping[str, Any]] = ()
             ) -> Callable[[Mapping[str, Any]], str]:
    """What a row is reported under: its policy, or ``policy/mode`` in a run that compares
    multi-step searches (``--multi chain,mcts``), so each pair stands side by side."""
    modes = {r["mode"] for r in rows} | {k["mode"] for k in kernels}
    if len(modes) > 1:
        return lambda r: f"{r['policy']}/{r['mode']}"
    return lambda r: r["policy"]


def summarize(rows: Sequence[Mapping[str, Any]], kernels: Sequence[Mapping[str, Any]] = (),
              meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    lab = labeller(rows, kernels)
    policies = list(dict.fromkeys([lab(r) for r in rows] + [lab(k) for k in kernels]))
    return {**dict(meta or {}),
            "policies": {p: policy_summary([r for r in rows if lab(r) == p],
                                           [k for k in kernels if lab(k) == p]) for p in policies}}


def _f(x: Any, spec: str = ".2f") -> str:
    if x is None:
        return "–"
    return format(x, spec)


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def table_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """The side-by-side table (header first): one row per policy."""
    head = ["policy", "proposals", "reply", "parse", "signature", "legal", "faithful", "verified",
            "faster", "step x (geomean)", "best-of-n x"] + [f"fast_{p:g}" for p in FAST_P] \
        + [f"fast_{p:g}_raw" for p in FAST_P]
    multi = any("multi" in s for s in summary["policies"].values())
    if multi:
        head += ["final x (geomean)", "ratio to dataset best"]
    out = [head]
    for name, s in summary["policies"].items():
        fast = s.get("multi") or s["best_of_n"]
        row = [name, str(s["proposals"]), _pct(s["reply_rate"]), _pct(s["parse_rate"]),
               _pct(s["signature_rate"]), _pct(s["legal_rate"]), _pct(s["faithful_rate"]),
               _pct(s["verified_rate"]), _pct(s["faster_rate"]), _f(s["step_speedup"]["geomean"]),
               _f(s["best_of_n"]["geomean"])]
        row += [_pct(fast["fast_p"][str(p)]) for p in FAST_P]
        row += [_pct(fast["fast_p_raw"][str(p)]) for p in FAST_P]
        if multi:
            m = s.get("multi") or {}
            row += [_f(m.get("final_speedup_geomean")), _f(m.get("ratio_to_dataset_best_geomean"))]
        out.append(row)
    return out


def markdown_table(summary: Mapping[str, Any]) -> str:
    rows = table_rows(summary)
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _plots(out: Path, rows: Sequence[Mapping[str, Any]], kernels: Sequence[Mapping[str, Any]]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pdir = out / "plots"
    pdir.mkdir(parents=True, exist_ok=True)
    lab = labeller(rows, kernels)
    policies = list(dict.fromkeys(lab(r) for r in rows))
    made = []

    def save(fig, name):
        tmp = pdir / f".{name}.tmp.png"
        fig.savefig(tmp, dpi=90)
        plt.close(fig)
        tmp.replace(pdir / name)
        made.append(f"plots/{name}")

    def tilt(ax):  # policy/mode labels are long: slanted, right-aligned under their bars
        for t in ax.get_xticklabels():
            t.set_rotation(25)
            t.set_horizontalalignment("right")
            t.set_fontsize(8)

    wide = max(6.0, 2.5 + 0.8 * len(policies))
    fig, ax = plt.subplots(figsize=(wide, 3.4))
    bottom = [0.0] * len(policies)
    for o in ALL_OUTCOMES:
        vals = []
        for p in policies:
            pr = [r for r in rows if lab(r) == p]
            vals.append(sum(1 for r in pr if r["outcome"] == o) / max(1, len(pr)))
        ax.bar(policies, vals, bottom=bottom, label=o, color=_COLORS.get(o))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("share of proposals")
    ax.set_title("outcomes")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    tilt(ax)
    fig.tight_layout()
    save(fig, "outcomes.png")

    fig, ax = plt.subplots(figsize=(wide, 3.4))
    data = [[math.log2(r["step_speedup"]) for r in rows if lab(r) == p and r["step_speedup"]]
            for p in policies]
    if any(data):
        ax.boxplot([d or [0.0] for d in data], tick_labels=policies)
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.set_ylabel("log2 step speedup (verified)")
    ax.set_title("step speedups")
    tilt(ax)
    fig.tight_layout()
    save(fig, "step_speedups.png")

    if kernels:
        kids = list(dict.fromkeys(k["kernel_id"] for k in kernels))
        fig, ax = plt.subplots(figsize=(max(6.0, 3.0 + 0.55 * len(kids)), 3.4))
        w = 0.8 / max(1, len(policies))
        for i, p in enumerate(policies):
            by = {k["kernel_id"]: k["final_speedup"] for k in kernels if lab(k) == p}
            xs = [x for x, k in enumerate(kids) if by.get(k)]
            # bars from 1x on a log axis: a slowdown hangs below the line, a speedup stands above
            ax.bar([x + i * w for x in xs], [by[kids[x]] - 1.0 for x in xs], w, bottom=1.0, label=p)
        ax.set_yscale("log")
        top = max([k["final_speedup"] for k in kernels] + [1.0])
        ax.set_yticks([t for t in (1, 1.5, 2, 5, 10, 20, 50, 100) if t <= 1.3 * top] or [1],
                      [f"{t:g}x" for t in (1, 1.5, 2, 5, 10, 20, 50, 100) if t <= 1.3 * top] or ["1x"])
        ax.minorticks_off()
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xticks([x + 0.4 - w / 2 for x in range(len(kids))], [k[:8] for k in kids], fontsize=7,
                      rotation=45, ha="right")
        ax.set_ylabel("final speedup over unscheduled")
        ax.set_title("multi-step: final speedup per kernel")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
        fig.tight_layout()
        save(fig, "final_speedups.png")
    return made


def write_report(out: str | Path, rows: Sequence[Mapping[str, Any]],
                 kernels: Sequence[Mapping[str, Any]] = (), meta: Mapping[str, Any] | None = None,
                 plots: bool = True) -> dict[str, Any]:
    from .loop import KERNEL_COLUMNS, ROW_COLUMNS

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    schema = {"legal": pl.Boolean, "faithful": pl.Boolean, "faster": pl.Boolean,
              "within_spread": pl.Boolean, "reply_cached": pl.Boolean, "chosen": pl.Boolean}
    df = pl.DataFrame([{c: r.get(c) for c in ROW_COLUMNS} for r in rows], infer_schema_length=None,
                      schema_overrides=schema) if rows else pl.DataFrame({c: [] for c in ROW_COLUMNS})
    write_table(df, out / "proposals.parquet")
    if kernels:
        floats: dict[str, Any] = {c: pl.Float64 for c in ("final_paired_speedup", "dataset_best_speedup",
                                                          "ratio_to_dataset_best")}
        floats["final_faster"] = pl.Boolean
        write_table(pl.DataFrame([{c: k.get(c) for c in KERNEL_COLUMNS} for k in kernels],
                                 infer_schema_length=None, schema_overrides=floats), out / "kernels.parquet")
    summary = summarize(rows, kernels, meta)
    summary["plots"] = _plots(out, rows, kernels) if plots and rows else []
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=1, default=str) + "\n")
    md = [f"# steptp eval: {summary.get('run', out.name)}", ""]
    for k in ("source", "mode", "samples", "steps", "width", "hardware", "fingerprint"):
        if summary.get(k) not in (None, ""):
            md.append(f"- **{k}**: {summary[k]}")
    md += ["", "Rates are shares of all proposals; `verified` is faithful to its stated step and "
           "correct on the release's verification inputs (a correct program that is not its stated "
           "step is `unfaithful`); `faster` is beyond the measured spread (the dataset's "
           "significance rule); `fast_p` is the share of "
           + ("kernels whose final speedup over the unscheduled kernel, significant by that rule,"
              if kernels else "states whose best significantly faster verified step speedup")
           + " is above p; `fast_p_raw` the same without the rule.", "",
           markdown_table(summary), ""]
    md += ["| policy | " + " | ".join(ALL_OUTCOMES) + " |", "|---|" + "---|" * len(ALL_OUTCOMES)]
    for name, s in summary["policies"].items():
        md.append(f"| {name} | " + " | ".join(str(s["outcomes"][o]) for o in ALL_OUTCOMES) + " |")
    md.append("")
    if any("reproduced_rate" in s for s in summary["policies"].values()):
        for name, s in summary["policies"].items():
            if "reproduced_rate" in s:
                md.append(f"{name}: {_pct(s['reproduced_rate'])} of replayed steps reproduce their "
                          "recorded step speedup within the measured spread.")
        md.append("")
    md += [f"![{p}]({p})" for p in summary["plots"]]
    write_text_atomic(out / "report.md", "\n".join(md) + "\n")
    return summary


__all__ = ["FAST_P", "policy_summary", "summarize", "table_rows", "markdown_table", "write_report"]
