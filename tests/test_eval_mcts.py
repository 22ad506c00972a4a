"""``mcts``: UCT over states whose children are the policy's verified proposals.

The tree alone on a small state graph with known times (no TVM: the search's own logic), then
end to end through ``steptp eval``'s command path with real TVM verification and timing, beside
``chain`` at equal proposals, twice on one measurement cache (the same path)."""

from __future__ import annotations

import math

import polars as pl
import pytest

from steptp.eval.judge import State
from steptp.eval.mcts import Tree
from steptp.records import Timing


def _prog(n: int) -> str:  # distinct LEIR programs: one per graph state
    return f"kernel k(A: f32[{n}]) -> B: f32[{n}]\n  for i in {n}:\n    B[i] = A[i] * 2.0\n"


def _timing(s: float) -> Timing:
    return Timing(median_s=s, min_s=s, spread=0.01, repeats=5, number=1)


# a deceptive graph: the fastest child of the root (1) is a dead end; the slower one (2) leads
# to the fastest program (5). Times in seconds; the root takes 1.0.
TIMES = {0: 1.0, 1: 0.6, 2: 0.8, 3: 0.7, 4: 0.9, 5: 0.25, 6: 0.3}
GRAPH = {0: [1, 2], 1: [], 2: [5, 4], 4: [6], 5: [], 6: []}


def _search(steps=3, samples=2, budget=12, c=0.5, seed=0):
    calls, spent = [], [0]

    def expand(st, offset):
        n = ids_of_states([st])[0]
        asked = min(samples, budget - spent[0])   # as the loop asks: never beyond the budget
        kids = GRAPH.get(n, [])[offset:offset + asked]
        calls.append((n, offset))
        spent[0] += len(kids)
        return len(kids), asked, [State("k", _prog(1), _prog(100 + m), timing=_timing(TIMES[m]),
                                          baseline=root.baseline, depth=st.depth + 1,
                                          path=st.path + (f"s{m}",)) for m in kids]

    root = State("k", _prog(1), _prog(100), timing=_timing(1.0), baseline=_timing(1.0))
    tree = Tree(root, expand, steps=steps, c=c, seed=seed, policy="p")
    while spent[0] < budget and tree.step():
        pass
    return tree, calls, spent[0]


def ids_of_states(states):
    inv = {State("k", _prog(1), _prog(100 + n)).state_id: n for n in TIMES}
    return [inv[s.state_id] for s in states]


def ids_of(nodes):
    return ids_of_states([n.state for n in nodes])


def test_mcts_leaves_a_dead_end_and_finds_the_deeper_optimum():
    tree, calls, _ = _search()
    best = tree.best()
    assert ids_of(tree.path(best)) == [0, 2, 5] and best.state.timing.median_s == 0.25
    # greedy first (the 0.6 s child, where a chain would stop: nothing verifies below it), then
    # the dead end is done and the search goes on under the slower child
    assert calls[:3] == [(0, 0), (1, 0), (2, 0)]
    assert tree.root.value == pytest.approx(-math.log(0.25)) and tree.nodes[best.state.state_id] is best


def test_mcts_is_deterministic_and_bounded():
    a, ca, spent = _search(budget=3)
    b, cb, _ = _search(budget=3)
    assert ca == cb and ids_of(a.path(a.best())) == ids_of(b.path(b.best()))
    # the dead end costs no proposal; the third expansion gets one draw, the budget's last
    assert spent == 3 and ca == [(0, 0), (1, 0), (2, 0)] and ids_of(a.path(a.best())) == [0, 2, 5]
    # depth limit 1: the root's children are done at once; the root draws again (offset 2),
    # gets nothing new and the tree is done
    t, calls, _ = _search(steps=1)
    assert calls == [(0, 0), (0, 2)] and t.root.done and ids_of(t.path(t.best())) == [0, 1]


# ---------------------------------------------------------------------------- end to end
N = 64
MM = f"""kernel mm(A: f32[{N},{N}], B: f32[{N},{N}]) -> C: f32[{N},{N}]
  for i in {N}, j in {N}, k in {N}:
    C[i,j] += A[i,k] * B[k,j]
"""


@pytest.mark.slow
def test_mcts_beside_chain_through_the_command(tmp_path):
    """``--mode multi --multi chain,mcts`` with the search policy: both searches judged by one
    measurer at equal proposals, reported side by side; mcts reaches a verified multi-step path at
    least as fast as the chain's; a rerun on the same cache takes the same path."""
    from steptp.eval.command import run_command

    (tmp_path / "mm.leir").write_text(MM)
    cli = {"mode": "multi", "multi": "chain,mcts", "policies": ["search"], "samples": 2, "steps": 2,
           "out": str(tmp_path / "eval")}
    params = {"eval": {"mcts_c": 0.5, "seed": 3}}
    runs = []
    for name in ("a", "b"):
        s, out = run_command(release=None, kernels=None, leir=[tmp_path / "mm.leir"], params=params,
                             cli=cli, model=None, base_url=None, run=name,
                             cache=str(tmp_path / "cache.sqlite"), llm_cache_dir=None)
        runs.append((s, pl.read_parquet(out / "kernels.parquet"), pl.read_parquet(out / "proposals.parquet")))
    s, kern, rows = runs[0]
    assert list(s["policies"]) == ["search/chain", "search/mcts"] and s["mode"] == "chain+mcts"
    k = {r["mode"]: r for r in kern.to_dicts()}
    assert k["mcts"]["proposals"] <= 4 and k["chain"]["proposals"] <= 4      # samples x steps
    assert k["mcts"]["final_speedup"] >= k["chain"]["final_speedup"] > 1.0
    m = rows.filter(pl.col("mode") == "mcts")
    chosen = m.filter(pl.col("chosen")).sort("depth")
    assert k["mcts"]["steps"] >= 1 and chosen["strategy"].to_list() == k["mcts"]["path"]
    assert chosen["outcome"].to_list() == ["verified"] * k["mcts"]["steps"]
    assert chosen["after_s"][-1] == pytest.approx(k["mcts"]["final_s"])
    report = (tmp_path / "eval/a/report.md").read_text()
    assert "| search/mcts |" in report and "| search/chain |" in report
    assert (tmp_path / "eval/a/plots/final_speedups.png").read_bytes()[:4] == b"\x89PNG"
    # the rerun: every timing from the cache, the same tree, the same path
    _, kern2, rows2 = runs[1]
    cols = ["mode", "state_id", "sample", "program_hash", "outcome", "chosen", "after_s"]
    assert rows2.select(cols).to_dicts() == rows.select(cols).to_dicts()
    assert kern2.drop("run").to_dicts() == kern.drop("run").to_dicts()


def test_unknown_search_is_a_clear_error(tmp_path):
    from steptp.eval.command import run_command

    (tmp_path / "mm.leir").write_text(MM)
    with pytest.raises(ValueError, match="--multi 'dfs': chain, beam or mcts"):
        run_command(release=None, kernels=None, leir=[tmp_path / "mm.leir"], params={},
                    cli={"mode": "multi", "multi": "chain,dfs", "policies": ["search"], "out": str(tmp_path)},
                    model=None, base_url=None, run=None, cache=False, llm_cache_dir=None)
    assert not any(tmp_path.glob("*/report.md"))
