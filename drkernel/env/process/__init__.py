"""Process: the candidate's process, from its start to its end.

Seen from the grader: :mod:`.sandbox` (one candidate process, its deadline, memory and output caps,
the warm pool), started by fork from a preloaded template (:mod:`.zygote`, :mod:`.preload`) or by
exec, read and ended through ``/proc`` (:mod:`.procfs`), limited between fork and exec
(:mod:`.proclimits`), its outputs read back through shared memory (:mod:`.staging`,
:mod:`.tensor_io`). Inside it: the worker that serves the grader's requests (:mod:`.worker`), the
kernels compiled ahead in a process of their own (:mod:`.precompile`), the candidate's module loaded
(:mod:`.loading`), the operating system's confinement (:mod:`.confine`, :mod:`.seccomp`,
:mod:`.triton_cache`), the CPU interpreter brought closer to a GPU (:mod:`.interpreter`) and the
candidate's failures with their stage (:mod:`.faults`). What the worker checks and measures in the
candidate's process lives in :mod:`drkernel.env.guards` and :mod:`drkernel.env.measure`; the
worker calls them.
"""
