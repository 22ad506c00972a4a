"""Releases: from a staged release to a published, versioned one.

    from steptp.release import gate_and_publish
    res = gate_and_publish(staging, "releases", rid, name, validation, params=p,
                           regression_gate=False, git=False)

``gates`` (the quality and regression gates, the comparison with the previous release),
``publish`` (publish, never overwriting, then version), ``versioning`` (DVC, git only when
asked; listing and restoring releases), ``layout`` (where a build keeps its files). The Prefect
flow ``steptp.flows.build_release`` runs the stages and then this; the library never imports
the flows.
"""

from .gates import ReleaseGateFailed, check_quality, check_regressions, compare_with_previous
from .layout import published_dir, release_log, staging_dir, work_dir
from .publish import gate_and_publish, publish_and_version

__all__ = ["ReleaseGateFailed", "check_quality", "check_regressions", "compare_with_previous",
           "gate_and_publish", "publish_and_version", "published_dir", "release_log",
           "staging_dir", "work_dir"]
