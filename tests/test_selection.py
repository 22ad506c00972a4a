"""Which kernels a release searches: weight x unscheduled time, a time floor, families."""

from __future__ import annotations

from steptp.records import KernelRecord, Occurrence
from steptp.search.selection import kernel_family, select


def _k(kid, name, workloads, weight=1):
    occ = [Occurrence(workload=w, suite=s, count=weight) for w, s in workloads]
    return KernelRecord(kernel_id=kid, name=name, leir="", leir_hash=kid, tir_hash="", signature=[],
                        occurrences=occ, weight=weight, flops=1, bytes_moved=1, tvmscript="", target="cpu",
                        raise_ok=True)


KS = [
    _k("k_reshape", "reshape2", [("bert", "arch")], weight=12),          # many calls, 25 ns each
    _k("k_mm_tiny", "matmul", [("matmul_square", "ops")], weight=1),     # 16x16: 2 µs
    _k("k_mm", "matmul", [("matmul_square", "ops")], weight=1),          # 512x512: 30 ms
    _k("k_ln", "layer_norm", [("layernorm", "ops")], weight=1),
    _k("k_conv", "conv2d", [("conv2d", "ops")], weight=1),
    _k("k_conv2", "fused_conv2d_add", [("resnet", "arch")], weight=3),
    _k("k_conv3", "fused_conv2d_add1", [("resnet", "arch")], weight=3),
    _k("k_sm", "softmax", [("softmax", "ops")], weight=1),
    _k("k_huge", "matmul", [("matmul_transposed_b", "ops")], weight=1),
    _k("k_bert_mm", "fused_matmul_add2", [("bert", "arch")], weight=8),  # 5 µs: below the floor
]
TIMES = {"k_reshape": 25e-9, "k_mm_tiny": 2e-6, "k_mm": 30e-3, "k_ln": 2e-3, "k_conv": 8e-3, "k_conv2": 1e-3,
         "k_conv3": 0.9e-3, "k_sm": 5e-3, "k_huge": 3.0, "k_bert_mm": 5e-6}


def test_rank_by_weight_times_time_with_floor_ceiling_and_family_cap():
    sel = select(KS, TIMES, max_kernels=5, floor_s=20e-6, ceiling_s=0.2, max_per_family=2)
    chosen = [k.kernel_id for k in sel.chosen]
    # weight x time: the 30 ms matmul first, the 12 x 25 ns reshapes not at all
    assert chosen[0] == "k_mm" and "k_reshape" not in chosen
    st = {k.kernel_id: k.search_status for k in sel.kernels}
    assert st["k_reshape"].startswith("below_time_floor") and st["k_bert_mm"].startswith("below_time_floor")
    assert st["k_huge"].startswith("above_time_ceiling")
    # three conv kernels are candidates, the family cap keeps two so that softmax and norm get in
    assert sum(kernel_family(k) == "conv" for k in sel.chosen) == 2
    assert {"k_sm", "k_ln"} <= set(chosen)
    assert len({kernel_family(k) for k in sel.chosen}) >= 4
    assert {k.kernel_id: k.unscheduled_s for k in sel.kernels}["k_mm"] == 30e-3
    assert st["k_conv3"].startswith("not_selected")
    # deterministic, and the order of the input does not matter
    again = select(KS[::-1], TIMES, max_kernels=5, floor_s=20e-6, ceiling_s=0.2, max_per_family=2)
    assert [k.kernel_id for k in again.chosen] == chosen


def test_weight_alone_would_pick_the_reshapes():
    # without the floor, weight x time still ranks the 25 ns reshapes last ...
    sel = select(KS, TIMES, max_kernels=None, floor_s=0, ceiling_s=None, max_per_family=None)
    assert [k.kernel_id for k in sel.chosen][-1] == "k_reshape"
    assert [k.kernel_id for k in sel.chosen][0] == "k_huge"


def test_larger_workloads_are_operator_workloads_below_the_floor():
    sel = select(KS, TIMES, max_kernels=5, floor_s=20e-6, ceiling_s=0.2, max_per_family=2)
    # matmul_square has a kernel above the floor (k_mm); bert is an architecture: neither
    assert sel.larger_workloads() == []
    sel = select([k for k in KS if k.kernel_id != "k_mm"], TIMES, max_kernels=5, floor_s=20e-6)
    assert sel.larger_workloads() == ["matmul_square"]
    assert kernel_family(KS[1]) == "matmul" and kernel_family(KS[5]) == "conv"


