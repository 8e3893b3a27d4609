"""A real OpenAI-compatible HTTP server on loopback that replays scripted replies (tests, GPU script).

    with ScriptedServer(policy) as server:          # policy(messages) -> reply text
        OpenAIGenerate(server.url, model="scripted")  # POST {url}/chat/completions

It is a stdlib ``ThreadingHTTPServer`` in a background thread speaking the chat-completions JSON
(``choices[0].message.content``, ``finish_reason``, ``usage``), or its chunks as server-sent events
when the request asks ``"stream": true`` (verifiers' eval client does); message contents given as
parts are joined to text for the policy. ``fail_after=N`` answers every request after the N-th with
HTTP 503 (a server going down); ``requests`` logs every request body.

:func:`kernel_policy` is the scripted "model" of the tests: it finds the task in the first prompt
and answers by the last feedback it sees.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Policy = Callable[[list[dict[str, str]]], str]
"""``policy(messages) -> reply text``; every message's content is text."""


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


class ScriptedServer:
    """OpenAI-compatible ``/v1/chat/completions`` replaying ``policy(messages)``."""

    def __init__(self, policy: Policy, *, fail_after: int | None = None, host: str = "127.0.0.1", port: int = 0):
        self.policy = policy
        self.fail_after = fail_after
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # (every reply has a Content-Length: connections are kept)

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    n = len(server.requests)
                if server.fail_after is not None and n > server.fail_after:
                    self._send(503, {"error": {"message": "scripted outage"}})
                    return
                messages = [{**m, "content": _text(m.get("content"))} for m in body["messages"]]
                try:
                    text = server.policy(messages)
                except Exception as exc:  # a broken script is a 500, visible in the test
                    self._send(500, {"error": {"message": f"policy failed: {exc!r}"}})
                    return
                words = len(text.split())
                usage = {"prompt_tokens": sum(len(m["content"].split()) for m in messages),
                         "completion_tokens": words, "total_tokens": words}
                base = {"id": f"chatcmpl-{n}", "created": 0, "model": body.get("model")}
                if not body.get("stream"):
                    self._send(200, {**base, "object": "chat.completion", "usage": usage, "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]})
                    return
                chunks = [{**base, "object": "chat.completion.chunk", "choices": [
                              {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
                          {**base, "object": "chat.completion.chunk", "choices": [
                              {"index": 0, "delta": {}, "finish_reason": "stop"}]}]
                if (body.get("stream_options") or {}).get("include_usage"):
                    chunks.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
                events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                self._send(200, events.encode(), "text/event-stream")

            def _send(self, code: int, payload: dict[str, Any] | bytes, content_type: str = "application/json") -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "ScriptedServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def fenced(code: str, prose: str = "Here is the kernel.") -> str:
    return f"{prose}\n\n```python\n{code.strip()}\n```\n"


def kernel_policy(script: dict[str, dict[str, str]]) -> Policy:
    """A scripted model over several tasks.

    ``script[marker]`` maps a substring of a task's source (found in the first user message) to
    replies by situation: ``"first"`` (no feedback yet), and, keyed by the verdict of the *last*
    feedback message: ``"after_correct"``, ``"after_incorrect"``, ``"after_compile"`` (failed to
    compile/load), ``"after_no_code"``, ``"after_hack"``. A missing key falls back to ``"first"``.
    """

    def policy(messages: list[dict[str, str]]) -> str:
        first = next(m["content"] for m in messages if m["role"] == "user")
        replies = next((r for marker, r in script.items() if marker in first), None)
        if replies is None:
            return "I do not know this task."
        feedback = [m["content"] for m in messages[1:] if m["role"] == "user"]
        if not feedback:
            return replies["first"]
        last = feedback[-1]
        for key, needle in (("after_no_code", "no code found"), ("after_hack", "integrity checks"),
                            ("after_compile", "failed to compile"), ("after_incorrect", "output is incorrect"),
                            ("after_correct", "Status: correct")):
            if needle in last:
                return replies.get(key, replies["first"])
        return replies["first"]

    return policy


__all__ = ["ScriptedServer", "kernel_policy", "fenced"]
