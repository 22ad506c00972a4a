"""Curation: each rule on hand-built steps over real programs and real rewrites, balancing,
workload-level splits; then the whole of it on real (verified, timed) records."""

from __future__ import annotations

import math
import random

import pytest

from steptp import examples, strategies as S
from steptp.curate import (CurateConfig, assign_splits, curate, entropy, read_curated, workload_groups,
                           write_curated)
from steptp.curate.core import _balance
from steptp.leir import format_program, parse
from steptp.records import KernelRecord, Occurrence, StepRecord, Timing, step_key

CFG = CurateConfig(require_cot=False)


def _t(median=1e-5, spread=0.01):
    return Timing(median_s=median, min_s=median, spread=spread, repeats=7, number=10)


def _kernel(kid, workloads):
    return KernelRecord(kernel_id=kid, name=kid, leir="", leir_hash=kid, tir_hash="", signature=[],
                        occurrences=[Occurrence(workload=w, suite="archs") for w in workloads],
                        weight=len(workloads), flops=1, bytes_moved=1, tvmscript="", target="cpu", raise_ok=True)


def _step(before, after, tid="t0", i=0, kid="k0", strategy="loop_reorder", spread=0.01, verified=True,
          speedup=1.5, outcome="improved"):
    return StepRecord(trajectory_id=tid, step_index=i, kernel_id=kid, before_leir=before, after_leir=after,
                      strategy=strategy, family="loop", exactness="exact", site={"path": [0]}, params={},
                      outcome=outcome, verified=verified, before=_t(spread=spread),
                      after=_t(1e-5 / speedup if 0 < speedup < math.inf else 1e-5, spread=spread),
                      step_speedup=speedup, cumulative_speedup=speedup, target="cpu")


@pytest.fixture(scope="module")
def progs():
    """(A, B, C): a kernel, one real reorder of it, and a real split of B."""
    a = parse(examples.text("matmul_bias_gelu"))
    b = S.candidates(a, strategy="loop_reorder", seed=None)[0].program
    c = S.candidates(b, strategy="loop_split", seed=None)[0].program
    return format_program(a), format_program(b), format_program(c)


def _reasons(res):
    return {(r.trajectory_id, r.step_index): r.reason.split(":")[0] for r in res.rejects}


def _hashed(steps):
    """The rows as the search writes them: each program's canonical hash recorded beside it."""
    from steptp.leir.canon import canonical_hash

    h = lambda t: canonical_hash(parse(t))      # noqa: E731
    return [s.model_copy(update={"before_hash": h(s.before_leir), "after_hash": h(s.after_leir)})
            for s in steps]


@pytest.mark.parametrize("recorded", [False, True], ids=["parsed", "recorded-hashes"])
def test_rules_each_reject_with_a_reason(progs, recorded):
    """The same verdicts whether curation parses the programs or reads the hashes the search
    recorded with each row."""
    a, b, c = progs
    renamed = b.replace("T0", "Tacc")
    assert renamed != b
    steps = [
        _step(a, b, "t0", 0), _step(b, a, "t0", 1),                 # reorder, then reorder back
        _step(a, a, "t1", 0),                                       # no-op
        _step(b, renamed, "t2", 0),                                 # rename only
        _step(a, b, "t3", 0),                                       # duplicate of t0:0
        _step(b, c, "t4", 0, spread=0.6),                           # noisy
        _step(b, c, "t5", 0, verified=False, outcome="failed_verify"),
        _step(b, c, "t6", 0, speedup=float("inf")),
        _step(b, c, "t7", 0, kid="nope"),
        _step(b, c, "t8", 0, strategy="loop_split"),                # kept
    ]
    res = curate([_kernel("k0", ["bert"])], _hashed(steps) if recorded else steps, [], CFG)
    got = _reasons(res)
    assert got == {("t0", 1): "shortcut", ("t1", 0): "no_op", ("t2", 0): "rename_only",
                   ("t3", 0): "duplicate", ("t4", 0): "noisy", ("t5", 0): "unverified",
                   ("t6", 0): "unmeasured", ("t7", 0): "unknown_kernel"}
    assert [(s.trajectory_id, s.step_index) for s in res.steps] == [("t0", 0), ("t8", 0)]
    # every input step is kept or rejected, exactly once
    assert len(res.steps) + len(res.rejects) == len(steps)
    noisy = next(r for r in res.rejects if r.trajectory_id == "t4")
    assert "0.6" in noisy.reason and "0.25" in noisy.reason
    assert res.report["rejects_by_reason"]["shortcut"] == 1


