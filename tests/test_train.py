"""A release trains with no glue: ``datasets.load_dataset(release[, config])``, the parent links
of its trees, the ``prompts`` config of every state, the TRL reward, and TRL's SFT, DPO and GRPO
trainers on a tiny local model (docs/train.md's code, executed)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import polars as pl
import pytest

from steptp.curate import CurateConfig, curate, read_curated, write_curated
from steptp.export import export_release
from steptp.export.hub import CONFIGS, MAX_LENGTHS

DOC = Path(__file__).resolve().parent.parent / "docs" / "train.md"


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    from _release_records import dataset

    ks, ss, ts = (list(x) for x in dataset())   # copies: the records are cached for other tests
    res = curate(ks, ss, ts, CurateConfig())
    d = tmp_path_factory.mktemp("train")
    write_curated(res, d / "cur", ks, ts)
    fp = {"cpu_model": "Test CPU", "machine": "x86_64", "num_threads": 2, "id": "abc"}
    stats = export_release(read_curated(d / "cur"), d / "release", name="steptp-test", version="9",
                           params={"seed": 0, "license": "cc-by-4.0"}, fingerprint=fp)
    # the quality gates write their report and Data Docs beside the data; neither may become a split
    (d / "release" / "validation.json").write_text(json.dumps({"success": True}))
    (d / "release" / "data_docs" / "validations").mkdir(parents=True)
    (d / "release" / "data_docs" / "index.html").write_text("<html></html>")
    (d / "release" / "data_docs" / "validations" / "test.json").write_text(json.dumps({"success": True}))
    return d / "release", res, stats


def _load(path, name=None, cache=None):
    from datasets import load_dataset

    return load_dataset(str(path), name, cache_dir=str(cache)) if name else load_dataset(str(path), cache_dir=str(cache))


def _front_matter(path: Path) -> dict:
    import yaml

    text = (path / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


def test_release_loads_with_datasets_by_config(release, tmp_path):
    path, res, stats = release
    fm = _front_matter(path)
    assert fm["license"] == "cc-by-4.0" and fm["task_categories"] == ["text-generation"]
    assert fm["size_categories"] == ["n<1K"] and fm["pretty_name"].startswith("steptp-test 9")
    assert [c["config_name"] for c in fm["configs"]] == list(CONFIGS)
    assert [c["config_name"] for c in fm["configs"] if c.get("default")] == ["sft"]
    for c in fm["configs"]:     # one loader for every config (datasets picks one per repository)
        assert all(f["path"].endswith(".parquet") for f in c["data_files"]), c

    default = _load(path, cache=tmp_path)
    assert {sp: len(v) for sp, v in default.items()} == stats["counts"]["examples_per_split"]
    assert [m["role"] for m in default["validation"][0]["messages"]] == ["system", "user", "assistant"]
    tables = {n: pl.read_parquet(path / f"data/{n}.parquet") for n in ("steps", "kernels", "trajectories")}
    want = {
        "sft": stats["counts"]["examples_per_split"],
        "preference": stats["counts"]["pairs_per_split"],
        **{n: {sp: int((df["split"] == sp).sum()) for sp in ("train", "validation", "test")}
           for n, df in tables.items()},
    }
    for name in CONFIGS:
        ds = _load(path, name, tmp_path)
        got = {sp: len(v) for sp, v in ds.items()}
        if name in want:
            assert got == {sp: n for sp, n in want[name].items() if n}, name
        assert set(got) <= {"train", "validation", "test"} and sum(got.values()) > 0, name
    pairs = _load(path, "preference", tmp_path)["validation"]
    assert {"prompt", "chosen", "rejected", "meta"} <= set(pairs.column_names)
    assert [m["role"] for m in pairs[0]["chosen"]] == ["assistant"]
    # the rows are the chat files' rows
    line = json.loads((path / "chat/validation.jsonl").read_text().splitlines()[0])
    assert default["validation"][0]["messages"] == line["messages"]

    card = (path / "README.md").read_text()
    fit = stats["length_fit"]["sft"]["fit"]
    assert "| config | rows | " + " | ".join(f"≤ {m}" for m in MAX_LENGTHS) in card
    assert (f"| sft (prompt + answer: `meta.tokens.total`) | {stats['counts']['steps']} | "
            + " | ".join(str(fit[str(m)]) for m in MAX_LENGTHS)) in card
    assert fit["8192"] == stats["counts"]["steps"] and fit["1024"] < fit["8192"]
    assert "rejected_why" in card and "parent_step_key" in card


def test_a_release_rebuilt_in_the_same_folder_loads_its_own_rows(release, tmp_path):
    """datasets keys its cache of a local folder by the folder's name and the card's configs: the
    configs name their files' digest, so a rebuilt release (or the `latest` link moved) is not
    served the previous release's rows."""
    path, _, stats = release
    cur = read_curated(path.parent / "cur")
    cur["steps"] = [s for s in cur["steps"] if s.kernel_id != cur["steps"][0].kernel_id]
    other = tmp_path / "rebuilt" / path.name
    again = export_release(cur, other, name="steptp-test", version="9", params={"seed": 0},
                           fingerprint={"cpu_model": "Test CPU", "machine": "x86_64", "num_threads": 2})
    assert again["counts"]["steps"] < stats["counts"]["steps"]
    cache = tmp_path / "cache"
    for folder, st in ((path, stats), (other, again)):
        got = _load(folder, cache=cache)
        assert {sp: len(v) for sp, v in got.items()} == {sp: n for sp, n in st["counts"]["examples_per_split"].items() if n}


