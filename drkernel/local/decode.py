"""Batched decoding with a KV cache: rows join and leave between steps (continuous batching).

    batch = DecodeBatch(model, device="cpu")
    done = batch.add(rows)            # prefill the new rows together, sample their first token
    while batch.rows:
        done += batch.step()          # one forward for every row: one more token each

:class:`~drkernel.local.hf_generate.HFGenerate` drives it from its sampling thread; this module
knows nothing about chat, tokenizers or asyncio.

**Layout.** The rows share one left-padded KV cache of width L: row i's real tokens fill the last
columns, ``attn[i]`` is 1 on them, and its position ids count its own real tokens (so padding
changes nothing a row attends to). Each row also holds one sampled token not yet in the cache
(``next_tok``); a step feeds those in and samples the next ones.

* **Join** (:meth:`DecodeBatch.add`): new rows are prefilled as their own left-padded batch (only
  the last position's logits are computed), their first token is sampled, and their cache is
  merged in: the shorter of the two caches is padded on the left to the other's width.
* **Leave:** a row that samples a stop token or reaches its budget is finished; finished rows are
  dropped from the cache, and the columns that only they used (padding for everyone left) are cut.

**Sampling** (:func:`sample_next`), per row: ``log p = log_softmax(z / T)`` (``T = 0``: greedy,
log-probs at ``T = 1``); optional top-k / top-p truncation; then an inverse-CDF draw with a
uniform from the row's own ``random.Random``. A row's tokens therefore depend on its prompt, its
options and its own random stream only, never on which rows it was batched with (up to floating-
point differences between batch shapes).

The cache is the model's ``DynamicCache`` rebuilt from its per-layer ``(keys, values)`` whenever
rows join or leave; every layer is a full-attention layer (a sliding-window model still masks by
its window), so padding and cutting columns is valid for any decoder-only transformer with a
standard KV cache.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import random
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from drkernel.local.static_decode import StaticDecoder, unsupported


@dataclass
class Row:
    """One sequence being decoded: its prompt, options, random stream and what it sampled so far."""

    prompt_ids: list[int]
    max_new_tokens: int
    """Budget of sampled tokens (already capped by the model's context)."""
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    stop_ids: frozenset[int] = frozenset()
    rng: random.Random = field(default_factory=random.Random)
    """Source of this row's uniforms (one per sampled token; none when greedy)."""
    tag: Any = None
    """The caller's handle (HFGenerate: the request)."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    """None while decoding; ``stop`` or ``length`` when finished."""

    def record(self, tok: int, logprob: float) -> None:
        self.token_ids.append(tok)
        self.logprobs.append(logprob)
        if tok in self.stop_ids:
            self.finish_reason = "stop"
        elif len(self.token_ids) >= self.max_new_tokens:
            self.finish_reason = "length"


class DecodeBatch:
    """The rows decoded together and their shared KV cache (module docstring).

    Args:
        model: an HF causal LM, in eval mode for the duration (the caller's job).
        device: where the model runs.
        autocast_dtype: run forwards under ``torch.autocast`` with this dtype; None = off.
        guard: context-manager factory entered around each forward and its host copy.
        grow_cache: cache layers with spare room, written in place (:func:`_growing_layer`);
            None = on cpu, where copying the cache every step shows; on cuda the copy is cheap.
    """

    def __init__(self, model: Any, device: torch.device | str, *, autocast_dtype: torch.dtype | None = None,
                 guard: Callable[[], Any] | None = None, grow_cache: bool | None = None,
                 static: bool | None = None):
        self.model = model
        self.device = torch.device(device)
        self.autocast_dtype = autocast_dtype
        self.guard = guard
        self.grow = self.device.type == "cpu" if grow_cache is None else grow_cache
        self.fast: StaticDecoder | None = None
        """Decoding steps over preallocated buffers, as CUDA graphs on a GPU
        (:mod:`drkernel.local.static_decode`); None: the HF forward."""
        self.fast_reason: str | None = None
        """Why steps use the HF forward (None when they do not)."""
        self._fast_live = False  # the fast decoder's buffers hold the batch's cache (self._cache is stale)
        if static is None:
            static = self.device.type == "cuda"
        if static:
            self.fast_reason = unsupported(model)
            if self.fast_reason is None:
                self.fast = StaticDecoder(model, self.device, autocast_dtype=autocast_dtype)
        else:
            self.fast_reason = "off"
        self.rows: list[Row] = []
        self.forwards = 0
        """Forwards run (prefills and steps)."""
        self.steps = 0
        """Decoding steps run (forwards of one token per row)."""
        self.row_steps = 0
        """Sum over steps of the rows in the batch (mean batch = row_steps / steps)."""
        self.prefill_rows = 0
        """Rows prefilled (one per request)."""
        self.max_rows = 0
        """Most rows held at once."""
        self._cache: Any = None
        self._attn: torch.Tensor | None = None  # (B, L) long
        self._pos: torch.Tensor | None = None  # (B,) long: next position id of each row
        self._next: torch.Tensor | None = None  # (B,) long: sampled tokens not yet in the cache
        self._kwargs = _forward_kwargs(model)

    # ------------------------------------------------------------------ joining and stepping

    def add(self, rows: list[Row]) -> list[Row]:
        """Prefill ``rows`` (left-padded together), sample their first token, merge them into the
        batch; returns the rows that are already finished (they are not kept)."""
        empty = [r for r in rows if r.max_new_tokens <= 0]  # no room left in the context
        for r in empty:
            r.finish_reason = "length"
        rows = [r for r in rows if r.max_new_tokens > 0]
        if not rows:
            return empty
        self._materialize()
        width = max(len(r.prompt_ids) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):  # left padding: every row's next token sits at the end
            ids[i, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids, dtype=torch.long)
            attn[i, width - len(r.prompt_ids):] = 1
        ids, attn = ids.to(self.device), attn.to(self.device)
        positions = (attn.cumsum(-1) - 1).clamp(min=0)
        cache = _new_cache(grow=self.grow)
        with self._guarded():
            logits = self._forward(ids, attn, positions, cache)
            tok, host = sample_next(logits, rows, self.device)
        self.prefill_rows += len(rows)
        for r, (t, lp) in zip(rows, host):
            r.record(int(t), lp)
        pos = attn.sum(-1)
        if not self.rows:
            self._cache, self._attn, self._pos, self._next = cache, attn, pos, tok
            self.rows = list(rows)
        else:
            self._merge(cache, attn, pos, tok)
            self.rows += rows
        self.max_rows = max(self.max_rows, len(self.rows))
        return empty + self._retire()

    def step(self) -> list[Row]:
        """One forward for every row (its pending token in, the next one sampled); returns the rows
        that finished (they are dropped from the batch)."""
        if not self.rows:
            return []
        b = len(self.rows)
        logits = self._fast_step() if self.fast is not None else None
        if logits is not None:
            with self._guarded():
                tok, host = sample_next(logits, self.rows, self.device)
            attn = None
        else:
            attn = torch.cat([self._attn, torch.ones((b, 1), dtype=self._attn.dtype, device=self.device)], dim=1)
            with self._guarded():
                logits = self._forward(self._next[:, None], attn, self._pos[:, None], self._cache)
                tok, host = sample_next(logits, self.rows, self.device)
        self.steps += 1
        self.row_steps += b
        self._attn, self._pos, self._next = attn, self._pos + 1, tok
        for r, (t, lp) in zip(self.rows, host):
            r.record(int(t), lp)
        return self._retire()

    def drop(self, rows: list[Row]) -> None:
        """Remove ``rows`` unfinished (their caller gave up on them)."""
        gone = {id(r) for r in rows}
        self._keep([i for i, r in enumerate(self.rows) if id(r) not in gone])

    def clear(self) -> list[Row]:
        """Drop every row (after a failed forward); returns them."""
        rows, self.rows = self.rows, []
        self._cache = self._attn = self._pos = self._next = None
        self._fast_live = False
        return rows

    def _fast_step(self) -> torch.Tensor | None:
        """The next logits from the static decoder; None when it fails (a capture this model does
        not allow, say): the batch's cache comes back and steps use the HF forward from now on."""
        try:
            with self._guarded():
                if not self._fast_live:
                    budget = max(r.max_new_tokens - len(r.token_ids) for r in self.rows)
                    self.fast.load(_layers(self._cache), self._attn, budget)
                    self._cache, self._attn, self._fast_live = None, None, True
                logits = self.fast.step(self._next, self._pos)
        except Exception as exc:  # noqa: BLE001 - the HF forward still works
            self._materialize()  # the step's own column is not part of the export: width unchanged
            self.fast.release()
            self.fast, self.fast_reason = None, f"the static decoder failed: {type(exc).__name__}: {exc}"[:300]
            warnings.warn(f"DecodeBatch: {self.fast_reason}; decoding with the HF forward", RuntimeWarning,
                          stacklevel=2)
            return None
        self.forwards += 1
        return logits

    def _materialize(self) -> None:
        """The fast decoder's cache back into ``self._cache``/``self._attn`` (rows join or leave).
        The layers are views of its buffers; every caller copies them before the buffers are
        loaded again (``_keep`` selects rows, ``_merge`` concatenates, the HF forward's cache
        concatenates)."""
        if self._fast_live:
            layers, self._attn = self.fast.export()
            self._cache = _new_cache(layers, grow=self.grow)
            self._fast_live = False

    # ------------------------------------------------------------------ cache bookkeeping

    def _retire(self) -> list[Row]:
        done = [r for r in self.rows if r.finish_reason is not None]
        if done:
            self._keep([i for i, r in enumerate(self.rows) if r.finish_reason is None])
        return done

    def _keep(self, keep: list[int]) -> None:
        if len(keep) == len(self.rows):
            return
        if not keep:
            self.clear()
            return
        self._materialize()
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        attn = self._attn.index_select(0, idx)
        left = int((attn.sum(0) > 0).int().argmax())  # first column some remaining row uses
        self._cache = _rebuild(self._cache, lambda t: t.index_select(0, idx)[:, :, left:], grow=self.grow)
        self._attn = attn[:, left:]
        self._pos = self._pos.index_select(0, idx)
        self._next = self._next.index_select(0, idx)
        self.rows = [self.rows[i] for i in keep]

    def _merge(self, cache: Any, attn: torch.Tensor, pos: torch.Tensor, tok: torch.Tensor) -> None:
        width = max(self._attn.shape[1], attn.shape[1])
        old_pad, new_pad = width - self._attn.shape[1], width - attn.shape[1]
        old_kv, new_kv = _layers(self._cache), _layers(cache)
        merged = [(torch.cat([_pad_left(k0, old_pad), _pad_left(k1, new_pad)], 0),
                   torch.cat([_pad_left(v0, old_pad), _pad_left(v1, new_pad)], 0))
                  for (k0, v0), (k1, v1) in zip(old_kv, new_kv)]
        self._cache = _new_cache(merged, grow=self.grow)
        self._attn = torch.cat([_pad_left(self._attn, old_pad), _pad_left(attn, new_pad)], 0)
        self._pos = torch.cat([self._pos, pos])
        self._next = torch.cat([self._next, tok])

    # ------------------------------------------------------------------ the model

    def _forward(self, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        amp = (torch.autocast(self.device.type, dtype=self.autocast_dtype) if self.autocast_dtype is not None
               else contextlib.nullcontext())
        with amp, _attention_backends(self.device):
            out = self.model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True,
                             **{self._kwargs["cache"]: cache}, **self._kwargs["keep"])
        self.forwards += 1
        return out.logits[:, -1].float()

    def _guarded(self) -> Any:
        return self.guard() if self.guard is not None else contextlib.nullcontext()


def sample_next(logits: torch.Tensor, rows: list[Row], device: torch.device) -> tuple[torch.Tensor, list[list[float]]]:
    """The next token of every row and its log-prob (module docstring).

    Args:
        logits: (B, V) float32, the last position's logits of each row.
        rows: the B rows (temperature, top-k/top-p, random stream).

    Returns:
        ``(tok, host)``: tok (B,) long on ``device``; host the B ``[token, log-prob]`` pairs on
        the host (one device-to-host copy).
    """
    greedy = [r.temperature <= 0 for r in rows]
    if all(greedy):
        tok = logits.argmax(-1)
        logp = torch.log_softmax(logits, -1)  # greedy reports log-probs at T = 1
    else:
        temps = torch.tensor([r.temperature if r.temperature > 0 else 1.0 for r in rows], dtype=logits.dtype,
                             device=device)
        logp = torch.log_softmax(logits / temps[:, None], -1)  # log p = log softmax(z / T)
        probs = logp.exp()
        for (k, p), members in _truncation_groups(rows).items():
            idx = torch.tensor(members, dtype=torch.long, device=device)
            probs[idx] = _truncate(probs[idx], k, p)
        u = torch.tensor([0.0 if g else r.rng.random() for r, g in zip(rows, greedy)], dtype=torch.float64,
                         device=device)
        tok = _inverse_cdf(probs, u)
        if any(greedy):
            tok = torch.where(torch.tensor(greedy, device=device), logits.argmax(-1), tok)
    tok_lp = logp.gather(1, tok[:, None]).squeeze(1)
    # one device-to-host copy per step (token ids are exact in float64)
    host = torch.stack([tok.double(), tok_lp.double()], 1).cpu().tolist()
    return tok, host


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Per row, the first token whose cumulative mass exceeds ``u * total``: ``u`` in [0, 1) and the
    factor below keep the target under the total, so the token found has mass (its cumulative sum
    rose past the target there)."""
    cdf = probs.double().cumsum(-1)
    target = u[:, None] * cdf[:, -1:] * (1.0 - 1e-12)
    return torch.searchsorted(cdf, target, right=True).squeeze(1)


def _truncation_groups(rows: list[Row]) -> dict[tuple[int, float], list[int]]:
    groups: dict[tuple[int, float], list[int]] = {}
    for i, r in enumerate(rows):
        if r.temperature > 0 and (r.top_k > 0 or r.top_p < 1.0):
            groups.setdefault((int(r.top_k), float(r.top_p)), []).append(i)
    return groups


def _truncate(probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Per row of ``probs`` (batch, vocab): zero all but the top-k tokens and the smallest set whose
    mass reaches top_p (the draw renormalises: it reads the cumulative mass)."""
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


# ---------------------------------------------------------------------- transformers glue


def _attention_backends(device: torch.device) -> Any:
    """Scaled-dot-product attention without cuDNN's backend while decoding on a GPU.

    The key length grows by one every step, and cuDNN builds a new execution plan for every new
    shape: on an H100 with bf16 autocast that was ~18 ms of host time per attention call, 80 ms a
    step for the 4-layer tiny model, against 9.6 ms in fp32, which never picks cuDNN
    (tests/benchmarks/diagnostics/decode_step.py). Flash, memory-efficient and math kernels take
    any length."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _forward_kwargs(model: Any) -> dict[str, Any]:
    """The model's name of the cache argument (``cache`` in transformers 5, ``past_key_values``
    before) and its keep-only-the-last-logits argument, if any."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft wraps the model
    params = inspect.signature(base.forward).parameters
    cache = "cache" if "cache" in params else "past_key_values"
    keep = {}
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            keep = {name: 1}
            break
    return {"cache": cache, "keep": keep}


def _new_cache(layers: list[tuple[torch.Tensor, torch.Tensor]] | None = None, *, grow: bool = False) -> Any:
    """A ``DynamicCache`` holding ``layers``; ``grow``: its layers write new states into spare
    capacity (:func:`_growing_layer`) instead of concatenating, where this transformers allows."""
    from transformers import DynamicCache

    cache = DynamicCache()
    cls = _growing_layer() if grow else None
    if cls is not None and getattr(cache, "layer_class_to_replicate", None) is not None and not cache.layers:
        cache.layer_class_to_replicate = cls
    for i, (k, v) in enumerate(layers or []):
        cache.update(k, v, i)
    return cache


@functools.cache
def _growing_layer() -> Any:
    """A ``DynamicLayer`` that keeps its keys and values in buffers with spare room and writes each
    step's states into them: ``DynamicLayer`` concatenates, copying the whole cache every step
    (on a CPU with long prompts, a fifth of a decoding step). None when this transformers has no
    ``DynamicLayer`` (then caches concatenate)."""
    try:
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return None

    class GrowingLayer(DynamicLayer):
        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self._buffers, self._used = None, 0
            n = self._used + key_states.shape[-2]
            if self._buffers is None or n > self._buffers[0].shape[-2]:
                room = n + 256 + n // 4
                shape = (*key_states.shape[:-2], room, key_states.shape[-1])
                buffers = (key_states.new_empty(shape), value_states.new_empty(shape))
                if self._buffers is not None:
                    for new, old in zip(buffers, self._buffers):
                        new[..., :self._used, :] = old[..., :self._used, :]
                self._buffers = buffers
            self._buffers[0][..., self._used:n, :] = key_states
            self._buffers[1][..., self._used:n, :] = value_states
            self._used = n
            self.keys, self.values = self._buffers[0][..., :n, :], self._buffers[1][..., :n, :]
            return self.keys, self.values

    return GrowingLayer


def _layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer ``(keys, values)``, each (B, heads, L, head_dim)."""
    return [(kv[0], kv[1]) for kv in cache]


def _rebuild(cache: Any, fn: Callable[[torch.Tensor], torch.Tensor], *, grow: bool) -> Any:
    return _new_cache([(fn(k), fn(v)) for k, v in _layers(cache)], grow=grow)


def _pad_left(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` with ``n`` zero columns prepended along the sequence axis (-2 for a cache, -1 for a mask)."""
    if n == 0:
        return t
    dim = -2 if t.dim() == 4 else -1
    shape = list(t.shape)
    shape[dim] = n
    return torch.cat([t.new_zeros(shape), t], dim=dim)


__all__ = ["DecodeBatch", "Row", "sample_next"]
