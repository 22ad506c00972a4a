"""A Measurer's workers start early and light: ``prestart`` starts them in the background at
construction (their TVM import overlaps the caller's first work), and they import TVM without
torch (``STEPTP_WORKER_WITHOUT``), which measurement never needs. Real workers."""

from __future__ import annotations

import time

from steptp.measure import MeasureConfig, Measurer
from steptp.measure.adversarial import MATMUL


def _wait_started(m: Measurer, n: int, limit_s: float = 120.0) -> None:
    pool = m._pool("verify")
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if sum(w.alive() for w in pool.workers) == n and len(pool.idle()) == n:
            return
        time.sleep(0.1)
    raise AssertionError("the workers did not start")


def test_prestart_starts_every_worker_before_any_request(tmp_path):
    with Measurer(None, MeasureConfig(num_threads=1), cache=None, jobs=2,
                  lock_directory=tmp_path, prestart=True) as m:
        _wait_started(m, 2)
        assert m.worker_starts == 2 and m.stats["verify_runs"] == 0
        # a request then finds them started: no further start
        assert m.verify_many([(MATMUL, MATMUL)])[0].passed and m.worker_starts == 2


def test_without_prestart_nothing_starts_until_a_request(tmp_path):
    with Measurer(None, MeasureConfig(num_threads=1), cache=None, jobs=2,
                  lock_directory=tmp_path) as m:
        time.sleep(0.5)
        assert m.worker_starts == 0


def test_measurement_workers_do_not_import_torch(tmp_path):
    with Measurer(None, MeasureConfig(num_threads=1), cache=None, jobs=1,
                  lock_directory=tmp_path) as m:
        r = m._pool("verify").run("ping", {"modules": ["torch", "tvm", "numpy"]})
        assert r.ok and r.value["modules"] == ["numpy", "tvm"]
        # and they still verify and time (torch is not needed for either)
        assert m.verify_many([(MATMUL, MATMUL)])[0].passed
        assert m.time_many([MATMUL], check_speed_of_light=False)[0].ok
