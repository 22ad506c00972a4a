"""The learned ranker across kernels: program texts kept in the measurement cache, the residual
target, the warm start from the cache and its wiring into the search. Real parts: a SQLite file,
the Measurer's isolated workers and TVM timings, XGBoost."""

from __future__ import annotations

import math
import sqlite3
import time

import numpy as np
import pytest
from scipy.stats import spearmanr

from steptp.leir import parse
from steptp.leir.canon import canonical_text
from steptp.measure.cache import Cache, program_hash
from steptp.analysis.cost_model import features, predict
from steptp.search.ranker import PRIOR_WEIGHT, LearnedCostModel, Ranker

CORES = 2
EW = "kernel f32 ew(X[8,8]) -> Y[8,8]\n Y[i,j] = X[i,j] * 2.0\n"
EW2 = "kernel f32 ew2(X[8,16]) -> Y[8,16]\n Y[i,j] = X[i,j] + 1.0\n"
LEIR = "kernel f32 k(A[4]) -> B[4]\n B[i] = A[i] + 1.0\n"
TIMING = {"median_s": 1e-6, "min_s": 1e-6, "spread": 0.0, "repeats": 5, "number": 1}


def _mm(n: int, order: str, par: bool, vec: bool, f: int):
    """An n x n matmul with its column loop split by ``f``: i-k-j (j innermost, optionally
    vectorized) or i-j-k (the reduction innermost); the row loop optionally parallel."""
    p = " parallel" if par else ""
    if order == "ikj":
        v = " vectorized" if vec else ""
        loops = f" for i in {n}{p}, k in {n}, j in {n // f}, l in {f}{v}:\n"
    else:
        loops = f" for i in {n}{p}, j in {n // f}, l in {f}, k in {n}:\n"
    return parse(f"kernel f32 mm(A[{n},{n}], B[{n},{n}]) -> C[{n},{n}]\n" + loops +
                 f"  C[i,j*{f}+l] += A[i,k] * B[k,j*{f}+l]\n")


def _schedules(n: int) -> list[tuple]:
    """(program, hidden factor) pairs: the 'machine' runs each schedule at the analytic estimate
    times a factor the analytic model does not know (parallel 0.3x, vectorized 0.5x, reduction
    innermost 3x), the same on every kernel size — a transferable residual."""
    out = []
    for f in (4, 8, 16):
        for par in (False, True):
            for vec in (False, True):
                out.append((_mm(n, "ikj", par, vec, f), (0.3 if par else 1) * (0.5 if vec else 1)))
            out.append((_mm(n, "ijk", par, False, f), (0.3 if par else 1) * 3.0))
    return out


def _rows(pairs) -> list[tuple]:
    return [(p, predict(p, CORES) * k) for p, k in pairs]


