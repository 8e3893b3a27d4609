"""Process: the candidate's process, from its start to its end.

Seen from the grader: :mod:`.sandbox` (one candidate process, its deadline, memory and output caps,
the warm pool), started by fork from a preloaded template (:mod:`.zygote`, :mod:`.preload`) or by
exec, read and ended through ``/proc`` (:mod:`.procfs`), limited between fork and exec
(:mod:`.proclimits`), its outputs read back through shared memory (:mod:`.staging`,
:mod:`.tensor_io`). Inside it: the worker's entry and request loop (:mod:`.worker`) and its state
and operations (:mod:`.harness`), the candidate's module loaded (:mod:`.loading`), the kernels
compiled ahead in a process of their own (:mod:`.precompile`), the operating system's confinement
(:mod:`.confine`, :mod:`.seccomp`, :mod:`.triton_cache`) and the CPU interpreter brought closer to
a GPU (:mod:`.interpreter`). The top room: what the worker checks and measures comes from
:mod:`drkernel.env.guards` and :mod:`drkernel.env.measure`, which never import it.
"""