def test_shortcut_to_any_ancestor(progs):
    a, b, c = progs
    steps = [_step(a, b, "t", 0), _step(b, c, "t", 1, strategy="loop_split"),
             _step(c, a, "t", 2, strategy="loop_fusion")]
    res = curate([_kernel("k0", ["bert"])], steps, [], CFG)
    assert _reasons(res) == {("t", 2): "shortcut"}
    assert "before step 0" in res.rejects[0].reason


def test_search_tree_siblings_are_not_shortcuts(progs):
    """A search's rows share a trajectory id; step_index is the depth; siblings share a parent."""
    a, b, c = progs
    d = S.candidates(parse(b), strategy="loop_split", seed=None)[1].program
    rows = [_step(a, b, "t", 0), _step(b, c, "t", 1, strategy="loop_split"),
            _step(b, format_program(d), "t", 1, strategy="loop_split", speedup=2.0),
            _step(c, b, "t", 2, strategy="loop_fusion")]            # back to its grandparent's after
    res = curate([_kernel("k0", ["bert"])], rows, [], CFG)
    # siblings are no shortcut; one answer per prompt: the faster sibling (d) is the SFT answer
    assert sorted((r.step_index, r.reason.split(":")[0]) for r in res.rejects) == [(1, "alternative"),
                                                                                   (2, "shortcut")]
    assert [s.after_leir for s in res.steps] == [b, format_program(d)]
    alt = next(r for r in res.rejects if r.reason.startswith("alternative"))
    assert alt.step_index == 1 and len(res.all_steps) == 4
    # the two siblings share trajectory and depth: the reject names its own step, and the
    # answer's, by step_key
    by_key = {step_key(s): s for s in res.all_steps}
    assert by_key[alt.step_key].after_leir == c
    assert f"step {step_key(res.steps[1])} (loop_split) is the answer" in alt.reason
    assert all(r.step_key in by_key for r in res.rejects)


@pytest.mark.parametrize("runner_up, chosen", [(1.98, "compute_at"), (1.5, "loop_tiling")],
                         ids=["tied-rarer-strategy", "significantly-slower"])
def test_a_tie_between_siblings_goes_to_the_rarer_strategy(progs, runner_up, chosen):
    """One answer per prompt: the child through which the fastest program was measured, unless
    another child's best program is not significantly slower (the rule says "same"): then the
    strategy fewest eligible steps have answers (a compute_at that ties a tile)."""
    a, b, c = progs
    d = format_program(S.candidates(parse(b), strategy="loop_split", seed=None)[1].program)
    rows = [_step(a, b, "t", 0, strategy="loop_tiling", speedup=1.5),
            _step(b, c, "t", 1, strategy="loop_tiling", speedup=2.0),
            _step(b, d, "t", 1, strategy="compute_at", speedup=runner_up)]
    res = curate([_kernel("k0", ["bert"])], rows, [], CFG)
    answer = next(st for st in res.steps if st.before_leir == b)
    assert answer.strategy == chosen
    alt = next(r for r in res.rejects if r.reason.startswith("alternative"))
    assert alt.strategy != chosen


def test_cot_required(progs):
    a, b, _ = progs
    res = curate([_kernel("k0", ["w"])], [_step(a, b)], [], CurateConfig(require_cot=True))
    assert _reasons(res) == {("t0", 0): "no_cot"}
    bad = _step(a, b).model_copy(update={"cot": {"schema_version": "steptp-cot-1", "observation": 1}})
    res = curate([_kernel("k0", ["w"])], [bad], [], CurateConfig(require_cot=True))
    assert _reasons(res) == {("t0", 0): "cot_invalid"}


