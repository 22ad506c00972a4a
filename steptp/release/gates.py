"""The gates a staged release passes before it is published: the quality suites' verdict
(``steptp.quality``) and, against the previous release in the same folder, the regression gate
(``nightly.regression_gate``: a kernel whose best speedup fell beyond the measured spread).
A gate that fails raises ``ReleaseGateFailed``; the staging folder keeps the evidence
(``validation.json`` and its Data Docs, ``diff.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping


class ReleaseGateFailed(RuntimeError):
    """A gate failed; nothing was published."""


def check_quality(report: Mapping[str, Any], staging: str | Path) -> None:
    """Raises unless every suite of ``report`` (``ValidationReport.to_dict()``) passed."""
    if report["success"]:
        return
    bad = [f"{f['suite']}/{f['expectation']}({f.get('column') or ''})"
           for s in report["suites"].values() for f in s["failures"]]
    raise ReleaseGateFailed(f"quality gates failed, nothing published: {', '.join(bad)}; "
                            f"report: {Path(staging) / 'validation.json'}, Data Docs: {report['docs']}")


def compare_with_previous(staging: str | Path, out: str | Path, rid: str, name: str,
                          log: Callable[[str], None] = print,
                          fingerprint: str | None = None) -> dict[str, Any] | None:
    """``diff.json`` (and the card's "Changes since" section) of ``staging`` against the newest
    release of the same ``name`` published in ``out`` other than ``rid`` (with ``fingerprint``:
    the newest timed on that hardware, an accumulating nightly's line); None when there is
    none."""
    from ..export import previous_release
    from ..export.diff import write_diff

    prev = previous_release(out, rid, name, fingerprint)
    if prev is None:
        return None
    diff = write_diff(prev, staging)
    log(f"compared with {diff['previous']}: {len(diff['kernels_added'])} kernels added, "
        f"{len(diff['kernels_removed'])} removed, {len(diff['regressions'])} regressions beyond the spread")
    return diff


def check_regressions(diff: Mapping[str, Any] | None, staging: str | Path, enabled: bool) -> None:
    """The regression gate: with ``enabled`` (params ``nightly.regression_gate``), raises when
    ``diff`` names a kernel whose best speedup fell beyond the spread."""
    if enabled and diff is not None and diff["regressions"]:
        raise ReleaseGateFailed(f"regression gate: best speedup of {', '.join(diff['regressions'])} fell "
                                f"beyond the measured spread since {diff['previous']}; nothing published "
                                f"(see {Path(staging) / 'diff.json'})")


__all__ = ["ReleaseGateFailed", "check_quality", "check_regressions", "compare_with_previous"]
