"""Quality gates: the Great Expectations suites in ``steptp/quality/expectations/`` (shipped
with the package; ``$STEPTP_EXPECTATIONS`` names other ones) run on a release folder.

    report = validate_release("releases/.staging/steptp-tiny", params)
    report.success            # False: do not publish
    report.failures           # [(suite, expectation, why, sample of unexpected values)]
    report.docs               # data_docs/index.html inside the release

Runs with an ephemeral GX context (no ``gx/`` project folder); the Data Docs site's store is the
release's ``data_docs/`` folder.
"""

from .core import (ValidationReport, derived_tables, expectations_dir, load_suite_spec, validate_release)

__all__ = ["ValidationReport", "derived_tables", "expectations_dir", "load_suite_spec", "validate_release"]