def test_balance_caps_the_big_strategy(progs):
    a, b, _ = progs
    steps = [_step(a, b, f"x{n}", 0, strategy="big") for n in range(40)]
    for s in ("p", "q", "r"):
        steps += [_step(a, b, f"{s}{n}", 0, strategy=s) for n in range(5)]
    cfg = CurateConfig(max_strategy_share=0.4, balance_min_steps=30)
    kept, rej, info = _balance(steps, cfg)
    # the largest c with c <= 0.4 * (c + 15): 10
    assert info["applied"] and info["cap"] == 10 and info["max_strategy_share"] == 0.4
    counts = {s: sum(1 for x in kept if x.strategy == s) for s in ("big", "p", "q", "r")}
    assert counts == {"big": 10, "p": 5, "q": 5, "r": 5}
    assert len(rej) == 30 and all(r.reason.startswith("balance: big above the cap of 10") for r in rej)
    # a new strategy of two examples never lowers the others' cap (a median-based cap fell)
    more, _, info_more = _balance(steps + [_step(a, b, f"s{n}", 0, strategy="s") for n in range(2)], cfg)
    assert info_more["cap"] >= info["cap"] and sum(x.strategy == "s" for x in more) == 2
    # deterministic given the seed, different with another seed
    again, _, _ = _balance(steps, cfg)
    assert [s.trajectory_id for s in again] == [s.trajectory_id for s in kept]
    other, _, _ = _balance(steps, CurateConfig(max_strategy_share=0.4, balance_min_steps=30, seed=1))
    assert [s.trajectory_id for s in other] != [s.trajectory_id for s in kept]
    # not enough data: no balancing
    small, rej2, info2 = _balance(steps[:20], CurateConfig(balance_min_steps=30))
    assert len(small) == 20 and not rej2 and not info2["applied"]
    assert entropy({"a": 1, "b": 1}) == pytest.approx(1.0)
    assert entropy({"a": 3}) == 0.0


def test_one_kernel_gives_at_most_two_answers_per_strategy(progs):
    """Four parallelizations of one kernel's outer loop teach one thing four times: the cap keeps
    the two with the largest measured gain; other kernels and other strategies are untouched."""
    from steptp.curate.core import _repetition_cap

    a, b, _ = progs
    gains = [1.2, 3.0, 1.5, 2.0]
    mine = [_step(a, b, f"p{n}", n, kid="k0", strategy="loop_parallelization")
            .model_copy(update={"best_descendant_speedup": g}) for n, g in enumerate(gains)]
    other = [_step(a, b, f"o{n}", n, kid="k1", strategy="loop_parallelization") for n in range(2)]
    third = [_step(a, b, "v0", 0, kid="k0", strategy="loop_vectorization")]
    kept, rej = _repetition_cap(mine + other + third, CurateConfig())
    assert sorted(s.best_descendant_speedup for s in kept if s.kernel_id == "k0"
                  and s.strategy == "loop_parallelization") == [2.0, 3.0]
    assert {s.trajectory_id for s in kept} >= {"o0", "o1", "v0"} and len(kept) == 5
    assert [r.reason.split(":")[0] for r in rej] == ["repetitive", "repetitive"]
    assert "4 answers of loop_parallelization on kernel k0, cap 2" in rej[0].reason
    assert len(_repetition_cap(mine, CurateConfig(max_per_kernel_strategy=0))[0]) == 4


def test_workload_groups_and_splits():
    ks = [_kernel("k1", ["bert"]), _kernel("k2", ["bert", "gpt2"]), _kernel("k3", ["gpt2"]),
          _kernel("k4", ["resnet"]), _kernel("k5", ["mlp"]), _kernel("k6", ["scan"]), _kernel("k7", ["llama"])]
    groups = workload_groups(ks)
    assert ["k1", "k2", "k3"] in groups and len(groups) == 5
    w = {k.kernel_id: 3 for k in ks}
    fr = {"train": 0.8, "validation": 0.1, "test": 0.1}
    sp = assign_splits(groups, w, fr, seed=0)
    assert set(sp) == {k.kernel_id for k in ks}
    assert sp["k1"] == sp["k2"] == sp["k3"]
    assert set(sp.values()) == {"train", "validation", "test"}
    assert assign_splits(groups, w, fr, seed=0) == sp
    seeds = {tuple(sorted(assign_splits(groups, w, fr, seed=s).items())) for s in range(6)}
    assert len(seeds) > 1
    # every architecture's kernels in one split
    for wl in ("bert", "gpt2", "resnet"):
        assert len({sp[k.kernel_id] for k in ks if wl in {o.workload for o in k.occurrences}}) == 1