def test_parent_step_key_joins_the_trees(release):
    path, res, _ = release
    steps = pl.read_parquet(path / "data/steps.parquet")
    by_key = {r["step_key"]: r for r in steps.iter_rows(named=True)}
    assert len(by_key) == len(steps)
    linked = 0
    for r in steps.iter_rows(named=True):
        p = r["parent_step_key"]
        if p is None:
            # a root starts from the unscheduled kernel: no searched step of its trajectory ends there
            assert not any(o["trajectory_id"] == r["trajectory_id"] and o["after_leir"] == r["before_leir"]
                           and o["verified"] and o["step_index"] + 1 == r["step_index"] for o in by_key.values())
            continue
        parent = by_key[p]
        assert parent["trajectory_id"] == r["trajectory_id"] and parent["after_leir"] == r["before_leir"]
        assert parent["step_index"] + 1 == r["step_index"] and parent["verified"]
        linked += 1
    assert linked and steps.filter(pl.col("step_index") == 0)["parent_step_key"].null_count() == \
        steps.filter(pl.col("step_index") == 0).height
    # pairs: the parent of their shared before-program
    pairs = [json.loads(ln) for sp in ("train", "validation", "test")
             for ln in (path / f"chat/pairs-{sp}.jsonl").read_text().splitlines()]
    assert pairs and all(p["meta"]["parent_step_key"] == by_key[p["meta"]["chosen_step_key"]]["parent_step_key"]
                         for p in pairs)
    # below the root every chosen step has its parent (the search expanded only measured states)
    assert all(p["meta"]["parent_step_key"] for p in pairs if by_key[p["meta"]["chosen_step_key"]]["step_index"] > 0)


