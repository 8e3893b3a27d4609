"""Decoding steps over a preallocated KV cache, replayed as CUDA graphs: the GPU fast path of
:class:`~drkernel.local.decode.DecodeBatch`.

A decoding step of a small model is all overhead: the tiny 4-layer model's step ran ~160 kernels
in 5.7-9.6 ms on an H100, almost all of it Python and launch time (1,416 tokens/s at 8 rows,
tests/benchmarks/bench_rollout.py). This module runs the same step with every tensor
at a fixed address, so it can be captured once and replayed as one CUDA graph per step.

**Layout.** Per layer, keys and values live in buffers of ``(R, kv_heads, C, head_dim)``: ``R`` the
batch rounded up to a power of two (rows past the batch are idle), ``C`` the columns the batch can
still grow to (its width now plus the largest budget left, rounded up to 256). A boolean mask
``(R, C)`` marks each row's real columns, exactly as DecodeBatch's left-padded attention mask. A
step writes the new keys and values of every row at column ``w`` (the width so far), sets ``mask[:,
w]``, attends over all ``C`` columns (the mask hides the rest) and returns the last position's
logits. Attending over unused columns costs ``C / w`` times the attention FLOPs, nothing next to
the launch time it saves at this size.

**The model.** The step is written out for the Llama family's decoder layer (Llama, Qwen2, Qwen3,
Mistral without a sliding window): the model's own modules compute the norms, projections
(LoRA-wrapped ones included), rotary tables and MLPs; this module only does what the modelling
code does between them (head split, rotary embedding, cache write, attention, residuals), in the
same order and dtypes, so a step gives the HF forward's logits (tests compare them on the CPU).
:func:`unsupported` says why a model is not taken; DecodeBatch then decodes with the HF forward.

**Graphs.** On a GPU the step is captured per ``(R, C)`` after two warm-up runs on a side stream
(autocast's weight cache off, so each replay casts the current weights: parameter updates between
rollouts are seen). Rows joining or leaving change the cache's contents, not its buffers, unless
``R`` or ``C`` must change; then the buffers are made again and the step captured again.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

FAMILIES = ("llama", "qwen2", "qwen3", "mistral")
"""``config.model_type`` values whose decoder layer this module writes out."""
COLUMN_ROUND = 256


def _base(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model  # peft


def unsupported(model: Any) -> str | None:
    """Why ``model``'s decoding step cannot be written out here (None when it can)."""
    base = _base(model)
    config = getattr(base, "config", None)
    kind = getattr(config, "model_type", None)
    if kind not in FAMILIES:
        return f"model type {kind!r} is not one of {FAMILIES}"
    inner = getattr(base, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if inner is None or not all(hasattr(inner, n) for n in needed) or not hasattr(base, "lm_head"):
        return "the model does not have the Llama family's modules"
    if any(t != "full_attention" for t in (getattr(config, "layer_types", None) or ())):
        return "some layers use sliding-window attention"
    if getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None):
        return "sliding-window attention"
    for layer in inner.layers:
        attn = getattr(layer, "self_attn", None)
        if attn is None or not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling")):
            return "a decoder layer lacks the Llama family's attention projections"
    return None


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class StaticDecoder:
    """The KV buffers of one batch and its captured step (module docstring).

    ``load`` takes the batch's cache (per layer ``(keys, values)`` of ``(B, kv_heads, L, head_dim)``)
    and attention mask ``(B, L)``; ``step(tokens, positions)`` returns the next logits ``(B, V)``
    in float32; ``export`` gives the cache and mask back (views of the buffers) when rows join or
    leave."""

    def __init__(self, model: Any, device: torch.device | str, *, autocast_dtype: torch.dtype | None = None,
                 graphs: bool | None = None):
        reason = unsupported(model)
        if reason is not None:
            raise ValueError(f"StaticDecoder: {reason}")
        self.device = torch.device(device)
        self.base = _base(model)
        self.inner = self.base.model
        self.autocast_dtype = autocast_dtype
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        self.rows = 0
        self.width = 0
        self.captures = 0
        """Graphs captured so far (a new one per buffer shape)."""
        self._key: tuple[int, int, torch.dtype, torch.dtype] | None = None
        self._inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._out: torch.Tensor | None = None
        self._k: list[torch.Tensor] = []
        self._v: list[torch.Tensor] = []
        self._mask: torch.Tensor | None = None
        self._graph: Any = None

    # ------------------------------------------------------------------ state in and out

    def load(self, layers: list[tuple[torch.Tensor, torch.Tensor]], attn: torch.Tensor, budget: int) -> None:
        """Take over a batch's cache; ``budget``: the most steps any row may still run."""
        b, width = attn.shape
        k0, v0 = layers[0]
        rows = 1 << max(0, (b - 1).bit_length())
        need = width + max(1, budget) + 1
        cols = -(-need // COLUMN_ROUND) * COLUMN_ROUND
        key = (rows, cols, k0.dtype, v0.dtype)  # under autocast the modelling code keeps fp32 keys (after
        # the rotary product) and bf16 values: the buffers keep whatever the prefill produced
        old = self._key
        if old is None or (rows, k0.dtype, v0.dtype) != (old[0], old[2], old[3]) or need > old[1]:
            self._allocate(key, kv_heads=k0.shape[1], head_dim=k0.shape[-1], layers=len(layers))
        for (k, v), kb, vb in zip(layers, self._k, self._v):
            kb[:b, :, :width].copy_(k)
            vb[:b, :, :width].copy_(v)
        mask = self._mask
        mask.zero_()
        mask[:b, :width].copy_(attn.bool())
        mask[b:, 0] = True  # idle rows attend to one (zero) column: no all-masked softmax
        self.rows, self.width = b, width

    def export(self) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
        """The cache and mask as DecodeBatch keeps them (views of the buffers, width ``self.width``)."""
        b, w = self.rows, self.width
        layers = [(kb[:b, :, :w], vb[:b, :, :w]) for kb, vb in zip(self._k, self._v)]
        return layers, self._mask[:b, :w].long()

    def release(self) -> None:
        self._key, self._k, self._v, self._mask, self._graph = None, [], [], None, None
        self._inputs = None
        self.rows = self.width = 0

    def _allocate(self, key: tuple[int, int, torch.dtype, torch.dtype], *, kv_heads: int, head_dim: int,
                  layers: int) -> None:
        rows, cols, kdtype, vdtype = key
        self.release()
        shape = (rows, kv_heads, cols, head_dim)
        self._k = [torch.zeros(shape, dtype=kdtype, device=self.device) for _ in range(layers)]
        self._v = [torch.zeros(shape, dtype=vdtype, device=self.device) for _ in range(layers)]
        self._mask = torch.zeros((rows, cols), dtype=torch.bool, device=self.device)
        self._inputs = (torch.zeros(rows, dtype=torch.long, device=self.device),  # tokens
                        torch.zeros(rows, dtype=torch.long, device=self.device),  # positions
                        torch.zeros(1, dtype=torch.long, device=self.device))  # the column written
        self._key = key

    # ------------------------------------------------------------------ the step

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One token for every row: ``tokens``/``positions`` (B,) long on the device; returns the
        next-token logits (B, V) float32 (a fresh tensor)."""
        if self.width >= self._key[1]:
            raise RuntimeError("StaticDecoder: the batch outgrew its columns (budget too small at load)")
        b = self.rows
        ids, pos, col = self._inputs
        ids[:b].copy_(tokens)
        pos[:b].copy_(positions)
        col.fill_(self.width)
        if not self.graphs:
            logits = self._run()
        else:
            if self._graph is None:
                self._capture()
            self._graph.replay()
            logits = self._out
        self.width += 1
        return logits[:b].clone()

    def _capture(self) -> None:
        # Warm-up runs write this step's keys and values at the current column; the replay that
        # follows writes the same ones again.
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._run()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._out = self._run()
        self._graph = graph
        self.captures += 1

    def _amp(self) -> Any:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype, cache_enabled=False)

    def _run(self) -> torch.Tensor:
        from drkernel.local.decode import _attention_backends

        ids, pos, col = self._inputs
        inner, mask = self.inner, self._mask
        rows = ids.shape[0]
        with self._amp(), _attention_backends(self.device):
            h = inner.embed_tokens(ids[:, None])
            cos, sin = inner.rotary_emb(h, pos[:, None])
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
            mask.index_fill_(1, col, True)
            visible = mask[:, None, None, :]
            for layer, kb, vb in zip(inner.layers, self._k, self._v):
                attn = layer.self_attn
                x = layer.input_layernorm(h)
                q = attn.q_proj(x).view(rows, 1, -1, kb.shape[-1])
                k = attn.k_proj(x).view(rows, 1, -1, kb.shape[-1])
                v = attn.v_proj(x).view(rows, 1, -1, kb.shape[-1])
                if hasattr(attn, "q_norm"):  # Qwen3
                    q, k = attn.q_norm(q), attn.k_norm(k)
                q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
                q = q * cos + _rotate_half(q) * sin
                k = k * cos + _rotate_half(k) * sin
                kb.index_copy_(2, col, k.to(kb.dtype))
                vb.index_copy_(2, col, v.to(vb.dtype))
                o = torch.nn.functional.scaled_dot_product_attention(
                    q, kb, vb, attn_mask=visible, scale=attn.scaling, enable_gqa=q.shape[1] != kb.shape[1])
                h = h + attn.o_proj(o.transpose(1, 2).reshape(rows, 1, -1))
                h = h + layer.mlp(layer.post_attention_layernorm(h))
            logits = self.base.lm_head(inner.norm(h))
        return logits[:, -1].float()


__all__ = ["StaticDecoder", "unsupported", "FAMILIES"]
