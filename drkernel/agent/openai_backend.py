"""A ``Generate`` backend for any OpenAI-compatible chat endpoint (``vllm serve``, hosted models).

    generate = OpenAIGenerate("http://localhost:8000/v1", model="Qwen/Qwen3-8B", timeout=600, max_retries=3)
    reply = await generate([{"role": "user", "content": "..."}], temperature=1.0, max_tokens=8192)

It uses the ``openai`` client (``pip install openai``; its retries back off exponentially on
connection errors, timeouts, 408/409/429 and 5xx). Where ``openai`` is not installed (an offline
GPU box), the same requests go through a small standard-library client with the same timeout and
retry rules (``backend="http"`` forces it). Either way, once the retries are spent the call raises
:class:`GenerationError` naming the server and the last error, so a run fails clearly and keeps what
it finished.

Token ids and log-probs: pass ``logprobs=True`` in the sampling arguments; vLLM's
``return_tokens_as_token_ids`` (sent when ``token_ids=True``) makes each returned token
``token_id:<id>``, which becomes ``Generation.token_ids``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import urllib.error
import urllib.request
from typing import Any

from drkernel.agent.types import Generation, Message

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class GenerationError(RuntimeError):
    """The generation backend failed after its retries (unreachable server, persistent errors)."""


class EndpointUnavailable(GenerationError):
    """:meth:`OpenAIGenerate.probe` got no HTTP answer from the server (refused, unresolvable, timed out)."""

    def __init__(self, url: str, reason: str):
        self.url = url
        self.reason = reason
        super().__init__(f"{url}: {reason}")


class OpenAIGenerate:
    """Chat completions from an OpenAI-compatible server, as a :class:`~drkernel.agent.types.Generate`."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 600.0,
                 max_retries: int = 3, backend: str = "auto", token_ids: bool = False, **sampling_defaults: Any):
        """
        Args:
            base_url: e.g. ``http://localhost:8000/v1``.
            model: model name as the server knows it.
            api_key: default ``$OPENAI_API_KEY``, else ``"EMPTY"`` (vLLM accepts any key).
            timeout: seconds for one request.
            max_retries: retries after the first attempt (exponential backoff with jitter).
            backend: ``auto`` (the ``openai`` client if installed), ``openai`` or ``http`` (stdlib).
            token_ids: ask vLLM for token ids (``return_tokens_as_token_ids``) with the log-probs.
            **sampling_defaults: default sampling arguments (temperature, top_p, max_tokens, ...).
        """
        if backend not in ("auto", "openai", "http"):
            raise ValueError(f"backend must be 'auto', 'openai' or 'http', got {backend!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.token_ids = token_ids
        self.sampling_defaults = sampling_defaults
        self._client: Any = None
        if backend in ("auto", "openai"):
            try:
                import openai
            except ImportError:
                if backend == "openai":
                    raise ImportError("backend='openai' needs the openai package: pip install openai") from None
            else:
                self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout,
                                                  max_retries=self.max_retries)
        self.backend = "openai" if self._client is not None else "http"

    def _body(self, messages: list[Message], sampling: dict[str, Any]) -> dict[str, Any]:
        body = {**self.sampling_defaults, **sampling}
        extra = dict(body.pop("extra_body", None) or {})
        if self.token_ids and body.get("logprobs"):
            extra["return_tokens_as_token_ids"] = True
        return {"model": self.model, "messages": list(messages), **body, **({"extra_body": extra} if extra else {})}

    async def __call__(self, messages: list[Message], **sampling: Any) -> Generation:
        body = self._body(messages, sampling)
        if self._client is not None:
            data = await self._call_openai(body)
        else:
            data = await self._call_http(body)
        return parse_completion(data)

    async def _call_openai(self, body: dict[str, Any]) -> dict[str, Any]:
        import openai

        try:
            response = await self._client.chat.completions.create(**body)
        except (openai.APIConnectionError, openai.APITimeoutError, openai.APIStatusError) as exc:
            raise GenerationError(f"{self.base_url}: {type(exc).__name__}: {exc} "
                                  f"(after {self.max_retries} retries)") from exc
        return response.model_dump()

    async def _call_http(self, body: dict[str, Any]) -> dict[str, Any]:
        extra = body.pop("extra_body", None) or {}
        payload = json.dumps({**body, **extra}).encode()
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)) * (0.75 + 0.5 * random.random()))
            try:
                return await asyncio.to_thread(self._post, payload)
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read()[:500].decode(errors='replace')}"
                if exc.code not in RETRY_STATUS:
                    break
            except (urllib.error.URLError, OSError, TimeoutError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
        raise GenerationError(f"{self.base_url}: {last} (after {self.max_retries} retries)")

    def _post(self, payload: bytes) -> dict[str, Any]:
        req = urllib.request.Request(self.base_url + "/chat/completions", data=payload, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.api_key}"})
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read())

    def probe(self, timeout: float = 10.0) -> int:
        """Check that the server answers, before a run writes anything: one ``GET <base_url>/models``
        (standard library, no retries). Returns the HTTP status of any answer (a server without
        ``/models`` still answers); raises :class:`EndpointUnavailable` when nothing answers and
        ``PermissionError`` for 401/403 (the API key was refused)."""
        req = urllib.request.Request(self.base_url + "/models", method="GET",
                                     headers={"Authorization": f"Bearer {self.api_key}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                raise PermissionError(f"HTTP {exc.code}") from None
            return int(exc.code)
        except (urllib.error.URLError, OSError, TimeoutError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise EndpointUnavailable(self.base_url, f"{type(reason).__name__}: {reason}"
                                      if not isinstance(reason, str) else reason) from None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()


def parse_completion(data: dict[str, Any]) -> Generation:
    """A chat-completion response (as a dict) -> :class:`Generation`."""
    choices = data.get("choices") or []
    if not choices:
        raise GenerationError(f"response has no choices: {str(data)[:300]}")
    choice = choices[0]
    message = choice.get("message") or {}
    text = message.get("content") or ""
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning and "</think>" not in text:
        text = f"<think>{reasoning}</think>\n{text}"  # keep the reasoning, marked so extraction skips it
    token_ids = logprobs = None
    content = ((choice.get("logprobs") or {}).get("content")) or None
    if content:
        logprobs = [float(c["logprob"]) for c in content]
        tokens = [c.get("token", "") for c in content]
        if tokens and all(t.startswith("token_id:") for t in tokens):
            token_ids = [int(t.split(":", 1)[1]) for t in tokens]
    usage = {k: int(v) for k, v in (data.get("usage") or {}).items() if isinstance(v, int)}
    return Generation(text=text, token_ids=token_ids, logprobs=logprobs, finish_reason=choice.get("finish_reason"),
                      usage=usage)


__all__ = ["OpenAIGenerate", "GenerationError", "EndpointUnavailable", "parse_completion"]
