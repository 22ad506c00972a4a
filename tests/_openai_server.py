"""A loopback HTTP server speaking the OpenAI chat-completions protocol (POST .../chat/completions):
it answers queued reply texts in order ("SLEEP": too late for the client) and keeps the requests."""

from __future__ import annotations

import http.server
import json
import threading
import time


class OpenAIServer(http.server.ThreadingHTTPServer):
    def __init__(self, replies):
        self.replies, self.requests, self.lock = list(replies), [], threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        with self.server.lock:
            self.server.requests.append((self.path, dict(self.headers), body))
            text = self.server.replies.pop(0)
        if text == "SLEEP":
            time.sleep(3)
        out = json.dumps({"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": text}}],
                          "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}).encode()
        try:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
        except OSError:  # the client gave up (the timeout case)
            pass
