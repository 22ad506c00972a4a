"""After the stages: gate the staged release, compare it with the previous one, publish it
(``steptp.export.publish_release``: atomic, never overwriting; the same records again are a
no-op, other records under a published id are refused unless ``force``) and version it
(``steptp.release.versioning.track``: DVC always, git only when asked)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping

from .gates import check_quality, check_regressions, compare_with_previous
from .layout import published_dir
from .versioning import track


def publish_and_version(staging: str | Path, out: str | Path, rid: str, *,
                        params: Mapping[str, Any] | None = None,
                        validation: Mapping[str, Any] | None = None, force: bool = False,
                        version_control: bool = True, git: bool = False,
                        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Publish ``staging`` as ``out/<rid>`` and, unless it was already published with the same
    records or ``version_control`` is off, version it (``git``: commit and tag its ``.dvc`` file
    and push; else only print how). Returns the release's paths, ``status`` (published |
    replaced | unchanged), ``versioning`` (``track``'s answer, or None) and ``counts``."""
    from ..export import publish_release

    pub = publish_release(staging, published_dir(out, rid), params=params, validation=validation,
                          force=force)
    dest = pub.dest
    versioning = None
    if pub.status == "unchanged":
        log(f"{dest} is already published with the same records: left untouched")
    elif version_control:
        versioning = track(dest, log=log, git=git)
    return {"release": str(dest.resolve()), "id": rid, "status": pub.status,
            "data_docs": str((dest / "data_docs" / "index.html").resolve()),
            "card": str((dest / "README.md").resolve()),
            "versioning": versioning,
            "counts": json.loads((dest / "stats.json").read_text())["counts"]}


def gate_and_publish(staging: str | Path, out: str | Path, rid: str, name: str,
                     validation: Mapping[str, Any], *, params: Mapping[str, Any] | None = None,
                     regression_gate: bool = False, force: bool = False,
                     version_control: bool = True, git: bool = False,
                     log: Callable[[str], None] = print,
                     fingerprint: str | None = None) -> dict[str, Any]:
    """The end of a release build, after ``steptp.quality.validate_release`` wrote
    ``validation``: the quality gate, the comparison with the previous release of ``name`` in
    ``out`` (``diff.json``; with ``fingerprint``, the previous one on that hardware), the
    regression gate (``regression_gate``), then
    ``publish_and_version``. A failed gate raises ``ReleaseGateFailed`` and publishes nothing.
    The result adds ``previous`` (the id compared with, or None) and ``regressions``."""
    check_quality(validation, staging)
    diff = compare_with_previous(staging, out, rid, name, log=log, fingerprint=fingerprint)
    check_regressions(diff, staging, regression_gate)
    res = publish_and_version(staging, out, rid, params=params, validation=validation, force=force,
                              version_control=version_control, git=git, log=log)
    log(f"release: {res['release']} ({res['status']})  Data Docs: {res['data_docs']}")
    return res | {"previous": diff["previous"] if diff else None,
                  "regressions": diff["regressions"] if diff else []}


__all__ = ["gate_and_publish", "publish_and_version"]
