"""drkernel: multi-turn agentic RL for Triton kernel generation.

Importing this package is cheap: heavy dependencies (triton, verl, vllm, ray, transformers) are
imported lazily by the modules that need them.
"""

__version__ = "0.1.0"