# ---------------------------------------------------------------------------- real records
@pytest.fixture(scope="module")
def real():
    from _release_records import dataset

    return dataset()


@pytest.mark.slow
def test_curate_real_records(real, tmp_path):
    ks, ss, ts = real
    res = curate(ks, ss, ts, CurateConfig())
    assert res.steps, res.report
    assert len(res.steps) + len(res.rejects) == len(ss)
    assert all(s.verified and s.cot for s in res.steps)
    assert all(math.isfinite(s.step_speedup) and s.step_speedup > 0 for s in res.steps)
    assert {res.splits[s.kernel_id] for s in res.steps} <= {"train", "validation", "test"}
    write_curated(res, tmp_path / "cur", ks, ts)
    back = read_curated(tmp_path / "cur")
    assert back["steps"] == res.steps and back["splits"] == res.splits
    assert back["report"]["kept_steps"] == len(res.steps)
    again = curate(ks, ss, ts, CurateConfig())
    assert again.splits == res.splits and again.steps == res.steps


def test_splits_give_every_split_examples_when_most_kernels_have_no_steps():
    from steptp.curate import assign_splits
    from steptp.curate.core import _anchor

    # 3 kernels carry steps, 40 carry none (as when only the heaviest kernels are searched)
    groups = [[f"k{n:02d}"] for n in range(43)]
    weights = {"k00": 30, "k01": 5, "k02": 4}
    fr = {"train": 0.8, "validation": 0.1, "test": 0.1}
    out = assign_splits(groups, weights, fr, seed=0)
    assert {out[k] for k in weights} == {"train", "validation", "test"}
    assert set(out) == {g[0] for g in groups}              # every kernel has a split
    assert out == assign_splits(groups, weights, fr, seed=0)  # deterministic
    # the kernels without steps sit where their anchors say, whatever the steps
    natural = {g[0]: "train" if _anchor(0, g) < 0.8 else "validation" if _anchor(0, g) < 0.9 else "test"
               for g in groups}
    assert all(out[k] == natural[k] for k in natural if k not in weights)
    assert sum(v != "train" for v in natural.values()) >= 3   # the anchors do spread them


def _anchored(n: int, seed: int = 0) -> tuple[list[list[str]], dict[str, str]]:
    """n one-kernel groups and the split each one's anchor falls in (80/10/10)."""
    from steptp.curate.core import _anchor

    groups = [[f"g{i:03d}"] for i in range(n)]
    cut = {g[0]: "train" if _anchor(seed, g) < 0.8 else "validation" if _anchor(seed, g) < 0.9 else "test"
           for g in groups}
    return groups, cut


def test_splits_do_not_follow_the_timings_or_the_other_groups():
    """Two nightlies keep different SFT steps (the timings decide which) and a user's zoo grows:
    no kernel changes split unless a split would be left without examples. The step-weighted
    placement before this moved 28 of 129 kernels between two builds of one params.yaml."""
    from steptp.curate import assign_splits

    fr = {"train": 0.8, "validation": 0.1, "test": 0.1}
    groups, cut = _anchored(60)
    assert len(set(cut.values())) == 3
    rng = random.Random(0)
    placements = []
    for build in range(3):
        # every group has steps, in numbers that change from build to build
        weights = {g[0]: rng.randint(1, 9) for g in groups}
        placements.append(assign_splits(groups, weights, fr, seed=0))
    assert placements[0] == placements[1] == placements[2] == cut
    # a grown zoo: 40 more groups, and the old ones stay put
    more, _ = _anchored(100)
    grown = assign_splits(more, {g[0]: 1 for g in more}, fr, seed=0)
    assert {k: grown[k] for k in cut} == cut
    # another seed is another placement
    assert assign_splits(groups, {g[0]: 1 for g in groups}, fr, seed=1) != cut


