"""params.yaml is read once (steptp.params): typed, frozen sections, every default in one place,
and a bad file stops a run before any stage starts, with the file and the dotted key named."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel
from typer.testing import CliRunner

from steptp import params as P

ROOT = Path(__file__).resolve().parents[1]


def _error(data, file="params.yaml") -> str:
    with pytest.raises(P.ParamsError) as e:
        P.parse(data, file)
    return str(e.value)


# ---------------------------------------------------------------------------- the shipped file
def test_the_shipped_params_yaml_loads_as_written():
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    s = P.load(ROOT / "params.yaml")
    assert s.name == raw["name"] and s.version == str(raw["version"]) and s.seed == raw["seed"]
    assert s.search.max_kernels == raw["search"]["max_kernels"]
    assert s.search.seconds == raw["search"]["seconds"]
    assert s.significance.max_spread == raw["significance"]["max_spread"]
    assert s.curate.splits == raw["curate"]["splits"]
    # the release's card and manifest record the file as written, not the typed values
    assert s.source == raw
    assert pickle.loads(pickle.dumps(s)).source == raw


# ---------------------------------------------------------------------------- errors
def test_unknown_keys_and_sections_name_the_file_the_key_and_the_nearest_name():
    assert _error({"search": {"max_kernel": 12}}) == \
        "params.yaml: search.max_kernel: unknown key (did you mean max_kernels?)"
    assert _error({"serach": {"max_kernels": 12}}) == \
        "params.yaml: serach: unknown section (did you mean search?)"
    assert _error({"eval": {"sample": 2}}, "p/x.yaml") == \
        "p/x.yaml: eval.sample: unknown key (did you mean samples?)"
    # nothing near: the known keys are listed
    assert "known: min_kernels, min_steps, min_tokens" in _error({"quality": {"zzz": 1}})
    # the significance rule's keys have their own section now
    assert _error({"curate": {"min_gain": 0.1}}) == \
        "params.yaml: curate.min_gain: unknown key (moved to significance.min_gain)"


def test_wrong_types_and_out_of_range_values():
    assert _error({"search": {"max_kernels": "abc"}}).startswith(
        "params.yaml: search.max_kernels: Input should be a valid integer")
    assert "'abc'" in _error({"search": {"max_kernels": "abc"}})
    assert _error({"search": {"measurements": -16}}) == \
        "params.yaml: search.measurements: Input should be greater than or equal to 1 (got -16)"
    assert "search.seconds: Input should be greater than 0" in _error({"search": {"seconds": 0}})
    assert "search.remeasure_rounds" in _error({"search": {"remeasure_rounds": -1}})
    assert "search.policy" in _error({"search": {"policy": "bfs"}})
    assert "cache.max_age_hours" in _error({"cache": {"max_age_hours": 0}})
    assert "extract.jobs" in _error({"extract": {"jobs": 0}})
    assert _error({"curate": {"splits": {"train": 0.8, "test": 0.1}}}) == \
        "params.yaml: curate.splits: the fractions must sum to 1, not 0.9"
    assert "unknown split dev" in _error({"curate": {"splits": {"train": 0.9, "dev": 0.1}}})
    assert "significance.max_spread" in _error({"significance": {"max_spread": 0}})
    assert "runner.address" in _error({"runner": {"kind": "dask", "address": "host:1"}})
    # checks across a section's keys still name the key
    assert _error({"devices": {"tracker": "h:9190"}}).startswith("params.yaml: devices.key: ")
    assert _error({"cot": {"writer": "openai"}}).startswith("params.yaml: cot.model: ")
    assert "nightly.version" in _error({"nightly": {"version": "{version}-{night}"}})
    assert "params.yaml: search: " in _error({"search": 3})
    assert "must be a mapping" in _error([1, 2])


def test_every_bad_key_is_reported_at_once():
    msg = _error({"seed": "x", "search": {"max_kernel": 1, "seconds": -1}})
    assert msg.splitlines() == [
        "params.yaml: seed: Input should be a valid integer, unable to parse string as an integer "
        "(got 'x')",
        "params.yaml: search.seconds: Input should be greater than 0 (got -1)",
        "params.yaml: search.max_kernel: unknown key (did you mean max_kernels?)"]


def test_an_unreadable_or_non_yaml_file(tmp_path):
    with pytest.raises(P.ParamsError, match="cannot read"):
        P.load(tmp_path / "missing.yaml")
    (tmp_path / "p.yaml").write_text("search: [\n")
    with pytest.raises(P.ParamsError, match="p.yaml: not YAML"):
        P.load(tmp_path / "p.yaml")
    (tmp_path / "e.yaml").write_text("# only comments\n")
    assert P.load(tmp_path / "e.yaml") == P.Settings()


# ---------------------------------------------------------------------------- one home
def test_defaults_come_from_the_models():
    s = P.parse({"search": {"max_kernels": 3}, "quality": None})
    assert s.search.measurements == P.Search.model_fields["measurements"].default
    assert s.curate == P.Curate() and s.quality == P.Quality() and s.significance == P.Significance()
    assert P.parse({}) == P.Settings() == P.load(None)
    # the library's entry points take the same objects, not copies of their defaults
    from steptp.curate import CurateConfig
    from steptp.measure.significance import SignificanceRule

    assert CurateConfig is P.Curate
    assert SignificanceRule().model_dump() == P.Significance().model_dump()
    import steptp.quality.core as Q

    assert not hasattr(Q, "DEFAULT_PARAMS")
    assert not hasattr(SignificanceRule, "from_params")
    from steptp import pipeline

    # the search's re-timing rounds come from its section (a default of its own once disagreed)
    assert "remeasure_rounds" not in inspect.signature(pipeline.search_one).parameters
    from steptp.eval.command import settings as eval_settings

    assert eval_settings({}, None) == P.Eval().model_dump()
    assert eval_settings({"samples": 3}, {"eval": {"steps": 7}})["steps"] == 7


def test_publish_git_is_strict_and_a_flow_parameter_overrides_it():
    assert P.parse({}).publish.git is False and P.publish_git(P.load(ROOT / "params.yaml")) is False
    assert P.publish_git({"publish": {"git": True}}) is True
    assert P.publish_git({"publish": {"git": True}}, False) is False
    assert "params.yaml: publish.git: Input should be a valid boolean" in \
        _error({"publish": {"git": "false"}})


def test_a_section_seed_defaults_to_the_top_level_seed():
    s = P.parse({"seed": 5, "cot": {"seed": 9}})
    assert (s.search.seed, s.cot.seed, s.curate.seed) == (5, 9, 5)
    assert P.parse({}).curate.seed == 0


def test_settings_are_frozen():
    s = P.parse({})
    with pytest.raises(Exception, match="frozen"):
        s.search.measurements = 3
    with pytest.raises(Exception, match="frozen"):
        s.seed = 1


def test_quality_expectations_take_their_values_from_the_settings(tmp_path):
    from steptp.quality import load_suite_spec

    spec = load_suite_spec("steps", P.parse({"significance": {"max_spread": 0.4}}))
    assert 0.4 in [e["kwargs"].get("max_value") for e in spec["expectations"]]
    # the defaults are the model's
    spec = load_suite_spec("export", None)
    assert P.Curate().max_tokens in [e["kwargs"].get("max_value") for e in spec["expectations"]]
    (tmp_path / "steps.json").write_text(
        '{"expectations": [{"type": "x", "kwargs": {"min_value": "${search.no_such_key}"}}]}')
    with pytest.raises(P.ParamsError, match=r"steps.json: search.no_such_key: no such parameter"):
        load_suite_spec("steps", None, tmp_path)


# ---------------------------------------------------------------------------- who reads what
def test_a_search_task_is_keyed_by_the_settings_that_change_its_result():
    """Searching more kernels, or more at once, keeps every finished search cached."""
    from steptp.flows.stages import SettingsKey

    key = SettingsKey(name="search", fields=P.Search.KERNEL_FIELDS)

    def k(**kw):
        return key.compute_key(None, {"search": P.Search(**kw)}, {})

    assert k() == k(max_kernels=40, jobs=4, verify_jobs=3, min_time_us=0, larger_size=None)
    for change in ({"measurements": 8}, {"seconds": 1.0}, {"seed": 1}, {"threads": 2},
                   {"remeasure_rounds": 0}, {"policy": "mcts"}):
        assert k(**change) != k(), change
    # every search key is either part of the key or deliberately not
    chooses = {"max_kernels", "max_per_family", "min_time_us", "larger_size",
               "larger_max_workloads", "max_time_ms", "measure_candidates", "jobs", "verify_jobs"}
    assert set(P.Search.model_fields) == set(P.Search.KERNEL_FIELDS) | chooses


def test_dvc_stages_list_only_keys_that_exist():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    s = P.parse({})
    for name, st in stages.items():
        for key in st.get("params", []):
            s.lookup(key)  # raises for a key no model has
    # the search confirms roles with the significance rule; it reads nothing of curation's
    assert "significance" in stages["search"]["params"]
    assert not any(k.split(".")[0] == "curate" for k in stages["search"]["params"])


def test_docs_params_md_is_generated_from_the_models():
    doc = (ROOT / "docs" / "params.md").read_text()
    assert doc == P.params_doc(), "regenerate: python -m steptp.params > docs/params.md"
    for name, f in P.Settings.model_fields.items():
        sub = f.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            for key in sub.model_fields:
                assert f"`{name}.{key}`" in doc, f"{name}.{key}"
        else:
            assert f"`{name}`" in doc


# ---------------------------------------------------------------------------- the CLI
def test_release_with_a_bad_params_file_stops_before_any_stage(tmp_path):
    from steptp.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nsearch:\n  max_kernel: 12\n  measurements: -16\n")
    out = tmp_path / "releases"
    r = CliRunner().invoke(app, ["release", "--params", str(bad), "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert f"{bad}: search.max_kernel: unknown key (did you mean max_kernels?)" in r.stderr
    assert f"{bad}: search.measurements: Input should be greater than or equal to 1" in r.stderr
    assert not out.exists()      # no flow ran: it would have written out/logs/<id>.log first


def test_stage_commands_check_the_whole_file(tmp_path):
    """A stage command stops on a bad key of another stage's section too: dvc runs each stage
    with the same file."""
    from steptp.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("extract: {zoo: tiny}\nserach: {max_kernels: 1}\n")
    r = CliRunner().invoke(app, ["extract", "--params", str(bad), "--out", str(tmp_path / "k.parquet")])
    assert r.exit_code == 2 and f"{bad}: serach: unknown section (did you mean search?)" in r.stderr
    assert not (tmp_path / "k.parquet").exists()
