"""What ``steptp eval`` does, apart from option parsing (kept here so cli.py holds one command).

Settings come from, in order: the command line, the ``eval:`` section of params.yaml (whose
defaults are ``steptp.params.Eval``'s)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..params import Settings
from ..params import settings as _settings
from .inputs import EvalInputError, Inputs, from_kernels, from_leir, from_release, select
from .loop import EvalConfig

_RUN_NAME = re.compile(r"^[A-Za-z0-9._-]{1,80}$")


def settings(cli: Mapping[str, Any], params: Settings | Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``eval`` settings (validated with the rest of params.yaml), the command line's
    given options over them."""
    out = _settings(params).eval.model_dump()
    out.update({k: v for k, v in cli.items() if v is not None and v != []})
    return out


def load_inputs(release: Optional[Path], kernels: Optional[Path], leir: Sequence[Path],
                split: str) -> Inputs:
    given = [x for x in (release, kernels, list(leir) or None) if x]
    if len(given) != 1:
        raise EvalInputError("give exactly one input: --release FOLDER, --kernels TABLE or --leir FILE...")
    if release is not None:
        return from_release(release, split)
    if kernels is not None:
        return from_kernels(kernels)
    return from_leir(list(leir))


def policy_names(values: Sequence[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(x.strip() for x in str(v).split(",") if x.strip())
    return out


def run_command(*, release, kernels, leir, params: Settings | Mapping[str, Any] | None,
                cli: Mapping[str, Any],
                model: Optional[str], base_url: Optional[str], run: Optional[str],
                cache: bool, llm_cache_dir: Optional[str], on_progress=None,
                resume: bool = True) -> tuple[dict, Path]:
    from .run import evaluate

    s = settings(cli, params)
    pols = policy_names(s["policies"] if isinstance(s["policies"], list) else [s["policies"]])
    if release is None and not cli.get("policies") and "replay" in pols:
        pols = [p for p in pols if p != "replay"]  # replay needs a release's rows
    inputs = select(load_inputs(release, kernels, leir, s["split"]), s["max_kernels"], s["max_states"])
    if s["mode"] not in ("single", "multi"):
        raise ValueError(f"--mode {s['mode']!r}: single or multi")
    modes = ["single"] if s["mode"] == "single" else policy_names(
        s["multi"] if isinstance(s["multi"], list) else [s["multi"]])
    bad = [m for m in modes if m not in ("single", "chain", "beam", "mcts")] or \
        (["single"] if s["mode"] == "multi" and "single" in modes else [])
    if bad or not modes:
        raise ValueError(f"--multi {bad[0] if bad else ''!r}: chain, beam or mcts (comma-separate to compare)")
    cfgs = [EvalConfig(mode=m, samples=int(s["samples"]), steps=int(s["steps"]), width=int(s["width"]),
                       max_proposals=s["max_proposals"], max_tokens=s["max_tokens"], wall_s=s["wall_s"],
                       mcts_c=float(s["mcts_c"]), seed=int(s["seed"])) for m in dict.fromkeys(modes)]
    mode = "-".join(c.mode for c in cfgs)
    if run is None:
        run = "-".join(pols) + f"-{mode}"
    if not _RUN_NAME.match(run):
        raise ValueError(f"--run {run!r}: letters, digits, '.', '_' and '-' only")
    out = Path(s["out"]) / run
    llm = {"model": model, "base_url": base_url, "temperature": s["temperature"],
           "max_tokens": int(s["reply_tokens"]), "timeout_s": float(s["timeout_s"]),
           "cache_dir": llm_cache_dir or str(Path(s["out"]) / "llm-cache")}
    summary = evaluate(inputs, pols, out, cfgs, run=run, seed=int(s["seed"]), cache=cache, llm=llm,
                       on_progress=on_progress, resume=resume)
    return summary, out


__all__ = ["settings", "load_inputs", "policy_names", "run_command"]