def test_a_split_without_examples_takes_the_nearest_group_and_big_groups_train():
    from steptp.curate import assign_splits
    from steptp.curate.core import _anchor

    fr = {"train": 0.8, "validation": 0.1, "test": 0.1}
    groups, cut = _anchored(60)
    in_train = sorted((g for g in groups if cut[g[0]] == "train"), key=lambda g: _anchor(0, g))
    # only four train groups carry steps: test and validation each take the one nearest to them
    weights = {g[0]: 5 for g in in_train[:2] + in_train[-2:]}
    out = assign_splits(groups, weights, fr, seed=0)
    assert out[in_train[-1][0]] in ("validation", "test") and out[in_train[-2][0]] in ("validation", "test")
    assert {out[k] for k in weights} == {"train", "validation", "test"}
    assert sum(out[k] != cut[k] for k in cut) == 2             # only those two moved
    # one group holding a fifth of all kernels: too big for a 10% split, it is in train
    big = [f"b{i:02d}" for i in range(15)]
    for seed in range(8):
        sp = assign_splits([big] + [[f"s{i:02d}"] for i in range(60)], {}, fr, seed=seed)
        assert {sp[k] for k in big} == {"train"}


def test_a_split_far_below_its_share_of_the_examples_takes_groups_from_train():
    """The examples concentrate in a few groups: when validation's groups hold less than half
    of its 10% of the examples, it takes groups with examples from train (nearest anchor
    first) up to at most 1.5x its share; pinned groups stay, and groups without examples
    never move."""
    from steptp.curate import assign_splits
    from steptp.curate.core import SPLIT_CEILING, SPLIT_FLOOR

    fr = {"train": 0.8, "validation": 0.1, "test": 0.1}
    groups, cut = _anchored(80)
    # every group has an example or two; validation's own groups one at most
    weights = {g[0]: 0 if cut[g[0]] == "validation" else 1 + i % 2 for i, g in enumerate(groups)}
    weights[next(k for k in cut if cut[k] == "validation")] = 1
    total = sum(weights.values())
    before = sum(n for k, n in weights.items() if cut[k] == "validation")
    assert before < SPLIT_FLOOR * 0.1 * total
    out = assign_splits(groups, weights, fr, seed=0)
    after = sum(n for k, n in weights.items() if out[k] == "validation")
    assert SPLIT_FLOOR * 0.1 * total <= after <= SPLIT_CEILING * 0.1 * total
    moved = [k for k in cut if out[k] != cut[k]]
    assert moved and all(cut[k] == "train" and out[k] == "validation" and weights[k] for k in moved)
    assert assign_splits(groups, weights, fr, seed=0) == out          # deterministic
    # an accumulating line's kernels keep their splits: with every kernel pinned, none moves
    pinned = assign_splits(groups, weights, fr, seed=0, pinned=cut)
    assert pinned == cut