def test_prompts_config_holds_every_state(release, tmp_path):
    from steptp.leir import parse
    from steptp.leir.canon import canonical_hash

    path, res, stats = release
    prompts = _load(path, "prompts", tmp_path)
    rows = [r for sp in prompts for r in prompts[sp]]
    assert all(r["split"] == sp for sp in prompts for r in prompts[sp])
    users = {r["prompt"][1]["content"] for r in rows}
    sft = _load(path, cache=tmp_path)
    pairs = _load(path, "preference", tmp_path)
    # every SFT and pair prompt (the eval's inputs cover only the SFT ones) is a state here
    assert {x["messages"][1]["content"] for sp in sft for x in sft[sp]} <= users
    assert {x["prompt"][1]["content"] for sp in pairs for x in pairs[sp]} <= users
    assert {x["prompt"][0]["content"] for sp in pairs for x in pairs[sp]} == {r["prompt"][0]["content"] for r in rows}
    # ... once per (kernel, program up to names), and every kernel of a split is a root state
    keys = [(r["kernel_id"], canonical_hash(parse(r["program"]))) for r in rows]
    assert len(keys) == len(set(keys))
    kernels = pl.read_parquet(path / "data/kernels.parquet").filter(pl.col("split").is_not_null())
    for k in kernels.iter_rows(named=True):
        mine = [r for r in rows if r["kernel_id"] == k["kernel_id"]]
        assert {r["split"] for r in mine} == {k["split"]}
        assert canonical_hash(parse(k["leir"])) in {canonical_hash(parse(r["program"])) for r in mine}
        assert all(canonical_hash(parse(r["original"])) == canonical_hash(parse(k["leir"])) for r in mine)
    # the checker's inputs: exactness is the loosest along the path (exact at a root)
    assert all(r["exactness"] == "exact" for r in rows if r["depth"] == 0)
    assert all(r["exactness"] in ("exact", "reassociation", "algebraic") and r["target"] for r in rows)


def test_eval_inputs_hold_every_prompt_of_the_release(release, tmp_path):
    """`steptp eval --release` reads the prompts config: every state of a split (the SFT prompts,
    the pair-only prompts and the kernels) is an eval state, with the config's checker inputs and
    the very prompt the release shows (the eval's prompt of that state)."""
    from steptp.eval.inputs import from_release
    from steptp.eval.policies import prompt_messages
    from steptp.leir import parse
    from steptp.leir.canon import canonical_hash

    path, _, _ = release
    prompts = _load(path, "prompts", tmp_path)
    steps = pl.read_parquet(path / "data/steps.parquet")
    strategy = dict(zip(steps["step_key"], steps["strategy"]))
    parent = dict(zip(steps["step_key"], steps["parent_step_key"]))
    sources = []
    for sp in prompts:
        inp = from_release(path, sp)
        by_id = {(s.kernel_id, s.state_id): s for s in inp.states}
        assert len(by_id) == len(inp.states) == len(prompts[sp]), sp
        for r in prompts[sp]:
            s = by_id[(r["kernel_id"], canonical_hash(parse(r["program"]))[:16])]
            assert (s.exactness, s.depth, s.meta["source"]) == (r["exactness"], r["depth"], r["source"])
            assert canonical_hash(parse(s.original)) == canonical_hash(parse(r["original"]))
            assert prompt_messages(s) == r["prompt"], (sp, r["state_id"])
            # the recorded path to the state, by the steps' parent keys
            want, k = [], r["parent_step_key"]
            while k is not None:
                want.append(strategy[k])
                k = parent[k]
            assert s.path == tuple(reversed(want)) and len(s.path) == s.depth
            sources.append(r["source"])
        # the SFT steps are replay's answers; each starts from one of the states
        assert {(x.kernel_id, canonical_hash(parse(x.before_leir))[:16]) for x in inp.sft_steps} <= set(by_id)
    # every SFT prompt is a state; pair-only prompts (a chosen side held out of SFT by a content
    # rule: its chosen must be improving or preparatory and coherent) are counted in the
    # length check above when a release has them — this fixture's pairs all start from SFT prompts
    assert sources.count("sft") > 0

    # a folder with the data tables only (no configs): the same states but the pair-only ones
    # below the roots (every kernel is a root state either way)
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(path, bare, ignore=shutil.ignore_patterns("configs"))
    for sp in prompts:
        want = {(r["kernel_id"], r["state_id"], r["depth"], r["exactness"]) for r in prompts[sp]
                if r["source"] != "pair" or r["depth"] == 0}
        got = {(s.kernel_id, s.state_id, s.depth, s.exactness) for s in from_release(bare, sp).states}
        assert got == want, sp


