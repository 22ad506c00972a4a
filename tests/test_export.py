"""Export: the chat format, and a release folder from real (verified, timed, explained) records."""

from __future__ import annotations

import json

import polars as pl
import pytest

from steptp.curate import CurateConfig, curate, read_curated, write_curated
from steptp.export import export_release, publish, verify_checksums
from steptp.format.chat import SYSTEM_PROMPT, answer, check_line, example, think
from steptp.records import StepRecord, Timing


def _step(**kw):
    from steptp import examples
    from steptp.leir import format_program, parse

    a = format_program(parse(examples.text("softmax")))
    t = Timing(median_s=1e-5, min_s=1e-5, spread=0.01, repeats=7, number=10)
    d = dict(trajectory_id="t", step_index=0, kernel_id="k", before_leir=a, after_leir=a.replace("T0", "T9"),
             strategy="loop_split", family="loop", exactness="exact", site={"path": [0], "loops": ["i"]},
             params={"factor": 2}, outcome="improved", verified=True, before=t, after=t, step_speedup=1.2,
             target="llvm-x86_64", cot={}, cot_text="<think>\nbecause `i` is long\n</think>\n{}")
    d.update(kw)
    return StepRecord(**d)


def test_chat_format_one_line():
    s = _step()
    ex = example(s, "Xeon (x86_64, 2 threads)", "train")
    line = json.dumps(ex)
    assert check_line(line) == []
    msgs = json.loads(line)["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[0]["content"] == SYSTEM_PROMPT
    assert "Xeon (x86_64, 2 threads)" in msgs[1]["content"] and s.before_leir in msgs[1]["content"]
    a = msgs[2]["content"]
    assert a.startswith("<think>\nbecause `i` is long\n</think>\n")
    ans = json.loads(a.split("</think>\n", 1)[1])
    assert ans == {"strategy": "loop_split", "site": {"path": [0], "loops": ["i"]}, "params": {"factor": 2},
                   "program": s.after_leir}
    assert ex["meta"]["tokens"]["total"] > 50 and ex["meta"]["split"] == "train"
    assert think(_step(cot_text="plain reasoning")) == "plain reasoning"
    assert json.loads(answer(s))["strategy"] == "loop_split"


def test_check_line_catches_problems():
    good = json.loads(json.dumps(example(_step(), "cpu")))
    assert check_line("{not json") and check_line("{not json")[0].startswith("not JSON")
    bad = json.loads(json.dumps(good))
    bad["messages"] = bad["messages"][1:]
    assert check_line(json.dumps(bad)) == ["messages must be system, user, assistant"]
    bad = json.loads(json.dumps(good))
    bad["messages"][2]["content"] = "<think>\nx\n</think>\n{\"strategy\": 1}"
    assert any("answer keys" in p for p in check_line(json.dumps(bad)))


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    from _release_records import dataset

    ks, ss, ts = dataset()
    # a candidate that failed verification (the verifier no longer rejects any of the walk's
    # correct ones), as the search records it: kept as a negative with its reason
    first = next(s for s in ss if s.verified)
    ss.append(first.model_copy(update={
        "verified": False, "outcome": "failed_verify", "after": None, "step_speedup": None,
        "cumulative_speedup": None, "params": {**first.params, "deliberately": "wrong"},
        "cot": {}, "reason": "seed 0 (standard normal inputs): output D: 3 of 8 elements differ"}))
    res = curate(ks, ss, ts, CurateConfig())
    d = tmp_path_factory.mktemp("exp")
    write_curated(res, d / "cur", ks, ts)
    fp = {"cpu_model": "Test CPU", "machine": "x86_64", "num_threads": 2, "id": "abc"}
    stats = export_release(read_curated(d / "cur"), d / "stage", name="steptp-test", version="9",
                           params={"seed": 0, "curate": {"max_spread": 0.25}}, fingerprint=fp)
    return d, res, stats


@pytest.mark.slow
def test_release_folder(release):
    d, res, stats = release
    stage = d / "stage"
    for f in ("README.md", "stats.json", "data/kernels.parquet", "data/steps.parquet",
              "data/trajectories.parquet", "data/rejects.parquet", "chat/train.jsonl", "chat/validation.jsonl",
              "chat/test.jsonl", "plots/strategies.png", "plots/speedups.png", "plots/tokens.png"):
        assert (stage / f).is_file(), f
    assert (stage / "plots/strategies.png").read_bytes()[:4] == b"\x89PNG"
    steps = pl.read_parquet(stage / "data/steps.parquet")
    # every searched step, with its role; the SFT ones flagged
    assert len(steps) == len(res.all_steps) > len(res.steps) and steps["split"].null_count() == 0
    assert steps["sft"].sum() == len(res.steps)
    assert set(steps.filter(pl.col("sft"))["role"].to_list()) <= {"improving", "preparatory"}
    assert "failed" in steps["role"].to_list()
    rejects = pl.read_parquet(stage / "data/rejects.parquet")
    assert rejects.columns[:6] == ["trajectory_id", "step_index", "kernel_id", "strategy", "reason",
                                   "step_key"]
    # each reject joins exactly its own step (not every sibling at its depth), never an SFT one
    joined = rejects.join(steps, on="step_key", how="inner")
    assert joined.height == rejects.height == len(res.all_steps) - len(res.steps)
    assert (joined["strategy"] == joined["strategy_right"]).all() and not joined["sft"].any()
    n = 0
    for sp in ("train", "validation", "test"):
        for line in (stage / f"chat/{sp}.jsonl").read_text().splitlines():
            assert check_line(line) == []
            meta = json.loads(line)["meta"]
            assert meta["split"] == sp == res.splits[meta["kernel_id"]]
            assert meta["role"] in ("improving", "preparatory") and meta["best_descendant_speedup"] > 1
            n += 1
    assert n == len(res.steps) == stats["counts"]["steps"]
    card = (stage / "README.md").read_text()
    # the pool and the searched kernels are told apart (a nightly's pool is all its extraction)
    searched = steps["kernel_id"].n_unique()
    assert stats["counts"]["searched_kernels"] == searched
    assert sum(stats["counts"]["searched_kernels_per_split"].values()) == searched
    assert f"| searched kernels (with steps) | {searched} |" in card
    assert f"| kernels in the pool (extracted, checked) | {stats['counts']['kernels']} |" in card
    for needle in ("## Strategies", "plots/speedups.png", "plots/tokens.png", "Test CPU", "load_dataset",
                   "pl.read_parquet", "| train |", "distinct sentence templates", "## Step roles",
                   "preference pairs", "| SFT examples |",
                   "| `unverified` | 1 | not verified against the reference"):
        assert needle in card, needle

    # publish: manifest with checksums, atomic move, replaces an older release
    dest = d / "releases" / "steptp-test-9"
    dest.mkdir(parents=True)
    (dest / "old.txt").write_text("old")
    publish(stage, dest, params={"seed": 0}, validation={"success": True}, move=False)
    assert stage.exists() and not (dest / "old.txt").exists()
    man = json.loads((dest / "manifest.json").read_text())
    assert man["params"] == {"seed": 0} and man["seeds"] == {"seed": 0}
    assert "data/steps.parquet" in man["files"] and "great-expectations" in man["versions"]
    assert man["fingerprints"]["hardware"]["cpu_model"] == "Test CPU"
    assert verify_checksums(dest) == []
    (dest / "chat/train.jsonl").write_text("tampered\n")
    assert verify_checksums(dest) == ["chat/train.jsonl"]
    assert not [p for p in dest.parent.iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_pairs_file_is_a_dpo_dataset(release):
    """chat/pairs-*.jsonl: TRL's conversational preference format (prompt, chosen, rejected
    message lists), prompts equal to the SFT user turns, chosen better than rejected."""
    from steptp.export.pairs import check_pair_line

    d, res, stats = release
    stage = d / "stage"
    lines = [ln for sp in ("train", "validation", "test")
             for ln in (stage / f"chat/pairs-{sp}.jsonl").read_text().splitlines()]
    assert lines and len(lines) == stats["counts"]["pairs"] == len(res.pairs)
    steps = pl.read_parquet(stage / "data/steps.parquet")
    by_key = {r["step_key"]: r for r in steps.iter_rows(named=True)}
    for ln in lines:
        assert check_pair_line(ln) == []
        ex = json.loads(ln)
        c, r = by_key[ex["meta"]["chosen_step_key"]], by_key[ex["meta"]["rejected_step_key"]]
        assert c["before_leir"] == r["before_leir"] and c["before_leir"] in ex["prompt"][1]["content"]
        assert ex["prompt"][0]["content"] == SYSTEM_PROMPT
        assert ex["chosen"][0]["content"] != ex["rejected"][0]["content"]
        assert ex["meta"]["rejected_why"] in ("failed", "slower")
        if ex["meta"]["rejected_why"] == "failed":
            assert r["role"] == "failed"
            assert ex["rejected"][0]["content"].startswith("<think>\n") and r["cot_source"] == "template"
        else:
            # step against step on the timing named by compared_on; never inverted on best descendants
            m = ex["meta"]
            on = m["compared_on"]
            assert on in ("step_speedup", "paired_speedup") and m[f"chosen_{on}"] > m[f"rejected_{on}"]
            best = m["best_compared_on"]
            assert m[f"chosen_{best}"] * (1 + 0.25) >= m[f"rejected_{best}"]   # margin <= max_spread
        assert c["role"] in ("improving", "preparatory") and ex["meta"]["rejected_role"] == r["role"]
    # the same release again: the same pairs (deterministic given the seed)
    again = curate(*dataset_args(), CurateConfig())
    assert again.pairs == res.pairs


def dataset_args():
    from _release_records import dataset

    return dataset()


@pytest.mark.slow
def test_card_loading_snippet_runs_with_datasets(release):
    """The card's loading snippet, executed as a user would (in the release folder), with the
    Hugging Face ``datasets`` library (the folder by its card's configs) and polars; the pairs
    load as a DPO dataset."""
    import os
    import re

    d, res, stats = release
    stage = d / "stage"
    card = (stage / "README.md").read_text()
    code = re.search(r"## Loading\n.*?```python\n(.*?)```", card, re.S).group(1)
    cwd = os.getcwd()
    ns: dict = {}
    try:
        os.chdir(stage)
        exec(compile(code, "card-snippet", "exec"), ns)  # our own card's snippet, not user input
    finally:
        os.chdir(cwd)
    chat, pairs = ns["chat"], ns["pairs"]
    n = sum(len(chat[s]) for s in chat)
    assert n == stats["counts"]["steps"]
    assert [m["role"] for m in chat["train"][0]["messages"]] == ["system", "user", "assistant"]
    tr = next(pairs[s] for s in pairs if len(pairs[s]))
    assert {"prompt", "chosen", "rejected"} <= set(tr.column_names)
    row = tr[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert [m["role"] for m in row["chosen"]] == [m["role"] for m in row["rejected"]] == ["assistant"]
    assert sum(len(ns["steps"][s]) for s in ns["steps"]) == stats["counts"]["searched_steps"]
    assert len(ns["train"]) == stats["counts"]["examples_per_split"]["train"]


@pytest.mark.slow
def test_export_of_the_folder_in_batches_is_the_export_of_the_records(release, monkeypatch):
    """Export reading the curated folder itself (every searched step a table, pairs made a few
    at a time, their rows framed per batch) writes the very files of the export from
    ``read_curated``'s records, byte for byte."""
    from steptp.export import release as R

    d, res, stats = release
    assert stats["counts"]["pairs"] > 4
    monkeypatch.setattr(R, "PAIR_BATCH", 2)
    fp = {"cpu_model": "Test CPU", "machine": "x86_64", "num_threads": 2, "id": "abc"}
    again = export_release(d / "cur", d / "from-folder", name="steptp-test", version="9",
                           params={"seed": 0, "curate": {"max_spread": 0.25}}, fingerprint=fp)
    assert again == stats
    new, old = d / "from-folder", d / "stage"
    files = sorted(p.relative_to(new).as_posix() for p in new.rglob("*") if p.is_file())
    assert {"chat/pairs-train.jsonl", "configs/preference/train.parquet", "data/steps.parquet"} <= set(files)
    for top in ("data", "chat", "configs", "plots"):
        assert sorted(p.relative_to(old).as_posix() for p in (old / top).rglob("*") if p.is_file()) == \
            [f for f in files if f.startswith(top + "/")]
    for f in files:
        assert (new / f).read_bytes() == (old / f).read_bytes(), f


def test_export_does_not_import_curation():
    """One way: curation uses the chat format (token limits); export reads curated data only."""
    import subprocess
    import sys

    code = ("import sys, steptp.export, steptp.export.pairs; "
            "print(sorted(m for m in sys.modules if m.startswith('steptp.curate')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.slow
def test_the_prompt_states_the_hardware_facts_the_reasoning_cites(release):
    """"fits in L2 (2 MiB)" in an answer is only learnable if the prompt says L2 is 2 MiB: every
    cache size and the vector width the reasoning cites appear in the user turn."""
    import re

    d, _, _ = release
    # the records' reasoning was written for the generic core: the prompt states its caches, not
    # those of whatever machine runs the export (a 32 KiB-L1 CI machine once got "L1 48 KiB" in
    # the reasoning and "L1 32 KiB" in the prompt)
    assert json.loads((d / "stage" / "stats.json").read_text())["hardware"].endswith(
        "data caches L1 48 KiB, L2 2 MiB, L3 16 MiB; 64-byte lines")
    cited = 0
    for sp in ("train", "validation", "test"):
        for line in (d / "stage" / f"chat/{sp}.jsonl").read_text().splitlines():
            user, assistant = (m["content"] for m in json.loads(line)["messages"][1:])
            for level, size in re.findall(r"\b(L[123]) \(([\d.]+ (?:KiB|MiB|bytes))(?: per core)?\)",
                                          assistant):
                assert f"{level} {size}" in user, (level, size, user[:300])
                cited += 1
            for bits in re.findall(r"(\d+)-bit (?:vectors|registers)", assistant):
                assert f"{bits}-bit vectors" in user
                cited += 1
    assert cited >= 3


def test_chat_files_interleave_kernels():
    from steptp.export.chat import interleaved

    steps = [_step(kernel_id=k, trajectory_id=f"t{k}", step_index=i)
             for k in ("a", "b", "c") for i in range(3 if k == "a" else 1)]
    out = interleaved(steps)
    assert sorted(map(id, out)) == sorted(map(id, steps))              # a permutation
    assert {s.kernel_id for s in out[:3]} == {"a", "b", "c"}           # every kernel up front
    assert [s.step_index for s in out if s.kernel_id == "a"] == [0, 1, 2]   # each in its order
    by_kernel_reversed = [s for k in ("c", "b", "a") for s in steps if s.kernel_id == k]
    assert [s.kernel_id for s in interleaved(by_kernel_reversed)] == [s.kernel_id for s in out]


def test_strategy_coverage_says_why_a_strategy_has_no_example():
    """Each catalog strategy without an SFT example gets one reason: never evaluated, never
    measured faster, capped, or the rule that removed its faster steps."""
    from steptp.export.coverage import strategy_coverage
    from steptp.records import RejectRecord

    def st(strategy, role, i=0):
        return _step(strategy=strategy, trajectory_id=f"{strategy}{i}").model_copy(update={"role": role})

    def rej(strategy, code, i=0):
        return RejectRecord(trajectory_id=f"{strategy}{i}", step_index=0, kernel_id="k", strategy=strategy,
                            reason=f"{code}: detail")

    sft = [st("loop_split", "improving"), st("loop_split", "improving", 1), st("vectorize", "preparatory")]
    all_steps = sft + [st("loop_reorder", "neutral"), st("loop_reorder", "regressing", 1),
                       st("parallel", "improving"), st("unroll", "improving"),
                       st("fuse", "improving"), st("fuse", "neutral", 1), st("fuse", "regressing", 2)]
    rejects = [rej("parallel", "family_cap"), rej("parallel", "balance"), rej("unroll", "duplicate"),
               rej("fuse", "alternative"), rej("fuse", "neutral", 1), rej("fuse", "regressing", 2)]
    cov = strategy_coverage(sft, all_steps, rejects,
                            ["loop_split", "vectorize", "loop_reorder", "parallel", "unroll", "cache_read",
                             "fuse"])
    assert cov["sft"] == {"loop_split": 2, "vectorize": 1} and cov["in_sft"] == 2 and cov["catalog"] == 7
    m = cov["missing"]
    assert sorted(m) == ["cache_read", "fuse", "loop_reorder", "parallel", "unroll"]
    # why its faster step was not kept; its slower steps' rejects say nothing about that
    assert m["fuse"] == "1 faster steps, none kept (alternative 1)"
    assert m["cache_read"].startswith("never evaluated")
    assert m["loop_reorder"].startswith("never measured faster (2 steps")
    assert m["parallel"] == "capped (balance 1, family_cap 1)"
    assert "duplicate 1" in m["unroll"] and "capped" not in m["unroll"]
    from steptp.export.coverage import coverage_lines

    text = "\n".join(coverage_lines(cov, {
        "applied": True, "searched_kernels": 40, "max_family_share": 0.25, "max_kernel_share": 0.05,
        "family_cap": 9, "kernel_cap": 2, "shape_groups": 30,
        "families": {"matmul": 9, "conv": 5, "other:aa": 2, "other:bb": 1}}))
    assert "2 of the catalog's 7 strategies have SFT examples" in text
    assert "| `parallel` | capped (balance 1, family_cap 1) |" in text
    assert ("SFT examples per family: matmul 9, conv 5; 2 kernel groups of unknown family, each its "
            "own family (3 examples, at most 2 in one)") in text


def test_yield_per_machine_hour_and_projection(tmp_path):
    """The search stage's stats file gives the yield line; malformed stats give none."""
    from steptp.export.coverage import projection, yield_lines, yields
    from steptp.search import stage_stats

    stage_stats.write(tmp_path, wall_s=1800.0, kernels=12, steps=240, workers=2)
    s = stage_stats.read(tmp_path)
    y = yields(s, sft=36, pairs=96)
    assert y["machine_hours"] == 0.5
    assert y["per_machine_hour"] == {"kernels": 24.0, "steps": 480.0, "sft": 72.0, "pairs": 192.0}
    p = projection(y, 1200, 4)                  # 1200 kernels / (24 per hour x 4 machines)
    assert p["wall_hours"] == pytest.approx(12.5) and (p["sft"], p["pairs"], p["steps"]) == (3600, 9600, 24000)
    text = "\n".join(yield_lines(y))
    assert "480 searched steps, 72 SFT examples and 192 pairs per machine-hour" in text
    assert "| 1,000 | 4 | 10.4 | 20,000 | 3,000 | 8,000 |" in text
    # a resumed build (its searches cached) keeps the first run's time
    stage_stats.write(tmp_path, wall_s=3.0, kernels=12, steps=240, workers=2)
    assert stage_stats.read(tmp_path)["wall_s"] == 1800.0
    for bad in ('{"wall_s": -1, "kernels": 1, "steps": 1}', '{"wall_s": 5, "kernels": "x", "steps": 1}',
                '[1]', 'not json', '{"wall_s": NaN, "kernels": 1, "steps": 1}'):
        (tmp_path / stage_stats.FILE).write_text(bad)
        assert stage_stats.read(tmp_path) is None, bad
    assert yields(None, sft=1, pairs=1) is None and "No search-stage timing" in yield_lines(None)[0]


def test_coverage_reads_why_a_faster_step_was_not_kept_from_its_own_reject():
    """Siblings share trajectory, depth and strategy: with ``step_key`` on both tables, the
    reject of a slower sibling (here a neutral one's cap) is not read as the faster one's."""
    from typing import NamedTuple

    from steptp.export.coverage import strategy_coverage
    from steptp.records import RejectRecord

    class Row(NamedTuple):
        strategy: str
        role: str
        trajectory_id: str
        step_index: int
        step_key: str

    steps = [Row("fuse", "improving", "t", 1, "a"), Row("fuse", "neutral", "t", 1, "b")]
    rejects = [RejectRecord(trajectory_id="t", step_index=1, kernel_id="k", strategy="fuse",
                            reason="alternative: step c (tile) is the answer", step_key="a"),
               RejectRecord(trajectory_id="t", step_index=1, kernel_id="k", strategy="fuse",
                            reason="balance: above the cap", step_key="b")]
    assert strategy_coverage([], steps, rejects, ["fuse"])["missing"]["fuse"] == \
        "1 faster steps, none kept (alternative 1)"
    unkeyed = [r.model_copy(update={"step_key": ""}) for r in rejects]
    assert strategy_coverage([], steps, unkeyed, ["fuse"])["missing"]["fuse"] == "capped (balance 1)"


def test_a_table_written_before_a_column_existed_reads_with_it_empty(tmp_path):
    """A curated rejects table from before ``step_key`` still exports: the column reads as
    null (not recorded), the other columns as written."""
    from steptp.export.source import _frame
    from steptp.records import RejectRecord, table

    rows = [RejectRecord(trajectory_id="t", step_index=1, kernel_id="k", strategy="fuse",
                         reason="neutral: after same", step_key="abc")]
    old = table(rows, RejectRecord).drop("step_key")
    old.write_parquet(tmp_path / "rejects.parquet")
    df = _frame(tmp_path / "rejects.parquet", RejectRecord)
    assert df.columns == table(rows, RejectRecord).columns
    assert df["step_key"].to_list() == [None] and df["reason"].to_list() == ["neutral: after same"]
