"""The learned side of candidate ranking: an XGBoost model on the analytic features of
:mod:`steptp.analysis.cost_model`, and the :class:`Ranker` the search orders candidates with.

* :class:`LearnedCostModel` — an optional XGBoost regressor of the analytic model's error
  (``log measured - log predict``) from the features; it predicts log seconds;
* :class:`Ranker` — the analytic ``score`` until the learned model has enough samples, then a
  blend of both. It can start warm: ``Ranker.from_cache`` pre-fits the model on the programs the
  measurement cache holds for this machine (other kernels, earlier runs), and the search keeps
  adding its own measurements on top.

The search starts cold by default; ``STEPTP_RANKER_PRIOR=1`` makes it start warm from the
cache. Off by default for two reasons: a warm start makes the candidate order (and so the
records) depend on what the cache happens to hold, which breaks reproducible nightly rebuilds;
and on the data measured so far (``benchmarks/ranker_transfer.py``, 18 kernels held out in
turn) the transferred model ranks better overall (Spearman 0.30 vs 0.25) but its first pick is
slower than the analytic model's (geomean 1.64x vs 1.41x the fastest).
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterable, Sequence

import numpy as np

from ..leir import ast as A
from ..analysis.cost_model import LOG_POTENTIAL, LOG_PREDICT, _cores, blend, features, score

# Rows read from the cache, newest first: enough to cover many kernels, while the first
# featurization (about 2.5 ms a program) and each retraining stay a few seconds / tenths.
PRIOR_LIMIT = 5000
# A measurement of another kernel counts this much of one of the kernel being searched, both as
# an XGBoost sample weight and toward the blend weight: the residual of the analytic model is
# partly kernel-specific (its op mix, shapes, memory pattern), so transferred rows are weaker
# evidence, and the kernel's own measurements should win wherever the two disagree.
PRIOR_WEIGHT = 0.25
# The largest blend weight the prior alone earns: a model that has never seen this kernel
# never outweighs the analytic ranking; the kernel's own measurements can take it to MAX_BLEND.
PRIOR_MAX_BLEND = 0.35
MAX_BLEND = 0.7
# Samples (own-kernel equivalents) at which the blend reaches one: weight = samples / this.
BLEND_SAMPLES = 100.0

# Prior rows per (text, cores): parsing and featurizing dominate a warm start, and the search
# builds one Ranker per kernel from mostly the same cache rows. Bounded; results never depend
# on it.
_ROW_MEMO: dict[tuple[str, int], tuple[np.ndarray, float] | None] = {}
_ROW_MEMO_MAX = 50_000


class LearnedCostModel:
    """XGBoost on (features, ``log measured - log predict``). ``fit`` on measured programs;
    ``predict`` returns log seconds (the analytic estimate corrected by the learned residual).
    Learning the residual, not the time, lets rows of one kernel teach about another: the run
    time's scale comes from the analytic model, the trees only learn where it errs. Without
    xgboost (or with too few samples) it is simply not ready."""

    def __init__(self, min_samples: int = 12, seed: int = 0, n_estimators: int = 60):
        self.min_samples = min_samples
        self.seed = seed
        self.n_estimators = n_estimators
        self.model = None
        self.n_samples = 0
        self._X: list[np.ndarray] = []
        self._y: list[float] = []          # residuals: log measured - log predict
        self._w: list[float] = []

    @property
    def ready(self) -> bool:
        return self.model is not None

    def add_row(self, x: np.ndarray, log_pred: float, seconds: float, weight: float = 1.0) -> None:
        """Add a featurized sample (``x`` from ``features``, ``log_pred`` the log analytic
        estimate)."""
        if not (seconds > 0 and math.isfinite(seconds)):
            raise ValueError(f"a measured time must be positive and finite, not {seconds!r}")
        if not weight > 0:
            raise ValueError(f"a sample weight must be positive, not {weight!r}")
        self._X.append(x)
        self._y.append(math.log(seconds) - log_pred)
        self._w.append(float(weight))

    def add(self, program: A.Program, seconds: float, cores: int | None = None,
            weight: float = 1.0) -> None:
        x = features(program, cores)
        self.add_row(x, float(x[LOG_PREDICT]), seconds, weight)

    def fit(self, programs: Iterable[A.Program] | None = None,
            seconds: Iterable[float] | None = None, cores: int | None = None) -> bool:
        if programs is not None:
            for p, s in zip(programs, seconds or ()):
                self.add(p, s, cores)
        if len(self._y) < self.min_samples:
            return False
        try:
            import xgboost as xgb
        except ImportError:  # pragma: no cover - xgboost is a dependency here
            return False
        X, y, w = np.vstack(self._X), np.asarray(self._y), np.asarray(self._w)
        params = {"max_depth": 4, "eta": 0.15, "subsample": 0.9, "seed": self.seed,
                  "nthread": 1, "verbosity": 0, "objective": "reg:squarederror"}
        # nthread=1 on the matrices too: by default each DMatrix starts an OpenMP team on
        # every core (40 ms a matrix of 60 rows on a busy 2-core machine, against 0.1 ms), and
        # its threads spin beside the verification workers; the data, and so the model, is
        # the same
        self.model = xgb.train(params, xgb.DMatrix(X, label=y, weight=w, nthread=1),
                               num_boost_round=self.n_estimators)
        self.n_samples = len(y)
        return True

    def fit_steps(self, steps, cores: int | None = None) -> bool:
        """Train on a steps table (polars DataFrame or rows): ``after_leir`` and
        ``after.median_s`` of measured rows (and each row's ``before``)."""
        from ..leir import parse

        rows = steps.iter_rows(named=True) if hasattr(steps, "iter_rows") else steps
        seen = set()
        for r in rows:
            for text_key, t_key in (("after_leir", "after"), ("before_leir", "before")):
                t = r.get(t_key)
                text = r.get(text_key)
                if not t or not text or text in seen:
                    continue
                seen.add(text)
                try:
                    self.add(parse(text), float(t["median_s"]), cores)
                except Exception:  # noqa: BLE001 - skip what does not parse
                    continue
        return self.fit()

    def residuals(self, programs: Sequence[A.Program], cores: int | None = None) -> np.ndarray:
        """The learned correction (log seconds) to the analytic estimate of each program."""
        return self.residuals_of(_feature_matrix(programs, cores))

    def residuals_of(self, X: np.ndarray) -> np.ndarray:
        """``residuals`` from a feature matrix (rows: ``features``)."""
        import xgboost as xgb

        if self.model is None:
            raise RuntimeError("the learned cost model is not trained yet (see .ready)")
        return np.asarray(self.model.predict(xgb.DMatrix(X, nthread=1)), dtype=np.float64)

    def predict(self, programs: Sequence[A.Program], cores: int | None = None) -> np.ndarray:
        """Log seconds: the log analytic estimate plus the learned residual."""
        return self.predict_of(_feature_matrix(programs, cores))

    def predict_of(self, X: np.ndarray) -> np.ndarray:
        """``predict`` from a feature matrix (the log analytic estimate is one of its columns)."""
        return X[:, LOG_PREDICT] + self.residuals_of(X)


def _feature_matrix(programs: Sequence[A.Program], cores: int | None) -> np.ndarray:
    return np.vstack([features(p, cores) for p in programs])


def _prior_row(row: Any, cores: int) -> tuple[np.ndarray, float] | None:
    """(features, log predict) of a prior program (LEIR text or Program); None when the text
    does not parse or the cost model cannot read it."""
    if isinstance(row, A.Program):
        x = features(row, cores)
        return x, float(x[LOG_PREDICT])
    key = (row, cores)
    if key in _ROW_MEMO:
        return _ROW_MEMO[key]
    from ..leir import parse

    try:
        x = features(parse(row), cores)
        out = (x, float(x[LOG_PREDICT]))
    except Exception:  # noqa: BLE001 - a stale or foreign text teaches nothing; skip it
        out = None
    if len(_ROW_MEMO) >= _ROW_MEMO_MAX:
        _ROW_MEMO.clear()
    _ROW_MEMO[key] = out
    return out


def _prior_enabled() -> bool:
    v = os.environ.get("STEPTP_RANKER_PRIOR", "0").strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"STEPTP_RANKER_PRIOR must be 1 or 0 (on/off), not {v!r}")


