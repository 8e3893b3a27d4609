"""The kernel environment inside other RL stacks: TRL, OpenRLHF and verifiers.

* :mod:`drkernel.integrations.trl`: ``KernelReward`` (a reward function in TRL's convention, with
  its terms as separate functions) and ``build_dataset`` (a suite as a TRL prompt dataset); extra
  ``trl``.
* :mod:`drkernel.integrations.openrlhf`: ``build_rows`` (a suite as an OpenRLHF prompt dataset
  whose ``label`` the service's remote reward route reads); the route itself is part of the
  grading service (``drkernel serve``: ``POST /v1/openrlhf/reward``); no extra (HTTP only).
* :mod:`drkernel.integrations.verifiers`: ``KernelEnv``, a multi-turn verifiers environment
  (kernel -> feedback -> revised kernel) over the agent's turn pieces; extra ``verifiers``.

Nothing here is imported by ``import drkernel.integrations``; each module imports its framework
lazily, and a missing one raises an ImportError naming ``pip install -e '.[<extra>]'``.
"""
