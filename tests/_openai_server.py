"""A loopback HTTP server speaking the OpenAI chat-completions protocol (POST .../chat/completions):
it answers queued replies in order and keeps the requests.

A queued reply is a text (a normal completion with that content), "SLEEP" (too late for the
client), "HANG" (no answer until the server closes: a request the client is killed waiting
for), or a hostile shape: ``{"status": 500}`` (an error status), ``{"raw": "text"}`` (a body that
is not JSON), ``{"json": {...}}`` (any JSON body, e.g. no choices, a null content)."""

from __future__ import annotations

import http.server
import json
import threading
import time


def completion(model: str, content, **choice) -> dict:
    return {"id": "c1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}, **choice}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}


class OpenAIServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, replies):
        self.replies, self.requests, self.lock = list(replies), [], threading.Lock()
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def add(self, *replies) -> None:
        with self.lock:
            self.replies.extend(replies)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with self.server.lock:
            self.server.requests.append((self.path, dict(self.headers), body))
            reply = self.server.replies.pop(0) if self.server.replies else {"status": 503}
        status, ctype = 200, "application/json"
        if reply == "SLEEP":
            time.sleep(3)
            reply = "too late"
        if reply == "HANG":
            self.server.release.wait(120)
            return
        if isinstance(reply, dict) and "status" in reply:
            status = reply["status"]
            out = json.dumps({"error": {"message": "server error", "type": "server_error"}}).encode()
        elif isinstance(reply, dict) and "raw" in reply:
            out, ctype = reply["raw"].encode(), reply.get("ctype", "text/html")
        elif isinstance(reply, dict):
            out = json.dumps(reply["json"]).encode()
        else:
            out = json.dumps(completion(body["model"], reply)).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
        except OSError:  # the client gave up (the timeout case)
            pass
