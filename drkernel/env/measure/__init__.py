"""Measure: how long a candidate takes, and whose work that time is.

In the candidate's process: one calling procedure for every call, checked or timed, for the
candidate and the reference alike (:mod:`.timing`), the launch budget that keeps the GPU busy while
the host launches (:mod:`.budget`), the output captured as a call's window closed
(:mod:`.capture`), the candidate's kernels named and counted (:mod:`.launches`) and the profiler's
records and the CPU's cost model (:mod:`.profiling`). In the grader: who may use a GPU while
evaluations run concurrently (:mod:`.gate`), which timed outputs are spot-checked and which of their
elements come back (:mod:`.spot`), the device records cut into per-call windows and attributed
(:mod:`.attribution`) and the SM clock around a timed region (:mod:`.gpu_clock`).
"""
