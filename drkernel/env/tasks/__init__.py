"""Tasks: what is graded against, before any candidate is seen.

Loading a KernelBench-format task and drawing its inputs from a seed (:mod:`.task`), suites of tasks
with their grading protocol (:mod:`.suite`), a task made ready for grading with its reference
outputs cached across candidates (:mod:`.prepared`), the float64 oracle those outputs are judged
against (:mod:`.oracle`) and the reference's own timing, measured in a clean worker and cached
(:mod:`.reference_timing`). Runs in the grader; the worker uses :mod:`.task` to draw inputs with
the grader's own code.
"""