def test_every_split_gets_examples_and_test_gets_an_architecture_and_an_operator_group():
    from steptp.curate.core import _group_kinds

    ks = [_kernel("b1", ["bert"]), _kernel("b2", ["bert", "gpt2"]), _kernel("g1", ["gpt2"]),
          _kernel("r1", ["resnet"]), _kernel("o1", ["softmax"]), _kernel("o2", ["layernorm"]),
          _kernel("o3", ["conv2d"]), _kernel("o4", ["gelu"]), _kernel("l1", ["llama"])]
    ks = [k.model_copy(update={"occurrences": [o.model_copy(update={"suite": "ops"}) for o in k.occurrences]})
          if k.kernel_id.startswith("o") else k for k in ks]
    groups = workload_groups(ks)
    steps = {"b1": 30, "b2": 10, "g1": 20, "r1": 12, "o1": 6, "o2": 5, "o3": 9, "o4": 4, "l1": 8}
    fr = {"train": 0.8, "validation": 0.1, "test": 0.1}
    kinds = _group_kinds(ks)
    for seed in range(4):
        sp = assign_splits(groups, steps, fr, seed=seed, kinds=kinds)
        share = {s: sum(n for k, n in steps.items() if sp[k] == s) / sum(steps.values()) for s in fr}
        assert all(share[s] > 0 for s in fr), share                 # every split holds examples
        test = {k for k in sp if sp[k] == "test"}
        assert any(kinds[k] == "arch" for k in test) and any(kinds[k] == "ops" for k in test)
        # leak-free: an architecture's kernels are in one split
        assert sp["b1"] == sp["b2"] == sp["g1"]
    # three groups with steps: still every split gets one
    few = assign_splits([["a"], ["b"], ["c"], ["d"]], {"a": 9, "b": 2, "c": 1}, fr, seed=0)
    assert {few["a"], few["b"], few["c"]} == {"train", "validation", "test"}


# ---------------------------------------------------------------------------- diversity caps
def _named_kernel(kid, name, leir=""):
    return KernelRecord(kernel_id=kid, name=name, leir=leir, leir_hash=kid, tir_hash="", signature=[],
                        occurrences=[Occurrence(workload=f"w_{kid}", suite="archs")], weight=1, flops=1,
                        bytes_moved=1, tvmscript="", target="cpu", raise_ok=True)


def _answers(kid, n, progs, speedup=1.5):
    a, b, _ = progs
    return [_step(a, b, f"{kid}-{i}", 0, kid=kid, speedup=speedup + i / 100).model_copy(
        update={"best_descendant_speedup": speedup + i / 100}) for i in range(n)]


def test_share_cap_is_the_largest_count_that_holds():
    from steptp.curate.core import share_cap

    assert share_cap({"a": 10, "b": 10, "c": 10, "d": 10}, 0.25) == 10     # already even
    # one big group among four of 1: it may hold 1 (1 <= 0.25 x 5), not 2 (2 > 0.25 x 6)
    assert share_cap({"a": 100, "b": 1, "c": 1, "d": 1, "e": 1}, 0.25) == 1
    # among 8 groups of 5 and one of 100: c <= 0.25 x (40 + c) -> c = 13
    assert share_cap({**{f"g{i}": 5 for i in range(8)}, "big": 100}, 0.25) == 13
    assert share_cap({"a": 5, "b": 5, "c": 5}, 0.25) is None                 # 3 groups cannot


def test_family_and_kernel_caps_hold_on_the_released_set(progs):
    """24 searched kernels: 8 matmuls with 12 answers each, 16 kernels of other families with 3
    each. After the caps no family holds more than 25% and no kernel more than 5%, each matmul
    kernel keeps answers, and the rejected steps name their cap."""
    from steptp.curate.core import _diversity

    fams = ["softmax", "conv", "layer_norm", "pool", "gelu", "cumsum", "transpose", "take"]
    kernels = {f"mm{i}": _named_kernel(f"mm{i}", f"matmul_{i}") for i in range(8)}
    kernels |= {f"o{i}": _named_kernel(f"o{i}", f"{fams[i % 8]}_{i}") for i in range(16)}
    steps = [s for i in range(8) for s in _answers(f"mm{i}", 12, progs)]
    steps += [s for i in range(16) for s in _answers(f"o{i}", 3, progs)]
    kept, rej, info = _diversity(steps, kernels, 24, CurateConfig())
    assert info["applied"] and len(kept) + len(rej) == len(steps)
    n = len(kept)
    fam = {k: ("matmul" if k.startswith("mm") else fams[int(k[1:]) % 8]) for k in kernels}
    per_fam = {f: sum(1 for s in kept if fam[s.kernel_id] == f) for f in set(fam.values())}
    per_kernel = {k: sum(1 for s in kept if s.kernel_id == k) for k in kernels}
    assert max(per_fam.values()) <= 0.25 * n and max(per_kernel.values()) <= 0.05 * n
    assert per_fam["matmul"] > 0 and all(per_kernel[f"mm{i}"] >= 1 for i in range(8))
    assert {r.reason.split(":")[0] for r in rej} == {"kernel_cap", "family_cap"}
    assert sum(per_kernel.values()) == n and info["families"]["matmul"] == per_fam["matmul"]
    # within a kernel the larger measured gains stay
    kept_mm0 = sorted(s.step_speedup for s in kept if s.kernel_id == "mm0")
    assert kept_mm0 == sorted(s.step_speedup for s in steps if s.kernel_id == "mm0")[-len(kept_mm0):]
    # below the kernel threshold nothing is capped
    kept2, rej2, info2 = _diversity(steps, kernels, 19, CurateConfig())
    assert len(kept2) == len(steps) and not rej2 and "19 searched kernels" in info2["why_not"]


