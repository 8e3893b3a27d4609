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
  optional top-k / top-p truncation, then a draw from this backend's own ``torch.Generator``
  (seeded; no global RNG). ``temperature=0`` is greedy.
* **Log-probs** are ``log softmax(logits / temperature)`` of each sampled token, before top-k /
  top-p truncation (vLLM's default): the quantity the trainer recomputes as ``log pi_old``.
  Greedy decoding reports them at temperature 1.
* **Stop.** The tokenizer's EOS id, the chat template's end-of-turn token when the vocabulary has
  one (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``) and any ``stop_token_ids``; the stop
  token is part of ``token_ids`` (``finish_reason="stop"``). Running out of ``max_new_tokens``
  (or of the model's context) gives ``finish_reason="length"``.

Concurrent calls (episodes of one group run as asyncio tasks) are served one at a time on a worker
thread, so the event loop keeps grading while the model generates.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from typing import Any

import torch

from drkernel.agent.types import Generation, Message

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")
"""Chat end-of-turn tokens that stop generation when the vocabulary has them."""

_SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_new_tokens", "max_tokens", "stop_token_ids", "seed"}


class HFGenerate:
    """``Generate`` for a local HF causal LM (see the module docstring).

    Args:
        model_or_path: a loaded ``PreTrainedModel``, or a local directory to load one from
            (``local_files_only``: nothing is downloaded).
        tokenizer: a tokenizer with a chat template; None = load it from ``model_or_path``.
        device: where the model runs (``cpu``, ``cuda``, ``cuda:1``); a loaded model is moved there.
        seed: seed of this backend's sampling generator.
        cache_size: how many of its own replies it remembers (for token-in/token-out splicing).
        **sampling_defaults: ``temperature`` (1.0), ``top_p`` (1.0), ``top_k`` (0 = off),
            ``max_new_tokens`` (512; ``max_tokens`` is an alias), ``stop_token_ids`` (extra stops).
            Per-call keyword arguments override them.
    """

    def __init__(self, model_or_path: Any, tokenizer: Any = None, *, device: str = "cpu", seed: int = 0,
                 cache_size: int = 4096, **sampling_defaults: Any):
        if isinstance(model_or_path, str):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model = AutoModelForCausalLM.from_pretrained(model_or_path, local_files_only=True)
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_or_path, local_files_only=True)
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
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self.stop_ids = self._default_stops(tokenizer)
        self._replies: OrderedDict[str, list[int]] = OrderedDict()  # reply text -> sampled ids
        self._cache_size = cache_size
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ Generate protocol

    async def __call__(self, messages: list[Message], **sampling: Any) -> Generation:
        return await asyncio.to_thread(self.generate, messages, **sampling)

    def generate(self, messages: list[Message], **sampling: Any) -> Generation:
        """Blocking form of ``await gen(messages, **sampling)``."""
        self._check_sampling(sampling)
        opts = {**self.sampling, **self._normalise(sampling)}
        prompt_ids = self.prompt_ids(messages)
        with self._lock:
            if opts.get("seed") is not None:
                gen = torch.Generator(device="cpu").manual_seed(int(opts["seed"]))
            else:
                gen = self.generator
            ids, logprobs, finish = self._sample(prompt_ids, opts, gen)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        self._remember(text, ids)
        return Generation(text=text, token_ids=ids, logprobs=logprobs, prompt_token_ids=prompt_ids,
                          finish_reason=finish,
                          usage={"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids)})

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
            ids += self._encode(text[pos:at])
            body = sampled
            stop_text_len = 0
            # the sampled ids end with the stop token the template writes after the content
            # (``<|im_end|>``): keep it in the splice and skip its text in the template.
            if body and body[-1] in self.stop_ids:
                stop_text = self.tokenizer.decode([body[-1]], skip_special_tokens=False)
                if text.startswith(stop_text, at + len(m["content"])):
                    stop_text_len = len(stop_text)
                else:
                    body = body[:-1]
            ids += body
            pos = at + len(m["content"]) + stop_text_len
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
    def _sample(self, prompt_ids: list[int], opts: dict[str, Any],
                gen: torch.Generator) -> tuple[list[int], list[float], str]:
        temperature = float(opts["temperature"])
        max_new = int(opts["max_new_tokens"])
        stops = set(self.stop_ids) | {int(t) for t in opts["stop_token_ids"]}
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit is not None:
            max_new = min(max_new, int(limit) - len(prompt_ids))
        if max_new <= 0:
            return [], [], "length"
        was_training = self.model.training
        self.model.eval()
        try:
            inp = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
            past = None
            ids: list[int] = []
            logprobs: list[float] = []
            for _ in range(max_new):
                out = self.model(input_ids=inp, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                scaled = logits / temperature if temperature > 0 else logits
                logp = torch.log_softmax(scaled, dim=-1)
                if temperature > 0:
                    probs = _truncate(logp.exp(), int(opts["top_k"]), float(opts["top_p"]))
                    tok = int(torch.multinomial(probs.cpu(), 1, generator=gen))
                else:
                    tok = int(torch.argmax(logits))
                ids.append(tok)
                logprobs.append(float(logp[tok]))
                if tok in stops:
                    return ids, logprobs, "stop"
                inp = torch.tensor([[tok]], dtype=torch.long, device=self.device)
            return ids, logprobs, "length"
        finally:
            self.model.train(was_training)

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
    """Zero all but the top-k tokens and the smallest set whose mass reaches top_p (then the draw
    renormalises: ``torch.multinomial`` takes unnormalised weights)."""
    if top_k > 0 and top_k < probs.numel():
        kth = torch.topk(probs, top_k).values[-1]
        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        before = torch.cumsum(sorted_p, 0) - sorted_p  # mass strictly above each token
        keep_sorted = before < top_p * sorted_p.sum()
        keep = torch.zeros_like(keep_sorted).scatter(0, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
    return probs


__all__ = ["HFGenerate", "END_OF_TURN_TOKENS"]
