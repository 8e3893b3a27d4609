"""A scripted OpenAI-compatible chat server on loopback that also streams (server-sent events), as
verifiers' eval client relays model calls with ``"stream": true``. The replies come from
``policy(messages)``: it plays the policy of the tests, nothing of verifiers is replaced."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Policy = Callable[[list[dict[str, Any]]], str]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


class StreamingChatServer:
    """``POST /v1/chat/completions``: a chat.completion, or its chunks as SSE when ``stream``."""

    def __init__(self, policy: Policy, host: str = "127.0.0.1"):
        self.policy = policy
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._json(404, {"error": {"message": f"no route {self.path}"}})
                server.requests.append(body)
                messages = [{**m, "content": _text(m.get("content"))} for m in body.get("messages", [])]
                text = server.policy(messages)
                n = len(server.requests)
                usage = {"prompt_tokens": sum(len(m["content"].split()) for m in messages),
                         "completion_tokens": len(text.split()), "total_tokens": 0}
                base = {"id": f"chatcmpl-{n}", "created": 0, "model": body.get("model", "scripted")}
                if not body.get("stream"):
                    return self._json(200, {**base, "object": "chat.completion", "usage": usage, "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]})
                chunks = [{**base, "object": "chat.completion.chunk", "choices": [
                              {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
                          {**base, "object": "chat.completion.chunk", "choices": [
                              {"index": 0, "delta": {}, "finish_reason": "stop"}]}]
                if (body.get("stream_options") or {}).get("include_usage"):
                    chunks.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
                data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                payload = data.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _json(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "StreamingChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
