"""``steptp eval`` as a Prefect flow: one task per (policy, state) in single mode, per (policy,
kernel) in multi-step modes.

    from steptp.flows.eval import eval_flow
    eval_flow(release="releases/steptp-tiny-0.1.0", policies=["replay", "random", "search"])

Caching: tasks use ``INPUTS + TASK_SOURCE`` and persist their rows, so a rerun (after a crash,
or with one more policy) judges only what is new. Retries: a task whose policy could not get a
reply (rate limit, 5xx, a timed-out request: ``Proposal.error``) raises and is retried; after
the last retry the proposals are recorded with their outcome (``no_reply``, with the reason)
and the run goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from prefect import flow, task
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.task_runners import ThreadPoolTaskRunner

CACHE = INPUTS + TASK_SOURCE
_MEASURERS: dict[str, Any] = {}


class NoReply(RuntimeError):
    """A policy produced no reply for some draw (transient: retried)."""


def _measurer(cache: Optional[str]):
    from steptp.eval.run import MEMORY_LIMIT_MB
    from steptp.measure.runner.local import Measurer
    from steptp.search.evaluator import search_config, set_threads

    key = str(cache)
    if key not in _MEASURERS:
        _MEASURERS[key] = Measurer(None, search_config(set_threads(None)), cache=cache or True,
                                    memory_limit_mb=MEMORY_LIMIT_MB)
    return _MEASURERS[key]


def _loop(policy: str, spec: dict[str, Any], cfg: dict[str, Any], cache: Optional[str], sft_rows):
    from steptp.eval.judge import Judge
    from steptp.eval.loop import EvalConfig, Loop
    from steptp.eval.policies import make_proposer
    from steptp.records import StepRecord

    steps = [StepRecord(**r) for r in sft_rows]
    pol = make_proposer(policy, steps=steps, **spec)
    return Loop(Judge(_measurer(cache)), {policy: pol}, EvalConfig(**cfg), run=spec.get("run", "eval"))


def _state(d: dict[str, Any]):
    from steptp.eval.judge import State

    return State(**{**d, "path": tuple(d.get("path") or ())})


def _check_replies(loop, final: bool) -> None:
    missing = [r for r in loop.rows if r["reason"].startswith("no reply")]
    if missing and not final:
        raise NoReply(f"{len(missing)} proposals got no reply: {missing[0]['reason'][:200]}")


@task(cache_policy=CACHE, persist_result=True, retries=2, retry_delay_seconds=5)
def judge_state(policy: str, spec: dict[str, Any], cfg: dict[str, Any], state: dict[str, Any],
                cache: Optional[str], sft_rows: list[dict[str, Any]], final: bool = False) -> list[dict]:
    loop = _loop(policy, spec, cfg, cache, sft_rows)
    try:
        loop.single([_state(state)])
    finally:
        loop.judge.close()
    _check_replies(loop, final)
    return loop.rows


@task(cache_policy=CACHE, persist_result=True, retries=2, retry_delay_seconds=5)
def judge_kernel(policy: str, spec: dict[str, Any], cfg: dict[str, Any], root: dict[str, Any],
                 cache: Optional[str], sft_rows: list[dict[str, Any]], best: Optional[float],
                 final: bool = False) -> tuple[list[dict], list[dict]]:
    loop = _loop(policy, spec, cfg, cache, sft_rows)
    st = _state(root)
    try:
        loop.multi([st], {st.kernel_id: best} if best else {})
    finally:
        loop.judge.close()
    _check_replies(loop, final)
    return loop.rows, loop.kernels


def _state_dict(s) -> dict[str, Any]:
    return {"kernel_id": s.kernel_id, "original": s.original, "program": s.program,
            "exactness": s.exactness, "depth": s.depth, "path": list(s.path),
            "hardware": s.hardware, "target": s.target}


@flow(name="eval", task_runner=ThreadPoolTaskRunner(max_workers=1))
def eval_flow(release: Optional[str] = None, kernels: Optional[str] = None,
              leir: Optional[list[str]] = None, split: Optional[str] = None,
              policies: Optional[list[str]] = None, mode: Optional[str] = None,
              samples: Optional[int] = None, steps: Optional[int] = None,
              width: Optional[int] = None, seed: Optional[int] = None,
              mcts_c: Optional[float] = None, llm: Optional[dict[str, Any]] = None,
              out: Optional[str] = None, run: str = "flow", cache: Optional[str] = None,
              max_kernels: Optional[int] = None, params_file: Optional[str] = None
              ) -> dict[str, Any]:
    """Judge ``policies`` on a release split / kernels table / LEIR files; writes
    ``out/run/`` (the report of ``steptp eval``) and returns its summary. ``mode``: single, or
    one multi-step mode (chain, beam or mcts). What is not given comes from the ``eval``
    settings of ``params_file`` (its defaults without one: ``steptp.params.Eval``)."""
    from steptp import params as P
    from steptp.eval.command import load_inputs, policy_names
    from steptp.eval.inputs import select
    from steptp.eval.report import write_report

    given = {"split": split, "samples": samples, "steps": steps, "width": width, "seed": seed,
             "mcts_c": mcts_c, "out": out, "max_kernels": max_kernels, "policies": policies}
    if mode is not None:
        given.update({"mode": "single"} if mode == "single" else {"mode": "multi", "multi": mode})
    base = P.load(params_file).source
    e = P.parse({**base, "eval": {**(base.get("eval") or {}),
                                  **{k: v for k, v in given.items() if v is not None}}},
                params_file or "eval_flow").eval
    split, samples, steps, width, seed, mcts_c, out = (e.split, e.samples, e.steps, e.width, e.seed,
                                                       e.mcts_c, e.out)
    policies = policy_names(e.policies if isinstance(e.policies, list) else [e.policies])
    mode = "single" if e.mode == "single" else policy_names(
        e.multi if isinstance(e.multi, list) else [e.multi])[0]
    inputs = select(load_inputs(Path(release) if release else None, Path(kernels) if kernels else None,
                                [Path(p) for p in leir or []], split), e.max_kernels)
    sft_rows = [s.model_dump() for s in inputs.sft_steps]
    cfg = {"mode": mode, "samples": samples, "steps": steps, "width": width, "mcts_c": mcts_c, "seed": seed}
    rows: list[dict] = []
    kern: list[dict] = []
    try:
        for pol in policies:
            spec = {"seed": seed, "run": run, **({k: v for k, v in (llm or {}).items()}
                                                 if pol in ("openai", "anthropic") else {})}
            rows_for = sft_rows if pol == "replay" else []
            items = inputs.states if mode == "single" else inputs.roots
            for s in items:
                args = dict(policy=pol, spec=spec, cfg=cfg, cache=cache, sft_rows=rows_for)
                if mode == "single":
                    st = judge_state(state=_state_dict(s), return_state=True, **args)
                    res = st.result() if st.is_completed() else judge_state.fn(
                        state=_state_dict(s), final=True, **args)
                    rows.extend(res)
                else:
                    best = inputs.dataset_best.get(s.kernel_id)
                    st = judge_kernel(root=_state_dict(s), best=best, return_state=True, **args)
                    r, k = st.result() if st.is_completed() else judge_kernel.fn(
                        root=_state_dict(s), best=best, final=True, **args)
                    rows.extend(r)
                    kern.extend(k)
        fp = _measurer(cache).fingerprint.id
    finally:
        for m in _MEASURERS.values():
            m.close()
        _MEASURERS.clear()
    meta = {"run": run, "source": inputs.source, "mode": mode, "samples": samples,
            "fingerprint": fp, "seed": seed}
    return write_report(Path(out) / run, rows, kern, meta)


__all__ = ["eval_flow", "judge_state", "judge_kernel"]