def test_eval_inputs_reject_a_malformed_prompts_config(release, tmp_path):
    import shutil

    from steptp.eval.inputs import EvalInputError, from_release

    path, _, _ = release
    bad = tmp_path / "bad"
    shutil.copytree(path, bad)
    f = bad / "configs/prompts/test.parquet"
    df = pl.read_parquet(f)
    for column, value, msg in (("exactness", "approximate", "unknown exactness 'approximate'"),
                               ("kernel_id", "nope", "kernel 'nope' is not a kernel"),
                               ("program", "kernel f32 broken(", "does not parse")):
        df.with_columns(pl.lit(value).alias(column)).write_parquet(f)
        with pytest.raises(EvalInputError, match=re.escape(msg)) as e:
            from_release(bad, "test")
        assert "configs/prompts/test.parquet: row 0" in str(e.value)


def test_reward_scores_the_release_answers_and_bounds_garbage(release, tmp_path):
    from steptp.rl import SCORES, reward
    from steptp.rl.reward import MAX_CHARS

    path, _, _ = release
    prompts = _load(path, "prompts", tmp_path)
    state = {r["prompt"][1]["content"]: r for sp in prompts for r in prompts[sp]}
    sft = _load(path, cache=tmp_path)
    rows = [(state[x["messages"][1]["content"]], x["messages"][2]["content"]) for sp in sft for x in sft[sp]]

    def cols(rs):
        return {k: [r[k] for r in rs] for k in ("original", "program", "exactness", "target", "kernel_id")}

    # the release's own answers are legal and faithful (conversational completions, as GRPO gives)
    got = reward([s["prompt"] for s, _ in rows], [[{"role": "assistant", "content": a}] for _, a in rows],
                 **cols([s for s, _ in rows]))
    assert got == [SCORES["faithful"]] * len(rows)

    from steptp import strategies as S
    from steptp.leir import parse

    def canon(text):
        return S.canonical(parse(text))

    def program(reply):
        return json.loads(reply.split("</think>\n", 1)[1])["program"]

    s, a = rows[0]
    ans = json.loads(a.split("</think>\n", 1)[1])
    noop = "<think>\nx\n</think>\n" + json.dumps({**ans, "program": s["program"]})
    # another element type: the kernel's signature changes, the program still checks
    dtype = re.match(r"kernel (\w+) ", ans["program"]).group(1)
    retyped = re.sub(r"^kernel \w+ ", f"kernel {'f64' if dtype != 'f64' else 'f32'} ", ans["program"], count=1)
    other_sig = "<think>\nx\n</think>\n" + json.dumps({**ans, "program": retyped})
    # a legal stated action with another program of the same kernel (not the state, not the
    # action's result): not what it states
    unfaithful = next(("<think>\nx\n</think>\n" + json.dumps({**ans, "program": program(a2)})
                       for s2, a2 in rows if s2["kernel_id"] == s["kernel_id"]
                       and canon(program(a2)) not in (canon(s["program"]), canon(ans["program"]))), None)
    texts = ["no answer", "<think>\nnever closed", "<think>x</think>" + "{" * (MAX_CHARS * 4), noop, other_sig]
    want = [SCORES["unparsable"], SCORES["unparsable"], SCORES["unparsable"], SCORES["illegal"], SCORES["bad_signature"]]
    if unfaithful:
        texts.append(unfaithful)
        want.append(SCORES["unfaithful"])
    assert reward(None, texts, **cols([s] * len(texts))) == want
    with pytest.raises(TypeError, match="prompts"):
        reward(None, [a], exactness=["exact"])


# --------------------------------------------------------------------------- TRL, no glue
# ChatML with the assistant content between {% generation %} markers: transformers derives the
# assistant-token mask (SFTConfig.assistant_only_loss) from them
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ m['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")


def tiny_model(texts, folder: Path, vocab: int = 512) -> str:
    """A byte-level BPE tokenizer trained on ``texts`` and a 2-layer Qwen2 with hidden size 32,
    saved together in ``folder`` (what a trainer's ``model=<path>`` loads)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, chat_template=CHAT_TEMPLATE)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32768,
                      tie_word_embeddings=True, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                      bos_token_id=None)
    Qwen2ForCausalLM(cfg).save_pretrained(folder)
    fast.save_pretrained(folder)
    return str(folder)


def doc_blocks() -> list[str]:
    """docs/train.md's python blocks but the first (the reader's own model and settings)."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks[0].startswith("# setup")
    return blocks[1:]


