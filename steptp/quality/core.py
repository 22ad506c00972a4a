"""Build GX suites from ``expectations/*.json`` (``expectations_dir``), derive the checked columns,
run, write Data Docs."""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import polars as pl

from ..measure.significance import SignificanceRule
from ..params import Curate, ParamsError, Settings, settings
from ..records import StepRecord, write_text_atomic

SUITES = ("kernels", "steps", "export", "roles", "pairs", "splits")
_PARAM = re.compile(r"^\$\{([A-Za-z0-9_.]+)\}$")



def expectations_dir() -> Path:
    """``$STEPTP_EXPECTATIONS`` (a project's own suites), else the suites shipped in the package
    (``steptp/quality/expectations``): an installed steptp gates releases wherever it runs."""
    env = os.environ.get("STEPTP_EXPECTATIONS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent / "expectations"


def _subst(v: Any, params: Settings) -> Any:
    if isinstance(v, str) and (m := _PARAM.match(v)):
        return params.lookup(m.group(1))
    if isinstance(v, list):
        return [_subst(x, params) for x in v]
    if isinstance(v, dict):
        return {k: _subst(x, params) for k, x in v.items()}
    return v


def load_suite_spec(name: str, params: Settings | Mapping[str, Any] | None = None,
                    directory: str | Path | None = None) -> dict[str, Any]:
    """The suite ``name`` with its ``${section.key}`` values taken from the settings."""
    d = Path(directory) if directory else expectations_dir()
    spec = json.loads((d / f"{name}.json").read_text())
    s = settings(params)
    try:
        spec["expectations"] = [{**e, "kwargs": _subst(e.get("kwargs", {}), s)}
                                for e in spec["expectations"]]
    except ParamsError as e:
        raise ParamsError(f"{d / f'{name}.json'}: {e}") from None
    return spec


# ---------------------------------------------------------------------------- derived tables
def _cap(steps: pl.DataFrame, cfg: Curate) -> int | None:
    counts = Counter(steps["strategy"].to_list())
    n = len(steps)
    if n < cfg.balance_min_steps or len(counts) < cfg.balance_min_strategies:
        return None
    # the cap curation used was computed before balancing; recomputed on the released counts
    # (already capped) it is at most that cap, so this bound is conservative only when the
    # report is missing
    from ..curate.core import share_cap

    return share_cap(counts, cfg.max_strategy_share)


def derived_tables(release: str | Path, params: Settings | Mapping[str, Any] | None = None
                   ) -> dict[str, pl.DataFrame]:
    """The three tables the suites check, with their derived columns."""
    from ..format.chat import check_line

    release = Path(release)
    params = settings(params)
    kernels = pl.read_parquet(release / "data/kernels.parquet")
    all_steps, steps = _steps_tables(release / "data/steps.parquet", params.significance)

    # kernels: the workload group (curation's, recomputed with its bound) -> splits of its
    # kernels; a group is whole in one split
    group_of = _workload_group_of(kernels, params.curate)
    grp_splits: dict[int, set] = defaultdict(set)
    for k, sp in kernels.select("kernel_id", "split").iter_rows():
        grp_splits[group_of[k]].add(sp)
    kernels = kernels.with_columns(pl.Series("group_n_splits", [
        len(grp_splits[group_of[k]]) for k in kernels["kernel_id"]], dtype=pl.Int64))

    # steps
    report_path = release / "stats.json"
    cap = None
    diversity: dict[str, Any] = {}
    if report_path.exists():
        rep = json.loads(report_path.read_text())
        bal = (rep.get("balance") or {})
        cap = bal.get("cap") if bal.get("applied") else None
        diversity = rep.get("diversity") or {}
    else:
        cap = _cap(steps, params.curate)
    counts = Counter(steps["strategy"].to_list())
    known = set(kernels["kernel_id"].to_list())
    cot_ok = []
    for r in steps.select("cot", "cot_text").iter_rows(named=True):
        cot_ok.append(_cot_valid(r["cot"], r["cot_text"]))
    steps = steps.with_columns(
        pl.Series("speedup_finite", [x is not None and math.isfinite(x) for x in steps["step_speedup"].to_list()]),
        pl.Series("strategy_over_cap", [counts[s] - cap if cap else 0 for s in steps["strategy"].to_list()],
                  dtype=pl.Int64),
        pl.Series("cot_valid", cot_ok, dtype=pl.Boolean),
        pl.Series("kernel_known", [k in known for k in steps["kernel_id"].to_list()], dtype=pl.Boolean),
        *_share_excess(steps, kernels, diversity),
    )

    # chat examples
    split_of = dict(zip(kernels["kernel_id"].to_list(), kernels["split"].to_list()))
    step_keys = set(steps["step_key"].to_list()) if "step_key" in steps.columns else set()
    rows = []
    for f in sorted((release / "chat").glob("*.jsonl")):
        if f.name.startswith("pairs-"):
            continue
        for line in _lines(f):
            if not line.strip():
                continue
            problems = check_line(line)
            try:
                meta = json.loads(line).get("meta", {})
            except ValueError:
                meta = {}
            rows.append({"file_split": f.stem, "kernel_id": meta.get("kernel_id"), "step_key": meta.get("step_key"),
                         "trajectory_id": meta.get("trajectory_id"), "step_index": meta.get("step_index"),
                         "tokens": (meta.get("tokens") or {}).get("total"),
                         "format_problems": "; ".join(problems)})
    ex_splits: dict[str, set] = defaultdict(set)
    for r in rows:
        ex_splits[r["kernel_id"]].add(r["file_split"])
        if r["kernel_id"] in split_of:
            ex_splits[r["kernel_id"]].add(split_of[r["kernel_id"]])
    for r in rows:
        k = r["kernel_id"]
        r["kernel_n_splits"] = len(ex_splits[k])
        r["group_n_splits"] = len(grp_splits[group_of[k]] | ex_splits[k]) if k in group_of \
            else len(ex_splits[k])
        r["split_matches_file"] = split_of.get(k) == r["file_split"]
        r["in_steps_table"] = r["step_key"] in step_keys
    chat = pl.DataFrame(rows, schema={"file_split": pl.Utf8, "kernel_id": pl.Utf8, "step_key": pl.Utf8,
                                      "trajectory_id": pl.Utf8,
                                      "step_index": pl.Int64, "tokens": pl.Int64, "format_problems": pl.Utf8,
                                      "kernel_n_splits": pl.Int64, "group_n_splits": pl.Int64,
                                      "split_matches_file": pl.Boolean, "in_steps_table": pl.Boolean})
    pairs = _pairs_table(release, all_steps, split_of)
    return {"kernels": kernels, "steps": steps, "chat": chat, "roles": all_steps, "pairs": pairs,
            "splits": _splits_table(group_of, rows)}


def _share_excess(steps: pl.DataFrame, kernels: pl.DataFrame, diversity: Mapping[str, Any]
                  ) -> list[pl.Series]:
    """``family_share_excess`` and ``kernel_share_excess``: the share of the SFT examples held by
    each step's operator family (its kernel group: kernels differing only in shapes), recomputed
    from the tables, minus the cap curation applied (``stats.json`` ``diversity``); 0 where the
    caps were not applied or cannot hold (too few groups)."""
    from ..curate.core import diversity_keys
    from ..records import KernelRecord

    n = len(steps)
    cannot = diversity.get("cannot_hold") or {}
    fields = set(KernelRecord.model_fields)
    used = set(steps["kernel_id"].to_list())
    recs = {r["kernel_id"]: KernelRecord.from_row({k: v for k, v in r.items() if k in fields})
            for r in kernels.filter(pl.col("kernel_id").is_in(list(used))).iter_rows(named=True)}
    keys = {k: diversity_keys(recs.get(k), k) for k in sorted(used)}
    out = []
    for col, code, share_key, key in (
            ("family_share_excess", "family_cap", "max_family_share", lambda k: keys[k][0]),
            ("kernel_share_excess", "kernel_cap", "max_kernel_share", lambda k: keys[k][1])):
        if not n or not diversity.get("applied") or code in cannot:
            out.append(pl.Series(col, [0.0] * n, dtype=pl.Float64))
            continue
        of = {k: key(k) for k in sorted(used)}
        counts = Counter(of[k] for k in steps["kernel_id"].to_list())
        share = float(diversity[share_key])
        out.append(pl.Series(col, [counts[of[k]] / n - share for k in steps["kernel_id"].to_list()],
                             dtype=pl.Float64))
    return out


def _lines(path: Path) -> Iterator[str]:
    """The lines of a text file as ``read_text().splitlines()`` gives them, read a line at a
    time (a release's pair files are larger than its memory should be)."""
    with open(path) as f:
        for raw in f:
            yield from raw.splitlines()


#: columns of the steps table read only for the SFT rows (the steps suite checks their reasoning)
_SFT_ONLY = StepRecord.REASONING_FIELDS


def _steps_tables(path: Path, rule: SignificanceRule) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(every searched step with the roles columns (``_roles_table``), the SFT steps with every
    column and the roles columns). The reasoning columns, most of the table's size, are read for
    the SFT rows alone."""
    names = list(pl.read_parquet_schema(path))
    if "sft" not in names:
        all_steps = _roles_table(pl.read_parquet(path), rule)
        return all_steps, all_steps
    all_steps = _roles_table(pl.read_parquet(path, columns=[c for c in names if c not in _SFT_ONLY]), rule)
    sft = pl.scan_parquet(path).filter(pl.col("sft")).collect()
    derived = all_steps.filter(pl.col("sft")).select(c for c in all_steps.columns if c not in names)
    return all_steps, sft.with_columns(derived)


#: searched steps made records at once (whole trajectories: a role depends on its search tree only)
ROLES_BATCH = 4096


def _roles_table(df: pl.DataFrame, rule: SignificanceRule) -> pl.DataFrame:
    """Every step with ``role_recomputed`` (the roles of the recorded timings, by ``rule``),
    ``role_consistent`` and ``spread_max`` (the larger spread of the timings the role was
    decided on; None for a role no timing decided). The rows become records a batch of whole
    trajectories at a time (a trajectory's rows are one search tree; their order is kept)."""
    from ..search.roles import Tree, assign_roles

    if "role" not in df.columns or df.is_empty():
        return df.with_columns(pl.lit(None, dtype=pl.Utf8).alias("role_recomputed"),
                               pl.lit(True).alias("role_consistent"),
                               pl.lit(None, dtype=pl.Float64).alias("spread_max"))
    fields = [c for c in df.columns if c in StepRecord.model_fields]
    trees: dict[str, list[int]] = {}
    for i, t in enumerate(df["trajectory_id"].to_list()):
        trees.setdefault(t, []).append(i)
    batches: list[list[int]] = [[]]
    for rows in trees.values():
        if batches[-1] and len(batches[-1]) + len(rows) > ROLES_BATCH:
            batches.append([])
        batches[-1].extend(rows)
    n = df.height
    role: list[str | None] = [None] * n
    consistent: list[bool | None] = [None] * n
    sp: list[float | None] = [None] * n
    for rows in batches:
        recs = [StepRecord.from_row(r) for r in df[rows].select(fields).iter_rows(named=True)]
        again = assign_roles(recs, rule)
        tree = Tree(recs)
        for k, (i, s, r) in enumerate(zip(rows, recs, again)):
            role[i], consistent[i] = r.role, r.role == s.role
            if r.role not in ("improving", "preparatory"):
                continue
            b = s.paired_before or s.before
            other = (s.paired_after or s.after) if r.role == "improving" else (
                s.paired_best or recs[tree.best_descendant(k)].after)
            sp[i] = max(b.spread, other.spread)
    return df.with_columns(
        pl.Series("role_recomputed", role, dtype=pl.Utf8),
        pl.Series("role_consistent", consistent, dtype=pl.Boolean),
        pl.Series("spread_max", sp, dtype=pl.Float64))


def _pairs_table(release: Path, all_steps: pl.DataFrame, split_of: Mapping[str, str]) -> pl.DataFrame:
    from ..export.pairs import check_pair_line

    # a pair's steps by key (the last row of a key, as a dict of them would have it); their
    # programs are read from the column when a pair names them
    index = ({k: i for i, k in enumerate(all_steps["step_key"].to_list())}
             if "step_key" in all_steps.columns else {})
    programs = all_steps["before_leir"] if index else None
    rows = []
    for f in sorted((release / "chat").glob("pairs-*.jsonl")):
        sp = f.stem[len("pairs-"):]
        for line in _lines(f):
            if not line.strip():
                continue
            problems = check_pair_line(line)
            try:
                d = json.loads(line)
                meta = d.get("meta", {})
                user = d["prompt"][1]["content"]
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                d, meta, user = {}, {}, ""
            c, r = meta.get("chosen_step_key"), meta.get("rejected_step_key")
            joins = c in index and r in index
            same = False
            if joins:
                before_c = programs[index[c]]
                same = before_c == programs[index[r]] and before_c.rstrip("\n") in user
            rows.append({"file_split": sp, "pair_key": meta.get("pair_key"), "format_problems": "; ".join(problems),
                         "joins_steps": joins, "same_prompt": same,
                         "chosen_ne_rejected": c is not None and c != r,
                         "split_matches_file": split_of.get(meta.get("kernel_id")) == sp})
    return pl.DataFrame(rows, schema={"file_split": pl.Utf8, "pair_key": pl.Utf8, "format_problems": pl.Utf8,
                                      "joins_steps": pl.Boolean, "same_prompt": pl.Boolean,
                                      "chosen_ne_rejected": pl.Boolean, "split_matches_file": pl.Boolean})


def _workload_group_of(kernels: pl.DataFrame, cfg: Curate) -> dict[str, int]:
    """kernel_id -> index of its workload group, as curation groups them (``group_bound``)."""
    from ..curate.core import group_bound, workload_groups
    from ..records import KernelRecord, Occurrence

    ks = [KernelRecord.model_construct(kernel_id=k, occurrences=[Occurrence(**o) for o in json.loads(occ)])
          for k, occ in kernels.select("kernel_id", "occurrences").iter_rows()]
    groups = workload_groups(ks, max_size=group_bound(cfg.splits, len(ks)))
    return {k: i for i, g in enumerate(groups) for k in g}


def _splits_table(group_of: Mapping[str, int], chat_rows: list[dict[str, Any]]) -> pl.DataFrame:
    """One row per split: SFT examples, and whether the split must hold some (at least as many
    workload groups carry examples as there are splits)."""
    from ..curate.core import SPLITS

    n_groups = len({group_of[r["kernel_id"]] for r in chat_rows if r["kernel_id"] in group_of})
    counts = Counter(r["file_split"] for r in chat_rows)
    required = n_groups >= len(SPLITS)
    return pl.DataFrame([{"split": sp, "examples": counts.get(sp, 0), "groups_with_examples": n_groups,
                          "required": required, "nonempty_or_exempt": counts.get(sp, 0) > 0 or not required}
                         for sp in SPLITS])


def _cot_valid(cot: str | None, cot_text: str | None) -> bool:
    try:
        d = json.loads(cot) if cot else {}
    except ValueError:
        return False
    if not d:
        return False
    try:
        from ..format.cot_schema import cot_from_record

        cot_from_record(d)
    except Exception:  # noqa: BLE001
        return False
    return True


# ---------------------------------------------------------------------------- running
@dataclass
class ValidationReport:
    success: bool
    suites: dict[str, dict[str, Any]] = field(default_factory=dict)
    docs: str = ""

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [f for s in self.suites.values() for f in s["failures"]]

    def to_dict(self) -> dict[str, Any]:
        return {"success": self.success, "docs": self.docs, "suites": self.suites}


#: expectations on a table as a whole that read no column (any other table-level one, e.g. on
#: the column names, gets every column)
_ROW_COUNT = ("expect_table_row_count_to_be_between", "expect_table_row_count_to_equal")
_COLUMN_KWARGS = ("column", "column_A", "column_B")


def _checked_columns(spec: Mapping[str, Any], df: pl.DataFrame) -> list[str]:
    """The columns of ``df`` a suite reads: only those go to pandas (the steps table's programs and
    reasoning as Python objects would take gigabytes). Every column when an expectation could
    read others (a table-level one, a ``row_condition``, one naming no column)."""
    cols: set[str] = set()
    for e in spec["expectations"]:
        kw = e.get("kwargs") or {}
        if e["type"] in _ROW_COUNT and not kw.get("row_condition"):
            continue
        named = [kw[k] for k in _COLUMN_KWARGS if isinstance(kw.get(k), str)]
        if isinstance(kw.get("column_list"), list):
            named += [c for c in kw["column_list"] if isinstance(c, str)]
        if not named or kw.get("row_condition") or e["type"].startswith("expect_table_"):
            return df.columns
        cols.update(named)
    return [c for c in df.columns if c in cols]


def _to_pandas(df: pl.DataFrame):
    """Pandas for GX; nested columns (structs/lists) are not checked and become JSON text."""
    nested = [c for c, t in df.schema.items() if isinstance(t, (pl.Struct, pl.List))]
    if nested:
        df = df.with_columns([pl.col(c).map_elements(lambda v: json.dumps(v, default=str), return_dtype=pl.Utf8)
                              for c in nested])
    return df.to_pandas()


def validate_release(release: str | Path, params: Settings | Mapping[str, Any] | None = None,
                     docs_dir: str | Path | None = None, expectations: str | Path | None = None,
                     write_report: bool = True) -> ValidationReport:
    """Run every suite on ``release``; write Data Docs to ``docs_dir`` (default
    ``release/data_docs``) and ``validation.json`` into the release."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx

    release = Path(release)
    params = settings(params)
    docs = Path(docs_dir) if docs_dir else release / "data_docs"
    tables = derived_tables(release, params)
    ctx = gx.get_context(mode="ephemeral")
    try:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    except Exception:  # noqa: BLE001 - cosmetic only
        pass
    try:
        ctx.delete_data_docs_site("local_site")
    except Exception:  # noqa: BLE001 - not present in every version
        pass
    ctx.add_data_docs_site(site_name="release", site_config={
        "class_name": "SiteBuilder", "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs.resolve())}})
    ds = ctx.data_sources.add_pandas("release")
    vds = []
    specs = {}
    for name in SUITES:
        spec = load_suite_spec(name, params, expectations)
        specs[name] = spec
        suite = gx.ExpectationSuite(name=name)
        for e in spec["expectations"]:
            cls = _expectation_class(e["type"])
            suite.add_expectation(cls(**e["kwargs"], meta={"why": e.get("why", "")}))
        suite = ctx.suites.add(suite)
        bd = ds.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
        vds.append(ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=bd, suite=suite)))
    report = ValidationReport(success=True)
    for name, vd in zip(SUITES, vds):
        # no Data Docs action per checkpoint: each one rebuilt the site's index (the pages are
        # built once, below, from every suite's stored result)
        cp = ctx.checkpoints.add(gx.Checkpoint(name=f"{name}_gate", validation_definitions=[vd]))
        df = tables[specs[name]["table"]]
        cres = cp.run(batch_parameters={"dataframe": _to_pandas(df.select(_checked_columns(specs[name], df)))})
        del df
        res = next(iter(cres.run_results.values()))
        fails = []
        for r in res.results:
            if not r.success:
                cfg = r.expectation_config
                exc = r.exception_info if isinstance(r.exception_info, dict) else {}
                fails.append({"suite": name, "expectation": cfg.type,
                              "column": cfg.kwargs.get("column"), "why": (cfg.meta or {}).get("why", ""),
                              "unexpected": [str(x) for x in (r.result or {}).get("partial_unexpected_list", [])[:5]],
                              "observed": str((r.result or {}).get("observed_value", ""))[:200],
                              "exception": exc.get("exception_message")})
        report.suites[name] = {"success": bool(res.success), "evaluated": len(res.results),
                               "failed": len(fails), "failures": fails}
        report.success = report.success and bool(res.success)
    ctx.build_data_docs(site_names=["release"])
    report.docs = str((docs / "index.html").resolve())
    if write_report:
        write_text_atomic(release / "validation.json", json.dumps(report.to_dict(), indent=1) + "\n")
    return report


def _expectation_class(type_name: str):
    import great_expectations as gx

    cls_name = "".join(p.capitalize() for p in type_name.split("_"))
    cls = getattr(gx.expectations, cls_name, None)
    if cls is None:
        raise ValueError(f"unknown expectation type {type_name!r} (no gx.expectations.{cls_name})")
    return cls
