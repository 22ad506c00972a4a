"""DVC: the dvc.yaml stages are the CLI's stages. `dvc repro` itself (a second repro up to date, the
release equal to `steptp release`'s, pushed and restored) runs in tests/test_nightly.py."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_dvc_yaml_stages_match_the_cli():
    d = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    stages = d["stages"]
    assert list(stages) == ["extract", "search", "cot", "curate", "export", "validate"]
    for name, st in stages.items():
        assert st["cmd"].startswith(f"steptp {name} ")
    assert stages["validate"]["outs"] == ["release"]
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    assert isinstance(p, dict) and "seed" in p
