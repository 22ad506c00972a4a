"""The release as a Hugging Face dataset repository: ``load_dataset(release)`` with no glue.

``datasets`` reads a folder by the ``configs`` of its card's YAML front matter; without them it
guesses splits from file names (and takes ``validation.json``, the quality report, for a
validation split). Every config is parquet: ``datasets`` picks one loader per repository, so a
JSON config beside parquet ones fails. One file per (config, split)::

    configs/sft/{split}.parquet          messages, meta            (default; SFTTrainer)
    configs/preference/{split}.parquet   prompt, chosen, rejected, meta      (DPOTrainer)
    configs/prompts/{split}.parquet      prompt + the checker's inputs       (GRPOTrainer)
    configs/steps|kernels|trajectories/{split}.parquet   the data/ tables' rows of that split

A split with no rows has no file (``datasets`` refuses an empty one) and is left out of the
config; rows of no split (kernels not assigned to one) are only in ``data/``. The chat JSONL
files stay where they were (``chat/``, read by the quality gates and the eval) outside every
config's paths.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import polars as pl

from ..params import Settings
from ..records import write_table

SPLITS = ("train", "validation", "test")
CONFIG_DIR = "configs"
CONFIGS = ("sft", "preference", "prompts", "steps", "kernels", "trajectories")
DEFAULT_CONFIG = "sft"
# the max_length settings a trainer is commonly run with (TRL's default is 1024)
MAX_LENGTHS = (1024, 2048, 4096, 8192)


def config_digest(out: Path, name: str) -> str:
    """sha256 (12 hex) over a config's files and their content."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted((out / CONFIG_DIR / name).glob("*.parquet")):
        h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:12]


def write_config(out: Path, name: str, df: pl.DataFrame) -> dict[str, int]:
    """Write ``df`` (with a ``split`` column) as ``configs/<name>/<split>.parquet``, one file per
    split with rows; returns the rows per split written. All splits come from one frame so they
    share one schema (``datasets`` casts every file of a config to the first one's)."""
    counts: dict[str, int] = {}
    for sp in SPLITS:
        part = df.filter(pl.col("split") == sp)
        if part.height:
            counts[sp] = write_split(out, name, sp, part)
    return counts


def write_split(out: Path, name: str, split: str, rows: pl.DataFrame) -> int:
    """Write ``rows`` (all of ``split``, with the config's schema) as ``configs/<name>/<split>.parquet``
    (``write_config`` a split at a time, for a config too large to hold whole); returns their number."""
    write_table(rows, out / CONFIG_DIR / name / f"{split}.parquet")
    return rows.height