def test_a_users_kernel_below_the_floor_is_searched_as_is_and_never_re_extracted():
    own = _k("k_own", "rowsum", [("rowsum", "user")], weight=1)
    # the same tiny time as a zoo kernel that does get re-extracted at a larger size
    zoo = _k("k_zoo", "sum", [("sum_rows", "ops")], weight=1)
    times = {"k_own": 3e-8, "k_zoo": 3e-8, "k_mm": 30e-3}
    sel = select([own, zoo, KS[2]], times, max_kernels=5, floor_s=20e-6)
    st = {k.kernel_id: k.search_status for k in sel.kernels}
    assert [k.kernel_id for k in sel.chosen] == ["k_mm", "k_own"]   # last by weight x time
    assert st["k_own"].startswith("searched") and "below the time floor" in st["k_own"]
    assert "not a zoo kernel" in st["k_own"]
    assert st["k_zoo"].startswith("below_time_floor")
    # only the zoo's operator workload is offered for re-extraction, never the user's
    assert sel.larger_workloads() == ["sum_rows"]
    # with the option off, the user's kernel is held to the floor like the rest
    off = select([own, zoo], times, max_kernels=5, floor_s=20e-6, own_below_floor=False)
    assert off.chosen == [] and off.larger_workloads() == ["sum_rows"]


def test_your_own_kernels_go_first_unless_below_the_floor():
    """``first`` (choose_kernels passes the kernels of the user's folders): taken before any
    zoo kernel, in their own order; one below the floor keeps its place, last."""
    mine = _k("k_mine", "my_gemm", [("my_gemm", "user")], weight=1)
    tiny = _k("k_tiny", "my_axpy", [("my_axpy", "user")], weight=1)
    times = {**TIMES, "k_mine": 1e-4, "k_tiny": 3e-8}
    ks = KS + [mine, tiny]
    sel = select(ks, times, max_kernels=3, floor_s=20e-6, ceiling_s=0.2, max_per_family=None,
                 first={"k_mine", "k_tiny"})
    assert [k.kernel_id for k in sel.chosen] == ["k_mine", "k_mm", "k_conv"]
    sel = select(ks, times, max_kernels=3, floor_s=20e-6, ceiling_s=0.2, max_per_family=None)
    assert "k_mine" not in [k.kernel_id for k in sel.chosen]          # 0.1 ms: the zoo's outrank it
    sel = select(ks, times, max_kernels=None, floor_s=20e-6, ceiling_s=0.2, max_per_family=None,
                 first={"k_mine", "k_tiny"})
    assert [k.kernel_id for k in sel.chosen][0] == "k_mine" and sel.chosen[-1].kernel_id == "k_tiny"


def test_the_pool_extracts_your_leir_templates_at_every_size_of_the_profile():
    from steptp import params as P
    from steptp.pipeline import extract_refs

    e = P.Extract(zoo="", size="tiny", also_sizes=["default"], leir_dirs=["profiles/user/leir"])
    refs = extract_refs(e)
    sizes = sorted((r.name, r.size) for r in refs)
    assert ("row_sum_sq", "default") in sizes and ("row_sum_sq", "tiny") in sizes
    assert {r.name for r in refs} == {"axpy_clamp", "col_mean", "row_sum_sq"}
    # a size no template gives is left out, not an error
    refs = extract_refs(e.model_copy(update={"also_sizes": ["huge"]}))
    assert sorted(r.size for r in refs) == ["tiny"] * 3


ROWSUM = "kernel f32 rowsum(A[8,16]) -> B[8]\n  for i in 8:\n    B[i] += A[i,j]\n"


def test_search_params_on_an_own_leir_kernel_below_the_floor(tmp_path):
    """Issue 35: ``steptp search --kernels --params`` on a user's LEIR kernel whose unscheduled
    time is below search.min_time_us failed with ``UnknownName: unknown workload 'rowsum'``:
    the selection took it for a zoo operator to extract again at a larger size."""
    import polars as pl
    from typer.testing import CliRunner

    from steptp.cli import app

    (tmp_path / "rowsum.leir").write_text(ROWSUM)
    runner = CliRunner()
    r = runner.invoke(app, ["extract", "--leir", str(tmp_path / "rowsum.leir"),
                            "--out", str(tmp_path / "k.parquet")])
    assert r.exit_code == 0, r.output
    (tmp_path / "params.yaml").write_text(
        "extract:\n  zoo: tiny\n  size: tiny\n  jobs: 1\n"
        "search:\n  policy: greedy\n  max_kernels: 2\n  measurements: 2\n  seconds: 30\n"
        "  threads: 1\n  min_time_us: 1000\n  larger_size: default\n")
    r = runner.invoke(app, ["search", "--kernels", str(tmp_path / "k.parquet"), "--params",
                            str(tmp_path / "params.yaml"), "--out", str(tmp_path / "out")])
    out = " ".join(r.output.split())
    assert "UnknownName" not in out and "unknown workload" not in out, out
    assert r.exit_code == 0, out
    assert "below the time floor" in out and "(search.min_time_us)" in out, out
    sel = pl.read_parquet(tmp_path / "out" / "kernels-selected.parquet")
    assert sel["search_status"][0].startswith("searched") and sel["name"][0] == "rowsum"
    steps = pl.read_parquet(tmp_path / "out" / "steps.parquet")
    assert steps.height >= 1 and set(steps["kernel_id"]) == set(sel["kernel_id"])


def _leir_kernel(kid, name, text, weight=1):
    from steptp.leir import format_program, parse

    return _k(kid, name, [], weight).model_copy(update={"leir": format_program(parse(text))})


