"""The kernel pool of a params file (steptp.pool, `steptp pool`) and decontamination
(steptp.zoo.decontaminate): user folders listed in params, the standard profile, and benchmark
kernels that never enter a release, also at other sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from steptp import params as P

ROOT = Path(__file__).resolve().parents[1]
USER = "profiles/user"
BENCH = "tests/fixtures/pool/bench"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    # params paths are relative to the folder steptp runs in: the repository, as for dvc
    monkeypatch.chdir(ROOT)


def _error(data) -> str:
    with pytest.raises(P.ParamsError) as e:
        P.parse(data, "p.yaml")
    return str(e.value)


# ---------------------------------------------------------------------------- params
def test_listed_folders_must_exist_and_are_named_in_the_error():
    assert _error({"extract": {"problem_dirs": ["no/such/dir"]}}).startswith(
        "p.yaml: extract.problem_dirs: 'no/such/dir' does not exist")
    assert _error({"extract": {"leir_dirs": [f"{USER}/leir/nope.leir"]}}).startswith(
        f"p.yaml: extract.leir_dirs: '{USER}/leir/nope.leir' does not exist")
    assert _error({"decontaminate": {"folders": ["params.yaml"]}}) == \
        "p.yaml: decontaminate.folders: 'params.yaml' is not a folder"
    assert _error({"decontaminate": {"folders": [BENCH, BENCH + "/"]}}) == \
        f"p.yaml: decontaminate.folders: '{BENCH}/' is listed twice"
    assert _error({"extract": {"also_sizes": ["huge"]}}) == \
        "p.yaml: extract.also_sizes: Input should be 'tiny' or 'default' (got 'huge')"
    # a LEIR file (not only a folder) may be listed
    s = P.parse({"extract": {"leir_dirs": [f"{USER}/leir/col_mean.leir"]}})
    assert s.extract.leir_dirs == [f"{USER}/leir/col_mean.leir"]


def test_the_standard_profile_draws_on_every_source():
    from steptp.pipeline import extract_refs
    from steptp.pool import source_labels
    from steptp.zoo import workloads as W

    s = P.load(ROOT / "profiles" / "standard.yaml")
    default = P.load(ROOT / "params.yaml")
    assert default.extract.zoo == "tiny" and not default.extract.problem_dirs   # make run: quick
    refs = extract_refs(s.extract)
    zoo = [r for r in refs if r.kind == "registry"]
    # every built-in workload, at both sizes
    assert sorted((r.name, r.size) for r in zoo) == sorted(
        (n, size) for n in W.names("default") for size in ("tiny", "default"))
    sources = set(source_labels(refs).values())
    assert {"ops", "fused", "arch", "leir"} <= sources
    assert f"problems:{USER}/problems" in sources and f"leir-files:{USER}/leir" in sources
    assert [r.name for r in refs if r.kind == "problem"] == ["scaled_residual", "softplus_gate"]
    # no public benchmark's problems in a profile: its user folders are ours
    for d in s.extract.problem_dirs + s.extract.leir_dirs:
        assert d.startswith(USER), d
    assert s.decontaminate.folders == [] and s.decontaminate.shape_normalized


# ---------------------------------------------------------------------------- the shape key
def test_the_shape_key_ignores_sizes_names_and_constants_but_not_the_computation():
    from steptp.leir import format_program, parse
    from steptp.leir.canon import canonicalize
    from steptp.zoo.decontaminate import shape_key

    def canon(text):
        return format_program(canonicalize(parse(text))[0])

    a = canon("kernel f32 f(x[64], b[64], a) -> y[64]\n  for i in 64:\n"
              "    y[i] = min(max(a * x[i] + b[i], -1.0), 1.0)\n")
    b = canon("kernel f32 other(u[1000], v[1000], s) -> w[1000]\n  for n in 1000:\n"
              "    w[n] = min(max(s * u[n] + v[n], -2.5), 2.5)\n")
    c = canon("kernel f32 f(x[64], b[64], a) -> y[64]\n  for i in 64:\n"
              "    y[i] = min(max(a * x[i] - b[i], -1.0), 1.0)\n")          # - instead of +
    d = canon("kernel f16 f(x[64], b[64], a) -> y[64]\n  for i in 64:\n"
              "    y[i] = min(max(a * x[i] + b[i], -1.0), 1.0)\n")          # another dtype
    assert shape_key(a) == shape_key(b)
    assert shape_key(a) != shape_key(c) and shape_key(a) != shape_key(d)
    assert shape_key("") is None


# ---------------------------------------------------------------------------- decontamination
def _pool(**params):
    from steptp.pool import pool

    return pool(P.parse(params), log=lambda m: None)


def test_a_kernel_a_benchmark_folder_holds_is_dropped_also_at_another_size():
    """bench/ holds row_sum_sq as the pool has it (other names) and axpy_clamp at other sizes
    and constants: both leave the pool; col_mean stays. Shape matching off: only the first."""
    ext = {"zoo": "", "leir_dirs": [f"{USER}/leir"], "jobs": 1}
    full = _pool(extract=ext)
    names = {k.kernel_id: k.name for k in full.kernels}
    assert sorted(names.values()) == ["axpy_clamp", "col_mean", "row_sum_sq"]

    p = _pool(extract=ext, decontaminate={"folders": [BENCH]})
    assert [k.name for k in p.kernels] == ["col_mean"]
    rep = p.decontamination["folders"][0]
    assert rep["folder"] == BENCH and rep["workloads"] == 2 and rep["kernels"] == 2
    assert rep["dropped"] == 2 and rep["dropped_by"] == {"exact": 1, "shape": 1}
    assert sorted(names[i] for i in rep["dropped_ids"]) == ["axpy_clamp", "row_sum_sq"]
    assert p.summary()["decontaminated"] == {BENCH: 2}

    exact = _pool(extract=ext, decontaminate={"folders": [BENCH], "shape_normalized": False})
    assert sorted(k.name for k in exact.kernels) == ["axpy_clamp", "col_mean"]
    assert exact.decontamination["folders"][0]["dropped_by"] == {"exact": 1, "shape": 0}


@pytest.mark.slow
def test_a_benchmark_problem_at_other_sizes_drops_the_users_problem():
    """Problem files on both sides (extracted in contained workers): the benchmark's
    residual_relu_scaled is the user's scaled_residual at other sizes."""
    from steptp.pipeline import contamination_index, extract

    e = P.Extract(zoo="", problem_dirs=[f"{USER}/problems"])
    ks = list(extract(e).records)
    by_workload = {o.workload: k for k in ks for o in k.occurrences}
    assert {"scaled_residual", "softplus_gate"} <= set(by_workload)
    index = contamination_index(P.Decontaminate(folders=["tests/fixtures/pool/bench_problems"]))
    kept = index.drop(ks)
    assert by_workload["scaled_residual"].kernel_id in index.dropped
    assert by_workload["softplus_gate"] in kept
    assert index.dropped[by_workload["scaled_residual"].kernel_id] == \
        ("tests/fixtures/pool/bench_problems", "shape")
    assert index.report()["folders"][0]["failed"] == []


