"""Verification and measurement of candidate kernels.

* ``verify`` (numerical verification against a reference, in-process);
* ``Measurer`` (THE entry point for stages: cached, isolated, parallel verification and
  serialized timing; ``steptp.measure.runner.local``); the runners (``runner/``: the interface
  and the one set of outcome types in ``base``, this machine in ``local``, remote devices in
  ``rpc``, CUDA jobs for a GPU machine without TVM in ``gpu``);
* ``measure`` / ``MeasureConfig`` / ``torch_eager_baseline`` (the timing protocol);
* ``Fingerprint`` / ``current`` (what a timing was measured on); ``Cache`` (SQLite results);
* ``WorkerPool`` (isolated worker processes with timeouts); ``RPCBackend`` (remote devices).

Only ``verify`` is imported eagerly with TVM; the rest is imported on first use.
"""

from .verify import TOLERANCES, SeedResult, VerifyResult, random_inputs, tolerance, verify

_LAZY = {
    "Measurer": "runner.local", "VerifyJob": "runner.base", "VerifyOutcome": "runner.base",
    "TimingOutcome": "runner.base", "MeasureConfig": "timing", "MeasureError": "programs",
    "measure": "timing", "torch_eager_baseline": "timing", "Fingerprint": "fingerprint",
    "current_fingerprint": "fingerprint", "Cache": "cache", "WorkerPool": "worker",
    "WorkerResult": "worker", "RPCBackend": "runner.rpc",
}

__all__ = ["TOLERANCES", "SeedResult", "VerifyResult", "random_inputs", "tolerance",
           "verify", *_LAZY]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'steptp.measure' has no attribute {name!r}")
    import importlib

    m = importlib.import_module(f".{mod}", __name__)
    return getattr(m, "current" if name == "current_fingerprint" else name)
