"""The parent flow: extract → search → CoT → curate → export → validate → publish.

    from flows.build_release import build_release
    build_release(params, out="releases")      # -> {"release": ..., "data_docs": ..., ...}

The release is built in ``<out>/.staging/<id>`` and moved to ``<out>/<id>`` only when every
quality gate passes; a failing gate raises ``ReleaseGateFailed`` and publishes nothing (the
staging folder keeps the report and its Data Docs for inspection). ``<id>`` is
``<name>-<version>``. Also writes the intermediate tables (``<out>/.work/<id>/``: kernels, steps,
trajectories parquet and the curated folder), which is how the stage flows hand data on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # a deployment loads this file by path
    sys.path.insert(0, str(_ROOT))

from prefect import flow  # noqa: E402

from flows.stages import (_log, cot_flow, curate_flow, export_flow, extract_flow,  # noqa: E402
                          search_flow, validate_flow)


class ReleaseGateFailed(RuntimeError):
    """A quality gate failed; nothing was published."""


def release_id(p: dict[str, Any]) -> str:
    return f"{p.get('name', 'steptp')}-{p.get('version', '0')}"


def _fingerprint(p: dict[str, Any]) -> dict[str, Any]:
    from steptp.measure.fingerprint import current

    threads = (p.get("search") or {}).get("threads")
    return current(num_threads=threads).to_dict()


@flow(name="build_release", log_prints=True)
def build_release(params: dict[str, Any] | None = None, out: str = "releases",
                  params_file: str | None = None) -> dict[str, Any]:
    """``params`` (a dict), or ``params_file`` (params.yaml; what the deployment passes)."""
    from steptp.export import hardware_description, publish

    if params is None and params_file:
        import yaml

        params = yaml.safe_load(Path(params_file).read_text()) or {}
    p = dict(params or {})
    rid = release_id(p)
    out_p = Path(out)
    work = out_p / ".work" / rid
    staging = out_p / ".staging" / rid
    fp = _fingerprint(p)
    hw = hardware_description(fp)

    kernels = extract_flow(p, str(work))
    searched = search_flow(p, kernels, str(work))
    steps = cot_flow(p, searched["steps"], str(work))
    curated = curate_flow(p, searched.get("kernels", kernels), steps, searched["trajectories"], str(work), hw)
    export_flow(p, curated, str(staging), fp)
    rep = validate_flow(p, str(staging))
    if not rep["success"]:
        bad = [f"{f['suite']}/{f['expectation']}({f.get('column') or ''})" for f in
               (x for s in rep["suites"].values() for x in s["failures"])]
        raise ReleaseGateFailed(f"quality gates failed, nothing published: {', '.join(bad)}; "
                                f"report: {staging / 'validation.json'}, Data Docs: {rep['docs']}")
    dest = publish(staging, out_p / rid, params=p, validation=rep)
    result = {"release": str(dest.resolve()), "data_docs": str((dest / "data_docs" / "index.html").resolve()),
              "card": str((dest / "README.md").resolve()),
              "counts": json.loads((dest / "stats.json").read_text())["counts"]}
    _log(f"release: {result['release']}  Data Docs: {result['data_docs']}")
    return result


if __name__ == "__main__":
    import sys

    import yaml

    params = yaml.safe_load(open(sys.argv[1] if len(sys.argv) > 1 else "params.yaml"))
    print(json.dumps(build_release(params, sys.argv[2] if len(sys.argv) > 2 else "releases"), indent=1))