def test_kernels_that_differ_only_in_shapes_share_one_cap(progs):
    """A template at two sizes is one group for the kernel cap: together they hold at most 5%,
    and both sizes keep answers (shape dependence is worth teaching)."""
    from steptp.curate.core import _diversity
    from steptp.search.selection import shape_group
    from steptp.zoo.leir import builtin

    t = next(t for t in builtin() if t.name == "softmax_nll")
    small, large = t.render("tiny"), t.render("default")
    assert small != large and shape_group(small) == shape_group(large)
    other = next(x for x in builtin() if x.name == "box_iou").render("tiny")
    assert shape_group(other) != shape_group(small)
    fams = ["matmul", "conv", "layer_norm", "pool", "gelu", "cumsum", "transpose", "take"]
    kernels = {"s": _named_kernel("s", "softmax_nll_a", small), "l": _named_kernel("l", "softmax_nll_b", large)}
    kernels |= {f"o{i}": _named_kernel(f"o{i}", f"{fams[i % 8]}_{i}", "") for i in range(38)}
    steps = _answers("s", 10, progs) + _answers("l", 10, progs)
    steps += [s for i in range(38) for s in _answers(f"o{i}", 2, progs)]
    kept, rej, info = _diversity(steps, kernels, 40, CurateConfig())
    n_s = sum(1 for s in kept if s.kernel_id == "s")
    n_l = sum(1 for s in kept if s.kernel_id == "l")
    assert n_s >= 1 and n_l >= 1 and n_s + n_l <= 0.05 * len(kept)
    assert abs(n_s - n_l) <= 1                  # each size's best answers go first, in turn
    assert info["shape_groups"] == 39
    # kernels of no known family are each their own family, not one "other" family to cap
    from steptp.curate.core import diversity_keys

    u1, u2 = _named_kernel("u1", "zq_a", small), _named_kernel("u2", "zq_b", other)
    assert diversity_keys(u1)[0] != diversity_keys(u2)[0]
    assert diversity_keys(u1)[0] == diversity_keys(_named_kernel("u3", "zq_c", large))[0]


def test_too_long_counts_tokens_only_above_the_byte_bound(progs):
    """An example of at most ``max_tokens`` bytes is never tokenized (a token is at least a
    byte); one above is, and is rejected with its exact token count only when the count is over."""
    from steptp.format.chat import example_tokens, tokens_over

    a, b, _ = progs
    s = _step(a, b)
    n = example_tokens(s)
    assert tokens_over(s, "", n) is None and tokens_over(s, "", n - 1) == n
    res = curate([_kernel("k0", ["w"])], [s], [], CFG.model_copy(update={"max_tokens": n - 1}))
    assert _reasons(res) == {("t0", 0): "too_long"}
    assert res.rejects[0].reason.endswith(f"{n} tokens > {n - 1}")
    assert not _reasons(curate([_kernel("k0", ["w"])], [s], [], CFG.model_copy(update={"max_tokens": n})))


