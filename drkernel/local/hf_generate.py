"""``HFGenerate``: the agent's ``Generate`` backend for a local Hugging Face causal LM.

    gen = HFGenerate(model, tokenizer, device="cpu", max_new_tokens=512, temperature=1.0, seed=0)
    out = await gen([{"role": "user", "content": "..."}])
    out.token_ids, out.logprobs, out.prompt_token_ids, out.finish_reason

* **Prompt.** The chat template renders the messages (``add_generation_prompt=True``) and the
  text is tokenised, except that an assistant message this backend produced itself is spliced in
  as the *token ids it sampled* (token-in/token-out): the prompt of turn t+1 then starts with the
  prompt and reply ids of turn t, so a trainer can lay a whole multi-turn episode out as one
  sequence whose policy tokens are exactly the sampled ones (``drkernel.local.pack``).
* **Batching.** Concurrent calls (the episodes of a step run as asyncio tasks) are decoded
  together by one sampling thread with a KV cache (:class:`drkernel.local.decode.DecodeBatch`):
  the calls that arrive in the same event-loop tick are prefilled together (left padding, per-row
  position ids), and between two decoding steps finished rows leave (their call returns at once,
  so grading starts while the others decode) and newly arrived calls join (continuous batching;
  ``continuous=False``: static batches). Each row has its own budget, stop tokens and sampling
  options.
* **Sampling**, per row: ``p = softmax(logits / temperature)``, optional top-k / top-p truncation,
  then an inverse-CDF draw with a uniform from the request's own random stream, seeded from this
  backend's ``seed``, the prompt ids and how many earlier calls had the same prompt. A call's
  reply does not depend on what it was batched with or on thread timing: batched and one-at-a-time
  calls agree token for token, up to floating-point differences between batch shapes (a draw
  within rounding of a token boundary can flip), so a seeded run repeats exactly with static
  batches and almost always with continuous ones. ``temperature=0`` is greedy. One
  device-to-host copy per step.
* **Log-probs** are ``log softmax(logits / temperature)`` of each sampled token, before top-k /
  top-p truncation (vLLM's default): the quantity the trainer recomputes as ``log pi_old``.
  Greedy decoding reports them at temperature 1.
* **Stop.** The tokenizer's EOS id, the chat template's end-of-turn token when the vocabulary has
  one (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``) and any ``stop_token_ids``; the stop
  token is part of ``token_ids`` (``finish_reason="stop"``) but not of ``text``, which decodes
  every other sampled token (special tokens included, so it maps back to the same ids). Running
  out of ``max_new_tokens`` (or of the model's context) gives ``finish_reason="length"``.

Threads: the model runs only on the sampling thread (started when calls arrive, gone when idle);
:meth:`HFGenerate.score` forwards run there too, between decoding steps. Tokenising and decoding
stay on the calling thread (the event loop), so the tokenizer is not used from two threads.

Counters for throughput metrics (:meth:`HFGenerate.stats`): busy seconds of the sampling thread,
sampled tokens, answered calls, batched forwards (prefills + decoding steps), decoding steps and
rows summed over them (mean rows per step), the most rows held at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import random
import threading
import time
from array import array
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Callable

import torch

from drkernel.agent.types import Generation, Message
from drkernel.local.decode import DecodeBatch, Row, _truncate  # noqa: F401 (_truncate: tests import it here)

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")
"""Chat end-of-turn tokens that stop generation when the vocabulary has them."""

_SAMPLING_KEYS = {"temperature", "top_p", "top_k", "max_new_tokens", "max_tokens", "stop_token_ids"}


@dataclass
class _Job:
    """Work for the sampling thread: a row to decode, or a function to run on the model. Its
    ``future`` is the caller's event loop's (``loop`` set: results are delivered through that loop)
    or a ``concurrent.futures.Future`` (a blocking caller)."""

    future: Any
    row: Row | None = None
    fn: Callable[[], Any] | None = None
    loop: asyncio.AbstractEventLoop | None = None
    cancelled: bool = False
    """The caller stopped waiting: the row is dropped at the next step."""

    def __post_init__(self) -> None:
        if self.row is not None:
            self.row.tag = self

    @classmethod
    def for_caller(cls, **kw: Any) -> "_Job":
        """A job whose result goes to the running event loop, if any, else to a blocking caller."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return cls(concurrent.futures.Future(), **kw)
        return cls(loop.create_future(), loop=loop, **kw)