@pytest.mark.slow
def test_trl_trains_on_the_release_with_no_glue(release, tmp_path):
    """docs/train.md executed: SFT (assistant-only loss), DPO and GRPO (the static reward) for a
    few steps each, from ``load_dataset(release, config)`` with no conversion."""
    path, _, stats = release
    texts = [ln for f in sorted((path / "chat").glob("*.jsonl")) for ln in f.read_text().splitlines()]
    model = tiny_model(texts, tmp_path / "tiny")
    ns = {"release": str(path), "model": model, "completion_tokens": 8,
          "run": dict(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2,
                      learning_rate=1e-3, logging_steps=1, report_to="none", use_cpu=True, save_strategy="no",
                      seed=0, dataloader_num_workers=0)}
    blocks = doc_blocks()
    assert len(blocks) == 3
    import torch

    torch.set_num_threads(2)
    for code, trainer in zip(blocks, ("SFTTrainer", "DPOTrainer", "GRPOTrainer")):
        assert f"{trainer}(" in code
        exec(compile(code, f"docs/train.md:{trainer}", "exec"), ns)   # our own docs, not user input
        t = ns["trainer"]
        assert type(t).__name__ == trainer and t.state.global_step == 2
        losses = [h["loss"] for h in t.state.log_history if "loss" in h]
        assert losses and all(x == x for x in losses), (trainer, t.state.log_history)   # ran, no NaN
        if trainer == "SFTTrainer":
            # the loss covers the assistant turn only: the labelled tokens are the reasoning and answer
            row = t.train_dataset[0]
            ids = [i for i, lab in zip(row["input_ids"], row["labels"]) if lab != -100]
            assert 0 < len(ids) < len(row["input_ids"])
            text = t.processing_class.decode(ids)
            assert text.startswith("<think>\n") and text.endswith("<|im_end|>") and "```leir" not in text
        if trainer == "GRPOTrainer":
            rewards = [h["reward"] for h in t.state.log_history if "reward" in h]
            assert rewards and all(-1.0 <= r <= 1.0 for r in rewards)


@pytest.mark.slow
def test_measured_reward_builds_verifies_and_times(release, tmp_path):
    """The measured strength: the release's answer verifies against the original and is timed
    (a speedup bonus on top of the static score); a program with one operator changed is legal
    text but fails verification; a second call is answered from the measurer's cache."""
    import time

    from steptp.measure import MeasureConfig
    from steptp.rl import SCORES, MeasuredReward, judge_completions, reward

    path, _, _ = release
    prompts = _load(path, "prompts", tmp_path)
    state = {r["prompt"][1]["content"]: r for sp in prompts for r in prompts[sp]}
    sft = _load(path, cache=tmp_path)
    x = next(sft[sp][0] for sp in sft if len(sft[sp]))
    s, a = state[x["messages"][1]["content"]], x["messages"][2]["content"]
    ans = json.loads(a.split("</think>\n", 1)[1])
    op = " + " if " + " in ans["program"] else " * "
    wrong = "<think>\nx\n</think>\n" + json.dumps({**ans, "program": ans["program"].replace(op, " - ", 1)})
    comps = [a, wrong, "no answer"]
    cols = {k: [s[k]] * len(comps) for k in ("original", "program", "exactness", "target", "kernel_id")}
    assert reward(None, comps, **cols) == [SCORES["faithful"], SCORES["unfaithful"], SCORES["unparsable"]]
    m = MeasuredReward(config=MeasureConfig(min_repeat_ms=10, repeats=5, num_threads=1, timeout_s=60),
                       cache=tmp_path / "cache.sqlite")
    try:
        js = judge_completions(None, comps, judge=m.judge, **cols)
        assert [j.outcome for j, _ in js] == ["verified", "failed_verification", "unparsable"], js
        j0 = js[0][0]
        assert j0.faithful and j0.step_speedup and j0.step_speedup > 0
        t0 = time.perf_counter()
        got = m(None, comps, **cols)        # verified and timed above: the cache answers
        assert time.perf_counter() - t0 < 5.0
        bonus = max(-1.0, min(1.0, math.log2(j0.step_speedup)))
        assert got == [pytest.approx(SCORES["faithful"] + bonus), SCORES["failed_verification"], SCORES["unparsable"]]
    finally:
        m.close()