@pytest.mark.slow
def test_the_larger_size_extraction_is_decontaminated_too(tmp_path):
    """gemv at the tiny size is below the time floor, so the search extracts it at the default
    size; a benchmark holding that default-size gemv (exact match only) keeps it out."""
    from steptp.pipeline import extract

    big = list(extract(P.Extract(zoo="gemv", size="default", check=False)).records)
    assert len(big) == 1
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "gemv_big.leir").write_text(big[0].leir)
    p = _pool(extract={"zoo": "gemv", "size": "tiny"},
              search={"larger_size": "default"},
              decontaminate={"folders": [str(tmp_path / "bench")], "shape_normalized": False})
    assert [k.kernel_id for k in p.kernels] != [] and big[0].kernel_id not in p.state
    assert p.decontamination["folders"][0]["dropped_ids"] == [big[0].kernel_id]
    (small,) = p.kernels
    assert p.reason[small.kernel_id] == "below_time_floor"


def test_a_folder_without_benchmarks_or_with_a_bad_scale_is_a_params_error(tmp_path):
    from steptp.pipeline import contamination_index

    (tmp_path / "notes.txt").write_text("no kernels here\n")
    with pytest.raises(P.ParamsError, match=r"^decontaminate.folders: .*holds no problem file"):
        contamination_index(P.Decontaminate(folders=[str(tmp_path)]))
    with pytest.raises(P.ParamsError, match=r"^decontaminate.scale: "):
        contamination_index(P.Decontaminate(folders=[BENCH], scale="lots"))
    assert contamination_index(P.Decontaminate()) is None


