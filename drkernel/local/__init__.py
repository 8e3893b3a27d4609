"""``drkernel.local``: the one-process trainer (HF generation, the Grader, the Dr. Kernel step,
the PPO loss, AdamW, optional LoRA) for one GPU, or for CPU with a tiny locally built model.

Modules (import them directly; this package imports nothing heavy):

* :mod:`drkernel.local.hf_generate` -- ``HFGenerate``, the agent's ``Generate`` for a local HF model;
* :mod:`drkernel.local.tiny` -- a tiny random-weight model and a tokenizer trained on local files;
* :mod:`drkernel.local.pack` -- episodes -> one token row per trajectory, log-prob recomputation;
* :mod:`drkernel.local.trainer` -- ``TrainConfig`` and ``Trainer`` (the training loop);
* :mod:`drkernel.local.toy` -- a synthetic multi-turn guessing task (the learning-curve example).

The command line is ``drkernel train`` (:mod:`drkernel.cli.train`; the local trainer is its default backend).
"""
