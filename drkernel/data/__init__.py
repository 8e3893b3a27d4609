"""Training data from task suites (verl RLHFDataset parquet/JSONL) and suite import from KernelBench.

``drkernel.data.build``: one row per task of a suite (``drkernel data build``).
``drkernel.data.kernelbench``: a local KernelBench checkout -> a suite directory
(``drkernel data import-kernelbench``).
"""
