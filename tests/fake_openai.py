"""A local OpenAI-compatible HTTP server, so the real `openai` client code runs in tests.

    with FakeOpenAI() as fake:
        fake.chat_replies.append('{"facts": [...]}')      # next chat answers, in order
        fake.chat_mode = "timeout" | "500" | "ok"
        fake.chat_gate = threading.Barrier(3, timeout=120)  # answer chats three at a time
        base_url = fake.base_url                          # "http://127.0.0.1:<port>/v1"

Embeddings are deterministic hashed bags of words (64 dimensions): texts sharing words are close,
which is enough to exercise the embeddings backend end to end.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

DIM = 64


def hashed_embedding(text: str) -> list[float]:
    vec = np.zeros(DIM, dtype=np.float64)
    for word in re.findall(r"\w+", text.lower()):
        h = int(hashlib.md5(word.encode()).hexdigest(), 16)
        vec[h % DIM] += 1.0 if (h >> 8) % 2 else -1.0
    norm = np.linalg.norm(vec)
    return (vec / norm if norm else vec).tolist()


class FakeOpenAI:
    def __init__(self) -> None:
        self.chat_replies: deque[str] = deque()
        self.chat_mode = "ok"
        self.delay = 0.0
        # When set, each chat request waits here for the others of its round: concurrent
        # callers are all inside their LLM step at once, whatever the machine's load.
        self.chat_gate: threading.Barrier | None = None
        self.requests: list[dict[str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append({"path": self.path, "body": body})
                if fake.delay:
                    time.sleep(fake.delay)
                if self.path.endswith("/embeddings"):
                    inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                    self._send(
                        200,
                        {
                            "object": "list",
                            "model": body.get("model", "fake"),
                            "data": [
                                {
                                    "object": "embedding",
                                    "index": i,
                                    "embedding": hashed_embedding(t),
                                }
                                for i, t in enumerate(inputs)
                            ],
                            "usage": {"prompt_tokens": 1, "total_tokens": 1},
                        },
                    )
                    return
                if self.path.endswith("/chat/completions"):
                    if fake.chat_gate is not None:
                        fake.chat_gate.wait()
                    if fake.chat_mode == "500":
                        self._send(500, {"error": {"message": "boom", "type": "server_error"}})
                        return
                    if fake.chat_mode == "timeout":
                        # Longer than the client waits: it has given up. Answer nothing, so that
                        # no reply queued for a later request (maybe another test's, the server
                        # being shared) is consumed by this late one.
                        time.sleep(5)
                        return
                    content = fake.chat_replies.popleft() if fake.chat_replies else "{}"
                    self._send(
                        200,
                        {
                            "id": "chatcmpl-fake",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": body.get("model", "fake"),
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content},
                                }
                            ],
                            "usage": {
                                "prompt_tokens": 100,
                                "completion_tokens": 20,
                                "total_tokens": 120,
                            },
                        },
                    )
                    return
                self._send(404, {"error": {"message": "unknown path"}})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