_GELU = """kernel gelu{n}(A: f32[{r},{c}]) -> D: f32[{r},{c}]
  for i in {r}:
    for j in {c}:
      D[i,j] = A[i,j] * {k} * (1.0 + tanh(A[i,j]))
"""
_ROWSUM = """kernel rowsum_exp(A: f32[{r},{c}]) -> D: f32[{r}]
  for i in {r}:
    for j in {c}:
      D[i] += exp(A[i,j])
"""


def test_the_shard_defers_searched_shape_groups_and_families_that_yield_little():
    """An accumulating night's shard (``shard_deferrals`` + ``select``): a softmax at a third
    size waits behind a new program, and so does a fourth GELU once three searched GELUs gave
    no prompt with a faster answer; a deferred kernel still fills a shard that has room."""
    from _release_records import softmax_leir
    from steptp.search.selection import shard_deferrals, shape_group

    sm = [_leir_kernel(f"sm{r}", "softmax", softmax_leir(r, 4 * r)) for r in (8, 16, 32)]
    ge = [_leir_kernel(f"ge{n}", f"gelu{n}", _GELU.format(n=n, r=8, c=64, k=0.5 + n / 10)) for n in range(4)]
    rs = _leir_kernel("rs", "rowsum_exp", _ROWSUM.format(r=16, c=64))
    ks = sm + ge + [rs]
    assert shape_group(sm[0].leir) == shape_group(sm[2].leir) != shape_group(rs.leir)
    assert len({shape_group(k.leir) for k in ge}) == 4        # other constants: other programs
    # nights before searched two softmaxes (4 and 2 prompts with a faster answer) and 3 GELUs (none)
    searched = {"sm8": False, "sm16": False, "ge0": False, "ge1": False, "ge2": True}
    answerable = {"sm8": 4, "sm16": 2, "ge0": 0, "ge1": 0, "ge2": 0}
    defer, groups, yields = shard_deferrals(ks, searched, answerable, min_family_yield=1.0, min_kernels=3)
    assert yields["activation"] == {"kernels": 3, "answerable_per_kernel": 0.0, "deferred": True}
    assert yields["softmax"]["answerable_per_kernel"] == 3.0 and not yields["softmax"]["deferred"]
    assert set(defer) == {"sm32", "ge3"}
    assert "shape group was searched on an earlier night (softmax)" in defer["sm32"]
    assert "family activation gave 0 prompts" in defer["ge3"] and "min_family_yield 1" in defer["ge3"]
    # the GELU would rank first by weight x time: it waits; so does the third softmax
    new = [k for k in ks if k.kernel_id not in searched]
    times = {"ge3": 9e-3, "sm32": 5e-3, "rs": 1e-3}
    sel = select(new, times, max_kernels=1, floor_s=0, ceiling_s=None, max_per_family=None,
                 defer=defer, groups=groups)
    assert [k.kernel_id for k in sel.chosen] == ["rs"]
    st = {k.kernel_id: k.search_status for k in sel.kernels}
    assert st["ge3"].startswith("not_selected") and "family activation" in st["ge3"]
    # with room, the deferred fill it in rank order
    sel = select(new, times, max_kernels=3, floor_s=0, ceiling_s=None, max_per_family=None,
                 defer=defer, groups=groups)
    assert [k.kernel_id for k in sel.chosen] == ["ge3", "sm32", "rs"]
    # below min_kernels a family is not judged; without the yield rule nothing of it waits
    defer, _, yields = shard_deferrals(ks, searched, answerable, min_family_yield=1.0, min_kernels=4)
    assert set(defer) == {"sm32"} and not yields["activation"]["deferred"]
    defer, _, _ = shard_deferrals(ks, searched, answerable, min_family_yield=0.0, min_kernels=3)
    assert set(defer) == {"sm32"}


def test_one_kernel_per_shape_group_tonight_before_the_second():
    from _release_records import softmax_leir
    from steptp.search.selection import shard_deferrals

    sm = [_leir_kernel(f"sm{r}", "softmax", softmax_leir(r, 4 * r)) for r in (8, 16)]
    rs = _leir_kernel("rs", "rowsum_exp", _ROWSUM.format(r=16, c=64))
    defer, groups, _ = shard_deferrals(sm + [rs], {}, {})
    assert defer == {}
    times = {"sm8": 3e-3, "sm16": 9e-3, "rs": 1e-3}
    sel = select(sm + [rs], times, max_kernels=2, floor_s=0, ceiling_s=None, max_per_family=None,
                 defer=defer, groups=groups)
    assert sorted(k.kernel_id for k in sel.chosen) == ["rs", "sm16"]
    st = {k.kernel_id: k.search_status for k in sel.kernels}
    assert "its shape group is searched tonight (softmax)" in st["sm8"]
    # without groups: the two softmaxes, by weight x time
    sel = select(sm + [rs], times, max_kernels=2, floor_s=0, ceiling_s=None, max_per_family=None)
    assert sorted(k.kernel_id for k in sel.chosen) == ["sm16", "sm8"]
