"""One call for the CLI, the Prefect flow and the benchmark: ``evaluate(inputs, policies, ...)``.

It opens ONE :class:`~steptp.measure.runner.local.Measurer` (cached, fingerprinted, isolated
workers with time and memory limits), builds the policies, runs the loop and writes the report
to ``out`` (``eval/<run>/``). Progress goes to the ``steptp.eval`` logger and ``out/eval.log``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from .inputs import Inputs
from .journal import Journal
from .judge import Judge
from .loop import EvalConfig, Loop
from .policies import Proposer, make_proposer
from .report import write_report

log = logging.getLogger("steptp.eval")
#: a model's program is untrusted: its verification and timing workers get a memory cap too
MEMORY_LIMIT_MB = 4096


def build_policies(names: Sequence[str], inputs: Inputs, seed: int = 0,
                   llm: Mapping[str, Any] | None = None) -> dict[str, Proposer]:
    out: dict[str, Proposer] = {}
    for n in names:
        if n in out:
            continue
        if n == "replay" and not inputs.sft_steps:
            raise ValueError("the replay policy needs a release (--release): it answers with "
                             "the release's own SFT rows")
        out[n] = make_proposer(n, steps=inputs.sft_steps, seed=seed, **dict(llm or {}))
    return out


def _journal_header(inputs: Inputs, policies: Sequence[str], configs: Sequence[EvalConfig], seed: int,
                    seeds: Sequence[int], llm: Mapping[str, Any] | None, run: str) -> dict[str, Any]:
    """What must match for a partial file's rows to belong to this run (the model and its
    sampling too: another model's replies are another run)."""
    from dataclasses import asdict

    llm = dict(llm or {})
    return {"run": run, "source": inputs.source, "policies": list(policies),
            "configs": [asdict(c) for c in configs], "seed": seed, "verify_seeds": list(seeds),
            "states": len(inputs.states), "kernels": [r.kernel_id for r in inputs.roots],
            "llm": {k: llm.get(k) for k in ("model", "base_url", "temperature", "max_tokens")
                    if any(p in ("openai", "anthropic") for p in policies)}}


def evaluate(inputs: Inputs, policies: Sequence[str] | Mapping[str, Proposer], out: str | Path,
             config: EvalConfig | Sequence[EvalConfig] = EvalConfig(), *, run: Optional[str] = None, seed: int = 0,
             measure_config=None, target=None, cache: Any = True, jobs: int = 1,
             verify_seeds: Optional[Sequence[int]] = None, llm: Mapping[str, Any] | None = None,
             measurer=None, on_progress: Optional[Callable[[str], None]] = None,
             plots: bool = True, memory_limit_mb: Optional[int] = MEMORY_LIMIT_MB, retime_rounds: int = 3,
             resume: bool = True) -> dict[str, Any]:
    """``verify_seeds``: None, the release's (``measure.verify.DEFAULT_SEEDS``). ``resume``: a
    partial file in ``out`` from an earlier run of the same configuration is continued (its
    judged units kept, not judged again); False discards it (:mod:`.journal`)."""
    from ..measure.runner.local import Measurer
    from ..measure.verify import DEFAULT_SEEDS
    from ..search.evaluator import search_config, set_threads

    configs = [config] if isinstance(config, EvalConfig) else list(config)
    modes = [c.mode for c in configs]
    if not configs or ("single" in modes and len(configs) > 1) or len(set(modes)) < len(modes):
        raise ValueError(f"modes {modes}: one single-step run, or distinct multi-step searches")
    # policies first: a missing key or model is an error before anything is written
    pols = dict(policies) if isinstance(policies, Mapping) else build_policies(policies, inputs, seed, llm)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = tuple(DEFAULT_SEEDS if verify_seeds is None else verify_seeds)
    journal = Journal(out, _journal_header(inputs, list(pols), configs, seed, seeds, llm, run or out.name),
                      resume=resume)
    handler = logging.FileHandler(out / "eval.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    if log.level == logging.NOTSET or log.level > logging.INFO:
        log.setLevel(logging.INFO)

    def say(msg: str) -> None:
        log.info("%s", msg)
        if on_progress is not None:
            on_progress(msg)

    resumed = journal.resumed
    if resumed:
        say(f"resuming {out}: {resumed} judged units kept from {journal.path.name}")
    own = measurer is None
    if own:
        threads = set_threads(None)
        measurer = Measurer(target, measure_config or search_config(threads), cache=cache, jobs=jobs,
                            memory_limit_mb=memory_limit_mb)
    try:
        judge = Judge(measurer, seeds, retime_rounds=retime_rounds)
        roots = inputs.roots
        rows: list[dict[str, Any]] = []
        kernels: list[dict[str, Any]] = []
        for cfg in configs:  # several searches share the judge: a state is verified and timed once
            loop = Loop(judge, pols, cfg, run or out.name, say, journal=journal)
            if cfg.mode == "single":
                loop.single(inputs.states)
            else:
                loop.multi(roots, inputs.dataset_best)
            rows += loop.rows
            kernels += loop.kernels
        config = configs[0]
        fp = measurer.fingerprint
        meta = {"run": run or out.name, "source": inputs.source, "mode": "+".join(modes),
                "samples": config.samples, "steps": config.steps if config.mode != "single" else None,
                "width": config.width if "beam" in modes else None,
                "mcts_c": config.mcts_c if "mcts" in modes else None,
                "max_proposals": config.max_proposals, "seed": seed,
                "verify_seeds": list(seeds), "resumed_units": resumed,
                "hardware": (roots[0].hardware if roots else ""), "fingerprint": fp.id,
                "target": measurer.target.key,
                "usage": {n: p.usage() for n, p in pols.items() if p.usage()}}
        summary = write_report(out, rows, kernels, meta, plots=plots)
        journal.finish()
    finally:
        journal.close()
        if "judge" in locals():
            judge.close()
        for p in pols.values():
            p.close()
        if own:
            measurer.close()
        log.removeHandler(handler)
        handler.close()
    say(f"wrote {out}/summary.json, report.md, proposals.parquet")
    return summary


__all__ = ["evaluate", "build_policies"]
