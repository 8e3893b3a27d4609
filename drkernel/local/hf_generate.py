"""``HFGenerate``: the agent's ``Generate`` backend for a local Hugging Face causal LM.

    gen = HFGenerate(model, tokenizer, device="cpu", max_new_tokens=512, temperature=1.0, seed=0)
    out = await gen([{"role": "user", "content": "..."}])
    out.token_ids, out.logprobs, out.prompt_token_ids, out.finish_reason

* **Prompt.** The chat template renders the messages (``add_generation_prompt=True``) and the
  text is tokenised, except that an assistant message this backend produced itself is spliced in
  as the *token ids it sampled* (token-in/token-out): the prompt of turn t+1 then starts with the
  prompt and reply ids of turn t, so a trainer can lay a whole multi-turn episode out as one
  sequence whose policy tokens are exactly the sampled ones (``drkernel.local.pack``).
* **Sampling.** Token by token with the KV cache: ``p = softmax(logits / temperature)``, then
  optional top-k / top-p truncation (per row), then a draw from this backend's own
  ``torch.Generator`` on the model's device (seeded; no global RNG). ``temperature=0`` is greedy.
  One device-to-host copy per step (the sampled ids and their log-probs): the loop does not stall
  the GPU on per-row reads.
* **Log-probs** are ``log softmax(logits / temperature)`` of each sampled token, before top-k /
  top-p truncation (vLLM's default): the quantity the trainer recomputes as ``log pi_old``.
  Greedy decoding reports them at temperature 1.
* **Stop.** The tokenizer's EOS id, the chat template's end-of-turn token when the vocabulary has
  one (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``) and any ``stop_token_ids``; the stop
  token is part of ``token_ids`` (``finish_reason="stop"``) but not of ``text``, which decodes
  every other sampled token (special tokens included, so it maps back to the same ids). Running out of ``max_new_tokens``
  (or of the model's context) gives ``finish_reason="length"``.

Concurrent calls (the episodes of a step run as asyncio tasks) are sampled together as one
left-padded batch on a worker thread, so the event loop keeps grading while the model generates;
sampling draws from this backend's own ``torch.Generator`` (seeded; no global RNG).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import torch

from drkernel.agent.types import Generation, Message

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")
"""Chat end-of-turn tokens that stop generation when the vocabulary has them."""

_SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_new_tokens", "max_tokens", "stop_token_ids"}


@dataclass
class _Request:
    prompt_ids: list[int]
    opts: dict[str, Any]
    future: "asyncio.Future[Generation]"

    @property
    def key(self) -> str:
        return repr(sorted((k, tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in self.opts.items()))


class HFGenerate:
    """``Generate`` for a local HF causal LM (see the module docstring).

    Args:
        model_or_path: a loaded ``PreTrainedModel``, or a local directory to load one from
            (``local_files_only``: nothing is downloaded).
        tokenizer: a tokenizer with a chat template; None = load it from ``model_or_path``.
        device: where the model runs (``cpu``, ``cuda``, ``cuda:1``); a loaded model is moved there.
        seed: seed of this backend's sampling generator.
        cache_size: how many of its own replies it remembers (for token-in/token-out splicing).
        max_batch: most requests sampled together.
        autocast_dtype: run the model's forwards under ``torch.autocast`` with this dtype (the
            trainer's bf16-mixed precision on cuda); None = the weights' own dtype.
        step_guard: a context-manager factory entered around each decoding step's GPU work. The
            one-machine trainer passes the shared side of the grader's GPU gate
            (:func:`drkernel.env.evaluation.device_gate`), so no forward runs while a candidate is
            timed on the same GPU (timings stay exclusive) and a timing waits at most one step.
        **sampling_defaults: ``temperature`` (1.0), ``top_p`` (1.0), ``top_k`` (0 = off),
            ``max_new_tokens`` (512; ``max_tokens`` is an alias), ``stop_token_ids`` (extra stops).
            Per-call keyword arguments override them.
    """

    def __init__(self, model_or_path: Any, tokenizer: Any = None, *, device: str = "cpu", seed: int = 0,
                 cache_size: int = 4096, max_batch: int = 64, autocast_dtype: torch.dtype | None = None,
                 step_guard: Callable[[], Any] | None = None, **sampling_defaults: Any):
        if isinstance(model_or_path, str):
            from transformers import AutoModelForCausalLM

            from drkernel.local.tiny import load_tokenizer

            model = AutoModelForCausalLM.from_pretrained(model_or_path, local_files_only=True)
            tokenizer = tokenizer or load_tokenizer(model_or_path)
        else:
            model = model_or_path
        if tokenizer is None:
            raise ValueError("HFGenerate needs a tokenizer when given a model object")
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template: HFGenerate renders chat messages with it")
        self._check_sampling(sampling_defaults)
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 512,
                         "stop_token_ids": ()}
        self.sampling.update(self._normalise(sampling_defaults))
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.step_guard = step_guard
        self.stop_ids = self._default_stops(tokenizer)
        self._stop_texts = sorted({tokenizer.convert_ids_to_tokens(i) for i in self.stop_ids}, key=len, reverse=True)
        self._replies: OrderedDict[str, list[int]] = OrderedDict()  # reply text -> sampled ids
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self.max_batch = max_batch
        self.autocast_dtype = autocast_dtype
        self._pending: list[_Request] = []
        self._runner: asyncio.Task | None = None
        self._runner_loop: asyncio.AbstractEventLoop | None = None
        self.busy_seconds = 0.0
        """Wall time spent sampling (for throughput metrics)."""
        self.generated_tokens = 0
        """Tokens sampled so far."""

    # ------------------------------------------------------------------ Generate protocol

    async def __call__(self, messages: list[Message], **sampling: Any) -> Generation:
        """Queue the request; calls that arrive together are sampled as one batch (left-padded,
        one forward per new token for all of them) on a worker thread."""
        self._check_sampling(sampling)
        opts = {**self.sampling, **self._normalise(sampling)}
        loop = asyncio.get_running_loop()
        request = _Request(self.prompt_ids(messages), opts, loop.create_future())
        self._pending.append(request)
        if self._runner is None or self._runner.done() or self._runner_loop is not loop:
            self._runner_loop = loop
            self._runner = loop.create_task(self._serve())
        return await request.future

    async def _serve(self) -> None:
        while self._pending:
            for _ in range(4):  # let the other episodes of this tick reach their generate call
                await asyncio.sleep(0)
            key = self._pending[0].key
            batch = [r for r in self._pending if r.key == key][:self.max_batch]
            taken = {id(r) for r in batch}
            self._pending = [r for r in self._pending if id(r) not in taken]
            try:
                outs = await asyncio.to_thread(self._run_batch, [r.prompt_ids for r in batch], batch[0].opts)
            except BaseException as exc:  # noqa: BLE001 - every waiting episode sees the failure
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            for r, out in zip(batch, outs):
                if not r.future.done():
                    r.future.set_result(out)

    def generate(self, messages: list[Message], **sampling: Any) -> Generation:
        """Blocking form of ``await gen(messages, **sampling)`` (one request, no batching)."""
        self._check_sampling(sampling)
        opts = {**self.sampling, **self._normalise(sampling)}
        return self._run_batch([self.prompt_ids(messages)], opts)[0]

    @torch.no_grad()
    def score(self, messages: list[Message], reply: str, *, temperature: float | None = None) -> Generation:
        """A :class:`Generation` for a *given* reply, as if this model had sampled it: its token ids
        (the tokenised text and the end-of-turn stop token) with their log-probs under the model.
        For off-policy or scripted turns (tests, demonstrations) that still go through training."""
        prompt_ids = self.prompt_ids(messages)
        stop = self.stop_ids[0] if self.stop_ids else None
        for token in END_OF_TURN_TOKENS:  # prefer the chat template's end-of-turn token
            tid = self.tokenizer.get_vocab().get(token)
            if tid is not None:
                stop = tid
                break
        ids = self._encode(reply) + ([stop] if stop is not None else [])
        temp = float(self.sampling["temperature"] if temperature is None else temperature) or 1.0
        with self._lock:
            was_training = self.model.training
            self.model.eval()
            try:
                full = torch.tensor([prompt_ids + ids], dtype=torch.long, device=self.device)
                with self._guard(), self._amp():
                    logits = self.model(input_ids=full).logits[0, len(prompt_ids) - 1:-1].float() / temp
                logp = torch.log_softmax(logits, -1).gather(1, full[0, len(prompt_ids):, None]).squeeze(1)
            finally:
                self.model.train(was_training)
        text = self.tokenizer.decode(ids[:-1] if stop is not None else ids, skip_special_tokens=False)
        self._remember(text, ids)
        return Generation(text=text, token_ids=ids, logprobs=[float(x) for x in logp.cpu()],
                          prompt_token_ids=prompt_ids, finish_reason="stop" if stop is not None else "length",
                          usage={"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids)})

    def _run_batch(self, prompts: list[list[int]], opts: dict[str, Any]) -> list[Generation]:
        t0 = time.perf_counter()
        with self._lock:
            sampled = self._sample(prompts, opts, self.generator)
        outs = []
        for prompt_ids, (ids, logprobs, finish) in zip(prompts, sampled):
            # the text holds every sampled token but a final stop token (special tokens included,
            # so that the text maps back to these ids)
            body = ids[:-1] if finish == "stop" else ids
            text = self.tokenizer.decode(body, skip_special_tokens=False)
            self._remember(text, ids)
            outs.append(Generation(text=text, token_ids=ids, logprobs=logprobs, prompt_token_ids=prompt_ids,
                                   finish_reason=finish,
                                   usage={"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids)}))
            self.generated_tokens += len(ids)
        self.busy_seconds += time.perf_counter() - t0
        return outs

    # ------------------------------------------------------------------ prompt

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """Token ids of the chat-templated prompt, with this backend's own replies spliced in as
        the ids it sampled (see the module docstring)."""
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        ids: list[int] = []
        pos = 0
        for m in messages:
            sampled = self._replies.get(m["content"]) if m.get("role") == "assistant" else None
            if sampled is None or not m["content"]:
                continue
            at = text.find(m["content"], pos)
            if at < 0:  # the template rewrote the reply (e.g. stripped thinking): plain tokenisation
                continue
            ids += self._encode(text[pos:at]) + list(sampled)  # the sampled ids, verbatim
            pos = at + len(m["content"])
            if sampled[-1] in self.stop_ids:
                # the sampled stop token stands for the end-of-turn text the template writes
                for stop_text in self._stop_texts:
                    if text.startswith(stop_text, pos):
                        pos += len(stop_text)
                        break
        ids += self._encode(text[pos:])
        return ids

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def _remember(self, text: str, ids: list[int]) -> None:
        if not text:
            return
        self._replies[text] = list(ids)
        self._replies.move_to_end(text)
        while len(self._replies) > self._cache_size:
            self._replies.popitem(last=False)

    # ------------------------------------------------------------------ sampling

    @torch.no_grad()
    def _sample(self, prompts: list[list[int]], opts: dict[str, Any],
                gen: torch.Generator) -> list[tuple[list[int], list[float], str]]:
        """Sample continuations of left-padded ``prompts`` together; per prompt ``(ids, log-probs,
        finish_reason)``."""
        temperature = float(opts["temperature"])
        stops = set(self.stop_ids) | {int(t) for t in opts["stop_token_ids"]}
        limit = getattr(self.model.config, "max_position_embeddings", None)
        b = len(prompts)
        width = max(len(p) for p in prompts)
        budget = [int(opts["max_new_tokens"]) if limit is None else min(int(opts["max_new_tokens"]), int(limit) - len(p))
                  for p in prompts]
        results: list[tuple[list[int], list[float], str]] = [([], [], "length") for _ in prompts]
        steps = max(budget)
        if steps <= 0:
            return results
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((b, width), pad, dtype=torch.long)
        attn = torch.zeros((b, width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every row's next token sits at the end
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            attn[i, width - len(p):] = 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        done = [n <= 0 for n in budget]
        was_training = self.model.training
        self.model.eval()
        try:
            past = None
            inp, pos = ids, positions
            for step in range(steps):
                with self._guard():  # the step's GPU work, up to its one host copy
                    with self._amp():
                        out = self.model(input_ids=inp, attention_mask=attn, position_ids=pos,
                                         past_key_values=past, use_cache=True)
                    past = out.past_key_values
                    logits = out.logits[:, -1].float()
                    logp = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)
                    if temperature > 0:
                        probs = _truncate(logp.exp(), int(opts["top_k"]), float(opts["top_p"]))
                        tok = torch.multinomial(probs.to(gen.device), 1, generator=gen).squeeze(1).to(self.device)
                    else:
                        tok = logits.argmax(-1)
                    tok_lp = logp.gather(1, tok[:, None]).squeeze(1)
                    # one device-to-host copy per step (ids are exact in float64)
                    step_out = torch.stack([tok.double(), tok_lp.double()], 1).cpu().tolist()
                for i in range(b):
                    if done[i]:
                        continue
                    t, lp = int(step_out[i][0]), step_out[i][1]
                    results[i][0].append(t)
                    results[i][1].append(lp)
                    if t in stops:
                        results[i] = (results[i][0], results[i][1], "stop")
                        done[i] = True
                    elif len(results[i][0]) >= budget[i]:
                        done[i] = True
                if all(done):
                    break
                inp = tok[:, None]
                pos = pos[:, -1:] + 1
                attn = torch.cat([attn, torch.ones((b, 1), dtype=attn.dtype, device=attn.device)], dim=1)
            return results
        finally:
            self.model.train(was_training)

    def _guard(self) -> Any:
        return self.step_guard() if self.step_guard is not None else contextlib.nullcontext()

    def _amp(self) -> Any:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    # ------------------------------------------------------------------ options

    @staticmethod
    def _default_stops(tokenizer: Any) -> tuple[int, ...]:
        stops = set()
        if tokenizer.eos_token_id is not None:
            stops.add(int(tokenizer.eos_token_id))
        vocab = tokenizer.get_vocab()
        for tok in END_OF_TURN_TOKENS:
            if tok in vocab:
                stops.add(int(vocab[tok]))
        return tuple(sorted(stops))

    @staticmethod
    def _check_sampling(sampling: dict[str, Any]) -> None:
        unknown = set(sampling) - _SAMPLING_KEYS
        if unknown:
            raise ValueError(f"unknown sampling option(s) {sorted(unknown)}; known: {sorted(_SAMPLING_KEYS)}")

    @staticmethod
    def _normalise(sampling: dict[str, Any]) -> dict[str, Any]:
        out = dict(sampling)
        if "max_tokens" in out:
            out["max_new_tokens"] = out.pop("max_tokens")
        if "temperature" in out and float(out["temperature"]) < 0:
            raise ValueError(f"temperature must be >= 0, got {out['temperature']}")
        return out


def _truncate(probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Per row of ``probs`` (batch, vocab): zero all but the top-k tokens and the smallest set whose
    mass reaches top_p (then the draw renormalises: ``torch.multinomial`` takes unnormalised weights)."""
    if 0 < top_k < probs.shape[-1]:
        kth = torch.topk(probs, top_k, dim=-1).values[..., -1:]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        before = torch.cumsum(sorted_p, -1) - sorted_p  # mass strictly above each token
        keep_sorted = before < top_p * sorted_p.sum(-1, keepdim=True)
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
    return probs


__all__ = ["HFGenerate", "END_OF_TURN_TOKENS"]