def test_rows_read_without_their_reasoning_curate_and_write_the_same(progs, tmp_path):
    """``steptp curate`` holds the rows without their reasoning (``read_steps``: each step's
    note, the text in Arrow) and joins it back on writing: every curated file is the same as
    from whole records."""
    import polars as pl

    from steptp.curate.reasoning import read_steps
    from steptp.records import read_records, table, write_table

    a, b, c = progs
    cot = {"coherence": ["coherence site: the split answers nothing found here"], "measured": {}}
    rows = [_step(a, b, "t0", 0), _step(b, c, "t0", 1, strategy="loop_split"),
            _step(b, c, "t1", 0, strategy="loop_split", verified=False, outcome="failed_verify"),
            _step(a, a, "t2", 0), _step(a, c, "t3", 0, strategy="loop_split")]
    rows = [r.model_copy(update={"cot": cot if n == 4 else {"note": n}, "cot_text": f"<think>\n{n}\n</think>\n"})
            for n, r in enumerate(rows)]
    path = write_table(table(rows, StepRecord), tmp_path / "steps.parquet")
    ks = [_kernel("k0", ["bert"])]
    cfg = CurateConfig(require_cot=False, max_pairs_per_state=4)
    whole = curate(ks, read_records(path, StepRecord), [], cfg)
    light, notes, texts = read_steps(path, "", cfg.max_tokens, batch=2)
    assert all(not s.cot and not s.cot_text for s in light)
    apart = curate(ks, light, [], cfg, notes=notes)
    assert _reasons(apart) == _reasons(whole) and ("t3", 0) in _reasons(whole)
    write_curated(whole, tmp_path / "whole", ks, [])
    write_curated(apart, tmp_path / "apart", ks, [], texts=texts)
    for f in ("steps.parquet", "all-steps.parquet", "rejects.parquet"):
        x, y = pl.read_parquet(tmp_path / "whole" / f), pl.read_parquet(tmp_path / "apart" / f)
        assert x.height and x.equals(y), f
    for f in ("pairs.json", "splits.json", "report.json"):
        assert (tmp_path / "whole" / f).read_text() == (tmp_path / "apart" / f).read_text(), f


def test_a_repair_never_moves_most_of_the_release_into_a_small_split():
    """A large pool's architectures connect into one component holding most kernels and
    examples: when it is the only architecture group with steps, the test split goes without
    one rather than take it (a nightly of the standard profile put 40 of 56 examples and 788
    of 1,114 kernels in test that way)."""
    from steptp.curate import assign_splits

    fr = {"train": 0.8, "validation": 0.1, "test": 0.1}
    giant = [f"a{i:03d}" for i in range(70)]
    ops = [[f"o{i:02d}"] for i in range(30)]
    kinds = {**{k: "arch" for k in giant}, **{g[0]: "ops" for g in ops}}
    steps = {giant[0]: 40, **{g[0]: 1 for g in ops[:16]}}
    for seed in range(6):
        sp = assign_splits([giant] + ops, steps, fr, seed=seed, kinds=kinds)
        assert {sp[k] for k in giant} == {"train"}
        held = {s: sum(n for k, n in steps.items() if sp[k] == s) for s in fr}
        assert held["test"] and held["validation"] and held["test"] <= 4, held


def test_a_bound_breaks_the_component_a_hub_kernel_makes_and_keeps_every_kernel_in_one_group():
    """A kernel in many workloads joins them all into one component; with a bound, the
    kernels of few workloads join first and the hub joins only what fits."""
    ks = [_kernel(f"k{i:02d}", [f"arch{i // 3}"]) for i in range(30)]          # ten 3-kernel archs
    hub = _kernel("hub", [f"arch{i}" for i in range(10)])
    whole = workload_groups(ks + [hub])
    assert len(whole) == 1 and len(whole[0]) == 31
    bounded = workload_groups(ks + [hub], max_size=6)
    assert sorted(k for g in bounded for k in g) == sorted(k.kernel_id for k in ks + [hub])
    assert max(map(len, bounded)) <= 6
    # each architecture stays whole; the hub joined the first one (and only it: 3 + 1 + 3 > 6)
    assert sorted(next(g for g in bounded if "hub" in g)) == ["hub", "k00", "k01", "k02"]
    assert all(sorted(g) in bounded for g in ([f"k{i:02d}" for i in range(j, j + 3)] for j in range(3, 30, 3)))
    assert workload_groups(ks + [hub], max_size=None) == whole

