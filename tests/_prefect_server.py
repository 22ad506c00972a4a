"""One real Prefect server on loopback for every flow the tests run in a subprocess.

A flow process with no server configured starts a temporary one (about 20 s on 2 cores) and stops
it at exit; the suite runs more than a dozen such processes. ``api_url()`` starts a real
``prefect server start`` once per pytest process, on a free port with its own PREFECT_HOME, and
stops it at exit. Each test keeps its own PREFECT_HOME for result storage, so task caches never
leak between tests: the server only keeps the run history.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

_URL: str | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api_url(timeout_s: float = 180.0) -> str:
    global _URL
    if _URL is not None:
        return _URL
    home = Path(tempfile.mkdtemp(prefix="steptp-prefect-server-"))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_UI_ENABLED="false")
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([str(Path(sys.executable).parent / "prefect"), "server", "start",
                             "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop() -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()

    atexit.register(stop)
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with {proc.returncode}: "
                               f"{(home / 'server.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    _URL = url
                    return url
        except OSError:
            pass
        time.sleep(0.5)
    stop()
    raise RuntimeError(f"prefect server did not answer on {url} within {timeout_s:.0f} s: "
                       f"{(home / 'server.log').read_text()[-2000:]}")