class HFGenerate:
    """``Generate`` for a local HF causal LM (see the module docstring).

    Args:
        model_or_path: a loaded ``PreTrainedModel``, or a local directory to load one from
            (``local_files_only``: nothing is downloaded).
        tokenizer: a tokenizer with a chat template; None = load it from ``model_or_path``.
        device: where the model runs (``cpu``, ``cuda``, ``cuda:1``); a loaded model is moved there.
        seed: seed of the requests' random streams.
        cache_size: how many of its own replies it remembers (for token-in/token-out splicing).
        max_batch: most rows decoded together; later calls wait for a free row.
        max_prefill_tokens: most (padded) prompt tokens in one prefill forward; more calls joining
            at once are prefilled in several forwards (one call each at least).
        autocast_dtype: run the model's forwards under ``torch.autocast`` with this dtype (the
            trainer's bf16-mixed precision on cuda); None = the weights' own dtype.
        step_guard: a context-manager factory entered around each forward's GPU work. The
            one-machine trainer passes the shared side of the grader's GPU gate
            (:func:`drkernel.env.measure.gate.device_gate`), so no forward runs while a candidate is
            timed on the same GPU (timings stay exclusive) and a timing waits at most one step.
        threads: torch intra-op threads of the sampling thread (CPU); None = torch's setting. On a
            small shared CPU, 1 keeps decoding steps from stalling on a busy core (see the trainer's
            ``generation_threads``).
        static_decode: decoding steps over preallocated KV buffers, replayed as CUDA graphs on a
            GPU (:mod:`drkernel.local.static_decode`; Llama-family models, others fall back to the
            HF forward); None = on a GPU only.
        continuous: rows join and leave the running batch (module docstring). False = static
            batches: a batch starts when the sampling thread is idle, with every call queued then,
            and hands all its replies back when its last row ends. Static batches form the same
            way in every run, so a seeded run repeats bit for bit; continuous ones depend on
            thread timing, and a draw that lands within float rounding of a token boundary can
            come out differently (rare, but over thousands of draws from a flat distribution it
            happens).
        **sampling_defaults: ``temperature`` (1.0), ``top_p`` (1.0), ``top_k`` (0 = off),
            ``max_new_tokens`` (512; ``max_tokens`` is an alias), ``stop_token_ids`` (extra stops).
            Per-call keyword arguments override them.
    """

    def __init__(self, model_or_path: Any, tokenizer: Any = None, *, device: str = "cpu", seed: int = 0,
                 cache_size: int = 4096, max_batch: int = 64, max_prefill_tokens: int = 16384,
                 autocast_dtype: torch.dtype | None = None, step_guard: Callable[[], Any] | None = None,
                 threads: int | None = None, continuous: bool = True, static_decode: bool | None = None,
                 **sampling_defaults: Any):
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
        if max_batch < 1 or max_prefill_tokens < 1:
            raise ValueError(f"max_batch and max_prefill_tokens must be >= 1, got {max_batch}, {max_prefill_tokens}")
        self._check_sampling(sampling_defaults)
        self.model = model.to(device)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 512,
                         "stop_token_ids": ()}
        self.sampling.update(self._normalise(sampling_defaults))
        self.seed = seed
        self.step_guard = step_guard
        self.stop_ids = self._default_stops(tokenizer)
        self._stop_texts = sorted({tokenizer.convert_ids_to_tokens(i) for i in self.stop_ids}, key=len, reverse=True)
        self._replies: OrderedDict[str, list[int]] = OrderedDict()  # reply text -> sampled ids
        self._cache_size = cache_size
        self._seen: OrderedDict[bytes, int] = OrderedDict()  # prompt digest -> calls so far (random streams)
        self.max_batch = max_batch
        self.max_prefill_tokens = max_prefill_tokens
        self.autocast_dtype = autocast_dtype
        self.threads = threads
        self.continuous = continuous
        self.static_decode = static_decode
        self.fast_reason: str | None = None
        """Why decoding steps use the HF forward (None when the static decoder runs them)."""
        self._lock = threading.Lock()  # the model: held by whoever runs a forward
        self._queue_lock = threading.Lock()  # guards _queue and _worker
        self._queue: deque[_Job] = deque()
        self._worker: threading.Thread | None = None
        self._inbox: list[_Job] = []  # this event-loop tick's calls, handed over together
        self._flusher: asyncio.Task | None = None
        self.busy_seconds = 0.0
        """Wall time the sampling thread had work (for throughput metrics)."""
        self.generated_tokens = 0
        """Tokens sampled so far."""
        self.requests = 0
        """Generate calls answered."""
        self.forwards = 0
        """Batched forwards run (prefills and decoding steps): the model calls."""
        self.steps = 0
        """Decoding steps (one token for every row in the batch)."""
        self.row_steps = 0
        """Rows summed over decoding steps (mean batch = row_steps / steps)."""
        self.max_rows = 0
        """Most rows decoded together so far."""

    def stats(self) -> dict[str, float]:
        """The counters above, for throughput metrics (a trainer takes differences)."""
        return {"busy_seconds": self.busy_seconds, "generated_tokens": float(self.generated_tokens),
                "requests": float(self.requests), "forwards": float(self.forwards), "steps": float(self.steps),
                "row_steps": float(self.row_steps), "max_rows": float(self.max_rows)}

    # ------------------------------------------------------------------ Generate protocol

    async def __call__(self, messages: list[Message], **sampling: Any) -> Generation:
        """Queue the request; it is decoded in the running batch (module docstring)."""
        self._check_sampling(sampling)
        opts = {**self.sampling, **self._normalise(sampling)}
        prompt_ids = self.prompt_ids(messages)
        job = _Job.for_caller(row=self._row(prompt_ids, opts))
        self._inbox.append(job)
        if self._flusher is None or self._flusher.done() or self._flusher.get_loop() is not job.loop:
            self._flusher = job.loop.create_task(self._flush())
        try:
            row = await job.future
        except asyncio.CancelledError:
            job.cancelled = True
            raise
        return self._generation(row)

    async def _flush(self) -> None:
        for _ in range(4):  # let the other episodes of this tick reach their generate call
            await asyncio.sleep(0)
        jobs, self._inbox = self._inbox, []
        self._submit(jobs)

    def generate(self, messages: list[Message], **sampling: Any) -> Generation:
        """Blocking form of ``await gen(messages, **sampling)`` (decoded in the running batch, if any)."""
        self._check_sampling(sampling)
        opts = {**self.sampling, **self._normalise(sampling)}
        job = _Job(concurrent.futures.Future(), row=self._row(self.prompt_ids(messages), opts))
        self._submit([job])
        return self._generation(job.future.result())

    def score(self, messages: list[Message], reply: str, *, temperature: float | None = None) -> Generation:
        """A :class:`Generation` for a *given* reply, as if this model had sampled it: its token ids
        (the tokenised text and the end-of-turn stop token) with their log-probs under the model.
        For off-policy or scripted turns (tests, demonstrations) that still go through training.
        The forward runs on the sampling thread between two decoding steps."""
        job = self._score_job(messages, reply, temperature, blocking=True)
        self._submit([job])
        return job.future.result()

    async def ascore(self, messages: list[Message], reply: str, *, temperature: float | None = None) -> Generation:
        """``score`` without blocking the event loop."""
        job = self._score_job(messages, reply, temperature)
        self._submit([job])
        return await job.future

    def _score_job(self, messages: list[Message], reply: str, temperature: float | None,
                   blocking: bool = False) -> _Job:
        prompt_ids = self.prompt_ids(messages)
        stop = self.stop_ids[0] if self.stop_ids else None
        for token in END_OF_TURN_TOKENS:  # prefer the chat template's end-of-turn token
            tid = self.tokenizer.get_vocab().get(token)
            if tid is not None:
                stop = tid
                break
        ids = self._encode(reply) + ([stop] if stop is not None else [])
        temp = float(self.sampling["temperature"] if temperature is None else temperature) or 1.0
        text = self.tokenizer.decode(ids[:-1] if stop is not None else ids, skip_special_tokens=False)
        self._remember(text, ids)

        @torch.no_grad()
        def run() -> Generation:
            full = torch.tensor([prompt_ids + ids], dtype=torch.long, device=self.device)
            with self._eval(), self._guard(), self._amp():
                logits = self.model(input_ids=full).logits[0, len(prompt_ids) - 1:-1].float() / temp
            logp = torch.log_softmax(logits, -1).gather(1, full[0, len(prompt_ids):, None]).squeeze(1)
            return Generation(text=text, token_ids=ids, logprobs=[float(x) for x in logp.cpu()],
                              prompt_token_ids=prompt_ids, finish_reason="stop" if stop is not None else "length",
                              usage={"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids)})

        return _Job(concurrent.futures.Future(), fn=run) if blocking else _Job.for_caller(fn=run)

    def _generation(self, row: Row) -> Generation:
        # the text holds every sampled token but a final stop token (special tokens included, so
        # that the text maps back to these ids)
        ids = row.token_ids
        body = ids[:-1] if row.finish_reason == "stop" else ids
        text = self.tokenizer.decode(body, skip_special_tokens=False)
        self._remember(text, ids)
        return Generation(text=text, token_ids=list(ids), logprobs=list(row.logprobs),
                          prompt_token_ids=row.prompt_ids, finish_reason=row.finish_reason,
                          usage={"prompt_tokens": len(row.prompt_ids), "completion_tokens": len(ids)})

    def _row(self, prompt_ids: list[int], opts: dict[str, Any]) -> Row:
        limit = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        budget = int(opts["max_new_tokens"])
        if limit is not None:
            budget = min(budget, int(limit) - len(prompt_ids))
        return Row(prompt_ids=prompt_ids, max_new_tokens=budget, temperature=float(opts["temperature"]),
                   top_k=int(opts["top_k"]), top_p=float(opts["top_p"]),
                   stop_ids=frozenset(self.stop_ids) | {int(t) for t in opts["stop_token_ids"]},
                   rng=self._stream(prompt_ids))

    def _stream(self, prompt_ids: list[int]) -> random.Random:
        """The request's random stream: seed, prompt and how many calls had this prompt before
        (calls with the same prompt get distinct streams; a repeated seeded run, the same ones)."""
        digest = hashlib.blake2b(array("q", prompt_ids).tobytes(), digest_size=16).digest()
        k = self._seen.pop(digest, 0)
        self._seen[digest] = k + 1
        while len(self._seen) > 16 * self._cache_size:
            self._seen.popitem(last=False)
        key = hashlib.blake2b(f"{self.seed}:{k}:".encode() + digest, digest_size=8).digest()
        return random.Random(int.from_bytes(key, "little"))

    # ------------------------------------------------------------------ the sampling thread

    def _submit(self, jobs: list[_Job]) -> None:
        if not jobs:
            return
        with self._queue_lock:
            self._queue.extend(jobs)
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="HFGenerate", daemon=True)
                self._worker.start()

    def _work(self) -> None:
        """Runs until no row is left and nothing is queued: admit queued calls, run queued
        functions, one decoding step, hand finished rows back; repeat."""
        if self.threads and self.device.type == "cpu":
            torch.set_num_threads(self.threads)  # this thread's intra-op pool
        batch = DecodeBatch(self.model, self.device, autocast_dtype=self.autocast_dtype, guard=self._guard,
                            static=self.static_decode)
        self.fast_reason = batch.fast_reason
        t0 = time.perf_counter()
        base = (self.forwards, self.steps, self.row_steps)
        held: list[Row] = []  # static batches: replies handed back together at the end
        try:
            while True:
                with self._queue_lock:
                    if not self._queue and not batch.rows:
                        self._worker = None
                        return
                    calls, admit = self._take(batch)
                for job in calls:
                    self._deliver(*_run_call(job, self._lock))
                admitted = [job.row for job in admit if not job.cancelled]
                finished: list[Row] = []
                try:
                    with self._lock, torch.no_grad(), self._eval():
                        for chunk in self._prefill_chunks(admitted):
                            finished += batch.add(chunk)
                        batch.drop([r for r in batch.rows if r.tag.cancelled])
                        if batch.rows:
                            finished += batch.step()
                except BaseException as exc:  # noqa: BLE001 - every waiting call sees the failure
                    rows = {id(r): r for r in batch.clear() + admitted + held}.values()
                    self._deliver([r.tag for r in rows], error=exc)
                    held = []
                    if not isinstance(exc, Exception):
                        raise
                self.forwards, self.steps, self.row_steps = (base[0] + batch.forwards, base[1] + batch.steps,
                                                             base[2] + batch.row_steps)
                self.fast_reason = batch.fast_reason  # a static decoder that failed mid-session says so
                self.max_rows = max(self.max_rows, batch.max_rows)
                if not self.continuous:
                    held += finished
                    finished, held = (held, []) if not batch.rows else ([], held)
                self._finish(finished)
        finally:
            self.busy_seconds += time.perf_counter() - t0
            with self._queue_lock:  # stopped by an exception: the next call starts a new thread
                if self._worker is threading.current_thread():
                    self._worker = None

    def _take(self, batch: DecodeBatch) -> tuple[list[_Job], list[_Job]]:
        """Under ``_queue_lock``: the queued functions, and the queued calls that fit the batch (none
        while a static batch runs)."""
        calls = [j for j in self._queue if j.fn is not None]
        free = self.max_batch - len(batch.rows) if self.continuous or not batch.rows else 0
        admit = [j for j in self._queue if j.row is not None][:max(free, 0)]
        taken = {id(j) for j in calls + admit}
        self._queue = deque(j for j in self._queue if id(j) not in taken)
        return calls, admit

    def _prefill_chunks(self, rows: list[Row]) -> list[list[Row]]:
        """``rows`` in prefill forwards of at most ``max_prefill_tokens`` padded tokens (at least
        one row each)."""
        chunks: list[list[Row]] = []
        chunk: list[Row] = []
        width = 0
        for row in rows:
            w = max(width, len(row.prompt_ids))
            if chunk and w * (len(chunk) + 1) > self.max_prefill_tokens:
                chunks.append(chunk)
                chunk, w = [], len(row.prompt_ids)
            chunk.append(row)
            width = w
        return chunks + [chunk] if chunk else chunks

    def _finish(self, rows: list[Row]) -> None:
        for row in rows:
            self.generated_tokens += len(row.token_ids)
            self.requests += 1
        self._deliver([row.tag for row in rows], rows)

    @staticmethod
    def _deliver(jobs: list[_Job], results: list[Any] | None = None, error: BaseException | None = None) -> None:
        """Resolve ``jobs`` with ``results`` (or ``error``). The jobs of one event loop are resolved
        in one callback of that loop, so their callers resume in the same tick and their next
        calls arrive together (static batches rely on it)."""
        by_loop: dict[Any, list[tuple[Any, Any]]] = {}
        for job, result in zip(jobs, results if results is not None else [None] * len(jobs)):
            if job.loop is None:
                if job.future.done():
                    continue
                if error is not None:
                    job.future.set_exception(error)
                else:
                    job.future.set_result(result)
            else:
                by_loop.setdefault(job.loop, []).append((job.future, result))
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_settle, items, error)

    def _guard(self) -> Any:
        return self.step_guard() if self.step_guard is not None else contextlib.nullcontext()

    def _amp(self) -> Any:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    @contextlib.contextmanager
    def _eval(self) -> Any:
        """Eval mode for a forward, restored after (a no-op when the model already is in eval
        mode, as during the trainer's rollout)."""
        was_training = self.model.training
        if was_training:
            self.model.eval()
        try:
            yield
        finally:
            if was_training:
                self.model.train(True)

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


def _run_call(job: _Job, lock: threading.Lock) -> tuple[list[_Job], list[Any] | None, BaseException | None]:
    """Run a queued function; ``(jobs, results, error)`` for :meth:`HFGenerate._deliver`."""
    try:
        with lock:
            return [job], [job.fn()], None
    except Exception as exc:  # the caller sees it
        return [job], None, exc
    except BaseException as exc:  # the caller sees it, then the sampling thread stops
        HFGenerate._deliver([job], error=exc)
        raise


def _settle(items: list[tuple[asyncio.Future, Any]], error: BaseException | None) -> None:
    """On the callers' event loop: resolve their futures (skipping cancelled ones)."""
    for future, result in items:
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


__all__ = ["HFGenerate", "END_OF_TURN_TOKENS"]
