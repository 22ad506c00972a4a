"""Export: a curated dataset → a release folder.

    release/
      README.md              dataset card (counts, strategy histogram, speedups, tokens, hardware,
                             how to load it with `datasets` and polars)
      manifest.json          versions, params, seeds, fingerprints, sha256 of every file
      data/kernels.parquet   KernelRecord rows + `split`
      data/steps.parquet     StepRecord rows + `split`
      data/trajectories.parquet  TrajectoryRecord rows + `split`
      data/rejects.parquet   RejectRecord rows (every dropped step and why)
      chat/{train,validation,test}.jsonl   the chat format (``steptp.format.chat``)
      chat/pairs-{split}.jsonl             preference pairs (``steptp.export.pairs``)
      configs/<config>/<split>.parquet     the ``datasets`` configs the card declares (``steptp.export.hub``)
      plots/*.png            strategy histogram, speedup and token distributions
      data_docs/             Great Expectations Data Docs (written by ``steptp validate``)

``export_release`` writes everything but the manifest and the Data Docs, reading a curated
folder (``source``: every searched step stays a table; only the steps written as text become
records); ``publish`` (after the quality gates pass) writes the manifest and moves the folder
to its final place atomically;
``publish_release`` never overwrites a published release (same records: a no-op; other
records: refused unless forced) and points ``latest.json`` at it. ``diff`` compares a release
with the previous one (``diff.json`` + a card section). Gating, publishing and versioning a
release build: ``steptp.release``.
"""

from .release import (Publication, ReleaseExists, content_digest, export_release, file_checksums,
                      hardware_description, previous_release, publish, publish_release,
                      published_releases, verify_checksums, write_manifest)

__all__ = ["export_release", "file_checksums", "hardware_description", "publish", "verify_checksums",
           "write_manifest", "Publication", "ReleaseExists", "content_digest", "previous_release",
           "publish_release", "published_releases"]