# ---------------------------------------------------------------------------- the cache
@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A MeasurerEvaluator on a fresh cache that has timed EW and EW2 (tiny kernels)."""
    from steptp.measure import MeasureConfig
    from steptp.search import MeasurerEvaluator

    base = tmp_path_factory.mktemp("ranker")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STEPTP_LOCK_DIR", str(base / "locks"))
        mp.setenv("TVM_NUM_THREADS", "1")   # the evaluator sets it; restored after the module
        cfg = MeasureConfig(min_repeat_ms=2, repeats=5, remeasure_tries=1, timeout_s=60,
                            num_threads=1)
        ev = MeasurerEvaluator(config=cfg, cache=base / "cache.sqlite", num_threads=1)
        try:
            timings = [ev.time(EW), ev.time(EW2), ev.time(EW)]
            assert all(t.ok for t in timings), [t.reason for t in timings]
            yield ev, timings
        finally:
            ev.close()


def test_measurer_keeps_the_canonical_text_of_timed_leir(measured):
    ev, timings = measured
    m = ev.measurer
    assert timings[2].cached and m.stats["time_runs"] == 2
    rows = m.cache.timed_programs(m.fingerprint.id, m.target.key)
    assert rows == [(canonical_text(parse(EW2)), timings[1].timing.median_s),
                    (canonical_text(parse(EW)), timings[0].timing.median_s)]  # newest first
    assert program_hash(rows[1][0]) == program_hash(EW)
    assert m.cache.timed_programs(m.fingerprint.id, m.target.key, limit=1) == rows[:1]
    assert m.cache.timed_programs("another-machine", m.target.key) == []
    assert m.cache.timed_programs(m.fingerprint.id, "another-target") == []


def test_an_old_cache_file_gains_the_programs_table(tmp_path):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE timings (program_hash TEXT NOT NULL, target_key TEXT NOT NULL,
            fingerprint_id TEXT NOT NULL, config_hash TEXT NOT NULL, result TEXT NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (program_hash, target_key, fingerprint_id, config_hash));
        CREATE TABLE verifications (before_hash TEXT NOT NULL, after_hash TEXT NOT NULL,
            target_key TEXT NOT NULL, fingerprint_id TEXT NOT NULL, config_hash TEXT NOT NULL,
            result TEXT NOT NULL, created_at REAL NOT NULL,
            PRIMARY KEY (before_hash, after_hash, target_key, fingerprint_id, config_hash));
        INSERT INTO timings VALUES ('leir:old', 't', 'fp', 'cfg', '{"median_s": 0.5}', 1.0);
    """)
    con.commit()
    con.close()
    c = Cache(path)
    # written before timings carried the code version that made them: measured again, not reused
    assert c.get_timing("leir:old", "t", "fp", "cfg") is None
    assert c.timed_programs("fp", "t") == []   # a timing without a text cannot train anything
    ph = program_hash(LEIR)
    c.put_timing(ph, "t", "fp", "cfg", TIMING, leir=canonical_text(parse(LEIR)))
    assert c.timed_programs("fp", "t") == [(canonical_text(parse(LEIR)), 1e-6)]
    Cache(path)   # opening again changes nothing
    assert c.counts() == {"timings": 2, "verifications": 0}


def test_timed_programs_is_newest_first_one_row_per_program(tmp_path):
    c = Cache(tmp_path / "c.sqlite")
    texts = [f"kernel f32 k(A[{n}]) -> B[{n}]\n B[i] = A[i] + 1.0\n" for n in (2, 3, 4)]
    for i, t in enumerate(texts):
        c.put_timing(program_hash(t), "t", "fp", "cfg", {**TIMING, "median_s": float(i + 1)},
                     leir=t)
        time.sleep(0.002)
    # a newer timing of the first program under another measurement config wins
    c.put_timing(program_hash(texts[0]), "t", "fp", "cfg2", {**TIMING, "median_s": 9.0},
                 leir=texts[0])
    c.put_timing("tvms:abc", "t", "fp", "cfg", TIMING)   # TVMScript: no text, not returned
    assert c.timed_programs("fp", "t") == [(texts[0], 9.0), (texts[2], 3.0), (texts[1], 2.0)]
    assert c.timed_programs("fp", "t", limit=2) == [(texts[0], 9.0), (texts[2], 3.0)]
    with pytest.raises(ValueError, match="limit"):
        c.timed_programs("fp", "t", limit=-1)
    c.clear()
    assert c.timed_programs("fp", "t") == []


# ---------------------------------------------------------------------------- the residual model
def test_a_constant_factor_is_learned_as_the_residual():
    pairs = [(p, 3.0) for p, _ in _schedules(32) + _schedules(64)]
    m = LearnedCostModel(min_samples=8)
    for p, s in _rows(pairs):
        m.add(p, s, CORES)
    assert m.fit()
    held = [p for p, _ in _schedules(128)]
    assert np.allclose(m.residuals(held, CORES), math.log(3.0), atol=0.05)
    want = [math.log(predict(p, CORES) * 3.0) for p in held]
    assert np.allclose(m.predict(held, CORES), want, atol=0.05)