def test_the_folders_digest_follows_their_files_not_a_checkouts_history(tmp_path):
    """The flows key their cached extraction and index by it."""
    from steptp.pipeline import sources_digest

    (tmp_path / "b" / ".git").mkdir(parents=True)
    (tmp_path / "b" / "k.leir").write_text("kernel f32 k(x[4]) -> y[4]\n  for i in 4:\n    y[i] = x[i]\n")
    first = sources_digest([str(tmp_path / "b")])
    (tmp_path / "b" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert sources_digest([str(tmp_path / "b")]) == first
    (tmp_path / "b" / "k.leir").write_text("kernel f32 k(x[8]) -> y[8]\n  for i in 8:\n    y[i] = x[i]\n")
    assert sources_digest([str(tmp_path / "b")]) != first


# ---------------------------------------------------------------------------- the card
def _export(tmp_path, decontamination):
    from _release_records import dataset

    from steptp.curate import CurateConfig, curate, read_curated, write_curated
    from steptp.export import export_release

    ks, ss, ts = dataset()
    write_curated(curate(ks, ss, ts, CurateConfig()), tmp_path / "cur", ks, ts)
    return export_release(read_curated(tmp_path / "cur"), tmp_path / "rel", name="t", version="0",
                          decontamination=decontamination)


@pytest.mark.slow
def test_the_card_and_stats_state_what_was_kept_out(tmp_path):
    rep = {"shape_normalized": True, "dropped": 3, "folders": [
        {"folder": "~/KernelBench", "workloads": 250, "kernels": 410, "dropped": 3,
         "dropped_by": {"exact": 1, "shape": 2}, "dropped_ids": ["a", "b", "c"],
         "failed": ["level3/99_huge: timeout"]}]}
    stats = _export(tmp_path, rep)
    saved = json.loads((tmp_path / "rel" / "stats.json").read_text())["decontamination"]
    assert saved == stats["decontamination"]
    assert saved["folders"][0] == {"folder": "~/KernelBench", "workloads": 250, "kernels": 410,
                                   "dropped": 3, "dropped_by": {"exact": 1, "shape": 2},
                                   "failed": ["level3/99_huge: timeout"]}
    card = (tmp_path / "rel" / "README.md").read_text()
    assert "## Decontamination" in card
    assert "This release contains no kernel of the benchmark folders below" in card
    assert "| `~/KernelBench` | 250 | 410 | 3 | 1 | 2 | 1 |" in card
    assert "1 benchmark workloads could not be extracted" in card and "level3/99_huge" in card

    _export(tmp_path, None)
    card = (tmp_path / "rel" / "README.md").read_text()
    assert "was not checked against any benchmark's kernels" in card


# ---------------------------------------------------------------------------- the command
def test_the_extract_stage_reads_the_listed_folders(tmp_path):
    from steptp.cli import app
    from steptp.records import KernelRecord, read_records

    f = tmp_path / "p.yaml"
    f.write_text(f"extract:\n  zoo: ''\n  leir_dirs: [{USER}/leir]\n")
    r = CliRunner().invoke(app, ["extract", "--params", str(f), "--out", str(tmp_path / "k.parquet")])
    assert r.exit_code == 0, r.output
    ks = read_records(tmp_path / "k.parquet", KernelRecord)
    assert sorted(k.name for k in ks) == ["axpy_clamp", "col_mean", "row_sum_sq"]
    assert {o.suite for k in ks for o in k.occurrences} == {"user"}


def test_steptp_pool_prints_sources_families_states_and_the_decontamination(tmp_path):
    from steptp.cli import app

    f = tmp_path / "p.yaml"
    f.write_text(f"extract:\n  zoo: ''\n  leir_dirs: [{USER}/leir]\n"
                 f"decontaminate:\n  folders: [{BENCH}]\nsearch:\n  max_time_ms: 1.0e-6\n")
    r = CliRunner().invoke(app, ["pool", "--params", str(f)])
    assert r.exit_code == 0, r.output
    assert "pool: extracting 3 workloads (1 jobs)" in r.stderr
    out = r.stdout
    assert f"leir-files:{USER}/leir" in out and "reduction" in out
    # col_mean is the only kernel left; a ceiling below its estimate skips it
    assert "pool: 1 kernels; searched 0, pending 0, skipped 1 (above_time_ceiling 1)" in out
    assert f"decontaminated: 2 kernels held by {BENCH} (exact 1, at another size 1" in out

    r = CliRunner().invoke(app, ["pool", "--params", str(f), "--json"])
    sm = json.loads(r.stdout)
    assert sm["per_source"] == {f"leir-files:{USER}/leir": {"kernels": 1, "searched": 0,
                                                             "pending": 0, "skipped": 1,
                                                             "deferred": 0}}

    # an extraction already made (the extract stage's table and summary) is not made again
    k = tmp_path / "k.parquet"
    assert CliRunner().invoke(app, ["extract", "--params", str(f), "--out", str(k)]).exit_code == 0
    r = CliRunner().invoke(app, ["pool", "--params", str(f), "--kernels", str(k)])
    assert r.exit_code == 0, r.output
    assert "pool: extracting 3 workloads" not in r.stderr
    assert "duplicates folded at extraction: 0" in r.stdout
    assert "pool: 1 kernels; searched 0, pending 0, skipped 1 (above_time_ceiling 1)" in r.stdout

    # a release that searched col_mean: searched, whatever the pick says now
    import polars as pl

    rel = tmp_path / "rel"
    (rel / "data").mkdir(parents=True)
    col_mean = _pool(extract={"zoo": "", "leir_dirs": [f"{USER}/leir/col_mean.leir"]}).kernels[0]
    pl.DataFrame({"kernel_id": [col_mean.kernel_id]}).write_parquet(
        rel / "data" / "trajectories.parquet")
    r = CliRunner().invoke(app, ["pool", "--params", str(f), "--release", str(rel)])
    assert "pool: 1 kernels; searched 1, pending 0, skipped 0 (none)" in r.stdout, r.output
    r = CliRunner().invoke(app, ["pool", "--params", str(f), "--release", str(tmp_path)])
    assert r.exit_code == 2 and "not a release folder" in r.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text("extract:\n  problem_dirs: [no/such]\n")
    r = CliRunner().invoke(app, ["pool", "--params", str(bad)])
    assert r.exit_code == 2 and f"{bad}: extract.problem_dirs: 'no/such' does not exist" in r.stderr


def test_steptp_pool_shows_what_the_next_nights_shard_makes_wait(tmp_path):
    """With an accumulating profile and a release: a pending kernel whose shape group the
    release searched is deferred (the softmax at another size), a new program is not."""
    import polars as pl

    from _release_records import softmax_leir
    from steptp.cli import app

    leir = tmp_path / "leir"
    leir.mkdir()
    (leir / "sm_small.leir").write_text(softmax_leir(8, 64))
    (leir / "sm_large.leir").write_text(softmax_leir(32, 256))
    (leir / "rowsum.leir").write_text("kernel rowsum(A: f32[16,64]) -> D: f32[16]\n  for i in 16:\n"
                                      "    for j in 64:\n      D[i] += exp(A[i,j])\n")
    f = tmp_path / "p.yaml"
    f.write_text(f"extract:\n  zoo: ''\n  leir_dirs: [{leir}]\nnightly:\n  accumulate: true\n")
    kernels = _pool(extract={"zoo": "", "leir_dirs": [str(leir)]}).kernels
    assert len(kernels) == 3
    small = next(k for k in kernels if "[8,64]" in k.leir)
    rel = tmp_path / "rel"
    (rel / "data").mkdir(parents=True)
    pl.DataFrame({"kernel_id": [small.kernel_id]}).write_parquet(rel / "data" / "trajectories.parquet")
    pl.DataFrame({"kernel_id": [small.kernel_id] * 2, "before_leir": ["p0", "p1"],
                  "role": ["improving", "neutral"]}).write_parquet(rel / "data" / "steps.parquet")
    r = CliRunner().invoke(app, ["pool", "--params", str(f), "--release", str(rel), "--json"])
    assert r.exit_code == 0, r.output
    sm = json.loads(r.stdout)
    assert (sm["searched"], sm["pending"], sm["deferred"]) == (1, 2, 1)
    assert sm["deferred_by_reason"] == {"shape group searched": 1}
    assert sm["family_yield"]["softmax"] == {"kernels": 1, "answerable_per_kernel": 1.0, "deferred": False}
    r = CliRunner().invoke(app, ["pool", "--params", str(f), "--release", str(rel)])
    assert "the next night's shard makes 1 pending kernels wait (shape group searched 1)" in r.stdout
    assert "deferred" in r.stdout
    # a profile that does not accumulate has no next shard to defer anything in
    f.write_text(f"extract:\n  zoo: ''\n  leir_dirs: [{leir}]\n")
    sm = json.loads(CliRunner().invoke(app, ["pool", "--params", str(f), "--release", str(rel),
                                             "--json"]).stdout)
    assert sm["deferred"] == 0 and sm["pending"] == 2


# ---------------------------------------------------------------------------- a release
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_release_holds_none_of_the_benchmark_kernels_and_its_card_counts_them(tmp_path):
    """`steptp release` (the Prefect flow, on the suite's loopback server) with a user LEIR
    folder and a benchmark folder: the benchmark's kernels are in no table of the release."""
    import os
    import subprocess
    import sys

    import polars as pl
    import yaml

    from _prefect_server import api_url

    params = {
        "name": "pool-decon", "version": "0",
        "extract": {"zoo": "matmul_large_k", "leir_dirs": [f"{USER}/leir"], "jobs": 1},
        "decontaminate": {"folders": [BENCH]},
        # tiny kernels searched at their size: this test is about what enters the pool
        "search": {"max_kernels": 2, "measurements": 4, "seconds": 30, "threads": 1,
                   "min_time_us": 0, "larger_size": "", "remeasure_rounds": 1,
                   "remeasure_pairs": 1},
        "significance": {"max_spread": 100.0, "min_gain": 0.0, "spread_factor": 0.0},
    }
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(params))
    env = dict(os.environ, PREFECT_HOME=str(tmp_path / "prefect-home"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", STEPTP_LOCK_DIR=str(tmp_path / "locks"),
               PREFECT_API_URL=api_url())
    env.pop("PREFECT_LOCAL_STORAGE_PATH", None)
    out = tmp_path / "releases"
    r = subprocess.run([str(Path(sys.executable).parent / "steptp"), "release", "--params", str(f),
                        "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=1400)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    rel = out / "pool-decon-0"
    dropped = json.loads((out / ".work" / "pool-decon-0" / "decontamination.json").read_text())
    ids = dropped["folders"][0]["dropped_ids"]
    assert len(ids) == 2
    for table in ("kernels", "steps", "trajectories"):
        held = set(pl.read_parquet(rel / "data" / f"{table}.parquet")["kernel_id"].to_list())
        assert held and not held & set(ids), table
    assert not any(i in (rel / "chat" / "train.jsonl").read_text() for i in ids)
    stats = json.loads((rel / "stats.json").read_text())["decontamination"]
    assert stats["folders"][0]["dropped"] == 2 and stats["folders"][0]["folder"] == BENCH
    card = (rel / "README.md").read_text()
    assert f"| `{BENCH}` | 2 | 2 | 2 | 1 | 1 | 0 |" in card


def test_the_standard_profile_accumulates_and_the_default_does_not():
    """make run's quick default rebuilds its kernels; the standard profile's nights add up."""
    s = P.load(ROOT / "profiles" / "standard.yaml")
    default = P.load(ROOT / "params.yaml")
    assert s.nightly.accumulate and s.nightly.shard_kernels >= 50 and 0 < s.nightly.retime_fraction <= 1
    assert not default.nightly.accumulate