def frame(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """Rows (nested dicts and lists) as one frame, types inferred over every row."""
    return pl.DataFrame(list(rows), infer_schema_length=None)


def data_files(counts: Mapping[str, Mapping[str, int]], digests: Mapping[str, str] | None = None,
               release: str = "") -> list[dict[str, Any]]:
    """The ``configs`` entry of the card's front matter. Each config's ``description`` names its
    files' digest: ``datasets`` (5.2) keys its cache of a local folder by the folder's name and
    the configs' YAML, not by file content, so without it a release rebuilt in place, or the
    ``latest`` link moved to a new release, would load the previous rows."""
    out = []
    for name in CONFIGS:
        per = counts.get(name) or {}
        if not per:
            continue
        c: dict[str, Any] = {"config_name": name}
        if name == DEFAULT_CONFIG:
            c["default"] = True
        if (digests or {}).get(name):
            c["description"] = f"{name} rows of {release} (files sha256 {digests[name]})"
        c["data_files"] = [{"split": sp, "path": f"{CONFIG_DIR}/{name}/{sp}.parquet"}
                           for sp in SPLITS if per.get(sp)]
        out.append(c)
    return out


def size_category(n: int) -> str:
    for lim, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                       (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if n < lim:
            return label
    return "n>10M"


def front_matter(stats: Mapping[str, Any], license_id: str | None) -> str:
    """The card's YAML front matter (Hub metadata and the ``datasets`` configs)."""
    import yaml

    counts = stats.get("configs") or {}
    largest = max((sum(v.values()) for v in counts.values()), default=0)
    meta = {
        "pretty_name": f"{stats['name']} {stats['version']} (Step-TP)",
        "license": license_id or Settings.model_fields["license"].default,
        "task_categories": ["text-generation"],
        "tags": ["code", "tensor-programs", "compiler-optimization", "chain-of-thought", "sft",
                 "dpo", "grpo", "steptp"],
        "size_categories": [size_category(largest)],
        "configs": data_files(counts, stats.get("config_digests"), f"{stats['name']} {stats['version']}"),
    }
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, default_flow_style=False) + "---\n\n"


def fits(tokens: Iterable[int], limits: Sequence[int] = MAX_LENGTHS) -> dict[int, int]:
    """How many of the examples (total tokens each) fit in each max_length."""
    t = list(tokens)
    return {lim: sum(1 for x in t if x <= lim) for lim in limits}


def prompt_states(kernels: pl.DataFrame, all_steps: Sequence | pl.DataFrame, sft_keys: set[str],
                  pair_keys: set[str], parents: Mapping[int, int], splits: Mapping[str, str], hardware: str,
                  keys: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every state of the release, once per (kernel, canonical program): the before-program of
    each SFT example, of each pair, and the unscheduled kernels of each split. Each row has the
    chat prompt and what a checker needs to judge a reply there (the kernel's original program,
    the current program, the loosest exactness along the recorded path to it, the target).
    ``all_steps``: StepRecords or a steps table (read by column, no records made); ``keys``:
    their step keys when already computed; ``parents``: ``parent_links`` of them."""
    from ..leir import parse
    from ..leir.batch import many_forms
    from ..leir.canon import canonical_hash
    from ..records import StepRecord, step_keys, table
    from ..exactness import worse
    from ..format import chat
    from ..format.tokens import n_tokens

    steps = all_steps if isinstance(all_steps, pl.DataFrame) else table(all_steps, StepRecord)
    keys = list(keys) if keys is not None else step_keys(steps)
    kernel_of, depth_of = steps["kernel_id"].to_list(), steps["step_index"].to_list()
    exactness, targets, before = steps["exactness"].to_list(), steps["target"].to_list(), steps["before_leir"]
    originals: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    hashes: dict[str, str] = {}     # parsing dominates: siblings and pairs share their prompt
    tokens = functools.lru_cache(maxsize=None)(n_tokens)   # the system turn of every row

    def add(kernel_id: str, program: str, source: str, target: str, exactness: str, depth: int,
            parent: str | None) -> None:
        if kernel_id not in originals:
            return
        if (h := hashes.get(program)) is None:
            h = hashes[program] = canonical_hash(parse(program))
        key = (kernel_id, h)
        if key in seen:
            return
        seen.add(key)
        # the text as the examples show it (names as the rewrites gave them): an RL prompt is
        # then the very prompt of the SFT example from that state
        msgs = chat.prompt_messages(program, hardware or target)
        rows.append({"prompt": msgs, "kernel_id": kernel_id, "split": splits.get(kernel_id),
                     "state_id": key[1][:16], "source": source, "original": originals[kernel_id],
                     "program": program, "exactness": exactness, "target": target, "hardware": hardware,
                     "depth": depth, "parent_step_key": parent,
                     "prompt_tokens": sum(tokens(m["content"]) for m in msgs)})

    kdf = kernels.filter(pl.col("split").is_not_null())
    if "raise_ok" in kdf.columns:
        kdf = kdf.filter(pl.col("raise_ok"))
    krows = list(kdf.select("kernel_id", "leir", *(["target"] if "target" in kdf.columns else []))
                 .sort("kernel_id").iter_rows(named=True))
    # parsing is most of the time: every program is parsed once, up front, in worker processes
    for r, (text, h) in zip(krows, many_forms([r["leir"] for r in krows])):
        originals[r["kernel_id"]] = text
        # the printed text parses back to this program: its hash spares a parse of every step
        # that starts from the unscheduled kernel
        hashes.setdefault(text, h)
    index = {k: i for i, k in enumerate(keys)}
    states = [(source, index[k]) for source, chosen in (("sft", sft_keys), ("pair", pair_keys))
              for k in sorted(chosen, key=lambda k: (kernel_of[index[k]], depth_of[index[k]], k))]
    todo = list(dict.fromkeys(p for _, i in states if kernel_of[i] in originals
                              and (p := before[i]) not in hashes))
    hashes.update((t, h) for t, (_, h) in zip(todo, many_forms(todo)))
    for source, i in states:
        exact, j, hops = "exact", i, 0
        while j in parents and hops <= len(keys):
            j, hops = parents[j], hops + 1
            exact = worse(exact, exactness[j])
        p = parents.get(i)
        add(kernel_of[i], before[i], source, targets[i], exact, depth_of[i], keys[p] if p is not None else None)
    # an unscheduled kernel a step starts from is already in, with that step's names
    for r in krows:
        add(r["kernel_id"], originals[r["kernel_id"]], "kernel", r.get("target") or "", "exact", 0, None)
    return rows


def card_sections(stats: Mapping[str, Any]) -> list[str]:
    """The card's loading and length sections (the figures come from ``stats``)."""
    counts = stats.get("configs") or {}
    L = stats.get("length_fit") or {}
    ex, pr, pp = L.get("sft") or {}, L.get("preference") or {}, L.get("prompts") or {}

    def row(name: str, d: Mapping[str, Any]) -> str:
        n = d.get("n", 0)
        return f"| {name} | {n} | " + " | ".join(f"{(d.get('fit') or {}).get(str(m), 0)}" for m in MAX_LENGTHS) + " |"

    lines = [
        "## Loading", "",
        "The YAML header of this card declares one `datasets` config per table, every one parquet "
        f"(`{CONFIG_DIR}/<config>/<split>.parquet`), so the folder (or its Hub repository) loads "
        "with no arguments but a name:", "",
        "| config | use | " + " | ".join(SPLITS) + " |", "| --- | --- |" + " ---: |" * len(SPLITS),
        *[f"| `{n}`{' (default)' if n == DEFAULT_CONFIG else ''} | {u} | "
          + " | ".join(str((counts.get(n) or {}).get(sp, 0)) for sp in SPLITS) + " |"
          for n, u in (("sft", "`messages`: SFT (`SFTTrainer`)"),
                       ("preference", "`prompt`, `chosen`, `rejected`: DPO (`DPOTrainer`)"),
                       ("prompts", "`prompt` + the checker's inputs: RL (`GRPOTrainer`)"),
                       ("steps", "every searched step (rewards, returns, trees)"),
                       ("kernels", "the unscheduled kernels"),
                       ("trajectories", "one row per search"))
          if counts.get(n)], "",
        "```python",
        "import os",
        "from datasets import load_dataset",
        "release = os.getcwd()     # run in this folder; or give its path, or its Hub repository id",
        "# (not \".\": datasets names the dataset after the folder, and \".\" has no name)",
        "chat = load_dataset(release)                      # the default config: sft",
        *(["pairs = load_dataset(release, \"preference\")      # a DPO dataset: prompt, chosen, rejected"]
          if counts.get("preference") else []),
        "prompts = load_dataset(release, \"prompts\")",
        "steps = load_dataset(release, \"steps\")",
        "",
        "import polars as pl, json",
        "table = pl.read_parquet(\"data/steps.parquet\")     # every split; site, params, cot: JSON strings",
        "train = table.filter((pl.col(\"split\") == \"train\") & pl.col(\"sft\"))",
        "params = [json.loads(p) for p in train[\"params\"]]",
        "```", "",
        "A split with no rows is absent from its config. Kernels assigned to no split are only in "
        "`data/kernels.parquet`. The same SFT and preference rows are also in `chat/*.jsonl` (the "
        "files the quality gates check); the parquet tables in `data/` hold every row of every split.", "",
        "Trees join by key: `steps.step_key` is a row's identity and `steps.parent_step_key` is the "
        "`step_key` of the step whose after-program is this step's before-program in the same "
        "search (null at a root, the unscheduled kernel). Pairs carry `meta.parent_step_key` (the "
        "parent of the shared before-program) and `meta.chosen_step_key` / `meta.rejected_step_key`.", "",
        "Pairs can be filtered on their `meta`: keep only measured comparisons (both sides built and "
        "verified) with `pairs.filter(lambda r: r[\"meta\"][\"rejected_why\"] == \"slower\")`; keep "
        "pairs whose chosen side is an SFT answer with `r[\"meta\"][\"chosen_is_sft\"]`; keep pairs "
        "decided on interleaved re-timings with `r[\"meta\"][\"compared_on\"] == \"paired_speedup\"`; keep pairs "
        "that fit a length with `max(r[\"meta\"][\"tokens\"][\"chosen\"], r[\"meta\"][\"tokens\"][\"rejected\"]) "
        "+ r[\"meta\"][\"tokens\"][\"prompt\"] <= 4096`.", "",
        "The `prompts` config holds every state of the release once: the unscheduled kernels of "
        "each split (`source` = `kernel`), the before-program of each SFT example (`sft`) and "
        "of each pair (`pair`). Its columns `original`, `program`, `exactness` and `target` are "
        "what `steptp.rl.reward` reads to judge a completion there (TRL passes them to reward "
        "functions as keyword arguments).", "",
        "## Lengths", "",
        "Token counts use `o200k_base`; other tokenizers differ (a smaller vocabulary gives more "
        "tokens). TRL truncates to `max_length` (1024 by default for `SFTTrainer` and "
        "`DPOTrainer`) without a warning, cutting off the answer program: set `max_length` to at "
        "least the longest example you train on, or filter on `meta.tokens`. Rows that fit in "
        "each `max_length`:", "",
        "| config | rows | " + " | ".join(f"≤ {m}" for m in MAX_LENGTHS) + " |",
        "| --- | ---: |" + " ---: |" * len(MAX_LENGTHS),
        row("sft (prompt + answer: `meta.tokens.total`)", ex),
        row("preference (prompt + longer answer)", pr),
        row("prompts (prompt only: `prompt_tokens`)", pp),
        "",
    ]
    return lines


__all__ = ["CONFIGS", "CONFIG_DIR", "DEFAULT_CONFIG", "MAX_LENGTHS", "card_sections", "config_digest", "data_files", "fits",
           "frame", "front_matter", "prompt_states", "write_config", "write_split"]
