"""Problem files are untrusted code: ``steptp extract --problems`` runs them in contained
workers (no network, read-only files, user nobody when root) and only with ``--trust`` for
folders that are not steptp's own examples."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("tvm")

from steptp.cli import app  # noqa: E402
from steptp.zoo import extract as X  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"

TAIL = '''
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''

# connects to the test's loopback server when the module is executed; reports what happened
NET_PROBE = '''import os
import socket
import torch
import torch.nn as nn

try:
    s = socket.create_connection(("127.0.0.1", {port}), timeout=5)
    s.sendall(b"leaked")
    s.close()
    RESULT = "connected"
except OSError as e:
    RESULT = "blocked: " + str(e)
raise RuntimeError("network probe " + RESULT + "; uid=" + str(os.getuid()))
''' + TAIL

# writes next to the test's files (a folder the invoking user owns) and into the scratch space
WRITE_PROBE = '''import os
import tempfile
import torch
import torch.nn as nn

try:
    with open({target!r}, "w") as f:
        f.write("written by a problem file")
    RESULT = "written"
except OSError as e:
    RESULT = "refused: " + type(e).__name__ + " " + str(e.strerror)
with tempfile.NamedTemporaryFile() as f:  # its own scratch space works
    f.write(b"scratch")
raise RuntimeError("write probe " + RESULT + "; uid=" + str(os.getuid()))
''' + TAIL


class _Server:
    """A loopback TCP server that records every connection it accepts."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, addr = self.sock.accept()
            except OSError:
                continue
            self.accepted.append(addr)
            conn.close()

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


def test_problem_files_run_without_network_and_cannot_write_the_users_files(tmp_path):
    server = _Server()
    try:
        # the server is reachable from here: the probe's failure is the worker's doing
        socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
        for _ in range(50):
            if server.accepted:
                break
            threading.Event().wait(0.05)
        assert len(server.accepted) == 1
        probes = tmp_path / "probes"
        probes.mkdir()
        target = tmp_path / "written-by-a-problem.txt"
        (probes / "net_probe.py").write_text(NET_PROBE.format(port=server.port))
        (probes / "write_probe.py").write_text(WRITE_PROBE.format(target=str(target)))
        log = tmp_path / "extract.log"
        res = X.extract(X.refs_for_problems(probes), jobs=1, log_path=log)
    finally:
        server.close()
    scans = {s.workload: s for s in res.scans}
    net, wr = scans["net_probe"].error, scans["write_probe"].error
    assert "network probe blocked" in net, net
    assert len(server.accepted) == 1  # only the test's own connection
    assert "write probe refused" in wr, wr
    assert not target.exists()
    st = res.options["sandbox"]
    assert st["network"] in ("namespace", "user-namespace") or "blocked" in st["network"]
    if os.geteuid() == 0:
        # root switches to nobody: the problem saw that uid
        import pwd

        nobody = pwd.getpwnam("nobody").pw_uid
        assert st["user"] == "nobody" and st["uid"] == nobody
        assert f"uid={nobody}" in net and f"uid={nobody}" in wr
    assert "problem files run in contained workers" in log.read_text()


def test_cli_refuses_problem_files_without_trust(tmp_path):
    probs = tmp_path / "mine"
    probs.mkdir()
    (probs / "relu.py").write_text("import torch\nimport torch.nn as nn\n" + TAIL)
    out = tmp_path / "k.parquet"
    r = CliRunner().invoke(app, ["extract", "--problems", str(probs), "--out", str(out)])
    text = " ".join(r.output.split())
    assert r.exit_code == 2, text
    assert "refusing to run 1 problem files" in text and "relu.py" in text
    assert "pass --trust" in text and "executes them" in text
    assert not out.exists()
    # the help says it before anyone runs anything
    h = CliRunner().invoke(app, ["extract", "--help"], terminal_width=200)
    help_text = " ".join(h.output.split())
    assert "EXECUTES them" in help_text and "--trust" in help_text
    # steptp's own fixtures need no --trust
    from steptp.zoo.user import untrusted_problems

    assert untrusted_problems(FIXTURES / "problems_arch") == []
    assert [p.name for p in untrusted_problems(probs)] == ["relu.py"]