@pytest.mark.slow
def test_grpo_trains_with_the_measured_reward(release, tmp_path, monkeypatch):
    """docs/train.md's ``grpo-measured`` block executed: GRPOTrainer for two steps with
    ``MeasuredReward`` (the build/verify/time judge) as its reward. The tiny model's completions
    are judged unparsable (-1.0, and no state is built for them); a release answer passed through
    the same reward callable, with the trainer's own dataset row as its columns, is built,
    verified and timed (a positive score)."""
    from steptp.rl import SCORES

    path, _, _ = release
    texts = [ln for f in sorted((path / "chat").glob("*.jsonl")) for ln in f.read_text().splitlines()]
    model = tiny_model(texts, tmp_path / "tiny")
    monkeypatch.chdir(tmp_path)             # the block's cache file lands in the run's folder
    ns = {"release": str(path), "model": model, "completion_tokens": 8,
          "run": dict(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2,
                      learning_rate=1e-3, logging_steps=1, report_to="none", use_cpu=True, save_strategy="no",
                      seed=0, dataloader_num_workers=0)}
    code = re.search(r"```python grpo-measured\n(.*?)```", DOC.read_text(), re.S).group(1)
    import torch

    torch.set_num_threads(2)
    try:
        exec(compile(code, "docs/train.md:grpo-measured", "exec"), ns)   # our own docs, not user input
        t, reward = ns["trainer"], ns["reward"]
        assert type(t).__name__ == "GRPOTrainer" and t.state.global_step == 2
        assert (tmp_path / "rewards.sqlite").is_file()
        # two steps of one prompt and two generations each: four completions, all judged
        st = reward.stats()
        assert st["completions"] == 4 and st["outcomes"] == {"unparsable": 4}, st
        logged = [h["rewards/steptp_measured_reward/mean"] for h in t.state.log_history
                  if "rewards/steptp_measured_reward/mean" in h]
        assert logged == [SCORES["unparsable"]] * 2, t.state.log_history
        # nothing passed the static checks: no state was built, verified or timed for them
        ms = reward.measurer.stats
        assert ms["verify_runs"] + ms["verify_hits"] + ms["time_runs"] + ms["time_hits"] == 0, ms

        # a known-good completion through the same callable, with the columns TRL passes
        sft = _load(path, cache=tmp_path / "hf")
        answers = {x["messages"][1]["content"]: x["messages"][2]["content"] for sp in sft for x in sft[sp]}
        row = next(r for r in t.train_dataset if r["prompt"][1]["content"] in answers)
        good = [{"role": "assistant", "content": answers[row["prompt"][1]["content"]]}]
        garbage = [{"role": "assistant", "content": "<think>\nno answer"}]
        cols = {k: [v, v] for k, v in row.items() if k != "prompt"}
        got = reward([row["prompt"]] * 2, [good, garbage], **cols)
        assert SCORES["faithful"] - 1.0 <= got[0] <= SCORES["faithful"] + 1.0 and got[0] > 0, got
        assert got[1] == SCORES["unparsable"]
        st = reward.stats()
        assert st["completions"] == 6 and st["outcomes"] == {"unparsable": 5, "verified": 1}, st
        assert st["seconds"] > 0 and st["per_second"] > 0
        assert reward.measurer.stats["verify_runs"] == 1 and reward.measurer.stats["time_runs"] == 2
    finally:
        if "reward" in ns:
            ns["reward"].close()
