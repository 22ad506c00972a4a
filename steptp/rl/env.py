"""An HTTP environment for multi-step RL: a client resets an episode on a kernel, then sends the
model's replies one step at a time; each reply is judged by the eval's judge
(:class:`steptp.eval.judge.Judge`, the measured strength of :mod:`steptp.rl.reward`) and scored by
:func:`steptp.rl.reward.score`, so an episode's rewards are the GRPO rewards of its states.

Endpoints (JSON in, JSON out):

* ``POST /reset`` ``{"kernel": <LEIR text>}`` or ``{"kernel_id": <id>}`` (with a release) ->
  ``{"episode", "observation", "done": false, "kernel_id"}``; ``observation`` is the chat prompt
  (system + user turns, ``steptp.format.chat.prompt_messages``) for the episode's program;
* ``POST /step`` ``{"episode", "reply"}`` -> ``{"observation", "reward", "done", "outcome",
  "reason", "speedup", "step_speedup", "step"}``: a verified step advances the program, anything
  else leaves it; ``done`` once ``max_steps`` replies were judged;
* ``GET /health`` -> ``{"ok": true, "episodes", "max_episodes", "max_steps"}``.

Requests are untrusted: the body is bounded (``MAX_BODY``), a reply is cut to
``reward.MAX_CHARS`` before it is judged (the judge parses it in a limited worker), and every
bad request is a JSON error (400 bad input, 404 unknown episode, 409 finished episode, 413 too
large, 503 too many live episodes).
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

from .reward import MAX_CHARS, score

# a reply of MAX_CHARS characters, JSON-escaped (\uXXXX at worst), plus the envelope: a larger
# body is not a reply, and is refused before it is read
MAX_BODY = MAX_CHARS * 6 + 4096
MAX_KERNEL_CHARS = 200_000
DEFAULT_MAX_STEPS = 4
DEFAULT_MAX_EPISODES = 64


class EnvError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class Episode:
    id: str
    kernel_id: str
    original: str
    program: str
    exactness: str = "exact"
    timing: Any = None
    baseline: Any = None
    steps: int = 0
    path: list[str] = field(default_factory=list)
    # one step at a time per episode: two concurrent replies must not both start from (and
    # both advance) the same state
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Env:
    """The episodes and the judge; :func:`make_server` puts it behind HTTP."""

    def __init__(self, judge: Any, *, release: Optional[str | Path] = None,
                 max_steps: int = DEFAULT_MAX_STEPS, max_episodes: int = DEFAULT_MAX_EPISODES,
                 hardware: Optional[str] = None, target: str = "cpu"):
        if max_steps < 1 or max_episodes < 1:
            raise ValueError("max_steps and max_episodes must be at least 1")
        self.judge, self.max_steps, self.max_episodes, self.target = judge, max_steps, max_episodes, target
        self._kernels: dict[str, str] = {}
        rel_hw = ""
        if release is not None:
            rel_hw = self._load_release(Path(release))
        if hardware is None:
            if rel_hw:
                hardware = rel_hw
            else:
                from ..eval.inputs import this_machine

                hardware = this_machine()
        self.hardware = hardware
        self._episodes: "OrderedDict[str, Episode]" = OrderedDict()
        self._lock = threading.Lock()
        # one Measurer behind the judge: its workers, cache and re-timer are used by one
        # judgement at a time (concurrent episodes queue here, each under its own limits)
        self._judge_lock = threading.Lock()

    def _load_release(self, folder: Path) -> str:
        import polars as pl

        path = folder / "data" / "kernels.parquet"
        if not path.is_file():
            raise ValueError(f"{folder}: no data/kernels.parquet (is it a release folder?)")
        df = pl.read_parquet(path)
        for col in ("kernel_id", "leir"):
            if col not in df.columns:
                raise ValueError(f"{path}: no column {col!r}")
        self._kernels = dict(zip(df["kernel_id"].to_list(), df["leir"].to_list()))
        stats = folder / "stats.json"
        if stats.is_file():
            return json.loads(stats.read_text()).get("hardware", "") or ""
        return ""

    # ------------------------------------------------------------------ episodes
    def _observation(self, ep: Episode) -> list[dict[str, str]]:
        from ..format.chat import prompt_messages

        return prompt_messages(ep.program, self.hardware)

    def _done(self, ep: Episode) -> bool:
        return ep.steps >= self.max_steps

    def _admit(self, ep: Episode) -> None:
        with self._lock:
            while len(self._episodes) >= self.max_episodes:
                # the oldest finished episode goes; live ones are never dropped under a client
                old = next((k for k, e in self._episodes.items() if self._done(e)), None)
                if old is None:
                    raise EnvError(503, f"{len(self._episodes)} episodes are live (max_episodes "
                                        f"{self.max_episodes}); finish one first")
                del self._episodes[old]
            self._episodes[ep.id] = ep

    def reset(self, body: Any) -> dict[str, Any]:
        from ..leir import LeirCheckError, LeirSyntaxError, check, format_program
        from ..leir.canon import canonical_hash
        from ..eval.judge import parse_untrusted

        if not isinstance(body, dict):
            raise EnvError(400, "the body must be a JSON object")
        kernel, kid = body.get("kernel"), body.get("kernel_id")
        if (kernel is None) == (kid is None):
            raise EnvError(400, "give exactly one of 'kernel' (LEIR text) and 'kernel_id'")
        if kid is not None:
            if not self._kernels:
                raise EnvError(400, "'kernel_id' needs a release (serve with --release); send 'kernel'")
            if not isinstance(kid, str) or kid not in self._kernels:
                raise EnvError(404, f"unknown kernel_id {str(kid)[:80]!r}")
            kernel = self._kernels[kid]
        if not isinstance(kernel, str) or not kernel.strip():
            raise EnvError(400, "'kernel' must be non-empty LEIR text")
        if len(kernel) > MAX_KERNEL_CHARS:
            raise EnvError(413, f"'kernel' has {len(kernel)} characters; at most {MAX_KERNEL_CHARS}")
        try:
            # a client's kernel is as untrusted as a reply: parsed in a limited worker
            prog = parse_untrusted(kernel)
            check(prog)
        except (LeirSyntaxError, LeirCheckError) as e:
            raise EnvError(400, f"'kernel' is not a LEIR program: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        except Exception as e:  # noqa: BLE001 - a worker that died on the text: the text's fault
            raise EnvError(400, f"'kernel' is not a LEIR program: {type(e).__name__}: {e}"[:300])
        text = format_program(prog)
        with self._judge_lock:
            baseline, why = self.judge.time_state(text)
        if baseline is None:
            raise EnvError(422, f"the kernel does not build or time: {why}"[:500])
        ep = Episode(secrets.token_hex(8), kid or canonical_hash(prog)[:16], text, text,
                     timing=baseline, baseline=baseline)
        self._admit(ep)
        return {"episode": ep.id, "kernel_id": ep.kernel_id, "observation": self._observation(ep),
                "done": False}

    def step(self, body: Any) -> dict[str, Any]:
        from ..eval.judge import State

        if not isinstance(body, dict):
            raise EnvError(400, "the body must be a JSON object")
        eid, reply = body.get("episode"), body.get("reply")
        if not isinstance(eid, str):
            raise EnvError(400, "'episode' (the id /reset returned) must be a string")
        if not isinstance(reply, str):
            raise EnvError(400, "'reply' (the model's text) must be a string")
        with self._lock:
            ep = self._episodes.get(eid)
        if ep is None:
            raise EnvError(404, f"unknown episode {eid[:80]!r} (finished episodes are dropped "
                                f"beyond {self.max_episodes})")
        with ep.lock:
            if self._done(ep):
                raise EnvError(409, f"episode {eid!r} is done ({ep.steps} steps); reset a new one")
            state = State(ep.kernel_id, ep.original, ep.program, timing=ep.timing, baseline=ep.baseline,
                          exactness=ep.exactness, depth=ep.steps, path=tuple(ep.path),
                          hardware=self.hardware, target=self.target)
            with self._judge_lock:
                (j,) = self.judge.judge_many(state, [reply[:MAX_CHARS]])
            # passed: as the measured reward reads a judgement (judge_completions)
            r = score(j, j.legal is True)
            if j.verified:
                ep.program, ep.timing, ep.exactness = j.program, j.after, j.exactness
                ep.path.append(j.strategy)
            ep.steps += 1
            return {"observation": self._observation(ep), "reward": r, "done": self._done(ep),
                    "outcome": j.outcome, "reason": j.reason, "speedup": j.speedup,
                    "step_speedup": j.step_speedup, "step": ep.steps, "strategy": j.strategy}

    def health(self) -> dict[str, Any]:
        with self._lock:
            n = len(self._episodes)
        return {"ok": True, "episodes": n, "max_episodes": self.max_episodes, "max_steps": self.max_steps}


# ---------------------------------------------------------------------- HTTP
class _Handler(BaseHTTPRequestHandler):
    env: Env                      # set on the subclass make_server builds
    server_version = "steptp-env"
    # a client that opens a request and stalls holds one thread; after this it is dropped
    timeout = 120
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):   # a training loop's thousands of steps: no stderr line each
        pass

    def _send(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": message, "status": status})

    def do_GET(self):
        if self.path.rstrip("/") == "/health":
            return self._send(200, self.env.health())
        self._error(404, f"no GET {self.path[:80]}; GET /health, POST /reset, POST /step")

    def do_POST(self):
        route = {"/reset": self.env.reset, "/step": self.env.step}.get(self.path.rstrip("/"))
        try:
            n = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            return self._error(411, "a Content-Length header is required")
        if n < 0 or n > MAX_BODY:
            # not read: the connection closes instead of draining an oversized body
            self.close_connection = True
            return self._error(413, f"body of {n} bytes; at most {MAX_BODY}")
        raw = self.rfile.read(n)
        if route is None:
            return self._error(404, f"no POST {self.path[:80]}; POST /reset or /step")
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            return self._error(400, f"the body is not JSON: {e}")
        try:
            self._send(200, route(body))
        except EnvError as e:
            self._error(e.status, e.message)
        except Exception as e:  # noqa: BLE001 - the measurer failed, not the request: say so, serve on
            self._error(500, f"{type(e).__name__}: {e}"[:500])


def make_server(env: Env, host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """A threading HTTP server for ``env`` (``port`` 0: an ephemeral one, see ``server_address``);
    run it with ``serve_forever()``."""
    handler = type("EnvHandler", (_Handler,), {"env": env})
    srv = ThreadingHTTPServer((host, port), handler)
    srv.daemon_threads = True
    return srv


def open_judge(*, jobs: int = 1, memory_limit_mb: Optional[int] = None, cache: Any = True,
               step_timeout_s: Optional[float] = None, config: Any = None):
    """A judge over its own :class:`~steptp.measure.Measurer` (the measured reward's settings);
    returns (judge, measurer) — close both."""
    from ..eval.judge import Judge
    from ..measure.runner.local import Measurer

    m = Measurer(config=config, cache=cache, jobs=jobs, memory_limit_mb=memory_limit_mb,
                 verify_timeout_s=step_timeout_s)
    return Judge(m, retime_rounds=0), m


__all__ = ["DEFAULT_MAX_EPISODES", "DEFAULT_MAX_STEPS", "Env", "EnvError", "MAX_BODY", "make_server",
           "open_judge"]
