"""The "A cluster, by hand" section of docs/scale-out.md, run as written on loopback: its
`dask scheduler`, `dask worker`, TVM RPC tracker and server commands and its params block, then
`steptp release`.

The commands and the YAML are read from docs/scale-out.md (only the host names and ports are
replaced), so an edit of that page that breaks them breaks this test.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _free_port(lo: int = 0, hi: int = 0) -> int:
    """A free loopback port: any (``lo`` = 0), or the first free one in [lo, hi)."""
    for port in (range(lo, hi) if lo else [0]):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError(f"no free port in [{lo}, {hi})")


#: the page that documents running on a cluster (README.md links to it)
PAGE = ROOT / "docs" / "scale-out.md"


def readme_cluster() -> tuple[list[str], dict]:
    """(the shell lines of docs/scale-out.md's cluster block, its params YAML)."""
    text = PAGE.read_text()
    at = text.index("A cluster, by hand")
    blocks = re.findall(r"```(\w*)\n(.*?)```", text[at:], flags=re.S)
    shell = next(body for lang, body in blocks if lang in ("", "sh", "bash"))
    params = next(body for lang, body in blocks if lang == "yaml")
    lines = [ln.split("#", 1)[0].strip() for ln in shell.splitlines()]
    return [ln for ln in lines if ln], yaml.safe_load(params)


def test_the_readme_cluster_block_names_every_piece():
    lines, params = readme_cluster()
    assert any(ln.startswith("dask scheduler") for ln in lines)
    assert any(ln.startswith("dask worker") for ln in lines)
    assert any("tvm.exec.rpc_tracker" in ln for ln in lines)
    assert any("tvm.exec.rpc_server" in ln for ln in lines)
    assert params["runner"]["kind"] == "dask" and params["runner"]["address"].startswith("tcp://")
    assert params["devices"]["tracker"] and params["devices"]["key"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_readme_cluster_commands_build_a_release_on_loopback(tmp_path):
    from _prefect_server import api_url
    from test_flows import SMALL
    from test_scaleout import _cmdline, _descendants

    from steptp import params as P

    lines, readme_params = readme_cluster()
    # TVM's tracker searches [--port, 9199) for a port (its --port-end default): a port below
    # that end keeps the page's command as written
    sched_port, tracker_port = _free_port(), _free_port(9190, 9199)
    old_sched = readme_params["runner"]["address"].rsplit(":", 1)[1]
    old_tracker = readme_params["devices"]["tracker"].rsplit(":", 1)[1]

    def local(line: str) -> list[str]:
        line = (line.replace("SCHEDULER", "127.0.0.1").replace("TRACKER", "127.0.0.1")
                .replace("0.0.0.0", "127.0.0.1").replace(old_sched, str(sched_port))
                .replace(old_tracker, str(tracker_port)))
        argv = shlex.split(line)
        if argv[0] == "python":
            argv[0] = sys.executable
        elif argv[0] == "dask":
            argv[0] = str(BIN / "dask")
        return argv

    env = dict(os.environ, PYTHONPATH=str(ROOT), PREFECT_API_URL=api_url(),
               PREFECT_HOME=str(tmp_path / "prefect-home"), STEPTP_LOCK_DIR=str(tmp_path / "locks"),
               TVM_NUM_THREADS="1")
    env.pop("PREFECT_LOCAL_STORAGE_PATH", None)
    procs: list[subprocess.Popen] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(argv: list[str], name: str) -> subprocess.Popen:
        f = open(logs / f"{name}.log", "w")
        p = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=f, stderr=subprocess.STDOUT,
                             start_new_session=True)
        procs.append(p)
        return p

    query = None
    try:
        worker = None
        for i, line in enumerate(lines):
            argv = local(line)
            if "query_rpc_tracker" in line:
                query = argv
                continue
            copies = 2 if "rpc_server" in line else 1        # "per device": two devices
            for c in range(copies):
                p = start(argv, f"{i}-{c}")
                if "dask" in argv[0] and argv[1] == "worker":
                    worker = p
            if "rpc_tracker" in line or argv[1:2] == ["scheduler"]:
                time.sleep(2)                                  # listening before its clients
        assert worker is not None
        key = readme_params["devices"]["key"]
        from dask.distributed import Client
        from tvm import rpc

        deadline = time.monotonic() + 120
        while True:
            try:
                free = rpc.connect_tracker("127.0.0.1", tracker_port).summary()[
                    "queue_info"].get(key, {}).get("free", 0)
            except Exception:  # noqa: BLE001 - the tracker is still starting
                free = 0
            if free >= 2:
                break
            assert time.monotonic() < deadline, (logs / "2-0.log").read_text()[-2000:]
            time.sleep(0.5)
        q = subprocess.run(query, env=env, capture_output=True, text=True, timeout=60)
        assert q.returncode == 0 and key in q.stdout, q.stdout + q.stderr
        with Client(f"tcp://127.0.0.1:{sched_port}", timeout=60) as client:
            client.wait_for_workers(2, timeout=120)

        params = {**SMALL, **{k: v for k, v in readme_params.items() if k != "search"},
                  "search": {**SMALL["search"], **readme_params["search"]}}
        params["runner"] = {**params["runner"], "address": f"tcp://127.0.0.1:{sched_port}"}
        params["devices"] = {**params["devices"], "tracker": f"127.0.0.1:{tracker_port}"}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        out = tmp_path / "releases"
        release = subprocess.Popen([str(BIN / "steptp"), "release", "--params", "params.yaml",
                                    "--out", str(out)], cwd=tmp_path, env=env,
                                   stdout=open(logs / "release.log", "w"), stderr=subprocess.STDOUT)
        searched_on_worker = False
        while release.poll() is None:        # a search runs inside a `dask worker` process
            if not searched_on_worker:
                searched_on_worker = any("steptp.measure.worker" in _cmdline(c)
                                         for c in _descendants(worker.pid))
            time.sleep(0.3)
        log = (logs / "release.log").read_text()
        assert release.returncode == 0, log[-4000:]
        assert searched_on_worker, log[-3000:]

        rel = out / "steptp-small-0.0.1"
        man = json.loads((rel / "manifest.json").read_text())
        assert man["counts"]["steps"] >= 1
        fleet_fp = P.fingerprint(P.parse(params))
        assert fleet_fp["machine"] == f"rpc:{key}"
        steps = pl.read_parquet(rel / "data/steps.parquet")
        timed = steps.filter(pl.col("after").is_not_null())
        assert timed.height >= 1 and set(timed["fingerprint"].to_list()) == {fleet_fp["id"]}
        free = rpc.connect_tracker("127.0.0.1", tracker_port).summary()["queue_info"][key]["free"]
        assert free == 2                                      # both devices handed back
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