def test_a_residual_learned_on_other_kernels_ranks_a_held_out_kernel():
    train = _schedules(32) + _schedules(64) + _schedules(128)
    held = _schedules(96)
    ranker = Ranker(cores=CORES, prior=_rows(train))
    assert ranker.model.ready and ranker.n_prior == len(train)
    programs = [p for p, _ in held]
    truth = [s for _, s in _rows(held)]
    res = ranker.model.residuals(programs, CORES)
    assert np.allclose(res, [math.log(k) for _, k in held], atol=0.1)
    rho_learned = spearmanr(ranker.model.predict(programs, CORES), truth).statistic
    rho_analytic = spearmanr([predict(p, CORES) for p in programs], truth).statistic
    assert rho_learned > 0.99 and rho_learned > rho_analytic
    # The same trees on absolute log seconds cannot place a size they never saw: the reason
    # the target is the residual.
    absolute = LearnedCostModel(min_samples=8)
    for p, s in _rows(train):
        absolute.add_row(features(p, CORES), 0.0, s)
    absolute.fit()
    assert np.abs(absolute.residuals(programs, CORES) - np.log(truth)).max() > 0.3


def test_prior_rows_survive_retraining_and_weigh_less_than_own_ones():
    prior = _rows(_schedules(32) + _schedules(64))
    junk = [("not LEIR at all", 1.0), (LEIR, 0.0), (LEIR, float("nan")), (LEIR, "x")]
    r = Ranker(cores=CORES, retrain_every=2, min_samples=8, prior=prior + junk)
    assert r.n_prior == len(prior) and r.model.n_samples == len(prior)
    w0 = r.blend_weight
    assert w0 == pytest.approx(min(0.35, PRIOR_WEIGHT * len(prior) / 100))
    own = _rows(_schedules(128))[:4]
    for p, s in own:
        r.observe(p, s)
    assert r.model.n_samples == len(prior) + 4   # retrained twice, the prior still in
    assert r.blend_weight == pytest.approx(w0 + 4 / 100)
    cold = Ranker(cores=CORES, min_samples=8)
    assert cold.blend_weight == 0.0 and not cold.model.ready
    for p, s in prior[:8]:
        cold.observe(p, s)
    assert cold.blend_weight == pytest.approx(8 / 100)   # own samples count in full
    with pytest.raises(ValueError, match="prior_weight"):
        Ranker(prior_weight=0.0)


def test_warm_rankers_are_deterministic(tmp_path):
    rows = _rows(_schedules(32) + _schedules(64))
    held = [p for p, _ in _schedules(96)]
    a = Ranker(cores=CORES, seed=3, prior=rows).scores(held)
    b = Ranker(cores=CORES, seed=3, prior=[(canonical_text(p), s) for p, s in rows]).scores(held)
    assert a == b
    c = Cache(tmp_path / "c.sqlite")
    for p, s in rows:
        c.put_timing(program_hash(p), "t", "fp", "cfg", {**TIMING, "median_s": s},
                     leir=canonical_text(p))
    x = Ranker.from_cache(c, "fp", "t", cores=CORES, seed=3)
    y = Ranker.from_cache(c, "fp", "t", cores=CORES, seed=3)
    assert x.n_prior == len(rows) and x.scores(held) == y.scores(held)
    assert Ranker.from_cache(c, "fp", "t", limit=5, cores=CORES).n_prior == 5


# ---------------------------------------------------------------------------- wiring
def test_the_search_warm_starts_from_the_measurer_cache(measured, monkeypatch):
    from steptp.search import Budget, InProcessEvaluator, Search

    ev, _ = measured
    monkeypatch.delenv("STEPTP_RANKER_PRIOR", raising=False)
    assert Ranker.for_evaluator(ev).n_prior == 0   # cold by default: reproducible searches
    monkeypatch.setenv("STEPTP_RANKER_PRIOR", "1")
    assert Ranker.for_evaluator(ev).n_prior == 2
    s = Search(parse(EW), "ew", "beam", Budget(1, 30), 0, ev)
    assert s.root is not None and s.ranker.n_prior == 2
    monkeypatch.setenv("STEPTP_RANKER_PRIOR", "0")
    assert Ranker.for_evaluator(ev).n_prior == 0
    monkeypatch.setenv("STEPTP_RANKER_PRIOR", "maybe")
    with pytest.raises(ValueError, match="STEPTP_RANKER_PRIOR"):
        Ranker.for_evaluator(ev)
    monkeypatch.delenv("STEPTP_RANKER_PRIOR")
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    assert Ranker.for_evaluator(InProcessEvaluator(num_threads=1)).n_prior == 0
