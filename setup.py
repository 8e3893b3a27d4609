"""drkernel: multi-turn agentic RL for Triton kernel generation (TRLOO, MRS, PR, PRS)."""
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent

# The algorithms need torch and numpy only. Torch is not pinned here: GPU users keep the CUDA
# build they already have; CI pins the CPU build through .ci/constraints.txt.
INSTALL_REQUIRES = ["torch>=2.4", "numpy", "pyyaml"]

EXTRAS = {
    # The kernel environment: Triton (CPU interpreter or CUDA).
    "env": ["triton>=3.0"],
    # Suite benchmarks: plots and data files.
    "bench": ["matplotlib", "pyarrow"],
    # Large-scale training on stock verl 0.9.1 (FSDP + vLLM) over Ray. verl[verl-core] brings
    # TransferQueue, Ray, Hydra and the agent-loop servers; vLLM comes from verl's "vllm" extra on
    # the GPU cluster (`pip install "verl[vllm]==0.9.1"`), not from here, so that the CPU test
    # install (tests/verl/run.sh, train-cpu) never pulls CUDA wheels.
    "train": ["verl[verl-core]==0.9.1", "tensorboard", "pyarrow"],
    # What the CPU tests of the verl integration need on top of "train" (tests/verl/run.sh).
    "train-cpu-test": ["verl[verl-core]==0.9.1", "tensorboard", "pyarrow", "tokenizers", "pytest>=8",
                       "pytest-timeout"],
    # The one-process trainer (drkernel train) and HFGenerate: light, no vLLM/Ray/CUDA wheels.
    "local": ["transformers>=4.56", "tokenizers", "peft", "tensorboard", "tqdm", "pyyaml"],
    # Grading across machines: `drkernel serve`, RemoteGrader (HTTP), metrics.
    "serve": ["fastapi>=0.110", "uvicorn>=0.29", "httpx>=0.27", "prometheus-client>=0.20"],
    # RayGrader: a pool of grading actors on a Ray cluster.
    "ray": ["ray>=2.9"],
    # The multi-turn agent and test-time scaling (examples/refine_loop.py): OpenAI-compatible client,
    # progress bar, plots.
    "agent": ["openai>=1.0", "tqdm", "matplotlib"],
    # The kernel reward for TRL's GRPOTrainer (drkernel.integrations.trl, examples/trl_grpo.py).
    "trl": ["trl>=1.16,<2", "datasets", "transformers>=4.56", "tokenizers"],
    # The multi-turn kernel environment for the verifiers library (drkernel.integrations.verifiers):
    # its v1 API (verifiers.v1) as of 0.4. Its chat harness runs with uv (else verifiers pip-installs uv
    # into ~/.local on first use).
    "verifiers": ["verifiers>=0.4,<0.5", "uv"],
    # Test tools.
    "dev": ["pytest>=8", "pytest-timeout"],
}
EXTRAS["all"] = sorted({dep for name, deps in EXTRAS.items() if name != "train-cpu-test" for dep in deps})

setup(
    name="drkernel",
    version="0.1.0",
    description="Multi-turn agentic reinforcement learning for Triton kernel generation",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["drkernel", "drkernel.*"]),
    # The verifiers taskset "drkernel-kernels" (verifiers loads tasksets by top-level module name).
    py_modules=["drkernel_kernels"],
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": ["drkernel=drkernel.cli:main"],
        # `import verl` loads this in every verl process: registers trloo, the agent loop, the trainer.
        "verl.plugins": ["drkernel = drkernel.verl.plugin"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "License :: OSI Approved :: Apache Software License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