class Ranker:
    """Orders candidate programs, best first: the analytic ``score``, or a blend with the learned
    model once trained (retrained every ``retrain_every`` new measurements). Ties keep the input
    order.

    ``prior``: ``(program, seconds)`` rows (LEIR text or Program) measured on other kernels (or
    earlier runs) on the same machine; the model is pre-fitted on them at ``prior_weight`` each
    and keeps them through every retraining. Rows that do not parse are skipped.
    """

    def __init__(self, learned: bool = True, cores: int | None = None, retrain_every: int = 8,
                 seed: int = 0, min_samples: int = 16,
                 prior: Iterable[tuple[Any, float]] | None = None,
                 prior_weight: float = PRIOR_WEIGHT):
        if not 0 < prior_weight <= 1:
            raise ValueError(f"prior_weight must be in (0, 1], not {prior_weight!r}")
        self.cores = cores or _cores()
        self.model = LearnedCostModel(min_samples=min_samples, seed=seed) if learned else None
        self.retrain_every = retrain_every
        self.prior_weight = prior_weight
        self.n_prior = 0
        self._since = 0
        if prior is not None and self.model is not None:
            self._add_prior(prior)
            self.model.fit()

    @classmethod
    def from_cache(cls, cache, fingerprint_id: str, target_key: str,
                   limit: int | None = PRIOR_LIMIT, **kwargs) -> "Ranker":
        """A Ranker pre-fitted on the newest ``limit`` programs timed on this fingerprint and
        target in ``cache`` (a ``steptp.measure.cache.Cache``)."""
        return cls(prior=cache.timed_programs(fingerprint_id, target_key, limit), **kwargs)

    @classmethod
    def for_evaluator(cls, evaluator, seed: int = 0, **kwargs) -> "Ranker":
        """The search's default Ranker: warm-started from the evaluator's measurement cache
        when it has one (the Measurer's) and ``STEPTP_RANKER_PRIOR=1``; cold otherwise.

        A warm start makes the candidate order depend on what the cache holds, so a rerun on a
        cache the first run filled may search differently; cold, a rerun whose timings all hit
        the cache repeats the first run exactly."""
        measurer = getattr(evaluator, "measurer", None)
        cache = getattr(measurer, "cache", None)
        if cache is None or not _prior_enabled():
            return cls(learned=True, seed=seed, **kwargs)
        return cls.from_cache(cache, measurer.fingerprint.id, measurer.target.key,
                              learned=True, seed=seed, **kwargs)

    def _add_prior(self, rows: Iterable[tuple[Any, float]]) -> None:
        for program, seconds in rows:
            try:
                seconds = float(seconds)
            except (TypeError, ValueError):
                continue
            if not (seconds > 0 and math.isfinite(seconds)):
                continue
            row = _prior_row(program, self.cores)
            if row is None:
                continue
            self.model.add_row(row[0], row[1], seconds, self.prior_weight)
            self.n_prior += 1

    def observe(self, program: A.Program, seconds: float) -> None:
        if self.model is None:
            return
        self.model.add(program, seconds, self.cores)
        self._since += 1
        if self._since >= self.retrain_every or (not self.model.ready and
                                                 len(self.model._y) >= self.model.min_samples):
            self._since = 0
            self.model.fit()

    @property
    def blend_weight(self) -> float:
        """The learned model's share of the score (0 until it is trained)."""
        if self.model is None or not self.model.ready:
            return 0.0
        own = self.model.n_samples - self.n_prior   # prior rows come first and stay
        prior = min(PRIOR_MAX_BLEND, self.prior_weight * self.n_prior / BLEND_SAMPLES)
        return min(MAX_BLEND, own / BLEND_SAMPLES + prior)

    def scores(self, programs: Sequence[A.Program]) -> list[float]:
        """Lower is better (log seconds)."""
        if not programs:
            return []
        w = self.blend_weight
        if w <= 0:
            return [score(p, self.cores) for p in programs]
        # one feature row per program holds the analytic score's parts too
        X = _feature_matrix(programs, self.cores)
        analytic = [blend(float(a), float(b)) for a, b in zip(X[:, LOG_PREDICT], X[:, LOG_POTENTIAL])]
        learned = self.model.predict_of(X)
        # the learned model corrects the analytic one but never alone on few samples
        return [(1 - w) * a + w * float(b) for a, b in zip(analytic, learned)]

    def order(self, programs: Sequence[A.Program]) -> list[int]:
        s = self.scores(programs)
        return sorted(range(len(programs)), key=lambda i: (s[i], i))


__all__ = ["LearnedCostModel", "Ranker", "PRIOR_LIMIT", "PRIOR_WEIGHT"]
