"""The learned side of candidate ranking: an XGBoost model on the analytic features of
:mod:`steptp.search.cost_model`, and the :class:`Ranker` the search orders candidates with.

* :class:`LearnedCostModel` — an optional XGBoost regressor on (features, log measured time),
  trained on measured results (the search's own measurements, or a steps table);
* :class:`Ranker` — the analytic ``score`` until the learned model has enough samples, then a
  blend of both.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from ..leir import ast as A
from .cost_model import _cores, features, score


class LearnedCostModel:
    """XGBoost on (features, log seconds). ``fit`` on measured programs; ``predict`` returns log
    seconds. Without xgboost (or with too few samples) it is simply not ready."""

    def __init__(self, min_samples: int = 12, seed: int = 0, n_estimators: int = 60):
        self.min_samples = min_samples
        self.seed = seed
        self.n_estimators = n_estimators
        self.model = None
        self.n_samples = 0
        self._X: list[np.ndarray] = []
        self._y: list[float] = []

    @property
    def ready(self) -> bool:
        return self.model is not None

    def add(self, program: A.Program, seconds: float, cores: int | None = None) -> None:
        self._X.append(features(program, cores))
        self._y.append(math.log(seconds))

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
        X, y = np.vstack(self._X), np.asarray(self._y)
        params = {"max_depth": 4, "eta": 0.15, "subsample": 0.9, "seed": self.seed,
                  "nthread": 1, "verbosity": 0, "objective": "reg:squarederror"}
        self.model = xgb.train(params, xgb.DMatrix(X, label=y), num_boost_round=self.n_estimators)
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

    def predict(self, programs: Sequence[A.Program], cores: int | None = None) -> np.ndarray:
        import xgboost as xgb

        X = np.vstack([features(p, cores) for p in programs])
        return np.asarray(self.model.predict(xgb.DMatrix(X)), dtype=np.float64)


class Ranker:
    """Orders candidate programs, best first: the analytic ``score``, or the learned model once
    trained (retrained every ``retrain_every`` new measurements). Ties keep the input order."""

    def __init__(self, learned: bool = True, cores: int | None = None, retrain_every: int = 8,
                 seed: int = 0, min_samples: int = 16):
        self.cores = cores or _cores()
        self.model = LearnedCostModel(min_samples=min_samples, seed=seed) if learned else None
        self.retrain_every = retrain_every
        self._since = 0

    def observe(self, program: A.Program, seconds: float) -> None:
        if self.model is None:
            return
        self.model.add(program, seconds, self.cores)
        self._since += 1
        if self._since >= self.retrain_every or (not self.model.ready and
                                                 len(self.model._y) >= self.model.min_samples):
            self._since = 0
            self.model.fit()

    def scores(self, programs: Sequence[A.Program]) -> list[float]:
        """Lower is better (log seconds)."""
        if not programs:
            return []
        analytic = [score(p, self.cores) for p in programs]
        if self.model is not None and self.model.ready:
            learned = self.model.predict(programs, self.cores)
            # blend: the learned model corrects the analytic one but never alone on few samples
            w = min(0.7, self.model.n_samples / 100.0)
            return [(1 - w) * a + w * float(b) for a, b in zip(analytic, learned)]
        return analytic

    def order(self, programs: Sequence[A.Program]) -> list[int]:
        s = self.scores(programs)
        return sorted(range(len(programs)), key=lambda i: (s[i], i))


__all__ = ["LearnedCostModel", "Ranker"]
