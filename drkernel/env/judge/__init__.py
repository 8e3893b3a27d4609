"""Judge: whether a candidate's output is right, and what the model is told.

The scale-aware comparison (:mod:`.compare`, with its Triton kernels :mod:`.compare_kernels`), the
precision verdict against the float64 oracle (:mod:`.precision`, with :mod:`.precision_kernels`
and :mod:`.precision_triton` on a GPU) and the compact feedback text built from a result
(:mod:`.feedback`). Runs in the grader (the worker only imports :mod:`.compare`'s shape checks).
"""
