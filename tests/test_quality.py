"""Quality gates: the GX suites in expectations/ pass on a good release and stop a bad one."""

from __future__ import annotations

import json
import shutil

import polars as pl
import pytest

from steptp.curate import CurateConfig, curate, read_curated, write_curated
from steptp.export import export_release
from steptp.quality import load_suite_spec, validate_release
from steptp.quality.core import SUITES, _expectation_class


def test_suite_files_are_valid():
    for name in SUITES:
        spec = load_suite_spec(name, {"significance": {"max_spread": 0.3}})
        assert spec["expectations"]
        for e in spec["expectations"]:
            _expectation_class(e["type"])  # a real GX expectation
            assert e.get("why")
            assert not any(isinstance(v, str) and v.startswith("${") for v in e["kwargs"].values())
    steps = load_suite_spec("steps", {"significance": {"max_spread": 0.3}})
    spread = next(e for e in steps["expectations"] if e["kwargs"].get("column") == "spread_max")
    assert spread["kwargs"]["max_value"] == 0.3
    # default when params do not say
    assert next(e for e in load_suite_spec("steps", {})["expectations"]
                if e["kwargs"].get("column") == "spread_max")["kwargs"]["max_value"] == 0.25


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    from _release_records import dataset

    ks, ss, ts = dataset()
    res = curate(ks, ss, ts, CurateConfig())
    d = tmp_path_factory.mktemp("q")
    write_curated(res, d / "cur", ks, ts)
    export_release(read_curated(d / "cur"), d / "good", name="t", version="0")
    return d


@pytest.mark.slow
def test_good_release_passes_and_writes_data_docs(staged):
    rep = validate_release(staged / "good", {})
    assert rep.success, rep.failures
    assert (staged / "good/data_docs/index.html").is_file()
    assert set(rep.suites) == {"kernels", "steps", "export", "roles", "pairs", "splits"}
    # a validation page per suite (the site is built once, after every checkpoint ran)
    for suite in rep.suites:
        assert list((staged / "good/data_docs/validations" / suite).rglob("*.html")), suite
    assert json.loads((staged / "good/validation.json").read_text())["success"] is True


@pytest.mark.slow
def test_bad_release_fails_the_gates(staged):
    bad = staged / "bad"
    shutil.copytree(staged / "good", bad, ignore=shutil.ignore_patterns("data_docs"))
    steps = pl.read_parquet(bad / "data/steps.parquet")
    steps = steps.with_columns(pl.lit(False).alias("verified"), pl.lit("{}").alias("cot"))
    steps.write_parquet(bad / "data/steps.parquet")
    k = pl.read_parquet(bad / "data/kernels.parquet")
    # leak: move one kernel to another split in the kernels table only
    k = k.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("test" if k["split"][0] != "test" else "train"))
                       .otherwise(pl.col("split")).alias("split"))
    k.write_parquet(bad / "data/kernels.parquet")
    with open(bad / "chat/train.jsonl", "a") as f:
        f.write("{broken\n")
    rep = validate_release(bad, {})
    assert not rep.success
    failed = {(f["suite"], f.get("column")) for f in rep.failures}
    assert ("steps", "verified") in failed
    assert ("steps", "cot_valid") in failed
    assert ("export", "format_problems") in failed
    assert ("export", "split_matches_file") in failed or ("export", "kernel_n_splits") in failed


@pytest.mark.slow
def test_cli_validate_exit_codes(staged, tmp_path):
    from typer.testing import CliRunner

    from steptp.cli import app

    r = CliRunner().invoke(app, ["validate", str(staged / "good"), "--publish", str(tmp_path / "pub")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "pub/manifest.json").is_file() and (tmp_path / "pub/data_docs/index.html").is_file()
    bad = tmp_path / "bad"
    shutil.copytree(staged / "good", bad, ignore=shutil.ignore_patterns("data_docs"))
    pl.read_parquet(bad / "data/steps.parquet").with_columns(pl.lit(-1.0).alias("step_speedup")) \
        .write_parquet(bad / "data/steps.parquet")
    r = CliRunner().invoke(app, ["validate", str(bad), "--publish", str(tmp_path / "pub2")])
    assert r.exit_code == 1
    assert not (tmp_path / "pub2").exists()


@pytest.mark.slow
def test_a_family_above_its_share_fails_the_gate(staged):
    """The gate recomputes each family's and kernel group's share from the tables: with caps that
    the release's shares exceed (as if curation had not applied them), it fails; when the caps
    cannot hold (too few groups), it does not judge them."""
    from steptp.quality.core import derived_tables

    bad = staged / "shares"
    shutil.copytree(staged / "good", bad, ignore=shutil.ignore_patterns("data_docs"))
    stats = json.loads((bad / "stats.json").read_text())
    stats["diversity"] = {"applied": True, "max_family_share": 0.1, "max_kernel_share": 0.05,
                          "searched_kernels": 20}
    (bad / "stats.json").write_text(json.dumps(stats))
    steps = derived_tables(bad, {})["steps"]
    assert steps["family_share_excess"].max() > 0 and steps["kernel_share_excess"].max() > 0
    rep = validate_release(bad, {})
    failed = {(f["suite"], f.get("column")) for f in rep.failures}
    assert {("steps", "family_share_excess"), ("steps", "kernel_share_excess")} <= failed
    stats["diversity"]["cannot_hold"] = {"family_cap": "3 groups", "kernel_cap": "6 groups"}
    (bad / "stats.json").write_text(json.dumps(stats))
    steps = derived_tables(bad, {})["steps"]
    assert steps["family_share_excess"].max() == 0 and steps["kernel_share_excess"].max() == 0


def test_the_leak_gate_groups_kernels_as_curation_does():
    """The gate's groups are curation's, bounded in size: a kernel shared by every architecture
    joins the first few (up to the bound) and the others stay groups of their own, each whole
    in one split."""
    from steptp.curate.core import MIN_GROUP_BOUND, group_bound
    from steptp.params import Curate
    from steptp.quality.core import _workload_group_of
    from steptp.records import KernelRecord, Occurrence, table

    def kernel(kid, wls):
        return KernelRecord(kernel_id=kid, name=kid, leir="", leir_hash=kid, tir_hash="", signature=[],
                            occurrences=[Occurrence(workload=w, suite="archs") for w in wls], weight=1,
                            flops=1, bytes_moved=1, tvmscript="", target="cpu", raise_ok=True)

    ks = [kernel(f"k{i:02d}", [f"arch{i // 3}"]) for i in range(30)] + [kernel("hub", [f"arch{i}" for i in range(10)])]
    cfg = Curate()
    assert group_bound(cfg.splits, len(ks)) == MIN_GROUP_BOUND == 12
    g = _workload_group_of(table(ks), cfg)
    assert set(g) == {k.kernel_id for k in ks}
    assert g["hub"] == g["k00"] == g["k03"] == g["k06"]            # 1 + 3 x 3 = 10 <= 12
    assert g["k09"] != g["hub"] and g["k09"] == g["k10"] == g["k11"]  # 13 > 12: arch3 apart
    assert len(set(g.values())) == 1 + 7                           # arch3 ... arch9
